#include "events/rows.h"

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
  EventRow e;
  e.id = rs.getInt64(1);
  e.code = rs.getString(2);
  e.topic = rs.getString(3);
  e.tenant_id = rs.getString(4);
  e.data_id = rs.getString(5);
  e.status = rs.getString(6);
  e.phase = rs.getString(7);
  e.node_address = rs.getString(8);
  e.priority = rs.getInt(9);
  e.version = rs.getInt(10);
  e.attempt = rs.getInt(11);
  e.retry_count = rs.getInt(12);
  e.max_retry = rs.getInt(13);
  if (!rs.isNull(14)) e.progress = rs.getInt(14);
  e.batch_code = rs.getString(15);
  e.trace_id = rs.getString(16);
  e.payload = rs.getString(17);
  e.result = rs.getString(18);
  e.last_error = rs.getString(19);
  e.create_time = rs.getString(20);
  e.next_run_time = rs.getString(21);
  e.assigned_time = rs.getString(22);
  e.started_time = rs.getString(23);
  e.finished_time = rs.getString(24);
  e.modifier_time = rs.getString(25);
  e.service = rs.getString(26);
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
    AttentionEntry a;
    a.reason = rs->getString(1);
    a.code = rs->getString(2);
    a.topic = rs->getString(3);
    a.status = rs->getString(4);
    a.phase = rs->getString(5);
    a.node_address = rs->getString(6);
    a.attempt = rs->getInt(7);
    a.retry_count = rs->getInt(8);
    a.modifier_time = rs->getString(9);
    a.idle_s = rs->getInt64(10);
    a.last_error = rs->getString(11);
    out.push_back(std::move(a));
  }
  return out;
}

std::map<std::string, int64_t> CountByStatus(storage::Connection& c) {
  std::map<std::string, int64_t> out;
  auto rs = c.Query(kCountByStatus);
  while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
  return out;
}

EventOwner ReadOwner(storage::Connection& c, const std::string& code) {
  EventOwner o;
  auto rs = c.Query(kSelectOwner, code);
  if (!rs->next()) return o;
  if (!rs->isNull(1)) o.attempt = rs->getInt(1);
  if (!rs->isNull(2)) o.status = rs->getString(2);
  if (!rs->isNull(3)) o.node_address = rs->getString(3);
  return o;
}

std::vector<StepRow> LoadSteps(storage::Connection& c, const std::string& event_code, int64_t limit) {
  std::vector<StepRow> rows;
  auto rs = c.Query(kLoadSteps, event_code, limit);
  while (rs->next()) {
    StepRow r;
    r.id = rs->getInt64(1);
    r.code = rs->getString(2);
    if (!rs->isNull(3)) r.parent_step_id = rs->getInt64(3);
    r.sort = rs->getInt(4);
    r.name = rs->getString(5);
    r.type = rs->getString(6);
    r.status = rs->getString(7);
    r.node_address = rs->getString(8);
    r.retry_count = rs->getInt(9);
    r.compensation_retry_count = rs->getInt(10);
    r.max_retry = rs->getInt(11);
    r.attempt = rs->getInt(12);
    r.executed = rs->getInt(13) != 0;
    r.started_at = rs->getString(14);
    r.executed_at = rs->getString(15);
    r.compensated_at = rs->getString(16);
    r.error_details = rs->getString(17);
    r.output = rs->getString(18);
    if (!rs->isNull(19)) r.compensation_data = rs->getString(19);
    if (!rs->isNull(20)) r.payload = rs->getString(20);
    rows.push_back(std::move(r));
  }
  return rows;
}

std::vector<TimelineEntry> ReadTimeline(storage::Connection& c, const std::string& event_code, int64_t limit) {
  std::vector<TimelineEntry> out;
  auto ts = c.Query(kSelectTimeline, event_code, limit);
  while (ts->next()) {
    TimelineEntry t;
    t.action = ts->getString(1);
    t.step_code = ts->getString(2);
    t.step_name = ts->getString(3);
    t.status = ts->getString(4);
    t.started_at = ts->getString(5);
    t.finished_at = ts->getString(6);
    t.node_address = ts->getString(7);
    t.error = ts->getString(8);
    t.failures = ts->getInt(9);
    t.attempt = ts->getInt(10);
    out.push_back(std::move(t));
  }
  return out;
}

std::optional<std::string> ReadProcessLog(storage::Connection& c, const std::string& code) {
  return c.QueryString(kSelectProcessLog, code);
}

std::map<std::string, int64_t> CountBatchByStatus(storage::Connection& c, const std::string& batch_code) {
  std::map<std::string, int64_t> out;
  auto rs = c.Query(kBatchProgress, batch_code);
  while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
  return out;
}

std::vector<std::tuple<std::string, std::string, int64_t>> CountByTopicStatus(storage::Connection& c) {
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  auto rs = c.Query(kCountByTopicStatus);
  while (rs->next()) out.emplace_back(rs->getString(1), rs->getString(2), rs->getInt64(3));
  return out;
}

}  // namespace dsync::events
