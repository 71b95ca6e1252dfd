// dsync_sync_chunk: table_sync's checkpoints, before-images and fencing token, in the
// target datasource (the why: saga/steps/table_steps.h "Undo records"):
//
//   dsync_sync_chunk(step_code, chunk_no, step_name, table_name, attempt, lo_key,
//                    hi_key, before_image LONGTEXT, rows_read, rows_written,
//                    created_at, compensated_at)   PRIMARY KEY (step_code, chunk_no)
//
// created on first use (CREATE TABLE IF NOT EXISTS; the datasource user needs the
// CREATE privilege). chunk_no 0 is the step's row: every chunk transaction (before
// its record) and compensation (first) locks it, so commits of one step serialise; its
// `attempt` is the step's fencing token, its compensated_at marks the step compensated
// and its hi_key holds the lanes' split keys. Rows 1, 2, ... are chunk records,
// numbered in commit order. Every statement on it is here, one function each, the
// statement beside it; keys are JSON arrays of key cells (table::KeyToJson).
//
// Thread safety: stateless functions, each on the caller's connection; ChunkTable as
// TargetTable.
#pragma once

#include "core/clock.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/connection.h"
#include "storage/connection_pool.h"
#include "table/spec.h"
#include "table/sql.h"
#include "table/target_table.h"

namespace dsync::table {

constexpr const char* kChunkTable = "dsync_sync_chunk";

// The table on each target: created on first use, purged by retention.
class ChunkTable : public TargetTable {
 public:
  ChunkTable();
};

// The step's row 0, locked (inserted if absent): taken by every chunk transaction
// before its record and first by every compensation, so runs of one step serialise
// on it.
void LockStep(storage::Connection& c, const std::string& step_code, const std::string& step_name,
              const std::string& table_name);

// First in a chunk transaction: the step's run row (-1) shared. A takeover (TakeOver)
// takes it exclusively, so it waits for the chunk transactions of the runs it
// supersedes, and evicts one held open by a frozen node. Nothing when the row does not
// exist (a run that began before it was introduced).
void ShareRun(storage::Connection& c, const std::string& step_code);

// Under the step lock: throws Interrupted when a later claim of the event has run the
// step on this target since (the fencing token, row 0's attempt, is above `attempt`).
void CheckFence(storage::Connection& c, const Spec& spec, const std::string& step_code, int attempt);

// Before a run's first write: raises the step's fencing token to `attempt` (or throws
// Interrupted, if a later claim raised it already), in a transaction of its own, holding
// the run row (-1) and the step row (0). A superseded run still holding either (a node
// frozen inside a chunk transaction) is evicted after kEvictStaleRunAfter (storage/lock_eviction.h): its transaction rolls
// back, so it writes nothing when it wakes up, and this run goes on.
inline constexpr Millis kEvictStaleRunAfter{3000};
void TakeOver(storage::ConnectionPool& tgt, const Spec& spec, const std::string& step_code, int attempt,
              Clock& clock);

// What earlier runs committed (chunk records, row 0 excluded).
struct StepState {
  int64_t last_chunk = 0;   // highest chunk_no (0: none)
  int64_t records = 0;      // chunk records
  int64_t compensated = 0;  // of them compensated
  int64_t rows_written = 0;
};
StepState ReadStepState(storage::Connection& c, const std::string& step_code);

// Row 0: its compensated mark, its lanes' split keys (JSON; nullopt: one lane).
struct StepRow {
  bool compensated = false;
  std::optional<std::string> lanes;
};
StepRow ReadStepRow(storage::Connection& c, const std::string& step_code);

// Records the lanes' split keys (a JSON array of keys) in row 0, once (at the step's
// first run), and returns what row 0 holds then, under the step lock.
std::optional<std::string> RecordLanes(storage::Connection& c, const std::string& step_code,
                                       const std::string& splits);

// A chunk's upper end: nullopt for the table's end.
using ChunkEnd = std::optional<std::string>;
// Every chunk's upper end, oldest first (each lane's checkpoint).
std::vector<ChunkEnd> ReadChunkEnds(storage::Connection& c, const std::string& step_code);
// One chunk's upper end; nullopt when there is no such chunk.
std::optional<ChunkEnd> ReadChunkEnd(storage::Connection& c, const std::string& step_code, int64_t chunk_no);

// The newest chunk record, locked (its number + 1 is the next chunk's); zeros if none.
struct NewestChunk {
  int64_t chunk_no = 0;
  int64_t attempt = 0;
};
NewestChunk LockNewestChunk(storage::Connection& c, const std::string& step_code);

// A committed chunk.
struct ChunkRecord {
  int64_t chunk_no = 0;
  int attempt = 0;
  std::optional<Row> lo, hi;                 // (lo, hi]; nullopt: the start, the end
  std::optional<std::string> before_image;   // ChunkRecordText; nullopt: none (a checkpoint only)
  int64_t rows_read = 0, rows_written = 0;
};
void InsertChunk(storage::Connection& c, const std::string& step_code, const Spec& spec, const ChunkRecord& r);

// A forward run after a full compensation starts over: the chunk records go; row 0
// stays, its fencing token raised by this run, its marks and lanes cleared.
void ForgetChunks(storage::Connection& c, const std::string& step_code);

// Chunks left to restore (with an image, not compensated), last first.
std::vector<int> ChunksToRestore(storage::Connection& c, const std::string& step_code);

// One chunk's image (its JSON text), locked with `lock`; nullopt when compensated
// already or without an image.
std::optional<std::string> ReadChunkImage(storage::Connection& c, const std::string& step_code, int chunk_no,
                                          bool lock);

void MarkChunkCompensated(storage::Connection& c, const std::string& step_code, int chunk_no);
// The whole step (row 0 and checkpoint-only chunks) once every chunk is restored.
void MarkStepCompensated(storage::Connection& c, const std::string& step_code);

// A chunk record's before_image: Image::ToJson() plus "after" (the after-image hashes,
// table/row_io.h AfterState), written straight into one string instead of through a
// JSON tree, which held the chunk's rows a second and third time (tree, then text) at
// the chunk's peak.
std::string ChunkRecordText(const Image& image, const nlohmann::json& after);

}  // namespace dsync::table
