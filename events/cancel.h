// The operator's cancel (docs/event-lifecycle.md "Cancel"): an event that will never
// run (an unknown or unroutable topic, a blocker of its entity's later events, a
// mistaken delay) ends FAILED with last_error "cancelled: <reason>" and a process_log
// entry; the events the ordering rule held behind it then run. No new status: the
// contract's seven stay.
//
// Only an event that has not started can be cancelled: phase FORWARD, no step row past
// PENDING (a step that ran, even one that failed transiently, may have left an effect
// that only its compensation undoes; such events finish by running or compensating),
// and PENDING, or ASSIGNED to a node that is not live (no online or draining registry
// row of the service with a heartbeat within the offline timeout). An event ASSIGNED
// to a live node may be running its first step right now under a deferred claim (the
// claim commits with that step; docs/event-lifecycle.md item 3), whose effects outside
// the framework database a cancel could not undo: the sweeper hands it back if the node
// does not claim it (claim_timeout_ms), and then it can be cancelled. The transition is
// one statement fenced by the version read (kCancelEvent), so a node that claims the
// event first wins (the cancel matches nothing) and a node claiming after it finds the
// version changed and its claim matches nothing.
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "storage/connection.h"

namespace dsync::events {

struct CancelTarget {
  int64_t id = 0;
  int64_t version = 0;
  std::string status, phase, node_address;
  bool held_by_live_node = false;          // node_address is a live node of the event's service
  std::vector<std::string> started_steps;  // "name (STATUS)" of steps past PENDING
};

// The event by code with what decides whether it may be cancelled; nullopt when
// there is none. `offline_timeout`: registry.offline_timeout_ms. Throws DbError.
std::optional<CancelTarget> ReadCancelTarget(storage::Connection& c, const std::string& code,
                                             Millis offline_timeout);

// PENDING (or ASSIGNED to a node not live by `offline_timeout`), phase FORWARD, at
// `version`, no step past PENDING -> FAILED,
// version + 1, finished now, last_error "cancelled: <reason>", result
// {"cancelled": true, "reason": ...}, process_log {"node": "operator", "why":
// "cancelled by an operator: <reason>"}. One statement:
//   UPDATE distribute_event SET ... WHERE id = ? AND version = ?
//     AND status IN ('PENDING', 'ASSIGNED') AND phase = 'FORWARD'
//     AND NOT (status = 'ASSIGNED' AND <its node is live>)
//     AND NOT EXISTS (steps of the event past PENDING)
// False when it matched nothing (the event changed since it was read). Throws DbError.
bool CancelEvent(storage::Connection& c, int64_t id, int64_t version, const std::string& reason,
                 Millis offline_timeout);

}  // namespace dsync::events
