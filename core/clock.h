// Process-local time, injected so that timing logic (backoff, intervals, watchdogs)
// can be tested with a FakeClock instead of sleeping.
//
// Decisions that compare the clocks of different machines (liveness, lease expiry,
// processing timeouts) never use a Clock: they are made in SQL with NOW(3).
//
// Thread safety: SystemClock is stateless; FakeClock is internally synchronised.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>

namespace dsync {

using Millis = std::chrono::milliseconds;

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  // Sleeps for `d` or until `stop` is requested. Returns false when stopped.
  virtual bool SleepFor(Millis d, std::stop_token stop) = 0;
};

class SystemClock final : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  bool SleepFor(Millis d, std::stop_token stop) override;
};

// Time moves only when a test (or a SleepFor call) advances it.
class FakeClock final : public Clock {
 public:
  TimePoint Now() override;
  // Advances time by `d` at once and returns true, unless already stopped.
  bool SleepFor(Millis d, std::stop_token stop) override;
  void Advance(Millis d);
  Millis total_slept();

 private:
  std::mutex mu_;
  TimePoint now_{};
  Millis slept_{0};
};

}  // namespace dsync
