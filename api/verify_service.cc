#include "api/verify_service.h"

#include <chrono>
#include <random>
#include <set>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/json_limits.h"
#include "events/columns.h"
#include "core/process.h"
#include "saga/steps/table_steps.h"
#include "table/relay_verify.h"

namespace dsync::api {
namespace {

using nlohmann::json;

// One row of a run.   params: run_id, subject_kind, subject, filter_text, step_name,
// table_name, source_ds, target_ds, is_equal, source_rows, target_rows,
// missing_in_target, extra_in_target, different, chunks, chunks_differing, first_keys,
// duration_ms
constexpr const char* kInsertResultSql = R"(
INSERT INTO dsync_verify_result (run_id, subject_kind, subject, filter_text, step_name, table_name, source_ds,
  target_ds, is_equal, source_rows, target_rows, missing_in_target, extra_in_target, different, chunks,
  chunks_differing, first_keys, duration_ms, finished_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(3)))";

// The newest results, by the primary key: a bounded backward range scan, never the
// whole history (v_verify_latest, for SQL users, ranks every row).   params: limit
constexpr const char* kLatestSql = R"(
SELECT subject_kind, subject, filter_text, COALESCE(step_name, ''), table_name, source_ds, target_ds, is_equal,
       source_rows, target_rows, missing_in_target, extra_in_target, different, chunks, chunks_differing,
       COALESCE(first_keys, ''), TIMESTAMPDIFF(MICROSECOND, finished_at, UTC_TIMESTAMP(3)) / 1000000,
       DATE_FORMAT(finished_at, '%Y-%m-%dT%H:%i:%s.%fZ')
FROM dsync_verify_result ORDER BY id DESC LIMIT ?)";

// Live nodes of a service that reach a datasource (a node that reports no datasources,
// an older version, counts as reaching every one).
constexpr const char* kNodesReachingSql = R"(
SELECT COUNT(*) FROM distribute_node_registry
WHERE status = 1 AND service_name = ?
  AND (JSON_EXTRACT(metadata, '$.datasources') IS NULL
       OR JSON_CONTAINS(JSON_EXTRACT(metadata, '$.datasources'), JSON_QUOTE(?))))";

constexpr size_t kHistoryKeys = 10;
constexpr size_t kFilterTextMax = 2048;

std::string RunId() {
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "verify-%08x%08x", rd(), rd());
  return buf;
}

std::string RequireString(const json& body, const char* key) {
  const json& v = body.at(key);
  if (!v.is_string()) throw UsageError(std::string("'") + key + "' must be a string");
  return v.get<std::string>();
}

}  // namespace

std::string VerifyRequest::filter() const {
  std::string f = topic_mode() ? payload.dump() : where + " " + params.dump();
  if (f.size() > kFilterTextMax) f.resize(kFilterTextMax);
  return f;
}

VerifyRequest ParseVerifyRequest(const json& body) {
  if (!body.is_object()) throw UsageError("the request must be a JSON object");
  static const std::set<std::string> kKeys = {"topic", "payload", "source", "target", "table", "where", "params",
                                              "max_keys"};
  for (const auto& [k, _] : body.items()) {
    if (kKeys.count(k) == 0) {
      throw UsageError("unknown field '" + k.substr(0, 64) +
                       "' (known: topic, payload, source, target, table, where, params, max_keys)");
    }
  }
  VerifyRequest r;
  if (body.contains("topic")) {
    for (const char* k : {"source", "target", "table", "where", "params"}) {
      if (body.contains(k)) throw UsageError(std::string("'") + k + "' goes with one table, not with 'topic'");
    }
    r.topic = RequireString(body, "topic");
    if (r.topic.empty()) throw UsageError("'topic' must not be empty");
    if (body.contains("payload")) r.payload = body["payload"];
    if (!r.payload.is_object()) throw UsageError("'payload' must be a JSON object");
  } else {
    if (body.contains("payload")) throw UsageError("'payload' goes with 'topic'");
    for (const char* k : {"source", "target", "table", "where"}) {
      if (!body.contains(k)) throw UsageError(std::string("missing '") + k + "' (or give 'topic' and 'payload')");
    }
    r.source = RequireString(body, "source");
    r.target = RequireString(body, "target");
    r.table = RequireString(body, "table");
    r.where = RequireString(body, "where");
    if (body.contains("params")) r.params = body["params"];
    if (!r.params.is_object()) throw UsageError("'params' must be a JSON object");
  }
  if (body.contains("max_keys")) {
    const json& m = body["max_keys"];
    if (!m.is_number_integer() || m.get<int64_t>() < 1 || m.get<int64_t>() > 10000) {
      throw UsageError("'max_keys' must be an integer from 1 to 10000");
    }
    r.max_keys = static_cast<size_t>(m.get<int64_t>());
  }
  return r;
}

VerifyRequest ParseApiVerifyRequest(const json& body) {
  if (body.is_object() && !body.contains("topic")) {
    throw UsageError("POST /v1/verify takes {\"topic\", \"payload\"}: it verifies a configured topic's table_sync "
                     "steps; one table by name is for the command line (dsync verify --table)");
  }
  return ParseVerifyRequest(body);
}

bool VerifyReport::equal() const {
  for (const auto& d : diffs) {
    if (!d.equal()) return false;
  }
  return true;
}

json VerifyReport::ToJson(size_t max_keys) const {
  json tables = json::array();
  for (const auto& d : diffs) tables.push_back(d.ToJson(max_keys));
  return {{"equal", equal()}, {"tables", tables}};
}

VerifyService::VerifyService(StoreOptions options, storage::ConnectionPool* history, Clock& clock)
    : options_(std::move(options)), history_(history), datasources_(options_.datasources), clock_(clock) {}

std::vector<table::TableCheck> VerifyService::Checks(const VerifyRequest& r) const {
  std::vector<table::TableCheck> out;
  try {
    if (!r.topic_mode()) {
      out.push_back(table::MakeTableCheck(r.source, r.target, r.table, r.where));
      return out;
    }
    auto it = options_.topics.find(r.topic);
    if (it == options_.topics.end()) {
      std::string known;
      for (const auto& [name, _] : options_.topics) known += (known.empty() ? "" : ", ") + name;
      throw UsageError("unknown topic '" + r.topic.substr(0, 64) + "' (the config has: " +
                       (known.empty() ? "none" : known) + ")");
    }
    for (const StepSpec& spec : it->second.steps) {
      if (spec.type == "table_sync") out.push_back(table::ParseTableCheck(spec, "table_sync"));
    }
    if (out.empty()) throw UsageError("topic '" + r.topic + "' has no table_sync step to verify");
  } catch (const table::VerifyInputError& e) {
    throw UsageError(e.what());
  }
  return out;
}

VerifyReport VerifyService::Run(const VerifyRequest& r, size_t keep_keys) {
  const auto started = clock_.Now();
  VerifyReport report;
  report.checks = Checks(r);
  report.values = r.topic_mode() ? r.payload : r.params;
  table::VerifyOptions options;
  options.keep_keys = keep_keys > 0 ? keep_keys : r.max_keys;
  for (const auto& check : report.checks) {
    try {
      if (AcrossTheGap(check)) {
        report.diffs.push_back(CompareAcrossTheGap(check, report.values, options.keep_keys));
      } else {
        report.diffs.push_back(table::CompareTable(datasources_.Get(check.source), datasources_.Get(check.target),
                                                   check, report.values, options, clock_));
      }
    } catch (const table::VerifyInputError& e) {
      throw UsageError(e.what());
    } catch (const DbError& e) {
      // A where naming a column the table lacks reaches the server only through a
      // subquery's table; unknown databases are a config mistake too.
      if (e.kind() == DbError::Kind::kNoSuchTable || e.code() == 1054) throw UsageError(e.what());
      throw;
    }
  }
  report.duration_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - started).count();
  return report;
}

bool VerifyService::AcrossTheGap(const table::TableCheck& check) const {
  return !datasources_.Has(check.source) && datasources_.Has(check.target);
}

table::TableDiff VerifyService::CompareAcrossTheGap(const table::TableCheck& check, const json& values,
                                                    size_t keep_keys) {
  if (history_ == nullptr) {
    throw UsageError("verify: datasource '" + check.source + "' is not configured here, and verifying across the gap "
                     "needs the framework database (config 'database'), which is not reachable");
  }
  // A source no live node of the service reaches is a name nobody knows (or a side with
  // no node running): say so at once instead of waiting for a source half.
  const int64_t reaching = history_->Run("verify: nodes reaching the source", [&](storage::Connection& c) {
    return c.QueryInt(kNodesReachingSql, options_.service, check.source).value_or(0);
  });
  if (reaching == 0) {
    throw UsageError("unknown datasource '" + check.source.substr(0, 64) + "': this config does not name it, and no "
                     "live node of service '" + options_.service + "' reaches it (dsync nodes)");
  }
  const std::string code = RunId();
  table::StandaloneRunContext ctx(
      code, values, [this](const std::string& name) -> storage::ConnectionPool& { return datasources_.Get(name); },
      clock_);
  table::RelayTable relay(*history_);
  table::RelayedSyncOptions options;
  options.window_bytes = options_.relay.window_bytes;
  options.relay.poll = options_.relay.poll_interval;
  options.node = "verify@" + HostAndPid();
  options.other_half_timeout = options_.relay.verify_wait;
  try {
    return table::RunRelayedVerify(ctx, check, relay, options, keep_keys, [&](int epoch) {
      saga::ProduceRelaySourceHalf(*history_, options_.service, code, epoch,
                                   table::VerifySourcePayload(check, code, epoch, values), check.source);
    });
  } catch (const table::PermanentError& e) {
    throw Error(std::string("verify across the gap: ") + e.what());
  } catch (const table::Interrupted& e) {
    throw Error(std::string("verify across the gap: ") + e.what());
  }
}

bool VerifyService::Record(const VerifyRequest& r, const VerifyReport& report) {
  if (history_ == nullptr) return false;
  try {
    const std::string run_id = RunId();
    history_->Transact("verify: record history", [&](storage::Connection& c) {
      for (const auto& d : report.diffs) {
        json full = d.ToJson(kHistoryKeys);
        json first = {{"missing_in_target", full["missing_in_target"]},
                      {"extra_in_target", full["extra_in_target"]},
                      {"different", full["different"]}};
        c.Execute(kInsertResultSql, run_id, std::string(r.topic_mode() ? "topic" : "table"), r.subject(), r.filter(),
                  d.step.empty() ? std::optional<std::string>() : std::optional<std::string>(d.step), d.table,
                  d.source, d.target, d.equal() ? 1 : 0, static_cast<long long>(d.source_rows),
                  static_cast<long long>(d.target_rows), static_cast<long long>(d.missing_total),
                  static_cast<long long>(d.extra_total), static_cast<long long>(d.different_total),
                  static_cast<long long>(d.chunks), static_cast<long long>(d.chunks_differing), first.dump(),
                  static_cast<long long>(report.duration_ms));
      }
    });
    spdlog::info("VERIFY_RECORDED run={} subject={} equal={} tables={}", run_id, r.subject(), report.equal(),
                 report.diffs.size());
    return true;
  } catch (const Error& e) {
    spdlog::warn("VERIFY_HISTORY_FAILED subject={} err={}", r.subject(), e.what());
    return false;
  }
}

json LatestVerify::ToJson() const {
  json out = {{"subject_kind", subject_kind}, {"subject", subject}, {"filter", filter}, {"table", table_name},
              {"source", source}, {"target", target}, {"equal", equal}, {"source_rows", source_rows},
              {"target_rows", target_rows}, {"missing_in_target_total", missing}, {"extra_in_target_total", extra},
              {"different_total", different}, {"chunks", chunks}, {"chunks_differing", chunks_differing},
              {"first_keys", first_keys}, {"finished_at", finished_at}, {"age_seconds", age_seconds}};
  if (!step.empty()) out["step"] = step;
  return out;
}

std::vector<LatestVerify> ReadLatestVerify(storage::ConnectionPool& pool, int limit) {
  return pool.Run("verify: latest", [&](storage::Connection& c) {
    std::vector<LatestVerify> out;
    std::set<std::string> seen;
    auto rs = c.Query(kLatestSql, kLatestScanRows);
    while (rs->next() && static_cast<int>(out.size()) < limit) {
      events::Columns col(*rs);
      LatestVerify v;
      v.subject_kind = col.String();
      v.subject = col.String();
      v.filter = col.String();
      v.step = col.String();
      v.table_name = col.String();
      v.source = col.String();
      v.target = col.String();
      v.equal = col.Flag();
      v.source_rows = col.Int64();
      v.target_rows = col.Int64();
      v.missing = col.Int64();
      v.extra = col.Int64();
      v.different = col.Int64();
      v.chunks = col.Int64();
      v.chunks_differing = col.Int64();
      v.differences = v.missing + v.extra + v.different;
      StoredJson keys = ParseStoredJson(col.String(), "first_keys");
      v.first_keys = keys.problem == StoredJson::kNone ? std::move(keys.value) : json(nullptr);
      v.age_seconds = col.Double();
      v.finished_at = col.String();
      // The newest row of each (subject, filter, table, target) is its latest result.
      if (!seen.insert(v.subject_kind + '\n' + v.subject + '\n' + v.filter + '\n' + v.table_name + '\n' + v.target)
               .second) {
        continue;
      }
      out.push_back(std::move(v));
    }
    return out;
  });
}

}  // namespace dsync::api
