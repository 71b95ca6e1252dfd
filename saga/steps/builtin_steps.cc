// The built-in step types, registered by name: StepRegistry::WithBuiltins (declared
// in saga/step_handler.h). A new built-in step type adds its line here.
//
// Thread safety: returns a new registry each call.
#include <map>
#include <memory>
#include <string>

#include "config/step_datasources.h"
#include "saga/step_handler.h"
#include "saga/steps/demo_step.h"
#include "saga/steps/exec_step.h"
#include "saga/steps/http_step.h"
#include "saga/steps/noop_step.h"
#include "saga/steps/table_steps.h"
#include "saga/steps/table_verify.h"

namespace dsync::saga {

StepRegistry StepRegistry::WithBuiltins() { return WithBuiltins({}); }

StepRegistry StepRegistry::WithBuiltins(const std::map<std::string, TopicSettings>& topics) {
  return WithBuiltins(topics, nullptr);
}

StepRegistry StepRegistry::WithBuiltins(const std::map<std::string, TopicSettings>& topics,
                                        std::shared_ptr<const RelayEnvironment> relay) {
  auto repairable = std::make_shared<const std::map<std::string, TopicSettings>>(topics);
  StepRegistry registry;
  registry.Register("table_sync", [relay](const StepSpec& spec) { return MakeTableSyncStep(spec, relay); });
  if (relay) {
    registry.Register(kRelaySourceStepType, [relay](const StepSpec& spec) { return MakeRelaySourceStep(spec, relay); });
  }
  registry.Register("table_delete", [](const StepSpec& spec) { return MakeTableDeleteStep(spec); });
  registry.Register("table_verify", [relay](const StepSpec& spec) { return MakeTableVerifyStep(spec, relay); });
  registry.Register("table_repair",
                    [repairable](const StepSpec& spec) { return MakeTableRepairStep(spec, repairable); });
  registry.Register("demo", [](const StepSpec& spec) { return MakeDemoStep(spec); });
  registry.Register("exec", [](const StepSpec& spec) { return MakeExecStep(spec); });
  registry.Register("http", [](const StepSpec& spec) { return MakeHttpStep(spec); });
  registry.Register("noop", [](const StepSpec& spec) { return MakeNoopStep(spec); });
  return registry;
}

}  // namespace dsync::saga
