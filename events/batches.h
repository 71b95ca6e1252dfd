// Batch completion (V012 distribute_batch; docs/event-lifecycle.md "Batches"): the rows
// of batches that name a completion event, and the one transaction that produces it.
// A batch is (service, batch_code) (V015): two services may use the same batch code,
// each with its own events, row and completion event.
//
//   INSERT INTO distribute_batch (...) VALUES (...) ON DUPLICATE KEY UPDATE batch_code = batch_code
//   SELECT ... FROM distribute_batch WHERE status = 'OPEN' AND service = ? AND batch_code > ? ORDER BY batch_code LIMIT ?
//   -- completion, one transaction:
//   SELECT status FROM distribute_batch WHERE service = ? AND batch_code = ? FOR UPDATE
//   INSERT INTO distribute_event (...)           -- events/produce.h
//   UPDATE distribute_batch SET status = 'COMPLETED', ... WHERE service = ? AND batch_code = ? AND status = 'OPEN'
//
// The completion event's code is derived from the service and the batch code
// (CompletionCode), so uk_code makes it exactly once even if two leaders overlap or one
// dies mid-way. Its insert and the COMPLETED mark commit together, under the batch row's
// lock, so an event already holding that code while the row is still OPEN was not
// produced by any completer: a producer wrote it (the API and the CLI refuse codes
// starting with "done:", events/produce.h; plain SQL cannot be stopped). The batch is
// then marked CONFLICT with the reason, never COMPLETED on the strength of someone
// else's event.
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/service.h"
#include "events/produce.h"
#include "storage/connection.h"

namespace dsync::events {

// A batch's completion event as asked for.
struct BatchCompletionRow {
  std::string batch_code;
  std::string tenant_id = "0";
  std::string topic;
  std::string payload;                  // JSON object text; "" = {}
  std::optional<int64_t> expected_events;
  std::string service = kDefaultService;     // whose leader completes it; the completion event's service
};

// "done:<service>:<batch_code>" when that fits in 64 characters and the service has no
// ':'; otherwise "done:", the first 42 characters of "<service>:<batch_code>", "~" and
// 16 hex digits of a hash of both (64 characters at most). Starts with
// kReservedCodePrefix.
std::string CompletionCode(const std::string& service, const std::string& batch_code);

// Records that the batch wants a completion event. An existing row for (service, code)
// is left as it is (re-posting a batch is idempotent). Throws DbError.
void InsertBatchCompletion(storage::Connection& c, const BatchCompletionRow& row);

// Open batches of `service` after `after` (batch_code order), at most `limit`. Throws
// DbError.
std::vector<BatchCompletionRow> ReadOpenBatches(storage::Connection& c, const std::string& service,
                                                const std::string& after, int limit);

// The batch's events of `service` by status (one GROUP BY over idx_batch_code).
// Throws DbError.
std::map<std::string, int64_t> CountBatchEvents(storage::Connection& c, const std::string& service,
                                                const std::string& batch_code);

// Locks the batch's row (FOR UPDATE) and tells whether it is still OPEN: taken before
// the count that decides a completion, so that count and the completion are one
// transaction and no other completer interleaves. REQUIRES: inside the caller's
// transaction. Throws DbError.
bool LockOpenBatch(storage::Connection& c, const std::string& service, const std::string& batch_code);

struct CompletionOutcome {
  enum Kind { kCompleted, kConflict, kNotOpen };
  Kind kind = kNotOpen;
  std::string conflict;  // kConflict: which event holds the code (one line)
};

// Produces `event` (event.service is the batch's service) and marks the batch COMPLETED
// with `counts_json`; when an event with the completion code exists already, marks the
// batch CONFLICT instead, naming that event. REQUIRES: inside the caller's transaction,
// after LockOpenBatch returned true in it. Throws DbError.
CompletionOutcome CompleteBatch(storage::Connection& c, const std::string& batch_code, const NewEventRow& event,
                                const std::string& counts_json);

// A batch row as operators see it (`dsync events --batch`, GET /v1/batches/CODE).
struct BatchState {
  std::string status;           // OPEN, COMPLETED or CONFLICT
  std::string completion_code;  // empty while OPEN
  std::string conflict;         // CONFLICT: why
};

// The row of (service, batch_code); nullopt when the batch asked for no completion
// event (or its row was purged). Throws DbError.
std::optional<BatchState> ReadBatchState(storage::Connection& c, const std::string& service,
                                         const std::string& batch_code);

// Deletes up to `limit` COMPLETED rows of `service` completed longer than `older_than`
// ago (retention). Returns how many. Throws DbError.
int64_t PurgeCompletedBatches(storage::Connection& c, const std::string& service, Millis older_than, int limit);

}  // namespace dsync::events
