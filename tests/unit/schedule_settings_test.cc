// Config `schedules` (config/schedules.h): the keys, their defaults, and one-line
// refusals naming the path (bad cron, non-UTC zone, unknown policy, unknown topic).
#include <string>

#include <gtest/gtest.h>

#include "config/settings.h"
#include "core/error.h"

namespace dsync {
namespace {

std::string ScheduleConfig(const std::string& schedules) {
  return R"({"topics": {"T": {"steps": [{"name": "s1", "type": "demo"}]}}, "schedules": )" + schedules + "}";
}

std::string ScheduleRefusal(const std::string& schedules) {
  try {
    ParseSettings(ScheduleConfig(schedules), {}).Validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ScheduleSettingsTest, ParsesEveryKeyWithDefaults) {
  Settings s = ParseSettings(ScheduleConfig(R"({
    "nightly": {"cron": "0 3 * * *", "topic": "T"},
    "hourly.full": {"cron": "@hourly", "timezone": "UTC", "topic": "T", "payload": {"scope": "all"},
                    "missed": "run_once", "grace_ms": 5000, "tenant_id": "t1"}})"),
                             {});
  s.Validate();
  ASSERT_EQ(s.schedules.size(), 2u);
  const ScheduleSettings& n = s.schedules.at("nightly");
  EXPECT_EQ(n.cron, "0 3 * * *");
  EXPECT_EQ(n.timezone, "UTC");
  EXPECT_EQ(n.topic, "T");
  EXPECT_EQ(n.payload, nlohmann::json::object());
  EXPECT_EQ(n.missed, MissedTickPolicy::kSkip);
  EXPECT_EQ(n.grace.count(), 60000);
  EXPECT_EQ(n.tenant_id, "0");
  const ScheduleSettings& h = s.schedules.at("hourly.full");
  EXPECT_EQ(h.payload, nlohmann::json({{"scope", "all"}}));
  EXPECT_EQ(h.missed, MissedTickPolicy::kRunOnce);
  EXPECT_EQ(h.grace.count(), 5000);
  EXPECT_EQ(h.tenant_id, "t1");
  EXPECT_TRUE(ParseSettings(ScheduleConfig("{}"), {}).schedules.empty());
}

TEST(ScheduleSettingsTest, RefusesWithOneLineNamingThePath) {
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 25 * * *", "topic": "T"}})"),
            "config: schedules.n.cron: cron field 2 (hour): 25 is out of range 0-23");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *", "topic": "T", "timezone": "Europe/Paris"}})"),
            "config: schedules.n.timezone: only UTC is supported (this build's C++ library has no time-zone "
            "database): write the cron expression in UTC");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *", "topic": "T", "missed": "catch_up"}})"),
            "config: schedules.n.missed: expected one of skip|run_once, got 'catch_up'");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *", "topic": "NOPE"}})"),
            "config: schedules.n.topic: unknown topic 'NOPE' (not in topics)");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"topic": "T"}})"), "config: schedules.n.cron: required");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *"}})"), "config: schedules.n.topic: required");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *", "topic": "T", "every": 5}})"),
            "config: schedules.n.every: unknown key");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *", "topic": "T", "payload": [1]}})"),
            "config: schedules.n.payload: expected an object");
  EXPECT_EQ(ScheduleRefusal(R"({"n": {"cron": "0 3 * * *", "topic": "T", "grace_ms": 10}})"),
            "config: schedules.n.grace_ms: expected an integer from 1000 to 86400000");
  EXPECT_EQ(ScheduleRefusal(R"({"bad name": {"cron": "0 3 * * *", "topic": "T"}})"),
            "config: schedules.bad name: schedule name must be 1 to 50 characters of A-Z a-z 0-9 _ . -");
  EXPECT_EQ(ScheduleRefusal(R"([])"), "config: schedules: expected an object");
}

}  // namespace
}  // namespace dsync
