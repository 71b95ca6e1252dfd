// Progress of a long-running step (e.g. table_sync's chunks and rows done), written
// into the step's `output` column while it runs, so an operator sees it in the step
// row, `dsync events show` and the API. The step's final output replaces it.
//
// Fenced like every write after a claim (docs/event-lifecycle.md, "at most one
// owner"): the UPDATE matches
// only while the event is still at the version the writer claimed it with, so a node
// that lost the event (reset, reassigned, frozen past the offline timeout) writes
// nothing. Autocommitted on its own: progress is informational and never part of the
// step's result. It is also the owner's heartbeat: the same fence refreshes the
// event's modifier_time, so a step that reports progress (table_sync, about once a
// second) may run longer than the topic's max_processing_time_ms without the sweeper
// resetting it; only a run that stops reporting for that long is taken for stuck.
//
// Thread safety: a stateless function; the pool is thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "storage/connection_pool.h"

namespace dsync::events {

// Refreshes the event's modifier_time and writes `progress` as the step's output
// while the event `event_id` is at `version` (RUNNING or COMPENSATING).
// Returns false when the fence did not match (the event was taken away). Throws
// DbError.
bool WriteStepProgress(storage::ConnectionPool& pool, const std::string& step_code, int64_t event_id,
                       int version, const nlohmann::json& progress);

}  // namespace dsync::events
