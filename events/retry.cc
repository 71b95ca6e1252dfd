#include "events/retry.h"

#include "events/process_log.h"
#include "events/status.h"

namespace dsync::events {
namespace {

// Params: code.
constexpr const char* kLockForRetry =
    "SELECT id, status, version, phase FROM distribute_event WHERE code = ? FOR UPDATE";

// Params: job_code. The steps whose effect is in place (NeedsCompensation's rule,
// saga/event_run.h), in plan order.
constexpr const char* kSelectAppliedSteps = R"(
SELECT step_name, status FROM distribute_event_step
WHERE job_code = ? AND (status IN ()" DSYNC_SQL_STATUS(SUCCESS) R"(, )" DSYNC_SQL_STATUS(COMPENSATING) R"()
                        OR (status IN ()" DSYNC_SQL_STATUS(FAILED) R"(, )" DSYNC_SQL_STATUS(EXECUTING) R"() AND compensation_data IS NOT NULL))
ORDER BY sort, LENGTH(code), code)";

// Params: job_code. The compensations left unfinished get their retries afresh.
constexpr const char* kFreshCompensationRetries = R"(
UPDATE distribute_event_step SET compensation_retry_count = 0
WHERE job_code = ? AND status = )" DSYNC_SQL_STATUS(COMPENSATING);

// Params: node, 'PENDING', why (log); id, version. Phase stays COMPENSATE; the result
// keeps the original failure, without the compensation's.
constexpr const char* kResumeCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(PENDING) R"(, fair_pending = 1, node_address = NULL, version = version + 1, reset_count = 0,
  next_run_time = '1970-01-01 00:00:00.000',
  result = IF(JSON_VALID(result), JSON_REMOVE(result, '$.compensation_failed_step', '$.compensation_error'), result),
  last_error = NULL, assigned_time = NULL, finished_time = NULL, modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status = )" DSYNC_SQL_STATUS(FAILED) R"( AND phase = 'COMPENSATE')";

// Params: job_code.
#define DSYNC_RESET_STEPS                                                                  \
  "UPDATE distribute_event_step SET "                                                      \
  "compensation_data = IF(status = " DSYNC_SQL_STATUS(COMPENSATED) ", NULL, compensation_data), "              \
  "status = " DSYNC_SQL_STATUS(PENDING) ", retry_count = 0, compensation_retry_count = 0, started_at = NULL, " \
  "executed_at = NULL, compensated_at = NULL, error_details = NULL, output = NULL "        \
  "WHERE job_code = ?"
constexpr const char* kResetAllSteps = DSYNC_RESET_STEPS;
constexpr const char* kResetUnfinishedSteps = DSYNC_RESET_STEPS " AND status <> " DSYNC_SQL_STATUS(SUCCESS);

// Params: node, 'PENDING', why (log); id, version.
constexpr const char* kRetryEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(PENDING) R"(, fair_pending = 1, phase = 'FORWARD', node_address = NULL, version = version + 1,
  retry_count = 0, reset_count = 0, next_run_time = '1970-01-01 00:00:00.000', result = NULL, last_error = NULL,
  progress = 0, assigned_time = NULL, started_time = NULL, finished_time = NULL,
  modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status IN ()" DSYNC_SQL_STATUS(FAILED) R"(, )" DSYNC_SQL_STATUS(COMPENSATED) R"())";

}  // namespace

std::optional<RetryTarget> LockForRetry(storage::Connection& c, const std::string& code) {
  auto rs = c.Query(kLockForRetry, code);
  if (!rs->next()) return std::nullopt;
  return RetryTarget{rs->getInt64(1), rs->getString(2), rs->getInt(3), rs->getString(4)};
}

std::vector<AppliedStep> ReadAppliedSteps(storage::Connection& c, const std::string& code) {
  std::vector<AppliedStep> out;
  auto rs = c.Query(kSelectAppliedSteps, code);
  while (rs->next()) out.push_back({rs->getString(1), rs->getString(2)});
  return out;
}

std::string DescribeApplied(const std::vector<AppliedStep>& steps) {
  std::string text;
  for (const AppliedStep& s : steps) text += (text.empty() ? "" : ", ") + s.name + " (" + s.status + ")";
  return text;
}

bool ResumeCompensation(storage::Connection& c, int64_t id, int version, const std::string& code,
                        const std::string& why) {
  if (c.Execute(kResumeCompensation, "operator", ToText(EventStatus::kPending), why, id, version) != 1) return false;
  c.Execute(kFreshCompensationRetries, code);
  return true;
}

void ResetStepsForRetry(storage::Connection& c, const std::string& code, bool all) {
  c.Execute(all ? kResetAllSteps : kResetUnfinishedSteps, code);
}

bool RetryEvent(storage::Connection& c, int64_t id, int version, const std::string& why) {
  return c.Execute(kRetryEvent, "operator", ToText(EventStatus::kPending), why, id, version) == 1;
}

}  // namespace dsync::events
