#include "saga/steps/noop_step.h"

#include "core/error.h"

namespace dsync::saga {
namespace {

class NoopStep final : public StepHandler {
 public:
  StepResult Execute(StepContext&) override { return StepResult::Ok(); }
  StepResult Compensate(StepContext&) override { return StepResult::Ok(); }
};

}  // namespace

std::unique_ptr<StepHandler> MakeNoopStep(const StepSpec& spec) {
  if (!spec.params.empty()) {
    throw ConfigError("noop step '" + spec.name + "' takes no parameters, got '" + spec.params.begin().key() + "'");
  }
  return std::make_unique<NoopStep>();
}

}  // namespace dsync::saga
