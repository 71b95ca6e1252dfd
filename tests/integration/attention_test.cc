// No silent waits (issue 34, "What to build" item 4) against a real MariaDB: events
// that cannot make progress are listed with why, by v_events_needing_attention (V017)
// and by the reads the CLI, the API and /metrics use (events/rows.h), which must agree
// with the view; `cancel` ends a blocker and the events it held back are then assigned.
// The dispatcher is a real DispatchCycle under a real lease; nodes are registry rows.
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "app/options.h"
#include "api/event_store.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/metrics.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/lease_lock.h"
#include "events/cancel.h"
#include "events/rows.h"
#include "tests/integration/dispatcher_fixtures.h"
#include "tests/support/log_capture.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

// (reason, code, blocker_code) of the listed PENDING events.
using Listed = std::set<std::tuple<std::string, std::string, std::string>>;

Settings AttentionSettings() {
  Settings s = TestSettings();
  const StepSpec demo{.name = "x", .type = "demo"};
  s.topics["T"].steps = {demo};
  s.topics["NOSERVE"].steps = {demo};  // configured, but no node serves it
  s.topics["U"].steps = {demo};
  s.topics["U"].ordered = false;
  return s;
}

class AttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token = *lease.TryAcquire(60s);
    AddNode(db, {.address = "a:1", .capacity = 20, .topics = {"T", "U"}});
  }

  CycleResult Cycle() {
    CycleOptions o;
    o.service = settings.service;
    o.offline_timeout = settings.registry.offline_timeout;
    if (!cycle) cycle.emplace(db.pool(), clock, app::PlannerConfigFrom(settings), o);
    return cycle->RunOnce(lease.Fence(token));
  }

  Listed FromView() {
    Listed out;
    db.pool().Run("view", [&](storage::Connection& c) {
      out.clear();
      auto rs = c.Query("SELECT reason, code, IFNULL(blocker_code, '') FROM v_events_needing_attention "
                        "WHERE status = 'PENDING'");
      while (rs->next()) out.emplace(rs->getString(1), rs->getString(2), rs->getString(3));
    });
    return out;
  }

  Listed FromStore() {
    Listed out;
    for (const auto& a : store.NeedingAttention(100)) {
      if (a.status == "PENDING") out.emplace(a.reason, a.code, a.blocker_code);
    }
    return out;
  }

  std::string ViewDetail(const std::string& code) {
    return Text(db, "SELECT IFNULL(detail, 'NULL') FROM v_events_needing_attention WHERE code = '" + code + "'");
  }

  TestSchema db;
  SystemClock clock;
  Settings settings = AttentionSettings();
  LeaseLock lease{db.pool(), DispatcherLockName(kService), "me:1:aaaa"};
  int64_t token = 0;
  std::optional<DispatchCycle> cycle;
  api::EventStore store{db.pool(), app::StoreOptionsFrom(settings)};
};

TEST_F(AttentionTest, EventsHeldBehindABlockerAreListedWithTheBlockerAndItsReason) {
  testing::LogCapture log;
  AddEvent(db, {.code = "A1", .topic = "NOSERVE", .data_id = "e1"});  // no node serves it
  AddEvent(db, {.code = "A2", .topic = "T", .data_id = "e1"});
  AddEvent(db, {.code = "B1", .topic = "GHOST", .data_id = "e2"});    // no config defines it
  AddEvent(db, {.code = "B2", .topic = "T", .data_id = "e2"});
  AddEvent(db, {.code = "C1", .topic = "T", .data_id = "e3", .next_run_in_s = 600});  // delayed
  AddEvent(db, {.code = "C2", .topic = "T", .data_id = "e3"});
  AddEvent(db, {.code = "C3", .topic = "T", .data_id = "e3"});
  AddEvent(db, {.code = "D1", .topic = "NOSERVE", .data_id = "e4"});
  AddEvent(db, {.code = "D2", .topic = "U", .data_id = "e4"});        // unordered: not held
  AddEvent(db, {.code = "E1", .topic = "T", .data_id = "e5"});        // nothing in its way
  AddEvent(db, {.code = "F1", .topic = "T", .data_id = "e6", .status = "RUNNING", .node = "a:1"});
  db.Exec("UPDATE distribute_event SET modifier_time = NOW(3) - INTERVAL 10 MINUTE WHERE code = 'F1'");
  AddEvent(db, {.code = "F2", .topic = "T", .data_id = "e6"});        // behind a stuck one
  AddEvent(db, {.code = "G1", .topic = "T", .data_id = "e7", .next_run_in_s = 600});  // delayed, holds nothing

  CycleResult r = Cycle();
  EXPECT_EQ(r.assigned, 2);  // E1 and D2
  EXPECT_EQ(StatusOf(db, *db.pool().Run("id", [](storage::Connection& c) {
              return c.QueryInt("SELECT id FROM distribute_event WHERE code = 'D2'"); })), "ASSIGNED");
  EXPECT_EQ(Count(db, "status = 'PENDING' AND code IN ('A2', 'B2', 'C2', 'C3', 'F2')"), 5);
  // The leader recorded the unknown topic beside the unroutable one.
  EXPECT_EQ(Text(db, "SELECT kind FROM distribute_unroutable_topic WHERE topic = 'GHOST'"), "unknown_topic");
  EXPECT_EQ(Text(db, "SELECT kind FROM distribute_unroutable_topic WHERE topic = 'NOSERVE'"), "unroutable");
  EXPECT_EQ(Text(db, "SELECT topic FROM distribute_unordered_topic WHERE service_name = 'kbs-sync'"), "U");
  EXPECT_EQ(log.Count("TOPIC_UNKNOWN topic=GHOST pending=1"), 1) << log.text();

  const Listed expected = {
      {"unroutable", "A1", ""},        {"held_behind", "A2", "A1"}, {"unknown_topic", "B1", ""},
      {"held_behind", "B2", "B1"},     {"delayed", "C1", ""},       {"held_behind", "C2", "C1"},
      {"held_behind", "C3", "C1"},     {"unroutable", "D1", ""},    {"held_behind", "F2", "F1"},
  };
  EXPECT_EQ(FromView(), expected);
  EXPECT_EQ(FromStore(), expected);  // the CLI's and the API's reads agree with the view
  EXPECT_EQ(ViewDetail("A2"), "held behind A1 (unroutable: no live node serves topic NOSERVE)");
  EXPECT_EQ(ViewDetail("B2"),
            "held behind B1 (unknown_topic: no config of the leading dispatcher defines topic GHOST and no live "
            "node serves it)");
  EXPECT_EQ(ViewDetail("C2").rfind("held behind C1 (delayed: due at ", 0), 0u) << ViewDetail("C2");
  EXPECT_TRUE(ViewDetail("C1").ends_with(" UTC; later events of t1/e3 wait for it")) << ViewDetail("C1");
  EXPECT_EQ(ViewDetail("F2").rfind("held behind F1 (stuck: RUNNING on a:1, no activity since ", 0), 0u);
  for (const auto& a : store.NeedingAttention(100)) {
    if (a.code == "A2") {
      EXPECT_EQ(a.detail, ViewDetail("A2"));
    }
  }
  EXPECT_EQ(Text(db, "SELECT reason FROM v_events_needing_attention WHERE code = 'F1'"), "stuck");

  // /metrics: a gauge per reason.
  const auto counts = store.CountNeedingAttention(10000);
  EXPECT_EQ(counts.at("held_behind"), 5);
  EXPECT_EQ(counts.at("unroutable"), 2);
  EXPECT_EQ(counts.at("unknown_topic"), 1);
  EXPECT_EQ(counts.at("delayed"), 1);
  EXPECT_EQ(counts.at("stuck"), 1);
  EXPECT_EQ(counts.at("no_dispatcher_for_service"), 0);
  EXPECT_EQ(store.CountNeedingAttention(2).at("held_behind"), 2);  // capped
  metrics::TextWriter w;
  api::WriteDatabaseMetrics(store, w);
  EXPECT_NE(w.str().find("dsync_events_needing_attention{reason=\"held_behind\"} 5\n"), std::string::npos) << w.str();
  EXPECT_NE(w.str().find("dsync_events_needing_attention{reason=\"unknown_topic\"} 1\n"), std::string::npos);
  EXPECT_NE(w.str().find("dsync_events_needing_attention{reason=\"failed\"} 0\n"), std::string::npos);
}

TEST_F(AttentionTest, CancelEndsTheBlockerAndTheEventsItHeldAreThenAssigned) {
  const int64_t a1 = AddEvent(db, {.code = "A1", .topic = "GHOST", .data_id = "e1"});
  const int64_t a2 = AddEvent(db, {.code = "A2", .topic = "T", .data_id = "e1"});
  const int64_t c1 = AddEvent(db, {.code = "C1", .topic = "T", .data_id = "e3", .next_run_in_s = 600});
  const int64_t c2 = AddEvent(db, {.code = "C2", .topic = "T", .data_id = "e3"});
  Cycle();
  EXPECT_EQ(StatusOf(db, a2), "PENDING");
  EXPECT_EQ(StatusOf(db, c2), "PENDING");

  testing::LogCapture log;
  api::EventRow e = store.Cancel("A1", "topic GHOST was retired");
  EXPECT_EQ(e.status, "FAILED");
  EXPECT_EQ(e.last_error, "cancelled: topic GHOST was retired");
  EXPECT_EQ(VersionOf(db, a1), 2);
  EXPECT_NE(Text(db, "SELECT process_log FROM distribute_event WHERE code = 'A1'")
                .find("\"why\": \"cancelled by an operator: topic GHOST was retired\""),
            std::string::npos);
  EXPECT_EQ(log.Count("EVENT_CANCELLED event=A1 trace=A1 from=PENDING version=2"), 1) << log.text();
  store.Cancel("C1", "");  // a delayed blocker, no reason given
  EXPECT_EQ(Text(db, "SELECT last_error FROM distribute_event WHERE code = 'C1'"), "cancelled: no reason given");

  Cycle();
  EXPECT_EQ(StatusOf(db, a2), "ASSIGNED");
  EXPECT_EQ(StatusOf(db, c2), "ASSIGNED");
  EXPECT_EQ(StatusOf(db, c1), "FAILED");
  EXPECT_TRUE(FromView().empty());
  // A cancelled event may be retried like any FAILED one.
  EXPECT_EQ(store.Retry("C1", api::RetryFrom::kStart).status, "PENDING");
}

TEST_F(AttentionTest, CancelRefusesWhatStartedOrEndedAndIsFencedByTheVersion) {
  const int64_t running = AddEvent(db, {.code = "R1", .topic = "T", .status = "RUNNING", .node = "a:1"});
  AddEvent(db, {.code = "S1", .topic = "T", .status = "SUCCESS"});
  AddEvent(db, {.code = "P1", .topic = "T"});  // PENDING again after a step ran (a backoff)
  db.Exec("INSERT INTO distribute_event_step (job_code, code, sort, step_name, step_type, status, tenant_id) "
          "VALUES ('P1', 'P1#0', 0, 'x', 'demo', 'SUCCESS', 't1')");
  AddEvent(db, {.code = "K1", .topic = "T", .status = "PENDING", .phase = "COMPENSATE"});
  const int64_t assigned = AddEvent(db, {.code = "Q1", .topic = "T", .status = "ASSIGNED", .node = "a:1"});
  const std::string before = Text(db, "SELECT GROUP_CONCAT(code, status, version ORDER BY id) FROM distribute_event");

  EXPECT_THROW(store.Cancel("R1", "x"), ConflictError);
  EXPECT_THROW(store.Cancel("S1", "x"), ConflictError);
  EXPECT_THROW(store.Cancel("K1", "x"), ConflictError);
  try {
    store.Cancel("P1", "x");
    ADD_FAILURE() << "cancelled an event whose step ran";
  } catch (const ConflictError& e) {
    EXPECT_NE(std::string(e.what()).find("has steps that ran (x (SUCCESS))"), std::string::npos) << e.what();
  }
  try {
    store.Cancel("Q1", "x");
    ADD_FAILURE() << "cancelled an event assigned to a live node (it may be running a deferred first step)";
  } catch (const ConflictError& e) {
    EXPECT_NE(std::string(e.what()).find("is ASSIGNED to live node a:1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store.Cancel("nope", "x"), NotFoundError);
  EXPECT_THROW(store.Cancel("Q1", std::string("bad\x01reason")), UsageError);
  EXPECT_EQ(Text(db, "SELECT GROUP_CONCAT(code, status, version ORDER BY id) FROM distribute_event"), before);

  // The statement itself holds the rules, fenced by the version read: a RUNNING event,
  // an ASSIGNED one whose node is live, and a stale version all match nothing.
  auto cancel = [&](int64_t id, int64_t version) {
    return db.pool().Run("cancel",
                         [&](storage::Connection& c) { return events::CancelEvent(c, id, version, "x", 30s); });
  };
  EXPECT_FALSE(cancel(running, 1));
  EXPECT_FALSE(cancel(assigned, 1));  // a:1 is live
  db.Exec("UPDATE distribute_event SET node_address = 'dead:1', version = 2 WHERE code = 'Q1'");  // its node died
  EXPECT_FALSE(cancel(assigned, 1));  // the version read is stale
  EXPECT_EQ(StatusOf(db, assigned), "ASSIGNED");
  EXPECT_EQ(store.Cancel("Q1", "x").status, "FAILED");  // assigned to a dead node, never claimed: cancellable
}

TEST_F(AttentionTest, EventsOfAServiceNoLiveDispatcherServesAreListed) {
  EXPECT_EQ(db.pool().Run("default", [](storage::Connection& c) { return events::ReadDefaultService(c); }),
            std::optional<std::string>("kbs-sync"));
  // A plain INSERT (the column default's service), and no dispatcher of it leads.
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('t', 'plain-1', 'd', 'T', '{}')");
  lease.Release();
  db.Exec("UPDATE distribute_lease_lock SET expires_at = NOW(3) - INTERVAL 20 SECOND");
  const Listed expected = {{"no_dispatcher_for_service", "plain-1", ""}};
  EXPECT_EQ(FromView(), expected);
  EXPECT_EQ(FromStore(), expected);
  EXPECT_EQ(ViewDetail("plain-1"), "no live dispatcher of service kbs-sync holds its lease (dispatcher:kbs-sync)");
  EXPECT_EQ(store.CountNeedingAttention(100).at("no_dispatcher_for_service"), 1);
  // A dispatcher of kbs-sync leads again: nothing is listed.
  token = *lease.TryAcquire(60s);
  EXPECT_TRUE(FromView().empty());
  EXPECT_TRUE(FromStore().empty());
}

}  // namespace
}  // namespace dsync::dispatcher
