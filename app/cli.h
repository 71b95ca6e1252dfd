// Command-line parsing for the `dsync` binary: `dsync COMMAND [options] [args]`.
//
// Options are `--name value`, `--name=value` or flags (`--json`). Each command
// declares the options it accepts; anything else is a UsageError naming the
// option. Kept free of I/O so it is unit-tested directly.
//
// Thread safety: pure functions over value types.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dsync::app {

struct OptionSpec {
  std::string name;     // without dashes
  bool takes_value = true;
  std::string help;
};

struct CommandSpec {
  std::string name;
  std::string summary;
  std::string args_usage;            // e.g. "ADDRESS"; empty: no positional args
  int min_args = 0, max_args = 0;
  std::vector<OptionSpec> options;   // the common options are added by ParseArgs
};

struct Invocation {
  std::string command;               // "" for `dsync --version` / `dsync --help`
  std::map<std::string, std::string> options;  // flags map to "true"
  std::vector<std::string> args;
  bool help = false;
  bool version = false;

  std::optional<std::string> Get(const std::string& name) const;
  bool Flag(const std::string& name) const { return options.count(name) > 0; }
};

// Options every command takes: --config, --db, --log-level, --help.
const std::vector<OptionSpec>& CommonOptions();

// Throws UsageError ("unknown command 'x'", "unknown option --x for 'node'",
// "--capacity needs a value", ...).
Invocation ParseArgs(const std::vector<std::string>& argv, const std::vector<CommandSpec>& commands);

std::string Usage(const std::vector<CommandSpec>& commands);
std::string CommandHelp(const CommandSpec& command);

// Strict integer parsing for option values: "--capacity must be an integer from 1 to 10000".
int ParseIntOption(const std::string& name, const std::string& value, int lo, int hi);
// HOST:PORT with port 1..65535 ([v6]:port accepted). Throws UsageError naming `name`.
void CheckHostPort(const std::string& name, const std::string& value);

}  // namespace dsync::app
