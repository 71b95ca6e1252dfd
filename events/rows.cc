#include "events/rows.h"

#include <algorithm>
#include <set>
#include <string_view>

#include "events/columns.h"
#include "events/status.h"

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
  "reset_count, IFNULL(route, '')"

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

// Events needing attention, by the rules of v_events_needing_attention (V017), one
// statement per reason, each ending in "LIMIT ?" (its only parameter). Every column is
// named, so that a statement also serves as a derived table for CountNeedingAttention.
// The listed event is `e`.
#define DSYNC_ATTENTION_COLUMNS                                                                   \
  "e.code AS code, e.topic AS topic, e.status AS status, e.phase AS phase, "                      \
  "IFNULL(e.node_address, '') AS node_address, e.attempt AS attempt, e.retry_count AS retry_count, " \
  DSYNC_ISO("e.modifier_time") " AS modifier_time, "                                              \
  "TIMESTAMPDIFF(SECOND, e.modifier_time, NOW(3)) AS idle_s, IFNULL(e.last_error, '') AS last_error, "
#define DSYNC_ATTENTION_TAIL                                                                      \
  " AS detail, e.service AS service, e.tenant_id AS tenant_id, e.data_id AS data_id, "            \
  DSYNC_ISO("e.next_run_time") " AS next_run_time"
// No detail and no blocker.
#define DSYNC_ATTENTION_PLAIN DSYNC_ATTENTION_COLUMNS "'' AS blocker_code, ''" DSYNC_ATTENTION_TAIL

// A compensation failed and is retried (listed as compensation_retrying).
#define DSYNC_COMP_RETRYING(x)                                                                    \
  "(" x ".phase = 'COMPENSATE' AND EXISTS (SELECT 1 FROM distribute_event_step s "                \
  "WHERE s.job_code = " x ".code AND s.status = " DSYNC_SQL_STATUS(COMPENSATING) " AND s.compensation_retry_count > 0))"
// The leader recorded the event's topic as unroutable or unknown within the last minute.
#define DSYNC_UNROUTABLE(x)                                                                       \
  "EXISTS (SELECT 1 FROM distribute_unroutable_topic u WHERE u.service_name = " x ".service "     \
  "AND u.topic = " x ".topic AND u.updated_time >= NOW(3) - INTERVAL 60 SECOND)"
// The event's topic is paused (V022 dsync_topic_pause; issue 37).
#define DSYNC_PAUSED(x)                                                                           \
  "EXISTS (SELECT 1 FROM dsync_topic_pause tp WHERE tp.service = " x ".service AND tp.topic = " x ".topic)"
// Why a paused topic's event waits (the view's detail).
#define DSYNC_PAUSE_DETAIL                                                                        \
  "CONCAT('topic ', tp.topic, ' paused by ', tp.paused_by, ' at ', "                              \
  "DATE_FORMAT(tp.paused_at, '%Y-%m-%d %H:%i:%s'), ' UTC', IF(tp.reason = '', '', CONCAT(': ', tp.reason)))"
// A dispatcher of the event's service holds its lease, or held it in the last 15 s (a
// lock name over 64 bytes is hashed: not judged).
#define DSYNC_HAS_DISPATCHER(x)                                                                   \
  "(LENGTH(CONCAT('dispatcher:', " x ".service)) > 64 OR EXISTS (SELECT 1 FROM distribute_lease_lock l " \
  "WHERE l.lock_name = CONCAT('dispatcher:', " x ".service) AND l.expires_at >= NOW(3) - INTERVAL 15 SECOND))"
// The ordering rule holds the event (its topic is not recorded unordered).
#define DSYNC_ORDERED(x)                                                                          \
  "NOT EXISTS (SELECT 1 FROM distribute_unordered_topic o WHERE o.service_name = " x ".service "  \
  "AND o.topic = " x ".topic)"
// An earlier event of x's entity blocks it: PENDING and delayed or of a recorded
// topic, or in flight and idle 5 minutes.
#define DSYNC_EARLIER_BLOCKER(x)                                                                  \
  "(EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = " x ".tenant_id AND p.data_id = " x ".data_id " \
  "AND p.status = " DSYNC_SQL_STATUS(PENDING) " AND p.id < " x ".id AND p.service = " x ".service "                   \
  "AND (p.next_run_time > NOW(3) OR " DSYNC_UNROUTABLE("p") " OR " DSYNC_PAUSED("p") ")) "         \
  "OR EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = " x ".tenant_id AND p.data_id = " x ".data_id " \
  "AND p.status IN " DSYNC_SQL_IN_FLIGHT " AND p.id < " x ".id AND p.service = " x ".service " \
  "AND p.modifier_time < NOW(3) - INTERVAL 5 MINUTE))"

constexpr const char* kAttentionFailed =
    "SELECT 'failed' AS reason, " DSYNC_ATTENTION_PLAIN " FROM distribute_event e WHERE e.status = " DSYNC_SQL_STATUS(FAILED) " "
    "ORDER BY e.id DESC LIMIT ?";
constexpr const char* kAttentionStuck =
    "SELECT 'stuck' AS reason, " DSYNC_ATTENTION_PLAIN " FROM distribute_event e "
    "WHERE e.status IN " DSYNC_SQL_IN_FLIGHT " AND e.modifier_time < NOW(3) - INTERVAL 5 MINUTE "
    "ORDER BY e.id LIMIT ?";
constexpr const char* kAttentionCompensationRetrying =
    "SELECT 'compensation_retrying' AS reason, " DSYNC_ATTENTION_PLAIN " FROM distribute_event e "
    "WHERE e.status IN (" DSYNC_SQL_STATUS(PENDING) ", " DSYNC_SQL_STATUS(ASSIGNED) ", " DSYNC_SQL_STATUS(COMPENSATING) ") "
    "AND NOT (e.status <> " DSYNC_SQL_STATUS(PENDING) " AND e.modifier_time < NOW(3) - INTERVAL 5 MINUTE) "
    "AND " DSYNC_COMP_RETRYING("e") " ORDER BY e.id LIMIT ?";
// From the leader's records (a few rows) to their PENDING events. Params: kind, limit.
#define DSYNC_ATTENTION_RECORDED(kind)                                                            \
  "SELECT u.kind AS reason, " DSYNC_ATTENTION_COLUMNS "'' AS blocker_code, u.reason" DSYNC_ATTENTION_TAIL \
  " FROM distribute_unroutable_topic u STRAIGHT_JOIN distribute_event e FORCE INDEX (idx_due) "   \
  "ON e.status = " DSYNC_SQL_STATUS(PENDING) " AND e.topic = u.topic AND e.service = u.service_name "                 \
  "WHERE u.kind = '" kind "' AND u.updated_time >= NOW(3) - INTERVAL 60 SECOND "                  \
  "AND NOT " DSYNC_COMP_RETRYING("e") " AND NOT " DSYNC_PAUSED("e") " ORDER BY e.id LIMIT ?"
// The PENDING events of paused topics, from the pause rows (a few) through idx_due.
constexpr const char* kAttentionPaused =
    "SELECT 'paused' AS reason, " DSYNC_ATTENTION_COLUMNS "'' AS blocker_code, " DSYNC_PAUSE_DETAIL
    DSYNC_ATTENTION_TAIL " FROM dsync_topic_pause tp STRAIGHT_JOIN distribute_event e FORCE INDEX (idx_due) "
    "ON e.status = " DSYNC_SQL_STATUS(PENDING) " AND e.topic = tp.topic AND e.service = tp.service "
    "WHERE NOT " DSYNC_COMP_RETRYING("e") " ORDER BY e.id LIMIT ?";
constexpr const char* kAttentionUnknownTopic = DSYNC_ATTENTION_RECORDED("unknown_topic");
constexpr const char* kAttentionUnroutable = DSYNC_ATTENTION_RECORDED("unroutable");
// Services that may hold events without a dispatcher: those of the registry, of the
// lease rows, and the column default of distribute_event.service (what a plain INSERT
// gets; bound, as ReadDefaultService reads it: information_schema's text has another
// character set); each without a live lease is read by its own range of idx_due.
// Events of a service named nowhere else are left to the view, which reads every
// PENDING row. Params: the column default, limit.
constexpr const char* kAttentionNoDispatcher =
    "SELECT 'no_dispatcher_for_service' AS reason, " DSYNC_ATTENTION_COLUMNS "'' AS blocker_code, "
    "CONCAT('no live dispatcher of service ', e.service, ' holds its lease (dispatcher:', e.service, ')')"
    DSYNC_ATTENTION_TAIL " FROM (SELECT DISTINCT c.service FROM ("
    "SELECT service_name AS service FROM distribute_node_registry "
    "UNION SELECT SUBSTRING(lock_name, 12) FROM distribute_lease_lock WHERE lock_name LIKE 'dispatcher:%' "
    "UNION SELECT ?) c "
    "WHERE NOT " DSYNC_HAS_DISPATCHER("c") ") s "
    "STRAIGHT_JOIN distribute_event e FORCE INDEX (idx_due) ON e.status = " DSYNC_SQL_STATUS(PENDING) " AND e.service = s.service "
    "WHERE NOT " DSYNC_UNROUTABLE("e") " AND NOT " DSYNC_COMP_RETRYING("e") " AND NOT " DSYNC_PAUSED("e")
    " LIMIT ?";  // in idx_due order
// Held events, found from their blockers (at most 1,000 of each kind): PENDING events
// due later (idx_due, next_run_time checked in the index), PENDING events of recorded
// topics (from the records), and stuck in-flight ones; then each blocker's later
// PENDING events (idx_entity_status). Ordered by held event, then blocker: the first
// row of an event names its earliest blocker.
#define DSYNC_BLOCKER_WHY_PENDING                                                                 \
  "IFNULL((SELECT CONCAT('paused: topic ', tp.topic, ' paused by ', tp.paused_by) FROM dsync_topic_pause tp " \
  "WHERE tp.service = p.service AND tp.topic = p.topic), "                                        \
  "IFNULL((SELECT CONCAT(u.kind, ': ', u.reason) FROM distribute_unroutable_topic u WHERE u.service_name = p.service " \
  "AND u.topic = p.topic AND u.updated_time >= NOW(3) - INTERVAL 60 SECOND), "                    \
  "CONCAT('delayed: due at ', DATE_FORMAT(p.next_run_time, '%Y-%m-%d %H:%i:%s'), ' UTC')))"
constexpr const char* kAttentionHeldBehind =
    "SELECT 'held_behind' AS reason, " DSYNC_ATTENTION_COLUMNS "b.code AS blocker_code, "
    "CONCAT('held behind ', b.code, ' (', b.why, ')')" DSYNC_ATTENTION_TAIL " FROM ("
    "(SELECT p.id, p.code, p.tenant_id, p.data_id, p.service, " DSYNC_BLOCKER_WHY_PENDING " AS why "
    "FROM distribute_event p FORCE INDEX (idx_due) WHERE p.status = " DSYNC_SQL_STATUS(PENDING) " AND p.next_run_time > NOW(3) "
    "ORDER BY p.priority, p.id LIMIT 1000) "
    "UNION (SELECT p.id, p.code, p.tenant_id, p.data_id, p.service, " DSYNC_BLOCKER_WHY_PENDING " AS why "
    "FROM distribute_unroutable_topic u STRAIGHT_JOIN distribute_event p FORCE INDEX (idx_due) "
    "ON p.status = " DSYNC_SQL_STATUS(PENDING) " AND p.topic = u.topic AND p.service = u.service_name "
    "WHERE u.updated_time >= NOW(3) - INTERVAL 60 SECOND ORDER BY p.id LIMIT 1000) "
    "UNION (SELECT p.id, p.code, p.tenant_id, p.data_id, p.service, " DSYNC_BLOCKER_WHY_PENDING " AS why "
    "FROM dsync_topic_pause tq STRAIGHT_JOIN distribute_event p FORCE INDEX (idx_due) "
    "ON p.status = " DSYNC_SQL_STATUS(PENDING) " AND p.topic = tq.topic AND p.service = tq.service ORDER BY p.id LIMIT 1000) "
    "UNION ALL (SELECT p.id, p.code, p.tenant_id, p.data_id, p.service, CONCAT('stuck: ', p.status, ' on ', "
    "IFNULL(p.node_address, '-'), ', no activity since ', DATE_FORMAT(p.modifier_time, '%Y-%m-%d %H:%i:%s')) AS why "
    "FROM distribute_event p WHERE p.status IN " DSYNC_SQL_IN_FLIGHT " "
    "AND p.modifier_time < NOW(3) - INTERVAL 5 MINUTE ORDER BY p.id LIMIT 1000)) b "
    "STRAIGHT_JOIN distribute_event e FORCE INDEX (idx_entity_status) ON e.tenant_id = b.tenant_id "
    "AND e.data_id = b.data_id AND e.status = " DSYNC_SQL_STATUS(PENDING) " AND e.id > b.id AND e.service = b.service "
    "WHERE " DSYNC_ORDERED("e") " AND NOT " DSYNC_UNROUTABLE("e") " AND " DSYNC_HAS_DISPATCHER("e")
    " AND NOT " DSYNC_COMP_RETRYING("e") " AND NOT " DSYNC_PAUSED("e") " ORDER BY e.id, b.id LIMIT ?";
constexpr const char* kAttentionDelayed =
    "SELECT 'delayed' AS reason, " DSYNC_ATTENTION_COLUMNS "'' AS blocker_code, "
    "CONCAT('due at ', DATE_FORMAT(e.next_run_time, '%Y-%m-%d %H:%i:%s'), ' UTC; later events of ', "
    "e.tenant_id, '/', e.data_id, ' wait for it')" DSYNC_ATTENTION_TAIL
    " FROM distribute_event e FORCE INDEX (idx_due) WHERE e.status = " DSYNC_SQL_STATUS(PENDING) " AND e.next_run_time > NOW(3) "
    "AND NOT " DSYNC_UNROUTABLE("e") " AND " DSYNC_HAS_DISPATCHER("e") " AND NOT " DSYNC_COMP_RETRYING("e")
    " AND NOT " DSYNC_PAUSED("e") " AND NOT (" DSYNC_ORDERED("e") " AND " DSYNC_EARLIER_BLOCKER("e") ") "
    "AND EXISTS (SELECT 1 FROM distribute_event q WHERE q.tenant_id = e.tenant_id AND q.data_id = e.data_id "
    "AND q.status = " DSYNC_SQL_STATUS(PENDING) " AND q.id > e.id AND q.service = e.service AND " DSYNC_ORDERED("q") ") "
    "ORDER BY e.id LIMIT ?";

// Captures (V026, issue 36): a FAILED capture, each paused table, a RUNNING capture
// whose lag exceeds its lag_bound_s; the view's rules, on dsync_capture (a row per
// capture) and the capture's unfinished events (idx_topic_status).
#define DSYNC_CAPTURE_COLUMNS(reason, code)                                                      \
  "SELECT '" reason "' AS reason, " code " AS code, 'dsync.capture' AS topic, c.state AS status, " \
  "'' AS phase, IFNULL(c.holder, '') AS node_address, 0 AS attempt, 0 AS retry_count, "           \
  DSYNC_ISO("c.updated_at") " AS modifier_time, TIMESTAMPDIFF(SECOND, c.updated_at, NOW(3)) AS idle_s, " \
  "IFNULL(c.last_error, '') AS last_error, '' AS blocker_code, "
#define DSYNC_CAPTURE_TAIL                                                                        \
  " AS detail, c.service AS service, 'dsync.capture' AS tenant_id, c.name AS data_id, '' AS next_run_time"
constexpr const char* kAttentionCaptureFailed =
    DSYNC_CAPTURE_COLUMNS("capture_failed", "CONCAT('capture:', c.name)")
    "CONCAT('capture ', c.name, ' failed; fix the cause, then: dsync capture resume ', c.name)" DSYNC_CAPTURE_TAIL
    " FROM dsync_capture c WHERE c.state = 'FAILED' ORDER BY c.service, c.name LIMIT ?";
constexpr const char* kAttentionCaptureTablePaused =
    DSYNC_CAPTURE_COLUMNS("capture_table_paused", "CONCAT('capture:', c.name, ':', p.tbl)")
    "CONCAT('table ', p.tbl, ' of capture ', c.name, ' paused: ', "
    "JSON_UNQUOTE(JSON_EXTRACT(c.paused_tables, CONCAT('$.\"', p.tbl, '\"'))), "
    "'; align the target, then: dsync capture resume ', c.name)" DSYNC_CAPTURE_TAIL
    " FROM dsync_capture c JOIN JSON_TABLE(JSON_KEYS(c.paused_tables), '$[*]' COLUMNS (tbl VARCHAR(64) PATH '$')) p "
    "WHERE c.paused_tables IS NOT NULL ORDER BY c.service, c.name, p.tbl LIMIT ?";
constexpr const char* kAttentionCaptureLagging =
    DSYNC_CAPTURE_COLUMNS("capture_lagging", "CONCAT('capture:', c.name)")
    "CONCAT('capture ', c.name, ' lags ', c.lag_s, ' s, above its bound of ', c.lag_bound_s, "
    "' s (captures.', c.name, '.lag_bound_s)')" DSYNC_CAPTURE_TAIL
    " FROM (SELECT k.*, GREATEST(COALESCE(TIMESTAMPDIFF(SECOND, (SELECT MIN(e.create_time) FROM distribute_event e "
    "WHERE e.topic = 'dsync.capture' AND e.status IN (" DSYNC_SQL_STATUS(PENDING) ", " DSYNC_SQL_STATUS(ASSIGNED) ", "
    DSYNC_SQL_STATUS(RUNNING) ", " DSYNC_SQL_STATUS(COMPENSATING) ") "
    "AND e.service = k.service AND e.tenant_id = 'dsync.capture' AND SUBSTRING_INDEX(e.data_id, '#', 1) = k.name "
    "AND e.data_id NOT LIKE '%#copy#%'), NOW(3)), 0), "
    "COALESCE(TIMESTAMPDIFF(SECOND, k.last_commit_at, k.updated_at), 0)) AS lag_s "
    "FROM dsync_capture k WHERE k.state = 'RUNNING') c WHERE c.lag_s > c.lag_bound_s ORDER BY c.service, c.name LIMIT ?";

struct AttentionQuery {
  const char* reason;
  const char* sql;
};
// In listing order.
constexpr AttentionQuery kAttentionQueries[] = {
    {"failed", kAttentionFailed},
    {"stuck", kAttentionStuck},
    {"compensation_retrying", kAttentionCompensationRetrying},
    {"paused", kAttentionPaused},  // issue 37 (V022)
    {"unknown_topic", kAttentionUnknownTopic},
    {"unroutable", kAttentionUnroutable},
    {"no_dispatcher_for_service", kAttentionNoDispatcher},
    {"held_behind", kAttentionHeldBehind},
    {"delayed", kAttentionDelayed},
    {"capture_failed", kAttentionCaptureFailed},              // issue 36 (V026)
    {"capture_table_paused", kAttentionCaptureTablePaused},  // issue 36 (V026)
    {"capture_lagging", kAttentionCaptureLagging},            // issue 36 (V026)
};
// held_behind gives one row per (event, blocker): read this many per event wanted.
constexpr int64_t kHeldRowsPerEvent = 4;

// The column default of distribute_event.service (V014).
constexpr const char* kDefaultService =
    "SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME = 'distribute_event' AND COLUMN_NAME = 'service'";

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
                  .service = col.String(), .reset_count = col.Int(), .route = col.String()};
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

namespace {

// Runs `sql` (q's statement, or a count over it) with its row limit, and the
// no_dispatcher statement with the column default first.
std::unique_ptr<storage::ResultSet> RunAttention(storage::Connection& c, const std::string& sql,
                                                 const AttentionQuery& q, int64_t limit,
                                                 const std::string& default_service) {
  if (q.sql == kAttentionNoDispatcher) return c.Query(sql, default_service, limit);
  return c.Query(sql, limit);
}

}  // namespace

std::vector<AttentionEntry> ReadNeedingAttention(storage::Connection& c, int64_t n) {
  std::vector<AttentionEntry> out;
  const std::string default_service = ReadDefaultService(c).value_or("");
  for (const AttentionQuery& q : kAttentionQueries) {
    const bool held = std::string_view(q.reason) == "held_behind";
    auto rs = RunAttention(c, q.sql, q, held ? n * kHeldRowsPerEvent : n, default_service);
    std::set<std::string> seen;  // held_behind: the first row of each event names its earliest blocker
    while (rs->next()) {
      Columns col(*rs);
      AttentionEntry a;  // column by column, in the statement's order
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
      a.blocker_code = col.String();
      a.detail = col.String();
      a.service = col.String();
      a.tenant_id = col.String();
      a.data_id = col.String();
      a.next_run_time = col.String();
      if (held && (!seen.insert(a.code).second || static_cast<int64_t>(seen.size()) > n)) continue;
      out.push_back(std::move(a));
    }
  }
  return out;
}

std::map<std::string, int64_t> CountNeedingAttention(storage::Connection& c, int64_t cap) {
  std::map<std::string, int64_t> out;
  const std::string default_service = ReadDefaultService(c).value_or("");
  for (const AttentionQuery& q : kAttentionQueries) {
    const bool held = std::string_view(q.reason) == "held_behind";
    const std::string sql = std::string("SELECT COUNT(DISTINCT t.code) FROM (") + q.sql + ") t";
    auto rs = RunAttention(c, sql, q, held ? cap * kHeldRowsPerEvent : cap, default_service);
    out[q.reason] = rs->next() ? std::min<int64_t>(cap, rs->getInt64(1)) : 0;
  }
  return out;
}

const std::vector<std::string>& AttentionReasons() {
  static const std::vector<std::string> reasons = [] {
    std::vector<std::string> r;
    for (const AttentionQuery& q : kAttentionQueries) r.emplace_back(q.reason);
    return r;
  }();
  return reasons;
}

std::optional<std::string> ReadDefaultService(storage::Connection& c) {
  std::optional<std::string> text = c.QueryString(kDefaultService);
  if (!text) return std::nullopt;
  // MariaDB reports the default as an SQL literal ('kbs-sync'), MySQL as the value.
  std::string v = *text;
  if (v.size() >= 2 && v.front() == '\'' && v.back() == '\'') {
    std::string unquoted;
    for (size_t i = 1; i + 1 < v.size(); ++i) {
      if ((v[i] == '\'' || v[i] == '\\') && i + 2 < v.size()) ++i;  // '' and \' escapes
      unquoted += v[i];
    }
    v = unquoted;
  }
  return v;
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
