// The consumer's poll (docs/event-lifecycle.md item 3, before the claim): the events
// ASSIGNED to a node and not yet claimed, read into AssignedEvent, the one reader of a
// polled row (the node, and tests that poll as it does).
//
//   SELECT id, code, tenant_id, data_id, topic, payload, phase, trace_id, version,
//          attempt, retry_count, reset_count, NOW(3) - assigned_time
//   FROM distribute_event WHERE node_address = ? AND status = 'ASSIGNED' AND service = ? ...
//
// Thread safety: stateless functions; AssignedEvent is a plain value.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/clock.h"
#include "events/node_key.h"
#include "storage/connection.h"

namespace dsync::events {

// An event as the consumer polled it (ASSIGNED to this node).
struct AssignedEvent {
  int64_t id = 0;
  std::string code;
  std::string tenant_id;
  std::string data_id;
  std::string topic;
  std::string payload;       // raw text; may be malformed
  // FORWARD | COMPENSATE, as polled: the claim is fenced by it too (a wrong phase
  // claims nothing). Empty: read in the claim transaction (one more round trip),
  // together with retry_count.
  std::string phase;
  std::string trace_id;      // empty: the engine uses the event code
  int version = 0;           // as assigned; the claim bumps it
  int attempt = 0;
  int retry_count = 0;       // as polled: forward retries used (max_retry bounds them)
  int reset_count = 0;       // as polled: resets taken (the claim-time poison guard, max_resets)
  // For the claim-latency metric: NOW(3) - assigned_time when polled (database clock)
  // and when it was polled (the engine's clock); the latency is their sum at the
  // claim's commit. Negative: unknown (not observed).
  std::chrono::microseconds assigned_age{-1};
  Clock::TimePoint polled_at{};
  // Set by SagaEngine::ClaimBatch: this node claimed it (the fields above are still
  // as polled: version and attempt before the claim); Run() starts at the first step.
  bool claimed = false;
  // Set by SagaEngine::ClaimBatch instead, for a plan whose steps are fast: still
  // ASSIGNED, no step rows; the first step runs unclaimed and its success commits the
  // claim with it (ASSIGNED -> SUCCESS or RUNNING, attempt 1, the plan's rows; one
  // transaction and two row writes less). The commit is fenced by the assigned
  // version, so a reassigned event commits nothing. A step that writes through tx()
  // has the claim written first, in its group's transaction, so it sees the event
  // RUNNING. A failure, or a group that rolls back, is not recorded unclaimed: the
  // event is then claimed on its own and the step runs again.
  bool claim_deferred = false;
};

// Up to `limit` events of the node's service ASSIGNED to its address, in id order, except the ids in `skip` (the
// node's own queued and deferred-claim runs, still ASSIGNED). With `topics` (a comma
// list; empty: every topic), only events of those topics: a node never claims an event
// of a topic it does not serve (one assigned under its previous --topics, or by hand);
// the sweeper hands such an event back (docs/event-lifecycle.md, "not claimed").
// assigned_age is set from the database clock; polled_at is the caller's. Uses
// idx_node_address (node_address, status). Throws DbError.
std::vector<AssignedEvent> PollAssigned(storage::Connection& c, const NodeKey& node, int limit,
                                        const std::set<int64_t>& skip = {}, const std::string& topics = "");

}  // namespace dsync::events
