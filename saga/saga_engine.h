// Runs claimed events as sagas. See docs/event-lifecycle.md for the state machine
// and the fencing rules every write here follows.
//
//   saga::SagaEngine engine(pool, plans, datasources, clock, "10.0.0.5:7001");
//   saga::Outcome out = engine.Run(assigned_event, stop);   // claims, runs, settles
//
// Run() claims the event (ASSIGNED -> RUNNING or COMPENSATING, fenced), writes the
// plan's step rows at the first claim, runs forward steps not yet SUCCESS (or
// continues compensation), and leaves the event at its next resting point:
// SUCCESS, COMPENSATED, FAILED, or PENDING with a backoff (transient failure). Every
// write after the claim is fenced by (id, version); if the fence fails the engine
// stops at once and returns kLostOwnership without writing anything further.
//
// Thread safety: Run may be called from many threads at once (one event each).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <stop_token>
#include <string>

#include "config/settings.h"
#include "core/clock.h"
#include "saga/step_handler.h"
#include "storage/connection_pool.h"

namespace dsync::saga {

// An event as the consumer polled it (ASSIGNED to this node).
struct AssignedEvent {
  int64_t id = 0;
  std::string code;
  std::string tenant_id;
  std::string data_id;
  std::string topic;
  std::string payload;       // raw text; may be malformed
  std::string phase;         // FORWARD | COMPENSATE
  std::string trace_id;      // empty: the engine uses the event code
  int version = 0;           // as assigned; the claim bumps it
  int attempt = 0;
  int retry_count = 0;
};

enum class Outcome {
  kNotClaimed,      // the claim lost (reassigned or reset meanwhile)
  kSucceeded,
  kRetryScheduled,  // back to PENDING with a backoff (forward or compensation)
  kCompensated,
  kFailed,
  kLostOwnership,   // fenced out mid-run; nothing more was written
  kAbandoned,       // stopped (shutdown, database unreachable): left for the sweeper
};
const char* OutcomeName(Outcome o);

// A topic's plan: handlers built once from the config at start.
class Plans {
 public:
  // Throws ConfigError for an unknown step type or bad step params.
  Plans(const std::map<std::string, TopicSettings>& topics, const StepRegistry& registry);
  struct Step {
    StepSpec spec;
    std::unique_ptr<StepHandler> handler;
  };
  struct Plan {
    const TopicSettings* topic;
    std::vector<Step> steps;
  };
  const Plan* Find(const std::string& topic) const;  // null: unknown topic

 private:
  std::map<std::string, Plan> plans_;
};

struct SagaStats {
  std::atomic<uint64_t> claimed{0}, not_claimed{0}, succeeded{0}, retries{0}, compensated{0},
      failed{0}, lost_ownership{0}, steps_executed{0}, steps_compensated{0};
};

class SagaEngine {
 public:
  SagaEngine(storage::ConnectionPool& pool, const Plans& plans, Datasources& datasources, Clock& clock,
             std::string node_address);

  // Never throws for handler failures (they become the event's state). Database
  // failures end the run with kAbandoned (the sweeper or a restart resets it).
  Outcome Run(const AssignedEvent& event, std::stop_token stop);

  SagaStats& stats() { return stats_; }

 private:
  storage::ConnectionPool& pool_;
  const Plans& plans_;
  Datasources& datasources_;
  Clock& clock_;
  const std::string node_address_;
  SagaStats stats_;
};

}  // namespace dsync::saga
