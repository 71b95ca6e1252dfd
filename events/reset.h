// Reset and hand back: an owned event back to PENDING (docs/event-lifecycle.md item 6),
// the one implementation used by the sweeper (dead node, idle too long), a node
// restarting under its address (orphans of its previous process), a draining node (its
// unclaimed events) and a node handing back a run it abandoned; and the reads that find
// those events.
//
//   UPDATE distribute_event
//   SET last_error=?, process_log=<append {node_address, status -> PENDING, last_error}>,
//       status='PENDING', node_address=NULL, version=version+1, next_run_time=NOW(3),
//       reset_count=reset_count+?
//   WHERE id=? AND version=? AND status=?   [AND modifier_time < NOW(3) - INTERVAL ?]
//
// Conditional on the (version, status) the caller read, so an event that completed,
// was claimed or changed hands since is never overwritten. A reset is never charged to
// the event's retries (retry_count, bounded by max_retry, counts its steps' own
// failures only: docs/event-lifecycle.md, "Retry arithmetic"). Instead reset_count
// grows by one for a claimed (RUNNING or COMPENSATING) event, unless the caller says
// the reset was not the run's doing at all (a drain that timed out); the claim that
// finds reset_count > max_resets ends the event FAILED, so a poison event that kills
// its node every time still ends. phase is unchanged, so a compensation resumes as a
// compensation. The process_log entry names the node that held the event and gives
// the reason (callers word it "reset (not charged to retries): ...").
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/clock.h"
#include "events/node_key.h"
#include "events/status.h"
#include "storage/connection.h"

namespace dsync::events {

// An in-flight event as read, with the (version, status) its reset is conditional on.
struct HeldEvent {
  int64_t id = 0;
  int64_t version = 0;
  EventStatus status = EventStatus::kAssigned;  // ASSIGNED, RUNNING or COMPENSATING
  std::string code;
};

// Whether a reset of a claimed event counts in its reset_count (max_resets). Never in
// retry_count.
enum class ResetCharge {
  kCountReset,  // node dead or frozen, idle too long, restarted, run abandoned
  kFree,        // a drain that timed out: the operator stopped the run
};

// Resetting a COMPENSATING event also notes the interruption on its COMPENSATING step
// (error_details = the reason; compensation_retry_count unchanged). Returns true when
// the reset applied. With `idle_for`, also requires that the event has had no
// activity (modifier_time) for that long: an owner's fenced writes refresh it without
// changing the version. Throws DbError (run it inside ConnectionPool::Run / Transact).
bool ResetEvent(storage::Connection& c, const HeldEvent& event, const std::string& why,
                std::optional<Millis> idle_for = std::nullopt, ResetCharge charge = ResetCharge::kCountReset);

// What a node holds, for the hand-backs (consumer/). Each throws DbError.
// Everything ASSIGNED, RUNNING or COMPENSATING there (a restart's hand-back), except
// the ids in `skip`.
std::vector<HeldEvent> ReadHeld(storage::Connection& c, const NodeKey& node, const std::set<int64_t>& skip = {});
// Only what is ASSIGNED there (a drain's hand-back), except the ids in `skip`.
std::vector<HeldEvent> ReadUnclaimed(storage::Connection& c, const NodeKey& node,
                                     const std::set<int64_t>& skip = {});
// One event still held there by a run the node abandoned at `run_version` (the
// version the run last held): nullopt unless the event is there at that version, or
// one above it (the run's last commit, whose outcome was unknown, applied after all).
// A later claim of the event, even by this node again, is at least three versions up
// (reset, assign, claim), so the hand-back never resets it.
std::optional<HeldEvent> ReadAbandoned(storage::Connection& c, int64_t id, int64_t run_version,
                                       const NodeKey& node);

// An in-flight event the sweeper may reset (dispatcher/event_sweeper.h).
struct InFlightEvent {
  int64_t id = 0;
  int64_t version = 0;
  EventStatus status = EventStatus::kAssigned;  // ASSIGNED, RUNNING or COMPENSATING
  std::string node_address;  // empty when NULL
  std::string code;
  std::string trace_id;      // empty when NULL
  std::string topic;
  Millis idle{0};            // NOW(3) - modifier_time when read
};

// In-flight events of `service` whose node is not live in that service (its registry
// row there has status 1 or 2 and a heartbeat within `offline_timeout` by the database
// clock), by id, at most `limit`.
std::vector<InFlightEvent> ReadOrphaned(storage::Connection& c, const std::string& service, Millis offline_timeout,
                                        int limit);

// RUNNING / COMPENSATING events of `service` idle longer than `timeout` whose topic is in `topics`
// (comma list), or, with `unconfigured`, not in `configured` (comma list); oldest
// activity first, at most `limit`.
std::vector<InFlightEvent> ReadTimedOut(storage::Connection& c, const std::string& service, Millis timeout,
                                        const std::string& topics, bool unconfigured, const std::string& configured,
                                        int limit);

// An ASSIGNED event its live node has not claimed (dispatcher/event_sweeper.h, "not
// claimed"), with that node's heartbeat metadata (nullopt: NULL) so the caller can judge
// whether the node serves the topic and had room.
struct NotClaimedEvent : InFlightEvent {
  std::optional<std::string> node_metadata;
};

// ASSIGNED events of `service` whose assignment (assigned_time, or modifier_time for one assigned by
// hand) is older than `timeout`, held by a live node of the service (status 1 or 2, heartbeat within
// `offline_timeout`; dead nodes are ReadOrphaned's), whose topic is in `topics` (comma
// list) or, with `unconfigured`, not in `configured`; by id, at most `limit`. `idle` is
// the assignment's age. One row per (event, registry row of that address).
std::vector<NotClaimedEvent> ReadNotClaimed(storage::Connection& c, const std::string& service,
                                            Millis offline_timeout, Millis timeout, const std::string& topics,
                                            bool unconfigured, const std::string& configured, int limit);

// Takes the event's row lock, or returns false at once when another session holds it
// (SKIP LOCKED; MariaDB >= 10.6, MySQL >= 8.0) or the row is gone.
// REQUIRES: inside the caller's transaction (the lock lasts until it ends).
bool LockEventIfFree(storage::Connection& c, int64_t id);

// The statements, for bench/dispatch_bench.cc's EXPLAINs (params as the functions').
const char* ResetEventSql();  // without the idle condition
const char* OrphanedSql();
const char* TimedOutSql();
const char* NotClaimedSql();

}  // namespace dsync::events
