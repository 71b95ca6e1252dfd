// Verify runs as the operator asks for them (`dsync verify`, POST /v1/verify): which
// tables a request means (every table_sync step of a topic's plan, or one table),
// comparing each (table/verify.h), the --json answer, and the run's
// history in the framework database (V013: dsync_verify_result, v_verify_latest).
//
//   api::VerifyService verify(app::StoreOptionsFrom(settings), &pool, clock);  // pool: history (may be null)
//   api::VerifyRequest r = api::ParseVerifyRequest(body);     // throws UsageError
//   api::VerifyReport report = verify.Run(r);                 // throws UsageError, DbError
//   verify.Record(r, report);                                 // best effort
//   report.ToJson(r.max_keys)  // {"equal", "tables": [...]}
//
// Thread safety: Run and Record may be called from several threads at once (the
// datasource pools are shared and thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/store_options.h"
#include "config/settings.h"
#include "core/clock.h"
#include "saga/step_handler.h"
#include "table/verify.h"
#include "storage/connection_pool.h"

namespace dsync::api {

struct VerifyRequest {
  // Either a topic and its payload ...
  std::string topic;
  nlohmann::json payload = nlohmann::json::object();
  // ... or one table.
  std::string source, target, table, where;
  nlohmann::json params = nlohmann::json::object();
  size_t max_keys = 100;  // keys listed per list (1..10000)
  bool topic_mode() const { return !topic.empty(); }
  // What the history groups by: the topic or table, and the filter.
  std::string subject() const { return topic_mode() ? topic : table; }
  std::string filter() const;
};

// From a request body: {"topic", "payload"} or {"source", "target", "table",
// "where", "params"?}, and "max_keys"?. Unknown fields are rejected. Throws UsageError.
VerifyRequest ParseVerifyRequest(const nlohmann::json& body);

// POST /v1/verify's body: {"topic", "payload"?, "max_keys"?} only. What the API may
// compare is what the config names (a topic's table_sync steps, their tables, columns
// and filters, the payload binding the filters' values as an event's would); one table
// with a free filter (`token LIKE 's3c%'` would read a column a character at a time)
// is for `dsync verify --table` (the operator, with the config and its credentials).
// Throws UsageError.
VerifyRequest ParseApiVerifyRequest(const nlohmann::json& body);

struct VerifyReport {
  std::vector<table::TableCheck> checks;  // what was compared, in plan order
  nlohmann::json values;                 // the filter values (payload or params)
  std::vector<table::TableDiff> diffs;    // one per check
  int64_t duration_ms = 0;
  bool equal() const;
  // {"equal": bool, "tables": [TableDiff::ToJson, ...]}
  nlohmann::json ToJson(size_t max_keys) const;
};

class VerifyService {
 public:
  // `history` is the framework database (null: runs are not recorded). Reads
  // options.topics, .datasources, .relay and .service; `clock` (times the runs and
  // their ranges) must outlive the service.
  VerifyService(StoreOptions options, storage::ConnectionPool* history, Clock& clock);

  // The checks a request means. Throws UsageError (unknown topic, a topic without
  // table_sync steps, a bad table or where).
  std::vector<table::TableCheck> Checks(const VerifyRequest& r) const;

  // Compares every check; keeps `keep_keys` keys per list (the request's max_keys by
  // default). Bad input (unknown datasource, table or column, a value the filter
  // cannot bind) is UsageError; database failures DbError.
  VerifyReport Run(const VerifyRequest& r, size_t keep_keys = 0);

  // One dsync_verify_result row per table. Returns false (and logs) when it could not
  // be written: a verify's answer does not depend on its history.
  bool Record(const VerifyRequest& r, const VerifyReport& report);

  saga::Datasources& datasources() { return datasources_; }

 private:
  // Whether `check` runs across the gap: the config names its target but not its
  // source (table/relay_verify.h: a node of the source side computes that side).
  bool AcrossTheGap(const table::TableCheck& check) const;
  table::TableDiff CompareAcrossTheGap(const table::TableCheck& check, const nlohmann::json& values, size_t keep_keys);

  const StoreOptions options_;
  storage::ConnectionPool* history_;
  saga::Datasources datasources_;
  Clock& clock_;
};

// The latest result per (subject, filter, table, target), as v_verify_latest has it, for
// /metrics, GET /v1/verify and the console's Verify page.
struct LatestVerify {
  std::string subject_kind, subject, filter, step, table_name, source, target;
  bool equal = false;
  int64_t source_rows = 0, target_rows = 0, missing = 0, extra = 0, different = 0, chunks = 0,
          chunks_differing = 0;
  int64_t differences = 0;       // missing + extra + different
  nlohmann::json first_keys;     // {"missing_in_target": [...], "extra_in_target": [...], "different": [...]}
  double age_seconds = 0;
  std::string finished_at;       // "YYYY-MM-DDTHH:MM:SS.ffffffZ"
  nlohmann::json ToJson() const;
};
// Newest first, at most `limit`, from the newest kLatestScanRows rows of the history
// only (an index range, whatever the history's size: /metrics reads it on every
// scrape; retention bounds the history, retention.verify_results_after_ms). A
// subject whose latest run is older than that many rows is not listed. Throws DbError.
inline constexpr int kLatestScanRows = 2000;
std::vector<LatestVerify> ReadLatestVerify(storage::ConnectionPool& pool, int limit = 200);

}  // namespace dsync::api
