// The tick rule of schedules (control/schedule_tick.h), pure: a new schedule starts at
// its next tick, an on-time tick fires once, the missed-tick policies (skip, run_once)
// when ticks passed unseen, and clocks stepping forward and back, including a long
// random walk of a clock that never fires a tick twice and (steps within the grace)
// never misses one; the same with second ticks (six-field expressions).
#include <chrono>
#include <cstdio>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "control/schedule_tick.h"

namespace dsync::control {
namespace {

using namespace std::chrono;
using namespace std::chrono_literals;

WallTime TickAt(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &s);
  return WallTime(sys_days(year(y) / month(mo) / day(d)) + hours(h) + minutes(mi) + seconds(s));
}

std::string Iso(const std::optional<WallTime>& t) { return t ? FormatUtc(*t) : "none"; }

const CronExpression kHourly = CronExpression::Parse("0 * * * *");

TEST(ScheduleTickTest, ANewScheduleStartsAtItsNextTickWithoutFiring) {
  TickDecision d = DecideTick(kHourly, MissedTickPolicy::kRunOnce, 60s, std::nullopt, TickAt("2026-11-27 03:00:10"));
  EXPECT_FALSE(d.fire);
  EXPECT_EQ(d.skipped, 0);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T04:00:00Z");
}

TEST(ScheduleTickTest, NothingBeforeTheNextTick) {
  TickDecision d = DecideTick(kHourly, MissedTickPolicy::kSkip, 60s, TickAt("2026-11-27 04:00"),
                              TickAt("2026-11-27 03:59:59"));
  EXPECT_FALSE(d.fire);
  EXPECT_EQ(d.skipped, 0);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T04:00:00Z");
}

TEST(ScheduleTickTest, AnOnTimeTickFiresOnceUnderEitherPolicy) {
  for (MissedTickPolicy p : {MissedTickPolicy::kSkip, MissedTickPolicy::kRunOnce}) {
    TickDecision d = DecideTick(kHourly, p, 60s, TickAt("2026-11-27 04:00"), TickAt("2026-11-27 04:00:00"));
    EXPECT_EQ(Iso(d.fire), "2026-11-27T04:00:00Z");
    EXPECT_EQ(d.skipped, 0);
    EXPECT_EQ(Iso(d.next_tick), "2026-11-27T05:00:00Z");
    // Seen 59 s late: still on time with a grace of 60 s.
    d = DecideTick(kHourly, p, 60s, TickAt("2026-11-27 04:00"), TickAt("2026-11-27 04:00:59"));
    EXPECT_EQ(Iso(d.fire), "2026-11-27T04:00:00Z");
  }
}

TEST(ScheduleTickTest, SkipFiresNothingForTicksSeenTooLate) {
  // Ticks 01:00, 02:00, 03:00 passed while nobody led; seen at 03:30.
  TickDecision d = DecideTick(kHourly, MissedTickPolicy::kSkip, 60s, TickAt("2026-11-27 01:00"),
                              TickAt("2026-11-27 03:30"));
  EXPECT_FALSE(d.fire);
  EXPECT_EQ(d.skipped, 3);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T04:00:00Z");
  // Seen at 03:00:30 instead: the latest is on time and fires; the two before are skipped.
  d = DecideTick(kHourly, MissedTickPolicy::kSkip, 60s, TickAt("2026-11-27 01:00"), TickAt("2026-11-27 03:00:30"));
  EXPECT_EQ(Iso(d.fire), "2026-11-27T03:00:00Z");
  EXPECT_EQ(d.skipped, 2);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T04:00:00Z");
}

TEST(ScheduleTickTest, RunOnceFiresTheLatestMissedTickOnce) {
  TickDecision d = DecideTick(kHourly, MissedTickPolicy::kRunOnce, 60s, TickAt("2026-11-27 01:00"),
                              TickAt("2026-11-27 03:30"));
  EXPECT_EQ(Iso(d.fire), "2026-11-27T03:00:00Z");
  EXPECT_EQ(d.skipped, 2);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T04:00:00Z");
}

TEST(ScheduleTickTest, AClockSteppingBackNeverRepeatsATick) {
  // 04:00 fired; next_tick is 05:00. The clock steps back two hours, then comes forward.
  const std::optional<WallTime> next = TickAt("2026-11-27 05:00");
  for (const char* now : {"2026-11-27 02:00", "2026-11-27 03:00:00", "2026-11-27 04:00:00", "2026-11-27 04:59:59"}) {
    TickDecision d = DecideTick(kHourly, MissedTickPolicy::kRunOnce, 60s, next, TickAt(now));
    EXPECT_FALSE(d.fire) << now;
    EXPECT_EQ(d.skipped, 0) << now;
    EXPECT_EQ(Iso(d.next_tick), "2026-11-27T05:00:00Z") << now;
  }
  TickDecision d = DecideTick(kHourly, MissedTickPolicy::kRunOnce, 60s, next, TickAt("2026-11-27 05:00:01"));
  EXPECT_EQ(Iso(d.fire), "2026-11-27T05:00:00Z");
}

TEST(ScheduleTickTest, AClockSteppingForwardYearsYieldsOneEventOrNone) {
  const CronExpression every_minute = CronExpression::Parse("* * * * *");
  const std::optional<WallTime> next = TickAt("2026-11-27 04:00");
  const WallTime later = TickAt("2036-11-27 04:00:30");
  TickDecision d = DecideTick(every_minute, MissedTickPolicy::kRunOnce, 60s, next, later);
  EXPECT_EQ(Iso(d.fire), "2036-11-27T04:00:00Z");
  EXPECT_EQ(d.skipped, kMaxCountedTicks - 1);  // counted up to the cap
  EXPECT_EQ(Iso(d.next_tick), "2036-11-27T04:01:00Z");
  d = DecideTick(every_minute, MissedTickPolicy::kSkip, 10s, next, later);  // latest 30 s late: missed
  EXPECT_FALSE(d.fire);
  EXPECT_EQ(d.skipped, kMaxCountedTicks);
}

// What a walk of the clock made DecideTick do: the ticks fired (epoch seconds, each once:
// a second firing fails the test) and the ticks it counted as skipped.
struct ClockWalk {
  std::set<int64_t> fired;
  int64_t skipped = 0;
};

// 20,000 looks at `cron` from `start`, the clock stepping forward by up to `forward`
// (under the grace) and, one look in 50, back by up to `back`.
ClockWalk WalkTheClock(const CronExpression& cron, MissedTickPolicy p, milliseconds grace, WallTime start,
                       milliseconds forward, milliseconds back, uint64_t seed) {
  std::mt19937_64 random(seed);
  WallTime now = start;
  std::optional<WallTime> next;
  ClockWalk walk;
  for (int i = 0; i < 20000; ++i) {
    if (random() % 50 == 0) {
      now -= milliseconds(static_cast<int64_t>(random() % (back.count() + 1)));
    } else {
      now += milliseconds(static_cast<int64_t>(random() % (forward.count() + 1)));
    }
    TickDecision d = DecideTick(cron, p, grace, next, now);
    if (d.fire) {
      EXPECT_TRUE(walk.fired.insert(EpochSeconds(*d.fire)).second) << "fired twice: " << FormatUtc(*d.fire);
    }
    walk.skipped += d.skipped;
    next = d.next_tick;
  }
  return walk;
}

// A clock walking forward in steps of up to 50 s (under the 60 s grace) with an
// occasional step back of up to 10 minutes: every tick of an every-5-minutes schedule
// between the first and the last is fired exactly once, under both policies.
TEST(ScheduleTickTest, ARandomWalkOfTheClockFiresEveryTickExactlyOnce) {
  const CronExpression cron = CronExpression::Parse("*/5 * * * *");
  for (MissedTickPolicy p : {MissedTickPolicy::kSkip, MissedTickPolicy::kRunOnce}) {
    const ClockWalk walk = WalkTheClock(cron, p, 60s, TickAt("2026-11-27 00:00:07"), 50s, 600s,
                                        p == MissedTickPolicy::kSkip ? 1 : 2);
    const std::set<int64_t>& fired = walk.fired;
    EXPECT_EQ(walk.skipped, 0);
    ASSERT_FALSE(fired.empty());
    // Every tick from the first fired to the last fired is there.
    int64_t expected = 0;
    for (std::optional<WallTime> t = WallTime(seconds(*fired.begin())); t && EpochSeconds(*t) <= *fired.rbegin();
         t = cron.NextAfter(*t)) {
      ++expected;
      EXPECT_TRUE(fired.count(EpochSeconds(*t))) << "missed " << FormatUtc(*t);
    }
    EXPECT_EQ(static_cast<int64_t>(fired.size()), expected);
    EXPECT_GT(expected, 500);  // the walk covered days of ticks
  }
}

// --- second ticks (six-field expressions) ---------------------------------------------

const CronExpression kEvery10s = CronExpression::Parse("*/10 * * * * *");

TEST(ScheduleTickTest, SecondTicksFireOnTimeAndStartAtTheNextOne) {
  TickDecision d = DecideTick(kEvery10s, MissedTickPolicy::kSkip, 4s, std::nullopt, TickAt("2026-11-27 03:04:05"));
  EXPECT_FALSE(d.fire);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T03:04:10Z");
  d = DecideTick(kEvery10s, MissedTickPolicy::kSkip, 4s, TickAt("2026-11-27 03:04:10"), TickAt("2026-11-27 03:04:09"));
  EXPECT_FALSE(d.fire);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T03:04:10Z");
  for (MissedTickPolicy p : {MissedTickPolicy::kSkip, MissedTickPolicy::kRunOnce}) {
    d = DecideTick(kEvery10s, p, 4s, TickAt("2026-11-27 03:04:10"), TickAt("2026-11-27 03:04:11"));
    EXPECT_EQ(Iso(d.fire), "2026-11-27T03:04:10Z");
    EXPECT_EQ(d.skipped, 0);
    EXPECT_EQ(Iso(d.next_tick), "2026-11-27T03:04:20Z");
  }
}

TEST(ScheduleTickTest, MissedSecondTicksAreCountedOneByOne) {
  // next_tick 03:04:50; seen at 03:06:15: ticks :50, 05:00 .. 05:50, 06:00, 06:10 are due (9).
  const std::optional<WallTime> next = TickAt("2026-11-27 03:04:50");
  TickDecision d = DecideTick(kEvery10s, MissedTickPolicy::kSkip, 4s, next, TickAt("2026-11-27 03:06:15"));
  EXPECT_FALSE(d.fire);  // the latest, 06:10, is 5 s late with a grace of 4 s
  EXPECT_EQ(d.skipped, 9);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T03:06:20Z");
  d = DecideTick(kEvery10s, MissedTickPolicy::kSkip, 4s, next, TickAt("2026-11-27 03:06:13"));
  EXPECT_EQ(Iso(d.fire), "2026-11-27T03:06:10Z");  // 3 s late: on time
  EXPECT_EQ(d.skipped, 8);
  d = DecideTick(kEvery10s, MissedTickPolicy::kRunOnce, 4s, next, TickAt("2026-11-27 03:06:15"));
  EXPECT_EQ(Iso(d.fire), "2026-11-27T03:06:10Z");
  EXPECT_EQ(d.skipped, 8);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T03:06:20Z");
  // Across midnight, every second: 23:59:58, 23:59:59, 00:00:00, 00:00:01 are due.
  const CronExpression every_second = CronExpression::Parse("* * * * * *");
  d = DecideTick(every_second, MissedTickPolicy::kRunOnce, 1s, TickAt("2026-11-27 23:59:58"),
                 TickAt("2026-11-28 00:00:01"));
  EXPECT_EQ(Iso(d.fire), "2026-11-28T00:00:01Z");
  EXPECT_EQ(d.skipped, 3);
  EXPECT_EQ(Iso(d.next_tick), "2026-11-28T00:00:02Z");
  // A day of an every-second schedule is counted up to the cap.
  d = DecideTick(every_second, MissedTickPolicy::kSkip, 1s, TickAt("2026-11-27 00:00:00"),
                 TickAt("2026-11-29 00:00:00"));
  EXPECT_EQ(Iso(d.fire), "2026-11-29T00:00:00Z");
  EXPECT_EQ(d.skipped, kMaxCountedTicks - 1);
}

// Minute ticks counted after a gap of a few seconds: a tick a few seconds before
// next_tick (the old rule looked back a whole minute) is never counted.
TEST(ScheduleTickTest, OnlyTicksFromNextTickOnAreCounted) {
  const CronExpression two = CronExpression::Parse("0,55 * * * * *");  // :00 and :55 of each minute
  TickDecision d = DecideTick(two, MissedTickPolicy::kRunOnce, 60s, TickAt("2026-11-27 03:05:00"),
                              TickAt("2026-11-27 03:05:30"));
  EXPECT_EQ(Iso(d.fire), "2026-11-27T03:05:00Z");
  EXPECT_EQ(d.skipped, 0);  // 03:04:55 lies before next_tick: handled already
  EXPECT_EQ(Iso(d.next_tick), "2026-11-27T03:05:55Z");
}

// The random walk of the clock again, with ticks every 10 s and steps of up to 3 s
// (under a 4 s grace): every tick from the first to the last fires exactly once.
TEST(ScheduleTickTest, ARandomWalkOverSecondTicksFiresEveryTickExactlyOnce) {
  for (MissedTickPolicy p : {MissedTickPolicy::kSkip, MissedTickPolicy::kRunOnce}) {
    const ClockWalk walk = WalkTheClock(kEvery10s, p, 4s, TickAt("2026-11-27 23:50:03"), 3s, 30s,
                                        p == MissedTickPolicy::kSkip ? 3 : 4);
    const std::set<int64_t>& fired = walk.fired;
    EXPECT_EQ(walk.skipped, 0);
    ASSERT_FALSE(fired.empty());
    EXPECT_EQ(*fired.rbegin() - *fired.begin(), 10 * static_cast<int64_t>(fired.size() - 1));  // none missing
    EXPECT_GT(fired.size(), 1000u);  // the walk crossed midnight and hours of ticks
  }
}

}  // namespace
}  // namespace dsync::control
