// The operator's cancel (docs/event-lifecycle.md "Cancel"): an event that will never
// run (an unknown or unroutable topic, a blocker of its entity's later events, a
// mistaken delay) ends FAILED with last_error "cancelled: <reason>" and a process_log
// entry; the events the ordering rule held behind it then run. No new status: the
// contract's seven stay.
//
// Only an event that has not started can be cancelled: PENDING or ASSIGNED (not yet
// claimed), phase FORWARD, and no step row past PENDING (a step that ran, even one
// that failed transiently, may have left an effect that only its compensation undoes;
// such events finish by running or compensating). The transition is one statement
// fenced by the version read (kCancelEvent), so a node that claims the event first
// wins (the cancel matches nothing) and a node claiming after it finds the version
// changed and its claim matches nothing.
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "storage/connection.h"

namespace dsync::events {

struct CancelTarget {
  int64_t id = 0;
  int64_t version = 0;
  std::string status, phase, node_address;
  std::vector<std::string> started_steps;  // "name (STATUS)" of steps past PENDING
};

// The event by code with what decides whether it may be cancelled; nullopt when
// there is none. Throws DbError.
std::optional<CancelTarget> ReadCancelTarget(storage::Connection& c, const std::string& code);

// PENDING/ASSIGNED, phase FORWARD, at `version`, no step past PENDING -> FAILED,
// version + 1, finished now, last_error "cancelled: <reason>", result
// {"cancelled": true, "reason": ...}, process_log {"node": "operator", "why":
// "cancelled by an operator: <reason>"}. One statement:
//   UPDATE distribute_event SET ... WHERE id = ? AND version = ?
//     AND status IN ('PENDING', 'ASSIGNED') AND phase = 'FORWARD'
//     AND NOT EXISTS (steps of the event past PENDING)
// False when it matched nothing (the event changed since it was read). Throws DbError.
bool CancelEvent(storage::Connection& c, int64_t id, int64_t version, const std::string& reason);

}  // namespace dsync::events
