#include "dispatcher/locker.h"

#include <algorithm>
#include <exception>

#include <spdlog/spdlog.h>

namespace dsync::dispatcher {
namespace {

// Runs `call`; the message of whatever it threw, or nullopt when it returned.
template <class F>
std::optional<std::string> ErrorOf(F&& call) {
  try {
    call();
    return std::nullopt;
  } catch (const std::exception& e) {
    return std::string(e.what());
  } catch (...) {
    return std::string("unknown error");
  }
}

Millis OrDefault(Millis value, Millis ttl, int divisor) {
  if (value.count() > 0) return value;
  return std::max(Millis(1), ttl / divisor);
}

LockerOptions Normalized(LockerOptions o) {
  o.ttl = std::max(o.ttl, Millis(1));
  o.renew_interval = OrDefault(o.renew_interval, o.ttl, 3);
  o.acquire_interval = OrDefault(o.acquire_interval, o.ttl, 10);
  if (o.watchdog_margin.count() <= 0) o.watchdog_margin = o.ttl / 5;
  return o;
}

// Rounded up, so a caller sleeping this long is never early.
Millis Until(Clock::TimePoint from, Clock::TimePoint to) {
  if (to <= from) return Millis(0);
  return std::chrono::ceil<Millis>(to - from);
}

}  // namespace

Locker::Locker(LeaseStrategy& strategy, Clock& clock, LockerOptions options, std::string name)
    : strategy_(strategy), clock_(clock), options_(Normalized(options)), name_(std::move(name)) {}

Locker::~Locker() { Stop(); }

void Locker::LoseLocked(const char* reason, bool watchdog) {
  if (!leader_) return;
  leader_ = false;
  ++stats_.lost;
  if (watchdog) ++stats_.lost_by_watchdog;
  spdlog::warn("LEASE_LOST lock={} owner={} token={} reason={}", name_, strategy_.owner(), token_,
               reason);
}

Millis Locker::Tick() {
  bool leader;
  int64_t token;
  {
    std::lock_guard lock(mu_);
    Clock::TimePoint now = clock_.Now();
    if (leader_ && now >= valid_until_) LoseLocked("watchdog: not renewed in time", true);
    if (now < next_attempt_) return Until(now, next_attempt_);
    leader = leader_;
    token = token_;
  }

  const Clock::TimePoint sent = clock_.Now();
  const Clock::TimePoint deadline = sent + options_.ttl - options_.watchdog_margin;
  if (leader) {
    bool renewed = false;
    std::optional<std::string> error = ErrorOf([&] { renewed = strategy_.Renew(token, options_.ttl); });
    const bool failed = error.has_value();
    std::lock_guard lock(mu_);
    const Clock::TimePoint back = clock_.Now();
    if (!leader_ || token_ != token) {
      // Released meanwhile (Stop): nothing to do.
    } else if (failed) {
      ++stats_.renew_failures;
      spdlog::warn("LEASE_RENEW_FAILED lock={} owner={} token={} err={}", name_, strategy_.owner(),
                   token, *error);
      if (back >= valid_until_) LoseLocked("watchdog: renew failed until the deadline", true);
      next_attempt_ = back + options_.acquire_interval;
    } else if (!renewed) {
      LoseLocked("renew refused: taken over or released", false);
      next_attempt_ = back;  // try to acquire at once: the row says who holds it
    } else if (back >= deadline) {
      // The answer came too late to trust: the lease may have expired meanwhile.
      LoseLocked("watchdog: renew answered after the deadline", true);
      next_attempt_ = back;
    } else {
      ++stats_.renewals;
      valid_until_ = deadline;
      next_attempt_ = sent + options_.renew_interval;
    }
    return Until(back, next_attempt_);
  }

  std::optional<int64_t> acquired;
  std::optional<std::string> error = ErrorOf([&] { acquired = strategy_.TryAcquire(options_.ttl); });
  const bool failed = error.has_value();
  std::lock_guard lock(mu_);
  const Clock::TimePoint back = clock_.Now();
  if (failed) {
    ++stats_.acquire_failures;
    spdlog::warn("LEASE_ACQUIRE_FAILED lock={} owner={} err={}", name_, strategy_.owner(), *error);
    next_attempt_ = back + options_.acquire_interval;
  } else if (!acquired) {
    next_attempt_ = back + options_.acquire_interval;
  } else if (back >= deadline) {
    // Held in the table, but for too short a time left to use: take it again at once.
    spdlog::warn("LEASE_ACQUIRE_LATE lock={} owner={} token={}", name_, strategy_.owner(), *acquired);
    may_hold_row_ = true;
    next_attempt_ = back;
  } else {
    leader_ = true;
    may_hold_row_ = true;
    token_ = *acquired;
    valid_until_ = deadline;
    ++stats_.acquired;
    next_attempt_ = sent + options_.renew_interval;
    spdlog::info("LEASE_ACQUIRED lock={} owner={} token={} ttl_ms={}", name_, strategy_.owner(),
                 token_, options_.ttl.count());
  }
  return Until(back, next_attempt_);
}

bool Locker::is_leader() {
  std::lock_guard lock(mu_);
  return leader_ && clock_.Now() < valid_until_;
}

std::optional<int64_t> Locker::token() {
  std::lock_guard lock(mu_);
  if (leader_ && clock_.Now() < valid_until_) return token_;
  return std::nullopt;
}

LockerStats Locker::stats() {
  std::lock_guard lock(mu_);
  LockerStats s = stats_;
  s.leader = leader_ && clock_.Now() < valid_until_;
  s.token = token_;
  return s;
}

void Locker::Start() {
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { Loop(stop); });
}

void Locker::Loop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    Millis wait = Tick();
    if (!clock_.SleepFor(std::max(wait, Millis(1)), stop)) break;
  }
}

void Locker::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
    thread_ = std::jthread();
  }
  Release();
}

void Locker::Release() {
  int64_t token;
  bool was_leader;
  {
    std::lock_guard lock(mu_);
    // Also after a local loss: the row may still name this owner until it expires.
    if (!may_hold_row_) return;
    may_hold_row_ = false;
    was_leader = leader_;
    leader_ = false;
    token = token_;
    next_attempt_ = clock_.Now() + options_.acquire_interval;
  }
  try {
    strategy_.Release();
    spdlog::info("LEASE_RELEASED lock={} owner={} token={} was_leader={}", name_, strategy_.owner(),
                 token, was_leader);
  } catch (const std::exception& e) {
    spdlog::warn("LEASE_RELEASE_FAILED lock={} owner={} token={} err={}", name_, strategy_.owner(),
                 token, e.what());
  }
}

}  // namespace dsync::dispatcher
