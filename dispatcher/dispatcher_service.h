// `dsync dispatcher` as one object: the lease loop, and while this process holds the
// lease, the dispatch cycle and the sweeper. Several may run at once (processes or
// objects): one leads, the others wait for its lease to expire or be released.
//
//   SystemClock clock;
//   dispatcher::DispatcherService service(*pool, app::DispatcherOptionsFrom(settings), clock);  // owner host:pid:random
//   service.Start();
//   ... wait for SIGTERM ...
//   service.Stop();                      // stops the loops, releases the lease
//   DispatcherStats s = service.stats(); // counters for metrics
//
// Threads (five, six with schedules, each holding at most one pooled connection at a time):
//   - lease: dispatcher::Locker on lock "dispatcher:<service>", ttl
//     dispatcher.lease_ttl_ms (renew at ttl/3, watchdog at ttl - ttl/5);
//   - dispatch: DispatchCycle::RunOnce while leader, fenced by the lease token; then
//     at once again when the batch was full, dispatcher.busy_interval_ms while work
//     exists (something was assigned, or due events wait for full nodes) and for
//     kBusyEmptyCycles cycles after the last assignment, doubling from
//     dispatcher.poll_interval_ms to dispatcher.idle_interval_ms while nothing is due
//     (and after consecutive failures), else poll_interval (NextDispatchDelay);
//     polls leadership every poll_interval while a follower;
//   - sweep: EventSweeper::SweepOnce every registry.sweep_interval_ms while leader;
//   - retention: Retention::RunPass every retention.interval_ms while leader (when
//     retention.enabled), in batches of retention.batch_size with
//     retention.batch_pause_ms between them, stopping when leadership is lost; then
//     completed distribute_batch rows older than retention.finished_after_ms;
//   - batches: BatchCompleter::CheckOnce every dispatcher.batch_check_interval_ms
//     while leader (completion events of finished batches);
//   - schedules (only when the config has `schedules`): control::Scheduler::RunOnce
//     every second while leader, fenced by the lease token (one event per cron tick).
// Wake-ups (dispatcher.wakeups, default on; core/wakeup.h): after each page's
// assignments commit, one UDP datagram to each node that got events; and a UDP
// listener on dispatcher.wakeup_listen (loopback, any port) whose address is published
// in the lease row's owner (dispatcher/dispatcher_waker.h), so producers and nodes
// with free slots can cut the dispatch pause short. Woken cycles are rate-limited:
// after a cycle that assigned nothing, at most one per poll_interval.
// Database failures are logged (DISPATCH_FAILED, SWEEP_FAILED) and retried at the
// next turn; they never stop the service. A database restart is survived by the
// pool's reconnects: the lease is lost (watchdog) and re-acquired.
//
// Thread safety: Start/Stop from one controlling thread; is_leader() and stats() from
// any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <thread>

#include "config/settings.h"
#include "control/scheduler.h"
#include "core/clock.h"
#include "core/service.h"
#include "core/wakeup.h"
#include "dispatcher/batch_completer.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/event_sweeper.h"
#include "dispatcher/lease_lock.h"
#include "dispatcher/locker.h"
#include "dispatcher/retention.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

struct DispatcherStats {
  LockerStats lease;         // tenures of the dispatcher lease
  CycleStats cycle;          // dispatch cycles; `unroutable` only while leading
  SweeperStats sweeper;      // offline marking, purges and resets of the leader's sweeps
  RetentionStats retention;  // events and steps removed by retention passes
  uint64_t batch_checks = 0;
  uint64_t batches_completed = 0;  // completion events produced by this process
};

// The dispatcher's families of /metrics (lease, dispatch, sweeper; its reasons of
// dsync_event_resets_total); dispatcher/dispatcher_metrics.cc.
void WriteMetrics(const DispatcherStats& stats, metrics::TextWriter& w);

// The dispatcher's options: its own and those of its parts, built from the settings in
// one place (app/options.h DispatcherOptionsFrom; the parts' `service` is this one's).
// Each field: its config keys; the defaults are the config's.
struct DispatcherOptions {
  std::string service = kDefaultService;  // service: only its events, nodes, batches and schedules. Default kbs-sync
  DispatcherSettings dispatcher;          // dispatcher.*: pauses, lease, batch size, wake-ups (config/settings.h)
  Millis sweep_interval{5000};            // registry.sweep_interval_ms: the sweeper's cadence. Default 5 s
  CycleOptions cycle;                     // registry.offline_timeout_ms: who is live to the cycle (dispatch_cycle.h)
  PlannerConfig planner;                  // dispatcher.batch_size, topics' strategies and limits, fairness.* (assignment_planner.h)
  SweeperOptions sweeper;                 // registry.offline_timeout_ms / purge_after_ms, topics' bounds (event_sweeper.h)
  RetentionSettings retention;            // retention.* (config/settings.h)
  BatchCompleterOptions batches;          // topics: the completion topics' retries and priority (batch_completer.h)
  control::SchedulerOptions schedules;    // schedules, and their topics' retries and priority (control/scheduler.h)
};

class DispatcherService {
 public:
  // `pool` and `clock` must outlive the service. Does not touch the database until
  // Start().
  DispatcherService(storage::ConnectionPool& pool, DispatcherOptions options, Clock& clock,
                    std::string owner_id = MakeLeaseOwnerId());
  ~DispatcherService();  // Stop()s

  // Starts the three threads. Idempotent.
  void Start();
  // Stops dispatching and sweeping (a running cycle finishes its page), then
  // releases the lease. Idempotent.
  void Stop();

  bool is_leader() { return locker_.is_leader(); }
  DispatcherStats stats();
  control::SchedulerStats scheduler_stats() const { return scheduler_.stats(); }  // issue 37
  const std::string& owner() const { return lease_.owner(); }
  const std::string& lock_name() const { return lease_.lock_name(); }

 private:
  void DispatchLoop(std::stop_token stop);
  void SweepLoop(std::stop_token stop);
  void RetentionLoop(std::stop_token stop);
  void BatchLoop(std::stop_token stop);
  void ScheduleLoop(std::stop_token stop);  // issue 37
  // The pause between cycles; a wake-up ends it early.
  bool Pause(Millis delay, std::stop_token stop);

  Clock& clock_;
  const std::string service_;  // config `service`: only its events, nodes and batches
  const DispatcherSettings dispatcher_settings_;
  const Millis sweep_interval_;
  // Wake-ups; the listener (nullptr: off or bind failed) is bound before lease_ is
  // built, because its address goes into the lease owner.
  wakeup::WakeSignal wake_signal_;
  std::unique_ptr<wakeup::WakeListener> wake_listener_;
  wakeup::WakeSender wake_sender_;
  LeaseLock lease_;
  Locker locker_;
  DispatchCycle cycle_;
  EventSweeper sweeper_;
  Retention retention_;
  BatchCompleter batches_;
  const Millis batch_check_interval_;
  storage::ConnectionPool& pool_;
  std::jthread dispatch_thread_;
  std::jthread sweep_thread_;
  std::jthread retention_thread_;
  std::jthread batch_thread_;
  control::Scheduler scheduler_;  // issue 37: config `schedules`
  std::jthread schedule_thread_;
};

}  // namespace dsync::dispatcher
