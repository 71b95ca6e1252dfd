#include "events/cancel.h"

#include <nlohmann/json.hpp>

#include "events/columns.h"
#include "events/process_log.h"
#include "events/status.h"

namespace dsync::events {
namespace {

// A live node of the event's service holds it: online or draining, heartbeat within the
// offline timeout (registry::NodeDirectory's rule). Param: the timeout in microseconds.
#define DSYNC_HELD_BY_LIVE_NODE(e)                                                                 \
  "EXISTS (SELECT 1 FROM distribute_node_registry r WHERE r.service_name = " e ".service "        \
  "AND r.node_address = " e ".node_address AND r.status IN (1, 2) "                               \
  "AND r.last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND)"

// Params: offline timeout (us), code.
constexpr const char* kSelectCancelTarget =
    "SELECT e.id, e.version, e.status, e.phase, IFNULL(e.node_address, ''), " DSYNC_HELD_BY_LIVE_NODE("e")
    " FROM distribute_event e WHERE e.code = ?";

// Params: job_code. At most 20 named.
constexpr const char* kSelectStartedSteps =
    "SELECT step_name, status FROM distribute_event_step WHERE job_code = ? AND status <> " DSYNC_SQL_STATUS(PENDING) " "
    "ORDER BY sort, id LIMIT 20";

// Params: node, 'FAILED', why (log); last_error, result, id, version, offline timeout (us).
constexpr const char* kCancelEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(FAILED) R"(, fair_pending = 0, version = version + 1, finished_time = NOW(3),
  modifier_time = NOW(3), last_error = ?, result = ?
WHERE id = ? AND version = ? AND status IN ()" DSYNC_SQL_STATUS(PENDING) R"(, )" DSYNC_SQL_STATUS(ASSIGNED) R"() AND phase = 'FORWARD'
  AND NOT (status = )" DSYNC_SQL_STATUS(ASSIGNED) R"( AND )" DSYNC_HELD_BY_LIVE_NODE("distribute_event") R"()
  AND NOT EXISTS (SELECT 1 FROM distribute_event_step s
                  WHERE s.job_code = distribute_event.code AND s.status <> )" DSYNC_SQL_STATUS(PENDING) R"())";

}  // namespace

std::optional<CancelTarget> ReadCancelTarget(storage::Connection& c, const std::string& code,
                                             Millis offline_timeout) {
  CancelTarget t;
  {
    auto rs = c.Query(kSelectCancelTarget, Micros(offline_timeout), code);
    if (!rs->next()) return std::nullopt;
    Columns col(*rs);
    t.id = col.Int64();
    t.version = col.Int64();
    t.status = col.String();
    t.phase = col.String();
    t.node_address = col.String();
    t.held_by_live_node = col.Flag();
  }
  auto rs = c.Query(kSelectStartedSteps, code);
  while (rs->next()) t.started_steps.push_back(rs->getString(1) + " (" + rs->getString(2) + ")");
  return t;
}

bool CancelEvent(storage::Connection& c, int64_t id, int64_t version, const std::string& reason,
                 Millis offline_timeout) {
  const std::string result = nlohmann::json{{"cancelled", true}, {"reason", reason}}.dump();
  return c.Execute(kCancelEvent, "operator", ToText(EventStatus::kFailed), "cancelled by an operator: " + reason,
                   "cancelled: " + reason, result, id, version, Micros(offline_timeout)) == 1;
}

}  // namespace dsync::events
