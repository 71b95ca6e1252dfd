// The tick rule of a schedule (config `schedules`, docs/pause-and-schedules.md): given
// its cron expression, its missed-tick policy and the earliest tick not yet handled
// (dsync_schedule.next_tick, V023), what the leader does at `now`. Pure: the
// scheduler (control/scheduler.h) reads the state, asks DecideTick and writes the
// answer in one fenced transaction with the event; tests drive it with any clock.
//
//   - No state yet (a new schedule, or its cron expression changed): nothing fires;
//     next_tick becomes the first tick after now. Ticks before a schedule existed are
//     not owed.
//   - next_tick after now: nothing (also after the clock stepped back: a tick already
//     handled is never handled again, and its event code would refuse a second event).
//   - next_tick at or before now: the ticks in [next_tick, now] are due. At most one
//     event fires, for the latest of them:
//       run_once  always (the missed ones are folded into it);
//       skip      only when it is on time (now - tick <= grace); else none fires.
//     Every due tick that does not fire is counted as skipped; next_tick becomes the
//     first tick after now. So a clock stepping forward over many ticks yields one
//     event (run_once) or none (skip), never a burst.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "config/schedules.h"
#include "control/cron.h"

namespace dsync::control {

struct TickDecision {
  std::optional<WallTime> fire;  // the tick to produce an event for
  int64_t skipped = 0;           // due ticks not fired (counted up to kMaxCountedTicks)
  std::optional<WallTime> next_tick;  // the first tick after now (nullopt: none within 29 years)
};

// Ticks counted one by one at most (a clock step of years over an every-minute
// schedule, or of 28 hours over an every-second one, is counted as this many).
inline constexpr int64_t kMaxCountedTicks = 100000;

TickDecision DecideTick(const CronExpression& cron, MissedTickPolicy policy, std::chrono::milliseconds grace,
                        std::optional<WallTime> next_tick, WallTime now);

}  // namespace dsync::control
