// Test support: a Clock whose time moves only when a test advances it (or a SleepFor
// call does), so timing logic (backoff, lease renewal, watchdogs) is tested without
// sleeping. Production code sees only core/clock.h's Clock.
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
