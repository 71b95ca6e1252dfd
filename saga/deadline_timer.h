// Fires stop requests at deadlines: the engine's cooperative cancellation of step
// handlers. One background thread per timer, started on the first Arm().
//
//   DeadlineTimer timer(clock);
//   std::stop_source src;
//   auto ticket = timer.Arm(clock.Now() + 30s, src);  // src.request_stop() at the deadline
//   ... handler runs with src.get_token() ...
//   // ticket's destructor disarms it
//
// Deadlines are process-local (a step's own time budget), so they use the injected
// Clock. With a FakeClock the thread re-checks at least every 20 ms, so a test that
// advances the clock sees the stop soon after.
//
// Thread safety: Arm and tickets may be used from any thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <stop_token>
#include <thread>

#include "core/clock.h"

namespace dsync::saga {

class DeadlineTimer {
 public:
  explicit DeadlineTimer(Clock& clock) : clock_(clock) {}
  ~DeadlineTimer();
  DeadlineTimer(const DeadlineTimer&) = delete;
  DeadlineTimer& operator=(const DeadlineTimer&) = delete;

  // Disarms its deadline when destroyed (before the stop_source it refers to dies).
  class Ticket {
   public:
    Ticket(DeadlineTimer* timer, uint64_t id) : timer_(timer), id_(id) {}
    Ticket(Ticket&& o) noexcept : timer_(o.timer_), id_(o.id_) { o.timer_ = nullptr; }
    Ticket& operator=(Ticket&&) = delete;
    ~Ticket() { if (timer_) timer_->Disarm(id_); }

   private:
    DeadlineTimer* timer_;
    uint64_t id_;
  };

  // `source` must outlive the returned ticket.
  [[nodiscard]] Ticket Arm(Clock::TimePoint deadline, std::stop_source& source);

 private:
  void Disarm(uint64_t id);
  void Loop(std::stop_token stop);

  Clock& clock_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  struct Entry {
    Clock::TimePoint deadline;
    std::stop_source* source;
  };
  std::map<uint64_t, Entry> armed_;
  // When the loop wakes next on its own (max: it is waiting for the first Arm). Arm
  // wakes it only for an earlier deadline, so arming costs no context switch.
  Clock::TimePoint wake_at_ = Clock::TimePoint::max();
  uint64_t next_id_ = 1;
  std::jthread thread_;  // last: joined before the members it uses are destroyed
};

}  // namespace dsync::saga
