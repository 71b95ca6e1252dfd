// config/step_datasources.h: what each step needs to reach (per-step routing), and
// that a config naming only some datasources still loads, and builds the plans of,
// topics whose steps name others.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "config/step_datasources.h"
#include "core/error.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"

namespace dsync {
namespace {

StepSpec Spec(const std::string& type, nlohmann::json params) {
  StepSpec s;
  s.name = "s";
  s.type = type;
  s.params = std::move(params);
  return s;
}

using Names = std::vector<std::string>;

TEST(StepDatasourcesTest, EachStepTypeNeedsWhatItTouches) {
  const nlohmann::json both = {{"source", "env_b"}, {"target", "env_a"}, {"table", "t"}};
  EXPECT_EQ(StepDatasources(Spec("table_sync", both)), (Names{"env_a", "env_b"}));
  EXPECT_EQ(StepDatasources(Spec("table_verify", both)), (Names{"env_a", "env_b"}));
  EXPECT_EQ(StepDatasources(Spec("table_delete", {{"target", "env_c"}})), Names{"env_c"});
  EXPECT_TRUE(StepDatasources(Spec("demo", both)).empty());
  EXPECT_TRUE(StepDatasources(Spec("my_custom", both)).empty());
  EXPECT_TRUE(StepDatasources(Spec("table_repair", nlohmann::json::object())).empty());
  // A compensation needs only the target: the undo records live there.
  EXPECT_EQ(CompensationDatasources(Spec("table_sync", both)), Names{"env_a"});
  EXPECT_EQ(CompensationDatasources(Spec("table_delete", {{"target", "env_c"}})), Names{"env_c"});
  EXPECT_TRUE(CompensationDatasources(Spec("demo", both)).empty());
  // Not a string, or empty: names nothing (the step's factory rejects such a step).
  EXPECT_TRUE(StepDatasources(Spec("table_delete", {{"target", 3}})).empty());
  EXPECT_TRUE(StepDatasources(Spec("table_delete", {{"target", ""}})).empty());
}

TEST(StepDatasourcesTest, RouteKeyIsSortedUniqueAndParsesBack) {
  EXPECT_EQ(RouteKey({"env_b", "env_a", "env_b"}), "env_a,env_b");
  EXPECT_EQ(RouteKey({}), "");
  EXPECT_EQ(ParseRoute("env_b,env_a"), (Names{"env_a", "env_b"}));
  EXPECT_TRUE(ParseRoute("").empty());
  EXPECT_EQ(ParseRoute(",env_a,,"), Names{"env_a"});
  EXPECT_EQ(SpokenList({"a"}), "a");
  EXPECT_EQ(SpokenList({"a", "b"}), "a and b");
  EXPECT_EQ(SpokenList({"a", "b", "c"}), "a, b and c");
}

TEST(StepDatasourcesTest, AConfigNamingOneSideLoadsTopicsNamingTheOther) {
  // Node A's config: env_a only; its topic names env_b too. Loads, and its plan builds
  // with the built-in steps (an unknown datasource is a routing fact, not a config error).
  const std::string text = R"({
    "datasources": {"env_a": "mysql://u:p@127.0.0.1:1/a"},
    "topics": {"GAP": {"steps": [
      {"name": "del_a", "type": "table_delete", "target": "env_a", "table": "t", "where": "id = :id"},
      {"name": "del_b", "type": "table_delete", "target": "env_b", "table": "t", "where": "id = :id"},
      {"name": "copy", "type": "table_sync", "source": "env_a", "target": "env_b", "table": "t", "where": "id = :id"},
      {"name": "note", "type": "demo"}]}}})";
  Settings s = ParseSettings(text, {});
  EXPECT_NO_THROW(s.Validate());
  EXPECT_NO_THROW(saga::Plans(s.topics, saga::StepRegistry::WithBuiltins(s.topics)));
  // A genuinely bad step is still refused: table_delete without its target.
  s.topics["GAP"].steps[1].params.erase("target");
  EXPECT_THROW(saga::Plans(s.topics, saga::StepRegistry::WithBuiltins(s.topics)), ConfigError);
}

TEST(StepDatasourcesTest, ADatasourceNameMayNotHoldAComma) {
  try {
    ParseSettings(R"({"datasources": {"env,a": "mysql://u:p@h:1/a"},
                      "topics": {"T": {"steps": [{"name": "s1", "type": "demo"}]}}})",
                  {});
    ADD_FAILURE() << "accepted a datasource name with a comma";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("datasource name must not contain ','"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsync
