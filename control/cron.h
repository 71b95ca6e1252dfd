// Cron expressions for config `schedules` (docs/pause-and-schedules.md), in UTC: the
// classic five fields, or six with a leading seconds field (as Quartz, Spring
// @Scheduled, robfig/cron and node-cron take it).
//
//   [second] minute hour day-of-month month day-of-week
//   0-59     0-59   0-23 1-31         1-12  0-7 (0 and 7 are Sunday)
//
// Five fields mean second 0: "*/5 * * * *" ticks at :00 of every fifth minute, exactly
// as before the seconds field existed; "*/10 * * * * *" ticks every 10 seconds.
// Each field is `*` or a comma list of items; an item is a value, a range `a-b`, or
// either (or `*`) followed by a step `/n` (`a/n` means a-max/n). Months take the names
// jan..dec, days of the week sun..sat (any case). Day of month and day of week follow
// cron(8): when both are restricted (neither starts with `*`), a day matching either
// one matches; otherwise the restricted one decides. The macros @yearly (@annually),
// @monthly, @weekly, @daily (@midnight) and @hourly stand for their five fields.
// No `?`, `L`, `W` or `#`. Errors number the fields as written: field 1 is the second
// of a six-field expression and the minute of a five-field one. Debian packages no C
// or C++ cron library (apt-cache search cron: Go, Perl and Ruby ones only), so this is
// dsync's own, unit-tested in tests/unit/cron_test.cc.
//
// Thread safety: immutable after Parse; any thread.
#pragma once

#include <bitset>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace dsync::control {

using WallTime = std::chrono::system_clock::time_point;

class CronExpression {
 public:
  // Parses `text`. Throws UsageError with a one-line reason ("cron field 2 (hour): 24
  // is out of range 0-23"); an expression that matches no date within 29 years (e.g.
  // "0 0 30 2 *") is refused too.
  static CronExpression Parse(std::string_view text);

  // The first tick strictly after `t` (a whole UTC second); nullopt when there is none
  // within 29 years. Fast for any expression: days, hours and minutes are walked, the
  // second is taken from its bitset.
  std::optional<WallTime> NextAfter(WallTime t) const;
  // The last tick at or before `t`; nullopt when there is none within 29 years.
  std::optional<WallTime> LatestAtOrBefore(WallTime t) const;

  const std::string& text() const { return text_; }

 private:
  CronExpression() = default;
  bool DayMatches(std::chrono::sys_days day) const;

  std::string text_;
  std::bitset<60> seconds_;  // five fields: only 0
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;    // 1..31
  std::bitset<13> months_;  // 1..12
  std::bitset<7> weekdays_; // 0..6, Sunday 0
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

// "2026-11-27T03:00:00Z" (whole seconds, UTC).
std::string FormatUtc(WallTime t);
// Seconds since 1970-01-01T00:00:00Z.
int64_t EpochSeconds(WallTime t);

}  // namespace dsync::control
