// Fair dispatch and concurrency limits of the dispatch cycle (issue 37,
// dispatcher/dispatch_cycle.h, events/assign.h) against a real MariaDB, with nodes
// simulated by registry rows.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "app/options.h"
#include "control/topic_pause.h"
#include "core/clock.h"
#include "dispatcher/dispatch_cycle.h"
#include "events/assign.h"
#include "tests/integration/dispatcher_fixtures.h"
#include "tests/support/fake_clock.h"

namespace dsync::dispatcher {
namespace {

using namespace fixtures;

DispatchCycle FairCycleOf(TestSchema& db, Clock& clock, const Settings& s) {
  CycleOptions o;
  o.service = s.service;
  o.offline_timeout = s.registry.offline_timeout;
  return DispatchCycle(db.pool(), clock, app::PlannerConfigFrom(s), o);
}

// `count` PENDING events of `tenant` in one statement; codes prefix-1..N.
void AddTenantEvents(TestSchema& db, const std::string& tenant, int count, const std::string& prefix,
                     const std::string& topic = "T", const std::string& payload = "{}") {
  db.pool().Run("add tenant events", [&](storage::Connection& c) {
    c.Execute("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) "
              "SELECT ?, CONCAT(?, '-', seq), CONCAT(?, '-', seq), ?, ? FROM seq_1_to_" + std::to_string(count),
              tenant, prefix, prefix, topic, payload);
  });
}

int64_t AssignedOf(TestSchema& db, const std::string& tenant) {
  return Count(db, "tenant_id = '" + tenant + "' AND status = 'ASSIGNED'");
}

class DispatcherFairTest : public ::testing::Test {
 protected:
  TestSchema db;
  SystemClock clock;
};

TEST_F(DispatcherFairTest, HeadsAreOnePerPriorityAndTenantReadByALooseIndexScan) {
  AddTenantEvents(db, "A", 500, "a");
  AddTenantEvents(db, "B", 3, "b");
  AddEvent(db, {.code = "c-1", .tenant = "C", .priority = 5});
  AddEvent(db, {.code = "d-1", .tenant = "D", .status = "SUCCESS"});          // terminal: no head
  AddEvent(db, {.code = "x-1", .tenant = "X", .service = "other-service"});  // another service
  auto heads = db.pool().Run("heads", [&](storage::Connection& c) { return events::ReadDueHeads(c, kService, 100); });
  ASSERT_EQ(heads.size(), 3u);
  EXPECT_EQ(heads[0].tenant_id, "A");
  EXPECT_EQ(heads[1].tenant_id, "B");
  EXPECT_EQ(heads[2].tenant_id, "C");
  EXPECT_EQ(heads[2].priority, 5);
  // Bounded by the pairs, not the events: the plan is a loose index scan of idx_fair,
  // chosen by cost, so with statistics that know the pairs are few (InnoDB recomputes
  // them once a tenth of the table changed; here at once).
  std::string extra = db.pool().Run("explain", [&](storage::Connection& c) {
    c.Query("ANALYZE TABLE distribute_event");
    auto rs = c.Query(std::string("EXPLAIN ") + events::DueHeadsSql(), kService, 100);
    std::string out;
    while (rs->next()) out += rs->getString(10);  // Extra (MariaDB's EXPLAIN)
    return out;
  });
  EXPECT_NE(extra.find("Using index for group-by"), std::string::npos) << extra;
}

TEST_F(DispatcherFairTest, WindowsReadEachTenantsOwnEventsWithTheUsualFilters) {
  AddTenantEvents(db, "A", 50, "a");
  AddEvent(db, {.code = "b-future", .tenant = "B", .next_run_in_s = 3600});  // not due
  AddEvent(db, {.code = "b-1", .tenant = "B", .data_id = "same"});
  AddEvent(db, {.code = "b-2", .tenant = "B", .data_id = "same"});          // behind b-1 (ordered)
  AddEvent(db, {.code = "b-3", .topic = "OTHER", .tenant = "B"});           // excluded topic
  AddEvent(db, {.code = "b-4", .tenant = "B"});
  const events::DueFilter f{kService, 0, 0, true, "", "OTHER", "", 0};
  auto got = db.pool().Run("windows", [&](storage::Connection& c) {
    return events::ReadDueWindows(c, f, {{0, "A", 0, 3}, {0, "B", 0, 10}});
  });
  std::vector<std::string> codes;
  for (const auto& e : got) codes.push_back(e.data_id);
  EXPECT_EQ(codes, (std::vector<std::string>{"a-1", "a-2", "a-3", "same", "b-4"}));
  // After a cursor; a window of 0 (padding) reads nothing.
  auto after = db.pool().Run("windows", [&](storage::Connection& c) {
    return events::ReadDueWindows(c, f, {{0, "A", got[1].id, 2}, {0, "B", 0, 0}, {0, "A", 0, 0}});
  });
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0].data_id, "a-3");
  EXPECT_EQ(after[1].data_id, "a-4");
}

TEST_F(DispatcherFairTest, ALateTenantSharesTheSlotsInsteadOfWaitingBehindABacklog) {
  AddNode(db, {.address = "a:1", .capacity = 10});
  AddNode(db, {.address = "b:1", .capacity = 10});
  AddTenantEvents(db, "A", 2000, "a");
  AddTenantEvents(db, "B", 10, "b");
  Settings s = TestSettings();
  ASSERT_TRUE(s.fairness.enabled);  // the default
  DispatchCycle cycle = FairCycleOf(db, clock, s);
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 20);
  EXPECT_EQ(AssignedOf(db, "B"), 10);
  EXPECT_EQ(AssignedOf(db, "A"), 10);
  EXPECT_LE(r.due_read, 40);  // windows bounded by the free slots, not A's 2,000
}

void FinishAssigned(TestSchema& db) {
  db.pool().Run("finish", [&](storage::Connection& c) {
    c.Execute("UPDATE distribute_event SET status = 'SUCCESS' WHERE status = 'ASSIGNED'");
  });
}

// One tenant per priority reads as an unfair cycle (one page, no windows); a second
// tenant appearing behind the backlog is seen with the next cycle's first page and
// gets its share from the cycle after, and its deficit carries on as before.
TEST_F(DispatcherFairTest, ASecondTenantAppearingMidBacklogGetsItsShareFromTheCycleAfter) {
  AddNode(db, {.address = "a:1", .capacity = 10});
  AddTenantEvents(db, "A", 2000, "a");
  AddEvent(db, {.code = "a-urgent", .tenant = "A", .priority = -1});  // another priority, still one tenant
  FakeClock fake;  // no refresh of every pair (every 2 s) during the test: only the new rows'
  DispatchCycle cycle = FairCycleOf(db, fake, TestSettings());
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_FALSE(r.shared);
  EXPECT_EQ(r.pages, 1);
  EXPECT_EQ(r.assigned, 10);
  EXPECT_EQ(Count(db, "code = 'a-urgent' AND status = 'ASSIGNED'"), 1);  // priorities first, as unfair
  FinishAssigned(db);
  r = cycle.RunOnce(std::nullopt);
  EXPECT_FALSE(r.shared);
  FinishAssigned(db);

  // B produces behind A's 1,980 due events.
  AddTenantEvents(db, "B", 50, "b");
  r = cycle.RunOnce(std::nullopt);  // its first page reads B's pair along
  EXPECT_FALSE(r.shared);
  EXPECT_EQ(r.pages, 1);
  EXPECT_EQ(AssignedOf(db, "A"), 10);
  EXPECT_EQ(AssignedOf(db, "B"), 0);
  FinishAssigned(db);
  // Each gets half of every cycle's 10 slots to within one (DRR's bound: the round's
  // position carries over, so a cycle may end one event into a tenant's turn).
  int64_t b_total = 0;
  for (int i = 0; i < 4; ++i) {
    r = cycle.RunOnce(std::nullopt);
    EXPECT_TRUE(r.shared);
    EXPECT_EQ(r.assigned, 10);
    const int64_t b = AssignedOf(db, "B");
    EXPECT_GE(b, 4) << "cycle " << i;
    EXPECT_LE(b, 6) << "cycle " << i;
    b_total += b;
    FinishAssigned(db);
  }
  EXPECT_GE(b_total, 19);
  EXPECT_LE(b_total, 21);
}

// A pause (V022) is reread at most every control::kPauseRefresh: in force for every cycle
// that starts that long after its commit (api::ControlStore waits that out before it
// answers), and the same for a resume.
TEST_F(DispatcherFairTest, PausesAreRereadEveryPauseRefresh) {
  AddNode(db, {.address = "a:1", .capacity = 1});
  AddTenantEvents(db, "A", 20, "a");
  FakeClock fake;
  DispatchCycle cycle = FairCycleOf(db, fake, TestSettings());
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);
  FinishAssigned(db);
  db.pool().Run("pause", [&](storage::Connection& c) { control::PauseTopic(c, kService, "T", "test", ""); });
  fake.Advance(control::kPauseRefresh - Millis(1));
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);  // not reread yet
  FinishAssigned(db);
  fake.Advance(Millis(1));
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 0);  // reread: paused
  fake.Advance(control::kPauseSettle);
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 0);
  db.pool().Run("resume", [&](storage::Connection& c) { control::ResumeTopic(c, kService, "T"); });
  fake.Advance(control::kPauseSettle);
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);
}

// V029: the fair reads go by fair_pending, which every framework statement writes with
// the status. A status changed by hand without it is set right by the leader every
// kFairRepairInterval: events made PENDING again are read by the windows from then on,
// and a pair whose only event left PENDING is no longer among the heads.
TEST_F(DispatcherFairTest, AStatusChangedByHandWithoutFairPendingIsRepaired) {
  AddNode(db, {.address = "a:1", .capacity = 10});
  AddTenantEvents(db, "A", 20, "a");
  AddTenantEvents(db, "B", 20, "b");
  AddEvent(db, {.code = "c-1", .tenant = "C", .next_run_in_s = 3600});  // a pair, not due
  FakeClock fake;
  DispatchCycle cycle = FairCycleOf(db, fake, TestSettings());
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_TRUE(r.shared);
  EXPECT_EQ(r.assigned, 10);
  EXPECT_EQ(Count(db, "status = 'ASSIGNED' AND fair_pending = 0"), 10);  // written by the assignment
  // By hand: the assigned events back to PENDING, C's only event to SUCCESS.
  db.pool().Run("by hand", [&](storage::Connection& c) {
    c.Execute("UPDATE distribute_event SET status = 'PENDING', node_address = NULL WHERE status = 'ASSIGNED'");
    c.Execute("UPDATE distribute_event SET status = 'SUCCESS' WHERE code = 'c-1'");
  });
  const std::string stranded = "status = 'PENDING' AND fair_pending = 0";
  const std::string stale = "status <> 'PENDING' AND fair_pending = 1";
  EXPECT_EQ(Count(db, stranded), 10);
  EXPECT_EQ(Count(db, stale), 1);
  fake.Advance(kFairRepairInterval);
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(Count(db, stranded), 0);
  EXPECT_EQ(Count(db, stale), 0);
  EXPECT_EQ(r.assigned, 10);
  // The repaired events are the oldest of their tenants: each window read them first.
  EXPECT_EQ(Count(db, "code IN ('a-1', 'b-1') AND status = 'ASSIGNED'"), 2);
  auto heads = db.pool().Run("heads", [&](storage::Connection& c) { return events::ReadDueHeads(c, kService, 100); });
  ASSERT_EQ(heads.size(), 2u);
  EXPECT_EQ(heads[0].tenant_id, "A");
  EXPECT_EQ(heads[1].tenant_id, "B");
}

TEST_F(DispatcherFairTest, WithFairnessOffTheBacklogGoesFirst) {
  AddNode(db, {.address = "a:1", .capacity = 20});
  AddTenantEvents(db, "A", 2000, "a");
  AddTenantEvents(db, "B", 10, "b");
  Settings s = TestSettings();
  s.fairness.enabled = false;
  DispatchCycle cycle = FairCycleOf(db, clock, s);
  cycle.RunOnce(std::nullopt);
  EXPECT_EQ(AssignedOf(db, "A"), 20);
  EXPECT_EQ(AssignedOf(db, "B"), 0);
}

TEST_F(DispatcherFairTest, WeightsShareAcrossCycles) {
  AddNode(db, {.address = "a:1", .capacity = 4});
  AddTenantEvents(db, "A", 200, "a");
  AddTenantEvents(db, "B", 200, "b");
  Settings s = TestSettings();
  s.fairness.weights["A"] = 3;
  DispatchCycle cycle = FairCycleOf(db, clock, s);
  for (int i = 0; i < 10; ++i) {
    cycle.RunOnce(std::nullopt);
    // Everything assigned finishes: the node has 4 free slots each cycle.
    db.pool().Run("finish", [&](storage::Connection& c) {
      c.Execute("UPDATE distribute_event SET status = 'SUCCESS' WHERE status = 'ASSIGNED'");
    });
  }
  EXPECT_EQ(Count(db, "tenant_id = 'A' AND status = 'SUCCESS'"), 30);
  EXPECT_EQ(Count(db, "tenant_id = 'B' AND status = 'SUCCESS'"), 10);
}

Settings LimitSettings() {
  Settings s = TestSettings();
  TopicSettings sync;
  sync.ordered = false;
  StepSpec step;
  step.name = "items";
  step.type = "table_sync";
  step.params = {{"source", "env_a"}, {"target", "env_b"}, {"table", "item"}};
  sync.steps.push_back(step);
  s.topics["SYNC"] = sync;
  s.datasources = {{"env_a", "mysql://u:p@h:1/a"}, {"env_b", "mysql://u:p@h:1/b"}};
  s.datasource_limits["env_b"] = 2;
  TopicSettings keyed;
  keyed.ordered = false;
  keyed.concurrency_key = "payload.space_id";
  keyed.concurrency_limit = 2;
  StepSpec demo;
  demo.name = "k";
  demo.type = "demo";
  keyed.steps.push_back(demo);
  s.topics["KEYED"] = keyed;
  return s;
}

TEST_F(DispatcherFairTest, ADatasourceLimitCountsInFlightEventsOfDeadNodesToo) {
  AddNode(db, {.address = "a:1", .capacity = 16});
  AddNode(db, {.address = "b:1", .capacity = 16});
  // Still RUNNING on a node that died (no registry row): its slot is held until the
  // event leaves RUNNING.
  AddEvent(db, {.code = "held", .topic = "SYNC", .status = "RUNNING", .node = "dead:1", .version = 3});
  AddTenantEvents(db, "A", 5, "a", "SYNC");
  AddTenantEvents(db, "B", 5, "b", "SYNC");
  AddTenantEvents(db, "C", 5, "c", "T");  // not limited
  for (bool fair : {true, false}) {
    SCOPED_TRACE(fair ? "fair" : "unfair");
    Settings s = LimitSettings();
    s.fairness.enabled = fair;
    DispatchCycle cycle = FairCycleOf(db, clock, s);
    cycle.RunOnce(std::nullopt);
    EXPECT_EQ(Count(db, "topic = 'SYNC' AND status IN ('ASSIGNED', 'RUNNING')"), 2);
    EXPECT_EQ(Count(db, "topic = 'T' AND status = 'ASSIGNED'"), 5);
    // Nothing frees, nothing more: a second cycle adds none.
    cycle.RunOnce(std::nullopt);
    EXPECT_EQ(Count(db, "topic = 'SYNC' AND status IN ('ASSIGNED', 'RUNNING')"), 2);
    // The held event and the two assigned leave their in-flight statuses (any path: here
    // FAILED): their slots free, and the next cycle fills them.
    db.pool().Run("release", [&](storage::Connection& c) {
      c.Execute("UPDATE distribute_event SET status = 'FAILED' WHERE code = 'held' OR (topic = 'SYNC' AND status = 'ASSIGNED')");
    });
    cycle.RunOnce(std::nullopt);
    EXPECT_EQ(Count(db, "topic = 'SYNC' AND status = 'ASSIGNED'"), 2);
    // Back to the start for the other mode.
    db.pool().Run("reset", [&](storage::Connection& c) {
      c.Execute("UPDATE distribute_event SET status = 'PENDING', node_address = NULL WHERE code <> 'held'");
      c.Execute("UPDATE distribute_event SET status = 'RUNNING', node_address = 'dead:1' WHERE code = 'held'");
    });
  }
}

TEST_F(DispatcherFairTest, AKeyLimitReadsTheKeyFromThePayload) {
  AddNode(db, {.address = "a:1", .capacity = 50});
  AddTenantEvents(db, "A", 5, "s1", "KEYED", R"({"space_id": "s1"})");
  AddTenantEvents(db, "A", 5, "s2", "KEYED", R"({"space_id": "s2"})");
  AddTenantEvents(db, "A", 3, "none", "KEYED", R"({"other": 1})");
  AddTenantEvents(db, "A", 2, "bad", "KEYED", "not json");
  db.pool().Run("one in flight", [&](storage::Connection& c) {
    c.Execute("UPDATE distribute_event SET status = 'RUNNING', node_address = 'dead:1' WHERE code = 's1-1'");
  });
  DispatchCycle cycle = FairCycleOf(db, clock, LimitSettings());
  cycle.RunOnce(std::nullopt);
  EXPECT_EQ(Count(db, "code LIKE 's1-%' AND status = 'ASSIGNED'"), 1);
  EXPECT_EQ(Count(db, "code LIKE 's2-%' AND status = 'ASSIGNED'"), 2);
  EXPECT_EQ(Count(db, "code LIKE 'none-%' AND status = 'ASSIGNED'"), 3);
  EXPECT_EQ(Count(db, "code LIKE 'bad-%' AND status = 'ASSIGNED'"), 2);
  auto counts = db.pool().Run("keys", [&](storage::Connection& c) {
    return events::CountInFlightByKey(c, kService, "KEYED", "payload.space_id");
  });
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{{"s1", 2}, {"s2", 2}}));
}

}  // namespace
}  // namespace dsync::dispatcher
