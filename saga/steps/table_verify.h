// The step types over table/verify.h's compare (DESIGN.md "CONTRACT: second-round
// additions"):
//   table_verify  (the keys of table_sync): Execute compares; any difference is a
//                 permanent failure naming the counts and the first keys, so a plan
//                 "sync, then verify" compensates the sync when they differ. Nothing
//                 to compensate.
//   table_repair  (no keys): syncs exactly the keys listed in the event payload
//                 (table::RepairPayload) by running a configured table_sync step,
//                 exactly as the config has it, with its filter narrowed to
//                 "(where) AND (key IN (...))" (MakeKeyedTableSyncStep): missing and
//                 different rows are upserted, extra rows deleted only when that
//                 step has delete_missing, with table_sync's chunk records, so
//                 compensation restores the target exactly. The payload names a
//                 configured topic and its table_sync step, the values of the
//                 step's where, and the keys: nothing else. Source, target, table,
//                 filter, columns and delete_missing are the step's config, so a
//                 repair event can do at most what an event of that topic would
//                 (a payload naming anything else fails permanently, writing nothing).
//
// Thread safety: handlers are stateless after construction (shared by workers).
#pragma once

#include <map>
#include <memory>

#include "config/settings.h"
#include "saga/step_handler.h"
#include "saga/steps/table_steps.h"

namespace dsync::saga {

// `relay` (may be null): across the gap when the node reaches the target but not the
// source (table/relay_verify.h).
std::unique_ptr<StepHandler> MakeTableVerifyStep(const StepSpec& spec,
                                                 std::shared_ptr<const RelayEnvironment> relay = nullptr);
// `topics`: the configured topics whose table_sync steps repairs may name (the node's
// plans); null or empty: every repair fails permanently, naming why.
std::unique_ptr<StepHandler> MakeTableRepairStep(
    const StepSpec& spec, std::shared_ptr<const std::map<std::string, TopicSettings>> topics = nullptr);

}  // namespace dsync::saga
