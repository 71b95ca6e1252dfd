// WriterTarget: a TargetSide (table/relay.h) over a step's TargetWriter, so that chunks
// that arrive from elsewhere (a relayed table_sync's source half, a bundle file) are
// written exactly as direct mode writes its own: each chunk one target transaction with
// its before-image, undo record, checkpoint and fence; equal ranges become checkpoints
// (batched, at least every 2 s); a chunk whose before-image is too big for one
// statement is cut in two at a row.
//
//   table::TargetWriter writer(ctx, tgt, spec, plan, filter, commits);
//   table::WriterTarget side(tgt, spec, plan, filter, writer, ctx.clock());
//   side.Apply(chunk);  side.RecordEqual(range);  side.Finish();
//   side.counts        // what was written, as direct mode counts it
//
// Thread safety: one thread.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "storage/connection_pool.h"
#include "table/planner.h"
#include "table/relay_sides.h"
#include "table/target_writer.h"

namespace dsync::table {

class WriterTarget final : public DbTargetReads {
 public:
  WriterTarget(storage::ConnectionPool& pool, const Spec& spec, const Plan& plan, const BoundFilter& filter,
               TargetWriter& writer, Clock& clock);

  // REQUIRES: the chunk's columns and key columns are the plan's source columns
  // (PermanentError otherwise).
  int64_t Apply(const RelayChunk& chunk) override;
  void RecordEqual(const KeyRange& range) override;
  void Finish() override;

  Counts counts;
  int64_t records = 0;  // chunk records written

 private:
  int64_t Commit(ChunkWork w);
  void FlushEqual();

  const Spec& spec_;
  const Plan& plan_;
  TargetWriter& writer_;
  Clock& clock_;
  Clock::TimePoint last_record_;
  std::optional<KeyRange> pending_equal_;
};

// A sync's output counts as table_sync reports them: rows, inserted, updated,
// unchanged, deleted (with delete_missing), chunks, chunks_equal, chunks_written.
nlohmann::json CountsJson(const Spec& spec, const Counts& c);

// The compensation reference of a sync whose chunks are recorded in the target's
// dsync_sync_chunk under `step_code` (format 2: never the image itself).
nlohmann::json ChunkUndoRef(const Spec& spec, const std::string& step_code, int64_t chunks, const TableShape& shape);

}  // namespace dsync::table
