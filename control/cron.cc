#include "control/cron.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <vector>

#include "core/error.h"

namespace dsync::control {
namespace {

using namespace std::chrono;

// How far NextAfter / LatestAtOrBefore look: 29 years covers every combination of a
// day of the year and a day of the week (the calendar repeats every 28 years within
// 1901-2099), so "0 0 29 2 1" (29 February on a Monday) is found.
constexpr int kSearchDays = 366 * 29;

struct CronField {
  const char* name;
  int lo, hi;
  const char* const* names;  // names[i] is value lo + i; null: none
};

constexpr const char* kMonthNames[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                       "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr const char* kWeekdayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

// Indexed by CronKind; a field's number in messages is its position as written.
constexpr CronField kCronFields[] = {
    {"second", 0, 59, nullptr},
    {"minute", 0, 59, nullptr},
    {"hour", 0, 23, nullptr},
    {"day of month", 1, 31, nullptr},
    {"month", 1, 12, kMonthNames},
    {"day of week", 0, 7, kWeekdayNames},  // 7 is Sunday too
};
enum CronKind : size_t { kSecond, kMinute, kHour, kDayOfMonth, kMonth, kDayOfWeek };

// One field as the user wrote it: what it is and where it stood (1-based).
struct FieldAt {
  CronKind kind;
  size_t position;
};

[[noreturn]] void Refuse(FieldAt f, const std::string& why) {
  throw UsageError("cron field " + std::to_string(f.position) + " (" + kCronFields[f.kind].name + "): " + why);
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int CronValue(FieldAt field, std::string_view text) {
  const CronField& f = kCronFields[field.kind];
  if (text.empty()) Refuse(field, "empty value");
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error == std::errc() && end == text.data() + text.size()) {
    if (value < f.lo || value > f.hi) {
      Refuse(field, std::to_string(value) + " is out of range " + std::to_string(f.lo) + "-" + std::to_string(f.hi));
    }
    return value;
  }
  if (f.names != nullptr) {
    const std::string lower = Lower(text);
    const int count = field.kind == kMonth ? 12 : 7;
    for (int i = 0; i < count; ++i) {
      if (lower == f.names[i]) return f.lo + i;
    }
  }
  Refuse(field, "'" + std::string(text.substr(0, 20)) + "' is not a " + (f.names ? "number or name" : "number"));
}

// The values one field selects (bit v for value v), and whether it starts with '*'.
std::vector<bool> ParseCronField(FieldAt field, std::string_view text, bool* starred) {
  const CronField& f = kCronFields[field.kind];
  std::vector<bool> bits(f.hi + 1, false);
  *starred = !text.empty() && text.front() == '*';
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (item.empty()) Refuse(field, "empty list item");
    int step = 1;
    if (const size_t slash = item.find('/'); slash != std::string_view::npos) {
      std::string_view step_text = item.substr(slash + 1);
      auto [end, error] = std::from_chars(step_text.data(), step_text.data() + step_text.size(), step);
      if (step_text.empty() || error != std::errc() || end != step_text.data() + step_text.size() || step < 1 ||
          step > f.hi) {
        Refuse(field, "step '" + std::string(step_text.substr(0, 20)) + "' must be a number from 1 to " +
                          std::to_string(f.hi));
      }
      item = item.substr(0, slash);
      if (item.empty()) Refuse(field, "a step needs '*' or a value before '/'");
    }
    int lo = f.lo, hi = f.hi;
    if (item != "*") {
      const size_t dash = item.find('-');
      lo = CronValue(field, item.substr(0, dash));
      if (dash != std::string_view::npos) {
        hi = CronValue(field, item.substr(dash + 1));
        if (hi < lo) Refuse(field, "range " + std::string(item) + " runs backwards");
      } else if (step == 1) {
        hi = lo;  // a single value; "a/n" is a-max/n
      }
    }
    for (int v = lo; v <= hi; v += step) bits[v] = true;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return bits;
}

std::string_view Macro(std::string_view text) {
  const std::string lower = Lower(text);
  if (lower == "@yearly" || lower == "@annually") return "0 0 1 1 *";
  if (lower == "@monthly") return "0 0 1 * *";
  if (lower == "@weekly") return "0 0 * * 0";
  if (lower == "@daily" || lower == "@midnight") return "0 0 * * *";
  if (lower == "@hourly") return "0 * * * *";
  throw UsageError("cron: unknown macro '" + std::string(text.substr(0, 20)) +
                   "' (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly)");
}

}  // namespace

CronExpression CronExpression::Parse(std::string_view text) {
  CronExpression c;
  c.text_ = std::string(text);
  std::string_view body = text;
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front()))) body.remove_prefix(1);
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.remove_suffix(1);
  if (body.starts_with('@')) body = Macro(body);
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < body.size()) {
    while (i < body.size() && std::isspace(static_cast<unsigned char>(body[i]))) ++i;
    if (i == body.size()) break;
    const size_t start = i;
    while (i < body.size() && !std::isspace(static_cast<unsigned char>(body[i]))) ++i;
    fields.push_back(body.substr(start, i - start));
  }
  if (fields.size() != 5 && fields.size() != 6) {
    throw UsageError("cron: expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got " +
                     std::to_string(fields.size()));
  }
  // Six fields: a leading second. Five: second 0, and field 1 is the minute.
  const size_t first = fields.size() == 6 ? 0 : 1;
  auto parse = [&](CronKind kind, bool* starred) {
    return ParseCronField({kind, kind + 1 - first}, fields[kind - first], starred);
  };
  bool starred = false;
  std::vector<bool> bits;
  if (first == 0) {
    bits = parse(kSecond, &starred);
    for (int v = 0; v < 60; ++v) c.seconds_[v] = bits[v];
  } else {
    c.seconds_[0] = true;
  }
  bits = parse(kMinute, &starred);
  for (int v = 0; v < 60; ++v) c.minutes_[v] = bits[v];
  bits = parse(kHour, &starred);
  for (int v = 0; v < 24; ++v) c.hours_[v] = bits[v];
  bits = parse(kDayOfMonth, &starred);
  for (int v = 1; v <= 31; ++v) c.days_[v] = bits[v];
  c.days_restricted_ = !starred;
  bits = parse(kMonth, &starred);
  for (int v = 1; v <= 12; ++v) c.months_[v] = bits[v];
  bits = parse(kDayOfWeek, &starred);
  for (int v = 0; v < 7; ++v) c.weekdays_[v] = bits[v];
  if (bits[7]) c.weekdays_[0] = true;
  c.weekdays_restricted_ = !starred;
  if (!c.NextAfter(WallTime(sys_days(year(2000) / January / 1)))) {
    throw UsageError("cron: '" + std::string(body) + "' matches no date (e.g. 30 February)");
  }
  return c;
}

bool CronExpression::DayMatches(sys_days day) const {
  const year_month_day ymd{day};
  if (!months_[static_cast<unsigned>(ymd.month())]) return false;
  const bool dom = days_[static_cast<unsigned>(ymd.day())];
  const bool dow = weekdays_[weekday(day).c_encoding()];
  if (days_restricted_ && weekdays_restricted_) return dom || dow;
  return dom && dow;  // the unrestricted one selects every day
}

// The day is walked hour by hour and minute by minute (at most 1440 steps); within a
// matching minute the second comes from the bitset, so an every-second expression costs
// no more than an every-minute one.
std::optional<WallTime> CronExpression::NextAfter(WallTime t) const {
  const sys_seconds first = floor<seconds>(t) + seconds(1);
  sys_days day = floor<days>(first);
  int from = static_cast<int>((first - day).count());  // second of the day
  for (int n = 0; n < kSearchDays; ++n, day += days(1), from = 0) {
    if (!DayMatches(day)) continue;
    const int from_h = from / 3600, from_m = from / 60 % 60, from_s = from % 60;
    for (int h = from_h; h < 24; ++h) {
      if (!hours_[h]) continue;
      for (int m = h == from_h ? from_m : 0; m < 60; ++m) {
        if (!minutes_[m]) continue;
        for (int s = h == from_h && m == from_m ? from_s : 0; s < 60; ++s) {
          if (seconds_[s]) return WallTime(day + hours(h) + minutes(m) + seconds(s));
        }
      }
    }
  }
  return std::nullopt;
}

std::optional<WallTime> CronExpression::LatestAtOrBefore(WallTime t) const {
  const sys_seconds last = floor<seconds>(t);
  sys_days day = floor<days>(last);
  int to = static_cast<int>((last - day).count());
  for (int n = 0; n < kSearchDays; ++n, day -= days(1), to = 24 * 3600 - 1) {
    if (!DayMatches(day)) continue;
    const int to_h = to / 3600, to_m = to / 60 % 60, to_s = to % 60;
    for (int h = to_h; h >= 0; --h) {
      if (!hours_[h]) continue;
      for (int m = h == to_h ? to_m : 59; m >= 0; --m) {
        if (!minutes_[m]) continue;
        for (int s = h == to_h && m == to_m ? to_s : 59; s >= 0; --s) {
          if (seconds_[s]) return WallTime(day + hours(h) + minutes(m) + seconds(s));
        }
      }
    }
  }
  return std::nullopt;
}

std::string FormatUtc(WallTime t) {
  const sys_seconds s = floor<seconds>(t);
  const sys_days day = floor<days>(s);
  const year_month_day ymd{day};
  const hh_mm_ss hms{s - day};
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04d-%02u-%02uT%02d:%02d:%02dZ", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()), static_cast<int>(hms.hours().count()),
                static_cast<int>(hms.minutes().count()), static_cast<int>(hms.seconds().count()));
  return buf;
}

int64_t EpochSeconds(WallTime t) { return floor<seconds>(t).time_since_epoch().count(); }

}  // namespace dsync::control
