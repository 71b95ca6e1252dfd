// The owner's transitions (docs/event-lifecycle.md items 3-5 and 7): claim, step success
// and failure, compensate, retry with backoff, fail, hand on (per-step routing); and the
// step rows' statements. One named function per statement on distribute_event and
// distribute_event_step, each taking the connection of the caller's transaction. Used
// by the saga engine and its commit groups (saga/).
//
// Fencing (docs/event-lifecycle.md): every event statement below is conditional on
// the Fence (`id = ? AND version = ?`, events/fence.h). A status change returns the
// fence it leaves the event at (version + 1) and nullopt when it matched no row, i.e.
// the caller no longer owns the event at that version and must roll back; the other
// fenced statements return false then. ClaimEvent takes the assigned fence.
// Step statements carry no fence of their own: callers run them only inside a
// transaction whose first statement was a fenced event statement (which also holds
// the event's row lock until commit).
//
// Status changes append {"at","node","from","to","why"} to the event's process_log
// (a JSON array trimmed to the last kProcessLogSize entries) in the same statement.
//
// REQUIRES: every function runs inside the caller's transaction
// (storage::ConnectionPool::Transact or a storage::Transaction); statements throw
// DbError.
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "events/fence.h"
#include "events/process_log.h"
#include "events/rows.h"
#include "storage/connection.h"

namespace dsync::events {


// ---- distribute_event ------------------------------------------------------------

// ASSIGNED -> RUNNING (phase FORWARD) or COMPENSATING (phase COMPENSATE), version+1,
// attempt+1, started_time and modifier_time = NOW(3), only while the phase is
// `phase` (the caller acts on it; `to` is the matching status, for the log).
// False: not ASSIGNED to `node` at `version` in that phase any more.
std::optional<Fence> ClaimEvent(storage::Connection& c, const Fence& fence, const std::string& node,
                const std::string& phase, const std::string& to, const std::string& why);

// phase, retry_count and reset_count at `version` (a plain read), for callers that did
// not poll them.
struct ClaimState {
  std::string phase;
  int retry_count = 0;
  int reset_count = 0;
};
std::optional<ClaimState> ReadClaimState(storage::Connection& c, const Fence& fence);

// The owner's fence: modifier_time = NOW(3), progress = `progress`.
bool TouchEvent(storage::Connection& c, const Fence& fence, int progress);

// A fenced read (no write): true while the event is still at `version`.
bool OwnsEvent(storage::Connection& c, const Fence& fence);

// RUNNING -> SUCCESS: version+1, finished_time, progress 100, result.
std::optional<Fence> SucceedEvent(storage::Connection& c, const Fence& fence, const std::string& node,
                  const std::string& result_json);

// Hand-on (docs/event-lifecycle.md item 7): the owner does not reach the datasources
// its event's next step (or next compensation) needs, so it gives the event up for a
// node that does. RUNNING or COMPENSATING -> PENDING, node cleared, version+1,
// next_run_time = modifier_time = NOW(3), route = `route` (what that step needs,
// config/step_datasources.h RouteKey); phase, retry_count, reset_count and last_error
// unchanged: nobody failed.
//   UPDATE distribute_event SET process_log = <append {node, status -> PENDING, why}>,
//     status = 'PENDING', node_address = NULL, version = version + 1,
//     next_run_time = NOW(3), modifier_time = NOW(3), route = ?
//   WHERE id = ? AND version = ? AND status IN ('RUNNING', 'COMPENSATING')
std::optional<Fence> HandOnEvent(storage::Connection& c, const Fence& fence, const std::string& node,
                                 const std::string& route, const std::string& why);

// RUNNING or COMPENSATING -> PENDING with next_run_time = NOW(3) + backoff, node
// cleared, version+1, retry_count + `retry_increment` (1 for a forward step's failure,
// 0 for a compensation's or one that was not the step's fault), reset_count +
// `reset_increment` (1 for a failure that was not the step's fault: the database
// connection was lost; docs/event-lifecycle.md, "Retry arithmetic"), last_error. The
// phase is unchanged.
std::optional<Fence> ScheduleEventRetry(storage::Connection& c, const Fence& fence, const std::string& node,
                        int retry_increment, Millis backoff, const std::string& error,
                        const std::string& why, int reset_increment = 0);

// RUNNING -> COMPENSATING, phase COMPENSATE, version+1; `result_json` records the
// original failure ({"failed_step":..., "error":...}); last_error = `error`.
std::optional<Fence> StartCompensation(storage::Connection& c, const Fence& fence, const std::string& node,
                       const std::string& result_json, const std::string& error);

// COMPENSATING -> COMPENSATED: version+1, finished_time, progress; result unchanged
// (it still holds the original failure).
std::optional<Fence> CompleteCompensation(storage::Connection& c, const Fence& fence,
                          const std::string& node, int progress);

// -> FAILED: version+1, finished_time, result, last_error. For events rejected before
// any step ran (unknown topic, payload not JSON).
std::optional<Fence> FailEvent(storage::Connection& c, const Fence& fence, const std::string& node,
               const std::string& result_json, const std::string& error);

// COMPENSATING -> FAILED: compensation gave up. Adds compensation_failed_step and
// compensation_error to the result that holds the original failure.
std::optional<Fence> FailCompensation(storage::Connection& c, const Fence& fence, const std::string& node,
                      const std::string& step_name, const std::string& error);

// The fence as a locking read: true while the event is at `version`; its row then
// stays locked (no one can change it) until the caller's transaction ends. Cheaper
// than TouchEvent (no row write); the group commit's fence.
bool LockEvent(storage::Connection& c, const Fence& fence);

// ---- batched: many events per statement ------------------------------------------
//
// Each is one multi-row statement whose per-row values are picked by
// ELT(FIELD(id, <ids>), <values>), so per row it is exactly the single-event
// statement above. Lists are padded to a power of two by repeating their last entry
// (a row matches once), so a connection caches one statement per size class.

// Locks the events' rows (until the caller's transaction ends) and returns id ->
// current version of those that exist.
std::map<int64_t, int> LockEvents(storage::Connection& c, const std::vector<int64_t>& ids);
// The same without locking (what a rolled-back group reads to tell which members lost
// their event: versions only grow).
std::map<int64_t, int> ReadVersions(storage::Connection& c, const std::vector<int64_t>& ids);

// A step row to insert (InsertSteps, InsertChildSteps, StepSuccess::plan).
struct NewStep {
  std::string code;      // "<event code>#<position>" or "<parent code>.<n>"
  std::string job_code;  // the event code
  std::string tenant_id;
  int sort = 0;          // plan position (children: their parent's)
  std::string type;
  std::string name;
  int max_retry = 0;
  std::string payload;   // the step's input params as JSON text
  bool executing = false;  // inserted EXECUTING (node, attempt, started_at) instead of PENDING
  // Inserted SUCCESS (node, attempt, started_at, executed_at, output,
  // compensation_data): a step that ran before its claim (StepSuccess::claim).
  bool succeeded = false;
  std::optional<std::string> output = std::nullopt;
  std::optional<std::string> compensation = std::nullopt;
};

struct ClaimRow {
  int64_t id = 0;
  int version = 0;  // as assigned
};
// First claims (attempt 0 -> 1) of FORWARD events ASSIGNED to `node`: ClaimEvent for
// many at once. Returns the ids claimed (all of them unless some were reset or
// reassigned meanwhile).
std::vector<int64_t> ClaimFirstAttempts(storage::Connection& c, const std::vector<ClaimRow>& rows,
                                        const std::string& node);

// A row queued by StepContext::InsertAtCommit.
struct DeferredRow {
  std::string head;  // "INSERT INTO t (a, b) VALUES"
  std::string tail;  // "" or "ON DUPLICATE KEY UPDATE ..."
  std::vector<storage::Value> values;
};
// The rows as multi-row INSERTs: one per (head, tail, row width), in chunks.
void InsertDeferredRows(storage::Connection& c, const std::vector<const DeferredRow*>& rows);
// One row at once (no group): `<head> (?, ...) <tail>`.
void InsertDeferredRow(storage::Connection& c, const DeferredRow& row);

// One event's step success as the group commit applies it.
struct StepSuccess {
  int64_t event_id = 0;
  int version = 0;       // the owner's; ApplyStepSuccesses fences the commit by it
  std::string step_code;
  std::optional<std::string> output;
  std::optional<std::string> compensation;
  std::string next_code;  // the step to mark EXECUTING; empty when the event finishes
  int attempt = 0;        // the claim's attempt, for the next step
  bool finish = false;    // the last step: the event turns SUCCESS with `result`
  std::string result_json;
  int progress = 0;       // not finishing: the event's progress
  bool touch = true;      // not finishing: write progress and modifier_time
  std::vector<DeferredRow> rows;  // the handler's InsertAtCommit rows
  // A claim made at this commit (SagaEngine::ClaimBatch, AssignedEvent::claim_deferred):
  // `version` is the assigned one, the event is still ASSIGNED (attempt 0), and
  // `plan` holds its whole plan, this step `succeeded` (with its output and
  // compensation data) and the next `executing`. Applied as the claim, the plan's
  // INSERT and the step's end in one: ASSIGNED -> SUCCESS (finish) or RUNNING, with
  // attempt 1 and started_time; `step_code`, `next_code` and `touch` are not used.
  bool claim = false;
  std::vector<NewStep> plan;
};
// The group commit's writes and its fence, for many events: first each event's row,
// written at its owner's version (TouchEvent, SucceedEvent, or the claim at commit) or
// else locked (LockEvents), so the rows stay the owners' until the caller's
// transaction ends; then the handlers' rows, the claims' InsertSteps,
// MarkStepSucceeded and MarkStepExecuting (next). A group of 1-step claims is two
// statements (three with handler rows) up to 16 events. False when an event was not at
// its version or a claimed plan's rows existed already: the caller must roll back
// (ReadVersions then tells which events moved on).
bool ApplyStepSuccesses(storage::Connection& c, const std::vector<StepSuccess>& successes,
                        const std::string& node);

// ---- distribute_event_step -------------------------------------------------------

// INSERT IGNORE of plan rows by code: one multi-row statement up to 16 rows, more in
// power-of-two chunks. Returns rows inserted.
uint64_t InsertSteps(storage::Connection& c, const std::vector<NewStep>& steps,
                     const std::string& node, int attempt);

// Child rows of `parent_code` (parent_step_id = the parent's id), INSERT IGNORE:
// two statements (the parent's id, then the rows).
uint64_t InsertChildSteps(storage::Connection& c, const std::string& parent_code,
                          const std::vector<NewStep>& children);

// PENDING/EXECUTING/FAILED -> EXECUTING (node, attempt, started_at). Never a SUCCESS step.
void MarkStepExecuting(storage::Connection& c, const std::string& code, const std::string& node,
                       int attempt);

// -> SUCCESS: executed_at = NOW(3), output, compensation_data.
void MarkStepSucceeded(storage::Connection& c, const std::string& code,
                       const std::optional<std::string>& output_json,
                       const std::optional<std::string>& compensation_json);

// A forward failure: status FAILED, error_details, retry_count+1; compensation data
// kept unless the failure saved new data (a half-applied step).
void RecordStepFailure(storage::Connection& c, const std::string& code, const std::string& error,
                       const std::optional<std::string>& compensation_json);

// A forward failure that was not the step's fault (the database connection was lost):
// status FAILED, error_details, compensation data kept unless new data was saved;
// retry_count unchanged.
void RecordStepInterruption(storage::Connection& c, const std::string& code, const std::string& error,
                            const std::optional<std::string>& compensation_json);

// EXECUTING -> FAILED for a step whose run was interrupted (its owner lost the event)
// when the event turns to compensation instead of re-running it: error_details says
// so; retry_count is unchanged.
void MarkStepInterrupted(storage::Connection& c, const std::string& code, const std::string& why);

// As MarkStepInterrupted, for a step whose handler can undo an interrupted attempt
// (StepHandler::CompensatesInterrupted): compensation_data becomes {} when NULL, so the
// step is compensated with the others, now and by any later owner.
void MarkStepInterruptedUndoable(storage::Connection& c, const std::string& code, const std::string& why);

// SUCCESS (or FAILED with compensation data, or COMPENSATING again) -> COMPENSATING.
void MarkStepCompensating(storage::Connection& c, const std::string& code, const std::string& node,
                          int attempt);

// The step a hand-on stops before (EXECUTING, or COMPENSATING): node_address cleared
// (nobody runs it now; the next owner's MarkStepExecuting / MarkStepCompensating sets
// its own), status unchanged (an EXECUTING step may have been interrupted mid-flight by
// an earlier owner: it stays what the rules of such a step need).
void ReleaseStep(storage::Connection& c, const std::string& code);

// COMPENSATING -> COMPENSATED: compensated_at = NOW(3).
void MarkStepCompensated(storage::Connection& c, const std::string& code);

// A compensation that failed not by its own fault (the database connection was lost):
// error_details only; compensation_retry_count unchanged; stays COMPENSATING.
void NoteCompensationInterruption(storage::Connection& c, const std::string& code, const std::string& error);

// A failed compensation: error_details, compensation_retry_count+1; stays COMPENSATING.
void RecordCompensationFailure(storage::Connection& c, const std::string& code,
                               const std::string& error);

}  // namespace dsync::events
