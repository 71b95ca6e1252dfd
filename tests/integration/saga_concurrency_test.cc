// Many events on many engines at once over one pool: 200 events x 3 demo steps run by
// 8 threads, each with its own SagaEngine (its own node address).
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "tests/support/saga_invariants.h"
#include "tests/support/test_db.h"
#include "tests/support/assigned_events.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using testing::TestSchema;

constexpr int kEvents = 200;
constexpr int kThreads = 8;

TEST(SagaConcurrency, TwoHundredEventsOnEightEnginesAllSucceedExactlyOnce) {
  TestSchema db;
  auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // 200 EVENT_SUCCEEDED lines are noise here

  TopicSettings topic;
  topic.backoff_base = 10ms;
  topic.backoff_max = 50ms;
  for (const char* name : {"s1", "s2", "s3"}) {
    StepSpec s;
    s.name = name;
    s.type = "demo";
    topic.steps.push_back(s);
  }
  Plans plans({{"DEMO", topic}}, StepRegistry::WithBuiltins());
  Datasources datasources({});
  SystemClock clock;
  storage::ConnectionPool& pool = db.pool();  // pool_size 8: one connection per engine

  // Produce, then assign round-robin to the 8 node addresses (as a dispatcher would).
  db.Exec(
      "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) "
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
      std::to_string(kEvents) +
      ") SELECT 't1', CONCAT('C', i), CONCAT('d', i), 'DEMO', '{\"demo\": {}}' FROM n");
  db.Exec("UPDATE distribute_event SET status = 'ASSIGNED', version = version + 1, "
          "node_address = CONCAT('node-', MOD(id, " + std::to_string(kThreads) + "), ':7001')");

  std::vector<std::unique_ptr<SagaEngine>> engines;
  for (int t = 0; t < kThreads; ++t) {
    engines.push_back(std::make_unique<SagaEngine>(pool, plans, datasources, clock,
                                                   "node-" + std::to_string(t) + ":7001"));
  }
  std::atomic<int> unexpected{0};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<AssignedEvent> mine = testing::PollAssigned(pool, "node-" + std::to_string(t) + ":7001");
      for (const AssignedEvent& e : mine) {
        Outcome out = engines[t]->Run(e, {});
        if (out != Outcome::kSucceeded) {
          ++unexpected;
          ADD_FAILURE() << e.code << ": " << OutcomeName(out);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  spdlog::set_level(level);
  std::printf("%d events x 3 steps on %d engines: %lld ms (%.0f events/s), pool retries %llu\n", kEvents,
              kThreads, static_cast<long long>(ms.count()), kEvents * 1000.0 / std::max<int64_t>(1, ms.count()),
              static_cast<unsigned long long>(pool.stats().retries));

  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS' AND version = 4 "
                        "AND attempt = 1"),
            kEvents);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_step WHERE status = 'SUCCESS'"), 3 * kEvents);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM demo_ledger"), 3 * kEvents);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM demo_ledger WHERE applications = 1"), 3 * kEvents);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event e JOIN distribute_event_step s "
                        "ON s.job_code = e.code WHERE s.node_address <> e.node_address"),
            0);
  uint64_t succeeded = 0;
  for (auto& e : engines) succeeded += e->stats().succeeded.load();
  EXPECT_EQ(succeeded, static_cast<uint64_t>(kEvents));
  EXPECT_SAGA_ORDER(pool);
}

}  // namespace
}  // namespace dsync::saga
