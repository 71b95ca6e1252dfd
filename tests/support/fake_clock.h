// Test support: a Clock whose time moves only when a test advances it (or a SleepFor
// call, or a WaitFor that times out, does), so timing logic (backoff, lease renewal,
// watchdogs, poll pauses) is tested without sleeping. Production code sees only
// core/clock.h's Clock.
//
// Thread safety: internally synchronised.
#pragma once

#include <mutex>
#include <stop_token>

#include "core/clock.h"

namespace dsync {

class FakeClock final : public Clock {
 public:
  TimePoint Now() override;
  // 2026-01-01T00:00:00Z plus the time advanced so far.
  WallTime WallNow() override;
  // Advances time by `d` at once and returns true, unless already stopped.
  bool SleepFor(Millis d, std::stop_token stop) override;
  // done() at once when it holds; otherwise `d` passes at once (as SleepFor) and
  // done() is asked again. Never blocks.
  bool WaitFor(std::condition_variable_any& cv, std::unique_lock<std::mutex>& lock, std::stop_token stop,
               Millis d, const std::function<bool()>& done) override;
  void Advance(Millis d);
  // Steps the calendar time (WallNow) alone by `d`, which may be negative: a clock
  // stepped by NTP or an operator. Now() (steady) does not move.
  void StepWall(Millis d);
  Millis total_slept();

 private:
  std::mutex mu_;
  TimePoint now_{};
  Millis slept_{0};
  Millis wall_step_{0};
};

}  // namespace dsync
