#include "saga/step_store.h"

#include <nlohmann/json.hpp>

#include "saga/process_log_sql.h"

namespace dsync::saga::store {
namespace {

static_assert(kProcessLogSize == 20, "DSYNC_APPEND_PROCESS_LOG hard-codes 20");

// Params: node, to, why (log); id, version, node, phase.
constexpr const char* kClaimEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = IF(phase = 'COMPENSATE', 'COMPENSATING', 'RUNNING'),
  version = version + 1, attempt = attempt + 1, started_time = NOW(3), modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status = 'ASSIGNED' AND node_address = ? AND phase = ?)";

// Params: id, version.
constexpr const char* kReadClaimState =
    "SELECT phase, retry_count FROM distribute_event WHERE id = ? AND version = ?";

// Params: progress, id, version.
constexpr const char* kTouchEvent = R"(
UPDATE distribute_event SET modifier_time = NOW(3), progress = ? WHERE id = ? AND version = ?)";

// Params: id, version.
constexpr const char* kOwnsEvent = "SELECT 1 FROM distribute_event WHERE id = ? AND version = ?";

// Params: node, 'SUCCESS', why (log); result, id, version.
constexpr const char* kSucceedEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'SUCCESS', version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  progress = 100, result = ?
WHERE id = ? AND version = ?)";

// Params: node, 'PENDING', why (log); retry increment, backoff (microseconds),
// last_error, id, version.
constexpr const char* kScheduleEventRetry = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'PENDING', node_address = NULL, version = version + 1,
  retry_count = retry_count + ?, next_run_time = NOW(3) + INTERVAL ? MICROSECOND,
  last_error = ?, modifier_time = NOW(3)
WHERE id = ? AND version = ?)";

// Params: node, 'COMPENSATING', why (log); result, last_error, id, version.
constexpr const char* kStartCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'COMPENSATING', phase = 'COMPENSATE', version = version + 1, result = ?,
  last_error = ?, modifier_time = NOW(3)
WHERE id = ? AND version = ?)";

// Params: node, 'COMPENSATED', why (log); progress, id, version.
constexpr const char* kCompleteCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'COMPENSATED', version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  progress = ?
WHERE id = ? AND version = ?)";

// Params: node, 'FAILED', why (log); result, last_error, id, version.
constexpr const char* kFailEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'FAILED', version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  result = ?, last_error = ?
WHERE id = ? AND version = ?)";

// Params: node, 'FAILED', why (log); step name, error, last_error, id, version.
constexpr const char* kFailCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  result = JSON_SET(IF(JSON_VALID(result), result, '{}'),
                    '$.compensation_failed_step', ?, '$.compensation_error', ?),
  status = 'FAILED', version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  last_error = ?
WHERE id = ? AND version = ?)";


// Params: code. The parent's id, for its children's parent_step_id.
constexpr const char* kStepId = "SELECT id FROM distribute_event_step WHERE code = ?";

// Params: job code. Uses idx_job_code.
constexpr const char* kLoadSteps = R"(
SELECT id, code, parent_step_id, sort, step_name, step_type, status, retry_count,
       compensation_retry_count, max_retry, attempt, executed_at IS NOT NULL,
       compensation_data, payload
FROM distribute_event_step WHERE job_code = ?)";

// Params: node, attempt, code.
constexpr const char* kMarkStepExecuting = R"(
UPDATE distribute_event_step SET status = 'EXECUTING', node_address = ?, attempt = ?,
  started_at = NOW(3)
WHERE code = ? AND status <> 'SUCCESS')";

// Params: output, compensation_data, code.
constexpr const char* kMarkStepSucceeded = R"(
UPDATE distribute_event_step SET status = 'SUCCESS', executed_at = NOW(3), output = ?,
  compensation_data = ?
WHERE code = ?)";

// Params: error, compensation_data (NULL keeps the old), code.
constexpr const char* kRecordStepFailure = R"(
UPDATE distribute_event_step SET status = 'FAILED', error_details = ?,
  retry_count = retry_count + 1, compensation_data = COALESCE(?, compensation_data)
WHERE code = ?)";

// Params: why, code.
constexpr const char* kMarkStepInterrupted = R"(
UPDATE distribute_event_step SET status = 'FAILED', error_details = ?
WHERE code = ? AND status = 'EXECUTING')";

// Params: node, attempt, code.
constexpr const char* kMarkStepCompensating = R"(
UPDATE distribute_event_step SET status = 'COMPENSATING', node_address = ?, attempt = ?
WHERE code = ?)";

// Params: code.
constexpr const char* kMarkStepCompensated = R"(
UPDATE distribute_event_step SET status = 'COMPENSATED', compensated_at = NOW(3) WHERE code = ?)";

// Params: error, code.
constexpr const char* kRecordCompensationFailure = R"(
UPDATE distribute_event_step SET error_details = ?,
  compensation_retry_count = compensation_retry_count + 1
WHERE code = ?)";

int64_t Micros(Millis d) { return static_cast<int64_t>(d.count()) * 1000; }

// The plan's (or a parent's children's) rows in one multi-row INSERT IGNORE, so a
// plan of any size is one round trip; the text depends only on the row count, so the
// connection's statement cache holds one statement per plan size. Rows flagged
// `executing` go in EXECUTING with node, attempt and started_at.
// Params per row: code, job_code, tenant_id, sort, step_type, step_name, max_retry,
// payload, status, node_address, attempt, executing flag, parent_step_id.
std::string InsertStepsSql(size_t rows) {
  std::string sql =
      "INSERT IGNORE INTO distribute_event_step (code, job_code, tenant_id, sort, step_type, step_name, "
      "max_retry, payload, status, node_address, attempt, started_at, parent_step_id) VALUES ";
  for (size_t i = 0; i < rows; ++i) {
    sql += i == 0 ? "" : ", ";
    sql += "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, IF(?, NOW(3), NULL), ?)";
  }
  return sql;
}

std::vector<storage::Value> StepValues(const std::vector<NewStep>& steps, const std::string& node, int attempt,
                                       std::optional<int64_t> parent_id) {
  std::vector<storage::Value> v;
  v.reserve(steps.size() * 13);
  for (const NewStep& s : steps) {
    v.emplace_back(s.code);
    v.emplace_back(s.job_code);
    v.emplace_back(s.tenant_id);
    v.emplace_back(int64_t{s.sort});
    v.emplace_back(s.type);
    v.emplace_back(s.name);
    v.emplace_back(int64_t{s.max_retry});
    v.emplace_back(s.payload);
    v.emplace_back(std::string(s.executing ? "EXECUTING" : "PENDING"));
    if (s.executing) v.emplace_back(node);
    else v.emplace_back(std::monostate{});
    v.emplace_back(int64_t{s.executing ? attempt : 0});
    v.emplace_back(s.executing);
    if (parent_id) v.emplace_back(*parent_id);
    else v.emplace_back(std::monostate{});
  }
  return v;
}

}  // namespace

bool ClaimEvent(storage::Connection& c, int64_t id, int version, const std::string& node,
                const std::string& phase, const std::string& to, const std::string& why) {
  return c.Execute(kClaimEvent, node, to, why, id, version, node, phase) == 1;
}

std::optional<ClaimState> ReadClaimState(storage::Connection& c, int64_t id, int version) {
  auto rs = c.Query(kReadClaimState, id, version);
  if (!rs->next()) return std::nullopt;
  return ClaimState{std::string(rs->getString(1)), rs->getInt(2)};
}

bool TouchEvent(storage::Connection& c, int64_t id, int version, int progress) {
  return c.Execute(kTouchEvent, progress, id, version) == 1;
}

bool OwnsEvent(storage::Connection& c, int64_t id, int version) {
  return c.QueryInt(kOwnsEvent, id, version).has_value();
}

bool SucceedEvent(storage::Connection& c, int64_t id, int version, const std::string& node,
                  const std::string& result_json) {
  return c.Execute(kSucceedEvent, node, "SUCCESS", "all steps succeeded", result_json, id,
                   version) == 1;
}

bool ScheduleEventRetry(storage::Connection& c, int64_t id, int version, const std::string& node,
                        int retry_increment, Millis backoff, const std::string& error,
                        const std::string& why) {
  return c.Execute(kScheduleEventRetry, node, "PENDING", why, retry_increment, Micros(backoff),
                   error, id, version) == 1;
}

bool StartCompensation(storage::Connection& c, int64_t id, int version, const std::string& node,
                       const std::string& result_json, const std::string& error) {
  return c.Execute(kStartCompensation, node, "COMPENSATING", error, result_json, error, id,
                   version) == 1;
}

bool CompleteCompensation(storage::Connection& c, int64_t id, int version,
                          const std::string& node, int progress) {
  return c.Execute(kCompleteCompensation, node, "COMPENSATED", "every completed step compensated",
                   progress, id, version) == 1;
}

bool FailEvent(storage::Connection& c, int64_t id, int version, const std::string& node,
               const std::string& result_json, const std::string& error) {
  return c.Execute(kFailEvent, node, "FAILED", error, result_json, error, id, version) == 1;
}

bool FailCompensation(storage::Connection& c, int64_t id, int version, const std::string& node,
                      const std::string& step_name, const std::string& error) {
  std::string why = "compensation of '" + step_name + "' failed: " + error;
  return c.Execute(kFailCompensation, node, "FAILED", why, step_name, error, why, id, version) == 1;
}

uint64_t InsertSteps(storage::Connection& c, const std::vector<NewStep>& steps,
                     const std::string& node, int attempt) {
  if (steps.empty()) return 0;
  return c.Execute(InsertStepsSql(steps.size()), storage::Values(StepValues(steps, node, attempt, std::nullopt)));
}

uint64_t InsertChildSteps(storage::Connection& c, const std::string& parent_code,
                          const std::vector<NewStep>& children) {
  if (children.empty()) return 0;
  std::optional<int64_t> parent_id = c.QueryInt(kStepId, parent_code);
  return c.Execute(InsertStepsSql(children.size()),
                   storage::Values(StepValues(children, "", 0, parent_id)));
}

std::vector<StepRow> LoadSteps(storage::Connection& c, const std::string& event_code) {
  std::vector<StepRow> rows;
  auto rs = c.Query(kLoadSteps, event_code);
  while (rs->next()) {
    StepRow r;
    r.id = rs->getInt64(1);
    r.code = rs->getString(2);
    if (!rs->isNull(3)) r.parent_step_id = rs->getInt64(3);
    r.sort = rs->getInt(4);
    r.name = rs->getString(5);
    r.type = rs->getString(6);
    r.status = rs->getString(7);
    r.retry_count = rs->getInt(8);
    r.compensation_retry_count = rs->getInt(9);
    r.max_retry = rs->getInt(10);
    r.attempt = rs->getInt(11);
    r.executed = rs->getInt(12) != 0;
    if (!rs->isNull(13)) r.compensation_data = std::string(rs->getString(13));
    if (!rs->isNull(14)) r.payload = std::string(rs->getString(14));
    rows.push_back(std::move(r));
  }
  return rows;
}

void MarkStepExecuting(storage::Connection& c, const std::string& code, const std::string& node,
                       int attempt) {
  c.Execute(kMarkStepExecuting, node, attempt, code);
}

void MarkStepSucceeded(storage::Connection& c, const std::string& code,
                       const std::optional<std::string>& output_json,
                       const std::optional<std::string>& compensation_json) {
  c.Execute(kMarkStepSucceeded, output_json, compensation_json, code);
}

void RecordStepFailure(storage::Connection& c, const std::string& code, const std::string& error,
                       const std::optional<std::string>& compensation_json) {
  c.Execute(kRecordStepFailure, error, compensation_json, code);
}

void MarkStepInterrupted(storage::Connection& c, const std::string& code, const std::string& why) {
  c.Execute(kMarkStepInterrupted, why, code);
}

void MarkStepCompensating(storage::Connection& c, const std::string& code, const std::string& node,
                          int attempt) {
  c.Execute(kMarkStepCompensating, node, attempt, code);
}

void MarkStepCompensated(storage::Connection& c, const std::string& code) {
  c.Execute(kMarkStepCompensated, code);
}

void RecordCompensationFailure(storage::Connection& c, const std::string& code,
                               const std::string& error) {
  c.Execute(kRecordCompensationFailure, error, code);
}

}  // namespace dsync::saga::store
