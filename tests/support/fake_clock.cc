#include "tests/support/fake_clock.h"

namespace dsync {

Clock::TimePoint FakeClock::Now() {
  std::lock_guard lock(mu_);
  return now_;
}

Clock::WallTime FakeClock::WallNow() {
  std::lock_guard lock(mu_);
  return WallTime(std::chrono::seconds(1767225600)) +
         std::chrono::duration_cast<WallTime::duration>(now_ - TimePoint{}) + wall_step_;
}

bool FakeClock::SleepFor(Millis d, std::stop_token stop) {
  if (stop.stop_requested()) return false;
  std::lock_guard lock(mu_);
  now_ += d;
  slept_ += d;
  return true;
}

bool FakeClock::WaitFor(std::condition_variable_any&, std::unique_lock<std::mutex>&, std::stop_token stop,
                        Millis d, const std::function<bool()>& done) {
  if (done()) return true;
  SleepFor(d, stop);
  return done();
}

void FakeClock::Advance(Millis d) {
  std::lock_guard lock(mu_);
  now_ += d;
}

void FakeClock::StepWall(Millis d) {
  std::lock_guard lock(mu_);
  wall_step_ += d;
}

Millis FakeClock::total_slept() {
  std::lock_guard lock(mu_);
  return slept_;
}

}  // namespace dsync
