// The built-in `noop` step (saga/steps/noop_step.h): registered among the built-ins,
// takes no parameters. (End to end: scripts/bench.sh paired runs 20,000 noop events to
// SUCCESS per run and stops if any is not.)
#include <gtest/gtest.h>

#include "core/error.h"
#include "saga/step_handler.h"
#include "saga/steps/noop_step.h"

namespace dsync::saga {
namespace {

TEST(NoopStepTest, IsABuiltInThatTakesNoParameters) {
  StepRegistry registry = StepRegistry::WithBuiltins();
  ASSERT_TRUE(registry.Has("noop"));
  StepSpec spec;
  spec.name = "n";
  spec.type = "noop";
  EXPECT_NE(registry.Create(spec), nullptr);
  spec.params["table"] = "t";
  try {
    MakeNoopStep(spec);
    ADD_FAILURE() << "a parameter was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "noop step 'n' takes no parameters, got 'table'");
  }
}

}  // namespace
}  // namespace dsync::saga
