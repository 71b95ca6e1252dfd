#include "events/retry.h"

#include "events/process_log.h"

namespace dsync::events {
namespace {

// Params: code.
constexpr const char* kLockForRetry =
    "SELECT id, status, version FROM distribute_event WHERE code = ? FOR UPDATE";

// Params: job_code.
#define DSYNC_RESET_STEPS                                                                  \
  "UPDATE distribute_event_step SET "                                                      \
  "compensation_data = IF(status = 'COMPENSATED', NULL, compensation_data), "              \
  "status = 'PENDING', retry_count = 0, compensation_retry_count = 0, started_at = NULL, " \
  "executed_at = NULL, compensated_at = NULL, error_details = NULL, output = NULL "        \
  "WHERE job_code = ?"
constexpr const char* kResetAllSteps = DSYNC_RESET_STEPS;
constexpr const char* kResetUnfinishedSteps = DSYNC_RESET_STEPS " AND status <> 'SUCCESS'";

// Params: node, 'PENDING', why (log); id, version.
constexpr const char* kRetryEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'PENDING', phase = 'FORWARD', node_address = NULL, version = version + 1,
  retry_count = 0, next_run_time = '1970-01-01 00:00:00.000', result = NULL, last_error = NULL,
  progress = 0, assigned_time = NULL, started_time = NULL, finished_time = NULL,
  modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status IN ('FAILED', 'COMPENSATED'))";

}  // namespace

std::optional<RetryTarget> LockForRetry(storage::Connection& c, const std::string& code) {
  auto rs = c.Query(kLockForRetry, code);
  if (!rs->next()) return std::nullopt;
  return RetryTarget{rs->getInt64(1), rs->getString(2), rs->getInt(3)};
}

void ResetStepsForRetry(storage::Connection& c, const std::string& code, bool all) {
  c.Execute(all ? kResetAllSteps : kResetUnfinishedSteps, code);
}

bool RetryEvent(storage::Connection& c, int64_t id, int version, const std::string& why) {
  return c.Execute(kRetryEvent, "operator", "PENDING", why, id, version) == 1;
}

}  // namespace dsync::events
