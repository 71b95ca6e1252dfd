// What every `dsync` subcommand shares: settings resolution (file, DSYNC_* variables,
// flags), opening the framework database, stop-signal handling, and what the operator
// commands share (the event store they work through, how they print stored text).
//
// Thread safety: plain functions; BlockStopSignals affects the calling thread and the
// threads it starts afterwards.
#pragma once

#include <signal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/event_store.h"
#include "app/cli.h"
#include "config/settings.h"
#include "storage/connection_pool.h"
#include "storage/db_url.h"

namespace dsync::app {

extern const OptionSpec kJsonOption;  // --json: machine-readable output

// Settings from the config file, then DSYNC_* variables, then the flags (--db,
// --log-level, --service, --capacity, --prefetch, --listen when the command has them).
// Throws UsageError/ConfigError.
Settings ResolveSettings(const Invocation& inv);

// The framework database URL of `s`; UsageError naming the three ways to set it.
storage::DbUrl DatabaseUrl(const Settings& s);

// Connects and checks the schema is exactly what this binary expects. The pool holds
// at least `threads` connections so none of the caller's threads waits for one.
std::unique_ptr<storage::ConnectionPool> OpenDatabase(const Settings& s, int threads = 0);

// "a,b,,c" -> {a, b, c}.
std::vector<std::string> SplitList(const std::string& text);

// Blocks SIGTERM/SIGINT in this thread (and so in every thread started after), to be
// taken synchronously by sigwait/sigtimedwait.
sigset_t BlockStopSignals();
// Waits for one of them: "SIGTERM" or "SIGINT".
const char* WaitForStopSignal(const sigset_t& signals);

// What an operator command works through: its settings, a pool on the framework
// database and the API's event store over it (the same operations the HTTP API serves).
// Logging at --log-level (default warn), role "cli".
struct OperatorStore {
  Settings settings;
  std::unique_ptr<storage::ConnectionPool> pool;
  std::unique_ptr<api::EventStore> store;  // destroyed before the pool it uses
};
OperatorStore OpenOperatorStore(const Invocation& inv);

// A --service option's help: "<what> (default from config, kbs-sync)", the default
// being core/service.h's kDefaultService.
std::string ServiceHelp(const std::string& what);

// Stored text for a table cell: one line, hidden characters escaped (VisibleText), at
// most `width` bytes, cut between UTF-8 sequences with "..." when longer.
std::string Cell(const std::string& s, size_t width);

// The width of a table column whose cells are Cell(value, most): its longest cell, at
// least `least`, plus one space. So a value the database can hold (a 50-character topic
// or schedule name, a long cron expression) is printed whole, the columns after it aligned.
template <class Rows, class Value>
int ColumnWidth(const Rows& rows, Value value, size_t least, size_t most) {
  size_t width = least;
  for (const auto& row : rows) width = std::max(width, Cell(value(row), most).size());
  return static_cast<int>(width) + 1;
}

// --json output: the API's JSON with the characters a terminal acts on escaped
// (JsonForTerminal), indented by 2.
void PrintJson(const nlohmann::json& j);

// Operator commands (app/operator_commands.cc).
int RunProduce(const Invocation& inv);
int RunEvents(const Invocation& inv);
int RunRetry(const Invocation& inv);
int RunDrain(const Invocation& inv);
int RunNodes(const Invocation& inv);
// `dsync events --attention` and `dsync cancel` (app/attention_command.cc).
int RunEventsAttention(const Invocation& inv);
int RunCancel(const Invocation& inv);
// Retention on demand (app/purge_command.cc).
int RunPurge(const Invocation& inv);
// "90s", "15m", "12h", "7d", "500ms" -> milliseconds, at most 36500d (100 years).
// Throws UsageError naming --<name>.
Millis ParseDuration(const std::string& name, const std::string& text);

}  // namespace dsync::app
