// `dsync events --attention` (every event that cannot make progress or needs a look,
// with why: api::EventStore::NeedingAttention, the rules of v_events_needing_attention)
// and `dsync cancel CODE [--reason TEXT]` (api::EventStore::Cancel). Human tables by
// default, the API's JSON with --json. Stored text is printed with control, bidi and
// zero-width characters escaped (core/visible_text.h), so a code or an error cannot drive
// the terminal.
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "api/event_store.h"
#include "app/command_support.h"
#include "core/error.h"
#include "core/log.h"
#include "core/visible_text.h"

namespace dsync::app {
namespace {

// One line of at most `width` bytes of stored text (before escaping), with every
// hidden character written out visibly (core/visible_text.h).
std::string Shown(const std::string& s, size_t width) {
  return VisibleText(s.size() > width ? s.substr(0, width - 3) + "..." : s);
}

struct Store {
  Settings settings;
  std::unique_ptr<storage::ConnectionPool> pool;
  std::unique_ptr<api::EventStore> store;
};

Store OpenStore(const Invocation& inv) {
  Store s;
  s.settings = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "cli");
  s.pool = OpenDatabase(s.settings);
  s.store = std::make_unique<api::EventStore>(*s.pool, s.settings);
  return s;
}

}  // namespace

int RunEventsAttention(const Invocation& inv) {
  for (const char* flag : {"status", "topic", "after", "batch"}) {
    if (inv.Get(flag)) throw UsageError(std::string("--") + flag + " cannot be combined with --attention");
  }
  if (!inv.args.empty()) throw UsageError("--attention takes no argument");
  const int limit = inv.Get("limit") ? ParseIntOption("limit", *inv.Get("limit"), 1, 1000) : 50;
  Store s = OpenStore(inv);
  const std::vector<api::AttentionRow> rows = s.store->NeedingAttention(limit);
  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& a : rows) out.push_back(api::ToJson(a));
    std::cout << JsonForTerminal(nlohmann::json{{"attention", out}, {"limit_per_reason", limit}}, 2) << "\n";
    return 0;
  }
  std::cout << std::left << std::setw(27) << "REASON" << std::setw(26) << "CODE" << std::setw(14) << "TOPIC"
            << std::setw(13) << "STATUS" << std::setw(22) << "ENTITY" << "WHY\n";
  for (const auto& a : rows) {
    std::string why = a.detail.empty() ? a.last_error : a.detail;
    if (a.reason == "stuck") why = "no activity for " + std::to_string(a.idle_s) + " s on " + a.node_address;
    std::cout << std::left << std::setw(27) << a.reason << std::setw(26) << Shown(a.code, 25) << std::setw(14)
              << Shown(a.topic, 13) << std::setw(13) << a.status << std::setw(22)
              << Shown(a.tenant_id + "/" + a.data_id, 21) << Shown(why, 200) << "\n";
  }
  if (rows.empty()) std::cout << "(nothing needs attention)\n";
  return 0;
}

int RunCancel(const Invocation& inv) {
  Store s = OpenStore(inv);
  api::EventRow e = s.store->Cancel(inv.args.at(0), inv.Get("reason").value_or(""));
  if (inv.Flag("json")) {
    std::cout << JsonForTerminal(api::ToJson(e), 2) << "\n";
  } else {
    std::cout << "event " << Shown(e.code, 64) << " cancelled: " << e.status << " (version " << e.version
              << ", " << Shown(e.last_error, 200) << "); the events held behind it by the ordering rule no longer wait for it\n";
  }
  return 0;
}

}  // namespace dsync::app
