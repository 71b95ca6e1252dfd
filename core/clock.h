// Process-local time, injected so that timing logic (backoff, intervals, watchdogs,
// deadlines) can be tested with a fake clock (tests/support/fake_clock.h) instead of
// sleeping. Outside core/ no code reads std::chrono's clocks directly: components that
// wait, time out or measure are handed a Clock by their owner (wired once in app/).
//
// Decisions that compare the clocks of different machines (liveness, lease expiry,
// processing timeouts) never use a Clock: they are made in SQL with NOW(3).
//
// Thread safety: SystemClock is stateless.
#pragma once

#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <stop_token>

namespace dsync {

using Millis = std::chrono::milliseconds;

// A duration as the microseconds SQL's TIMESTAMPADD(MICROSECOND, ...) and INTERVAL ...
// MICROSECOND take.
constexpr int64_t Micros(Millis d) { return static_cast<int64_t>(d.count()) * 1000; }

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using WallTime = std::chrono::system_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  // Calendar time, for names and timestamps shown to people; never for intervals.
  virtual WallTime WallNow() = 0;
  // Sleeps for `d` or until `stop` is requested. Returns false when stopped.
  virtual bool SleepFor(Millis d, std::stop_token stop) = 0;
  // Waits on `cv`, with `lock` held, until `done()` holds (other threads change its
  // state and notify `cv`), `d` passes on this clock, or `stop` is requested; returns
  // done(). The timed condition-variable waits of loops that a clock paces (a poll
  // loop, a pause) go through here, so a fake clock drives their timeouts too. A
  // thread that only watches the clock (saga::DeadlineTimer) waits in real time:
  // a fake clock lets the waited time pass at once, so it would move time itself.
  virtual bool WaitFor(std::condition_variable_any& cv, std::unique_lock<std::mutex>& lock,
                       std::stop_token stop, Millis d, const std::function<bool()>& done) = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  WallTime WallNow() override { return std::chrono::system_clock::now(); }
  bool SleepFor(Millis d, std::stop_token stop) override;
  bool WaitFor(std::condition_variable_any& cv, std::unique_lock<std::mutex>& lock, std::stop_token stop,
               Millis d, const std::function<bool()>& done) override;
};

// The point on std::chrono::steady_clock at which `clock` reaches `deadline` (as far
// from now as `deadline` is on `clock`), for the waits core/ bounds in real time with
// poll() (HttpClient::Send, RunChild): a step hands them its deadline through this, so
// on a fake clock they are bounded by the fake deadline's distance, not by a time point
// of another clock. On a SystemClock it is `deadline` itself; TimePoint::max() stays so.
std::chrono::steady_clock::time_point RealDeadline(Clock& clock, Clock::TimePoint deadline);

}  // namespace dsync
