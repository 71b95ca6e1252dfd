// A consumer node (`dsync node`): heartbeats its load, polls the events the
// dispatcher assigned to its address, and runs each on a bounded pool of workers
// through the saga engine, which claims, runs and settles it (docs/event-lifecycle.md).
//
//   consumer::ConsumerNode node(pool, engine, clock, options);
//   node.Start();           // hands back orphans, heartbeats, polls, runs
//   node.WaitForDrainRequest(signals);   // SIGTERM/SIGINT or an operator's `dsync drain`
//   node.Drain();           // no new claims, in-flight finish, unclaimed handed back, offline
//
// Node addresses: at start, a live node of the service under the same address (its
// registry row online or draining, its heartbeat within the offline timeout by the
// database clock) makes Start() refuse (ConflictError, one line: the holder's host,
// pid and heartbeat age), so that a second process never resets and takes over the
// first's events. Its previous incarnation counts as dead, although its heartbeat may
// be fresh (systemd restarted it within the offline timeout), when it ran on this
// host and its pid is not running here, runs another program now (/proc), or is this
// process's own (a container's pid 1); on another host it is judged by the heartbeat only: start again once it is
// older than the offline timeout, as the message says.
// Then whatever a previous process left under the same address (ASSIGNED, RUNNING,
// COMPENSATING) is handed back to PENDING with the usual fenced reset: a fresh
// process holds nothing, so there is no reason to wait for a timeout. The reset
// counts in the event's reset_count, never in its retries (events/reset.h).
//
// Drain: in-flight runs get drain_timeout to finish; then they are stopped (the
// stop token, and every statement they are blocked in is killed:
// SagaEngine::KillRunningStatements), and handed back at the version each run held,
// not counted against the events at all. The drain ends within drain_timeout plus a
// few seconds even when a step is blocked on a lock.
//
// Polling is adaptive: while events arrive, again once a quarter of the capacity is
// free (at least 1 ms, at most 10 ms later), so that claims come in batches; at once
// when a worker frees a slot after a poll found nothing; every 10 ms for a second
// after the last events came; then doubling the pause from poll_interval up to
// idle_interval while nothing is assigned.
// First attempts are claimed by the poll itself, many in one transaction
// (SagaEngine::ClaimBatch), or, for topics whose steps are fast, by their first step's
// commit (AssignedEvent::claim_deferred); the rest by their worker.
//
// Wake-ups (consumer/node_wakeups.h): the dispatcher's datagram after an assignment
// makes the poller look at once; a poll that leaves freed slots empty wakes the
// dispatcher.
// Routing facts in the heartbeat: with `datasources` set, the node checks those
// datasources (consumer/datasource_prober.h) from Start() on and publishes the ones
// it reaches, beating at once when that changes; `bad_topics` (topics whose plan the
// caller could not build) are published as they are. The dispatcher sends the node
// no event of a bad topic, nor one whose next step needs a datasource it does not
// reach (dispatcher/assignment_planner.h); the node installs the same judgement in the
// saga engine (SagaEngine::SetDatasourceReach: `datasources` and the prober's last
// check), which hands an event on before a step it does not reach. An
// automatic prefetch (AutoPrefetch) that changed is published at once too, at most
// once a second.
//
// Thread safety: Start/Drain from one controlling thread; stats() from any.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "consumer/node_wakeups.h"
#include "consumer/datasource_prober.h"
#include "core/clock.h"
#include "core/service.h"
#include "events/node_key.h"
#include "registry/heartbeat_publisher.h"
#include "saga/saga_engine.h"
#include "storage/connection_pool.h"

namespace dsync::consumer {

// consumer.prefetch -1 (the default) is automatic: a node whose steps are fast (every
// plan it has run a step of averages under Plans::StepSpeed::kFastStep) may hold
// up to 3 x capacity beyond its capacity, at most 256 and never fewer than capacity;
// any other node (slow steps, or none run yet) as many as its capacity. Why: the
// dispatcher refills held events once per cycle, several milliseconds apart under
// load, and a node of fast steps empties a held set of only `capacity` sooner than
// that and then waits for work (bench/RESULTS.md "Session 19": capacity 16, 1-step
// events, 48 held faster than 16 in 10 of 10 paired runs, median +14 %). Slow steps
// keep the small set, so that events do not queue behind them on one node while
// another is free; the cap, because no node finishes more fast events than that in
// one refill.
inline constexpr int kFastPrefetchFactor = 3;
inline constexpr int kFastPrefetchCap = 256;
inline int AutoPrefetch(int capacity, bool steps_fast) {
  if (!steps_fast) return capacity;
  return std::max(capacity, std::min(kFastPrefetchFactor * capacity, kFastPrefetchCap));
}

// A node's options, built from the settings and flags in one place
// (app/options.h ConsumerOptionsFrom). Each field: where it comes from, what it means,
// its default (the initialiser, the same as the configured default where there is one).
struct ConsumerOptions {
  std::string service = kDefaultService;   // service (--service): whose events and nodes. Default kbs-sync
  std::string node_address;                // --node-address: HOST:PORT, the registry row and the dispatcher's target. Required
  int capacity = 8;                        // consumer.capacity (--capacity): events run in parallel. Default 8
  // consumer.prefetch (--prefetch): events held assigned beyond capacity (metadata
  // "prefetch"); -1: automatic (AutoPrefetch), 0: none. Default -1
  int prefetch = -1;
  std::vector<std::string> topics;         // --topics: served topics; {"*"} for all. Default {}: none (app fills it)
  Millis heartbeat_interval{10000};        // registry.heartbeat_interval_ms: how often the node's row is refreshed. Default 10 s
  Millis poll_interval{200};               // consumer.poll_interval_ms: pause after an empty poll, doubled up to idle_interval. Default 200 ms
  Millis idle_interval{1000};              // the longest pause between polls: the larger of poll_interval and dispatcher.idle_interval_ms. Default 1 s
  Millis drain_timeout{30000};             // consumer.drain_timeout_ms: on shutdown, how long running events may take. Default 30 s
  Millis offline_timeout{30000};           // registry.offline_timeout_ms: who is live (RefuseIfAddressInUse). Default 30 s
  bool wakeups = true;                     // consumer.wakeups: listen for wake-ups, wake the dispatcher (consumer/node_wakeups.h). Default true
  std::string wakeup_listen;               // consumer.wakeup_listen: UDP HOST:PORT for wake-ups. Default "": node_address
  // datasources (--datasources picks some): the datasources to check and report
  // (name -> URL); nullopt: report none at all, and the dispatcher takes the node as
  // reaching every datasource (as an older node). Default nullopt
  std::optional<std::map<std::string, std::string>> datasources;
  Millis datasource_check_interval{30000}; // how often those datasources are checked (not configurable). Default 30 s
  std::map<std::string, std::string> bad_topics;  // topic -> why its plan failed to build (app fills it). Default {}
};

struct ConsumerStats {
  std::atomic<uint64_t> polls{0}, polled_events{0}, handed_back_at_start{0}, handed_back_at_drain{0},
      handed_back_abandoned{0};
  std::atomic<uint64_t> batches{0}, batched_events{0};  // SagaEngine::RunBatch calls, and events run so
  std::atomic<int> in_flight{0};
};

// The node's families of /metrics (dsync_consumer_*; its reasons of
// dsync_event_resets_total); consumer/consumer_metrics.cc.
void WriteMetrics(const ConsumerStats& stats, metrics::TextWriter& w);

class ConsumerNode {
 public:
  ConsumerNode(storage::ConnectionPool& pool, saga::SagaEngine& engine, Clock& clock,
               ConsumerOptions options);
  ~ConsumerNode();

  // Hands back orphans of a previous incarnation, starts heartbeats, the poller and
  // the workers. Throws DbError when the database is unreachable at start, and
  // ConflictError (RefuseIfAddressInUse) before doing anything else.
  void Start();
  // Throws ConflictError when a live node of the service holds this address (see the
  // file comment, "Node addresses"); a process that starts other parts first (`dsync
  // all`) calls it before them.
  void RefuseIfAddressInUse();
  // Blocks until SIGTERM/SIGINT arrives (the caller blocked them in every thread) or
  // an operator marks this node draining. Returns a description of the cause.
  std::string WaitForDrainRequest(const sigset_t& signals);
  // Graceful stop; returns true when every in-flight event finished within
  // drain_timeout (the rest are cancelled and left to the sweeper).
  bool Drain();

  registry::NodeMetadata Metadata() const;
  // Events this node may hold beyond capacity now: options.prefetch, or AutoPrefetch.
  int Prefetch() const;
  ConsumerStats& stats() { return stats_; }
  NodeWakeupStats wakeup_stats() const { return wakeups_ ? wakeups_->stats() : NodeWakeupStats{}; }

 private:
  // This node in the event table: its service and address.
  events::NodeKey Key() const { return events::NodeKey{options_.service, options_.node_address}; }
  void PollLoop(std::stop_token stop);
  void WorkerLoop(std::stop_token stop);
  int PollOnce();
  enum class HandBackScope { kEverythingHeld, kUnclaimed };
  int HandBack(HandBackScope scope, const std::string& reason, const std::set<int64_t>& running = {});
  // Hands back events whose run was abandoned (database unreachable, shutdown):
  // they are still RUNNING/COMPENSATING here and would otherwise wait for the
  // sweeper's processing timeout. Retried at every poll until the database answers.
  void HandBackAbandoned();
  // An automatic prefetch that changed since the last beat is published at once (at
  // most once per second), not at the next heartbeat.
  void PublishPrefetchChange();
  // One heartbeat now, off its schedule (a routing fact changed); a failure is logged
  // (HEARTBEAT_FAILED), and the next scheduled beat tries again.
  void BeatNow();

  storage::ConnectionPool& pool_;
  saga::SagaEngine& engine_;
  Clock& clock_;
  const ConsumerOptions options_;
  registry::NodeMetadata metadata_;
  registry::HeartbeatPublisher heartbeat_;
  std::unique_ptr<DatasourceProber> prober_;  // null without options_.datasources
  std::atomic<bool> started_{false};          // beats on a reachability change only after Start()
  mutable std::atomic<int> published_prefetch_{-1};  // Prefetch() in the last beat's metadata (sent, not always written)
  Clock::TimePoint prefetch_beat_at_{};              // the poller's last early beat

  std::mutex mu_;
  std::condition_variable_any work_cv_;   // workers wait for queued events
  std::condition_variable_any poll_cv_;   // the poller waits for a free slot or its pause
  struct Queued {
    saga::AssignedEvent event;
    bool batchable = false;  // SagaEngine::Batchable when it was queued
  };
  std::deque<Queued> queue_;
  std::set<int64_t> known_;               // queued or running here
  struct AbandonedRun {
    int64_t id = 0;
    int version = 0;  // the version the run last held (events::ReadAbandoned)
  };
  std::vector<AbandonedRun> abandoned_;   // runs that ended kAbandoned, to hand back
  std::atomic<bool> drain_timed_out_{false};  // Drain() cancelled runs: their hand-back is not counted
  bool accepting_ = true;
  bool poll_now_ = false;
  Clock::TimePoint last_work_{};          // the last poll that found events (poller thread only)

  ConsumerStats stats_;
  std::stop_source work_stop_;            // cancels running events (drain timeout)
  std::jthread poller_;
  std::vector<std::jthread> workers_;
  std::unique_ptr<NodeWakeups> wakeups_;  // set by Start(); last, so it stops first
};

}  // namespace dsync::consumer
