// `dsync verify`: compares source and target of a topic's table_sync steps (or of one
// table) chunk by chunk inside both databases, lists the differing keys, and with
// --repair (--topic only) produces one repair event per differing table, naming the
// topic's step and the keys --plan lists, and re-verifies; --plan prints what a sync
// (and so a repair) would write instead (api/verify_service.h,
// table/verify.h). Exit 0 equal, 3 differences, 1 runtime failure, 2 bad
// input (main turns UsageError into 2, other errors into 1).
#include <chrono>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "api/event_store.h"
#include "api/verify_service.h"
#include "core/json_limits.h"
#include "app/command_support.h"
#include "app/options.h"
#include "app/verify_command.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "events/status.h"
#include "table/verify.h"

namespace dsync::app {
namespace {

using nlohmann::json;

constexpr int kExitDifferent = 3;
constexpr const char* kDefaultRepairTopic = "dsync_repair";

json ParseJsonOption(const Invocation& inv, const char* name) {
  auto text = inv.Get(name);
  if (!text) return json::object();
  StoredJson parsed = ParseStoredJson(*text, std::string("--") + name, kMaxInputJsonDepth);  // the input limit
  if (parsed.problem == StoredJson::kTooDeep) throw UsageError(parsed.message);
  if (parsed.problem != StoredJson::kNone) throw UsageError(std::string("--") + name + " is not valid JSON");
  json v = std::move(parsed.value);
  if (!v.is_object()) throw UsageError(std::string("--") + name + " must be a JSON object");
  return v;
}

api::VerifyRequest RequestFromFlags(const Invocation& inv) {
  json body = json::object();
  const bool topic = inv.Get("topic").has_value();
  if (topic) {
    for (const char* k : {"source", "target", "table", "where", "params"}) {
      if (inv.Get(k)) throw UsageError(std::string("--") + k + " goes with one table, not with --topic");
    }
    body["topic"] = *inv.Get("topic");
    body["payload"] = ParseJsonOption(inv, "payload");
  } else {
    if (inv.Get("payload")) throw UsageError("--payload goes with --topic");
    for (const char* k : {"source", "target", "table", "where"}) {
      if (!inv.Get(k)) {
        throw UsageError(std::string("--") + k + " is required (or give --topic and --payload)");
      }
      body[k] = *inv.Get(k);
    }
    body["params"] = ParseJsonOption(inv, "params");
  }
  if (auto m = inv.Get("max-keys")) body["max_keys"] = ParseIntOption("max-keys", *m, 1, 10000);
  return api::ParseVerifyRequest(body);
}

std::string KeyList(const table::TableDiff& d, const std::vector<table::Row>& keys, int64_t total,
                    size_t max) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < max; ++i) out += (i > 0 ? " " : "") + d.KeyJson(keys[i]).dump();
  if (total > static_cast<int64_t>(std::min(keys.size(), max))) out += " ... (" + std::to_string(total) + " in all)";
  return out;
}

void PrintHuman(const api::VerifyReport& report, size_t max_keys) {
  std::cout << std::left << std::setw(32) << "TABLE" << std::setw(16) << "SOURCE->TARGET" << std::right
            << std::setw(12) << "SRC_ROWS" << std::setw(12) << "TGT_ROWS" << std::setw(9) << "MISSING"
            << std::setw(7) << "EXTRA" << std::setw(10) << "DIFFERENT" << std::setw(8) << "CHUNKS" << std::setw(10)
            << "DIFFERING" << "\n";
  for (const auto& d : report.diffs) {
    std::string name = d.step.empty() ? d.table : d.step + ":" + d.table;
    std::cout << std::left << std::setw(32) << name.substr(0, 31) << std::setw(16)
              << (d.source + "->" + d.target).substr(0, 15) << std::right << std::setw(12) << d.source_rows
              << std::setw(12) << d.target_rows << std::setw(9) << d.missing_total << std::setw(7) << d.extra_total
              << std::setw(10) << d.different_total << std::setw(8) << d.chunks << std::setw(10)
              << d.chunks_differing << "\n";
    if (d.missing_total > 0) std::cout << "  missing in target: " << KeyList(d, d.missing, d.missing_total, max_keys) << "\n";
    if (d.extra_total > 0) std::cout << "  extra in target:   " << KeyList(d, d.extra, d.extra_total, max_keys) << "\n";
    if (d.different_total > 0) std::cout << "  different:         " << KeyList(d, d.different, d.different_total, max_keys) << "\n";
  }
  int64_t n = 0;
  for (const auto& d : report.diffs) n += d.missing_total + d.extra_total + d.different_total;
  std::cout << (report.equal() ? "equal" : "DIFFERENT: " + std::to_string(n) + " row(s) differ") << " ("
            << report.duration_ms << " ms)\n";
}

// --plan: what a sync of each table would insert, update and delete: PlanRepair, the
// same answer a repair event's keys come from (Repair below), so --plan predicts
// --repair exactly.
json PlanJson(const api::VerifyReport& report, size_t max_keys) {
  json tables = json::array();
  bool writes = false;
  for (size_t i = 0; i < report.diffs.size(); ++i) {
    const auto& d = report.diffs[i];
    const table::RepairPlan plan = table::PlanRepair(report.checks[i], d);
    auto list = [&](const std::vector<table::Row>& keys) {
      json a = json::array();
      for (size_t k = 0; k < keys.size() && k < max_keys; ++k) a.push_back(d.KeyJson(keys[k]));
      return a;
    };
    json t = {{"table", d.table}, {"source", d.source}, {"target", d.target},
              {"insert", plan.insert_total}, {"update", plan.update_total}, {"delete", plan.remove_total},
              {"insert_keys", list(plan.insert)}, {"update_keys", list(plan.update)},
              {"delete_keys", list(plan.remove)},
              {"unchanged", d.source_rows - d.different_total - d.missing_total}};
    if (plan.keep_total > 0) {
      t["extra_kept"] = plan.keep_total;  // no delete_missing: a sync (and a repair) leaves them
      t["extra_kept_keys"] = list(plan.keep);
    }
    if (!d.step.empty()) t["step"] = d.step;
    writes = writes || plan.writes() > 0;
    tables.push_back(std::move(t));
  }
  return {{"plan", true}, {"writes", writes}, {"tables", tables}};
}

void PrintPlanHuman(const json& plan) {
  std::cout << std::left << std::setw(32) << "TABLE" << std::right << std::setw(10) << "INSERT" << std::setw(10)
            << "UPDATE" << std::setw(10) << "DELETE" << std::setw(12) << "UNCHANGED" << "\n";
  for (const json& t : plan["tables"]) {
    std::string name = t.contains("step") ? t["step"].get<std::string>() + ":" + t["table"].get<std::string>()
                                          : t["table"].get<std::string>();
    std::cout << std::left << std::setw(32) << name.substr(0, 31) << std::right << std::setw(10)
              << t["insert"].get<int64_t>() << std::setw(10) << t["update"].get<int64_t>() << std::setw(10)
              << t["delete"].get<int64_t>() << std::setw(12) << t["unchanged"].get<int64_t>() << "\n";
    for (const char* k : {"insert_keys", "update_keys", "delete_keys", "extra_kept_keys"}) {
      if (t.contains(k) && !t[k].empty()) std::cout << "  " << k << ": " << t[k].dump() << "\n";
    }
  }
  std::cout << (plan["writes"].get<bool>() ? "a sync would write the rows above" : "a sync would write nothing")
            << " (dry run: nothing was written)\n";
}

std::string RepairCode() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "repair-%08x%08x", rd(), rd());
  return buf;
}

// The repair topic must exist in the config with a table_repair step.
void RequireRepairTopic(const Settings& s, const std::string& topic) {
  auto it = s.topics.find(topic);
  bool ok = it != s.topics.end();
  if (ok) {
    ok = false;
    for (const StepSpec& st : it->second.steps) ok = ok || st.type == "table_repair";
  }
  if (!ok) {
    throw UsageError("--repair needs topic '" + topic + "' in the config with a table_repair step, e.g. \"" + topic +
                     "\": {\"steps\": [{\"name\": \"repair\", \"type\": \"table_repair\"}]}");
  }
}

// Produces one repair event per differing table; waits for each unless no_wait.
// Returns false when a repair did not succeed.
// Waits until every repair event is terminal; true when all are SUCCESS.
bool WaitForRepairs(api::EventStore& store, Clock& clock, const std::vector<std::string>& codes,
                    const std::string& topic, std::chrono::milliseconds timeout, bool json_out) {
  const Clock::TimePoint until = clock.Now() + timeout;
  bool ok = true;
  for (const std::string& code : codes) {
    for (;;) {
      api::EventRow ev = store.GetEvent(code);
      if (api::IsTerminal(ev.status)) {
        (json_out ? std::cerr : std::cout) << "repair event " << code << ": " << ev.status
                                           << (ev.last_error.empty() ? "" : " (" + ev.last_error + ")") << "\n";
        ok = ok && ev.status == events::ToText(events::EventStatus::kSuccess);
        break;
      }
      if (clock.Now() > until) {
        throw Error("repair event " + code + " is still " + ev.status + " after " +
                    std::to_string(timeout.count()) + " ms (is a node serving topic '" + topic + "' running?)");
      }
      clock.SleepFor(std::chrono::milliseconds(200), {});
    }
  }
  return ok;
}

// --repair across the gap (docs/relay.md): no node reaches both sides, so no repair
// event can sync a list of keys directly; one event of the verified topic with the
// verified payload re-runs its table_sync steps, relayed, and a relayed sync moves and
// writes only the rows that differ (and deletes extra rows where a step has
// delete_missing), with the same undo.
bool RepairAcrossTheGap(const Settings& s, storage::ConnectionPool& pool, Clock& clock, const api::VerifyRequest& r,
                        bool no_wait, std::chrono::milliseconds timeout, bool json_out) {
  api::EventStore store(pool, StoreOptionsFrom(s));
  api::NewEvent e;
  e.code = RepairCode();
  e.topic = r.topic;
  e.tenant_id = "dsync-verify";
  e.data_id = e.code;
  e.payload = r.payload;
  store.Produce(e);
  spdlog::info("VERIFY_REPAIR_PRODUCED code={} topic={} across_the_gap=true", e.code, r.topic);
  (json_out ? std::cerr : std::cout) << "repair event " << e.code << " of topic " << r.topic
                                     << " (across the gap: its syncs run relayed and move only the rows that "
                                        "differ)\n";
  return no_wait || WaitForRepairs(store, clock, {e.code}, r.topic, timeout, json_out);
}

bool Repair(const Settings& s, storage::ConnectionPool& pool, Clock& clock, const api::VerifyRequest& r,
            const api::VerifyReport& report, const std::string& topic, bool no_wait,
            std::chrono::milliseconds timeout, bool json_out) {
  api::EventStore store(pool, StoreOptionsFrom(s));
  std::vector<std::string> codes;
  for (size_t i = 0; i < report.diffs.size(); ++i) {
    const auto& d = report.diffs[i];
    const table::RepairPlan plan = table::PlanRepair(report.checks[i], d);
    if (plan.keep_total > 0) {
      (json_out ? std::cerr : std::cout) << d.table << ": " << plan.keep_total
                                         << " extra row(s) kept (step '" << d.step
                                         << "' has no delete_missing; --plan lists them)\n";
    }
    if (plan.writes() == 0) continue;
    api::NewEvent e;
    e.code = RepairCode();
    e.topic = topic;
    e.tenant_id = "dsync-verify";
    e.data_id = d.table;
    e.payload = table::RepairPayload(r.topic, report.checks[i], report.values, d);
    store.Produce(e);
    codes.push_back(e.code);
    spdlog::info("VERIFY_REPAIR_PRODUCED code={} topic={} step={} table={} keys={}", e.code, r.topic, d.step,
                 d.table, plan.writes());
    (json_out ? std::cerr : std::cout) << "repair event " << e.code << " for " << d.table << " (" << plan.writes()
                                       << " keys)\n";
  }
  return no_wait || WaitForRepairs(store, clock, codes, topic, timeout, json_out);
}

}  // namespace

CommandSpec VerifyCommandSpec() {
  return {"verify",
          "compare source and target of a topic's table_sync steps (or of one table); exit 0 equal, 3 different",
          "", 0, 0,
          {{"topic", true, "verify every table_sync step of this topic's plan (with --payload)"},
           {"payload", true, "JSON object: the event payload the steps' filters read (default {})"},
           {"source", true, "one table: the source datasource"},
           {"target", true, "one table: the target datasource"},
           {"table", true, "one table: its name"},
           {"where", true, "one table: the filter (table_sync's where grammar, :name placeholders)"},
           {"params", true, "one table: JSON object of the where's :name values"},
           {"bundle", true, "compare the target with a bundle file's manifest (dsync bundle export) alone; "
                            "with --target to name another datasource"},
           {"max-keys", true, "differing keys listed per list (1-10000, default 100)"},
           {"plan", false, "dry run: print what a sync would insert, update and delete; writes nothing"},
           {"repair", false, "with --topic: one repair event per differing table (topic --repair-topic) syncing "
                             "exactly what --plan shows; wait, re-verify"},
           {"repair-topic", true, "topic with a table_repair step (default dsync_repair)"},
           {"no-wait", false, "with --repair: do not wait for the repair events"},
           {"timeout-ms", true, "with --repair: how long to wait for them (default 300000)"},
           kJsonOption}};
}

int RunVerify(const Invocation& inv) {
  if (inv.Flag("plan") && inv.Flag("repair")) throw UsageError("--plan and --repair exclude each other");
  if ((inv.Flag("no-wait") || inv.Get("timeout-ms") || inv.Get("repair-topic")) && !inv.Flag("repair")) {
    throw UsageError("--no-wait, --timeout-ms and --repair-topic go with --repair");
  }
  Settings s = ResolveSettings(inv);
  SetupLogging(inv.Get("log-level").value_or("warn"), "verify");
  SystemClock clock;  // times the compares, paces the wait for repairs
  const api::VerifyRequest r = RequestFromFlags(inv);
  const bool repair = inv.Flag("repair");
  const bool json_out = inv.Flag("json");
  const std::string repair_topic = inv.Get("repair-topic").value_or(kDefaultRepairTopic);
  const auto timeout = std::chrono::milliseconds(
      inv.Get("timeout-ms") ? ParseIntOption("timeout-ms", *inv.Get("timeout-ms"), 1, 86400000) : 300000);
  if (repair && !r.topic_mode()) {
    throw UsageError("--repair needs --topic: a repair event names a configured topic's table_sync step and "
                     "the keys (its source, target, table and filter are the step's); one table named here has "
                     "none (--plan shows what a sync would write)");
  }
  // Across the gap (the config names a table's target but not its source): the sides
  // are compared by a process of each (table/relay_verify.h), and a repair is a relayed
  // re-sync of the topic (RepairAcrossTheGap).
  bool gap = false;
  for (const table::TableCheck& c : api::VerifyService(StoreOptionsFrom(s), nullptr, clock).Checks(r)) {
    gap = gap || (s.datasources.count(c.source) == 0 && s.datasources.count(c.target) > 0);
  }
  if (repair && !gap) RequireRepairTopic(s, repair_topic);

  // The framework database keeps the history; a verify works without it (but a
  // repair needs it).
  std::unique_ptr<storage::ConnectionPool> pool;
  if (!s.database.empty() || repair) {
    try {
      pool = OpenDatabase(s);
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      if (repair) throw;
      spdlog::warn("VERIFY_NO_HISTORY err={}", e.what());
    }
  }
  api::VerifyService service(StoreOptionsFrom(s), pool.get(), clock);
  (void)service.Checks(r);  // bad names fail before anything runs
  api::VerifyReport report = service.Run(r, repair ? static_cast<size_t>(table::kMaxRepairKeys) + 1 : r.max_keys);
  service.Record(r, report);

  if (inv.Flag("plan")) {
    json plan = PlanJson(report, r.max_keys);
    if (json_out) std::cout << plan.dump(2) << "\n";
    else PrintPlanHuman(plan);
    return plan["writes"].get<bool>() ? kExitDifferent : 0;
  }
  if (!repair || report.equal()) {
    if (json_out) std::cout << report.ToJson(r.max_keys).dump(2) << "\n";
    else PrintHuman(report, std::min<size_t>(r.max_keys, 10));
    return report.equal() ? 0 : kExitDifferent;
  }
  if (!json_out) PrintHuman(report, std::min<size_t>(r.max_keys, 10));
  try {
    const bool repaired = gap ? RepairAcrossTheGap(s, *pool, clock, r, inv.Flag("no-wait"), timeout, json_out)
                              : Repair(s, *pool, clock, r, report, repair_topic, inv.Flag("no-wait"), timeout, json_out);
    if (!repaired) {
      throw Error("a repair event did not succeed (it was compensated or failed; see dsync events show CODE)");
    }
  } catch (const table::VerifyInputError& e) {
    throw UsageError(e.what());
  }
  if (inv.Flag("no-wait")) {
    if (json_out) std::cout << report.ToJson(r.max_keys).dump(2) << "\n";
    return kExitDifferent;
  }
  api::VerifyReport again = service.Run(r, r.max_keys);
  service.Record(r, again);
  if (json_out) {
    json out = again.ToJson(r.max_keys);
    out["repaired"] = report.ToJson(r.max_keys)["tables"];
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << "after repair:\n";
    PrintHuman(again, std::min<size_t>(r.max_keys, 10));
  }
  return again.equal() ? 0 : kExitDifferent;
}

}  // namespace dsync::app
