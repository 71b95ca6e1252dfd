// Progress of a long-running step (e.g. table_sync's chunks and rows done), written
// into the step's `output` column while it runs, so an operator sees it in the step
// row, `dsync events show` and the API. The step's final output replaces it.
//
// Fenced like every write after a claim (docs/event-lifecycle.md, "at most one
// owner"): the UPDATE matches
// only while the event is still at the version the writer claimed it with, so a node
// that lost the event (reset, reassigned, frozen past the offline timeout) writes
// nothing. Autocommitted on its own: progress is informational and never part of the
// step's result.
//
// Thread safety: a stateless function; the pool is thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "storage/connection_pool.h"

namespace dsync::events {

// Writes `progress` as the step's output while the event `event_id` is at `version`.
// Returns false when the fence did not match (the event was taken away). Throws
// DbError.
bool WriteStepProgress(storage::ConnectionPool& pool, const std::string& step_code, int64_t event_id,
                       int version, const nlohmann::json& progress);

}  // namespace dsync::events
