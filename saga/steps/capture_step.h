// The step of dsync's own topic kCaptureTopic (capture/capture_events.h): applies a
// capture's change (docs/capture.md) by re-reading the changed rows from the source
// by key and writing them to the target with table_sync's machinery (chunk writer,
// undo records, fencing, exact compensation).
//
// Payload {"capture": NAME, "table": T, "keys": [[k, ...], ...], "schema": S}: a keyed
// sync (table::RunKeyedSync, table/keyed_sync.h) of the capture's source, target, table
// and `where` (default "1 = 1"), with delete_missing: a key the source no longer holds
// (a delete, the old key of a key change, a row that left the filter) is deleted on the
// target. One source read and one target transaction per event: the table's
// description (schemas, plan, preflight) is read once per node and reused, by (capture,
// table, S: the copy the events follow), dropped when an apply of the table fails or a
// copy of it runs on this node. Its compensation is table_sync's over the same keys
// (MakeKeyedTableSyncStep), from the same chunk records.
// Payload {"capture", "table", "copy": true}: the initial copy, table_sync over the
// whole table. The capture is looked up in the node's config (`captures`): an event
// naming another fails permanently, writing nothing.
//
// Thread safety: handlers are shared by workers; the descriptions are under a mutex.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "config/settings.h"
#include "saga/step_handler.h"

namespace dsync::saga {

// The topic's plan: one step "apply" of type capture_sync; ordered (events of one
// capture shard run one at a time, in order), 10 retries, backoff 200 ms .. 5 s.
TopicSettings CaptureTopic();

// `captures`: the node's config's captures.
std::unique_ptr<StepHandler> MakeCaptureSyncStep(const StepSpec& spec,
                                                 std::shared_ptr<const std::map<std::string, CaptureSettings>> captures);

// `registry` with the capture_sync step type registered.
void RegisterCaptureStep(StepRegistry& registry, const std::map<std::string, CaptureSettings>& captures);

}  // namespace dsync::saga
