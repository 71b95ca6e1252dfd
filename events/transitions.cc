#include "events/transitions.h"

#include <bit>
#include <map>
#include <span>
#include <tuple>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "events/process_log.h"
#include "events/status.h"

namespace dsync::events {
namespace {

static_assert(kProcessLogSize == 20, "DSYNC_APPEND_PROCESS_LOG hard-codes 20");

// Params: node, to, why (log); id, version, node, phase.
constexpr const char* kClaimEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = IF(phase = 'COMPENSATE', )" DSYNC_SQL_STATUS(COMPENSATING) R"(, )" DSYNC_SQL_STATUS(RUNNING) R"(),
  version = version + 1, attempt = attempt + 1, started_time = NOW(3), modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status = )" DSYNC_SQL_STATUS(ASSIGNED) R"( AND node_address = ? AND phase = ?)";

// Params: id, version.
constexpr const char* kReadClaimState =
    "SELECT phase, retry_count, reset_count FROM distribute_event WHERE id = ? AND version = ?";

// Params: progress, id, version.
constexpr const char* kTouchEvent = R"(
UPDATE distribute_event SET modifier_time = NOW(3), progress = ? WHERE id = ? AND version = ?)";

// Params: id, version.
constexpr const char* kOwnsEvent = "SELECT 1 FROM distribute_event WHERE id = ? AND version = ?";

// Params: node, 'SUCCESS', why (log); result, id, version.
constexpr const char* kSucceedEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(SUCCESS) R"(, version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  progress = 100, result = ?
WHERE id = ? AND version = ?)";

// Params: node, 'PENDING', why (log); retry increment, reset increment, backoff
// (microseconds), last_error, id, version.
constexpr const char* kScheduleEventRetry = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(PENDING) R"(, fair_pending = 1, node_address = NULL, version = version + 1,
  retry_count = retry_count + ?, reset_count = reset_count + ?,
  next_run_time = NOW(3) + INTERVAL ? MICROSECOND,
  last_error = ?, modifier_time = NOW(3)
WHERE id = ? AND version = ?)";

// Params: node, 'PENDING', why (log); route, id, version. HandOnEvent.
constexpr const char* kHandOnEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(PENDING) R"(, fair_pending = 1, node_address = NULL, version = version + 1,
  next_run_time = NOW(3), modifier_time = NOW(3), route = ?
WHERE id = ? AND version = ? AND status IN )" DSYNC_SQL_CLAIMED R"()";

// Params: node, 'COMPENSATING', why (log); result, last_error, id, version.
constexpr const char* kStartCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(COMPENSATING) R"(, phase = 'COMPENSATE', version = version + 1, result = ?,
  last_error = ?, modifier_time = NOW(3)
WHERE id = ? AND version = ?)";

// Params: node, 'COMPENSATED', why (log); progress, id, version.
constexpr const char* kCompleteCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(COMPENSATED) R"(, version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  progress = ?
WHERE id = ? AND version = ?)";

// Params: node, 'FAILED', why (log); result, last_error, id, version.
constexpr const char* kFailEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = )" DSYNC_SQL_STATUS(FAILED) R"(, version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  result = ?, last_error = ?
WHERE id = ? AND version = ?)";

// Params: node, 'FAILED', why (log); step name, error, last_error, id, version.
constexpr const char* kFailCompensation = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  result = JSON_SET(IF(JSON_VALID(result), result, '{}'),
                    '$.compensation_failed_step', ?, '$.compensation_error', ?),
  status = )" DSYNC_SQL_STATUS(FAILED) R"(, version = version + 1, finished_time = NOW(3), modifier_time = NOW(3),
  last_error = ?
WHERE id = ? AND version = ?)";


// Params: code. The parent's id, for its children's parent_step_id.
constexpr const char* kStepId = "SELECT id FROM distribute_event_step WHERE code = ?";

// Params: job code. Uses idx_job_code.
// Params: node, attempt, code.
constexpr const char* kMarkStepExecuting = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(EXECUTING) R"(, node_address = ?, attempt = ?,
  started_at = NOW(3)
WHERE code = ? AND status <> )" DSYNC_SQL_STATUS(SUCCESS);

// Params: output, compensation_data, code.
constexpr const char* kMarkStepSucceeded = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(SUCCESS) R"(, executed_at = NOW(3), output = ?,
  compensation_data = ?
WHERE code = ?)";

// Params: error, compensation_data (NULL keeps the old), code.
constexpr const char* kRecordStepFailure = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(FAILED) R"(, error_details = ?,
  retry_count = retry_count + 1, compensation_data = COALESCE(?, compensation_data)
WHERE code = ?)";

// Params: error, compensation_data (NULL keeps the old), code.
constexpr const char* kRecordStepInterruption = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(FAILED) R"(, error_details = ?,
  compensation_data = COALESCE(?, compensation_data)
WHERE code = ?)";

// Params: why, code.
constexpr const char* kMarkStepInterrupted = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(FAILED) R"(, error_details = ?
WHERE code = ? AND status = )" DSYNC_SQL_STATUS(EXECUTING);

// Params: why, code.
constexpr const char* kMarkStepInterruptedUndoable = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(FAILED) R"(, error_details = ?,
  compensation_data = COALESCE(compensation_data, '{}')
WHERE code = ? AND status = )" DSYNC_SQL_STATUS(EXECUTING);

// Params: node, attempt, code.
constexpr const char* kMarkStepCompensating = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(COMPENSATING) R"(, node_address = ?, attempt = ?
WHERE code = ?)";

// Params: code.
constexpr const char* kReleaseStep = R"(
UPDATE distribute_event_step SET node_address = NULL
WHERE code = ? AND status IN ()" DSYNC_SQL_STATUS(EXECUTING) R"(, )" DSYNC_SQL_STATUS(COMPENSATING) R"())";

// Params: code.
constexpr const char* kMarkStepCompensated = R"(
UPDATE distribute_event_step SET status = )" DSYNC_SQL_STATUS(COMPENSATED) R"(, compensated_at = NOW(3) WHERE code = ?)";

// Params: error, code.
constexpr const char* kNoteCompensationInterruption = R"(
UPDATE distribute_event_step SET error_details = ? WHERE code = ?)";

// Params: error, code.
constexpr const char* kRecordCompensationFailure = R"(
UPDATE distribute_event_step SET error_details = ?,
  compensation_retry_count = compensation_retry_count + 1
WHERE code = ?)";

// A status change's result: the fence after it when its one row matched.
std::optional<Fence> Matched(uint64_t rows, const Fence& before) {
  return rows == 1 ? std::optional<Fence>(before.Next()) : std::nullopt;
}

// The plan's (or a parent's children's) rows in one multi-row INSERT IGNORE, so a
// plan of any size is one round trip; the text depends only on the row count, so the
// connection's statement cache holds one statement per plan size. Rows flagged
// `executing` go in EXECUTING with node, attempt and started_at.
// Params per row: code, job_code, tenant_id, sort, step_type, step_name, max_retry,
// payload, status, node_address, attempt, started flag, executed flag, output,
// compensation_data, parent_step_id.
std::string InsertStepsSql(size_t rows) {
  std::string sql =
      "INSERT IGNORE INTO distribute_event_step (code, job_code, tenant_id, sort, step_type, step_name, "
      "max_retry, payload, status, node_address, attempt, started_at, executed_at, output, compensation_data, "
      "parent_step_id) VALUES ";
  for (size_t i = 0; i < rows; ++i) {
    sql += i == 0 ? "" : ", ";
    sql += "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, IF(?, NOW(3), NULL), IF(?, NOW(3), NULL), ?, ?, ?)";
  }
  return sql;
}

// Multi-row statements over `total` rows: up to kExactRows rows in one statement of
// exactly that many, more in chunks of power-of-two sizes up to `max` until the rest
// fits one (37 rows: 32 + 5). A connection prepares at most kExactRows texts plus one
// per size class, instead of one per row count, and a commit group of up to
// kExactRows events writes each kind of row in one statement. Rows are never padded:
// a repeated row could apply twice.
constexpr size_t kExactRows = 16;
template <class F>
void InSizeClassChunks(size_t total, size_t max, F&& chunk /* (from, n) */) {
  size_t n = 0;
  for (size_t from = 0; from < total; from += n) {
    const size_t rest = total - from;
    n = rest <= std::min(kExactRows, max) ? rest : std::min(max, std::bit_floor(rest));
    chunk(from, n);
  }
}

std::vector<storage::Value> StepValues(std::span<const NewStep> steps, const std::string& node, int attempt,
                                       std::optional<int64_t> parent_id) {
  std::vector<storage::Value> v;
  v.reserve(steps.size() * 16);
  for (const NewStep& s : steps) {
    const bool started = s.executing || s.succeeded;
    v.emplace_back(s.code);
    v.emplace_back(s.job_code);
    v.emplace_back(s.tenant_id);
    v.emplace_back(int64_t{s.sort});
    v.emplace_back(s.type);
    v.emplace_back(s.name);
    v.emplace_back(int64_t{s.max_retry});
    v.emplace_back(s.payload);
    v.emplace_back(ToText(s.succeeded ? StepStatus::kSuccess : s.executing ? StepStatus::kExecuting : StepStatus::kPending));
    if (started) v.emplace_back(node);
    else v.emplace_back(std::monostate{});
    v.emplace_back(int64_t{started ? attempt : 0});
    v.emplace_back(started);
    v.emplace_back(s.succeeded);
    for (const std::optional<std::string>* json : {&s.output, &s.compensation}) {
      if (*json) v.emplace_back(**json);
      else v.emplace_back(std::monostate{});
    }
    if (parent_id) v.emplace_back(*parent_id);
    else v.emplace_back(std::monostate{});
  }
  return v;
}

}  // namespace

std::optional<Fence> ClaimEvent(storage::Connection& c, const Fence& fence, const std::string& node,
                const std::string& phase, const std::string& to, const std::string& why) {
  return Matched(c.Execute(kClaimEvent, node, to, why, fence.id, fence.version, node, phase), fence);
}

std::optional<ClaimState> ReadClaimState(storage::Connection& c, const Fence& fence) {
  auto rs = c.Query(kReadClaimState, fence.id, fence.version);
  if (!rs->next()) return std::nullopt;
  return ClaimState{std::string(rs->getString(1)), rs->getInt(2), rs->getInt(3)};
}

bool TouchEvent(storage::Connection& c, const Fence& fence, int progress) {
  return c.Execute(kTouchEvent, progress, fence.id, fence.version) == 1;
}

bool OwnsEvent(storage::Connection& c, const Fence& fence) {
  return c.QueryInt(kOwnsEvent, fence.id, fence.version).has_value();
}

std::optional<Fence> SucceedEvent(storage::Connection& c, const Fence& fence, const std::string& node,
                  const std::string& result_json) {
  return Matched(c.Execute(kSucceedEvent, node, ToText(EventStatus::kSuccess), "all steps succeeded", result_json, fence.id,
                           fence.version),
                 fence);
}

std::optional<Fence> ScheduleEventRetry(storage::Connection& c, const Fence& fence, const std::string& node,
                        int retry_increment, Millis backoff, const std::string& error,
                        const std::string& why, int reset_increment) {
  return Matched(c.Execute(kScheduleEventRetry, node, ToText(EventStatus::kPending), why, retry_increment, reset_increment,
                           Micros(backoff), error, fence.id, fence.version),
                 fence);
}

std::optional<Fence> HandOnEvent(storage::Connection& c, const Fence& fence, const std::string& node,
                                 const std::string& route, const std::string& why) {
  return Matched(c.Execute(kHandOnEvent, node, ToText(EventStatus::kPending), why, route, fence.id, fence.version), fence);
}

std::optional<Fence> StartCompensation(storage::Connection& c, const Fence& fence, const std::string& node,
                       const std::string& result_json, const std::string& error) {
  return Matched(c.Execute(kStartCompensation, node, ToText(EventStatus::kCompensating), error, result_json, error, fence.id,
                           fence.version),
                 fence);
}

std::optional<Fence> CompleteCompensation(storage::Connection& c, const Fence& fence,
                          const std::string& node, int progress) {
  return Matched(c.Execute(kCompleteCompensation, node, ToText(EventStatus::kCompensated), "every completed step compensated",
                           progress, fence.id, fence.version),
                 fence);
}

bool LockEvent(storage::Connection& c, const Fence& fence) {
  std::optional<int64_t> v = c.QueryInt("SELECT version FROM distribute_event WHERE id = ? FOR UPDATE", fence.id);
  return v && *v == fence.version;
}

namespace {

// Batched statements (transitions.h): lists padded to a power of two by repeating
// the last entry, so a connection caches one statement text per size class.
size_t SizeClass(size_t n) {
  size_t p = 1;
  while (p < n) p *= 2;
  return p;
}

using storage::Marks;

// ELT(FIELD(<key>, <n marks>), <n marks>): the row's own value from a list.
std::string Pick(const char* key, size_t n, const char* cast = nullptr) {
  std::string e = "ELT(FIELD(" + std::string(key) + ", " + Marks(n) + "), " + Marks(n) + ")";
  return cast ? "CAST(" + e + " AS " + cast + ")" : e;
}

template <class T>
void Append(std::vector<storage::Value>& out, const std::vector<T>& list) {
  for (const T& v : list) {
    if constexpr (std::is_same_v<T, std::optional<std::string>>) {
      if (v) out.emplace_back(*v); else out.emplace_back(std::monostate{});
    } else {
      out.emplace_back(v);
    }
  }
}

template <class T>
std::vector<T> Padded(std::vector<T> v, size_t n) {
  while (v.size() < n) v.push_back(v.back());
  return v;
}

// LockEvents and ReadVersions: id -> version of those of `ids` that exist.
std::map<int64_t, int> SelectVersions(storage::Connection& c, const std::vector<int64_t>& ids, bool lock) {
  std::map<int64_t, int> out;
  if (ids.empty()) return out;
  const size_t n = SizeClass(ids.size());
  std::vector<storage::Value> v;
  Append(v, Padded(ids, n));
  auto rs = c.Query("SELECT id, version FROM distribute_event FORCE INDEX (PRIMARY) WHERE id IN (" + Marks(n) + ")" +
                        (lock ? " FOR UPDATE" : ""),
                    storage::Values(v));
  while (rs->next()) out[rs->getInt64(1)] = rs->getInt(2);
  return out;
}

}  // namespace

std::map<int64_t, int> LockEvents(storage::Connection& c, const std::vector<int64_t>& ids) {
  return SelectVersions(c, ids, /*lock=*/true);
}

std::map<int64_t, int> ReadVersions(storage::Connection& c, const std::vector<int64_t>& ids) {
  return SelectVersions(c, ids, /*lock=*/false);
}

std::vector<int64_t> ClaimFirstAttempts(storage::Connection& c, const std::vector<ClaimRow>& rows,
                                        const std::string& node) {
  if (rows.empty()) return {};
  const size_t n = SizeClass(rows.size());
  std::vector<int64_t> ids, versions, next_versions;
  for (const ClaimRow& r : rows) {
    ids.push_back(r.id);
    versions.push_back(r.version);
    next_versions.push_back(r.version + 1);
  }
  ids = Padded(std::move(ids), n);
  versions = Padded(std::move(versions), n);
  next_versions = Padded(std::move(next_versions), n);
  // Per row exactly kClaimEvent at attempt 0, phase FORWARD.
  const std::string sql = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET " DSYNC_APPEND_PROCESS_LOG
                          ",\n  status = " DSYNC_SQL_STATUS(RUNNING) ", version = version + 1, attempt = attempt + 1,"
                          " started_time = NOW(3), modifier_time = NOW(3)\nWHERE id IN (" +
                          Marks(n) +
                          ") AND status = " DSYNC_SQL_STATUS(ASSIGNED) " AND node_address = ? AND phase = 'FORWARD'"
                          " AND attempt = 0\n  AND version = " + Pick("id", n, "SIGNED");
  std::vector<storage::Value> v{node, ToText(EventStatus::kRunning), std::string("claimed, attempt 1")};
  Append(v, ids);
  v.emplace_back(node);
  Append(v, ids);
  Append(v, versions);
  const uint64_t matched = c.Execute(sql, storage::Values(v));
  std::vector<int64_t> claimed;
  if (matched == rows.size()) {
    for (const ClaimRow& r : rows) claimed.push_back(r.id);
    return claimed;
  }
  // Some were reset or reassigned since the poll: read back which rows this
  // transaction claimed (RUNNING here at attempt 1, one version up).
  const std::string back = "SELECT id FROM distribute_event FORCE INDEX (PRIMARY) WHERE id IN (" + Marks(n) +
                           ") AND status = " DSYNC_SQL_STATUS(RUNNING) " AND node_address = ? AND attempt = 1 AND version = " +
                           Pick("id", n, "SIGNED");
  std::vector<storage::Value> bv;
  Append(bv, ids);
  bv.emplace_back(node);
  Append(bv, ids);
  Append(bv, next_versions);
  auto rs = c.Query(back, storage::Values(bv));
  while (rs->next()) claimed.push_back(rs->getInt64(1));
  return claimed;
}

namespace {
std::string RowMarks(size_t width) { return "(" + Marks(width) + ")"; }
}  // namespace

void InsertDeferredRow(storage::Connection& c, const DeferredRow& row) {
  c.Execute(row.head + " " + RowMarks(row.values.size()) + (row.tail.empty() ? "" : " " + row.tail),
            storage::Values(row.values));
}

void InsertDeferredRows(storage::Connection& c, const std::vector<const DeferredRow*>& rows) {
  constexpr size_t kChunk = 256;
  // Rows of one statement: same head, tail and width, in the order they came.
  std::map<std::tuple<std::string, std::string, size_t>, std::vector<const DeferredRow*>> statements;
  for (const DeferredRow* r : rows) statements[{r->head, r->tail, r->values.size()}].push_back(r);
  for (const auto& [key, list] : statements) {
    const auto& [head, tail, width] = key;
    InSizeClassChunks(list.size(), kChunk, [&](size_t from, size_t n) {
      std::string sql = head + " ";
      std::vector<storage::Value> v;
      v.reserve(n * width);
      for (size_t i = 0; i < n; ++i) {
        sql += (i == 0 ? "" : ", ") + RowMarks(width);
        v.insert(v.end(), list[from + i]->values.begin(), list[from + i]->values.end());
      }
      if (!tail.empty()) sql += " " + tail;
      c.Execute(sql, storage::Values(v));
    });
  }
}

bool ApplyStepSuccesses(storage::Connection& c, const std::vector<StepSuccess>& successes,
                        const std::string& node) {
  if (successes.empty()) return true;
  std::vector<std::string> codes;
  std::vector<std::optional<std::string>> outputs, compensations;
  std::vector<std::string> next_codes;
  std::vector<int64_t> next_attempts;
  std::vector<int64_t> touch_ids, touch_versions, touch_progress;
  std::vector<int64_t> done_ids, done_versions;
  std::vector<std::string> done_results;
  std::vector<NewStep> plans;  // claims at commit: their plans' rows
  std::vector<int64_t> claim_done_ids, claim_done_versions, claim_run_ids, claim_run_versions, claim_run_progress;
  std::vector<std::string> claim_done_results;
  std::map<int64_t, int> locked;  // id -> version: the rest, fenced by LockEvents
  int claim_attempt = 1;
  for (const StepSuccess& s : successes) {
    if (s.claim) {
      plans.insert(plans.end(), s.plan.begin(), s.plan.end());
      claim_attempt = s.attempt;
      if (s.finish) {
        claim_done_ids.push_back(s.event_id);
        claim_done_versions.push_back(s.version);
        claim_done_results.push_back(s.result_json);
      } else {
        claim_run_ids.push_back(s.event_id);
        claim_run_versions.push_back(s.version);
        claim_run_progress.push_back(s.progress);
      }
      continue;
    }
    codes.push_back(s.step_code);
    outputs.push_back(s.output);
    compensations.push_back(s.compensation);
    if (!s.next_code.empty()) {
      next_codes.push_back(s.next_code);
      next_attempts.push_back(s.attempt);
    }
    if (s.finish) {
      done_ids.push_back(s.event_id);
      done_versions.push_back(s.version);
      done_results.push_back(s.result_json);
    } else if (s.touch) {
      touch_ids.push_back(s.event_id);
      touch_versions.push_back(s.version);
      touch_progress.push_back(s.progress);
    } else {
      locked[s.event_id] = s.version;
    }
  }
  // First the fence: each event's row is written (at its owner's version) or locked,
  // and stays so until the caller's transaction ends.
  if (!locked.empty()) {  // events whose row this commit does not write
    std::vector<int64_t> ids;
    for (const auto& [id, _] : locked) ids.push_back(id);
    if (LockEvents(c, ids) != locked) return false;
  }
  if (!touch_ids.empty()) {  // kTouchEvent per row
    const size_t n = SizeClass(touch_ids.size());
    const std::string sql = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET modifier_time = NOW(3), progress = " +
                            Pick("id", n, "SIGNED") + " WHERE id IN (" + Marks(n) + ") AND version = " +
                            Pick("id", n, "SIGNED");
    auto pi = Padded(touch_ids, n);
    std::vector<storage::Value> v;
    Append(v, pi);
    Append(v, Padded(touch_progress, n));
    Append(v, pi);
    Append(v, pi);
    Append(v, Padded(touch_versions, n));
    if (c.Execute(sql, storage::Values(v)) != touch_ids.size()) return false;
  }
  if (!done_ids.empty()) {  // kSucceedEvent per row
    const size_t n = SizeClass(done_ids.size());
    const std::string sql = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET " DSYNC_APPEND_PROCESS_LOG
                            ",\n  status = " DSYNC_SQL_STATUS(SUCCESS) ", version = version + 1, finished_time = NOW(3),"
                            " modifier_time = NOW(3), progress = 100, result = " +
                            Pick("id", n) + "\nWHERE id IN (" + Marks(n) + ") AND version = " +
                            Pick("id", n, "SIGNED");
    auto pi = Padded(done_ids, n);
    std::vector<storage::Value> v{node, ToText(EventStatus::kSuccess), std::string("all steps succeeded")};
    Append(v, pi);
    Append(v, Padded(done_results, n));
    Append(v, pi);
    Append(v, pi);
    Append(v, Padded(done_versions, n));
    if (c.Execute(sql, storage::Values(v)) != done_ids.size()) return false;
  }
  // Claims at commit: per row exactly ClaimFirstAttempts' claim, and for the finished
  // ones SucceedEvent's end, in one status change. `set`: the columns besides the
  // claim's, one of them `= <pick>` of `picked` (per id).
  auto claim = [&](const std::vector<int64_t>& ids, const std::vector<int64_t>& versions, const std::string& to,
                   const char* why, auto&& set, const auto& picked) {
    if (ids.empty()) return true;
    const size_t n = SizeClass(ids.size());
    const std::string sql = "UPDATE distribute_event FORCE INDEX (PRIMARY) SET " DSYNC_APPEND_PROCESS_LOG
                            ",\n  status = ?, version = version + 1, attempt = attempt + 1, started_time = NOW(3), "
                            "modifier_time = NOW(3), " + set(Pick("id", n)) + "\nWHERE id IN (" + Marks(n) +
                            ") AND status = " DSYNC_SQL_STATUS(ASSIGNED) " AND node_address = ? AND phase = 'FORWARD' AND attempt = 0"
                            " AND version = " + Pick("id", n, "SIGNED");
    auto pi = Padded(ids, n);
    std::vector<storage::Value> v{node, to, std::string(why), to};
    Append(v, pi);
    Append(v, Padded(picked, n));
    Append(v, pi);
    v.emplace_back(node);
    Append(v, pi);
    Append(v, Padded(versions, n));
    return c.Execute(sql, storage::Values(v)) == ids.size();
  };
  if (!claim(claim_done_ids, claim_done_versions, ToText(EventStatus::kSuccess), "claimed, attempt 1, and all steps succeeded",
             [](const std::string& pick) { return "finished_time = NOW(3), progress = 100, result = " + pick; },
             claim_done_results) ||
      !claim(claim_run_ids, claim_run_versions, ToText(EventStatus::kRunning), "claimed, attempt 1",
             [](const std::string& pick) { return "progress = CAST(" + pick + " AS SIGNED)"; },
             claim_run_progress)) {
    return false;
  }
  // Then the rows: the events' rows are locked at their owners' versions from here on.
  {  // the handlers' rows
    std::vector<const DeferredRow*> rows;
    for (const StepSuccess& s : successes) {
      for (const DeferredRow& r : s.rows) rows.push_back(&r);
    }
    if (!rows.empty()) InsertDeferredRows(c, rows);
  }
  if (!plans.empty() && InsertSteps(c, plans, node, claim_attempt) != plans.size()) {
    return false;  // rows of such a code existed: that event needs the full claim (ClaimTx)
  }
  if (!codes.empty()) {  // kMarkStepSucceeded per row
    const size_t n = SizeClass(codes.size());
    const std::string sql = "UPDATE distribute_event_step FORCE INDEX (uk_code) SET status = " DSYNC_SQL_STATUS(SUCCESS) ", executed_at = NOW(3), output = " +
                            Pick("code", n) + ", compensation_data = " + Pick("code", n) +
                            " WHERE code IN (" + Marks(n) + ")";
    auto pc = Padded(codes, n);
    std::vector<storage::Value> v;
    Append(v, pc);
    Append(v, Padded(outputs, n));
    Append(v, pc);
    Append(v, Padded(compensations, n));
    Append(v, pc);
    c.Execute(sql, storage::Values(v));
  }
  if (!next_codes.empty()) {  // kMarkStepExecuting per row
    const size_t n = SizeClass(next_codes.size());
    const std::string sql = "UPDATE distribute_event_step FORCE INDEX (uk_code) SET status = " DSYNC_SQL_STATUS(EXECUTING) ", node_address = ?, attempt = " +
                            Pick("code", n, "SIGNED") + ", started_at = NOW(3) WHERE code IN (" + Marks(n) +
                            ") AND status <> " DSYNC_SQL_STATUS(SUCCESS);
    auto pc = Padded(next_codes, n);
    std::vector<storage::Value> v{node};
    Append(v, pc);
    Append(v, Padded(next_attempts, n));
    Append(v, pc);
    c.Execute(sql, storage::Values(v));
  }
  return true;
}

std::optional<Fence> FailEvent(storage::Connection& c, const Fence& fence, const std::string& node,
               const std::string& result_json, const std::string& error) {
  return Matched(c.Execute(kFailEvent, node, ToText(EventStatus::kFailed), error, result_json, error, fence.id, fence.version),
                 fence);
}

std::optional<Fence> FailCompensation(storage::Connection& c, const Fence& fence, const std::string& node,
                      const std::string& step_name, const std::string& error) {
  std::string why = "compensation of '" + step_name + "' failed: " + error;
  return Matched(c.Execute(kFailCompensation, node, ToText(EventStatus::kFailed), why, step_name, error, why, fence.id,
                           fence.version),
                 fence);
}

uint64_t InsertSteps(storage::Connection& c, const std::vector<NewStep>& steps,
                     const std::string& node, int attempt) {
  uint64_t inserted = 0;
  InSizeClassChunks(steps.size(), 512, [&](size_t from, size_t n) {
    inserted += c.Execute(InsertStepsSql(n), storage::Values(StepValues(std::span(steps).subspan(from, n), node,
                                                                         attempt, std::nullopt)));
  });
  return inserted;
}

uint64_t InsertChildSteps(storage::Connection& c, const std::string& parent_code,
                          const std::vector<NewStep>& children) {
  if (children.empty()) return 0;
  std::optional<int64_t> parent_id = c.QueryInt(kStepId, parent_code);
  return c.Execute(InsertStepsSql(children.size()),
                   storage::Values(StepValues(children, "", 0, parent_id)));
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

void RecordStepInterruption(storage::Connection& c, const std::string& code, const std::string& error,
                            const std::optional<std::string>& compensation_json) {
  c.Execute(kRecordStepInterruption, error, compensation_json, code);
}

void MarkStepInterrupted(storage::Connection& c, const std::string& code, const std::string& why) {
  c.Execute(kMarkStepInterrupted, why, code);
}

void MarkStepInterruptedUndoable(storage::Connection& c, const std::string& code, const std::string& why) {
  c.Execute(kMarkStepInterruptedUndoable, why, code);
}

void MarkStepCompensating(storage::Connection& c, const std::string& code, const std::string& node,
                          int attempt) {
  c.Execute(kMarkStepCompensating, node, attempt, code);
}

void ReleaseStep(storage::Connection& c, const std::string& code) { c.Execute(kReleaseStep, code); }

void MarkStepCompensated(storage::Connection& c, const std::string& code) {
  c.Execute(kMarkStepCompensated, code);
}

void NoteCompensationInterruption(storage::Connection& c, const std::string& code, const std::string& error) {
  c.Execute(kNoteCompensationInterruption, error, code);
}

void RecordCompensationFailure(storage::Connection& c, const std::string& code,
                               const std::string& error) {
  c.Execute(kRecordCompensationFailure, error, code);
}

}  // namespace dsync::events
