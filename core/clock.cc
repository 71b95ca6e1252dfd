#include "core/clock.h"

#include <condition_variable>
#include <mutex>

namespace dsync {

bool SystemClock::SleepFor(Millis d, std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  std::unique_lock lock(mu);
  return !cv.wait_for(lock, stop, d, [] { return false; }) && !stop.stop_requested();
}

bool SystemClock::WaitFor(std::condition_variable_any& cv, std::unique_lock<std::mutex>& lock,
                          std::stop_token stop, Millis d, const std::function<bool()>& done) {
  return cv.wait_for(lock, stop, d, done);
}

std::chrono::steady_clock::time_point RealDeadline(Clock& clock, Clock::TimePoint deadline) {
  if (deadline == Clock::TimePoint::max() || dynamic_cast<SystemClock*>(&clock) != nullptr) return deadline;
  return std::chrono::steady_clock::now() + (deadline - clock.Now());
}

}  // namespace dsync
