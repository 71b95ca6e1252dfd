// A keyed sync without chunk planning (the apply of a capture's event, docs/capture.md):
// the keys are given, so the rows of those keys are read from the source in one
// statement and written to the target in one chunk transaction (TargetWriter::Commit:
// the target's before-image of those keys read FOR UPDATE, multi-row writes, the chunk
// record with that image, the fence), with the same outcome as table_sync over
// "(where) AND key IN (keys)" with delete_missing (table/sync.h): a key whose source row
// exists and matches the filter is upserted, a key the source no longer holds (or whose
// row left the filter) is deleted on the target, where the target's row of it matches the
// filter (when the target has the filter's columns). Its chunk records are table_sync's
// (format 2 compensation data), so CompensateSync undoes it exactly.
//
//   auto t = DescribeKeyed(ctx, spec);             // schemas, plan, preflight: once per table
//   SyncResult r = RunKeyedSync(ctx, *t, keys, chunks);   // per event: 1 source read, 1 target transaction
//
// What table_sync does per run and this does not: no range checksums, row hashes or
// key bounds (the keys are known), no checkpoint read (a re-run applies the keys again,
// which converges because it re-reads the source; its chunk record comes after the
// earlier one, so compensation, last first, still restores the first before-image
// last), no fencing transaction on the first claim (attempt 1 has no earlier claim to
// fence off; a later claim takes over as table_sync does, and every chunk transaction
// checks the fence under the step lock). The chunk transaction runs at READ COMMITTED:
// the before-image read takes no gap locks, so applies of other keys of the same table
// (a capture's lanes) do not deadlock on the gaps their inserts need; a key inserted by
// someone else meanwhile fails the insert (Interrupted: run again).
//
// A KeyedTable is a description taken at one time: a schema change after it is not seen
// (a dropped column fails the read; callers drop the description on any failure and when
// the table was changed, docs/capture.md "DDL").
//
// Thread safety: a KeyedTable is read-only and may be shared by runs on several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "table/chunk_table.h"
#include "table/chunks.h"
#include "table/planner.h"
#include "table/preflight.h"
#include "table/run_context.h"
#include "table/spec.h"
#include "table/sync.h"

namespace dsync::table {

// What RunSync reads about the step's tables before its first chunk, for a sync whose
// filter does not depend on the event (its :names, if any, are bound from the payload
// of the run that described it).
struct KeyedTable {
  Spec spec;                     // the step's spec, its filter not narrowed to keys
  Plan plan;
  TableShape shape;              // the target's, over the before-image columns
  BoundFilter source_filter;
  BoundFilter target_filter;
  bool filter_on_target = false;  // the target has the filter's columns and tables
  bool text_key = false;          // a key column compares as text (collations): absence is checked in SQL
  int64_t packet = 0;             // the target's max_allowed_packet
};

// Reads both schemas and checks them as RunSync does (PermanentError naming what is
// wrong; DbError). `spec` must have delete_missing.
std::shared_ptr<const KeyedTable> DescribeKeyed(RunContext& ctx, const Spec& spec);

// Makes the target's rows of `keys` (values of the primary key, in its column order, as
// text) equal to the source's now. Throws PermanentError, Interrupted, DbError; a chunk
// whose before-image exceeds max_allowed_packet is split in halves.
SyncResult RunKeyedSync(RunContext& ctx, const KeyedTable& table, const std::vector<Row>& keys, ChunkTable& chunks);

}  // namespace dsync::table
