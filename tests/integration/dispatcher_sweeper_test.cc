// The leader's sweeper (dispatcher/event_sweeper.h) against a real MariaDB. Dead
// nodes and idle events are made by moving times into the past with SQL.
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "app/options.h"
#include "core/clock.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/event_sweeper.h"
#include "tests/integration/dispatcher_fixtures.h"
#include "tests/support/log_capture.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

using testing::LogCapture;

std::string Field(TestSchema& db, int64_t id, const std::string& column) {
  return Text(db, "SELECT " + column + " FROM distribute_event WHERE id = " + std::to_string(id));
}
int64_t IntField(TestSchema& db, int64_t id, const std::string& column) {
  return db.QueryInt("SELECT " + column + " FROM distribute_event WHERE id = " + std::to_string(id));
}

// Sets modifier_time (and started_time) `seconds` into the past. An explicit SET
// overrides the column's ON UPDATE.
void Idle(TestSchema& db, int64_t id, int modifier_age_s, int started_age_s = -1) {
  if (started_age_s < 0) started_age_s = modifier_age_s;
  db.Exec("UPDATE distribute_event SET modifier_time = NOW(3) - INTERVAL " + std::to_string(modifier_age_s) +
          " SECOND, started_time = NOW(3) - INTERVAL " + std::to_string(started_age_s) +
          " SECOND WHERE id = " + std::to_string(id));
}

// TestSettings with topics whose events are reset after the given time without activity.
Settings WithProcessingTimes(const std::map<std::string, Millis>& max_processing_times) {
  Settings s = TestSettings();
  for (const auto& [topic, time] : max_processing_times) s.topics[topic].max_processing_time = time;
  return s;
}

TEST(DispatcherSweeperTest, EventsOfNodesThatAreNotLiveGoBackToPending) {
  TestSchema db;
  LogCapture log;
  AddNode(db, {.address = "live:1"});
  AddNode(db, {.address = "draining:1", .status = 2});
  AddNode(db, {.address = "dead:1", .age_ms = 60000});
  AddNode(db, {.address = "stopped:1", .status = 0});  // shut down gracefully just now
  int64_t assigned = AddEvent(db, {.code = "a1", .status = "ASSIGNED", .node = "dead:1", .version = 2});
  int64_t running = AddEvent(db, {.code = "r1", .status = "RUNNING", .node = "dead:1", .version = 3, .retry_count = 1});
  int64_t compensating = AddEvent(db, {.code = "c1", .status = "COMPENSATING", .node = "dead:1", .version = 5,
                                       .phase = "COMPENSATE", .retry_count = 3});
  int64_t gone = AddEvent(db, {.code = "g1", .status = "RUNNING", .node = "never-registered:1", .version = 3});
  int64_t stopped = AddEvent(db, {.code = "s1", .status = "ASSIGNED", .node = "stopped:1", .version = 2});
  int64_t on_live = AddEvent(db, {.code = "l1", .status = "RUNNING", .node = "live:1", .version = 3});
  int64_t drain_a = AddEvent(db, {.code = "d1", .status = "ASSIGNED", .node = "draining:1", .version = 2});
  int64_t drain_r = AddEvent(db, {.code = "d2", .status = "RUNNING", .node = "draining:1", .version = 3});
  int64_t done = AddEvent(db, {.code = "done", .status = "SUCCESS", .node = "dead:1", .version = 4});
  int64_t pending = AddEvent(db, {.code = "p1"});
  db.Exec("UPDATE distribute_event SET trace_id = 'trace-42' WHERE code = 'a1'");
  for (int64_t id : {assigned, running, compensating, gone, stopped}) Idle(db, id, 120);

  EventSweeper sweeper(db.pool(), app::SweeperOptionsFrom(TestSettings()));
  SweepReport r = sweeper.SweepOnce();
  EXPECT_EQ(r.marked_offline, 1u);  // dead:1
  EXPECT_EQ(r.reset_node_offline, 5u);
  EXPECT_EQ(r.reset_timed_out, 0u);
  EXPECT_EQ(r.reset_races, 0u);

  // No reset is charged to the retries (retry_count stays as it was): a claimed run's
  // reset counts in reset_count (max_resets), an ASSIGNED one's in neither.
  struct Expect {
    int64_t id;
    int64_t version;
    int64_t retry_count;
    int64_t reset_count;
    const char* phase;
    const char* node;
  };
  for (const Expect& e : {Expect{assigned, 3, 0, 0, "FORWARD", "dead:1"},
                          Expect{running, 4, 1, 1, "FORWARD", "dead:1"},
                          Expect{compensating, 6, 3, 1, "COMPENSATE", "dead:1"},
                          Expect{gone, 4, 0, 1, "FORWARD", "never-registered:1"},
                          Expect{stopped, 3, 0, 0, "FORWARD", "stopped:1"}}) {
    SCOPED_TRACE(e.id);
    EXPECT_EQ(StatusOf(db, e.id), "PENDING");
    EXPECT_EQ(VersionOf(db, e.id), e.version);
    EXPECT_EQ(NodeOf(db, e.id), "NULL");
    EXPECT_EQ(IntField(db, e.id, "retry_count"), e.retry_count);
    EXPECT_EQ(IntField(db, e.id, "reset_count"), e.reset_count);
    EXPECT_EQ(Field(db, e.id, "phase"), e.phase);
    EXPECT_EQ(Field(db, e.id, "last_error"), std::string("reset (not charged): node ") + e.node + " offline");
    EXPECT_EQ(IntField(db, e.id, "next_run_time <= NOW(3) AND next_run_time > NOW(3) - INTERVAL 60 SECOND"), 1);
    EXPECT_EQ(IntField(db, e.id, "modifier_time > NOW(3) - INTERVAL 60 SECOND"), 1);
  }
  for (int64_t id : {on_live, drain_a, drain_r}) {
    EXPECT_NE(StatusOf(db, id), "PENDING") << id;
    EXPECT_NE(NodeOf(db, id), "NULL") << id;
  }
  EXPECT_EQ(StatusOf(db, done), "SUCCESS");
  EXPECT_EQ(NodeOf(db, done), "dead:1");
  EXPECT_EQ(VersionOf(db, pending), 1);

  std::string text = log.text();
  EXPECT_NE(text.find("EVENT_RESET event=a1 node=dead:1 reason=node_offline trace=trace-42"), std::string::npos) << text;
  EXPECT_NE(text.find("EVENT_RESET event=r1 node=dead:1 reason=node_offline trace=r1"), std::string::npos) << text;
  EXPECT_EQ(sweeper.stats().resets_node_offline, 5u);
  EXPECT_EQ(sweeper.stats().sweeps, 1u);

  // A second pass finds nothing more; the reset events go to the live node.
  r = sweeper.SweepOnce();
  EXPECT_EQ(r.reset_node_offline, 0u);
  SystemClock clock;
  CycleOptions o;
  DispatchCycle cycle(db.pool(), clock, app::PlannerConfigFrom(TestSettings()), o);
  cycle.RunOnce(std::nullopt);
  for (int64_t id : {assigned, running, compensating, gone, stopped, pending}) {
    EXPECT_EQ(StatusOf(db, id), "ASSIGNED") << id;
    EXPECT_EQ(NodeOf(db, id), "live:1") << id;
  }
}

// Two services in one database: each leader's sweeper judges its own nodes and resets
// its own events only, even where the services use the same node address.
TEST(DispatcherSweeperTest, ASweeperNeverTouchesAnotherServicesEventsOrNodes) {
  TestSchema db;
  const std::string other = "billing-sync";
  AddNode(db, {.address = "shared:1"});                                   // live in kbs-sync
  AddNode(db, {.address = "shared:1", .age_ms = 60000, .service = other});  // dead in billing-sync
  AddNode(db, {.address = "theirs-live:1", .service = other});
  AddNode(db, {.address = "theirs-dead:1", .age_ms = 60000, .service = other});
  // kbs-sync's event at the address dead in billing-sync: its node is live, it stays.
  int64_t mine = AddEvent(db, {.code = "mine", .status = "RUNNING", .node = "shared:1", .version = 3});
  // billing-sync's events: one at the address live in kbs-sync (dead in its own
  // service), one at a node dead in billing-sync, one idle for an hour at a live one.
  int64_t theirs_shared = AddEvent(db, {.code = "theirs-shared", .status = "ASSIGNED", .node = "shared:1",
                                        .version = 2, .service = other});
  int64_t theirs_dead = AddEvent(db, {.code = "theirs-dead", .status = "RUNNING", .node = "theirs-dead:1",
                                      .version = 3, .service = other});
  int64_t theirs_idle = AddEvent(db, {.code = "theirs-idle", .status = "RUNNING", .node = "theirs-live:1",
                                      .version = 3, .service = other});
  Idle(db, theirs_idle, 3600);
  Idle(db, theirs_dead, 120);
  db.Exec("UPDATE distribute_event SET assigned_time = NOW(3) - INTERVAL 1 HOUR WHERE code = 'theirs-shared'");

  EventSweeper kbs(db.pool(), app::SweeperOptionsFrom(TestSettings()));
  SweepReport r = kbs.SweepOnce();
  EXPECT_EQ(r.marked_offline, 0u);  // billing-sync's dead nodes are not kbs-sync's to judge
  EXPECT_EQ(r.reset_node_offline + r.reset_timed_out + r.reset_not_claimed, 0u);
  for (int64_t id : {mine, theirs_shared, theirs_dead, theirs_idle}) EXPECT_NE(StatusOf(db, id), "PENDING") << id;
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry WHERE status = 0"), 0);

  Settings billing = TestSettings();
  billing.service = other;
  EventSweeper theirs(db.pool(), app::SweeperOptionsFrom(billing));
  r = theirs.SweepOnce();
  EXPECT_EQ(r.marked_offline, 2u);       // shared:1 and theirs-dead:1, in billing-sync only
  EXPECT_EQ(r.reset_node_offline, 2u);   // theirs-shared, theirs-dead
  EXPECT_EQ(r.reset_timed_out, 1u);      // theirs-idle
  for (int64_t id : {theirs_shared, theirs_dead, theirs_idle}) EXPECT_EQ(StatusOf(db, id), "PENDING") << id;
  EXPECT_EQ(StatusOf(db, mine), "RUNNING");
  EXPECT_EQ(NodeOf(db, mine), "shared:1");
  EXPECT_EQ(db.QueryInt("SELECT status FROM distribute_node_registry WHERE service_name = 'kbs-sync' "
                        "AND node_address = 'shared:1'"),
            1);
}

TEST(DispatcherSweeperTest, AnEventThatCompletedBetweenReadAndResetIsNotOverwritten) {
  TestSchema db;
  AddNode(db, {.address = "dead:1", .age_ms = 60000});
  int64_t completes = AddEvent(db, {.code = "completes", .status = "RUNNING", .node = "dead:1", .version = 3});
  int64_t status_only = AddEvent(db, {.code = "status-only", .status = "RUNNING", .node = "dead:1", .version = 3});
  int64_t handed = AddEvent(db, {.code = "handed", .status = "ASSIGNED", .node = "dead:1", .version = 2});
  EventSweeper sweeper(db.pool(), app::SweeperOptionsFrom(TestSettings()));

  std::vector<ResetCandidate> found = sweeper.FindOrphaned(100);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].id, completes);
  EXPECT_EQ(found[0].version, 3);
  EXPECT_EQ(found[0].status, events::EventStatus::kRunning);
  EXPECT_EQ(found[0].node_address, "dead:1");
  EXPECT_EQ(found[0].reason, ResetReason::kNodeOffline);

  // Between the read and the write: the owner's final fenced write commits; another
  // writer changes the status alone; a third event is handed back and reassigned.
  db.Exec("UPDATE distribute_event SET status = 'SUCCESS', version = version + 1, finished_time = NOW(3) "
          "WHERE code = 'completes'");
  db.Exec("UPDATE distribute_event SET status = 'COMPENSATED' WHERE code = 'status-only'");
  db.Exec("UPDATE distribute_event SET status = 'ASSIGNED', node_address = 'dead:1', version = version + 2 "
          "WHERE code = 'handed'");
  for (const ResetCandidate& c : found) EXPECT_FALSE(sweeper.Reset(c)) << c.code;

  EXPECT_EQ(StatusOf(db, completes), "SUCCESS");
  EXPECT_EQ(VersionOf(db, completes), 4);
  EXPECT_EQ(NodeOf(db, completes), "dead:1");
  EXPECT_EQ(Field(db, completes, "last_error"), "NULL");
  EXPECT_EQ(IntField(db, completes, "retry_count"), 0);
  EXPECT_EQ(StatusOf(db, status_only), "COMPENSATED");
  EXPECT_EQ(VersionOf(db, handed), 4);
  EXPECT_EQ(StatusOf(db, handed), "ASSIGNED");
  EXPECT_EQ(sweeper.stats().reset_races, 3u);
  EXPECT_EQ(sweeper.stats().resets_node_offline, 0u);

  // Read again in a later pass, the reassigned one is reset with its new version.
  found = sweeper.FindOrphaned(100);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].version, 4);
  EXPECT_TRUE(sweeper.Reset(found[0]));
  EXPECT_EQ(VersionOf(db, handed), 5);
}

TEST(DispatcherSweeperTest, RunningEventsIdleBeyondTheirTopicsTimeoutAreReset) {
  TestSchema db;
  Settings s = WithProcessingTimes({{"T", 60s}, {"LONG", 1h}});
  // Full (processing_count = capacity): its ASSIGNED event waits for a free worker, so
  // the not-claimed hand-back leaves it too; timeouts never apply to ASSIGNED.
  AddNode(db, {.address = "live:1", .processing_count = 8});
  auto running = [&](const std::string& code, const std::string& topic, const std::string& status = "RUNNING") {
    return AddEvent(db, {.code = code, .topic = topic, .status = status, .node = "live:1", .version = 3,
                         .phase = status == "COMPENSATING" ? "COMPENSATE" : "FORWARD"});
  };
  int64_t stale = running("stale", "T");
  int64_t busy = running("busy", "T");                 // started long ago, active now
  int64_t stale_comp = running("stale-comp", "T", "COMPENSATING");
  int64_t stale_assigned = running("stale-assigned", "T", "ASSIGNED");
  int64_t long_ok = running("long-ok", "LONG");
  int64_t unknown_stale = running("unknown-stale", "NOT_CONFIGURED");
  int64_t unknown_ok = running("unknown-ok", "NOT_CONFIGURED");
  // Idle past max_processing_time but within its grace (60 s + 6 s): a step attempt
  // with the default deadline (60 s) may still be recording its own timeout.
  int64_t in_grace = running("in-grace", "T");
  int64_t unknown_in_grace = running("unknown-in-grace", "NOT_CONFIGURED");
  Idle(db, stale, 120);
  Idle(db, in_grace, 63);
  Idle(db, unknown_in_grace, 320);  // 300 s + 30 s
  Idle(db, busy, 0, 7200);
  Idle(db, stale_comp, 120);
  Idle(db, stale_assigned, 120);
  Idle(db, long_ok, 120);
  Idle(db, unknown_stale, 400);  // default max_processing_time: 300 s
  Idle(db, unknown_ok, 120);

  EventSweeper sweeper(db.pool(), app::SweeperOptionsFrom(s));
  SweepReport r = sweeper.SweepOnce();
  EXPECT_EQ(r.reset_timed_out, 3u);
  EXPECT_EQ(r.reset_node_offline, 0u);

  EXPECT_EQ(StatusOf(db, stale), "PENDING");
  EXPECT_EQ(VersionOf(db, stale), 4);
  EXPECT_EQ(IntField(db, stale, "retry_count"), 0);
  EXPECT_EQ(IntField(db, stale, "reset_count"), 1);
  EXPECT_EQ(NodeOf(db, stale), "NULL");
  EXPECT_EQ(Field(db, stale, "last_error").rfind("reset (not charged): no activity for 1", 0), 0u)
      << Field(db, stale, "last_error");
  EXPECT_NE(Field(db, stale, "last_error").find("on node live:1 (max_processing_time_ms 60000 + grace 6000 ms)"),
            std::string::npos)
      << Field(db, stale, "last_error");
  EXPECT_EQ(StatusOf(db, stale_comp), "PENDING");
  EXPECT_EQ(IntField(db, stale_comp, "retry_count"), 0);
  EXPECT_EQ(IntField(db, stale_comp, "reset_count"), 1);
  EXPECT_EQ(Field(db, stale_comp, "phase"), "COMPENSATE");
  EXPECT_EQ(StatusOf(db, unknown_stale), "PENDING");

  EXPECT_EQ(StatusOf(db, busy), "RUNNING");  // last activity counts, never the start
  EXPECT_EQ(StatusOf(db, stale_assigned), "ASSIGNED");
  EXPECT_EQ(StatusOf(db, long_ok), "RUNNING");
  EXPECT_EQ(StatusOf(db, unknown_ok), "RUNNING");
  EXPECT_EQ(StatusOf(db, in_grace), "RUNNING");
  EXPECT_EQ(StatusOf(db, unknown_in_grace), "RUNNING");
  EXPECT_EQ(sweeper.stats().resets_timed_out, 3u);
}

TEST(DispatcherSweeperTest, ActivityBetweenReadAndResetKeepsTheEventRunning) {
  TestSchema db;
  Settings s = WithProcessingTimes({{"T", 60s}});
  AddNode(db, {.address = "live:1"});
  int64_t id = AddEvent(db, {.code = "e", .status = "RUNNING", .node = "live:1", .version = 3});
  Idle(db, id, 120);
  EventSweeper sweeper(db.pool(), app::SweeperOptionsFrom(s));
  std::vector<ResetCandidate> found = sweeper.FindTimedOut(100);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].reason, ResetReason::kTimedOut);
  EXPECT_EQ(found[0].timeout, 66s);  // SweeperIdleBound(60 s)
  EXPECT_EQ(found[0].grace, 6s);
  EXPECT_GE(found[0].idle, 119s);

  // The owner's fenced progress write refreshes modifier_time, version unchanged.
  db.Exec("UPDATE distribute_event SET modifier_time = NOW(3), progress = 50 WHERE id = " + std::to_string(id) +
          " AND version = 3");
  EXPECT_FALSE(sweeper.Reset(found[0]));
  EXPECT_EQ(StatusOf(db, id), "RUNNING");
  EXPECT_EQ(VersionOf(db, id), 3);
  EXPECT_EQ(sweeper.stats().reset_races, 1u);
}

// The sweeper's idle bound is the topic's max_processing_time plus a grace of a tenth
// of it, at least 2 s: strictly above the default step deadline (issue 39 item 5).
TEST(DispatcherSweeperTest, TheIdleBoundIsMaxProcessingTimePlusAGrace) {
  EXPECT_EQ(SweeperIdleBound(300s), 330s);
  EXPECT_EQ(SweeperIdleBound(60s), 66s);
  EXPECT_EQ(SweeperIdleBound(500ms), 2500ms);
  EXPECT_EQ(SweeperIdleBound(100ms), 2100ms);
  TopicSettings defaults;
  EXPECT_GT(SweeperIdleBound(defaults.max_processing_time), defaults.StepTimeout());
}

}  // namespace
}  // namespace dsync::dispatcher

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

// Sets the assignment `seconds` into the past (assigned_time and modifier_time).
void AssignedAgo(TestSchema& db, int64_t id, int seconds) {
  db.Exec("UPDATE distribute_event SET assigned_time = NOW(3) - INTERVAL " + std::to_string(seconds) +
          " SECOND, modifier_time = NOW(3) - INTERVAL " + std::to_string(seconds) + " SECOND WHERE id = " +
          std::to_string(id));
}

TEST(DispatcherSweeperTest, AssignedEventsALiveNodeDoesNotClaimAreHandedBack) {
  TestSchema db;
  LogCapture log;
  Settings s = TestSettings();
  TopicSettings t;
  t.claim_timeout = 10s;
  s.topics["T"] = t;
  s.topics["U"] = TopicSettings{};  // default claim_timeout: 30 s
  AddNode(db, {.address = "other-topics:1", .capacity = 4, .topics = {"U"}});
  AddNode(db, {.address = "room:1", .capacity = 4, .topics = {"T", "U"}, .processing_count = 1});
  AddNode(db, {.address = "full:1", .capacity = 4, .topics = {"*"}, .processing_count = 4});
  auto assigned = [&](const std::string& code, const std::string& topic, const std::string& node) {
    return AddEvent(db, {.code = code, .topic = topic, .status = "ASSIGNED", .node = node, .version = 2});
  };
  int64_t not_served = assigned("not-served", "T", "other-topics:1");
  int64_t with_room = assigned("with-room", "T", "room:1");
  int64_t on_full = assigned("on-full", "T", "full:1");
  int64_t fresh = assigned("fresh", "T", "room:1");
  int64_t u_young = assigned("u-young", "U", "room:1");   // 20 s < its 30 s
  int64_t u_old = assigned("u-old", "U", "room:1");       // 40 s > 30 s
  for (int64_t id : {not_served, with_room, on_full}) AssignedAgo(db, id, 20);
  AssignedAgo(db, fresh, 2);
  AssignedAgo(db, u_young, 20);
  AssignedAgo(db, u_old, 40);

  EventSweeper sweeper(db.pool(), app::SweeperOptionsFrom(s));
  SweepReport r = sweeper.SweepOnce();
  EXPECT_EQ(r.reset_not_claimed, 3u);
  EXPECT_EQ(r.reset_node_offline, 0u);
  EXPECT_EQ(r.reset_timed_out, 0u);
  for (int64_t id : {not_served, with_room, u_old}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(StatusOf(db, id), "PENDING");
    EXPECT_EQ(VersionOf(db, id), 3);
    EXPECT_EQ(NodeOf(db, id), "NULL");
    EXPECT_EQ(IntField(db, id, "retry_count"), 0);  // a hand-back is not a retry
  }
  for (int64_t id : {on_full, fresh, u_young}) EXPECT_EQ(StatusOf(db, id), "ASSIGNED") << id;

  EXPECT_EQ(Field(db, not_served, "last_error").rfind("reset: not claimed by node other-topics:1 for 2", 0), 0u)
      << Field(db, not_served, "last_error");
  EXPECT_NE(Field(db, not_served, "last_error").find("(claim_timeout_ms 10000; it does not serve topic T)"),
            std::string::npos);
  EXPECT_NE(Field(db, with_room, "last_error").find("(claim_timeout_ms 10000; it reported room (1 of 4 busy))"),
            std::string::npos)
      << Field(db, with_room, "last_error");
  EXPECT_NE(Field(db, u_old, "last_error").find("claim_timeout_ms 30000"), std::string::npos);
  // The process_log entry: ASSIGNED -> PENDING, naming the node that did not claim.
  EXPECT_EQ(Field(db, not_served, "JSON_UNQUOTE(JSON_EXTRACT(process_log, '$[0].from'))"), "ASSIGNED");
  EXPECT_EQ(Field(db, not_served, "JSON_UNQUOTE(JSON_EXTRACT(process_log, '$[0].to'))"), "PENDING");
  EXPECT_EQ(Field(db, not_served, "JSON_UNQUOTE(JSON_EXTRACT(process_log, '$[0].node'))"), "other-topics:1");

  // The nodes are noted on their registry rows.
  EXPECT_EQ(db.QueryInt("SELECT not_claimed_count FROM distribute_node_registry WHERE node_address = 'other-topics:1'"), 1);
  EXPECT_EQ(db.QueryInt("SELECT not_claimed_count FROM distribute_node_registry WHERE node_address = 'room:1'"), 2);
  EXPECT_EQ(db.QueryInt("SELECT not_claimed_count FROM distribute_node_registry WHERE node_address = 'full:1'"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry WHERE node_address = 'room:1' "
                        "AND last_not_claimed_time > NOW(3) - INTERVAL 60 SECOND"),
            1);
  EXPECT_EQ(sweeper.stats().resets_not_claimed, 3u);
  std::string text = log.text();
  EXPECT_NE(text.find("EVENT_RESET event=not-served node=other-topics:1 reason=not_claimed"), std::string::npos)
      << text;

  // A second sweep finds nothing more.
  EXPECT_EQ(sweeper.SweepOnce().reset_not_claimed, 0u);
}

// The hand-back is fenced like every reset: an event its node claimed between the
// sweeper's read and its write (RUNNING, version + 1) is left alone and the node is not
// noted. modifier_time is kept old, so only the (version, status) fence can refuse it.
TEST(DispatcherSweeperTest, NotClaimedHandBackOfAnEventClaimedMeanwhileDoesNothing) {
  TestSchema db;
  LogCapture log;
  Settings s = TestSettings();
  s.topics["T"].claim_timeout = 10s;
  AddNode(db, {.address = "room:1", .capacity = 4, .topics = {"T"}, .processing_count = 1});
  int64_t id = AddEvent(db, {.code = "claimed-late", .topic = "T", .status = "ASSIGNED", .node = "room:1", .version = 2});
  AssignedAgo(db, id, 20);

  EventSweeper sweeper(db.pool(), app::SweeperOptionsFrom(s));
  std::vector<ResetCandidate> found = sweeper.FindNotClaimed(10);
  ASSERT_EQ(found.size(), 1u);
  ASSERT_EQ(found[0].id, id);
  ASSERT_EQ(found[0].version, 2);
  ASSERT_EQ(found[0].status, events::EventStatus::kAssigned);

  // The node's claim, after the read.
  db.Exec("UPDATE distribute_event SET status = 'RUNNING', version = version + 1, "
          "modifier_time = NOW(3) - INTERVAL 20 SECOND WHERE id = " + std::to_string(id) + " AND version = 2");
  EXPECT_FALSE(sweeper.Reset(found[0]));
  EXPECT_EQ(StatusOf(db, id), "RUNNING");
  EXPECT_EQ(VersionOf(db, id), 3);
  EXPECT_EQ(NodeOf(db, id), "room:1");
  EXPECT_EQ(Field(db, id, "last_error"), "NULL");
  EXPECT_EQ(db.QueryInt("SELECT not_claimed_count FROM distribute_node_registry WHERE node_address = 'room:1'"), 0);
  EXPECT_EQ(sweeper.stats().resets_not_claimed, 0u);
  EXPECT_EQ(sweeper.stats().reset_races, 1u);
  EXPECT_NE(log.text().find("EVENT_RESET_SKIPPED event=claimed-late node=room:1 reason=not_claimed"), std::string::npos)
      << log.text();
}

}  // namespace
}  // namespace dsync::dispatcher
