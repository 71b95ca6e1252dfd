#include "config/schedules.h"

#include <string_view>

#include "control/cron.h"
#include "core/error.h"

namespace dsync {
namespace {

using json = nlohmann::json;

// Schedule names and messages: input text made safe for one line (as settings.cc's).
std::string ScheduleText(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 64)) {
    const auto byte = static_cast<unsigned char>(c);
    out += byte < 0x20 || byte == 0x7f ? '?' : c;
  }
  if (text.size() > 64) out += "...";
  return out;
}

[[noreturn]] void ScheduleFail(const std::string& where, const std::string& reason) {
  throw ConfigError("config: " + where + ": " + reason);
}

bool IsScheduleName(std::string_view name) {
  if (name.empty() || name.size() > 50) return false;  // dsync_schedule.name is VARCHAR(50)
  for (char c : name) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const std::string& ScheduleString(const json& v, const std::string& where) {
  if (!v.is_string()) ScheduleFail(where, "expected a string");
  return v.get_ref<const std::string&>();
}

ScheduleSettings ParseSchedule(const json& value, const std::string& where) {
  if (!value.is_object()) ScheduleFail(where, "expected an object");
  ScheduleSettings s;
  for (const auto& [key, v] : value.items()) {
    const std::string at = where + "." + ScheduleText(key);
    if (key == "cron") {
      s.cron = ScheduleString(v, at);
      try {
        control::CronExpression::Parse(s.cron);
      } catch (const UsageError& e) {
        ScheduleFail(at, e.what());
      }
    } else if (key == "timezone") {
      s.timezone = ScheduleString(v, at);
      if (s.timezone != "UTC" && s.timezone != "Etc/UTC") {
        ScheduleFail(at, "only UTC is supported (this build's C++ library has no time-zone database): "
                         "write the cron expression in UTC");
      }
    } else if (key == "topic") {
      s.topic = ScheduleString(v, at);
      if (s.topic.empty() || s.topic.size() > 50) ScheduleFail(at, "must be 1 to 50 characters");
    } else if (key == "payload") {
      if (!v.is_object()) ScheduleFail(at, "expected an object");
      s.payload = v;
    } else if (key == "missed") {
      const std::string& m = ScheduleString(v, at);
      if (m == "skip") s.missed = MissedTickPolicy::kSkip;
      else if (m == "run_once") s.missed = MissedTickPolicy::kRunOnce;
      else ScheduleFail(at, "expected one of skip|run_once, got '" + ScheduleText(m) + "'");
    } else if (key == "grace_ms") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1000 || v.get<int64_t>() > 24LL * 3600 * 1000) {
        ScheduleFail(at, "expected an integer from 1000 to 86400000");
      }
      s.grace = std::chrono::milliseconds(v.get<int64_t>());
    } else if (key == "tenant_id") {
      s.tenant_id = ScheduleString(v, at);
      if (s.tenant_id.empty() || s.tenant_id.size() > 30) ScheduleFail(at, "must be 1 to 30 characters");
    } else {
      ScheduleFail(at, "unknown key");
    }
  }
  if (!value.contains("cron")) ScheduleFail(where + ".cron", "required");
  if (!value.contains("topic")) ScheduleFail(where + ".topic", "required");
  return s;
}

}  // namespace

std::map<std::string, ScheduleSettings> ParseSchedules(const json& value) {
  if (!value.is_object()) ScheduleFail("schedules", "expected an object");
  std::map<std::string, ScheduleSettings> out;
  for (const auto& [name, schedule] : value.items()) {
    const std::string where = "schedules." + ScheduleText(name);
    if (!IsScheduleName(name)) ScheduleFail(where, "schedule name must be 1 to 50 characters of A-Z a-z 0-9 _ . -");
    out[name] = ParseSchedule(schedule, where);
  }
  return out;
}

const char* MissedTickPolicyName(MissedTickPolicy p) { return p == MissedTickPolicy::kRunOnce ? "run_once" : "skip"; }

}  // namespace dsync
