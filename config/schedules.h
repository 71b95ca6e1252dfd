// Config `schedules` (docs/pause-and-schedules.md): named cron schedules whose ticks the
// dispatcher leader turns into events (control/scheduler.h).
//
//   "schedules": {
//     "nightly-verify": {"cron": "0 3 * * *", "timezone": "UTC", "topic": "VERIFY_ALL",
//                        "payload": {"scope": "all"}, "missed": "skip"}
//   }
//
// Parsed by config/settings.cc (the key `schedules`) through ParseSchedules; the
// topic is checked against the config's topics by Settings::Validate.
//
// Thread safety: value types and pure functions.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace dsync {

// What a schedule does about ticks that passed while no leader looked (a dispatcher
// outage, a clock step forward): `skip` fires only a tick seen within grace_ms of its
// time; `run_once` fires one event for the latest missed tick.
enum class MissedTickPolicy { kSkip, kRunOnce };

struct ScheduleSettings {
  std::string cron;                 // schedules.<name>.cron: 5 fields, or 6 with a leading second (control/cron.h),
                                    // UTC. Required
  std::string timezone = "UTC";     // schedules.<name>.timezone: only "UTC" (or "Etc/UTC"). Default UTC
  std::string topic;                // schedules.<name>.topic: a configured topic. Required
  nlohmann::json payload = nlohmann::json::object();  // schedules.<name>.payload: the event's payload (object). Default {}
  MissedTickPolicy missed = MissedTickPolicy::kSkip;   // schedules.<name>.missed: skip|run_once. Default skip
  std::chrono::milliseconds grace{60000};  // schedules.<name>.grace_ms: how late a tick may be seen and still be on time. Default 60 s
  std::string tenant_id = "0";      // schedules.<name>.tenant_id: the events' tenant. Default "0"
};

// The `schedules` object. Throws ConfigError("config: schedules.<name>.<key>: <reason>").
std::map<std::string, ScheduleSettings> ParseSchedules(const nlohmann::json& value);

// "skip" / "run_once".
const char* MissedTickPolicyName(MissedTickPolicy p);

}  // namespace dsync
