#include "saga/deadline_timer.h"

#include <algorithm>

namespace dsync::saga {

DeadlineTimer::~DeadlineTimer() {
  if (thread_.joinable()) {
    thread_.request_stop();
    cv_.notify_all();
    thread_.join();
  }
}

DeadlineTimer::Ticket DeadlineTimer::Arm(Clock::TimePoint deadline, std::stop_source& source) {
  std::lock_guard lock(mu_);
  if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token st) { Loop(st); });
  uint64_t id = next_id_++;
  armed_.emplace(id, Entry{deadline, &source});
  if (deadline < wake_at_) cv_.notify_all();
  return Ticket(this, id);
}

void DeadlineTimer::Disarm(uint64_t id) {
  std::lock_guard lock(mu_);
  armed_.erase(id);
}

void DeadlineTimer::Loop(std::stop_token stop) {
  constexpr Millis kMaxWait{20};
  std::unique_lock lock(mu_);
  while (!stop.stop_requested()) {
    if (armed_.empty()) {
      wake_at_ = Clock::TimePoint::max();
      cv_.wait(lock, stop, [&] { return !armed_.empty(); });
      continue;
    }
    auto now = clock_.Now();
    Clock::TimePoint earliest = Clock::TimePoint::max();
    for (auto it = armed_.begin(); it != armed_.end();) {
      if (it->second.deadline <= now) {
        it->second.source->request_stop();  // fires the handler's stop_callbacks
        it = armed_.erase(it);
      } else {
        earliest = std::min(earliest, it->second.deadline);
        ++it;
      }
    }
    if (armed_.empty()) continue;
    auto wait = std::min<Clock::TimePoint::duration>(earliest - now, kMaxWait);
    wake_at_ = now + wait;
    // Real time, bounded by kMaxWait: the timer observes the clock and never drives
    // it (a FakeClock's WaitFor would let the waited time pass at once).
    cv_.wait_for(lock, stop, wait, [] { return false; });
  }
}

}  // namespace dsync::saga
