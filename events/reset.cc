#include "events/reset.h"

#include "events/columns.h"
#include "events/process_log.h"
#include "events/status.h"

namespace dsync::events {
namespace {

// The reset's SET list: last_error first, so that the process_log entry (which must
// come before `status`, to read the old one) can name the reason without a second
// parameter, and the holder from node_address before it is cleared.
#define DSYNC_RESET_SET                                                                     \
  "UPDATE distribute_event\nSET last_error = ?, " DSYNC_PROCESS_LOG_ENTRY(                  \
      "node_address", DSYNC_SQL_STATUS(PENDING), "last_error") ",\n"                                      \
  "    status = " DSYNC_SQL_STATUS(PENDING) ", fair_pending = 1, node_address = NULL, version = version + 1, "                    \
  "next_run_time = NOW(3),\n    reset_count = reset_count + ?\n"

// Params: last_error, reset_count increment, id, version, status.
constexpr const char* kResetEvent = DSYNC_RESET_SET "WHERE id = ? AND version = ? AND status = ?";

// Params: as kResetEvent, then the idle time in microseconds.
constexpr const char* kResetIdleEvent = DSYNC_RESET_SET
    "WHERE id = ? AND version = ? AND status = ?\n"
    "  AND modifier_time < NOW(3) - INTERVAL ? MICROSECOND";

// Params: error, job code. A reset of a COMPENSATING event interrupted the compensation
// of its COMPENSATING step: the step says so (error_details), but it is not counted as
// a failed compensation (compensation_retry_count): the reset was not the step's
// fault. The event's reset_count bounds a compensation that kills its node every time
// (the claim checks max_resets, saga/event_run.cc).
constexpr const char* kNoteInterruptedCompensation = R"(
UPDATE distribute_event_step SET error_details = ?
WHERE job_code = ? AND status = )" DSYNC_SQL_STATUS(COMPENSATING);

// Params: node_address, service. Everything this address holds in its service, for
// the hand-back at start.
constexpr const char* kSelectHeld = R"(
SELECT id, version, status, code FROM distribute_event
WHERE node_address = ? AND status IN )" DSYNC_SQL_IN_FLIGHT R"( AND service = ?)";

// Params: id, node_address, service, the run's version twice. One event still held
// here after its run was abandoned (ASSIGNED: its claim was deferred,
// AssignedEvent::claim_deferred), at the run's version or the one its unknown commit
// would have left (ReadAbandoned).
constexpr const char* kSelectAbandoned = R"(
SELECT id, version, status, code FROM distribute_event
WHERE id = ? AND node_address = ? AND status IN )" DSYNC_SQL_IN_FLIGHT R"( AND service = ?
  AND version BETWEEN ? AND ? + 1)";

// Params: node_address, service. What is assigned here but unclaimed, for the drain.
constexpr const char* kSelectUnclaimed = R"(
SELECT id, version, status, code FROM distribute_event
WHERE node_address = ? AND status = )" DSYNC_SQL_STATUS(ASSIGNED) R"( AND service = ?)";

// Params: service, offline timeout in microseconds, limit.
// The in-flight statuses are a range of idx_due (status, ...): terminal rows are never
// visited, and in-flight rows are bounded by the nodes' capacity + prefetch; then a
// sort of the few candidates. Forced: with ORDER BY id LIMIT, MariaDB otherwise walks
// the primary key, reading every terminal row (1.19 s per sweep with 1M of them,
// bench/dispatch_bench.cc); the liveness probe uses idx_node_liveness (node_address,
// status, last_heartbeat_time) of the registry. Only the service's events, judged by
// its own nodes' liveness: another service's registry rows are never read.)
constexpr const char* kSelectOrphaned = R"(
SELECT e.id, e.version, e.status, e.node_address, e.code, e.trace_id, e.topic,
       TIMESTAMPDIFF(MICROSECOND, e.modifier_time, NOW(3))
FROM distribute_event e FORCE INDEX (idx_due)
WHERE e.status IN )" DSYNC_SQL_IN_FLIGHT R"( AND e.service = ?
  AND NOT EXISTS (
    SELECT 1 FROM distribute_node_registry r
    WHERE r.node_address = e.node_address AND r.service_name = e.service AND r.status IN (1, 2)
      AND r.last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND)
ORDER BY e.id
LIMIT ?)";

// Params: service, timeout in microseconds, topics with that timeout (comma list),
// include unconfigured topics (bool), every configured topic (comma list), limit.
// The running range of idx_due, as above (V007 dropped idx_status_modifier_time:
// rewritten on every write of an event, it cost more than these reads of the
// in-flight rows do).
constexpr const char* kSelectTimedOut = R"(
SELECT id, version, status, node_address, code, trace_id, topic,
       TIMESTAMPDIFF(MICROSECOND, modifier_time, NOW(3))
FROM distribute_event FORCE INDEX (idx_due)
WHERE status IN )" DSYNC_SQL_CLAIMED R"( AND service = ?
  AND modifier_time < NOW(3) - INTERVAL ? MICROSECOND
  AND (FIND_IN_SET(topic, ?) > 0 OR (? AND FIND_IN_SET(topic, ?) = 0))
ORDER BY modifier_time
LIMIT ?)";

// Params: service, timeout in microseconds, topics with that timeout (comma list),
// include unconfigured topics (bool), every configured topic (comma list), offline
// timeout in microseconds, limit. The node is judged by its registry row in the
// event's service. The ASSIGNED range of idx_due (status, ...), bounded by the
// nodes' capacity + prefetch; the registry by its node_address index.
constexpr const char* kSelectNotClaimed = R"(
SELECT e.id, e.version, e.status, e.node_address, e.code, e.trace_id, e.topic,
       TIMESTAMPDIFF(MICROSECOND, COALESCE(e.assigned_time, e.modifier_time), NOW(3)), r.metadata
FROM distribute_event e FORCE INDEX (idx_due)
JOIN distribute_node_registry r ON r.node_address = e.node_address AND r.service_name = e.service
WHERE e.status = )" DSYNC_SQL_STATUS(ASSIGNED) R"( AND e.service = ?
  AND COALESCE(e.assigned_time, e.modifier_time) < NOW(3) - INTERVAL ? MICROSECOND
  AND (FIND_IN_SET(e.topic, ?) > 0 OR (? AND FIND_IN_SET(e.topic, ?) = 0))
  AND r.status IN (1, 2) AND r.last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND
ORDER BY e.id
LIMIT ?)";

// Params: id. Takes the event's row lock, or returns no row at once when another
// session holds it (MariaDB >= 10.6, MySQL >= 8.0).
constexpr const char* kLockEventIfFree = "SELECT id FROM distribute_event WHERE id = ? FOR UPDATE SKIP LOCKED";

HeldEvent ReadHeldRow(storage::ResultSet& rs) {
  return HeldEvent{rs.getInt64(1), rs.getInt64(2), StoredEventStatus(rs.getString(3)), rs.getString(4)};
}

std::vector<HeldEvent> ReadHeldRows(storage::Connection& c, const char* sql, const NodeKey& node,
                                    const std::set<int64_t>& skip) {
  std::vector<HeldEvent> out;
  auto rs = c.Query(sql, node.address, node.service);
  while (rs->next()) {
    if (skip.count(rs->getInt64(1))) continue;
    out.push_back(ReadHeldRow(*rs));
  }
  return out;
}

// The columns kSelectOrphaned, kSelectTimedOut and kSelectNotClaimed start with (a NULL
// node_address or trace_id reads as "", a NULL idle time as 0).
InFlightEvent ReadInFlightRow(Columns& col) {
  return {.id = col.Int64(), .version = col.Int64(), .status = StoredEventStatus(col.String()), .node_address = col.String(),
          .code = col.String(), .trace_id = col.String(), .topic = col.String(),
          .idle = Millis(col.Int64() / 1000)};
}

std::vector<InFlightEvent> ReadInFlightRows(storage::ResultSet& rs) {
  std::vector<InFlightEvent> out;
  while (rs.next()) {
    Columns col(rs);
    out.push_back(ReadInFlightRow(col));
  }
  return out;
}

}  // namespace

const char* ResetEventSql() { return kResetEvent; }
const char* OrphanedSql() { return kSelectOrphaned; }
const char* TimedOutSql() { return kSelectTimedOut; }
const char* NotClaimedSql() { return kSelectNotClaimed; }

bool ResetEvent(storage::Connection& c, const HeldEvent& e, const std::string& why,
                std::optional<Millis> idle_for, ResetCharge charge) {
  const bool claimed = e.status == EventStatus::kRunning || e.status == EventStatus::kCompensating;
  const int resets = claimed && charge == ResetCharge::kCountReset ? 1 : 0;
  uint64_t rows = idle_for ? c.Execute(kResetIdleEvent, why, resets, e.id, e.version, ToText(e.status),
                                       static_cast<int64_t>(idle_for->count()) * 1000)
                           : c.Execute(kResetEvent, why, resets, e.id, e.version, ToText(e.status));
  if (rows != 1) return false;
  if (e.status == EventStatus::kCompensating) c.Execute(kNoteInterruptedCompensation, "compensation interrupted: " + why, e.code);
  return true;
}

std::vector<HeldEvent> ReadHeld(storage::Connection& c, const NodeKey& node, const std::set<int64_t>& skip) {
  return ReadHeldRows(c, kSelectHeld, node, skip);
}

std::vector<HeldEvent> ReadUnclaimed(storage::Connection& c, const NodeKey& node,
                                     const std::set<int64_t>& skip) {
  return ReadHeldRows(c, kSelectUnclaimed, node, skip);
}

std::optional<HeldEvent> ReadAbandoned(storage::Connection& c, int64_t id, int64_t run_version,
                                       const NodeKey& node) {
  auto rs = c.Query(kSelectAbandoned, id, node.address, node.service, run_version, run_version);
  if (!rs->next()) return std::nullopt;
  return ReadHeldRow(*rs);
}

std::vector<InFlightEvent> ReadOrphaned(storage::Connection& c, const std::string& service, Millis offline_timeout,
                                        int limit) {
  auto rs = c.Query(kSelectOrphaned, service, Micros(offline_timeout), limit);
  return ReadInFlightRows(*rs);
}

std::vector<InFlightEvent> ReadTimedOut(storage::Connection& c, const std::string& service, Millis timeout,
                                        const std::string& topics, bool unconfigured, const std::string& configured,
                                        int limit) {
  auto rs = c.Query(kSelectTimedOut, service, Micros(timeout), topics, unconfigured, configured, limit);
  return ReadInFlightRows(*rs);
}

std::vector<NotClaimedEvent> ReadNotClaimed(storage::Connection& c, const std::string& service,
                                            Millis offline_timeout, Millis timeout, const std::string& topics,
                                            bool unconfigured, const std::string& configured, int limit) {
  auto rs = c.Query(kSelectNotClaimed, service, Micros(timeout), topics, unconfigured, configured, Micros(offline_timeout),
                    limit);
  std::vector<NotClaimedEvent> out;
  while (rs->next()) {
    Columns col(*rs);
    out.push_back({ReadInFlightRow(col), col.OptionalString()});  // in column order
  }
  return out;
}

bool LockEventIfFree(storage::Connection& c, int64_t id) {
  return c.QueryInt(kLockEventIfFree, id).has_value();
}

}  // namespace dsync::events
