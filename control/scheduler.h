// Schedules (config `schedules`; docs/pause-and-schedules.md): the dispatcher leader
// turns each cron tick into one event, exactly once, across leader changes and clock
// steps.
//
//   control::Scheduler scheduler(pool, app::SchedulerOptionsFrom(settings), clock);
//   scheduler.RunOnce(lease.Fence(token));   // every second while leading
//
// For each configured schedule, one transaction:
//   1. SELECT ... FROM dsync_schedule WHERE service = ? AND name = ? FOR UPDATE (V023):
//      the state, locked, so two processes that both believe they lead take turns;
//   2. DecideTick (control/schedule_tick.h) with the clock's wall time;
//   3. when a tick fires, the event is inserted by the idempotent produce path
//      (events/produce.h InsertEvent) with code ScheduleEventCode(service, name, tick):
//      a tick can never yield two events, even if the state were lost;
//   4. the state row is written (next_tick, last_tick, skipped_ticks, ...);
//   5. HoldsLease (dispatcher/lease_lock.h) last before COMMIT: a process whose lease
//      ended writes nothing.
// The event: topic and tenant_id from the schedule, data_id the schedule's name (an
// ordered topic runs a schedule's events one at a time, in tick order), trace_id its
// code, priority and max_retry the topic's, payload the schedule's payload with
// "schedule": {"name", "tick"} added (tick: ISO 8601 UTC). Logged:
//   SCHEDULE_FIRED schedule=<name> tick=<iso> event=<code> topic=<t> skipped=<n>
//   SCHEDULE_SKIPPED schedule=<name> ticks=<n> latest=<iso> policy=skip
// Ticks are judged by the leader's wall clock (Clock::WallNow): keep hosts on NTP. A
// clock that steps back never repeats a tick (next_tick is stored); one that steps
// forward over ticks is the missed-tick policy's case.
//
// Thread safety: RunOnce from one thread at a time; stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/settings.h"
#include "control/cron.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "core/service.h"
#include "dispatcher/lease_lock.h"
#include "storage/connection_pool.h"

namespace dsync::control {

// The prefix of every tick's event code. The API and `dsync produce` refuse codes that
// start with it (api::EventStore), so no producer takes a tick's code first; a plain-SQL
// producer could, and the scheduler then logs SCHEDULE_FIRED ... existed=true.
inline constexpr std::string_view kScheduleCodePrefix = "sched:";

// The event code of a tick: "sched:<service>:<name>:<tick epoch seconds>", or, when
// that exceeds 64 bytes or the service holds ':', "sched:~<16 hex digits of FNV-1a over
// service and name>:<epoch>".
std::string ScheduleEventCode(const std::string& service, const std::string& name, WallTime tick);

// A dsync_schedule row; times ISO 8601 UTC ("" for NULL).
struct ScheduleState {
  std::string name, cron, topic;
  std::string next_tick, last_tick, last_event_code, last_run_at, updated_time;
  int64_t skipped_ticks = 0;
};

// The service's rows, by name. Throws DbError.
std::vector<ScheduleState> ReadScheduleStates(storage::Connection& c, const std::string& service);

struct SchedulerStats {
  uint64_t passes = 0;
  uint64_t fired = 0;     // events produced (not counting a tick whose event existed)
  uint64_t skipped = 0;   // ticks passed over by the missed-tick policy
  uint64_t failures = 0;  // schedules whose transaction failed (retried next pass)
};

// The scheduler's families of /metrics: dsync_schedule_ticks_total{outcome="fired" |
// "skipped"} (events produced by this process; ticks passed over by the missed-tick
// policy) and dsync_schedule_failures_total (schedule transactions that failed).
void WriteMetrics(const SchedulerStats& stats, metrics::TextWriter& w);

// The scheduler's options (built from the settings by app/options.h SchedulerOptionsFrom).
struct SchedulerOptions {
  std::string service = kDefaultService;              // service: whose schedule rows and events. Default kbs-sync
  std::map<std::string, ScheduleSettings> schedules;  // schedules: name -> cron schedule. Default {}: none
  // topics: the scheduled events' priority and max_retry are their topic's (a topic not
  // here: TopicSettings' defaults). Default {}
  std::map<std::string, TopicSettings> topics;
};

class Scheduler {
 public:
  // `pool` and `clock` must outlive it. Schedules whose cron does not parse were
  // refused when the settings loaded.
  Scheduler(storage::ConnectionPool& pool, const SchedulerOptions& options, Clock& clock);

  // One pass over every schedule (see the file comment). Returns the events produced.
  // `fence` nullopt: unfenced (tests, tools). A schedule's database failure is logged
  // (SCHEDULE_FAILED) and counted; the others still run. Never throws DbError.
  int RunOnce(const std::optional<dispatcher::LeaseFence>& fence);

  bool empty() const { return schedules_.empty(); }
  SchedulerStats stats() const;

 private:
  struct Entry {
    std::string name;
    ScheduleSettings settings;
    CronExpression cron;
    int priority = 0;
    int max_retry = 3;
  };
  // One schedule's transaction; returns whether it produced an event.
  bool RunSchedule(const Entry& e, const std::optional<dispatcher::LeaseFence>& fence);

  storage::ConnectionPool& pool_;
  Clock& clock_;
  const std::string service_;
  std::vector<Entry> schedules_;
  std::atomic<uint64_t> passes_{0}, fired_{0}, skipped_{0}, failures_{0};
};

}  // namespace dsync::control
