#include "app/cli.h"

#include <charconv>
#include <sstream>

#include "core/error.h"

namespace dsync::app {

std::optional<std::string> Invocation::Get(const std::string& name) const {
  auto it = options.find(name);
  if (it == options.end()) return std::nullopt;
  return it->second;
}

const std::vector<OptionSpec>& CommonOptions() {
  static const std::vector<OptionSpec> kCommon = {
      {"config", true, "JSON config file (see config/dsync.example.json)"},
      {"db", true, "framework database URL mysql://user:pass@host:port/schema (or DSYNC_DB_URL)"},
      {"log-level", true, "trace|debug|info|warn|error|off (default info)"},
      {"help", false, "this help"},
  };
  return kCommon;
}

namespace {

const OptionSpec* FindOption(const CommandSpec& cmd, const std::string& name) {
  for (const auto& o : cmd.options) if (o.name == name) return &o;
  for (const auto& o : CommonOptions()) if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

Invocation ParseArgs(const std::vector<std::string>& argv, const std::vector<CommandSpec>& commands) {
  Invocation inv;
  size_t i = 0;
  if (i < argv.size() && (argv[i] == "--version" || argv[i] == "-V")) {
    inv.version = true;
    return inv;
  }
  if (i >= argv.size() || argv[i] == "--help" || argv[i] == "-h" || argv[i] == "help") {
    inv.help = true;
    if (i < argv.size() && argv[i] == "help" && i + 1 < argv.size()) inv.command = argv[i + 1];
    return inv;
  }
  const CommandSpec* cmd = nullptr;
  for (const auto& c : commands) if (c.name == argv[i]) cmd = &c;
  if (cmd == nullptr) {
    throw UsageError("unknown command '" + argv[i] + "' (see dsync --help)");
  }
  inv.command = cmd->name;
  for (++i; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "-h") { inv.help = true; continue; }
    if (a.rfind("--", 0) != 0 || a == "--") {
      inv.args.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const OptionSpec* spec = FindOption(*cmd, name);
    if (spec == nullptr) {
      throw UsageError("unknown option --" + name + " for 'dsync " + cmd->name + "' (see dsync " +
                       cmd->name + " --help)");
    }
    if (spec->takes_value) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw UsageError("--" + name + " needs a value");
        value = argv[++i];
      }
    } else if (inline_value) {
      throw UsageError("--" + name + " takes no value");
    } else {
      value = "true";
    }
    if (name == "help") { inv.help = true; continue; }
    inv.options[name] = value;
  }
  if (!inv.help) {
    int n = static_cast<int>(inv.args.size());
    if (n < cmd->min_args || n > cmd->max_args) {
      throw UsageError(n < cmd->min_args
                           ? "'dsync " + cmd->name + "' needs " + cmd->args_usage
                           : "unexpected argument '" + inv.args[cmd->max_args] + "' for 'dsync " +
                                 cmd->name + "'");
    }
  }
  return inv;
}

std::string Usage(const std::vector<CommandSpec>& commands) {
  std::ostringstream out;
  out << "usage: dsync COMMAND [options]\n\n"
      << "dsync keeps data in sync between isolated environments: durable events in\n"
      << "MySQL/MariaDB, lease-coordinated dispatch to live nodes, multi-step sagas.\n\n"
      << "commands:\n";
  for (const auto& c : commands) {
    std::string head = c.name + (c.args_usage.empty() ? "" : " " + c.args_usage);
    out << "  " << head << std::string(head.size() < 20 ? 20 - head.size() : 1, ' ') << c.summary << "\n";
  }
  out << "\n'dsync COMMAND --help' lists a command's options; 'dsync --version' prints the version.\n";
  return out.str();
}

std::string CommandHelp(const CommandSpec& command) {
  std::ostringstream out;
  out << "usage: dsync " << command.name << " [options]"
      << (command.args_usage.empty() ? "" : " " + command.args_usage) << "\n\n"
      << command.summary << "\n\noptions:\n";
  auto line = [&](const OptionSpec& o) {
    std::string head = "--" + o.name + (o.takes_value ? " VALUE" : "");
    out << "  " << head << std::string(head.size() < 24 ? 24 - head.size() : 1, ' ') << o.help << "\n";
  };
  for (const auto& o : command.options) line(o);
  for (const auto& o : CommonOptions()) line(o);
  return out.str();
}

int ParseIntOption(const std::string& name, const std::string& value, int lo, int hi) {
  int v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || p != value.data() + value.size() || v < lo || v > hi) {
    throw UsageError("--" + name + " must be an integer from " + std::to_string(lo) + " to " +
                     std::to_string(hi) + ", got '" + value + "'");
  }
  return v;
}

void CheckHostPort(const std::string& name, const std::string& value) {
  auto colon = value.rfind(':');
  std::string host = colon == std::string::npos ? "" : value.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  bool host_ok = !host.empty() && host.find_first_of(" \t/@") == std::string::npos;
  if (!host_ok || value.size() > 128) {
    throw UsageError("--" + name + " must be HOST:PORT (at most 128 characters), got '" + value + "'");
  }
  ParseIntOption(name + " port", value.substr(colon + 1), 1, 65535);
}

}  // namespace dsync::app
