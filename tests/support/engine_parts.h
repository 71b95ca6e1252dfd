// Test support: a saga engine over the built-in step types for the topics of a
// Settings, with what it needs (plans, datasources, a system clock): how the API and
// console tests run the events they produce, without a consumer node.
//
//   testing::EngineParts parts(db.pool(), settings, "127.0.0.1:7301");
//   parts.engine.Run(testing::LoadAssigned(db.pool(), "E1"), {});
//
// Thread safety: as saga::SagaEngine.
#pragma once

#include <string>

#include "config/settings.h"
#include "core/clock.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "storage/connection_pool.h"

namespace dsync::testing {

struct EngineParts {
  // `settings` must outlive the parts (the plans point into its topics).
  EngineParts(storage::ConnectionPool& pool, const Settings& settings, const std::string& node_address)
      : plans(settings.topics, saga::StepRegistry::WithBuiltins(settings.topics)),
        datasources({}),
        engine(pool, plans, datasources, clock, node_address) {}

  SystemClock clock;
  saga::Plans plans;
  saga::Datasources datasources;
  saga::SagaEngine engine;
};

}  // namespace dsync::testing
