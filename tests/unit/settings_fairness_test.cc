// The issue 37 keys of config/settings.h: fairness.*, datasources.<name> with
// max_concurrent_steps, topics.<name>.concurrency_key / concurrency_limit.
#include <string>

#include <gtest/gtest.h>

#include "app/options.h"
#include "config/settings.h"
#include "core/error.h"
#include "dispatcher/assignment_planner.h"

namespace dsync {
namespace {

constexpr const char* kFairTopic = R"("topics": {"T": {"steps": [{"name": "s", "type": "demo"}]}})";

Settings ParseFair(const std::string& members, const std::string& topic_extra = "") {
  std::string topics = topic_extra.empty()
                           ? std::string(kFairTopic)
                           : R"("topics": {"T": {)" + topic_extra + R"(, "steps": [{"name": "s", "type": "demo"}]}})";
  Settings s = ParseSettings("{" + members + (members.empty() ? "" : ", ") + topics + "}", {});
  s.Validate();
  return s;
}

std::string FairError(const std::string& members, const std::string& topic_extra = "") {
  try {
    ParseFair(members, topic_extra);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SettingsFairnessTest, FairnessIsOnByDefaultWithEqualWeights) {
  Settings s = ParseFair("");
  EXPECT_TRUE(s.fairness.enabled);
  EXPECT_TRUE(s.fairness.weights.empty());
  dispatcher::PlannerConfig c = app::PlannerConfigFrom(s);
  EXPECT_TRUE(c.fair);
  Settings off = ParseFair(R"("fairness": {"enabled": false, "weights": {"big": 5, "small": 1}})");
  EXPECT_FALSE(off.fairness.enabled);
  EXPECT_EQ(off.fairness.weights.at("big"), 5);
  EXPECT_FALSE(app::PlannerConfigFrom(off).fair);
  EXPECT_EQ(ParseSettings(std::string("{") + kFairTopic + "}", {{"DSYNC_FAIRNESS_ENABLED", "false"}}).fairness.enabled,
            false);
}

TEST(SettingsFairnessTest, BadWeightsAreRefusedWithTheirPath) {
  EXPECT_EQ(FairError(R"("fairness": {"weights": {"a": 0}})"), "config: fairness.weights.a: must be from 1 to 1000, got 0");
  EXPECT_EQ(FairError(R"("fairness": {"weights": {"a": "x"}})"), "config: fairness.weights.a: expected an integer, got a string");
  EXPECT_EQ(FairError(R"("fairness": {"weights": []})"), "config: fairness.weights: expected an object, got an array");
  EXPECT_EQ(FairError(R"("fairness": {"fair": true})"), "config: fairness.fair: unknown key");
}

TEST(SettingsFairnessTest, DatasourceWithALimit) {
  Settings s = ParseFair(R"("datasources": {"env_a": "mysql://u:p@h:1/a",
                                           "env_b": {"url": "mysql://u:p@h:1/b", "max_concurrent_steps": 2}})");
  EXPECT_EQ(s.datasources.at("env_b"), "mysql://u:p@h:1/b");
  EXPECT_EQ(s.datasource_limits.size(), 1u);
  EXPECT_EQ(s.datasource_limits.at("env_b"), 2);
  EXPECT_EQ(app::PlannerConfigFrom(s).datasource_limits.at("env_b"), 2);
  EXPECT_EQ(FairError(R"("datasources": {"b": {"max_concurrent_steps": 2}})"), "config: datasources.b.url: required");
  EXPECT_EQ(FairError(R"("datasources": {"b": {"url": "mysql://u:p@h:1/b", "max_concurrent_steps": 0}})"),
            "config: datasources.b.max_concurrent_steps: must be from 1 to 100000, got 0");
  EXPECT_EQ(FairError(R"("datasources": {"b": {"url": "mysql://u:p@h:1/b", "limit": 2}})"),
            "config: datasources.b.limit: unknown key");
  // The URL (a password inside) is never echoed.
  EXPECT_EQ(FairError(R"("datasources": {"b": {"url": 5}})"), "config: datasources.b.url: expected a string, got an integer");
}

TEST(SettingsFairnessTest, ConcurrencyKeyAndLimitGoTogether) {
  Settings s = ParseFair("", R"("concurrency_key": "payload.space_id", "concurrency_limit": 3)");
  EXPECT_EQ(s.topics.at("T").concurrency_key, "payload.space_id");
  EXPECT_EQ(s.topics.at("T").concurrency_limit, 3);
  dispatcher::PlannerConfig c = app::PlannerConfigFrom(s);
  EXPECT_EQ(c.topics.at("T").concurrency_limit, 3);
  EXPECT_TRUE(ParseFair("", R"("concurrency_key": "tenant_id", "concurrency_limit": 1)").topics.at("T").concurrency_limit == 1);
  EXPECT_TRUE(ParseFair("", R"("concurrency_key": "payload.a.b_c", "concurrency_limit": 1)").topics.at("T").concurrency_limit == 1);
  EXPECT_EQ(FairError("", R"("concurrency_key": "tenant_id")"),
            "config: topics.T.concurrency_limit: concurrency_key and concurrency_limit go together: set both or neither");
  EXPECT_EQ(FairError("", R"("concurrency_limit": 2)"),
            "config: topics.T.concurrency_key: concurrency_key and concurrency_limit go together: set both or neither");
  for (const char* bad : {"payload.", "payload.a..b", "payload.a-b", "node", "payload.$x"}) {
    EXPECT_EQ(FairError("", std::string(R"("concurrency_key": ")") + bad + R"(", "concurrency_limit": 1)")
                  .rfind("config: topics.T.concurrency_key: expected tenant_id, data_id or payload.<field>", 0),
              0u)
        << bad;
  }
}

}  // namespace
}  // namespace dsync
