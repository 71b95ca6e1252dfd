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

namespace dsync::app {

int RunEventsAttention(const Invocation& inv) {
  for (const char* flag : {"status", "topic", "after", "batch"}) {
    if (inv.Get(flag)) throw UsageError(std::string("--") + flag + " cannot be combined with --attention");
  }
  if (!inv.args.empty()) throw UsageError("--attention takes no argument");
  const int limit = inv.Get("limit") ? ParseIntOption("limit", *inv.Get("limit"), 1, 1000) : 50;
  OperatorStore s = OpenOperatorStore(inv);
  const std::vector<api::AttentionRow> rows = s.store->NeedingAttention(limit);
  if (inv.Flag("json")) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& a : rows) out.push_back(api::ToJson(a));
    PrintJson({{"attention", out}, {"limit_per_reason", limit}});
    return 0;
  }
  std::cout << std::left << std::setw(27) << "REASON" << std::setw(26) << "CODE" << std::setw(14) << "TOPIC"
            << std::setw(13) << "STATUS" << std::setw(22) << "ENTITY" << "WHY\n";
  for (const auto& a : rows) {
    std::string why = a.detail.empty() ? a.last_error : a.detail;
    if (a.reason == "stuck") why = "no activity for " + std::to_string(a.idle_s) + " s on " + a.node_address;
    std::cout << std::left << std::setw(27) << a.reason << std::setw(26) << Cell(a.code, 25) << std::setw(14)
              << Cell(a.topic, 13) << std::setw(13) << a.status << std::setw(22)
              << Cell(a.tenant_id + "/" + a.data_id, 21) << Cell(why, 200) << "\n";
  }
  if (rows.empty()) std::cout << "(nothing needs attention)\n";
  return 0;
}

int RunCancel(const Invocation& inv) {
  OperatorStore s = OpenOperatorStore(inv);
  api::EventRow e = s.store->Cancel(inv.args.at(0), inv.Get("reason").value_or(""));
  if (inv.Flag("json")) {
    PrintJson(api::ToJson(e));
  } else {
    std::cout << "event " << Cell(e.code, 64) << " cancelled: " << e.status << " (version " << e.version
              << ", " << Cell(e.last_error, 200) << "); the events held behind it by the ordering rule no longer wait for it\n";
  }
  return 0;
}

}  // namespace dsync::app
