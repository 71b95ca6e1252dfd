#include "control/schedule_tick.h"

namespace dsync::control {

TickDecision DecideTick(const CronExpression& cron, MissedTickPolicy policy, std::chrono::milliseconds grace,
                        std::optional<WallTime> next_tick, WallTime now) {
  TickDecision d;
  if (next_tick && *next_tick > now) {
    d.next_tick = next_tick;
    return d;
  }
  d.next_tick = cron.NextAfter(now);
  if (!next_tick) return d;  // new (or changed): starts at the next tick
  const std::optional<WallTime> latest = cron.LatestAtOrBefore(now);
  if (!latest || *latest < *next_tick) return d;  // no tick in [next_tick, now]
  int64_t due = 0;
  // Ticks are whole seconds (control/cron.h): NextAfter(next_tick - 1 s) is next_tick
  // itself, so the count starts there and no earlier tick is counted.
  for (std::optional<WallTime> t = *next_tick - std::chrono::seconds(1); due < kMaxCountedTicks;) {
    t = cron.NextAfter(*t);
    if (!t || *t > *latest) break;
    ++due;
  }
  // next_tick itself is a tick unless the cron changed underneath (handled above), so due >= 1.
  if (due == 0) due = 1;
  const bool on_time = now - *latest <= grace;
  if (policy == MissedTickPolicy::kRunOnce || on_time) {
    d.fire = latest;
    d.skipped = due - 1;
  } else {
    d.skipped = due;
  }
  return d;
}

}  // namespace dsync::control
