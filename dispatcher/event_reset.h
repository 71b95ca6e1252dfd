// The hand-back of an owned event to PENDING (docs/event-lifecycle.md item 6), the one
// implementation used by the sweeper (dead node, idle too long), a node restarting
// under its address (orphans of its previous process) and a draining node (its
// unclaimed events):
//
//   UPDATE distribute_event
//   SET status='PENDING', node_address=NULL, version=version+1, next_run_time=NOW(3),
//       last_error=?, retry_count=retry_count+?
//   WHERE id=? AND version=? AND status=?   [AND modifier_time < NOW(3) - INTERVAL ?]
//
// Conditional on the (version, status) the caller read, so an event that completed,
// was claimed or changed hands since is never overwritten. retry_count grows by one
// only for a RUNNING event (a poison event that kills its node must not loop
// forever); phase is unchanged, so a compensation resumes as a compensation.
//
// Thread safety: stateless.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/clock.h"
#include "storage/connection.h"

namespace dsync::dispatcher {

// An in-flight event as read, with the (version, status) its reset is conditional on.
struct HeldEvent {
  int64_t id = 0;
  int64_t version = 0;
  std::string status;  // ASSIGNED, RUNNING or COMPENSATING
  std::string code;
};

// Returns true when the reset applied. With `idle_for`, also requires that the event
// has had no activity (modifier_time) for that long: an owner's fenced writes refresh
// it without changing the version. Throws sql::SQLException (run it inside
// ConnectionPool::Run / Transact).
bool ResetEvent(storage::Connection& c, const HeldEvent& event, const std::string& why,
                std::optional<Millis> idle_for = std::nullopt);

}  // namespace dsync::dispatcher
