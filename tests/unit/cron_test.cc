// The cron parser of config `schedules` (control/cron.h): fields, ranges, lists, steps,
// names, macros, the day-of-month / day-of-week rule of cron(8), the optional leading
// seconds field, refusals, and the next / latest tick searches (checked against each
// other over many instants).
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "control/cron.h"
#include "core/error.h"

namespace dsync::control {
namespace {

using namespace std::chrono;

// "2026-11-27 03:04" (UTC) -> a time point; seconds optional ("... 03:04:05").
WallTime CronAt(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  const int n = std::sscanf(text.c_str(), "%d-%d-%d %d:%d:%d", &y, &mo, &d, &h, &mi, &s);
  EXPECT_GE(n, 5) << text;
  return WallTime(sys_days(year(y) / month(mo) / day(d)) + hours(h) + minutes(mi) + seconds(s));
}

std::string Next(const std::string& expr, const std::string& after) {
  auto t = CronExpression::Parse(expr).NextAfter(CronAt(after));
  return t ? FormatUtc(*t) : "none";
}

std::string Latest(const std::string& expr, const std::string& at) {
  auto t = CronExpression::Parse(expr).LatestAtOrBefore(CronAt(at));
  return t ? FormatUtc(*t) : "none";
}

std::string CronRefusal(const std::string& expr) {
  try {
    CronExpression::Parse(expr);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(CronTest, EveryMinuteIsTheNextWholeMinute) {
  EXPECT_EQ(Next("* * * * *", "2026-11-27 03:04"), "2026-11-27T03:05:00Z");
  EXPECT_EQ(Next("* * * * *", "2026-11-27 03:04:59"), "2026-11-27T03:05:00Z");
  EXPECT_EQ(Next("* * * * *", "2026-12-31 23:59:30"), "2027-01-01T00:00:00Z");
  EXPECT_EQ(Latest("* * * * *", "2026-11-27 03:04:59"), "2026-11-27T03:04:00Z");
}

TEST(CronTest, FixedTimeOfDay) {
  EXPECT_EQ(Next("0 3 * * *", "2026-11-27 02:59:59"), "2026-11-27T03:00:00Z");
  EXPECT_EQ(Next("0 3 * * *", "2026-11-27 03:00"), "2026-11-28T03:00:00Z");  // strictly after
  EXPECT_EQ(Latest("0 3 * * *", "2026-11-27 03:00"), "2026-11-27T03:00:00Z");  // at or before
  EXPECT_EQ(Latest("0 3 * * *", "2026-11-27 02:59"), "2026-11-26T03:00:00Z");
  EXPECT_EQ(Next("30 23 31 12 *", "2026-12-31 23:30"), "2027-12-31T23:30:00Z");
}

TEST(CronTest, RangesListsAndSteps) {
  EXPECT_EQ(Next("*/15 * * * *", "2026-11-27 03:01"), "2026-11-27T03:15:00Z");
  EXPECT_EQ(Next("*/15 * * * *", "2026-11-27 03:45"), "2026-11-27T04:00:00Z");
  EXPECT_EQ(Next("5,35 * * * *", "2026-11-27 03:06"), "2026-11-27T03:35:00Z");
  EXPECT_EQ(Next("0 9-17/4 * * *", "2026-11-27 10:00"), "2026-11-27T13:00:00Z");  // 9, 13, 17
  EXPECT_EQ(Next("0 9-17/4 * * *", "2026-11-27 17:00"), "2026-11-28T09:00:00Z");
  EXPECT_EQ(Next("10/20 * * * *", "2026-11-27 03:31"), "2026-11-27T03:50:00Z");  // 10-59/20: 10, 30, 50
  EXPECT_EQ(Next("0 0 1,15 * *", "2026-11-02 00:00"), "2026-11-15T00:00:00Z");
  EXPECT_EQ(Next("0 0 1-3,20 * *", "2026-11-03 00:00"), "2026-11-20T00:00:00Z");
}

TEST(CronTest, MonthAndWeekdayNames) {
  // 2026-11-27 is a Friday.
  EXPECT_EQ(Next("0 8 * * mon-fri", "2026-11-27 08:00"), "2026-11-30T08:00:00Z");  // Monday
  EXPECT_EQ(Next("0 8 * * MON-FRI", "2026-11-27 07:00"), "2026-11-27T08:00:00Z");
  EXPECT_EQ(Next("0 0 * * sun", "2026-11-27 00:00"), "2026-11-29T00:00:00Z");
  EXPECT_EQ(Next("0 0 * * 7", "2026-11-27 00:00"), "2026-11-29T00:00:00Z");  // 7 is Sunday
  EXPECT_EQ(Next("0 0 * * 0", "2026-11-27 00:00"), "2026-11-29T00:00:00Z");
  EXPECT_EQ(Next("0 0 1 jan,Jul *", "2026-11-27 00:00"), "2027-01-01T00:00:00Z");
  EXPECT_EQ(Next("0 0 1 jun-aug *", "2026-11-27 00:00"), "2027-06-01T00:00:00Z");
}

TEST(CronTest, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  // cron(8): both restricted -> either matches. The 13th, or any Friday.
  EXPECT_EQ(Next("0 0 13 * fri", "2026-11-27 00:00"), "2026-12-04T00:00:00Z");   // Friday 4 Dec first
  EXPECT_EQ(Next("0 0 13 * fri", "2026-12-04 00:00"), "2026-12-11T00:00:00Z");
  EXPECT_EQ(Next("0 0 13 * fri", "2026-12-11 00:00"), "2026-12-13T00:00:00Z");   // the 13th, a Sunday
  // One restricted, the other '*' (or starting with '*'): both must hold.
  EXPECT_EQ(Next("0 0 13 * *", "2026-12-11 00:00"), "2026-12-13T00:00:00Z");
  EXPECT_EQ(Next("0 0 */2 * fri", "2026-11-27 00:00"), "2026-12-11T00:00:00Z");  // odd day and Friday
}

TEST(CronTest, LeapDayAndRareCombinations) {
  EXPECT_EQ(Next("0 0 29 2 *", "2026-11-27 00:00"), "2028-02-29T00:00:00Z");
  EXPECT_EQ(Latest("0 0 29 2 *", "2026-11-27 00:00"), "2024-02-29T00:00:00Z");
  // 29 February that is a Monday, or any Monday of February: both restricted -> either.
  EXPECT_EQ(Next("0 0 29 2 mon", "2026-11-27 00:00"), "2027-02-01T00:00:00Z");
}

TEST(CronTest, Macros) {
  EXPECT_EQ(Next("@hourly", "2026-11-27 03:04"), "2026-11-27T04:00:00Z");
  EXPECT_EQ(Next("@daily", "2026-11-27 03:04"), "2026-11-28T00:00:00Z");
  EXPECT_EQ(Next("@midnight", "2026-11-27 03:04"), "2026-11-28T00:00:00Z");
  EXPECT_EQ(Next("@weekly", "2026-11-27 03:04"), "2026-11-29T00:00:00Z");
  EXPECT_EQ(Next("@monthly", "2026-11-27 03:04"), "2026-12-01T00:00:00Z");
  EXPECT_EQ(Next("@yearly", "2026-11-27 03:04"), "2027-01-01T00:00:00Z");
  EXPECT_EQ(Next("@annually", "2026-11-27 03:04"), "2027-01-01T00:00:00Z");
  EXPECT_EQ(Next("  0  3 * *   *  ", "2026-11-27 03:04"), "2026-11-28T03:00:00Z");  // spaces
}

TEST(CronTest, RefusesWithOneLineNamingTheField) {
  EXPECT_EQ(CronRefusal("0 3 * *"),
            "cron: expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got 4");
  EXPECT_EQ(CronRefusal("0 0 3 * * * *"),
            "cron: expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got 7");
  EXPECT_EQ(CronRefusal(""),
            "cron: expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got 0");
  EXPECT_EQ(CronRefusal("60 * * * *"), "cron field 1 (minute): 60 is out of range 0-59");
  EXPECT_EQ(CronRefusal("0 24 * * *"), "cron field 2 (hour): 24 is out of range 0-23");
  EXPECT_EQ(CronRefusal("0 0 0 * *"), "cron field 3 (day of month): 0 is out of range 1-31");
  EXPECT_EQ(CronRefusal("0 0 * 13 *"), "cron field 4 (month): 13 is out of range 1-12");
  EXPECT_EQ(CronRefusal("0 0 * * 8"), "cron field 5 (day of week): 8 is out of range 0-7");
  EXPECT_EQ(CronRefusal("0 0 * foo *"), "cron field 4 (month): 'foo' is not a number or name");
  EXPECT_EQ(CronRefusal("x * * * *"), "cron field 1 (minute): 'x' is not a number");
  EXPECT_EQ(CronRefusal("-1 * * * *"), "cron field 1 (minute): empty value");
  EXPECT_EQ(CronRefusal("*/0 * * * *"), "cron field 1 (minute): step '0' must be a number from 1 to 59");
  EXPECT_EQ(CronRefusal("*/ * * * *"), "cron field 1 (minute): step '' must be a number from 1 to 59");
  EXPECT_EQ(CronRefusal("/5 * * * *"), "cron field 1 (minute): a step needs '*' or a value before '/'");
  EXPECT_EQ(CronRefusal("30-10 * * * *"), "cron field 1 (minute): range 30-10 runs backwards");
  EXPECT_EQ(CronRefusal("1,,2 * * * *"), "cron field 1 (minute): empty list item");
  EXPECT_EQ(CronRefusal("0 0 * * L"), "cron field 5 (day of week): 'L' is not a number or name");
  EXPECT_EQ(CronRefusal("0 0 30 2 *"), "cron: '0 0 30 2 *' matches no date (e.g. 30 February)");
  EXPECT_EQ(CronRefusal("0 0 31 4,6,9,11 *"), "cron: '0 0 31 4,6,9,11 *' matches no date (e.g. 30 February)");
  EXPECT_EQ(CronRefusal("@reboot"),
            "cron: unknown macro '@reboot' (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)");
}

// NextAfter and LatestAtOrBefore are two separate scans: each must agree with the
// other at random instants (the next tick after t is a tick, and no tick lies between
// t and it).
TEST(CronTest, NextAndLatestAgreeAtRandomInstants) {
  std::mt19937_64 random(37);
  const WallTime base = CronAt("2026-01-01 00:00");
  for (const char* expr : {"* * * * *", "*/7 * * * *", "0 3 * * *", "15 */5 * * 1-5", "0 0 13 * fri",
                           "0 12 1 */3 *", "5,10 2-4 * * sun", "0 0 29 2 *", "59 23 31 * *", "* * * * * *",
                           "*/10 * * * * *", "7,59 */13 * * * *", "30 0 3 * * *", "59 59 23 31 12 *"}) {
    const CronExpression c = CronExpression::Parse(expr);
    for (int i = 0; i < 300; ++i) {
      const WallTime t = base + seconds(static_cast<int64_t>(random() % (4LL * 365 * 24 * 3600)));
      const std::optional<WallTime> next = c.NextAfter(t);
      ASSERT_TRUE(next) << expr;
      EXPECT_GT(*next, t) << expr;
      EXPECT_EQ(c.LatestAtOrBefore(*next), next) << expr << " at " << FormatUtc(t);
      const std::optional<WallTime> before = c.LatestAtOrBefore(*next - seconds(1));
      ASSERT_TRUE(before) << expr;
      EXPECT_LE(*before, t) << expr << " at " << FormatUtc(t) << ": a tick between t and NextAfter(t)";
      EXPECT_EQ(c.NextAfter(*before), next) << expr;
    }
  }
}

// --- the optional seconds field (six fields) ---------------------------------------

TEST(CronTest, SixFieldsTakeALeadingSecond) {
  EXPECT_EQ(Next("*/10 * * * * *", "2026-11-27 03:04:00"), "2026-11-27T03:04:10Z");
  EXPECT_EQ(Next("*/10 * * * * *", "2026-11-27 03:04:09"), "2026-11-27T03:04:10Z");
  EXPECT_EQ(Next("*/10 * * * * *", "2026-11-27 03:04:10"), "2026-11-27T03:04:20Z");  // strictly after
  EXPECT_EQ(Latest("*/10 * * * * *", "2026-11-27 03:04:10"), "2026-11-27T03:04:10Z");  // at or before
  EXPECT_EQ(Latest("*/10 * * * * *", "2026-11-27 03:04:19"), "2026-11-27T03:04:10Z");
  EXPECT_EQ(Next("* * * * * *", "2026-11-27 03:04:05"), "2026-11-27T03:04:06Z");
  EXPECT_EQ(Latest("* * * * * *", "2026-11-27 03:04:05"), "2026-11-27T03:04:05Z");
  EXPECT_EQ(Next("5,35 * * * * *", "2026-11-27 03:04:06"), "2026-11-27T03:04:35Z");
  EXPECT_EQ(Next("10-12 * * * * *", "2026-11-27 03:04:11"), "2026-11-27T03:04:12Z");
  EXPECT_EQ(Next("15/20 * * * * *", "2026-11-27 03:04:36"), "2026-11-27T03:04:55Z");  // 15, 35, 55
  EXPECT_EQ(Next("30 0 3 * * *", "2026-11-27 03:00:29"), "2026-11-27T03:00:30Z");
  EXPECT_EQ(Next("30 0 3 * * *", "2026-11-27 03:00:30"), "2026-11-28T03:00:30Z");
  EXPECT_EQ(Next("0 0 8 * * mon-fri", "2026-11-27 08:00"), "2026-11-30T08:00:00Z");  // names keep working
  EXPECT_EQ(Next("0 0 0 1 jan *", "2026-11-27 00:00"), "2027-01-01T00:00:00Z");
}

TEST(CronTest, SecondTicksCrossMinuteHourDayAndYearBoundaries) {
  EXPECT_EQ(Next("*/10 * * * * *", "2026-11-27 03:04:55"), "2026-11-27T03:05:00Z");  // minute
  EXPECT_EQ(Next("*/10 * * * * *", "2026-11-27 03:59:51"), "2026-11-27T04:00:00Z");  // hour
  EXPECT_EQ(Next("*/10 * * * * *", "2026-11-27 23:59:59"), "2026-11-28T00:00:00Z");  // day
  EXPECT_EQ(Next("*/10 * * * * *", "2026-12-31 23:59:50"), "2027-01-01T00:00:00Z");  // year
  EXPECT_EQ(Latest("*/10 * * * * *", "2026-11-28 00:00:09"), "2026-11-28T00:00:00Z");
  EXPECT_EQ(Latest("45 * * * * *", "2026-11-28 00:00:09"), "2026-11-27T23:59:45Z");  // back over midnight
  EXPECT_EQ(Latest("45 * * * * *", "2027-01-01 00:00:44"), "2026-12-31T23:59:45Z");  // and over a year
  EXPECT_EQ(Next("45 * * * * *", "2026-11-27 03:59:45"), "2026-11-27T04:00:45Z");
  EXPECT_EQ(Next("5 59 * * * *", "2026-11-27 03:59:06"), "2026-11-27T04:59:05Z");    // next hour's minute 59
  EXPECT_EQ(Latest("5 59 * * * *", "2026-11-27 03:59:04"), "2026-11-27T02:59:05Z");
  EXPECT_EQ(Next("59 59 23 31 12 *", "2026-12-31 23:59:58"), "2026-12-31T23:59:59Z");
  EXPECT_EQ(Next("59 59 23 31 12 *", "2026-12-31 23:59:59"), "2027-12-31T23:59:59Z");
  EXPECT_EQ(Next("0 0 0 29 2 *", "2026-11-27 00:00"), "2028-02-29T00:00:00Z");
  EXPECT_EQ(Latest("1 0 0 29 2 *", "2028-02-29 00:00:00"), "2024-02-29T00:00:01Z");
  // Sub-second instants: ticks are whole seconds.
  const CronExpression c = CronExpression::Parse("*/10 * * * * *");
  EXPECT_EQ(FormatUtc(*c.NextAfter(CronAt("2026-11-27 03:04:10") + milliseconds(999))), "2026-11-27T03:04:20Z");
  EXPECT_EQ(FormatUtc(*c.LatestAtOrBefore(CronAt("2026-11-27 03:04:10") + milliseconds(999))), "2026-11-27T03:04:10Z");
}

TEST(CronTest, FiveFieldsStillMeanSecondZero) {
  // The same schedule in five and in six fields gives the same ticks.
  for (const auto& [five, six] : std::vector<std::pair<const char*, const char*>>{
           {"* * * * *", "0 * * * * *"}, {"*/15 3 * * mon", "0 */15 3 * * mon"}, {"@hourly", "0 0 * * * *"},
           {"0 0 13 * fri", "0 0 0 13 * fri"}}) {
    const CronExpression a = CronExpression::Parse(five), b = CronExpression::Parse(six);
    for (const char* at : {"2026-11-27 03:04:05", "2026-11-27 03:00:00", "2026-12-31 23:59:59"}) {
      EXPECT_EQ(a.NextAfter(CronAt(at)), b.NextAfter(CronAt(at))) << five << " at " << at;
      EXPECT_EQ(a.LatestAtOrBefore(CronAt(at)), b.LatestAtOrBefore(CronAt(at))) << five << " at " << at;
    }
  }
  EXPECT_EQ(Next("* * * * *", "2026-11-27 03:04:00"), "2026-11-27T03:05:00Z");  // never at :01
}

TEST(CronTest, SixFieldRefusalsNumberTheFieldsAsWritten) {
  EXPECT_EQ(CronRefusal("61 * * * * *"), "cron field 1 (second): 61 is out of range 0-59");
  EXPECT_EQ(CronRefusal("60 * * * * *"), "cron field 1 (second): 60 is out of range 0-59");
  EXPECT_EQ(CronRefusal("*/0 * * * * *"), "cron field 1 (second): step '0' must be a number from 1 to 59");
  EXPECT_EQ(CronRefusal("x * * * * *"), "cron field 1 (second): 'x' is not a number");
  EXPECT_EQ(CronRefusal("50-10 * * * * *"), "cron field 1 (second): range 50-10 runs backwards");
  EXPECT_EQ(CronRefusal("0 60 * * * *"), "cron field 2 (minute): 60 is out of range 0-59");
  EXPECT_EQ(CronRefusal("0 0 24 * * *"), "cron field 3 (hour): 24 is out of range 0-23");
  EXPECT_EQ(CronRefusal("0 0 0 32 * *"), "cron field 4 (day of month): 32 is out of range 1-31");
  EXPECT_EQ(CronRefusal("0 0 0 * foo *"), "cron field 5 (month): 'foo' is not a number or name");
  EXPECT_EQ(CronRefusal("0 0 0 * * L"), "cron field 6 (day of week): 'L' is not a number or name");
  EXPECT_EQ(CronRefusal("0 0 0 30 2 *"), "cron: '0 0 0 30 2 *' matches no date (e.g. 30 February)");
  // Five fields: field 1 is still the minute.
  EXPECT_EQ(CronRefusal("61 * * * *"), "cron field 1 (minute): 61 is out of range 0-59");
}

// An every-second expression is as fast as an every-minute one, and a sparse one (a
// leap day, one second of it) is found without walking seconds.
TEST(CronTest, SecondSearchesStayFast) {
  const auto start = steady_clock::now();
  const CronExpression every = CronExpression::Parse("* * * * * *");
  const CronExpression rare = CronExpression::Parse("59 59 23 29 2 *");
  WallTime t = CronAt("2026-11-27 03:04:05");
  for (int i = 0; i < 100000; ++i) t = *every.NextAfter(t);
  EXPECT_EQ(FormatUtc(t), "2026-11-28T06:50:45Z");  // 100000 s later
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(rare.NextAfter(CronAt("2026-11-27 03:04:05")));
    ASSERT_TRUE(rare.LatestAtOrBefore(CronAt("2026-11-27 03:04:05")));
  }
  EXPECT_LT(steady_clock::now() - start, seconds(5));  // milliseconds on this machine
}

TEST(CronTest, FormatsUtcAndEpochSeconds) {
  EXPECT_EQ(FormatUtc(CronAt("2026-11-27 03:04:05")), "2026-11-27T03:04:05Z");
  EXPECT_EQ(EpochSeconds(CronAt("1970-01-02 00:00")), 86400);
  EXPECT_EQ(EpochSeconds(CronAt("2026-11-27 03:00")), 1795748400);
}

}  // namespace
}  // namespace dsync::control
