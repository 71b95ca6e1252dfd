#include "events/rows.h"

#include "events/columns.h"

namespace dsync::events {
namespace {

// Times are read as ISO-8601 UTC text ("2026-11-21T10:00:00.123Z"), NULL as "".
#define DSYNC_ISO(col) "IFNULL(CONCAT(LEFT(DATE_FORMAT(" col ", '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'), '')"

// The event columns every read selects, in the order ReadEventRow reads them.
#define DSYNC_EVENT_COLUMNS                                                                      \
  "id, code, topic, tenant_id, data_id, status, phase, IFNULL(node_address, ''), priority, "     \
  "version, attempt, retry_count, max_retry, progress, IFNULL(batch_code, ''), "                 \
  "IFNULL(trace_id, ''), IFNULL(payload, ''), IFNULL(result, ''), IFNULL(last_error, ''), "      \
  DSYNC_ISO("create_time") ", " DSYNC_ISO("next_run_time") ", " DSYNC_ISO("assigned_time") ", "  \
  DSYNC_ISO("started_time") ", " DSYNC_ISO("finished_time") ", " DSYNC_ISO("modifier_time") ", service, "  \
  "reset_count"

// Params: code.
constexpr const char* kSelectEventByCode =
    "SELECT " DSYNC_EVENT_COLUMNS " FROM distribute_event WHERE code = ?";

// Params: job_code, limit. Plan order: position, then children after their parent.
constexpr const char* kLoadSteps =
    "SELECT id, code, parent_step_id, sort, step_name, step_type, status, IFNULL(node_address, ''), "
    "retry_count, compensation_retry_count, max_retry, attempt, executed_at IS NOT NULL, "
    DSYNC_ISO("started_at") ", " DSYNC_ISO("executed_at") ", " DSYNC_ISO("compensated_at") ", "
    "IFNULL(error_details, ''), IFNULL(output, ''), compensation_data, payload "
    "FROM distribute_event_step WHERE job_code = ? ORDER BY sort, LENGTH(code), code LIMIT ?";

// Params: event_code, limit.
constexpr const char* kSelectTimeline = "SELECT action, step_code, step_name, status, "
    DSYNC_ISO("started_at") ", " DSYNC_ISO("finished_at") ", IFNULL(node_address, ''), "
    "IFNULL(error_details, ''), failures, attempt FROM v_step_history WHERE event_code = ? ORDER BY seq LIMIT ?";

// Params: code.
constexpr const char* kSelectOwner = "SELECT attempt, status, node_address FROM distribute_event WHERE code = ?";

// Params: code.
constexpr const char* kSelectProcessLog = "SELECT process_log FROM distribute_event WHERE code = ?";

// Params: batch_code.
constexpr const char* kBatchProgress =
    "SELECT status, COUNT(*) FROM distribute_event WHERE batch_code = ? GROUP BY status";

// Events needing attention, by the rules of v_events_needing_attention, one reason per
// part so that each reads its own range of idx_due (status first). Params: limit three
// times.
#define DSYNC_ATTENTION_COLUMNS                                                              \
  "code, topic, status, phase, IFNULL(node_address, ''), attempt, retry_count, "             \
  DSYNC_ISO("modifier_time") ", TIMESTAMPDIFF(SECOND, modifier_time, NOW(3)), IFNULL(last_error, '')"
constexpr const char* kNeedingAttention =
    "(SELECT 'failed', " DSYNC_ATTENTION_COLUMNS " FROM distribute_event WHERE status = 'FAILED' "
    "ORDER BY id DESC LIMIT ?) "
    "UNION ALL (SELECT 'stuck', " DSYNC_ATTENTION_COLUMNS " FROM distribute_event "
    "WHERE status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING') AND modifier_time < NOW(3) - INTERVAL 5 MINUTE "
    "ORDER BY id LIMIT ?) "
    "UNION ALL (SELECT 'compensation_retrying', " DSYNC_ATTENTION_COLUMNS " FROM distribute_event e "
    "WHERE e.phase = 'COMPENSATE' AND e.status IN ('PENDING', 'ASSIGNED', 'COMPENSATING') "
    "AND NOT (e.status <> 'PENDING' AND e.modifier_time < NOW(3) - INTERVAL 5 MINUTE) "
    "AND EXISTS (SELECT 1 FROM distribute_event_step s WHERE s.job_code = e.code AND s.status = 'COMPENSATING' "
    "AND s.compensation_retry_count > 0) ORDER BY e.id LIMIT ?)";

constexpr const char* kCountByStatus = "SELECT status, COUNT(*) FROM distribute_event GROUP BY status";

constexpr const char* kCountByTopicStatus =
    "SELECT topic, status, COUNT(*) FROM distribute_event GROUP BY topic, status";

EventRow ReadEventRow(storage::ResultSet& rs) {
  Columns col(rs);  // a braced list reads its initialisers in order: column by column
  return EventRow{.id = col.Int64(), .code = col.String(), .topic = col.String(), .tenant_id = col.String(),
                  .data_id = col.String(), .status = col.String(), .phase = col.String(),
                  .node_address = col.String(), .priority = col.Int(), .version = col.Int(),
                  .attempt = col.Int(), .retry_count = col.Int(), .max_retry = col.Int(),
                  .progress = col.OptionalInt(), .batch_code = col.String(), .trace_id = col.String(),
                  .payload = col.String(), .result = col.String(), .last_error = col.String(),
                  .create_time = col.String(), .next_run_time = col.String(), .assigned_time = col.String(),
                  .started_time = col.String(), .finished_time = col.String(), .modifier_time = col.String(),
                  .service = col.String(), .reset_count = col.Int()};
}

}  // namespace

std::optional<EventRow> ReadEvent(storage::Connection& c, const std::string& code) {
  auto rs = c.Query(kSelectEventByCode, code);
  if (!rs->next()) return std::nullopt;
  return ReadEventRow(*rs);
}

std::vector<EventRow> ListEvents(storage::Connection& c, const EventListFilter& f) {
  // Only fixed fragments go into the text; every value is bound.
  std::string sql = "SELECT " DSYNC_EVENT_COLUMNS " FROM distribute_event WHERE id < ?";
  std::vector<storage::Value> values{f.before};
  const std::pair<const char*, const std::string*> equal[] = {
      {" AND topic = ?", &f.topic}, {" AND status = ?", &f.status},
      {" AND batch_code = ?", &f.batch_code}, {" AND tenant_id = ?", &f.tenant_id}};
  for (const auto& [clause, value] : equal) {
    if (value->empty()) continue;
    sql += clause;
    values.emplace_back(*value);
  }
  if (!f.code_prefix.empty()) {
    std::string pattern;  // LIKE's wildcards and the escape character '!', taken literally
    for (char ch : f.code_prefix) {
      if (ch == '%' || ch == '_' || ch == '!') pattern += '!';
      pattern += ch;
    }
    sql += " AND code LIKE ? ESCAPE '!'";
    values.emplace_back(pattern + "%");
  }
  sql += " ORDER BY id DESC LIMIT ?";
  values.emplace_back(static_cast<int64_t>(f.limit));
  std::vector<EventRow> out;
  auto rs = c.Query(sql, storage::Values(values));
  while (rs->next()) out.push_back(ReadEventRow(*rs));
  return out;
}

std::vector<AttentionEntry> ReadNeedingAttention(storage::Connection& c, int64_t n) {
  std::vector<AttentionEntry> out;
  auto rs = c.Query(kNeedingAttention, n, n, n);
  while (rs->next()) {
    Columns col(*rs);
    out.push_back({.reason = col.String(), .code = col.String(), .topic = col.String(), .status = col.String(),
                   .phase = col.String(), .node_address = col.String(), .attempt = col.Int(),
                   .retry_count = col.Int(), .modifier_time = col.String(), .idle_s = col.Int64(),
                   .last_error = col.String()});
  }
  return out;
}

std::map<std::string, int64_t> CountByStatus(storage::Connection& c) {
  return ReadCounts(*c.Query(kCountByStatus));
}

EventOwner ReadOwner(storage::Connection& c, const std::string& code) {
  auto rs = c.Query(kSelectOwner, code);
  if (!rs->next()) return {};
  Columns col(*rs);
  return {.attempt = col.OptionalInt(), .status = col.OptionalString(), .node_address = col.OptionalString()};
}

std::vector<StepRow> LoadSteps(storage::Connection& c, const std::string& event_code, int64_t limit) {
  std::vector<StepRow> rows;
  auto rs = c.Query(kLoadSteps, event_code, limit);
  while (rs->next()) {
    Columns col(*rs);
    rows.push_back({.id = col.Int64(), .code = col.String(), .parent_step_id = col.OptionalInt64(),
                    .sort = col.Int(), .name = col.String(), .type = col.String(), .status = col.String(),
                    .node_address = col.String(), .retry_count = col.Int(),
                    .compensation_retry_count = col.Int(), .max_retry = col.Int(), .attempt = col.Int(),
                    .executed = col.Flag(), .started_at = col.String(), .executed_at = col.String(),
                    .compensated_at = col.String(), .error_details = col.String(), .output = col.String(),
                    .compensation_data = col.OptionalString(), .payload = col.OptionalString()});
  }
  return rows;
}

std::vector<TimelineEntry> ReadTimeline(storage::Connection& c, const std::string& event_code, int64_t limit) {
  std::vector<TimelineEntry> out;
  auto rs = c.Query(kSelectTimeline, event_code, limit);
  while (rs->next()) {
    Columns col(*rs);
    out.push_back({.action = col.String(), .step_code = col.String(), .step_name = col.String(),
                   .status = col.String(), .started_at = col.String(), .finished_at = col.String(),
                   .node_address = col.String(), .error = col.String(), .failures = col.Int(),
                   .attempt = col.Int()});
  }
  return out;
}

std::optional<std::string> ReadProcessLog(storage::Connection& c, const std::string& code) {
  return c.QueryString(kSelectProcessLog, code);
}

std::map<std::string, int64_t> CountBatchByStatus(storage::Connection& c, const std::string& batch_code) {
  return ReadCounts(*c.Query(kBatchProgress, batch_code));
}

std::vector<std::tuple<std::string, std::string, int64_t>> CountByTopicStatus(storage::Connection& c) {
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  auto rs = c.Query(kCountByTopicStatus);
  while (rs->next()) out.emplace_back(rs->getString(1), rs->getString(2), rs->getInt64(3));
  return out;
}

}  // namespace dsync::events
