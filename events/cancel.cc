#include "events/cancel.h"

#include <nlohmann/json.hpp>

#include "events/columns.h"
#include "events/process_log.h"

namespace dsync::events {
namespace {

// Params: code.
constexpr const char* kSelectCancelTarget =
    "SELECT id, version, status, phase, IFNULL(node_address, '') FROM distribute_event WHERE code = ?";

// Params: job_code. At most 20 named.
constexpr const char* kSelectStartedSteps =
    "SELECT step_name, status FROM distribute_event_step WHERE job_code = ? AND status <> 'PENDING' "
    "ORDER BY sort, id LIMIT 20";

// Params: node, 'FAILED', why (log); last_error, result, id, version.
constexpr const char* kCancelEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'FAILED', version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  last_error = ?, result = ?
WHERE id = ? AND version = ? AND status IN ('PENDING', 'ASSIGNED') AND phase = 'FORWARD'
  AND NOT EXISTS (SELECT 1 FROM distribute_event_step s
                  WHERE s.job_code = distribute_event.code AND s.status <> 'PENDING'))";

}  // namespace

std::optional<CancelTarget> ReadCancelTarget(storage::Connection& c, const std::string& code) {
  CancelTarget t;
  {
    auto rs = c.Query(kSelectCancelTarget, code);
    if (!rs->next()) return std::nullopt;
    Columns col(*rs);
    t.id = col.Int64();
    t.version = col.Int64();
    t.status = col.String();
    t.phase = col.String();
    t.node_address = col.String();
  }
  auto rs = c.Query(kSelectStartedSteps, code);
  while (rs->next()) t.started_steps.push_back(rs->getString(1) + " (" + rs->getString(2) + ")");
  return t;
}

bool CancelEvent(storage::Connection& c, int64_t id, int64_t version, const std::string& reason) {
  const std::string result = nlohmann::json{{"cancelled", true}, {"reason", reason}}.dump();
  return c.Execute(kCancelEvent, "operator", "FAILED", "cancelled by an operator: " + reason,
                   "cancelled: " + reason, result, id, version) == 1;
}

}  // namespace dsync::events
