// table_delete's run: delete the target rows matching the step's filter, in ONE target
// transaction (bounded by the target's transaction and packet limits), keeping their
// before-image in dsync_step_undo (table/undo_table.h) with the delete; and the
// compensation from that undo row, which re-inserts them exactly (also used by a
// table_sync compensation with format 1 data, from before chunks). The user-facing
// contract is atop saga/steps/table_steps.h.
//
// The before-image is merged with what earlier runs of the same step recorded: a key's
// before-state is the one seen the first time the step changed that row. A filter
// matching more than max_rows rows fails permanently and deletes none.
//
// Thread safety: the functions may run for several steps at once.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "table/run_context.h"
#include "table/spec.h"
#include "table/undo_table.h"

namespace dsync::table {

struct DeleteResult {
  nlohmann::json output;  // {"rows", "deleted"}
  nlohmann::json image;   // the before-image, as recorded in dsync_step_undo (compensation data)
};

// One run of the delete `spec`. `undo`: the handler's dsync_step_undo (created on first
// use). Throws PermanentError, Interrupted, DbError, UsageError (unknown datasource).
DeleteResult RunDelete(RunContext& ctx, const Spec& spec, UndoTable& undo);

// Restores the before-image of ctx.step_code() from its undo row (or, when that was
// purged, from ctx.compensation_data()) and marks the step compensated, in one target
// transaction; a repeated compensation does nothing. Returns {"removed", "restored"}
// or {"already_compensated": true}. Throws as RunDelete.
nlohmann::json CompensateFromUndo(RunContext& ctx, const Spec& spec, UndoTable& undo);

}  // namespace dsync::table
