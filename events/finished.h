// An event that ran outside the dispatcher and the nodes, recorded once it finished: a
// bundle import (table/bundle.h) applies its file in the importing process, which
// alone holds the file, and then writes the event and its steps as SUCCESS in one
// framework transaction, so the import shows in `dsync events`, the console and SQL
// like any event, and its code (derived from the bundle's id) makes a second import of
// the same file a duplicate (uk_code) that the importer refuses.
//
//   events::RecordFinishedEvent(c, row, steps, result_json);   // in the caller's transaction
//
// Thread safety: stateless; a Connection is used by one thread at a time.
#pragma once

#include <string>
#include <vector>

#include "events/produce.h"
#include "events/transitions.h"
#include "storage/connection.h"

namespace dsync::events {

// Inserts `e` as SUCCESS (phase FORWARD, finished now, `result` its result JSON) with
// `steps` (each inserted SUCCESS: set `succeeded`). False when an event with that code
// exists (nothing written). REQUIRES: inside the caller's transaction. Throws DbError.
bool RecordFinishedEvent(storage::Connection& c, const NewEventRow& e, const std::vector<NewStep>& steps,
                         const std::string& result, const std::string& node);

// The status of the event `code`, or "" when there is none. Throws DbError.
std::string StatusOfEvent(storage::Connection& c, const std::string& code);

}  // namespace dsync::events
