// Per-step routing's hand-on (docs/event-lifecycle.md item 7) against a real MariaDB:
// two saga engines as node A (reaching env_a only) and node B (env_b only) run a topic
// whose steps touch env_a, then env_b, then nothing. Events are assigned by SQL, as the
// dispatcher would. Checked: the hand-on is one fenced transition (a node that lost the
// event cannot hand it on), charges neither a retry nor a reset, and the next owner
// resumes at the step handed on (the steps already SUCCESS are not run again), forward
// and in compensation, one by one and in batched runs (SagaEngine::RunBatch).
//
// What a step needs is decided by its type and `target` (config/step_datasources.h);
// the test's handler stands in for table_delete's body so that each application is a
// demo_ledger row in the framework database (exactly-once, countable).
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "events/transitions.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "tests/support/assigned_events.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/saga_test.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::Step;

class LedgerStep final : public StepHandler {
 public:
  StepResult Execute(StepContext& ctx) override {
    ctx.tx().Execute("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES (?, ?, ?) "
                     "ON DUPLICATE KEY UPDATE applications = applications + 1",
                     ctx.idempotency_key(), ctx.event_code(), ctx.step_name());
    return StepResult::Ok(nullptr, json{{"undo", true}});
  }
  StepResult Compensate(StepContext& ctx) override {
    ctx.tx().Execute("DELETE FROM demo_ledger WHERE idempotency_key = ?", ctx.idempotency_key());
    return StepResult::Ok();
  }
};

std::map<std::string, TopicSettings> HandOnTopics() {
  TopicSettings gap = testing::DemoTopic(/*max_retry=*/1, 100ms, 200ms);
  gap.steps = {Step("del_a", "table_delete", {{"target", "env_a"}}),
               Step("del_b", "table_delete", {{"target", "env_b"}}), Step("note")};
  return {{"GAP", gap}};
}

StepRegistry HandOnRegistry() {
  StepRegistry r = StepRegistry::WithBuiltins();
  r.Register("table_delete", [](const StepSpec&) { return std::make_unique<LedgerStep>(); });
  return r;
}

// A node's reach: every name among `reached`.
DatasourceReach Reaching(std::set<std::string> reached) {
  return [reached](const std::vector<std::string>& names) {
    for (const auto& n : names) {
      if (!reached.count(n)) return false;
    }
    return true;
  };
}

class HandOnTest : public testing::SagaTest {
 protected:
  HandOnTest()
      : plans_(HandOnTopics(), HandOnRegistry()), datasources_({}),
        engine_a_(db_.pool(), plans_, datasources_, clock_, kNodeA),
        engine_b_(db_.pool(), plans_, datasources_, clock_, kNodeB) {
    engine_a_.SetDatasourceReach(Reaching({"env_a"}));
    engine_b_.SetDatasourceReach(Reaching({"env_b"}));
  }

  AssignedEvent Load(const std::string& code) { return testing::LoadAssigned(db_.pool(), code); }
  Outcome AssignAndRun(const std::string& code, SagaEngine& engine, const std::string& node) {
    Assign(code, node);
    return engine.Run(Load(code), {});
  }
  std::string LastWhy(const std::string& code) {
    return json::parse(EventStr(code, "process_log")).back().value("why", "");
  }
  std::string Counters(const std::string& code) {
    return std::to_string(EventInt(code, "retry_count")) + "/" + std::to_string(EventInt(code, "reset_count"));
  }

  SystemClock clock_;
  Plans plans_;
  Datasources datasources_;
  SagaEngine engine_a_;
  SagaEngine engine_b_;
};

TEST_F(HandOnTest, HandOnChargesNothingAndTheNextOwnerResumesAtTheStep) {
  ProduceRaw("H1", "GAP", "{}");
  EXPECT_EQ(AssignAndRun("H1", engine_a_, kNodeA), Outcome::kHandedOn);
  // produce 1, assign 2, claim 3, hand-on 4.
  EXPECT_EQ(EventStr("H1", "status"), "PENDING");
  EXPECT_EQ(EventStr("H1", "node_address"), "<null>");
  EXPECT_EQ(EventStr("H1", "phase"), "FORWARD");
  EXPECT_EQ(EventStr("H1", "route"), "env_b");
  EXPECT_EQ(EventInt("H1", "version"), 4);
  EXPECT_EQ(Counters("H1"), "0/0");
  EXPECT_EQ(EventStr("H1", "last_error"), "<null>");  // nobody failed
  EXPECT_LE(EventInt("H1", "TIMESTAMPDIFF(MICROSECOND, NOW(3), next_run_time)"), 0);  // due now
  EXPECT_EQ(LastWhy("H1"), std::string("handed on: step 'del_b' needs env_b, which node ") + kNodeA + " does not reach");
  EXPECT_EQ(StepStr("H1#1", "status"), "SUCCESS");
  EXPECT_EQ(StepStr("H1#1", "node_address"), kNodeA);
  EXPECT_EQ(StepStr("H1#2", "status"), "EXECUTING");  // next; nobody runs it now
  EXPECT_EQ(StepStr("H1#2", "node_address"), "<null>");
  EXPECT_EQ(StepStr("H1#3", "status"), "PENDING");
  EXPECT_EQ(Ledger("H1#1"), 1);
  EXPECT_EQ(Ledger("H1#2"), -1);
  EXPECT_EQ(engine_a_.stats().handed_on.load(), 1u);

  // Node B claims it and resumes at del_b: del_a is not run again.
  EXPECT_EQ(AssignAndRun("H1", engine_b_, kNodeB), Outcome::kSucceeded);
  EXPECT_EQ(EventStr("H1", "status"), "SUCCESS");
  EXPECT_EQ(Counters("H1"), "0/0");
  EXPECT_EQ(Ledger("H1#1"), 1);
  EXPECT_EQ(Ledger("H1#2"), 1);
  EXPECT_EQ(Ledger("H1#3"), 1);
  EXPECT_EQ(StepStr("H1#1", "node_address"), kNodeA);
  EXPECT_EQ(StepStr("H1#2", "node_address"), kNodeB);
  EXPECT_EQ(StepStr("H1#3", "node_address"), kNodeB);
  EXPECT_EQ(EventInt("H1", "attempt"), 2);
}

TEST_F(HandOnTest, ANodeThatLostTheEventCannotHandItOn) {
  ProduceRaw("H2", "GAP", "{}");
  Assign("H2", kNodeA);
  // Node A's check of del_b's datasources is where it decides to hand on; just then
  // the sweeper takes the event away (as after a freeze past the offline timeout).
  bool taken = false;
  engine_a_.SetDatasourceReach([&](const std::vector<std::string>& names) {
    if (!taken && names == std::vector<std::string>{"env_b"}) {
      taken = true;
      EXPECT_EQ(Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1, "
                     "reset_count = reset_count + 1 WHERE code = 'H2' AND status = 'RUNNING'"),
                1u);
    }
    return Reaching({"env_a"})(names);
  });
  const int64_t version = EventInt("H2", "version") + 2;  // A's claim, then the sweeper's reset
  EXPECT_EQ(engine_a_.Run(Load("H2"), {}), Outcome::kLostOwnership);
  EXPECT_TRUE(taken);
  // Nothing of the hand-on was written: the event is as the sweeper left it.
  EXPECT_EQ(EventInt("H2", "version"), version);
  EXPECT_EQ(EventStr("H2", "route"), "<null>");
  EXPECT_EQ(Counters("H2"), "0/1");
  EXPECT_EQ(LastWhy("H2").find("handed on"), std::string::npos);
  EXPECT_EQ(StepStr("H2#2", "node_address"), kNodeA);  // ReleaseStep rolled back with it
  EXPECT_EQ(engine_a_.stats().handed_on.load(), 0u);

  // The statement alone: a stale fence matches nothing.
  const events::Fence stale{EventInt("H2", "id"), static_cast<int>(version - 1)};
  std::optional<events::Fence> after = db_.pool().Transact("stale hand-on", [&](storage::Connection& c) {
    return events::HandOnEvent(c, stale, kNodeA, "env_b", "handed on: test");
  });
  EXPECT_FALSE(after.has_value());
  EXPECT_EQ(EventStr("H2", "route"), "<null>");
  // And a current fence on a PENDING event neither (only RUNNING or COMPENSATING).
  const events::Fence current{stale.id, static_cast<int>(version)};
  after = db_.pool().Transact("pending hand-on", [&](storage::Connection& c) {
    return events::HandOnEvent(c, current, kNodeA, "env_b", "handed on: test");
  });
  EXPECT_FALSE(after.has_value());

  // Whoever gets it next runs it from del_b (B) after a hand-on by A, as usual.
  EXPECT_EQ(AssignAndRun("H2", engine_a_, kNodeA), Outcome::kHandedOn);
  EXPECT_EQ(AssignAndRun("H2", engine_b_, kNodeB), Outcome::kSucceeded);
  EXPECT_EQ(Counters("H2"), "0/1");
  EXPECT_EQ(Ledger("H2#1"), 1);
}

TEST_F(HandOnTest, CompensationIsHandedOnToTheNodeReachingItsTarget) {
  ProduceRaw("H3", "GAP", json{{"demo", {{"fail", {{"note", "permanent"}}}}}}.dump());
  EXPECT_EQ(AssignAndRun("H3", engine_a_, kNodeA), Outcome::kHandedOn);
  // B runs del_b, note fails for good, B compensates del_b, then hands on del_a's.
  EXPECT_EQ(AssignAndRun("H3", engine_b_, kNodeB), Outcome::kHandedOn);
  EXPECT_EQ(EventStr("H3", "status"), "PENDING");
  EXPECT_EQ(EventStr("H3", "phase"), "COMPENSATE");
  EXPECT_EQ(EventStr("H3", "route"), "env_a");
  EXPECT_EQ(LastWhy("H3"), std::string("handed on: compensation of 'del_a' needs env_a, which node ") + kNodeB +
                               " does not reach");
  EXPECT_EQ(StepStr("H3#2", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("H3#1", "status"), "COMPENSATING");
  EXPECT_EQ(StepStr("H3#1", "node_address"), "<null>");
  EXPECT_EQ(Ledger("H3#1"), 1);
  EXPECT_EQ(Ledger("H3#2"), -1);

  EXPECT_EQ(AssignAndRun("H3", engine_a_, kNodeA), Outcome::kCompensated);
  EXPECT_EQ(EventStr("H3", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("H3#1", "node_address"), kNodeA);
  EXPECT_EQ(StepStr("H3#2", "node_address"), kNodeB);
  EXPECT_EQ(LedgerRows("H3"), 0);
  EXPECT_EQ(Counters("H3"), "0/0");
}

TEST_F(HandOnTest, BatchedRunsHandOnToo) {
  // Two polls' worth: the first batch is claimed by the poll; once the plan's steps
  // are fast (as this machine's load allows: the test says so), the next is
  // claim-deferred, and each event is claimed only to hand it on.
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      for (int i = 0; i < 64; ++i) plans_.Find("GAP")->speed->Observe(50us);
    }
    std::vector<std::string> codes;
    for (int i = 0; i < 3; ++i) {
      codes.push_back("B" + std::to_string(round) + "-" + std::to_string(i));
      ProduceRaw(codes.back(), "GAP", "{}");
      Assign(codes.back(), kNodeA);
    }
    std::vector<AssignedEvent> rest;
    std::vector<AssignedEvent> batch = engine_a_.ClaimBatch(testing::PollAssigned(db_.pool(), kNodeA), rest);
    ASSERT_EQ(batch.size(), 3u);
    ASSERT_TRUE(rest.empty());
    if (round == 1) {
      EXPECT_TRUE(batch[0].claim_deferred);
    }
    std::vector<const AssignedEvent*> run;
    for (const auto& e : batch) run.push_back(&e);
    for (Outcome o : engine_a_.RunBatch(run, {})) EXPECT_EQ(o, Outcome::kHandedOn);
    for (const auto& code : codes) {
      SCOPED_TRACE(code);
      EXPECT_EQ(EventStr(code, "status"), "PENDING");
      EXPECT_EQ(EventStr(code, "route"), "env_b");
      EXPECT_EQ(Counters(code), "0/0");
      EXPECT_EQ(Ledger(code + "#1"), 1);
      EXPECT_EQ(AssignAndRun(code, engine_b_, kNodeB), Outcome::kSucceeded);
      EXPECT_EQ(Ledger(code + "#1"), 1);
      EXPECT_EQ(LedgerRows(code), 3);
    }
  }
}

}  // namespace
}  // namespace dsync::saga
