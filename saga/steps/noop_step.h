// The built-in `noop` step (README.md "Built-in steps", issue 37): no effect at all, for
// benchmarks and health checks. An event of a topic whose plan is one `noop` step costs
// exactly the framework's own work (assign, claim, the step's row, SUCCESS) and nothing
// else: `scripts/bench.sh paired` compares it with pg-boss's no-op job, and a health
// check can produce one and wait for SUCCESS to see the whole path work. Compensation
// does nothing either. Takes no parameters.
//
// Thread safety: the handler is stateless.
#pragma once

#include <memory>

#include "config/settings.h"
#include "saga/step_handler.h"

namespace dsync::saga {

// The factory registered as "noop". Throws ConfigError for any parameter.
std::unique_ptr<StepHandler> MakeNoopStep(const StepSpec& spec);

}  // namespace dsync::saga
