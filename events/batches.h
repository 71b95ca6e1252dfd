// Batch completion (V012 distribute_batch; docs/event-lifecycle.md "Batches"): the rows
// of batches that name a completion event, and the one transaction that produces it.
//
//   INSERT INTO distribute_batch (...) VALUES (...) ON DUPLICATE KEY UPDATE batch_code = batch_code
//   SELECT ... FROM distribute_batch WHERE status = 'OPEN' AND batch_code > ? ORDER BY batch_code LIMIT ?
//   -- completion, one transaction:
//   SELECT status FROM distribute_batch WHERE batch_code = ? FOR UPDATE
//   INSERT INTO distribute_event (...)           -- events/produce.h; a duplicate code is a no-op
//   UPDATE distribute_batch SET status = 'COMPLETED', ... WHERE batch_code = ? AND status = 'OPEN'
//
// The completion event's code is derived from the batch code (CompletionCode), so
// uk_code makes it exactly once even if two leaders overlap or one dies mid-way.
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
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
  std::string service = "kbs-sync";     // whose leader completes it; the completion event's service
};

// "done:<batch_code>"; a batch code longer than 59 characters keeps its first 42,
// then "~" and 16 hex digits of a hash of the whole code (64 characters in all).
std::string CompletionCode(const std::string& batch_code);

// Records that `row.batch_code` wants a completion event. An existing row for the
// code is left as it is (re-posting a batch is idempotent). Throws DbError.
void InsertBatchCompletion(storage::Connection& c, const BatchCompletionRow& row);

// Open batches of `service` after `after` (batch_code order), at most `limit`. Throws
// DbError.
std::vector<BatchCompletionRow> ReadOpenBatches(storage::Connection& c, const std::string& service,
                                                const std::string& after, int limit);

// Locks the batch's row (FOR UPDATE) and tells whether it is still OPEN: taken before
// the count that decides a completion, so that count and the completion are one
// transaction and no other completer interleaves. REQUIRES: inside the caller's
// transaction. Throws DbError.
bool LockOpenBatch(storage::Connection& c, const std::string& batch_code);

// Produces `event` and marks the batch COMPLETED with `counts_json`. True when this
// call completed it. REQUIRES: inside the caller's transaction, after LockOpenBatch
// returned true in it. Throws DbError.
bool CompleteBatch(storage::Connection& c, const std::string& batch_code, const NewEventRow& event,
                   const std::string& counts_json);

// Deletes up to `limit` COMPLETED rows of `service` completed longer than `older_than`
// ago (retention). Returns how many. Throws DbError.
int64_t PurgeCompletedBatches(storage::Connection& c, const std::string& service, Millis older_than, int limit);

}  // namespace dsync::events
