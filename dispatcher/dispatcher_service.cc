#include "dispatcher/dispatcher_service.h"

#include <algorithm>
#include <exception>
#include <optional>

#include <spdlog/spdlog.h>

#include "dispatcher/dispatcher_waker.h"
#include "events/batches.h"
#include "events/produce.h"

namespace dsync::dispatcher {
namespace {

LockerOptions LockerOptionsFrom(const DispatcherSettings& s) {
  LockerOptions o;
  o.ttl = s.lease_ttl;
  return o;
}

// The dispatcher's wake-up listener, or nullptr (dispatcher.wakeups off, bind failed).
std::unique_ptr<wakeup::WakeListener> BindWakeListener(const DispatcherSettings& s, Clock& clock) {
  if (!s.wakeups) return nullptr;
  return wakeup::WakeListener::Bind(s.wakeup_listen, "dispatcher",
                                    wakeup::WakeLimiter(Millis(1), s.poll_interval), clock);
}

}  // namespace

DispatcherService::DispatcherService(storage::ConnectionPool& pool, DispatcherOptions options, Clock& clock,
                                     std::string owner_id)
    : clock_(clock),
      service_(options.service),
      dispatcher_settings_(options.dispatcher),
      sweep_interval_(options.sweep_interval),
      wake_signal_(clock),
      wake_listener_(BindWakeListener(options.dispatcher, clock)),
      lease_(pool, DispatcherLockName(options.service),
             WithWakeAddress(std::move(owner_id), wake_listener_ ? wake_listener_->address() : "")),
      locker_(lease_, clock, LockerOptionsFrom(options.dispatcher), lease_.lock_name()),
      cycle_(pool, clock, std::move(options.planner), std::move(options.cycle)),
      sweeper_(pool, std::move(options.sweeper)),
      retention_(pool, clock, options.service, options.retention),
      batches_(pool, std::move(options.batches)),
      batch_check_interval_(options.dispatcher.batch_check_interval),
      pool_(pool),
      scheduler_(pool, options.schedules, clock) {
  if (options.dispatcher.wakeups) {
    cycle_.OnAssigned([this](const std::vector<std::string>& nodes) {
      for (const auto& n : nodes) wake_sender_.Send(n);
    });
  }
}

DispatcherService::~DispatcherService() { Stop(); }

void DispatcherService::Start() {
  if (dispatch_thread_.joinable()) return;
  spdlog::info("DISPATCHER_STARTING lock={} owner={} lease_ttl_ms={} batch_size={}", lease_.lock_name(),
               lease_.owner(), dispatcher_settings_.lease_ttl.count(), dispatcher_settings_.batch_size);
  // Events a plain INSERT writes without naming a service are another service's when
  // the column default is not ours: say so once, it is the usual reason for events
  // that nobody dispatches (docs/event-lifecycle.md "Services").
  try {
    const std::string plain = pool_.Run("read the default service",
                                        [](storage::Connection& c) { return events::DefaultService(c); });
    if (!plain.empty() && plain != service_) {
      spdlog::warn("DISPATCHER_SERVICE_NOT_DEFAULT service={} default={}: events inserted without a service column "
                   "belong to service {}, which this dispatcher does not dispatch; name the service in the INSERT, "
                   "or ALTER TABLE distribute_event ALTER COLUMN service SET DEFAULT '{}' if this database serves "
                   "{} alone",
                   service_, plain, plain, service_, service_);
    }
  } catch (const std::exception& e) {
    spdlog::debug("DISPATCHER_DEFAULT_SERVICE_UNKNOWN err={}", e.what());
  }
  locker_.Start();
  if (wake_listener_) wake_listener_->Start([this] { wake_signal_.Notify(); });
  dispatch_thread_ = std::jthread([this](std::stop_token stop) { DispatchLoop(stop); });
  sweep_thread_ = std::jthread([this](std::stop_token stop) { SweepLoop(stop); });
  retention_thread_ = std::jthread([this](std::stop_token stop) { RetentionLoop(stop); });
  batch_thread_ = std::jthread([this](std::stop_token stop) { BatchLoop(stop); });
  if (!scheduler_.empty()) schedule_thread_ = std::jthread([this](std::stop_token stop) { ScheduleLoop(stop); });
}

void DispatcherService::Stop() {
  if (!dispatch_thread_.joinable()) return;
  dispatch_thread_.request_stop();
  sweep_thread_.request_stop();
  retention_thread_.request_stop();
  batch_thread_.request_stop();
  dispatch_thread_.join();
  sweep_thread_.join();
  retention_thread_.join();
  batch_thread_.join();
  dispatch_thread_ = std::jthread();
  sweep_thread_ = std::jthread();
  retention_thread_ = std::jthread();
  batch_thread_ = std::jthread();
  schedule_thread_ = std::jthread();  // requests stop and joins
  locker_.Stop();
  if (wake_listener_) wake_listener_->Stop();
  const CycleStats cs = cycle_.stats();
  spdlog::info("DISPATCHER_STOPPED lock={} owner={} cycles={} assigned={} lost_races={} cycle_failures={} "
               "wakeups_sent={} wakeups_received={} wakeups_acted={}",
               lease_.lock_name(), lease_.owner(), cs.cycles, cs.assigned, cs.lost_races, cs.failures,
               wake_sender_.sent(), wake_listener_ ? wake_listener_->stats().received.load() : 0,
               wake_listener_ ? wake_listener_->stats().acted.load() : 0);
}

void DispatcherService::DispatchLoop(std::stop_token stop) {
  const Millis poll = dispatcher_settings_.poll_interval;
  const Millis idle = dispatcher_settings_.idle_interval;
  Millis delay = poll;
  int failures = 0;
  int empty = kBusyEmptyCycles + 1;  // cycles that found nothing due since one that assigned
  while (!stop.stop_requested()) {
    std::optional<int64_t> token = locker_.token();
    if (!token) {
      delay = poll;
      if (!Pause(poll, stop)) break;  // a wake-up checks at once (the lease may just have come)
      continue;
    }
    try {
      CycleResult r = cycle_.RunOnce(lease_.Fence(*token, dispatcher_settings_.lease_ttl / 4),
                                     [this] { return locker_.is_leader(); });
      if (failures > 0) spdlog::info("DISPATCH_RECOVERED after_failures={}", failures);
      failures = 0;
      if (r.assigned > 0) empty = 0;
      else if (r.due_read == 0 && empty <= kBusyEmptyCycles) ++empty;
      delay = NextDispatchDelay(r, delay, dispatcher_settings_, /*busy=*/empty <= kBusyEmptyCycles);
      if (wake_listener_) wake_listener_->Result(r.assigned > 0);
    } catch (const std::exception& e) {
      ++failures;
      spdlog::warn("DISPATCH_FAILED lock={} failures={} err={}", lease_.lock_name(), failures, e.what());
      delay = std::min(idle, std::max(poll, delay * 2));
    }
    if (delay.count() > 0 && !Pause(delay, stop)) break;
  }
}

bool DispatcherService::Pause(Millis delay, std::stop_token stop) {
  return wake_signal_.WaitFor(delay, stop);  // only a wake-up listener notifies it
}

void DispatcherService::SweepLoop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    if (locker_.is_leader()) {
      try {
        sweeper_.SweepOnce();
      } catch (const std::exception& e) {
        spdlog::warn("SWEEP_FAILED lock={} err={}", lease_.lock_name(), e.what());
      }
    }
    if (!clock_.SleepFor(sweep_interval_, stop)) break;
  }
}

void DispatcherService::RetentionLoop(std::stop_token stop) {
  const RetentionSettings& r = retention_.settings();
  if (!r.enabled) return;
  // The first pass waits one poll interval for leadership, not a whole retention
  // interval: a fresh leader catches up at once.
  Millis delay = dispatcher_settings_.poll_interval;
  while (clock_.SleepFor(delay, stop)) {
    delay = r.interval;
    if (!locker_.is_leader()) {
      delay = dispatcher_settings_.poll_interval * 5;
      continue;
    }
    try {
      // Busy: the dispatcher assigned events since the last batch (its cycle counter moved).
      uint64_t assigned = cycle_.stats().assigned;
      retention_.RunPass(stop, [this] { return locker_.is_leader(); },
                         [this, &assigned] {
                           const uint64_t now = cycle_.stats().assigned;
                           const bool busy = now != assigned;
                           assigned = now;
                           return busy;
                         });
      pool_.Run("purge completed batches", [&](storage::Connection& c) {
        return events::PurgeCompletedBatches(c, service_, r.finished_after, r.batch_size);
      });
    } catch (const std::exception& e) {
      spdlog::warn("RETENTION_FAILED lock={} err={}", lease_.lock_name(), e.what());
    }
  }
}

void DispatcherService::BatchLoop(std::stop_token stop) {
  while (clock_.SleepFor(batch_check_interval_, stop)) {
    if (!locker_.is_leader()) continue;
    try {
      batches_.CheckOnce([this, &stop] { return !stop.stop_requested() && locker_.is_leader(); });
    } catch (const std::exception& e) {
      spdlog::warn("BATCH_CHECK_FAILED lock={} err={}", lease_.lock_name(), e.what());
    }
  }
}

// issue 37: one pass over the schedules per second while leading (control/scheduler.h).
void DispatcherService::ScheduleLoop(std::stop_token stop) {
  while (clock_.SleepFor(Millis(1000), stop)) {
    const std::optional<int64_t> token = locker_.token();
    if (!token) continue;
    scheduler_.RunOnce(lease_.Fence(*token, dispatcher_settings_.lease_ttl / 4));
  }
}

DispatcherStats DispatcherService::stats() {
  DispatcherStats s;
  s.lease = locker_.stats();
  s.cycle = cycle_.stats();
  if (!s.lease.leader) s.cycle.unroutable.clear();  // a follower's record is stale
  s.sweeper = sweeper_.stats();
  s.retention = retention_.stats();
  s.batch_checks = batches_.checks();
  s.batches_completed = batches_.completed();
  return s;
}

}  // namespace dsync::dispatcher
