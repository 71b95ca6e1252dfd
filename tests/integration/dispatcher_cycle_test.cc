// The dispatch cycle (dispatcher/dispatch_cycle.h) against a real MariaDB, with nodes
// simulated by registry rows.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "app/options.h"
#include "core/clock.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/lease_lock.h"
#include "tests/integration/dispatcher_fixtures.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

DispatchCycle MakeCycle(TestSchema& db, Clock& clock, const Settings& s = TestSettings()) {
  CycleOptions o;
  o.service = s.service;
  o.offline_timeout = s.registry.offline_timeout;
  return DispatchCycle(db.pool(), clock, app::PlannerConfigFrom(s), o);
}

// The codes of the events in `status`, in code order.
std::vector<std::string> CodesIn(TestSchema& db, const std::string& status) {
  std::vector<std::string> out;
  db.pool().Run("codes", [&](storage::Connection& c) {
    out.clear();
    auto rs = c.Query("SELECT code FROM distribute_event WHERE status = ? ORDER BY code", status);
    while (rs->next()) out.push_back(rs->getString(1));
  });
  return out;
}

// A fresh schema, and the system clock the cycles run on.
class DispatcherCycleTest : public ::testing::Test {
 protected:
  TestSchema db;
  SystemClock clock;
};

std::map<std::string, int64_t> AssignedPerNode(TestSchema& db) {
  std::map<std::string, int64_t> out;
  db.pool().Run("per node", [&](storage::Connection& c) {
    out.clear();
    auto rs = c.Query("SELECT node_address, COUNT(*) FROM distribute_event WHERE status = 'ASSIGNED' "
                      "GROUP BY node_address");
    while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
  });
  return out;
}

TEST_F(DispatcherCycleTest, LeastLoadedLiveNodesGetTheWorkWithinCapacity) {
  AddNode(db, {.address = "a:1", .capacity = 4});
  AddNode(db, {.address = "b:1", .capacity = 4});
  AddNode(db, {.address = "draining:1", .capacity = 100, .status = 2});
  AddNode(db, {.address = "stale:1", .capacity = 100, .age_ms = 60000});
  AddNode(db, {.address = "offline:1", .capacity = 100, .status = 0});
  AddNode(db, {.address = "other-service:1", .capacity = 100, .service = "other"});
  // a:1 already runs two events (the table is the truth, not its metadata).
  AddEvent(db, {.code = "busy-1", .status = "RUNNING", .node = "a:1", .version = 3});
  AddEvent(db, {.code = "busy-2", .status = "ASSIGNED", .node = "a:1", .version = 2});
  AddPendingEvents(db, 10, "T", "e");

  DispatchCycle cycle = MakeCycle(db, clock);
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.live_nodes, 3);  // a, b, draining
  EXPECT_EQ(r.free_slots, 6);
  EXPECT_EQ(r.assigned, 6);
  EXPECT_EQ(r.lost_races, 0);
  EXPECT_TRUE(r.more_due);
  auto per = AssignedPerNode(db);
  EXPECT_EQ(per["a:1"], 3);  // 1 existing + 2 new
  EXPECT_EQ(per["b:1"], 4);
  EXPECT_EQ(per.size(), 2u);
  EXPECT_EQ(Count(db, "code LIKE 'e-%' AND status = 'ASSIGNED' AND version = 2 AND assigned_time IS NOT NULL"), 6);
  EXPECT_EQ(Count(db, "code LIKE 'e-%' AND status = 'PENDING' AND version = 1 AND node_address IS NULL"), 4);
  // In id order: the first six.
  EXPECT_EQ(Count(db, "code IN ('e-0','e-1','e-2','e-3','e-4','e-5') AND status = 'ASSIGNED'"), 6);

  // Everyone is full now: the next cycle reads no events and writes nothing.
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.free_slots, 0);
  EXPECT_EQ(r.pages, 0);
  EXPECT_EQ(r.assigned, 0);

  // A node finishing work frees its slot.
  db.Exec("UPDATE distribute_event SET status = 'SUCCESS', version = version + 1 WHERE code = 'busy-1'");
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 1);
  EXPECT_EQ(AssignedPerNode(db)["a:1"], 4);
  EXPECT_EQ(cycle.stats().assigned, 7u);
  EXPECT_EQ(cycle.stats().cycles, 3u);
}

// Two services in one database, each with a node at the same address: a service's
// cycle assigns only its own events, to its own nodes, counts only its own events in
// flight there, and its ordering rule never waits on another service's events.
TEST_F(DispatcherCycleTest, AServiceAssignsOnlyItsOwnEventsToItsOwnNodes) {
  const std::string other = "billing-sync";
  AddNode(db, {.address = "shared:1", .capacity = 3});
  AddNode(db, {.address = "shared:1", .capacity = 100, .service = other});
  AddNode(db, {.address = "theirs:1", .capacity = 100, .service = other});
  // billing-sync's events: in flight at shared:1 (not kbs-sync's load there), PENDING
  // (never kbs-sync's to assign), and one on the entity kbs-sync's ordered event is on.
  for (int i = 0; i < 5; ++i) {
    AddEvent(db, {.code = "theirs-run-" + std::to_string(i), .status = "RUNNING", .node = "shared:1", .version = 3,
                  .service = other});
  }
  for (int i = 0; i < 4; ++i) AddEvent(db, {.code = "theirs-" + std::to_string(i), .service = other});
  AddEvent(db, {.code = "theirs-entity", .data_id = "space-1", .service = other});
  int64_t mine_entity = AddEvent(db, {.code = "mine-entity", .data_id = "space-1"});
  AddPendingEvents(db, 4, "T", "mine");

  DispatchCycle kbs = MakeCycle(db, clock);
  CycleResult r = kbs.RunOnce(std::nullopt);
  EXPECT_EQ(r.live_nodes, 1);   // shared:1 of kbs-sync
  EXPECT_EQ(r.free_slots, 3);   // billing-sync's 5 running there are not its load
  EXPECT_EQ(r.assigned, 3);
  EXPECT_EQ(StatusOf(db, mine_entity), "ASSIGNED");  // not held back by billing-sync's earlier event
  EXPECT_EQ(Count(db, "service = 'billing-sync' AND status = 'PENDING'"), 5);
  EXPECT_EQ(Count(db, "service = 'kbs-sync' AND status = 'ASSIGNED' AND node_address = 'shared:1'"), 3);

  Settings billing = TestSettings();
  billing.service = other;
  DispatchCycle theirs = MakeCycle(db, clock, billing);
  r = theirs.RunOnce(std::nullopt);
  EXPECT_EQ(r.live_nodes, 2);
  EXPECT_EQ(r.assigned, 5);
  EXPECT_EQ(Count(db, "service = 'billing-sync' AND status = 'PENDING'"), 0);
  EXPECT_EQ(Count(db, "service = 'kbs-sync' AND status = 'PENDING'"), 2);  // kbs-sync's, untouched
  EXPECT_EQ(Count(db, "service = 'kbs-sync' AND status = 'ASSIGNED'"), 3);
}

TEST_F(DispatcherCycleTest, BacklogIsReportedWhileNodesAreFullAndClearedWhenDrained) {
  AddNode(db, {.address = "a:1", .capacity = 2});
  AddPendingEvents(db, 5, "T", "e");
  DispatchCycle cycle = MakeCycle(db, clock);
  DispatcherSettings pace;  // poll 200, idle 1000, busy 2

  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 2);
  EXPECT_TRUE(r.more_due);
  EXPECT_TRUE(r.backlog);
  EXPECT_FALSE(r.room_left);
  EXPECT_EQ(NextDispatchDelay(r, 0ms, pace), 2ms);  // the node is full: busy pacing, not at once

  // Full: nothing read, but the events left last time still wait: busy pacing.
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.pages, 0);
  EXPECT_EQ(r.assigned, 0);
  EXPECT_TRUE(r.backlog);
  EXPECT_EQ(NextDispatchDelay(r, 0ms, pace), 2ms);

  // The node finishes both; the rest (3) fit after one more round (2 + 1).
  db.Exec("UPDATE distribute_event SET status = 'SUCCESS', version = version + 1 WHERE status = 'ASSIGNED'");
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 2);
  db.Exec("UPDATE distribute_event SET status = 'SUCCESS', version = version + 1 WHERE status = 'ASSIGNED'");
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 1);
  EXPECT_FALSE(r.more_due);
  EXPECT_FALSE(r.backlog);
  EXPECT_EQ(NextDispatchDelay(r, 0ms, pace), 2ms);  // assigned something

  // Nothing due at all: idle backoff, even once the node is full again; but for the
  // first cycles after one that assigned (busy), busy pacing: a plain-SQL producer's
  // next events are likely any moment and nothing can wake the dispatcher for them.
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 0);
  EXPECT_FALSE(r.backlog);
  EXPECT_EQ(NextDispatchDelay(r, 200ms, pace), 400ms);
  EXPECT_EQ(NextDispatchDelay(r, 200ms, pace, /*busy=*/true), 2ms);
  AddEvent(db, {.code = "fill", .status = "ASSIGNED", .node = "a:1", .version = 2});
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.free_slots, 0);
  EXPECT_FALSE(r.backlog);
  EXPECT_EQ(NextDispatchDelay(r, 400ms, pace), 200ms);
}

TEST_F(DispatcherCycleTest, PrefetchFromMetadataLetsNodesHoldMoreThanCapacity) {
  AddNode(db, {.address = "a:1", .capacity = 2, .prefetch = 3});
  AddNode(db, {.address = "b:1", .capacity = 4});  // no prefetch published: none
  AddPendingEvents(db, 20, "T", "e");
  DispatchCycle cycle = MakeCycle(db, clock);
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.free_slots, 9);
  EXPECT_EQ(r.assigned, 9);
  auto per = AssignedPerNode(db);
  EXPECT_EQ(per["a:1"], 5);
  EXPECT_EQ(per["b:1"], 4);
  // Held events count as in flight: nothing more until one finishes.
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.free_slots, 0);
  EXPECT_EQ(r.assigned, 0);
}

TEST_F(DispatcherCycleTest, CapacitySharesFollowCapacityOneTwoFour) {
  AddNode(db, {.address = "n1:1", .capacity = 100});
  AddNode(db, {.address = "n2:1", .capacity = 200});
  AddNode(db, {.address = "n4:1", .capacity = 400});
  AddPendingEvents(db, 350, "T", "e");
  DispatchCycle cycle = MakeCycle(db, clock);
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 350);
  auto per = AssignedPerNode(db);
  EXPECT_EQ(per["n1:1"], 50);
  EXPECT_EQ(per["n2:1"], 100);
  EXPECT_EQ(per["n4:1"], 200);
}

TEST_F(DispatcherCycleTest, TopicsAreRespectedAndUnservedTopicsDoNotBlockTheQueue) {
  Settings s = TestSettings();
  s.dispatcher.batch_size = 5;
  AddNode(db, {.address = "a:1", .capacity = 100, .topics = {"A"}});
  AddNode(db, {.address = "b:1", .capacity = 100, .topics = {"B", "C"}});
  AddPendingEvents(db, 50, "NOBODY", "x", /*priority=*/-1);  // first in line, served by none
  AddPendingEvents(db, 3, "A", "a");
  AddPendingEvents(db, 2, "B", "b");
  DispatchCycle cycle = MakeCycle(db, clock, s);
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 5);
  EXPECT_EQ(r.due_read, 5);  // the 50 unserved events were never read
  EXPECT_EQ(Count(db, "topic = 'A' AND status = 'ASSIGNED' AND node_address = 'a:1'"), 3);
  EXPECT_EQ(Count(db, "topic = 'B' AND status = 'ASSIGNED' AND node_address = 'b:1'"), 2);
  EXPECT_EQ(Count(db, "topic = 'NOBODY' AND status = 'PENDING'"), 50);

  // A node serving "*" takes topics that are in no config, too.
  AddNode(db, {.address = "star:1", .capacity = 10, .topics = {"*"}});
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 5);
  EXPECT_EQ(Count(db, "topic = 'NOBODY' AND status = 'ASSIGNED' AND node_address = 'star:1'"), 5);
}

TEST_F(DispatcherCycleTest, DueEventsGoByPriorityThenIdAndFutureOnesWait) {
  AddNode(db, {.address = "a:1", .capacity = 3});
  int64_t low = AddEvent(db, {.code = "low", .priority = 9});
  int64_t later = AddEvent(db, {.code = "later", .priority = -5, .next_run_in_s = 3600});
  AddEvent(db, {.code = "mid1", .priority = 1});
  AddEvent(db, {.code = "high", .priority = -1});
  AddEvent(db, {.code = "mid2", .priority = 1});
  DispatchCycle cycle = MakeCycle(db, clock);
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 3);
  EXPECT_EQ(CodesIn(db, "ASSIGNED"), (std::vector<std::string>{"high", "mid1", "mid2"}));
  EXPECT_EQ(CodesIn(db, "PENDING"), (std::vector<std::string>{"later", "low"}));

  db.Exec("UPDATE distribute_event SET status = 'SUCCESS', version = version + 1 WHERE status = 'ASSIGNED'");
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);
  EXPECT_EQ(StatusOf(db, low), "ASSIGNED");
  EXPECT_EQ(StatusOf(db, later), "PENDING");  // still in its backoff
  db.Exec("UPDATE distribute_event SET next_run_time = NOW(3) - INTERVAL 1 SECOND WHERE code = 'later'");
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);
  EXPECT_EQ(StatusOf(db, later), "ASSIGNED");
}

TEST_F(DispatcherCycleTest, OrderedTopicsAssignAnEntitysNextEventOnlyAfterTheEarlierIsTerminal) {
  Settings s = TestSettings();
  s.topics["ORD"] = TopicSettings{};  // ordered by default
  TopicSettings unordered;
  unordered.ordered = false;
  s.topics["FREE"] = unordered;
  AddNode(db, {.address = "a:1", .capacity = 100});
  AddEvent(db, {.code = "o1", .topic = "ORD", .data_id = "space-1"});
  int64_t o2 = AddEvent(db, {.code = "o2", .topic = "ORD", .data_id = "space-1"});
  int64_t o3 = AddEvent(db, {.code = "o3", .topic = "ORD", .data_id = "space-1"});
  AddEvent(db, {.code = "o4", .topic = "ORD", .tenant = "t2", .data_id = "space-1"});
  AddEvent(db, {.code = "f1", .topic = "FREE", .data_id = "space-2"});
  AddEvent(db, {.code = "f2", .topic = "FREE", .data_id = "space-2"});
  DispatchCycle cycle = MakeCycle(db, clock, s);

  // o4: another tenant's entity; f2: not ordered, runs beside f1.
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 4);
  EXPECT_EQ(CodesIn(db, "ASSIGNED"), (std::vector<std::string>{"f1", "f2", "o1", "o4"}));
  EXPECT_EQ(CodesIn(db, "PENDING"), (std::vector<std::string>{"o2", "o3"}));

  // Running, or back in a backoff (PENDING, not yet due): o2 still waits.
  db.Exec("UPDATE distribute_event SET status = 'RUNNING', version = version + 1 WHERE code = 'o1'");
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 0);
  db.Exec("UPDATE distribute_event SET status = 'PENDING', node_address = NULL, version = version + 1, "
          "next_run_time = NOW(3) + INTERVAL 1 HOUR WHERE code = 'o1'");
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 0);
  EXPECT_EQ(StatusOf(db, o2), "PENDING");

  // Terminal (any of the three): the next one, and only it.
  db.Exec("UPDATE distribute_event SET status = 'COMPENSATED', version = version + 1 WHERE code = 'o1'");
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);
  EXPECT_EQ(StatusOf(db, o2), "ASSIGNED");
  EXPECT_EQ(StatusOf(db, o3), "PENDING");
  db.Exec("UPDATE distribute_event SET status = 'FAILED', version = version + 1 WHERE code = 'o2'");
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 1);
  EXPECT_EQ(StatusOf(db, o3), "ASSIGNED");
}

TEST_F(DispatcherCycleTest, ATopicAtItsBatchLimitLetsOtherTopicsThrough) {
  Settings s = TestSettings();
  s.dispatcher.batch_size = 10;
  TopicSettings limited;
  limited.batch_limit = 2;
  s.topics["X"] = limited;
  AddNode(db, {.address = "a:1", .capacity = 100});
  AddPendingEvents(db, 30, "X", "x", /*priority=*/-1);
  AddPendingEvents(db, 30, "Y", "y");
  DispatchCycle cycle = MakeCycle(db, clock, s);
  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 10);
  EXPECT_GE(r.pages, 2);
  EXPECT_TRUE(r.more_due);
  EXPECT_TRUE(r.room_left);  // batch_size stopped it: the next cycle comes at once
  EXPECT_EQ(NextDispatchDelay(r, 0ms, DispatcherSettings{}), 0ms);
  EXPECT_EQ(Count(db, "topic = 'X' AND status = 'ASSIGNED'"), 2);
  EXPECT_EQ(Count(db, "topic = 'Y' AND status = 'ASSIGNED'"), 8);
}

TEST_F(DispatcherCycleTest, AWriteWhoseEventChangedIsALostRace) {
  AddNode(db, {.address = "a:1", .capacity = 10});
  int64_t e1 = AddEvent(db, {.code = "e1"});
  int64_t e2 = AddEvent(db, {.code = "e2"});
  int64_t e3 = AddEvent(db, {.code = "e3"});
  // e2 changed since it was read (another writer bumped its version); e3 was cancelled.
  db.Exec("UPDATE distribute_event SET version = version + 1 WHERE code = 'e2'");
  db.Exec("UPDATE distribute_event SET status = 'FAILED', version = version + 1 WHERE code = 'e3'");
  DispatchCycle cycle = MakeCycle(db, clock);
  auto w = cycle.Write({{e3, 1, "a:1"}, {e1, 1, "a:1"}, {e2, 1, "a:1"}}, std::nullopt);
  EXPECT_FALSE(w.fenced_out);
  EXPECT_EQ(w.won, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(StatusOf(db, e1), "ASSIGNED");
  EXPECT_EQ(StatusOf(db, e2), "PENDING");
  EXPECT_EQ(VersionOf(db, e2), 2);
  EXPECT_EQ(StatusOf(db, e3), "FAILED");
}

TEST_F(DispatcherCycleTest, LostRacesAreFoundInAnyChunkOfABigWrite) {
  AddPendingEvents(db, 150, "T", "e");  // chunks of 64: 64 + 64 + 22 (padded)
  db.Exec("UPDATE distribute_event SET version = 5 WHERE code IN ('e-3', 'e-100', 'e-149')");
  std::vector<Assignment> as;
  std::map<int64_t, std::string> code_of;
  db.pool().Run("ids", [&](storage::Connection& c) {
    auto rs = c.Query("SELECT id, code FROM distribute_event ORDER BY id DESC");  // any order
    while (rs->next()) {
      as.push_back({rs->getInt64(1), 1, "n" + std::to_string(rs->getInt64(1) % 3) + ":1"});
      code_of[rs->getInt64(1)] = rs->getString(2);
    }
  });
  DispatchCycle cycle = MakeCycle(db, clock);
  auto w = cycle.Write(as, std::nullopt);
  ASSERT_EQ(w.won.size(), 150u);
  for (size_t i = 0; i < as.size(); ++i) {
    const std::string& code = code_of[as[i].event_id];
    bool raced = code == "e-3" || code == "e-100" || code == "e-149";
    EXPECT_EQ(w.won[i], !raced) << code;
  }
  EXPECT_EQ(Count(db, "status = 'ASSIGNED' AND version = 2"), 147);
  EXPECT_EQ(Count(db, "status = 'PENDING' AND version = 5"), 3);
  // Each went to its own node.
  EXPECT_EQ(Count(db, "status = 'ASSIGNED' AND node_address <> CONCAT('n', id % 3, ':1')"), 0);
}

TEST_F(DispatcherCycleTest, ALeaseForcedToExpireMidCycleFencesTheOldLeaderOut) {
  AddNode(db, {.address = "a:1", .capacity = 100});
  AddPendingEvents(db, 20, "T", "e");
  LeaseLock old_leader(db.pool(), "dispatcher:kbs-sync", "old:1:aaaa");
  LeaseLock new_leader(db.pool(), "dispatcher:kbs-sync", "new:2:bbbb");
  ASSERT_EQ(old_leader.TryAcquire(10s), 1);

  DispatchCycle old_cycle = MakeCycle(db, clock);
  // Between the old leader's reads and its writes, its lease expires and is taken.
  CycleResult r = old_cycle.RunOnce(old_leader.Fence(1), [&] {
    db.Exec("UPDATE distribute_lease_lock SET expires_at = NOW(3) - INTERVAL 1 SECOND");
    EXPECT_EQ(new_leader.TryAcquire(10s), 2);
    return true;  // the old leader has not noticed yet
  });
  EXPECT_TRUE(r.fenced_out);
  EXPECT_EQ(r.assigned, 0);
  EXPECT_EQ(Count(db, "status = 'ASSIGNED'"), 0);
  EXPECT_EQ(old_cycle.stats().fenced_out, 1u);

  DispatchCycle new_cycle = MakeCycle(db, clock);
  r = new_cycle.RunOnce(new_leader.Fence(2));
  EXPECT_FALSE(r.fenced_out);
  EXPECT_EQ(r.assigned, 20);
  EXPECT_EQ(r.lost_races, 0);
  EXPECT_EQ(Count(db, "status = 'ASSIGNED' AND version = 2"), 20);

  // The old leader's next cycle writes nothing either.
  AddPendingEvents(db, 5, "T", "late");
  r = old_cycle.RunOnce(old_leader.Fence(1));
  EXPECT_TRUE(r.fenced_out);
  EXPECT_EQ(Count(db, "code LIKE 'late-%' AND status = 'PENDING'"), 5);
}

// Datasource-aware routing (issue 13 item 4): a topic whose datasources no live node
// reaches is never read into a page, is recorded with its reason for
// v_events_needing_attention and the metrics, and runs once a node reaching it joins.
TEST_F(DispatcherCycleTest, UnroutableTopicIsRecordedForTheViewAndRunsWhenANodeReachesIt) {
  Settings s = TestSettings();
  StepSpec step;
  step.name = "items";
  step.type = "table_sync";
  step.params = {{"source", "env_a"}, {"target", "env_b"}, {"table", "item"}, {"where", "id = :id"}};
  s.topics["SYNC"].steps = {step};
  AddNode(db, {.address = "a:1", .capacity = 10, .datasources = std::vector<std::string>{"env_a"}});
  AddPendingEvents(db, 3, "SYNC", "s", /*priority=*/-1);  // first in line
  AddPendingEvents(db, 2, "T", "t");
  DispatchCycle cycle = MakeCycle(db, clock, s);

  CycleResult r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 2);
  EXPECT_EQ(r.due_read, 2);  // SYNC's events were kept out of the page
  EXPECT_EQ(r.unroutable_topics, 1);
  EXPECT_EQ(Count(db, "topic = 'SYNC' AND status = 'PENDING'"), 3);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_needing_attention WHERE topic = 'SYNC' AND status = 'PENDING' "
                        "AND reason = 'unroutable' AND detail LIKE '%(env_a,env_b): a:1 lacks env_b%'"),
            3);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_needing_attention WHERE topic = 'T'"), 0);
  EXPECT_EQ(db.QueryInt("SELECT pending_events FROM distribute_unroutable_topic WHERE topic = 'SYNC'"), 3);
  CycleStats st = cycle.stats();
  ASSERT_EQ(st.unroutable.size(), 1u);
  EXPECT_EQ(st.unroutable["SYNC"].pending, 3);

  // Unchanged and within the refresh interval: nothing rewritten.
  db.Exec("UPDATE distribute_unroutable_topic SET updated_time = updated_time - INTERVAL 5 SECOND");
  const int64_t age_before = db.QueryInt("SELECT TIMESTAMPDIFF(MICROSECOND, updated_time, NOW(3)) FROM distribute_unroutable_topic");
  cycle.RunOnce(std::nullopt);
  EXPECT_GE(db.QueryInt("SELECT TIMESTAMPDIFF(MICROSECOND, updated_time, NOW(3)) FROM distribute_unroutable_topic"),
            age_before);
  // A row no dispatcher refreshed for a minute is stale: the view ignores it (and, no
  // lease being held here, lists the events as no_dispatcher_for_service instead).
  db.Exec("UPDATE distribute_unroutable_topic SET updated_time = updated_time - INTERVAL 2 MINUTE");
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_needing_attention WHERE topic = 'SYNC' "
                        "AND reason <> 'no_dispatcher_for_service'"),
            0);

  // A node reaching both joins: SYNC runs there, the record and the listing clear.
  AddNode(db, {.address = "b:1", .capacity = 10, .datasources = std::vector<std::string>{"env_a", "env_b"}});
  r = cycle.RunOnce(std::nullopt);
  EXPECT_EQ(r.assigned, 3);
  EXPECT_EQ(r.unroutable_topics, 0);
  EXPECT_EQ(Count(db, "topic = 'SYNC' AND status = 'ASSIGNED' AND node_address = 'b:1'"), 3);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_unroutable_topic"), 0);
  EXPECT_TRUE(cycle.stats().unroutable.empty());
}

TEST_F(DispatcherCycleTest, ABadTopicOfANodeGoesElsewhereAndARecordWrittenByAFencedOutLeaderIsNot) {
  Settings s = TestSettings();
  s.topics["B"].steps = {StepSpec{.name = "x", .type = "demo"}};
  AddNode(db, {.address = "a:1", .capacity = 10, .bad_topics = {{"B", "config: topics.B.steps[0] (x): bad"}}});
  AddPendingEvents(db, 2, "B", "b");
  LeaseLock lease(db.pool(), "dispatcher:kbs-sync", "me:1:aaaa");
  ASSERT_EQ(lease.TryAcquire(10s), 1);
  DispatchCycle cycle = MakeCycle(db, clock, s);
  // Fenced out (the lease is someone else's): nothing recorded.
  db.Exec("UPDATE distribute_lease_lock SET owner = 'other:2:bbbb'");
  cycle.RunOnce(lease.Fence(1));
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_unroutable_topic"), 0);
  db.Exec("UPDATE distribute_lease_lock SET owner = 'me:1:aaaa'");
  CycleResult r = cycle.RunOnce(lease.Fence(1));
  EXPECT_EQ(r.assigned, 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM v_events_needing_attention WHERE reason = 'unroutable' AND "
                        "detail LIKE '%plan failed to build on every live node serving it: a:1 plan failed: config: topics.B%'"),
            2);
  AddNode(db, {.address = "b:1", .capacity = 10});
  r = cycle.RunOnce(lease.Fence(1));
  EXPECT_EQ(r.assigned, 2);
  EXPECT_EQ(Count(db, "topic = 'B' AND node_address = 'b:1'"), 2);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_unroutable_topic"), 0);
}

TEST_F(DispatcherCycleTest, StrategiesOverSqlNodes) {
  Settings s = TestSettings();
  TopicSettings rr;
  rr.strategy = "round_robin";
  s.topics["RR"] = rr;
  TopicSettings ch;
  ch.strategy = "consistent_hash";
  ch.ordered = false;
  s.topics["CH"] = ch;
  AddNode(db, {.address = "a:1", .capacity = 100});
  AddNode(db, {.address = "b:1", .capacity = 100});
  AddNode(db, {.address = "c:1", .capacity = 100});
  AddPendingEvents(db, 9, "RR", "rr");
  for (int i = 0; i < 6; ++i) {
    AddEvent(db, {.code = "ch-" + std::to_string(i), .topic = "CH", .data_id = "entity-" + std::to_string(i % 2)});
  }
  DispatchCycle cycle = MakeCycle(db, clock, s);
  EXPECT_EQ(cycle.RunOnce(std::nullopt).assigned, 15);
  EXPECT_EQ(Count(db, "topic = 'RR' AND node_address = 'a:1'"), 3);
  EXPECT_EQ(Count(db, "topic = 'RR' AND node_address = 'b:1'"), 3);
  EXPECT_EQ(Count(db, "topic = 'RR' AND node_address = 'c:1'"), 3);
  // One node per entity.
  EXPECT_EQ(db.QueryInt("SELECT COUNT(DISTINCT node_address) FROM distribute_event WHERE topic = 'CH' "
                        "AND data_id = 'entity-0'"), 1);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(DISTINCT node_address) FROM distribute_event WHERE topic = 'CH' "
                        "AND data_id = 'entity-1'"), 1);
}

}  // namespace
}  // namespace dsync::dispatcher
