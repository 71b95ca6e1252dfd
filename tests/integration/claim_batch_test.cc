// SagaEngine::ClaimBatch (the consumer's batched first claims) against a real
// MariaDB: events are put ASSIGNED to a node by SQL (as the dispatcher would), read
// back as the consumer's poll reads them, and passed to ClaimBatch; the assertions
// are on the event and step rows. After every test the saga-order invariant is
// checked over all events of the schema.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "tests/support/assigned_events.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/saga_test.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

std::map<std::string, TopicSettings> Topics() {
  TopicSettings demo = testing::DemoTopic(/*max_retry=*/3, /*backoff_base=*/100ms, /*backoff_max=*/1000ms);
  TopicSettings one = testing::DemoTopic(3, 100ms, 1000ms, {"only"});
  return {{"DEMO", demo}, {"ONE", one}};
}

std::vector<std::string> Codes(const std::vector<AssignedEvent>& events) {
  std::vector<std::string> out;
  for (const AssignedEvent& e : events) out.push_back(e.code);
  std::sort(out.begin(), out.end());
  return out;
}

class ClaimBatchTest : public testing::SagaTest {
 protected:
  ClaimBatchTest()
      : plans_(Topics(), StepRegistry::WithBuiltins()), datasources_({}),
        engine_(db_.pool(), plans_, datasources_, clock_, kNodeA) {}

  void ProduceAssigned(const std::string& code, const std::string& topic = "DEMO",
                       const std::optional<std::string>& payload = std::string("{}")) {
    ProduceRaw(code, topic, payload);
    Assign(code);
  }

  // The consumer's poll (ConsumerNode::PollOnce): every event ASSIGNED to `node`.
  std::vector<AssignedEvent> Poll(const std::string& node = kNodeA) {
    return testing::PollAssigned(db_.pool(), node);
  }

  int64_t StepRows(const std::string& event_code) {
    return Int("SELECT COUNT(*) FROM distribute_event_step WHERE job_code = ?", event_code);
  }

  // A row snapshot of the columns a claim changes, to compare "untouched".
  std::string Snapshot(const std::string& code) {
    return Str("SELECT CONCAT_WS('|', status, COALESCE(node_address, '-'), version, attempt, retry_count, "
               "phase, COALESCE(started_time, '-'), COALESCE(process_log, '-'), modifier_time) "
               "FROM distribute_event WHERE code = ?",
               code);
  }

  // A first claim as ClaimBatch must leave it: RUNNING here, version + 1, attempt 1,
  // the plan's rows with the first EXECUTING.
  void ExpectClaimed(const std::string& code, int64_t polled_version, int steps) {
    SCOPED_TRACE(code);
    EXPECT_EQ(EventStr(code, "status"), "RUNNING");
    EXPECT_EQ(EventStr(code, "node_address"), kNodeA);
    EXPECT_EQ(EventInt(code, "version"), polled_version + 1);
    EXPECT_EQ(EventInt(code, "attempt"), 1);
    EXPECT_EQ(EventInt(code, "retry_count"), 0);
    EXPECT_EQ(EventInt(code, "started_time IS NOT NULL"), 1);
    json log = json::parse(EventStr(code, "process_log"));
    ASSERT_TRUE(log.is_array()) << log.dump();
    ASSERT_FALSE(log.empty());
    EXPECT_EQ(log.back()["from"], "ASSIGNED");
    EXPECT_EQ(log.back()["to"], "RUNNING");
    EXPECT_EQ(log.back()["node"], kNodeA);
    EXPECT_EQ(log.back()["why"], "claimed, attempt 1");
    ASSERT_EQ(StepRows(code), steps);
    for (int i = 1; i <= steps; ++i) {
      const std::string sc = code + "#" + std::to_string(i);
      SCOPED_TRACE(sc);
      EXPECT_EQ(StepInt(sc, "sort"), i);
      EXPECT_EQ(StepStr(sc, "step_type"), "demo");
      EXPECT_EQ(StepStr(sc, "tenant_id"), "t1");
      EXPECT_EQ(StepInt(sc, "max_retry"), 3);
      EXPECT_EQ(StepInt(sc, "parent_step_id IS NULL"), 1);
      if (i == 1) {
        EXPECT_EQ(StepStr(sc, "status"), "EXECUTING");
        EXPECT_EQ(StepStr(sc, "node_address"), kNodeA);
        EXPECT_EQ(StepInt(sc, "attempt"), 1);
        EXPECT_EQ(StepInt(sc, "started_at IS NOT NULL"), 1);
      } else {
        EXPECT_EQ(StepStr(sc, "status"), "PENDING");
        EXPECT_EQ(StepStr(sc, "node_address"), "<null>");
        EXPECT_EQ(StepInt(sc, "attempt"), 0);
        EXPECT_EQ(StepInt(sc, "started_at IS NULL"), 1);
      }
    }
  }

  SystemClock clock_;
  Plans plans_;
  Datasources datasources_;
  SagaEngine engine_;
};

TEST_F(ClaimBatchTest, ClaimsFirstAttemptsAndLeavesTheRestUntouched) {
  // (a) first attempts: '{}' and NULL payloads.
  ProduceAssigned("A1", "DEMO", "{}");
  ProduceAssigned("A2", "DEMO", std::nullopt);
  // (b) a retry: reset by the sweeper once and reassigned (attempt 1, retry_count 1).
  ProduceAssigned("B");
  ASSERT_EQ(Exec("UPDATE distribute_event SET attempt = 1, retry_count = 1, version = version + 2 "
                 "WHERE code = 'B'"),
            1u);
  // (c) a compensation to continue.
  ProduceAssigned("C");
  ASSERT_EQ(Exec("UPDATE distribute_event SET phase = 'COMPENSATE' WHERE code = 'C'"), 1u);
  // (d) an unknown topic, (e) a payload that is not JSON.
  ProduceAssigned("D", "NO_SUCH_TOPIC");
  ProduceAssigned("E", "DEMO", "{not json");
  // (f) poison: reset more than the topic's max_resets (5) times, still attempt 0.
  ProduceAssigned("F");
  ASSERT_EQ(Exec("UPDATE distribute_event SET reset_count = 6 WHERE code = 'F'"), 1u);

  std::vector<AssignedEvent> polled = Poll();
  ASSERT_EQ(polled.size(), 7u);
  std::map<std::string, int64_t> polled_version;
  std::map<std::string, std::string> before;
  for (const AssignedEvent& e : polled) {
    polled_version[e.code] = e.version;
    before[e.code] = Snapshot(e.code);
  }

  std::vector<AssignedEvent> rest;
  std::vector<AssignedEvent> claimed = engine_.ClaimBatch(polled, rest);

  EXPECT_EQ(Codes(claimed), (std::vector<std::string>{"A1", "A2"}));
  EXPECT_EQ(Codes(rest), (std::vector<std::string>{"B", "C", "D", "E", "F"}));
  for (const AssignedEvent& e : claimed) {
    EXPECT_TRUE(e.claimed) << e.code;
    EXPECT_EQ(e.version, polled_version[e.code]) << e.code << ": fields stay as polled";
    EXPECT_EQ(e.attempt, 0) << e.code;
  }
  for (const AssignedEvent& e : rest) EXPECT_FALSE(e.claimed) << e.code;

  ExpectClaimed("A1", polled_version["A1"], 3);
  ExpectClaimed("A2", polled_version["A2"], 3);
  EXPECT_EQ(json::parse(EventStr("A1", "process_log")).size(), 1u);

  for (const std::string code : {"B", "C", "D", "E", "F"}) {
    SCOPED_TRACE(code);
    EXPECT_EQ(EventStr(code, "status"), "ASSIGNED");
    EXPECT_EQ(EventInt(code, "version"), polled_version[code]);
    EXPECT_EQ(Snapshot(code), before[code]);
    EXPECT_EQ(StepRows(code), 0);
  }
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step"), 6);
  EXPECT_EQ(engine_.stats().not_claimed.load(), 0u);

  // Run takes the batch-claimed ones from the first step, without claiming again.
  for (const AssignedEvent& e : claimed) EXPECT_EQ(engine_.Run(e, {}), Outcome::kSucceeded) << e.code;
  for (const std::string code : {"A1", "A2"}) {
    EXPECT_EQ(EventStr(code, "status"), "SUCCESS") << code;
    EXPECT_EQ(EventInt(code, "version"), polled_version[code] + 2) << code;
  }
}

TEST_F(ClaimBatchTest, EventsLostSinceThePollAreDroppedAndTheOthersClaimed) {
  for (const std::string code : {"L1", "L2", "L3", "L4"}) ProduceAssigned(code);
  std::vector<AssignedEvent> polled = Poll();
  ASSERT_EQ(polled.size(), 4u);
  std::map<std::string, int64_t> polled_version;
  for (const AssignedEvent& e : polled) polled_version[e.code] = e.version;

  // After the poll: L2 reset and reassigned here (still ASSIGNED to A, one version
  // up); L3 reassigned to node B.
  ASSERT_EQ(Exec("UPDATE distribute_event SET version = version + 1 WHERE code = 'L2'"), 1u);
  ASSERT_EQ(Exec("UPDATE distribute_event SET version = version + 1, node_address = ? WHERE code = 'L3'",
                 kNodeB),
            1u);
  const std::string l2 = Snapshot("L2");
  const std::string l3 = Snapshot("L3");

  std::vector<AssignedEvent> rest;
  std::vector<AssignedEvent> claimed = engine_.ClaimBatch(polled, rest);

  EXPECT_EQ(Codes(claimed), (std::vector<std::string>{"L1", "L4"}));
  EXPECT_TRUE(rest.empty()) << "rest: " << ::testing::PrintToString(Codes(rest));
  EXPECT_EQ(engine_.stats().not_claimed.load(), 2u);

  ExpectClaimed("L1", polled_version["L1"], 3);
  ExpectClaimed("L4", polled_version["L4"], 3);
  EXPECT_EQ(Snapshot("L2"), l2);
  EXPECT_EQ(Snapshot("L3"), l3);
  EXPECT_EQ(EventStr("L2", "status"), "ASSIGNED");
  EXPECT_EQ(EventStr("L3", "node_address"), kNodeB);
  EXPECT_EQ(StepRows("L2"), 0);
  EXPECT_EQ(StepRows("L3"), 0);
}

TEST_F(ClaimBatchTest, ExistingStepRowsRollTheBatchBackToRest) {
  for (const std::string code : {"R1", "R2", "R3"}) ProduceAssigned(code);
  // A leftover row of R2's code (an event re-produced under an old code).
  ASSERT_EQ(Exec("INSERT INTO distribute_event_step (code, job_code, tenant_id, sort, step_type, step_name, "
                 "max_retry, payload, status) VALUES ('R2#1', 'R2', 't1', 1, 'demo', 's1', 3, '{}', 'PENDING')"),
            1u);
  std::vector<AssignedEvent> polled = Poll();
  ASSERT_EQ(polled.size(), 3u);
  std::map<std::string, std::string> before;
  for (const AssignedEvent& e : polled) before[e.code] = Snapshot(e.code);

  std::vector<AssignedEvent> rest;
  std::vector<AssignedEvent> claimed = engine_.ClaimBatch(polled, rest);

  EXPECT_TRUE(claimed.empty()) << ::testing::PrintToString(Codes(claimed));
  EXPECT_EQ(Codes(rest), (std::vector<std::string>{"R1", "R2", "R3"}));
  for (const AssignedEvent& e : rest) EXPECT_FALSE(e.claimed) << e.code;
  for (const std::string code : {"R1", "R2", "R3"}) {
    SCOPED_TRACE(code);
    EXPECT_EQ(Snapshot(code), before[code]);
    EXPECT_EQ(EventStr(code, "status"), "ASSIGNED");
  }
  // Only the leftover row: the batch's INSERT was rolled back with the claim.
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step"), 1);
  EXPECT_EQ(StepStr("R2#1", "status"), "PENDING");
  EXPECT_EQ(StepInt("R2#1", "attempt"), 0);

  // Claimed one by one, they all run (R2 with the rows it finds).
  for (const AssignedEvent& e : rest) EXPECT_EQ(engine_.Run(e, {}), Outcome::kSucceeded) << e.code;
  for (const std::string code : {"R1", "R2", "R3"}) {
    EXPECT_EQ(EventStr(code, "status"), "SUCCESS") << code;
    EXPECT_EQ(StepRows(code), 3) << code;
  }
}

TEST_F(ClaimBatchTest, ClaimedEventRunsToSuccessOnce) {
  ProduceAssigned("S1", "DEMO", R"({"space_id": 7})");
  ProduceAssigned("S2", "ONE", "");
  std::vector<AssignedEvent> polled = Poll();
  std::vector<AssignedEvent> rest;
  std::vector<AssignedEvent> claimed = engine_.ClaimBatch(polled, rest);
  ASSERT_EQ(Codes(claimed), (std::vector<std::string>{"S1", "S2"}));
  ASSERT_TRUE(rest.empty());
  const int64_t v1 = EventInt("S1", "version");

  for (const AssignedEvent& e : claimed) EXPECT_EQ(engine_.Run(e, {}), Outcome::kSucceeded) << e.code;

  EXPECT_EQ(EventStr("S1", "status"), "SUCCESS");
  EXPECT_EQ(EventInt("S1", "version"), v1 + 1);  // claimed (batch), succeeded: no second claim
  EXPECT_EQ(EventInt("S1", "attempt"), 1);
  EXPECT_EQ(EventInt("S1", "progress"), 100);
  EXPECT_EQ(EventInt("S1", "finished_time IS NOT NULL"), 1);
  json log = json::parse(EventStr("S1", "process_log"));
  ASSERT_EQ(log.size(), 2u) << log.dump();
  EXPECT_EQ(log[0]["to"], "RUNNING");
  EXPECT_EQ(log[1]["from"], "RUNNING");
  EXPECT_EQ(log[1]["to"], "SUCCESS");
  ASSERT_EQ(StepRows("S1"), 3);
  for (int i = 1; i <= 3; ++i) {
    const std::string sc = "S1#" + std::to_string(i);
    EXPECT_EQ(StepStr(sc, "status"), "SUCCESS") << sc;
    EXPECT_EQ(StepInt(sc, "attempt"), 1) << sc;
    EXPECT_EQ(StepStr(sc, "node_address"), kNodeA) << sc;
    EXPECT_EQ(Ledger(sc), 1) << sc;
  }
  EXPECT_EQ(LedgerRows("S1"), 3);

  EXPECT_EQ(EventStr("S2", "status"), "SUCCESS");
  EXPECT_EQ(StepStr("S2#1", "status"), "SUCCESS");
  EXPECT_EQ(Ledger("S2#1"), 1);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM demo_ledger"), 4);
  EXPECT_EQ(engine_.stats().claimed.load(), 2u);
  EXPECT_EQ(engine_.stats().succeeded.load(), 2u);
  EXPECT_EQ(engine_.stats().steps_executed.load(), 4u);
}

TEST_F(ClaimBatchTest, ThreeHundredFirstAttemptsInOneCall) {
  constexpr int kEvents = 300;
  {
    std::string sql = "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ";
    for (int i = 0; i < kEvents; ++i) {
      sql += (i == 0 ? "" : ", ") + std::string("('t1', 'M") + std::to_string(i) + "', 'd" +
             std::to_string(i) + "', 'DEMO', '{}')";
    }
    ASSERT_EQ(Exec(sql), static_cast<uint64_t>(kEvents));
  }
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'ASSIGNED', node_address = ?, version = version + 1, "
                 "assigned_time = NOW(3) WHERE status = 'PENDING'",
                 kNodeA),
            static_cast<uint64_t>(kEvents));
  std::vector<AssignedEvent> polled = Poll();
  ASSERT_EQ(polled.size(), static_cast<size_t>(kEvents));

  std::vector<AssignedEvent> rest;
  std::vector<AssignedEvent> claimed = engine_.ClaimBatch(polled, rest);

  EXPECT_EQ(claimed.size(), static_cast<size_t>(kEvents));
  EXPECT_TRUE(rest.empty()) << rest.size();
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event WHERE status = 'RUNNING' AND node_address = ? "
                "AND version = 3 AND attempt = 1 AND started_time IS NOT NULL",
                kNodeA),
            kEvents);
  // 900 = 512 + 256 + 128 + 4 rows, every one there once.
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step"), 3 * kEvents);
  EXPECT_EQ(Int("SELECT COUNT(DISTINCT job_code) FROM distribute_event_step"), kEvents);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE status = 'EXECUTING' AND sort = 1 "
                "AND attempt = 1 AND node_address = ?",
                kNodeA),
            kEvents);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE status = 'PENDING' AND sort IN (2, 3) "
                "AND attempt = 0 AND node_address IS NULL"),
            2 * kEvents);
  // Each event has exactly its own #1, #2, #3.
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code "
                "WHERE s.code = CONCAT(e.code, '#', s.sort) AND s.step_name = CONCAT('s', s.sort)"),
            3 * kEvents);
  EXPECT_EQ(engine_.stats().not_claimed.load(), 0u);
}

}  // namespace
}  // namespace dsync::saga
