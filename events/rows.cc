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
  DSYNC_ISO("started_time") ", " DSYNC_ISO("finished_time") ", " DSYNC_ISO("modifier_time") ", service"

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
  Columns col(rs);
  EventRow e;
  e.id = col.Int64();
  e.code = col.String();
  e.topic = col.String();
  e.tenant_id = col.String();
  e.data_id = col.String();
  e.status = col.String();
  e.phase = col.String();
  e.node_address = col.String();
  e.priority = col.Int();
  e.version = col.Int();
  e.attempt = col.Int();
  e.retry_count = col.Int();
  e.max_retry = col.Int();
  e.progress = col.OptionalInt();
  e.batch_code = col.String();
  e.trace_id = col.String();
  e.payload = col.String();
  e.result = col.String();
  e.last_error = col.String();
  e.create_time = col.String();
  e.next_run_time = col.String();
  e.assigned_time = col.String();
  e.started_time = col.String();
  e.finished_time = col.String();
  e.modifier_time = col.String();
  e.service = col.String();
  return e;
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
    AttentionEntry a;
    a.reason = col.String();
    a.code = col.String();
    a.topic = col.String();
    a.status = col.String();
    a.phase = col.String();
    a.node_address = col.String();
    a.attempt = col.Int();
    a.retry_count = col.Int();
    a.modifier_time = col.String();
    a.idle_s = col.Int64();
    a.last_error = col.String();
    out.push_back(std::move(a));
  }
  return out;
}

std::map<std::string, int64_t> CountByStatus(storage::Connection& c) {
  return ReadCounts(*c.Query(kCountByStatus));
}

EventOwner ReadOwner(storage::Connection& c, const std::string& code) {
  EventOwner o;
  auto rs = c.Query(kSelectOwner, code);
  if (!rs->next()) return o;
  Columns col(*rs);
  o.attempt = col.OptionalInt();
  o.status = col.OptionalString();
  o.node_address = col.OptionalString();
  return o;
}

std::vector<StepRow> LoadSteps(storage::Connection& c, const std::string& event_code, int64_t limit) {
  std::vector<StepRow> rows;
  auto rs = c.Query(kLoadSteps, event_code, limit);
  while (rs->next()) {
    Columns col(*rs);
    StepRow r;
    r.id = col.Int64();
    r.code = col.String();
    r.parent_step_id = col.OptionalInt64();
    r.sort = col.Int();
    r.name = col.String();
    r.type = col.String();
    r.status = col.String();
    r.node_address = col.String();
    r.retry_count = col.Int();
    r.compensation_retry_count = col.Int();
    r.max_retry = col.Int();
    r.attempt = col.Int();
    r.executed = col.Flag();
    r.started_at = col.String();
    r.executed_at = col.String();
    r.compensated_at = col.String();
    r.error_details = col.String();
    r.output = col.String();
    r.compensation_data = col.OptionalString();
    r.payload = col.OptionalString();
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<TimelineEntry> ReadTimeline(storage::Connection& c, const std::string& event_code, int64_t limit) {
  std::vector<TimelineEntry> out;
  auto rs = c.Query(kSelectTimeline, event_code, limit);
  while (rs->next()) {
    Columns col(*rs);
    TimelineEntry t;
    t.action = col.String();
    t.step_code = col.String();
    t.step_name = col.String();
    t.status = col.String();
    t.started_at = col.String();
    t.finished_at = col.String();
    t.node_address = col.String();
    t.error = col.String();
    t.failures = col.Int();
    t.attempt = col.Int();
    out.push_back(std::move(t));
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
