// Plans built from topic settings, and the demo step's payload parsing.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "saga/steps/demo_step.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

StepSpec Step(const std::string& name, const std::string& type) {
  StepSpec s;
  s.name = name;
  s.type = type;
  return s;
}

TopicSettings Topic(std::vector<StepSpec> steps) {
  TopicSettings t;
  t.steps = std::move(steps);
  return t;
}

std::string ConfigErrorOf(const std::map<std::string, TopicSettings>& topics) {
  try {
    Plans plans(topics, StepRegistry::WithBuiltins());
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SagaPlans, BuildsAPlanPerTopicInOrder) {
  std::map<std::string, TopicSettings> topics = {
      {"A", Topic({Step("s1", "demo"), Step("s2", "demo")})},
      {"B", Topic({Step("only", "demo")})}};
  Plans plans(topics, StepRegistry::WithBuiltins());
  topics.clear();  // Plans keeps its own copy
  const Plans::Plan* a = plans.Find("A");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->steps.size(), 2u);
  EXPECT_EQ(a->steps[0].spec.name, "s1");
  EXPECT_EQ(a->steps[1].spec.name, "s2");
  EXPECT_NE(a->steps[0].handler, nullptr);
  EXPECT_EQ(a->topic->max_retry, 3);
  ASSERT_NE(plans.Find("B"), nullptr);
  EXPECT_EQ(plans.Find("C"), nullptr);
}

TEST(SagaPlans, UnknownStepTypeIsAConfigErrorNamingTheStep) {
  std::string error = ConfigErrorOf({{"SPACE_ADD", Topic({Step("s1", "demo"), Step("docs", "tabel_sync")})}});
  EXPECT_NE(error.find("topics.SPACE_ADD.steps[1] (docs)"), std::string::npos) << error;
  EXPECT_NE(error.find("unknown step type 'tabel_sync'"), std::string::npos) << error;
  EXPECT_NE(error.find("demo, exec, http, noop, table_delete, table_repair, table_sync, table_verify"), std::string::npos) << error;
}

TEST(SagaPlans, BadStepParamsAndNamesAreConfigErrors) {
  StepSpec demo = Step("s1", "demo");
  demo.params = {{"table", "x"}};
  EXPECT_NE(ConfigErrorOf({{"T", Topic({demo})}}).find("takes no parameters"), std::string::npos);
  EXPECT_NE(ConfigErrorOf({{"T", Topic({Step(std::string(51, 'n'), "demo")})}}).find("1 to 50 characters"),
            std::string::npos);
  // table_sync validates its own keys.
  EXPECT_NE(ConfigErrorOf({{"T", Topic({Step("sync", "table_sync")})}}), "");
}

TEST(SagaPlans, RegistryCreatesRegisteredTypes) {
  StepRegistry registry;
  EXPECT_FALSE(registry.Has("demo"));
  registry.Register("demo", [](const StepSpec& s) { return MakeDemoStep(s); });
  EXPECT_TRUE(registry.Has("demo"));
  EXPECT_NE(registry.Create(Step("s", "demo")), nullptr);
  EXPECT_THROW(registry.Create(Step("s", "other")), ConfigError);
}

TEST(SagaDatasources, UnknownNameListsTheKnownOnes) {
  Datasources ds({{"env_a", "mysql://u:p@127.0.0.1:1/a"}, {"env_b", "mysql://u:p@127.0.0.1:1/b"}});
  EXPECT_TRUE(ds.Has("env_a"));
  EXPECT_FALSE(ds.Has("env_c"));
  try {
    ds.Get("env_c");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("env_a, env_b"), std::string::npos) << e.what();
  }
  // Opening is lazy: no connection is made by Get.
  EXPECT_EQ(&ds.Get("env_a"), &ds.Get("env_a"));
}

TEST(SagaDemoPayload, NothingAskedWithoutADemoObject) {
  for (const json& payload : {json::object(), json{{"space_id", 1}}, json::array(), json(nullptr),
                              json{{"demo", nullptr}}}) {
    DemoBehaviour b = ParseDemoBehaviour(payload, "s1");
    EXPECT_EQ(b.sleep, 0ms);
    EXPECT_FALSE(b.fail_permanently);
    EXPECT_EQ(b.fail_transient_times, 0);
    EXPECT_FALSE(b.fail_compensation_always);
    EXPECT_EQ(b.fail_compensation_times, 0);
  }
}

TEST(SagaDemoPayload, ReadsTheRulesOfItsOwnStep) {
  json payload = {{"demo",
                   {{"sleep_ms", 250},
                    {"fail", {{"s2", 2}, {"s3", "permanent"}}},
                    {"fail_compensation", {{"s1", 1}, {"s2", "always"}}}}}};
  DemoBehaviour s1 = ParseDemoBehaviour(payload, "s1");
  EXPECT_EQ(s1.sleep, 250ms);
  EXPECT_EQ(s1.fail_transient_times, 0);
  EXPECT_FALSE(s1.fail_permanently);
  EXPECT_EQ(s1.fail_compensation_times, 1);
  DemoBehaviour s2 = ParseDemoBehaviour(payload, "s2");
  EXPECT_EQ(s2.fail_transient_times, 2);
  EXPECT_TRUE(s2.fail_compensation_always);
  DemoBehaviour s3 = ParseDemoBehaviour(payload, "s3");
  EXPECT_TRUE(s3.fail_permanently);
  EXPECT_EQ(s3.sleep, 250ms);
}

TEST(SagaDemoPayload, MalformedRulesArePermanentFailuresNamingTheKey) {
  auto error = [](const json& demo, const std::string& step = "s1") -> std::string {
    try {
      ParseDemoBehaviour(json{{"demo", demo}}, step);
    } catch (const PermanentStepError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error("fast").find("demo must be an object"), std::string::npos);
  EXPECT_NE(error({{"sleep_ms", -1}}).find("demo.sleep_ms"), std::string::npos);
  EXPECT_NE(error({{"sleep_ms", 1.5}}).find("demo.sleep_ms"), std::string::npos);
  EXPECT_NE(error({{"fail", {{"s1", "sometimes"}}}}).find("demo.fail.s1"), std::string::npos);
  EXPECT_NE(error({{"fail", {{"s1", -2}}}}).find("demo.fail.s1"), std::string::npos);
  EXPECT_NE(error({{"fail_compensation", {{"s1", "permanent"}}}}).find("demo.fail_compensation.s1"),
            std::string::npos);
  EXPECT_NE(error({{"fail", 3}}).find("demo.fail must be an object"), std::string::npos);
  EXPECT_NE(error({{"sleepms", 3}}).find("demo.sleepms is not a demo option"), std::string::npos);
  EXPECT_EQ(error({{"fail", {{"s2", "garbage"}}}}), "");  // another step's rule is not ours to judge
}

// The consumer's automatic prefetch asks whether the steps run here are all fast:
// plans never run do not count; one slow plan among fast ones makes it false.
TEST(SagaPlans, AllObservedFastCountsOnlyPlansThatRan) {
  const std::map<std::string, TopicSettings> topics{{"A", Topic({Step("a", "demo")})},
                                                    {"B", Topic({Step("b", "demo")})}};
  Plans plans(topics, StepRegistry::WithBuiltins());
  EXPECT_FALSE(plans.AllObservedFast()) << "nothing ran yet";
  plans.Find("A")->speed->Observe(100us);
  EXPECT_TRUE(plans.AllObservedFast()) << "A fast, B never ran";
  plans.Find("B")->speed->Observe(20ms);
  EXPECT_FALSE(plans.AllObservedFast()) << "B slow";
  for (int i = 0; i < 40; ++i) plans.Find("B")->speed->Observe(100us);
  EXPECT_TRUE(plans.AllObservedFast()) << "B fast again";
}

}  // namespace
}  // namespace dsync::saga
