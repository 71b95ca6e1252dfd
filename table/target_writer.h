// The target half of a table_sync: what the lane loop (table/sync.h) asks of the
// target database, and the restore of a before-image that compensation does there.
//
// Reads: a range's checksum, its rows' keys and hashes, whether it holds any row.
// Writes: one chunk in ONE target transaction: the target rows of the chunk's keys
// read FOR UPDATE (the chunk's before-image), an exact comparison, the upserts (and
// deletes with delete_missing), then the step's lock row, the fencing token and a
// check that no other run committed a chunk meanwhile (locking reads), the chunk's undo
// record with its key range (the checkpoint; numbered after the newest record),
// ctx.StillOwner(), COMMIT. So data, undo record and checkpoint cannot disagree, and a
// node that lost the event commits no further chunk once the new owner has taken the
// step over. A chunk that was inside its transaction at that instant commits first,
// whole and consistent (it checked the token under the step lock), and the new owner,
// finding a chunk it did not expect, stops with a transient error and resumes after
// it. The step lock is taken last in each chunk transaction, so lanes overlap up to
// their commit. With more than one lane the chunk transactions run at READ COMMITTED:
// at REPEATABLE READ two lanes reading a key range the target has no rows in lock the
// same gap, and each one's inserts would wait for the other's.
//
// Keys the chunk's locked read finds absent are inserted, not upserted: a source row
// that collides with another target row over a secondary unique key fails the step
// permanently (naming the key) and writes nothing of the chunk, where an upsert would
// have updated that other row (MySQL semantics), which no before-image covers. A
// primary-key collision (a row inserted meanwhile, possible at READ COMMITTED) rolls
// the chunk back; the step runs again. Rows the target holds are upserted (the
// primary key is checked first, so only that row is updated). Restores go the same
// way: rows whose key the target holds now are upserted back, the others inserted (a
// clash with a row written since fails it, naming the key, and restores nothing of
// that chunk). Still upserted as before: every row of a chunk (or restore) whose locked
// read matched a key in SQL only (text keys under a case-insensitive collation).
//
// A chunk whose keys are one integer column and dense (the key range holds at most
// about twice its keys) reads the target's rows and after-image hashes by that key
// range instead of key by key (table::DenseSpan).
//
// Thread safety: a TargetWriter may be used by several lanes at once (each call takes
// its own connection); the RunContext is called under the mutex given.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/connection.h"
#include "storage/connection_pool.h"
#include "table/chunks.h"
#include "table/planner.h"
#include "table/run_context.h"
#include "table/spec.h"
#include "table/sql.h"

namespace dsync::table {

// A chunk whose before-image would not fit in one statement: retried smaller.
class ChunkTooBig : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Rows and chunks of a run (or of one chunk's commit: rows written and unchanged).
struct Counts {
  int64_t rows = 0, inserted = 0, updated = 0, unchanged = 0, deleted = 0;
  int64_t chunks = 0, chunks_equal = 0, chunks_written = 0, rows_fetched = 0;
  Counts& operator+=(const Counts& o) {
    rows += o.rows, inserted += o.inserted, updated += o.updated, unchanged += o.unchanged;
    deleted += o.deleted, chunks += o.chunks, chunks_equal += o.chunks_equal;
    chunks_written += o.chunks_written, rows_fetched += o.rows_fetched;
    return *this;
  }
};

// One chunk's work, decided before its target transaction.
struct ChunkWork {
  KeyRange range;
  std::vector<Row> rows;         // source rows to upsert where they differ (synced columns)
  std::vector<Row> delete_keys;  // target keys to delete (delete_missing)
  int64_t rows_read = 0;         // source rows in the range
  int64_t equal_by_hash = 0;     // rows the row hashes showed equal (not fetched)
  bool equal = false;            // the range checksums matched: nothing to do
};

class TargetWriter {
 public:
  // How chunks commit.
  struct Commits {
    storage::Isolation isolation = storage::Isolation::kSession;
    int64_t packet = 0;         // the target's max_allowed_packet (0: unknown)
    int64_t resumed_after = 0;  // the newest chunk record when the run began
    std::mutex* ctx_mu = nullptr;  // held around ctx.StillOwner()
  };

  // `filter`: the step's filter bound for the target (empty: compared by key range
  // alone). References must outlive the writer.
  TargetWriter(RunContext& ctx, storage::ConnectionPool& pool, const Spec& spec, const Plan& plan,
               const BoundFilter& filter, Commits commits);

  RangeChecksum Checksum(const KeyRange& range);
  KeyHashes RowHashes(const KeyRange& range);
  // Whether the range holds any row (filter or not).
  bool HasAnyRow(const KeyRange& range);
  // The keys of the range's rows matching the filter.
  std::vector<Row> Keys(const KeyRange& range);

  // One chunk's transaction (above). Throws ChunkTooBig, Interrupted, PermanentError,
  // DbError. Returns the rows it wrote and found unchanged.
  Counts Commit(const ChunkWork& w);

 private:
  std::optional<KeySpan> ApplyChunk(storage::Connection& tc, const ChunkWork& w, Image& image, Counts& counts) const;
  Image EmptyImage() const;

  RunContext& ctx_;
  storage::ConnectionPool& pool_;
  const Spec& spec_;
  const Plan& plan_;
  const BoundFilter& filter_;
  const Commits commits_;
};

// A before-image from its JSON; PermanentError naming the step when it is malformed.
Image ParseImage(const nlohmann::json& j, const Spec& spec);

// Puts a before-image back on the target through `c` (the caller's transaction):
// deletes the rows the step created, upserts the rows it changed or deleted (rows the
// target no longer holds are inserted, as above). Returns (removed, restored).
std::pair<int64_t, int64_t> RestoreImage(storage::Connection& c, const Spec& spec, const Image& image,
                                         RunContext& ctx);

// Inserts rows whose keys a locked read found absent (Upsert with insert_only). A
// clash over the primary key (a row inserted meanwhile, at READ COMMITTED) is
// Interrupted: rolled back, run again. One over another unique key is PermanentError,
// named, `who` leading the message.
void InsertAbsent(storage::Connection& c, const Spec& spec, const ColumnSet& cols,
                  const std::vector<const Row*>& rows, const std::string& who);

}  // namespace dsync::table
