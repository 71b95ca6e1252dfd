// The leader's sweeper: hands events back from nodes that cannot finish them.
// SweepOnce() runs, in order:
//   1. registry::OfflineSweeper: stale nodes marked offline, long-silent rows purged;
//   2. node resets: ASSIGNED / RUNNING / COMPENSATING events whose node_address is
//      not a live node (status 1 or 2 with a heartbeat within the offline timeout, by
//      the database clock, in the event's service). A draining node is live: it is finishing
//      its events, so they stay;
//   3. timeout resets: RUNNING / COMPENSATING events whose last activity
//      (modifier_time, refreshed by every fenced write of the owner; never the start
//      time) is older than the topic's SweeperIdleBound: its max_processing_time
//      (topics missing from the config: the default, 300 s) plus a grace. The grace
//      keeps the sweeper from racing a step attempt's own deadline (the topic's
//      step_timeout_ms, by default that same max_processing_time): the attempt's
//      deadline counts from its start, which comes after the event's last activity by
//      up to the engine's touch interval (1 s), and the node needs a moment to record
//      the timed-out attempt; an attempt that overruns its deadline is then a failure
//      charged to the step (a retry), not a reset by the sweeper;
//   4. not-claimed hand-backs: ASSIGNED events older than the topic's claim_timeout
//      (default 30 s) at a live node that does not claim them: its heartbeat says it
//      does not serve the topic (restarted with other --topics), or that it had room
//      (processing_count < capacity) and still did not claim (a bug, a wedged poller).
//      A node that is full is left alone (prefetched events wait for a free worker).
//      Each hand-back is counted on the node's registry row (registry::NoteNotClaimed,
//      shown by `dsync nodes`), in the same transaction.
//
// Only the service's events and registry rows are read or written (docs/
// event-lifecycle.md, "Services"): two services in one database never touch each
// other's events or judge each other's nodes.
//
// Every reset is the lifecycle's conditional reset (docs/event-lifecycle.md item 6,
// events/reset.h) on the (version, status) read in the same pass, so an event that
// completed, was claimed or changed hands in between is never overwritten.
//
// No reset is charged to the event's retries (retry_count); a RUNNING or COMPENSATING
// event's reset_count grows by one (events/reset.h: the claim after more than the
// topic's max_resets ends it FAILED, so a poison event that kills its node still ends).
// last_error and the process_log say "reset (not charged): node N offline" or "reset
// (not charged): no activity for ...". phase is unchanged, so a compensation resumes as
// a compensation. A timeout reset also re-checks the
// staleness in its WHERE (owner writes refresh modifier_time without a version
// change). Each reset is logged (warn):
//   EVENT_RESET event=<code> node=<addr> reason=<node_offline|timed_out|not_claimed> trace=<trace_id or code> ...
//
// Thread safety: SweepOnce from one thread at a time; stats() from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "config/settings.h"
#include "core/clock.h"
#include "core/service.h"
#include "events/reset.h"
#include "registry/offline_sweeper.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

enum class ResetReason { kNodeOffline, kTimedOut, kNotClaimed };
const char* ResetReasonName(ResetReason r);  // "node_offline", "timed_out", "not_claimed"

// An event found resettable (events::InFlightEvent: the (version, status) its reset
// is conditional on, its holder, its idle time), and why.
// The sweeper's idle bound for a topic whose max_processing_time is `max_processing_time`:
// that plus a grace of a tenth of it, at least 2 s (300 s -> 330 s, 500 ms -> 2.5 s).
Millis SweeperIdleBound(Millis max_processing_time);

struct ResetCandidate : events::InFlightEvent {
  ResetReason reason = ResetReason::kNodeOffline;
  Millis timeout{0};         // kTimedOut: the idle bound applied (SweeperIdleBound); kNotClaimed: the claim_timeout
  Millis grace{0};           // kTimedOut: the grace in `timeout` (timeout - grace: the max_processing_time)
  std::string detail;        // kNotClaimed: why the node should have claimed it
};

// The sweeper's options (part of DispatcherOptions; app/options.h SweeperOptionsFrom).
struct SweeperOptions {
  std::string service = kDefaultService;         // service: only its events and nodes. Default kbs-sync
  Millis offline_timeout{30000};                 // registry.offline_timeout_ms. Default 30 s
  Millis purge_after{7LL * 24 * 3600 * 1000};    // registry.purge_after_ms. Default 7 days
  std::map<std::string, Millis> topic_timeouts;  // topics.<name>.max_processing_time_ms per configured topic. Default {}
  Millis default_timeout{300000};                // topics missing from the config: max_processing_time_ms's default, 5 min
  std::map<std::string, Millis> topic_claim_timeouts;  // topics.<name>.claim_timeout_ms per configured topic. Default {}
  Millis default_claim_timeout{30000};           // topics missing from the config: claim_timeout_ms's default, 30 s
  int batch = 500;                               // candidates read per query (not configurable). Default 500
  int max_rounds = 20;                           // queries per kind and sweep, at most (not configurable). Default 20
};

struct SweepReport {
  uint64_t marked_offline = 0;
  uint64_t purged = 0;
  uint64_t reset_node_offline = 0;
  uint64_t reset_timed_out = 0;
  uint64_t reset_not_claimed = 0;
  uint64_t reset_races = 0;  // candidates that changed before their reset, or whose row a
                             // session of their owner holds locked: left alone
};

struct SweeperStats {
  uint64_t sweeps = 0;
  uint64_t failures = 0;  // sweeps that threw
  uint64_t marked_offline = 0;
  uint64_t purged = 0;
  uint64_t resets_node_offline = 0;
  uint64_t resets_timed_out = 0;
  uint64_t resets_not_claimed = 0;
  uint64_t reset_races = 0;
};

class EventSweeper {
 public:
  // `pool` must outlive the sweeper.
  EventSweeper(storage::ConnectionPool& pool, SweeperOptions options);

  // Steps 1-4 above. Throws DbError (resets done before the failure stay done).
  SweepReport SweepOnce();

  // The pieces, public so the read / write race can be tested deterministically.
  // In-flight events whose node is not live, by id. Throws DbError.
  std::vector<ResetCandidate> FindOrphaned(int limit);
  // RUNNING / COMPENSATING events idle longer than their topic allows. Throws DbError.
  std::vector<ResetCandidate> FindTimedOut(int limit);
  // ASSIGNED events a live node did not claim within the topic's claim_timeout, when
  // its metadata says it does not serve the topic or had room. Throws DbError.
  std::vector<ResetCandidate> FindNotClaimed(int limit);
  // The conditional reset of `c`. True when it applied; false when the event no
  // longer has the version and status read (and, for timeouts, was active since).
  // Logs EVENT_RESET when applied and counts either way. Throws DbError.
  bool Reset(const ResetCandidate& c);

  SweeperStats stats();

 private:
  struct TimeoutGroup {
    Millis timeout;         // max_processing_time, or claim_timeout
    std::string topics;     // comma list of configured topics with this timeout
    bool unconfigured;      // also topics missing from the config
  };

  storage::ConnectionPool& pool_;
  const SweeperOptions options_;
  registry::OfflineSweeper offline_;
  std::vector<TimeoutGroup> groups_;
  std::vector<TimeoutGroup> claim_groups_;
  std::string configured_topics_;  // comma list

  std::mutex mu_;
  SweeperStats stats_;
};

}  // namespace dsync::dispatcher
