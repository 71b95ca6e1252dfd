// The saga engine against a real MariaDB: events are put ASSIGNED to a node address
// by SQL (as the dispatcher would) and SagaEngine::Run is called directly. After
// every test the saga-order invariant is checked over all events of the schema.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "app/options.h"
#include "api/event_store.h"
#include "core/clock.h"
#include "core/error.h"
#include "events/reset.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "tests/support/assigned_events.h"
#include "tests/support/eventually.h"
#include "tests/support/fake_clock.h"
#include "tests/support/log_capture.h"
#include "tests/support/saga_fixtures.h"
#include "tests/support/saga_invariants.h"
#include "tests/support/saga_test.h"

namespace dsync::saga {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::LogCapture;

// A step type for the child-step tests: the plan step adds two children; every
// execution writes a demo_ledger row through tx(); compensation deletes it.
class ChunkerStep final : public StepHandler {
 public:
  StepResult Execute(StepContext& ctx) override {
    if (ctx.child_params().is_null()) {
      ctx.AddChildStep({{"chunk", 1}});
      ctx.AddChildStep({{"chunk", 2}});
    }
    ctx.tx().Execute("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES (?, ?, ?) "
                     "ON DUPLICATE KEY UPDATE applications = applications + 1",
                     ctx.idempotency_key(), ctx.event_code(), ctx.step_name());
    int chunk = ctx.child_params().is_object() ? ctx.child_params().value("chunk", 0) : 0;
    return StepResult::Ok(json{{"chunk", chunk}}, json{{"k", 1}});
  }
  StepResult Compensate(StepContext& ctx) override {
    ctx.tx().Execute("DELETE FROM demo_ledger WHERE idempotency_key = ?", ctx.idempotency_key());
    return StepResult::Ok();
  }
};

using testing::Step;
StepSpec Demo(const std::string& name) { return Step(name); }

std::map<std::string, TopicSettings> EngineTopics() {
  TopicSettings demo = testing::DemoTopic(/*max_retry=*/3, /*backoff_base=*/100ms, /*backoff_max=*/1000ms);

  TopicSettings retry_many = demo;
  retry_many.max_retry = 100;
  retry_many.steps = {Demo("s1")};

  TopicSettings timeout = demo;
  timeout.steps = {Demo("s1")};
  timeout.steps[0].timeout = 50ms;

  TopicSettings chunked = demo;
  chunked.steps = {Step("c1", "chunker"), Demo("s2")};

  TopicSettings once = demo;  // max_retry 0: one attempt
  once.max_retry = 0;
  once.steps = {Demo("s1")};

  TopicSettings twice = demo;  // max_retry 1: two attempts
  twice.max_retry = 1;
  twice.steps = {Demo("s1")};

  TopicSettings bad_sql = demo;
  bad_sql.steps = {Demo("s1"), Step("s2", "bad_sql")};

  TopicSettings flaky = demo;
  flaky.max_retry = 0;
  flaky.steps = {Step("s1", "conn_lost_once")};

  TopicSettings flaky_undo = demo;  // s2 fails for good; s1's compensation loses its connection once
  flaky_undo.max_retry = 0;
  flaky_undo.steps = {Step("s1", "conn_lost_once"), Demo("s2")};

  return {{"DEMO", demo},       {"RETRY_MANY", retry_many}, {"TIMEOUT", timeout}, {"CHUNKED", chunked},
          {"ONCE", once},       {"TWICE", twice},           {"BAD_SQL", bad_sql}, {"FLAKY", flaky},
          {"FLAKY_UNDO", flaky_undo}};
}

// A step whose SQL is wrong: the server answers 1064 (syntax), every time.
class BadSqlStep final : public StepHandler {
 public:
  StepResult Execute(StepContext& ctx) override {
    ctx.tx().Execute("SELEC 1 FROM demo_ledger");
    return StepResult::Ok();
  }
  StepResult Compensate(StepContext&) override { return StepResult::Ok(); }
};

// A step whose database connection is lost on its first execution (of each event),
// then succeeds, writing its ledger row.
class ConnLostOnceStep final : public StepHandler {
 public:
  StepResult Execute(StepContext& ctx) override {
    if (ctx.attempt() == 1) throw DbError(DbError::Kind::kConnectionLost, 2013, "Lost connection to server (2013)");
    ctx.tx().Execute("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES (?, ?, ?) "
                     "ON DUPLICATE KEY UPDATE applications = applications + 1",
                     ctx.idempotency_key(), ctx.event_code(), ctx.step_name());
    return StepResult::Ok();
  }
  StepResult Compensate(StepContext& ctx) override {
    // The compensation's connection is lost the first time it runs (attempt 2: the
    // event's second claim), not later.
    if (ctx.attempt() == 2) throw DbError(DbError::Kind::kConnectionLost, 2013, "Lost connection to server (2013)");
    ctx.tx().Execute("DELETE FROM demo_ledger WHERE idempotency_key = ?", ctx.idempotency_key());
    return StepResult::Ok();
  }
};

StepRegistry EngineRegistry() {
  StepRegistry r = StepRegistry::WithBuiltins();
  r.Register("chunker", [](const StepSpec&) { return std::make_unique<ChunkerStep>(); });
  r.Register("bad_sql", [](const StepSpec&) { return std::make_unique<BadSqlStep>(); });
  r.Register("conn_lost_once", [](const StepSpec&) { return std::make_unique<ConnLostOnceStep>(); });
  return r;
}

// Plans of one topic whose only step, `name`, is of a step type of the test's own:
// `Handler`, registered as `type`.
template <class Handler>
Plans OneStepPlans(const std::string& topic, const std::string& name, const std::string& type) {
  StepRegistry registry;
  registry.Register(type, [](const StepSpec&) { return std::make_unique<Handler>(); });
  TopicSettings t;
  t.steps = {Step(name, type)};
  return Plans({{topic, t}}, registry);
}

class SagaEngineTest : public testing::SagaTest {
 protected:
  SagaEngineTest()
      : plans_(EngineTopics(), EngineRegistry()), datasources_({}),
        engine_a_(db_.pool(), plans_, datasources_, clock_, kNodeA),
        engine_b_(db_.pool(), plans_, datasources_, clock_, kNodeB) {}

  void Produce(const std::string& code, const json& payload, const std::string& topic = "DEMO") {
    ProduceRaw(code, topic, payload.dump());
  }
  AssignedEvent Load(const std::string& code) { return testing::LoadAssigned(db_.pool(), code); }
  Outcome AssignAndRun(const std::string& code, SagaEngine& engine, const std::string& node = kNodeA) {
    Assign(code, node);
    return engine.Run(Load(code), {});
  }

  json Result(const std::string& code) { return json::parse(EventStr(code, "result")); }
  json ProcessLog(const std::string& code) { return json::parse(EventStr(code, "process_log")); }
  // Microseconds between two step timestamps.
  int64_t StepTimeUs(const std::string& step_code, const std::string& column) {
    return Int("SELECT TIMESTAMPDIFF(MICROSECOND, '2000-01-01', " + column +
                   ") FROM distribute_event_step WHERE code = ?",
               step_code);
  }

  // Waits (10 ms polls, 10 s at most) for an SQL condition to hold.
  bool Eventually(const std::string& sql) {
    return testing::Eventually([&] { return Int(sql) == 1; });
  }

  // Runs `code` on node A until step `step_code` is EXECUTING, then stops the
  // engine as a shutdown would: the event stays RUNNING, that step EXECUTING.
  void RunUntilExecutingThenStop(const std::string& code, const std::string& step_code) {
    Assign(code, kNodeA);
    AssignedEvent ev = Load(code);
    std::stop_source stop;
    Outcome out = Outcome::kSucceeded;
    std::thread runner([&] { out = engine_a_.Run(ev, stop.get_token()); });
    bool reached = Eventually("SELECT COUNT(*) FROM distribute_event_step WHERE code = '" + step_code +
                              "' AND status = 'EXECUTING'");
    stop.request_stop();
    runner.join();
    ASSERT_TRUE(reached);
    ASSERT_EQ(out, Outcome::kAbandoned);
    ASSERT_EQ(EventStr(code, "status"), "RUNNING");
  }
  // What the sweeper does to a RUNNING event whose node died.
  void ResetAsSweeper(const std::string& code) {
    ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, "
                   "version = version + 1, reset_count = reset_count + 1, next_run_time = NOW(3), "
                   "last_error = 'node dead' WHERE code = ? AND status IN ('RUNNING', 'COMPENSATING')",
                   code),
              1u);
  }

  SystemClock clock_;
  Plans plans_;
  Datasources datasources_;
  SagaEngine engine_a_;
  SagaEngine engine_b_;
};

TEST_F(SagaEngineTest, ThreeDemoStepsSucceed) {
  LogCapture logs;
  Produce("E1", json{{"space_id", 7}});
  EXPECT_EQ(AssignAndRun("E1", engine_a_), Outcome::kSucceeded);

  EXPECT_EQ(EventStr("E1", "status"), "SUCCESS");
  EXPECT_EQ(EventInt("E1", "version"), 4);  // 1 produced, 2 assigned, 3 claimed, 4 succeeded
  EXPECT_EQ(EventInt("E1", "attempt"), 1);
  EXPECT_EQ(EventInt("E1", "retry_count"), 0);
  EXPECT_EQ(EventInt("E1", "progress"), 100);
  EXPECT_EQ(EventStr("E1", "node_address"), kNodeA);  // kept: who finished it
  EXPECT_EQ(EventInt("E1", "finished_time IS NOT NULL AND started_time IS NOT NULL"), 1);
  EXPECT_EQ(Result("E1")["steps"], 3);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE job_code = 'E1'"), 3);
  for (int i = 1; i <= 3; ++i) {
    std::string code = "E1#" + std::to_string(i);
    EXPECT_EQ(StepStr(code, "status"), "SUCCESS") << code;
    EXPECT_EQ(StepInt(code, "sort"), i);
    EXPECT_EQ(StepStr(code, "step_name"), "s" + std::to_string(i));
    EXPECT_EQ(StepStr(code, "step_type"), "demo");
    EXPECT_EQ(StepStr(code, "tenant_id"), "t1");
    EXPECT_EQ(StepStr(code, "node_address"), kNodeA);
    EXPECT_EQ(StepInt(code, "attempt"), 1);
    EXPECT_EQ(StepInt(code, "max_retry"), 3);
    EXPECT_EQ(json::parse(StepStr(code, "output"))["ledger"], code);
    EXPECT_EQ(json::parse(StepStr(code, "compensation_data"))["ledger"], code);
    EXPECT_EQ(Ledger(code), 1) << code;
  }
  EXPECT_LE(StepTimeUs("E1#1", "executed_at"), StepTimeUs("E1#2", "executed_at"));
  EXPECT_LE(StepTimeUs("E1#2", "executed_at"), StepTimeUs("E1#3", "executed_at"));

  json log = ProcessLog("E1");
  ASSERT_EQ(log.size(), 2u) << log.dump();
  EXPECT_EQ(log[0]["from"], "ASSIGNED");
  EXPECT_EQ(log[0]["to"], "RUNNING");
  EXPECT_EQ(log[0]["node"], kNodeA);
  EXPECT_EQ(log[1]["from"], "RUNNING");
  EXPECT_EQ(log[1]["to"], "SUCCESS");
  EXPECT_EQ(log[1]["at"].get<std::string>().size(), 23u);

  EXPECT_EQ(logs.Count("EVENT_SUCCEEDED event=E1 node=10.0.0.1:7001 trace=E1 steps=3 ms="), 1);
  EXPECT_EQ(engine_a_.stats().succeeded.load(), 1u);
  EXPECT_EQ(engine_a_.stats().steps_executed.load(), 3u);

  // The views see it.
  EXPECT_EQ(Int("SELECT steps_done * 10 + steps_total FROM v_event_progress WHERE code = 'E1'"), 33);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM v_step_history WHERE event_code = 'E1' AND action = 'EXECUTE'"), 3);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM v_events_needing_attention"), 0);
}

TEST_F(SagaEngineTest, RunningAgainDoesNotReclaimAFinishedEvent) {
  Produce("E1", json::object());
  ASSERT_EQ(AssignAndRun("E1", engine_a_), Outcome::kSucceeded);
  AssignedEvent stale = Load("E1");
  stale.version = 2;  // what the node polled before
  EXPECT_EQ(engine_a_.Run(stale, {}), Outcome::kNotClaimed);
  EXPECT_EQ(EventInt("E1", "version"), 4);
  EXPECT_EQ(Ledger("E1#1"), 1);
}

TEST_F(SagaEngineTest, TransientFailureRetriesWithBackoffThenSucceeds) {
  Produce("E2", json{{"demo", {{"fail", {{"s2", 2}}}}}});

  EXPECT_EQ(AssignAndRun("E2", engine_a_), Outcome::kRetryScheduled);
  ExpectFirstRetryAfterStep2("E2", /*version=*/4, "injected transient");
  EXPECT_NE(EventStr("E2", "last_error").find("injected transient failure 1 of 2"), std::string::npos);

  EXPECT_EQ(AssignAndRun("E2", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(EventInt("E2", "retry_count"), 2);
  EXPECT_EQ(StepInt("E2#2", "retry_count"), 2);
  const int64_t backoff_us = EventInt("E2", "TIMESTAMPDIFF(MICROSECOND, modifier_time, next_run_time)");
  EXPECT_GE(backoff_us, 100'000);  // doubled: [100, 200] ms
  EXPECT_LE(backoff_us, 200'000);

  EXPECT_EQ(AssignAndRun("E2", engine_b_, kNodeB), Outcome::kSucceeded);
  EXPECT_EQ(EventStr("E2", "status"), "SUCCESS");
  EXPECT_EQ(EventInt("E2", "attempt"), 3);
  EXPECT_EQ(EventInt("E2", "retry_count"), 2);
  EXPECT_EQ(EventInt("E2", "version"), 10);  // 3 x (assign, claim) + 2 retries + success + produce
  for (const char* step : {"E2#1", "E2#2", "E2#3"}) EXPECT_EQ(Ledger(step), 1) << step;
  EXPECT_EQ(StepStr("E2#1", "node_address"), kNodeA);  // not run again
  EXPECT_EQ(StepInt("E2#1", "attempt"), 1);
  EXPECT_EQ(StepStr("E2#2", "node_address"), kNodeB);
  EXPECT_EQ(StepInt("E2#2", "attempt"), 3);
  EXPECT_EQ(engine_a_.stats().retries.load(), 2u);

  json log = ProcessLog("E2");
  ASSERT_EQ(log.size(), 6u) << log.dump();
  EXPECT_EQ(log[1]["to"], "PENDING");
  EXPECT_NE(log[1]["why"].get<std::string>().find("retry 1 of 3"), std::string::npos) << log.dump();
  EXPECT_EQ(log[5]["to"], "SUCCESS");
  EXPECT_EQ(log[5]["node"], kNodeB);
}

TEST_F(SagaEngineTest, PermanentFailureCompensatesInReverse) {
  LogCapture logs;
  Produce("E3", json{{"demo", {{"fail", {{"s3", "permanent"}}}}}});
  EXPECT_EQ(AssignAndRun("E3", engine_a_), Outcome::kCompensated);

  EXPECT_EQ(EventStr("E3", "status"), "COMPENSATED");
  EXPECT_EQ(EventStr("E3", "phase"), "COMPENSATE");
  EXPECT_EQ(EventInt("E3", "version"), 5);  // claimed 3, compensating 4, compensated 5
  EXPECT_EQ(EventInt("E3", "progress"), 0);
  EXPECT_EQ(StepStr("E3#1", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("E3#2", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("E3#3", "status"), "FAILED");
  EXPECT_EQ(StepStr("E3#3", "compensated_at"), "<null>");
  EXPECT_GE(StepTimeUs("E3#1", "compensated_at"), StepTimeUs("E3#2", "compensated_at"));
  EXPECT_GE(StepTimeUs("E3#2", "compensated_at"), StepTimeUs("E3#3", "started_at"));
  EXPECT_EQ(LedgerRows("E3"), 0);

  json result = Result("E3");
  EXPECT_EQ(result["failed_step"], "s3");
  EXPECT_EQ(result["kind"], "permanent");
  EXPECT_EQ(result["error"], "demo: injected permanent failure");
  json log = ProcessLog("E3");
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[1]["to"], "COMPENSATING");
  EXPECT_EQ(log[2]["from"], "COMPENSATING");
  EXPECT_EQ(log[2]["to"], "COMPENSATED");

  // v_step_history: forward s1, s2, s3 then compensations s2, s1.
  std::vector<std::string> timeline;
  db_.pool().Run("history", [&](storage::Connection& c) {
    auto rs = c.Query("SELECT action, step_name FROM v_step_history WHERE event_code = 'E3' ORDER BY seq");
    while (rs->next()) timeline.push_back(std::string(rs->getString(1)) + " " + std::string(rs->getString(2)));
  });
  EXPECT_EQ(timeline, (std::vector<std::string>{"EXECUTE s1", "EXECUTE s2", "EXECUTE s3",
                                                "COMPENSATE s2", "COMPENSATE s1"}));
  EXPECT_EQ(logs.Count("STEP_FAILED event=E3"), 1);
  EXPECT_EQ(logs.Count("EVENT_COMPENSATING event=E3"), 1);
  EXPECT_EQ(logs.Count("EVENT_COMPENSATED event=E3 node=10.0.0.1:7001 trace=E3 steps=2"), 1);
}

TEST_F(SagaEngineTest, FirstStepPermanentFailureHasNothingToCompensate) {
  Produce("E3b", json{{"demo", {{"fail", {{"s1", "permanent"}}}}}});
  EXPECT_EQ(AssignAndRun("E3b", engine_a_), Outcome::kCompensated);
  EXPECT_EQ(EventStr("E3b", "status"), "COMPENSATED");
  EXPECT_EQ(Result("E3b")["failed_step"], "s1");
  EXPECT_EQ(StepStr("E3b#2", "status"), "PENDING");
}

TEST_F(SagaEngineTest, CompensationFailsOnceThenSucceeds) {
  Produce("E4", json{{"demo", {{"fail", {{"s3", "permanent"}}}, {"fail_compensation", {{"s1", 1}}}}}});
  EXPECT_EQ(AssignAndRun("E4", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(EventStr("E4", "status"), "PENDING");
  EXPECT_EQ(EventStr("E4", "phase"), "COMPENSATE");
  EXPECT_EQ(EventInt("E4", "retry_count"), 0);  // forward retries only
  EXPECT_EQ(StepStr("E4#2", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("E4#1", "status"), "COMPENSATING");
  EXPECT_EQ(StepInt("E4#1", "compensation_retry_count"), 1);
  EXPECT_NE(StepStr("E4#1", "error_details").find("compensation failure 1 of 1"), std::string::npos);
  EXPECT_EQ(LedgerRows("E4"), 1);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM v_events_needing_attention WHERE code = 'E4' "
                "AND reason = 'compensation_retrying'"),
            1);

  EXPECT_EQ(AssignAndRun("E4", engine_b_, kNodeB), Outcome::kCompensated);
  EXPECT_EQ(EventStr("E4", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("E4#1", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("E4#1", "node_address"), kNodeB);
  EXPECT_EQ(LedgerRows("E4"), 0);
  EXPECT_EQ(Result("E4")["failed_step"], "s3");  // the original failure survives
  EXPECT_EQ(EventInt("E4", "attempt"), 2);
}

TEST_F(SagaEngineTest, CompensationThatNeverSucceedsFailsTheEvent) {
  Produce("E5", json{{"demo", {{"fail", {{"s3", "permanent"}}}, {"fail_compensation", {{"s1", "always"}}}}}});
  EXPECT_EQ(AssignAndRun("E5", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(AssignAndRun("E5", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(AssignAndRun("E5", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(StepInt("E5#1", "compensation_retry_count"), 3);
  EXPECT_EQ(AssignAndRun("E5", engine_a_), Outcome::kFailed);

  EXPECT_EQ(EventStr("E5", "status"), "FAILED");
  EXPECT_EQ(StepStr("E5#1", "status"), "COMPENSATING");
  EXPECT_EQ(StepInt("E5#1", "compensation_retry_count"), 4);
  EXPECT_EQ(StepStr("E5#2", "status"), "COMPENSATED");
  json result = Result("E5");
  EXPECT_EQ(result["failed_step"], "s3");
  EXPECT_EQ(result["compensation_failed_step"], "s1");
  EXPECT_NE(result["compensation_error"].get<std::string>().find("compensation retries exhausted"),
            std::string::npos);
  EXPECT_EQ(LedgerRows("E5"), 1);  // s1's effect could not be undone
  EXPECT_EQ(Int("SELECT COUNT(*) FROM v_events_needing_attention WHERE code = 'E5' AND reason = 'failed'"), 1);
}

TEST_F(SagaEngineTest, LostOwnershipWritesNothingMore) {
  LogCapture logs;
  Produce("E6", json{{"demo", {{"sleep_ms", 300}}}});
  Assign("E6", kNodeA);
  AssignedEvent ev = Load("E6");
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine_a_.Run(ev, {}); });
  ASSERT_TRUE(Eventually("SELECT COUNT(*) FROM distribute_event WHERE code = 'E6' AND status = 'RUNNING'"));
  // The sweeper takes the event away while s1 sleeps.
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1 "
                 "WHERE code = 'E6'"),
            1u);
  auto snapshot = [&] {
    return Str("SELECT GROUP_CONCAT(CONCAT_WS('|', code, status, COALESCE(node_address, ''), attempt, "
               "COALESCE(executed_at, ''), modifier_time, retry_count) ORDER BY code) "
               "FROM distribute_event_step WHERE job_code = 'E6'");
  };
  std::string before = snapshot();
  runner.join();

  EXPECT_EQ(out, Outcome::kLostOwnership);
  EXPECT_EQ(Ledger("E6#1"), -1);  // no ledger row
  EXPECT_EQ(LedgerRows("E6"), 0);
  EXPECT_EQ(snapshot(), before);
  EXPECT_EQ(EventStr("E6", "status"), "PENDING");
  EXPECT_EQ(EventInt("E6", "version"), 4);
  EXPECT_EQ(engine_a_.stats().lost_ownership.load(), 1u);
  EXPECT_EQ(logs.Count("EVENT_LOST_OWNERSHIP event=E6"), 1);

  // The next owner runs it cleanly.
  EXPECT_EQ(AssignAndRun("E6", engine_b_, kNodeB), Outcome::kSucceeded);
  for (const char* step : {"E6#1", "E6#2", "E6#3"}) EXPECT_EQ(Ledger(step), 1) << step;
}

TEST_F(SagaEngineTest, StillOwnerIsAFencedRead) {
  // A step type that asks, then reports the answer as its output.
  struct Asker final : StepHandler {
    StepResult Execute(StepContext& ctx) override { return StepResult::Ok(json{{"owner", ctx.StillOwner()}}); }
    StepResult Compensate(StepContext&) override { return StepResult::Ok(); }
  };
  Plans plans = OneStepPlans<Asker>("ASK", "ask", "asker");
  SagaEngine engine(db_.pool(), plans, datasources_, clock_, kNodeA);
  ProduceRaw("E7", "ASK", "{}");
  EXPECT_EQ(AssignAndRun("E7", engine), Outcome::kSucceeded);
  EXPECT_EQ(json::parse(StepStr("E7#1", "output"))["owner"], true);
}

TEST_F(SagaEngineTest, ResultOfAStepWithoutTxIsDiscardedAfterLosingTheEvent) {
  // A step with effects elsewhere: it never calls tx(); the engine's own commit fences.
  static std::atomic<bool> release{false};
  static std::atomic<int> owner_answer{-1};
  struct Slow final : StepHandler {
    StepResult Execute(StepContext& ctx) override {
      while (!release.load()) std::this_thread::sleep_for(5ms);
      owner_answer = ctx.StillOwner() ? 1 : 0;
      return StepResult::Ok(json{{"done", true}});
    }
    StepResult Compensate(StepContext&) override { return StepResult::Ok(); }
  };
  Plans plans = OneStepPlans<Slow>("SLOW", "slow", "slow");
  SagaEngine engine(db_.pool(), plans, datasources_, clock_, kNodeA);

  ProduceRaw("E20", "SLOW", "{}");
  Assign("E20", kNodeA);
  AssignedEvent ev = Load("E20");
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine.Run(ev, {}); });
  ASSERT_TRUE(Eventually("SELECT COUNT(*) FROM distribute_event WHERE code = 'E20' AND status = 'RUNNING'"));
  ASSERT_EQ(Exec("UPDATE distribute_event SET version = version + 1 WHERE code = 'E20'"), 1u);
  release = true;
  runner.join();
  EXPECT_EQ(out, Outcome::kLostOwnership);
  EXPECT_EQ(owner_answer.load(), 0);
  EXPECT_EQ(StepStr("E20#1", "status"), "EXECUTING");
  EXPECT_EQ(StepStr("E20#1", "output"), "<null>");
  EXPECT_EQ(EventStr("E20", "status"), "RUNNING");  // as the bump left it
  // Clean up for the invariant check: the sweeper would reset and the next owner finish.
  ResetAsSweeper("E20");
  EXPECT_EQ(AssignAndRun("E20", engine, kNodeA), Outcome::kSucceeded);
}

TEST_F(SagaEngineTest, InvariantCheckCatchesBrokenHistories) {
  Produce("E21", json{{"demo", {{"fail", {{"s3", "permanent"}}}}}});
  ASSERT_EQ(AssignAndRun("E21", engine_a_), Outcome::kCompensated);
  Produce("E22", json::object());
  ASSERT_EQ(AssignAndRun("E22", engine_a_), Outcome::kSucceeded);
  EXPECT_TRUE(testing::SagaOrderViolations(db_.pool()).empty());

  // Compensated in forward order instead of reverse.
  Exec("UPDATE distribute_event_step SET compensated_at = compensated_at - INTERVAL 1 SECOND WHERE code = 'E21#1'");
  auto mentions = [](const std::vector<std::string>& lines, const std::string& needle) {
    for (const auto& l : lines) if (l.find(needle) != std::string::npos) return true;
    return false;
  };
  auto bad = testing::SagaOrderViolations(db_.pool());
  EXPECT_TRUE(mentions(bad, "event E21 (COMPENSATED): step E21#1 compensated before E21#2 (not reverse order)"))
      << testing::JoinLines(bad);
  Exec("UPDATE distribute_event_step SET compensated_at = compensated_at + INTERVAL 1 SECOND WHERE code = 'E21#1'");

  // A SUCCESS event whose step did not succeed; a step executed out of order.
  Exec("UPDATE distribute_event_step SET status = 'PENDING', executed_at = NULL WHERE code = 'E22#2'");
  bad = testing::SagaOrderViolations(db_.pool());
  EXPECT_TRUE(mentions(bad, "step E22#3 executed after a step that never did")) << testing::JoinLines(bad);
  EXPECT_TRUE(mentions(bad, "SUCCESS but step E22#2 is PENDING")) << testing::JoinLines(bad);
  for (const auto& l : bad) EXPECT_EQ(l.find("E21"), std::string::npos) << l;
  Exec("DELETE FROM distribute_event WHERE code = 'E22'");
  EXPECT_TRUE(testing::SagaOrderViolations(db_.pool()).empty());
}

TEST_F(SagaEngineTest, CrashResumeReexecutesOnlyTheInterruptedStep) {
  Produce("E8", json{{"demo", {{"sleep_ms", 100}}}});
  RunUntilExecutingThenStop("E8", "E8#2");
  EXPECT_EQ(StepStr("E8#1", "status"), "SUCCESS");
  EXPECT_EQ(StepStr("E8#2", "status"), "EXECUTING");
  EXPECT_EQ(LedgerRows("E8"), 1);

  ResetAsSweeper("E8");
  EXPECT_EQ(AssignAndRun("E8", engine_b_, kNodeB), Outcome::kSucceeded);
  for (const char* step : {"E8#1", "E8#2", "E8#3"}) EXPECT_EQ(Ledger(step), 1) << step;
  EXPECT_EQ(StepStr("E8#1", "node_address"), kNodeA);
  EXPECT_EQ(StepInt("E8#1", "attempt"), 1);
  EXPECT_EQ(StepStr("E8#2", "node_address"), kNodeB);
  EXPECT_EQ(StepInt("E8#2", "attempt"), 2);
  EXPECT_EQ(EventInt("E8", "retry_count"), 0);  // the crash was not a retry
  EXPECT_EQ(EventInt("E8", "reset_count"), 1);
}

TEST_F(SagaEngineTest, CrashResumeContinuesAStoppedCompensation) {
  // s2 then s1 compensate; s1's compensation fails once (leaving it COMPENSATING),
  // then a node "dies" while holding the resumed compensation.
  Produce("E9", json{{"demo", {{"fail", {{"s3", "permanent"}}}, {"fail_compensation", {{"s1", 1}}}}}});
  ASSERT_EQ(AssignAndRun("E9", engine_a_), Outcome::kRetryScheduled);
  Assign("E9", kNodeA);
  // Claimed into COMPENSATING by a node that then vanished before doing anything:
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'COMPENSATING', version = version + 1, "
                 "attempt = attempt + 1 WHERE code = 'E9'"),
            1u);
  ResetAsSweeper("E9");
  EXPECT_EQ(AssignAndRun("E9", engine_b_, kNodeB), Outcome::kCompensated);
  EXPECT_EQ(StepStr("E9#1", "status"), "COMPENSATED");
  EXPECT_EQ(StepStr("E9#2", "status"), "COMPENSATED");
  EXPECT_EQ(LedgerRows("E9"), 0);
}

TEST_F(SagaEngineTest, ClaimIsFencedByThePhaseTheEngineActsOn) {
  Produce("E23", json{{"demo", {{"fail", {{"s3", "permanent"}}}, {"fail_compensation", {{"s1", 1}}}}}});
  ASSERT_EQ(AssignAndRun("E23", engine_a_), Outcome::kRetryScheduled);  // PENDING, phase COMPENSATE
  Assign("E23", kNodeA);
  AssignedEvent ev = Load("E23");
  ev.phase = "FORWARD";  // a caller with a wrong idea of the phase claims nothing
  EXPECT_EQ(engine_a_.Run(ev, {}), Outcome::kNotClaimed);
  EXPECT_EQ(EventStr("E23", "status"), "ASSIGNED");
  ev.phase = "";  // one that did not poll it gets it read
  ev.retry_count = 0;
  EXPECT_EQ(engine_a_.Run(ev, {}), Outcome::kCompensated);
  EXPECT_EQ(LedgerRows("E23"), 0);
}

TEST_F(SagaEngineTest, PoisonEventFailsAtClaimAfterMaxResets) {
  Produce("E10", json{{"demo", {{"sleep_ms", 100}}}});
  RunUntilExecutingThenStop("E10", "E10#2");
  // Reset five times (its node died each time): max_resets 5 forgives them all.
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1, "
                 "reset_count = 5 WHERE code = 'E10'"),
            1u);
  RunUntilExecutingThenStop("E10", "E10#2");
  EXPECT_EQ(StepStr("E10#2", "status"), "EXECUTING");
  // A sixth: the claim ends it FAILED, running nothing, undoing nothing.
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1, "
                 "reset_count = 6 WHERE code = 'E10'"),
            1u);
  EXPECT_EQ(AssignAndRun("E10", engine_b_, kNodeB), Outcome::kFailed);
  EXPECT_EQ(EventStr("E10", "status"), "FAILED");
  EXPECT_EQ(EventInt("E10", "retry_count"), 0);
  EXPECT_EQ(StepStr("E10#1", "status"), "SUCCESS");  // not undone, not re-run
  EXPECT_EQ(StepStr("E10#2", "status"), "FAILED");   // interrupted; never reached SUCCESS
  EXPECT_NE(StepStr("E10#2", "error_details").find("interrupted"), std::string::npos);
  EXPECT_EQ(StepStr("E10#3", "status"), "PENDING");
  EXPECT_EQ(Ledger("E10#1"), 1);
  EXPECT_EQ(LedgerRows("E10"), 1);
  json result = Result("E10");
  EXPECT_EQ(result["failed_step"], "s2");
  EXPECT_EQ(result["kind"], "resets_exhausted");
  EXPECT_EQ(result["error"].get<std::string>().rfind("reset 6 times (node crashes", 0), 0u) << result.dump();
  EXPECT_EQ(EventStr("E10", "last_error"), result["error"].get<std::string>());
}

TEST_F(SagaEngineTest, TransientFailuresRunOutIntoCompensation) {
  // max_retry 3: the first attempt and 3 retries, then compensation.
  Produce("E11", json{{"demo", {{"fail", {{"s2", 5}}}}}});
  EXPECT_EQ(AssignAndRun("E11", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(AssignAndRun("E11", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(AssignAndRun("E11", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(EventInt("E11", "retry_count"), 3);
  EXPECT_EQ(AssignAndRun("E11", engine_a_), Outcome::kCompensated);
  EXPECT_EQ(Result("E11")["kind"], "retries_exhausted");
  EXPECT_EQ(StepInt("E11#2", "retry_count"), 4);
  EXPECT_EQ(LedgerRows("E11"), 0);
  // The process log numbers the retries against max_retry.
  const std::string log = EventStr("E11", "process_log");
  for (const char* why : {"retry 1 of 3: step 's2' failed", "retry 2 of 3", "retry 3 of 3"}) {
    EXPECT_NE(log.find(why), std::string::npos) << why << " in " << log;
  }
}

TEST_F(SagaEngineTest, MaxRetryZeroIsOneAttemptNeverCompensationBeforeIt) {
  Produce("E40", json::object(), "ONCE");
  EXPECT_EQ(AssignAndRun("E40", engine_a_), Outcome::kSucceeded);
  EXPECT_EQ(Ledger("E40#1"), 1);
  Produce("E41", json{{"demo", {{"fail", {{"s1", 1}}}}}}, "ONCE");
  EXPECT_EQ(AssignAndRun("E41", engine_a_), Outcome::kCompensated);  // its one attempt failed
  EXPECT_EQ(StepInt("E41#1", "retry_count"), 1);
  EXPECT_EQ(Result("E41")["kind"], "retries_exhausted");
}

TEST_F(SagaEngineTest, MaxRetryOneIsTwoAttempts) {
  Produce("E42", json{{"demo", {{"fail", {{"s1", 1}}}}}}, "TWICE");
  EXPECT_EQ(AssignAndRun("E42", engine_a_), Outcome::kRetryScheduled);
  EXPECT_NE(EventStr("E42", "last_error").find("retry 1 of 1: step 's1' failed"), std::string::npos)
      << EventStr("E42", "last_error");
  EXPECT_EQ(AssignAndRun("E42", engine_a_), Outcome::kSucceeded);
  Produce("E43", json{{"demo", {{"fail", {{"s1", 2}}}}}}, "TWICE");
  EXPECT_EQ(AssignAndRun("E43", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(AssignAndRun("E43", engine_a_), Outcome::kCompensated);
  EXPECT_EQ(StepInt("E43#1", "retry_count"), 2);
}

TEST_F(SagaEngineTest, SqlSyntaxErrorIsPermanent) {
  Produce("E44", json::object(), "BAD_SQL");
  EXPECT_EQ(AssignAndRun("E44", engine_a_), Outcome::kCompensated);  // no retry scheduled
  json result = Result("E44");
  EXPECT_EQ(result["kind"], "permanent");
  EXPECT_NE(result["error"].get<std::string>().find("(1064)"), std::string::npos) << result.dump();
  EXPECT_EQ(EventInt("E44", "retry_count"), 0);
  EXPECT_EQ(LedgerRows("E44"), 0);
}

TEST_F(SagaEngineTest, LostConnectionInAStepUsesNoRetry) {
  // max_retry 0: a charged failure would compensate it at once.
  Produce("E45", json::object(), "FLAKY");
  EXPECT_EQ(AssignAndRun("E45", engine_a_), Outcome::kRetryScheduled);
  EXPECT_EQ(EventInt("E45", "retry_count"), 0);
  EXPECT_EQ(EventInt("E45", "reset_count"), 1);
  EXPECT_EQ(StepInt("E45#1", "retry_count"), 0);
  EXPECT_EQ(EventStr("E45", "last_error").rfind("reset (not charged; reset 1 of 5 allowed): step 's1'", 0), 0u)
      << EventStr("E45", "last_error");
  EXPECT_EQ(AssignAndRun("E45", engine_a_), Outcome::kSucceeded);
  EXPECT_EQ(Ledger("E45#1"), 1);
}

TEST_F(SagaEngineTest, StepTimeoutIsTransient) {
  Produce("E12", json{{"demo", {{"sleep_ms", 5000}}}}, "TIMEOUT");
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(AssignAndRun("E12", engine_a_), Outcome::kRetryScheduled);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_NE(EventStr("E12", "last_error").find("timed out after 50 ms"), std::string::npos)
      << EventStr("E12", "last_error");
  EXPECT_EQ(LedgerRows("E12"), 0);
}

// A step's deadline is read on the engine's clock (saga/deadline_timer.h, issue 39
// item 3): with a fake clock, a step that waits on its stop token sees the stop once
// the clock is advanced past its deadline (the topic's 300 s, passed in a moment of
// real time) and not before, and its attempt ends as a transient failure named a
// timeout and charged to the step (a retry, not a reset).
TEST_F(SagaEngineTest, AStepsDeadlinePassesOnTheEnginesClock) {
  static std::atomic<bool> started{false};
  static std::atomic<bool> saw_stop{false};
  struct WaitsForItsStop final : StepHandler {
    StepResult Execute(StepContext& ctx) override {
      started = true;
      SystemClock real;  // a bound in real time, so a broken deadline fails instead of hanging
      const Clock::TimePoint give_up = real.Now() + 20s;
      while (!ctx.stop_token().stop_requested() && real.Now() < give_up) std::this_thread::sleep_for(2ms);
      saw_stop = ctx.stop_token().stop_requested();
      return StepResult::Transient("stopped waiting");
    }
    StepResult Compensate(StepContext&) override { return StepResult::Ok(); }
  };
  FakeClock fake;
  Plans plans = OneStepPlans<WaitsForItsStop>("WAITS", "waits", "waits");  // default deadline: 300 s
  SagaEngine engine(db_.pool(), plans, datasources_, fake, kNodeA);
  ProduceRaw("E46", "WAITS", "{}");
  Assign("E46", kNodeA);
  AssignedEvent ev = Load("E46");
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine.Run(ev, {}); });
  EXPECT_TRUE(testing::Eventually([&] { return started.load(); })) << "the step never ran";
  fake.Advance(299s);
  std::this_thread::sleep_for(100ms);  // the timer looks at the clock every 20 ms
  EXPECT_FALSE(saw_stop.load()) << "stopped before its deadline";
  fake.Advance(1s);
  runner.join();
  EXPECT_TRUE(saw_stop.load());
  EXPECT_EQ(out, Outcome::kRetryScheduled);
  EXPECT_NE(EventStr("E46", "last_error").find("step 'waits' failed: timed out after 300000 ms: stopped waiting"),
            std::string::npos)
      << EventStr("E46", "last_error");
  EXPECT_EQ(StepInt("E46#1", "retry_count"), 1);
  EXPECT_EQ(EventInt("E46", "retry_count"), 1);
  EXPECT_EQ(EventInt("E46", "reset_count"), 0);
}

TEST_F(SagaEngineTest, UnknownTopicFails) {
  LogCapture logs;
  ProduceRaw("E13", "NO_SUCH_TOPIC", "{}");
  EXPECT_EQ(AssignAndRun("E13", engine_a_), Outcome::kFailed);
  EXPECT_EQ(EventStr("E13", "status"), "FAILED");
  EXPECT_EQ(EventStr("E13", "last_error"), "unknown topic 'NO_SUCH_TOPIC'");
  EXPECT_EQ(Result("E13")["error"], "unknown topic 'NO_SUCH_TOPIC'");
  EXPECT_EQ(EventInt("E13", "version"), 4);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE job_code = 'E13'"), 0);
  EXPECT_EQ(logs.Count("EVENT_FAILED event=E13"), 1);
}

TEST_F(SagaEngineTest, PayloadNotJsonFails) {
  ProduceRaw("E14", "DEMO", "{space_id: 7");
  EXPECT_EQ(AssignAndRun("E14", engine_a_), Outcome::kFailed);
  EXPECT_EQ(EventStr("E14", "status"), "FAILED");
  EXPECT_EQ(EventStr("E14", "last_error").rfind("payload is not valid JSON: ", 0), 0u)
      << EventStr("E14", "last_error");
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE job_code = 'E14'"), 0);
  EXPECT_EQ(LedgerRows("E14"), 0);
}

TEST_F(SagaEngineTest, MalformedDemoObjectIsAPermanentStepFailure) {
  Produce("E15", json{{"demo", {{"sleep_ms", "soon"}}}});
  EXPECT_EQ(AssignAndRun("E15", engine_a_), Outcome::kCompensated);
  EXPECT_NE(Result("E15")["error"].get<std::string>().find("demo.sleep_ms"), std::string::npos);
}

TEST_F(SagaEngineTest, ProcessLogKeepsTheLastTwentyTransitions) {
  Produce("E16", json{{"demo", {{"fail", {{"s1", 11}}}}}}, "RETRY_MANY");
  for (int i = 0; i < 11; ++i) ASSERT_EQ(AssignAndRun("E16", engine_a_), Outcome::kRetryScheduled) << i;
  EXPECT_EQ(AssignAndRun("E16", engine_a_), Outcome::kSucceeded);
  json log = ProcessLog("E16");
  ASSERT_EQ(log.size(), 20u);  // 24 transitions happened
  EXPECT_EQ(log.back()["to"], "SUCCESS");
  EXPECT_EQ(log.front()["to"], "RUNNING");
}

TEST_F(SagaEngineTest, ChildStepsRunAfterTheirParentAndCompensateBeforeIt) {
  Produce("E17", json{{"demo", {{"fail", {{"s2", "permanent"}}}}}}, "CHUNKED");
  EXPECT_EQ(AssignAndRun("E17", engine_a_), Outcome::kCompensated);
  int64_t parent_id = StepInt("E17#1", "id");
  EXPECT_EQ(StepInt("E17#1.1", "parent_step_id"), parent_id);
  EXPECT_EQ(StepInt("E17#1.2", "parent_step_id"), parent_id);
  EXPECT_EQ(json::parse(StepStr("E17#1.2", "payload"))["chunk"], 2);
  EXPECT_EQ(json::parse(StepStr("E17#1.2", "output"))["chunk"], 2);
  for (const char* step : {"E17#1", "E17#1.1", "E17#1.2"}) EXPECT_EQ(StepStr(step, "status"), "COMPENSATED");
  EXPECT_LE(StepTimeUs("E17#1", "executed_at"), StepTimeUs("E17#1.1", "executed_at"));
  EXPECT_LE(StepTimeUs("E17#1.1", "executed_at"), StepTimeUs("E17#1.2", "executed_at"));
  EXPECT_GE(StepTimeUs("E17#1.1", "compensated_at"), StepTimeUs("E17#1.2", "compensated_at"));
  EXPECT_GE(StepTimeUs("E17#1", "compensated_at"), StepTimeUs("E17#1.1", "compensated_at"));
  EXPECT_EQ(LedgerRows("E17"), 0);

  Produce("E18", json::object(), "CHUNKED");
  EXPECT_EQ(AssignAndRun("E18", engine_a_), Outcome::kSucceeded);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM distribute_event_step WHERE job_code = 'E18' AND status = 'SUCCESS'"), 4);
  EXPECT_EQ(LedgerRows("E18"), 4);
}

TEST_F(SagaEngineTest, NodeLoadViewCountsInFlightEventsOfLiveNodes) {
  Exec("INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time, metadata) "
       "VALUES ('kbs-sync', ?, 1, UTC_TIMESTAMP(3), '{\"capacity\": 8}'), "
       "('kbs-sync', ?, 1, UTC_TIMESTAMP(3) - INTERVAL 31 SECOND, 'not json')",
       kNodeA, kNodeB);
  Produce("E19", json::object());
  Assign("E19", kNodeA);
  EXPECT_EQ(Int("SELECT in_flight * 10 + capacity FROM v_node_load WHERE node_address = ?", kNodeA), 18);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM v_node_load"), 1);
  EXPECT_EQ(engine_a_.Run(Load("E19"), {}), Outcome::kSucceeded);
  EXPECT_EQ(Int("SELECT in_flight FROM v_node_load WHERE node_address = ?", kNodeA), 0);
}

TEST_F(SagaEngineTest, LostConnectionInACompensationUsesNoRetry) {
  // max_retry 0: a charged compensation failure would end the event FAILED at once.
  Produce("E47", json{{"demo", {{"fail", {{"s2", "permanent"}}}}}}, "FLAKY_UNDO");
  EXPECT_EQ(AssignAndRun("E47", engine_a_), Outcome::kRetryScheduled);  // attempt 1: s1's connection lost
  EXPECT_EQ(EventInt("E47", "reset_count"), 1);
  EXPECT_EQ(AssignAndRun("E47", engine_a_), Outcome::kRetryScheduled);  // attempt 2: s2 fails, s1's undo loses it
  EXPECT_EQ(EventStr("E47", "phase"), "COMPENSATE");
  EXPECT_EQ(StepInt("E47#1", "compensation_retry_count"), 0);
  EXPECT_EQ(EventInt("E47", "reset_count"), 2);
  EXPECT_EQ(EventStr("E47", "last_error").rfind("reset (not charged; reset 2 of 5 allowed): compensation of 's1'", 0), 0u)
      << EventStr("E47", "last_error");
  EXPECT_EQ(AssignAndRun("E47", engine_a_), Outcome::kCompensated);
  EXPECT_EQ(LedgerRows("E47"), 0);
}

TEST_F(SagaEngineTest, AbandonedRunIsHandedBackAtItsOwnVersionOnly) {
  // A run abandoned at version v (a shutdown mid-step): its hand-back resets the event
  // at v, never a later claim of it, even by the same node.
  Produce("E46", json{{"demo", {{"sleep_ms", 100}}}});
  Assign("E46", kNodeA);
  AssignedEvent ev = Load("E46");
  std::stop_source stop;
  int last_version = -1;
  Outcome out = Outcome::kSucceeded;
  std::thread runner([&] { out = engine_a_.Run(ev, stop.get_token(), &last_version); });
  ASSERT_TRUE(Eventually("SELECT COUNT(*) FROM distribute_event_step WHERE code = 'E46#2' AND status = 'EXECUTING'"));
  stop.request_stop();
  runner.join();
  ASSERT_EQ(out, Outcome::kAbandoned);
  const int64_t v = EventInt("E46", "version");
  EXPECT_EQ(last_version, v);  // the version the run held
  const events::NodeKey node{EventStr("E46", "service"), kNodeA};
  auto read = [&](int64_t version) {
    return db_.pool().Run("read", [&](storage::Connection& c) {
      return events::ReadAbandoned(c, Int("SELECT id FROM distribute_event WHERE code = 'E46'"), version, node);
    });
  };
  EXPECT_TRUE(read(v).has_value());
  // Meanwhile the sweeper reset it and node A claimed it again (a new run).
  ResetAsSweeper("E46");
  Assign("E46", kNodeA);
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'RUNNING', version = version + 1, attempt = attempt + 1 "
                 "WHERE code = 'E46'"),
            1u);
  EXPECT_EQ(EventInt("E46", "version"), v + 3);
  EXPECT_FALSE(read(v).has_value());  // the old run's hand-back finds nothing to reset
  EXPECT_TRUE(read(v + 3).has_value());
  // Settle it for the saga-order check: the new owner's reset, then a full run.
  ResetAsSweeper("E46");
  EXPECT_EQ(AssignAndRun("E46", engine_b_, kNodeB), Outcome::kSucceeded);
  EXPECT_EQ(Ledger("E46#2"), 1);
}

// ---- the operator's retry of FAILED events (api::EventStore::Retry) -----------------

class OperatorRetryTest : public SagaEngineTest {
 protected:
  OperatorRetryTest() : settings_(StoreSettings()), store_(db_.pool(), app::StoreOptionsFrom(settings_)) {}
  static Settings StoreSettings() {
    Settings s;
    s.topics = EngineTopics();
    return s;
  }
  std::string RunToRest(const std::string& code) {
    for (int i = 0; i < 12; ++i) {
      const std::string status = EventStr(code, "status");
      if (status == "FAILED" || status == "COMPENSATED" || status == "SUCCESS") return status;
      AssignAndRun(code, engine_a_);
    }
    return EventStr(code, "status");
  }
  // The highest applications of any ledger row of the event (0: none).
  int64_t MaxApplications(const std::string& code) {
    return Int("SELECT COALESCE(MAX(applications), 0) FROM demo_ledger WHERE event_code = ?", code);
  }
  // Fixes the cause: the demo failures are gone from the payload.
  void Fix(const std::string& code) { Exec("UPDATE distribute_event SET payload = '{}' WHERE code = ?", code); }
  // A FAILED event whose compensation did not finish: retried, it finishes the
  // compensation (no step runs forward again), then retried again it runs forward
  // from a clean state: every demo step applied exactly once.
  void ExpectRetriesApplyOnce(const std::string& code) {
    SCOPED_TRACE(code);
    ASSERT_EQ(EventStr(code, "status"), "FAILED");
    EXPECT_THROW(store_.Retry(code, api::RetryFrom::kStart), ConflictError);  // names the applied steps
    Fix(code);
    api::EventRow e = store_.Retry(code, api::RetryFrom::kFailedStep);
    EXPECT_EQ(e.status, "PENDING");
    EXPECT_EQ(e.phase, "COMPENSATE");
    EXPECT_EQ(RunToRest(code), "COMPENSATED");
    EXPECT_EQ(LedgerRows(code), 0);
    EXPECT_EQ(MaxApplications(code), 0);
    store_.Retry(code, api::RetryFrom::kFailedStep);
    EXPECT_EQ(RunToRest(code), "SUCCESS");
    for (int i = 1; i <= 3; ++i) EXPECT_EQ(Ledger(code + "#" + std::to_string(i)), 1) << i;
    EXPECT_THROW(store_.Retry(code, api::RetryFrom::kFailedStep), ConflictError);  // SUCCESS
  }
  Settings settings_;  // the store keeps a reference
  api::EventStore store_;
};

TEST_F(OperatorRetryTest, FailedCompensationOfTheFirstStepIsFinishedNotRerun) {
  // s2 fails for good; s1's compensation fails every time: FAILED with s1 COMPENSATING.
  Produce("F1", json{{"demo", {{"fail", {{"s2", "permanent"}}}, {"fail_compensation", {{"s1", "always"}}}}}});
  ASSERT_EQ(RunToRest("F1"), "FAILED");
  EXPECT_EQ(StepStr("F1#1", "status"), "COMPENSATING");
  EXPECT_EQ(Ledger("F1#1"), 1);
  ExpectRetriesApplyOnce("F1");
}

TEST_F(OperatorRetryTest, FailedCompensationWithAStepNotYetUndoneIsFinished) {
  // s3 fails for good; s2's compensation fails every time: s2 COMPENSATING, s1 still SUCCESS.
  Produce("F2", json{{"demo", {{"fail", {{"s3", "permanent"}}}, {"fail_compensation", {{"s2", "always"}}}}}});
  ASSERT_EQ(RunToRest("F2"), "FAILED");
  EXPECT_EQ(StepStr("F2#1", "status"), "SUCCESS");
  EXPECT_EQ(StepStr("F2#2", "status"), "COMPENSATING");
  ExpectRetriesApplyOnce("F2");
}

TEST_F(OperatorRetryTest, FailedByResetsGoesOnFromTheFailedStep) {
  // Its runs were reset more than max_resets times: FAILED forward, s1 done, s2 interrupted.
  Produce("F3", json{{"demo", {{"sleep_ms", 100}}}});
  RunUntilExecutingThenStop("F3", "F3#2");
  ASSERT_EQ(Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1, "
                 "reset_count = 6 WHERE code = 'F3'"),
            1u);
  ASSERT_EQ(AssignAndRun("F3", engine_a_), Outcome::kFailed);
  EXPECT_THROW(store_.Retry("F3", api::RetryFrom::kStart), ConflictError);  // s1 is applied
  Fix("F3");
  api::EventRow e = store_.Retry("F3", api::RetryFrom::kFailedStep);
  EXPECT_EQ(e.phase, "FORWARD");
  EXPECT_EQ(e.reset_count, 0);
  EXPECT_EQ(RunToRest("F3"), "SUCCESS");
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Ledger("F3#" + std::to_string(i)), 1) << i;
}

TEST_F(OperatorRetryTest, FailedAtClaimRunsFromTheStart) {
  // Rejected at its claim (payload not JSON): FAILED, no steps ran.
  ProduceRaw("F4", "DEMO", "{not json");
  ASSERT_EQ(RunToRest("F4"), "FAILED");
  Fix("F4");
  store_.Retry("F4", api::RetryFrom::kStart);
  EXPECT_EQ(RunToRest("F4"), "SUCCESS");
  for (int i = 1; i <= 3; ++i) EXPECT_EQ(Ledger("F4#" + std::to_string(i)), 1) << i;
}

}  // namespace
}  // namespace dsync::saga
