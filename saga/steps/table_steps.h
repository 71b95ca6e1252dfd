// The built-in data-moving step types (DESIGN.md "CONTRACT: built-in step types").
//
// table_sync: copy the rows of one table that match a filter from a source datasource
// to a target datasource, upserting by primary key, in chunks; compensation restores
// the target exactly (removes the rows it created, puts back the rows it changed).
//
//   { "name": "docs", "type": "table_sync", "source": "env_a", "target": "env_b",
//     "table": "kb_doc", "where": "space_id = :space_id AND kind = :kind",
//     "chunk_size": 500, "columns": ["id", "space_id", "title"], "delete_missing": false }
//
// table_delete: delete the target rows matching the filter; compensation re-inserts
// them exactly.
//
//   { "name": "purge", "type": "table_delete", "target": "env_b", "table": "kb_doc",
//     "where": "space_id = :space_id" }
//
// Keys (anything else is rejected at start with a ConfigError naming the step):
//   source      table_sync only, required: datasource name to read from
//   target      required: datasource name to write
//   table       required: table name, the same in both ([A-Za-z0-9_$], at most 64)
//   where       required: filter, the grammar of saga/steps/table_where.h; each :name is
//               bound from the payload's top-level field `name` as a statement
//               parameter, never spliced. "1 = 1" matches every row.
//   chunk_size  optional, 1..10000, default 500: rows per read and per write statement
//   columns     table_sync only, optional: the columns to copy (must include the
//               primary key); default: every column present in both tables
//               (generated columns of the target excluded)
//   delete_missing  table_sync only, optional, default false: also delete the target
//               rows that match the filter but whose key no longer matches it in the
//               source (a mirror instead of a merge); they are in the before-image too
//   undo_retention_days  optional, 1..3650, default 7: see "Undo table"
//
// Run time:
//   - A payload field a placeholder needs is missing, or is an object or array:
//     permanent failure ("payload has no field 'space_id' needed by step 'docs'").
//     Strings, numbers, booleans and null bind as such; a string compared with an
//     integer column must be a canonical integer ("42"), else permanent failure (MySQL
//     would compare "1 OR 1=1" as the number 1).
//   - The primary key (composite included) is read from the target's
//     information_schema; it must exist in the source with the same column type. A
//     table without one, a missing table or column: permanent failure.
//   - table_sync reads the source in key order by keyset pagination (ORDER BY key
//     LIMIT chunk_size), reads the target's rows with those keys FOR UPDATE (the
//     before-image), and upserts the rows that differ (INSERT ... ON DUPLICATE KEY
//     UPDATE col = VALUES(col), multi-row). Output: {"rows", "inserted", "updated",
//     "unchanged"} (+ "deleted" with delete_missing).
//   - Everything a run writes to the target is ONE target transaction, committed after
//     ctx.StillOwner() confirms this node still owns the event: a crash, a lost
//     ownership, a cancellation (ctx.stop_token(), which the engine also fires at
//     ctx.deadline()) or an error rolls the target back entirely. The size of one run
//     is therefore bounded by the target's transaction and packet limits
//     (max_allowed_packet for the before-image: exceeding it is a permanent failure).
//   - Database errors: deadlocks, lock waits and lost connections propagate (the
//     engine retries the step); a missing table, unknown column, duplicate value of a
//     secondary unique key or a value the target column refuses is permanent.
//   - Secondary unique keys of the target must not conflict with the synced rows: an
//     upsert that collides on one updates that other row (MySQL semantics), which
//     the before-image does not cover.
//
// Undo table (why the before-image also lives in the target): effects outside the
// framework database are at-least-once. If a node commits the target transaction and
// dies before the engine records SUCCESS, the step runs again with the same
// idempotency key and by then the target already holds the synced rows: a before-image
// taken by that second run would make compensation restore the synced state, not the
// original. So each run records its before-image in the TARGET database, in the same
// transaction as its changes, in
//
//   dsync_step_undo(step_code PK, step_name, table_name, before_image LONGTEXT,
//                   created_at, compensated_at)
//
// created on first use (CREATE TABLE IF NOT EXISTS; the datasource user needs the
// CREATE privilege). The row is locked first, so concurrent runs of one step
// serialise. The first image wins: a re-run only adds rows it changes that no earlier
// run had changed, and returns the merged image as compensation_data (so the engine's
// copy equals the target's). Compensate restores from the undo row (falling back to
// ctx.compensation_data() if the row is gone), deletes the created rows, upserts the
// before-rows, and marks the row compensated in the same target transaction, so a
// repeated compensation does nothing. Rows older than undo_retention_days are purged
// by later runs on the same target (best effort).
//
// Thread safety: a handler is shared by all workers; per-run state lives on the stack.
#pragma once

#include <memory>

#include "config/settings.h"
#include "saga/step_handler.h"

namespace dsync::saga {

// Throw ConfigError ("config: step 'docs' (table_sync): <reason>") for bad params.
std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec);
std::unique_ptr<StepHandler> MakeTableDeleteStep(const StepSpec& spec);

}  // namespace dsync::saga
