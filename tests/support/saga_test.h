// Test support: the base of the saga engine's integration-test fixtures (saga_engine,
// claim_batch and run_batch tests): a migrated schema (DbTest) whose events a test
// produces and assigns with SQL, as the producer and the dispatcher would, and whose
// saga-order invariant is checked after every test. The fixture adds its engine(s).
//
//   class MyTest : public testing::SagaTest { ... SagaEngine engine_; };
//   TEST_F(MyTest, X) { ProduceRaw("E1", "DEMO", "{}"); Assign("E1"); engine_.Run(...); }
//
// Thread safety: as DbTest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/db_test.h"
#include "tests/support/saga_invariants.h"

namespace dsync::testing {

class SagaTest : public DbTest {
 protected:
  // The node addresses the tests' engines run as.
  static constexpr const char* kNodeA = "10.0.0.1:7001";
  static constexpr const char* kNodeB = "10.0.0.2:7001";

  void TearDown() override { EXPECT_SAGA_ORDER(db_.pool()); }

  // The producer's plain INSERT (tenant t1, data_id d-<code>); no payload: NULL.
  void ProduceRaw(const std::string& code, const std::string& topic, const std::optional<std::string>& payload) {
    if (payload) {
      Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('t1', ?, ?, ?, ?)",
           code, "d-" + code, topic, *payload);
    } else {
      Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic) VALUES ('t1', ?, ?, ?)", code,
           "d-" + code, topic);
    }
  }
  // The dispatcher's assignment, ignoring next_run_time (the test moves time on).
  void Assign(const std::string& code, const std::string& node = kNodeA) {
    ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'ASSIGNED', node_address = ?, "
                   "version = version + 1, assigned_time = NOW(3), next_run_time = NOW(3) "
                   "WHERE code = ? AND status = 'PENDING'",
                   node, code),
              1u)
        << code << " is not PENDING";
  }

  // An event of three demo steps (backoff base 100 ms) whose second step failed
  // transiently on the first attempt: PENDING again (phase FORWARD, no node) for retry
  // 1, due after the first backoff, in [base/2, base] = [50, 100] ms on the database
  // clock; the first step done (one demo_ledger row), the second FAILED once with an
  // error containing `error`, the third not run.
  void ExpectFirstRetryAfterStep2(const std::string& code, int64_t version, const std::string& error) {
    SCOPED_TRACE(code);
    EXPECT_EQ(EventStr(code, "status"), "PENDING");
    EXPECT_EQ(EventStr(code, "phase"), "FORWARD");
    EXPECT_EQ(EventStr(code, "node_address"), "<null>");
    EXPECT_EQ(EventInt(code, "retry_count"), 1);
    EXPECT_EQ(EventInt(code, "version"), version);
    const int64_t backoff_us = EventInt(code, "TIMESTAMPDIFF(MICROSECOND, modifier_time, next_run_time)");
    EXPECT_GE(backoff_us, 50'000);
    EXPECT_LE(backoff_us, 100'000);
    EXPECT_EQ(StepStr(code + "#1", "status"), "SUCCESS");
    EXPECT_EQ(StepStr(code + "#2", "status"), "FAILED");
    EXPECT_EQ(StepInt(code + "#2", "retry_count"), 1);
    EXPECT_NE(StepStr(code + "#2", "error_details").find(error), std::string::npos);
    EXPECT_EQ(StepStr(code + "#3", "status"), "PENDING");
    EXPECT_EQ(Ledger(code + "#1"), 1);
    EXPECT_EQ(LedgerRows(code), 1);
  }
};

}  // namespace dsync::testing
