// table_sync's run in direct mode (one node reaches both databases): copy the rows of
// one table that match a filter from the source datasource to the target datasource,
// upserting by primary key, chunk by chunk, each chunk committed on its own; only
// chunks whose checksums differ are read and written. And its compensation, which
// restores the target exactly from the chunk records (table/sync_compensate.cc).
// The user-facing contract (keys, outputs, errors) is atop saga/steps/table_steps.h.
//
// How a run goes: the planner (table/planner.h) decides the columns, checks the
// schemas, reads where earlier runs stopped and splits the table into lanes; then each
// lane, on its own thread, takes its key range a chunk at a time, talking to the
// source through a SourceReader (table/source_reader.h) and to the target through a
// TargetWriter (table/target_writer.h), which commits each chunk with its undo record.
//
// Chunks. The rows matching the filter are taken in primary-key order, a key range
// (lo, hi] at a time. For each range:
//   - copy mode (the target holds no row after the checkpoint, e.g. a first sync into
//     an empty table): the source rows of the range are read whole and written;
//   - compare mode (otherwise): the range's checksum (COUNT and BIT_XOR of each row's
//     CRC32 over a byte-exact encoding, table/chunks.h) is computed inside both
//     databases at once; equal ranges are skipped without reading a row; in a
//     differing range the key and row hash of each row are compared and only the rows
//     that differ (or that the target lacks) are read from the source. A range whose
//     target side is empty switches back to copy mode. With a key of one integer
//     column a compare range is a key span (table::KeySpanRanges): its end is its start
//     plus the keys that held the rows asked for in the ranges before, from the lowest
//     key of either side to past the highest (the last range is open above), so each
//     side's checksum is one plain range scan; a differing range that turns out to hold
//     more rows than a compare chunk covers is taken again, shorter. Other keys end a
//     range at the source's N-th key after its start. An integer column the filter
//     pins to one integer on both sides ("tenant_id = :tenant" at the top of the
//     where) is left out of these row hashes: every row compared holds that integer.
//     (Row hashes of one integer key are held as numbers, table::KeyHashes.)
//   Each range that needs writing is one target transaction (TargetWriter::Commit).
//   Equal ranges are recorded as a checkpoint-only row every 2 s and at the end.
//   Chunk size adapts toward 0.5 s per chunk (at most 4x per step, 1..chunk_size rows)
//   and keeps the rows a chunk holds under 2 MiB, so a node's memory is bounded by a
//   few chunks whatever the table's size; a chunk whose before-image would exceed the
//   target's max_allowed_packet is retried at a quarter of its size. A chunk that
//   compares (checksums, then row hashes) holds a key and a hash per row it covers and
//   only the rows that differ, so it covers up to 4x chunk_size rows; one in which more
//   than chunk_size rows differ is retried at a quarter of its size.
//   Speed: while copying, the source's next range is read while the target commits
//   this one (and while comparing by row hashes, the source's next hashes while the
//   target's are read).
//   A re-run of the step (the next owner after a crash, with the same step code)
//   resumes after the last committed chunk (of each lane); a range already committed
//   is never read or written again, so the first before-image of every row is the one
//   kept. Lanes: records are numbered in commit order across lanes (compensation, last
//   first, restores them in reverse commit order; lanes never share a key). A lane
//   that fails stops the others; the run's error is the first lane's.
//
// Thread safety: the functions may run for several steps at once; a run's lanes share
// its state under a mutex.
#pragma once

#include <nlohmann/json.hpp>

#include "table/chunk_table.h"
#include "table/run_context.h"
#include "table/spec.h"

namespace dsync::table {

struct SyncResult {
  nlohmann::json output;        // {"rows", "inserted", ...}: saga/steps/table_steps.h
  nlohmann::json compensation;  // a reference to the chunk records (format 2), never the image
};

// One run of the sync `spec` (resuming after what earlier runs of ctx.step_code()
// committed). `chunks`: the handler's dsync_sync_chunk table (created on first use).
// Throws PermanentError, Interrupted, DbError, UsageError (unknown datasource).
SyncResult RunSync(RunContext& ctx, const Spec& spec, ChunkTable& chunks);

// Compensation from the chunk records (compensation data of format 2): each chunk with
// a before-image, last first, restored in its own target transaction together with its
// compensated mark, conflicts handled by spec.on_conflict. Returns the outcome, also
// reported as progress (it stays the step row's output). Throws as RunSync.
nlohmann::json CompensateSync(RunContext& ctx, const Spec& spec, ChunkTable& chunk_table);

}  // namespace dsync::table
