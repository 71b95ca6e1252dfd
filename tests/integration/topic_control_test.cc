// Pause/resume and schedules (issue 37 items 3, 4) against a real MariaDB:
//   - a paused topic's due events are kept out of the dispatcher's pages (a real
//     DispatchCycle under a real lease) while others are assigned; resume lets them go;
//     the pause row is read by a fresh cycle (another dispatcher, a restart) alike;
//   - v_events_needing_attention and the CLI/API reads (events/rows.h) list them with
//     reason `paused`, agree with each other, and hold later events of the entity behind
//     a paused one (held_behind);
//   - the scheduler (control/scheduler.h) on a FakeClock: one event per tick, none on a
//     clock stepped back, the missed-tick policies after a long gap, two schedulers
//     (two would-be leaders) producing each tick once, and a fenced-out scheduler
//     writing nothing.
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "app/options.h"
#include "api/control_store.h"
#include "api/event_store.h"
#include "control/scheduler.h"
#include "control/topic_pause.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/metrics.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/lease_lock.h"
#include "tests/integration/dispatcher_fixtures.h"
#include "tests/support/fake_clock.h"
#include "tests/support/log_capture.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

Settings ControlSettings() {
  Settings s = TestSettings();
  const StepSpec demo{.name = "x", .type = "demo"};
  s.topics["T"].steps = {demo};
  s.topics["U"].steps = {demo};
  s.topics["NIGHTLY"].steps = {demo};
  s.topics["NIGHTLY"].priority = 3;
  return s;
}

class TopicPauseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token = *lease.TryAcquire(60s);
    AddNode(db, {.address = "a:1", .capacity = 50});
  }

  // A fresh DispatchCycle each time when `fresh` (a restarted or another dispatcher).
  CycleResult Cycle(bool fresh = false) {
    CycleOptions o;
    o.service = settings.service;
    o.offline_timeout = settings.registry.offline_timeout;
    if (!cycle || fresh) cycle.emplace(db.pool(), clock, app::PlannerConfigFrom(settings), o);
    return cycle->RunOnce(lease.Fence(token));
  }

  std::set<std::tuple<std::string, std::string, std::string>> FromView() {
    std::set<std::tuple<std::string, std::string, std::string>> out;
    db.pool().Run("view", [&](storage::Connection& c) {
      out.clear();
      auto rs = c.Query("SELECT reason, code, IFNULL(blocker_code, '') FROM v_events_needing_attention "
                        "WHERE status = 'PENDING'");
      while (rs->next()) out.emplace(rs->getString(1), rs->getString(2), rs->getString(3));
    });
    return out;
  }

  std::set<std::tuple<std::string, std::string, std::string>> FromStore() {
    std::set<std::tuple<std::string, std::string, std::string>> out;
    for (const auto& a : store.NeedingAttention(100)) {
      if (a.status == "PENDING") out.emplace(a.reason, a.code, a.blocker_code);
    }
    return out;
  }

  TestSchema db;
  SystemClock clock;
  Settings settings = ControlSettings();
  LeaseLock lease{db.pool(), DispatcherLockName(kService), "me:1:aaaa"};
  int64_t token = 0;
  std::optional<DispatchCycle> cycle;
  api::EventStore store{db.pool(), app::StoreOptionsFrom(settings)};
  api::ControlStore control{db.pool(), app::StoreOptionsFrom(settings), clock};
};

TEST_F(TopicPauseTest, APausedTopicIsNotAssignedUntilResumedWhateverDispatcherLooks) {
  testing::LogCapture log;
  AddPendingEvents(db, 5, "T", "t");
  AddPendingEvents(db, 3, "U", "u");
  const api::PauseResult p = control.Pause("T", "alice@ops", "maintenance window");
  EXPECT_TRUE(p.created);
  EXPECT_EQ(p.pause.paused_by, "alice@ops");
  EXPECT_EQ(p.pause.reason, "maintenance window");
  EXPECT_EQ(p.pause.paused_at.size(), 24u) << p.pause.paused_at;  // 2026-11-27T19:20:00.123Z

  CycleResult r = Cycle();
  EXPECT_EQ(r.assigned, 3);
  EXPECT_EQ(Count(db, "topic = 'U' AND status = 'ASSIGNED'"), 3);
  EXPECT_EQ(Count(db, "topic = 'T' AND status = 'PENDING'"), 5);
  EXPECT_EQ(log.Count("DISPATCH_PAUSED_TOPICS service=kbs-sync paused=T resumed=- now=T"), 1) << log.text();
  // A restarted (or another) dispatcher reads the same row.
  EXPECT_EQ(Cycle(/*fresh=*/true).assigned, 0);
  EXPECT_EQ(Count(db, "topic = 'T' AND status = 'PENDING'"), 5);

  // A second pause keeps the first one's author, time and reason.
  const api::PauseResult again = control.Pause("T", "bob@ops", "other");
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.pause.paused_by, "alice@ops");
  EXPECT_EQ(again.pause.paused_at, p.pause.paused_at);

  // dsync topics / GET /v1/topics.
  bool seen = false;
  for (const api::TopicRow& t : control.Topics()) {
    if (t.topic != "T") continue;
    seen = true;
    EXPECT_TRUE(t.configured);
    EXPECT_EQ(t.pending, 5);
    ASSERT_TRUE(t.pause);
    EXPECT_EQ(t.pause->paused_by, "alice@ops");
  }
  EXPECT_TRUE(seen);

  const api::ResumeResult resumed = control.Resume("T");
  ASSERT_TRUE(resumed.ended);
  EXPECT_EQ(resumed.ended->paused_by, "alice@ops");
  EXPECT_FALSE(control.Resume("T").ended);  // idempotent: not paused any more
  EXPECT_EQ(Cycle().assigned, 5);
  EXPECT_EQ(log.Count("DISPATCH_PAUSED_TOPICS service=kbs-sync paused=- resumed=T now=-"), 1) << log.text();
}

TEST_F(TopicPauseTest, APauseIsPerServiceAndRefusesMalformedNames) {
  AddPendingEvents(db, 2, "T", "t");
  db.pool().Transact("pause", [&](storage::Connection& c) {
    return control::PauseTopic(c, "other-service", "T", "x", "");
  });
  EXPECT_EQ(Cycle().assigned, 2);  // another service's pause does not hold this one
  EXPECT_THROW(control.Pause("", "x", ""), UsageError);
  EXPECT_THROW(control.Pause("a,b", "x", ""), UsageError);
  EXPECT_THROW(control.Pause(std::string(51, 'a'), "x", ""), UsageError);
  EXPECT_THROW(control.Pause("T", "", ""), UsageError);
  EXPECT_THROW(control.Pause("T", "x", "bell\x07"), UsageError);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM dsync_topic_pause WHERE service = 'kbs-sync'"), 0);
}

TEST_F(TopicPauseTest, PausedEventsNeedAttentionWithWhoAndWhyAndHoldTheirEntity) {
  AddEvent(db, {.code = "P1", .topic = "T", .data_id = "e1"});
  AddEvent(db, {.code = "P2", .topic = "U", .data_id = "e1"});  // held behind P1 (ordered)
  AddEvent(db, {.code = "P3", .topic = "T", .data_id = "e2", .next_run_in_s = 600});  // not due: paused too
  AddEvent(db, {.code = "Q1", .topic = "U", .data_id = "e3"});
  control.Pause("T", "alice@ops", "maintenance");
  Cycle();
  EXPECT_EQ(Count(db, "code = 'Q1' AND status = 'ASSIGNED'"), 1);
  const std::set<std::tuple<std::string, std::string, std::string>> expected = {
      {"paused", "P1", ""}, {"held_behind", "P2", "P1"}, {"paused", "P3", ""}};
  EXPECT_EQ(FromView(), expected);
  EXPECT_EQ(FromStore(), expected);
  const std::string detail = Text(db, "SELECT detail FROM v_events_needing_attention WHERE code = 'P1'");
  EXPECT_EQ(detail.rfind("topic T paused by alice@ops at ", 0), 0u) << detail;
  EXPECT_TRUE(detail.ends_with(" UTC: maintenance")) << detail;
  EXPECT_EQ(Text(db, "SELECT detail FROM v_events_needing_attention WHERE code = 'P2'"),
            "held behind P1 (paused: topic T paused by alice@ops)");
  for (const auto& a : store.NeedingAttention(100)) {
    if (a.code == "P1") {
      EXPECT_EQ(a.detail, detail);
    }
    if (a.code == "P2") {
      EXPECT_EQ(a.detail, "held behind P1 (paused: topic T paused by alice@ops)");
    }
  }
  EXPECT_EQ(store.CountNeedingAttention(1000).at("paused"), 2);

  control.Resume("T");
  Cycle();
  EXPECT_EQ(Count(db, "code = 'P1' AND status = 'ASSIGNED'"), 1);
  EXPECT_TRUE(FromView().empty());  // P2 now waits behind an assigned event; P3 holds nothing
}

// ---- schedules ---------------------------------------------------------------------

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() {
    settings = ControlSettings();
    ScheduleSettings s;
    s.cron = "*/5 * * * *";
    s.topic = "NIGHTLY";
    s.payload = {{"scope", "all"}};
    settings.schedules["every5"] = s;
  }

  int64_t Events() { return Count(db, "topic = 'NIGHTLY'"); }

  TestSchema db;
  FakeClock clock;  // WallNow starts at 2026-01-01T00:00:00Z
  Settings settings;
};

TEST_F(SchedulerTest, OneEventPerTickNoneAfterAClockStepBack) {
  testing::LogCapture log;
  control::Scheduler scheduler(db.pool(), app::SchedulerOptionsFrom(settings), clock);
  EXPECT_EQ(scheduler.RunOnce(std::nullopt), 0);  // a new schedule starts at its next tick
  EXPECT_EQ(Text(db, "SELECT next_tick FROM dsync_schedule WHERE name = 'every5'"), "2026-01-01 00:05:00");
  clock.Advance(4min + 59s);
  EXPECT_EQ(scheduler.RunOnce(std::nullopt), 0);
  clock.Advance(2s);  // 00:05:01
  EXPECT_EQ(scheduler.RunOnce(std::nullopt), 1);
  EXPECT_EQ(scheduler.RunOnce(std::nullopt), 0);
  EXPECT_EQ(Events(), 1);
  const std::string code = "sched:kbs-sync:every5:" + std::to_string(1767225600 + 300);
  EXPECT_EQ(Count(db, "code = '" + code + "' AND status = 'PENDING' AND tenant_id = '0' AND data_id = 'every5' "
                      "AND priority = 3 AND trace_id = '" + code + "'"), 1);
  EXPECT_EQ(nlohmann::json::parse(Text(db, "SELECT payload FROM distribute_event WHERE code = '" + code + "'")),
            nlohmann::json({{"scope", "all"}, {"schedule", {{"name", "every5"}, {"tick", "2026-01-01T00:05:00Z"}}}}));
  EXPECT_EQ(log.Count("SCHEDULE_FIRED schedule=every5 service=kbs-sync tick=2026-01-01T00:05:00Z event=" + code), 1)
      << log.text();

  // The clock steps back 12 minutes (to 23:53:01 the day before), then runs forward again:
  // the 00:00 and 00:05 ticks are not fired again.
  clock.StepWall(-12min);
  for (int i = 0; i < 12; ++i) {
    EXPECT_EQ(scheduler.RunOnce(std::nullopt), 0);
    clock.Advance(1min);
  }
  EXPECT_EQ(Events(), 1);
  clock.Advance(3min);  // 00:08:01 on the stepped clock... then on to 00:10:01
  clock.Advance(2min);
  EXPECT_EQ(scheduler.RunOnce(std::nullopt), 1);
  EXPECT_EQ(Events(), 2);
  EXPECT_EQ(Text(db, "SELECT last_tick FROM dsync_schedule WHERE name = 'every5'"), "2026-01-01 00:10:00");
  EXPECT_EQ(Text(db, "SELECT next_tick FROM dsync_schedule WHERE name = 'every5'"), "2026-01-01 00:15:00");
  EXPECT_EQ(db.QueryInt("SELECT skipped_ticks FROM dsync_schedule WHERE name = 'every5'"), 0);
}

TEST_F(SchedulerTest, MissedTicksAfterALongGapFollowThePolicy) {
  settings.schedules["run-once"] = settings.schedules["every5"];
  settings.schedules["run-once"].missed = MissedTickPolicy::kRunOnce;
  control::Scheduler scheduler(db.pool(), app::SchedulerOptionsFrom(settings), clock);
  scheduler.RunOnce(std::nullopt);  // both start at 00:05
  clock.Advance(1h + 2min);         // 01:02: ticks 00:05 ... 01:00 (12) passed unseen
  EXPECT_EQ(scheduler.RunOnce(std::nullopt), 1);
  // skip: nothing (the latest, 01:00, is 2 min late, beyond the 60 s grace); all 12 skipped.
  EXPECT_EQ(Count(db, "data_id = 'every5'"), 0);
  EXPECT_EQ(db.QueryInt("SELECT skipped_ticks FROM dsync_schedule WHERE name = 'every5'"), 12);
  // run_once: one event for 01:00; the 11 before it skipped.
  EXPECT_EQ(Count(db, "data_id = 'run-once' AND code = 'sched:kbs-sync:run-once:" +
                          std::to_string(1767225600 + 3600) + "'"), 1);
  EXPECT_EQ(db.QueryInt("SELECT skipped_ticks FROM dsync_schedule WHERE name = 'run-once'"), 11);
  EXPECT_EQ(Text(db, "SELECT next_tick FROM dsync_schedule WHERE name = 'every5'"), "2026-01-01 01:05:00");
  EXPECT_EQ(scheduler.stats().skipped, 23u);
  metrics::TextWriter w;
  control::WriteMetrics(scheduler.stats(), w);
  EXPECT_NE(w.str().find("dsync_schedule_ticks_total{outcome=\"fired\"} 1\n"), std::string::npos) << w.str();
  EXPECT_NE(w.str().find("dsync_schedule_ticks_total{outcome=\"skipped\"} 23\n"), std::string::npos) << w.str();
}

TEST_F(SchedulerTest, TwoWouldBeLeadersProduceEachTickOnceAndAFencedOutOneNothing) {
  control::Scheduler a(db.pool(), app::SchedulerOptionsFrom(settings), clock);
  control::Scheduler b(db.pool(), app::SchedulerOptionsFrom(settings), clock);
  a.RunOnce(std::nullopt);
  b.RunOnce(std::nullopt);
  for (int i = 0; i < 6; ++i) {  // six ticks, both look at each
    clock.Advance(5min);
    a.RunOnce(std::nullopt);
    b.RunOnce(std::nullopt);
  }
  EXPECT_EQ(Events(), 6);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(DISTINCT code) FROM distribute_event WHERE topic = 'NIGHTLY'"), 6);
  EXPECT_EQ(a.stats().fired + b.stats().fired, 6u);

  // A process whose lease is gone writes nothing: neither event nor state.
  LeaseLock leader{db.pool(), DispatcherLockName(kService), "leader:1:aaaa"};
  const int64_t token = *leader.TryAcquire(60s);
  LeaseLock stale{db.pool(), DispatcherLockName(kService), "stale:2:bbbb"};
  const std::string next = Text(db, "SELECT next_tick FROM dsync_schedule WHERE name = 'every5'");
  clock.Advance(5min);
  EXPECT_EQ(b.RunOnce(stale.Fence(token + 1)), 0);
  EXPECT_EQ(Events(), 6);
  EXPECT_EQ(Text(db, "SELECT next_tick FROM dsync_schedule WHERE name = 'every5'"), next);
  EXPECT_EQ(a.RunOnce(leader.Fence(token)), 1);  // the holder does
  EXPECT_EQ(Events(), 7);
}

TEST_F(SchedulerTest, AChangedExpressionStartsOverAndTheListingShowsNextAndLastRuns) {
  {
    control::Scheduler s(db.pool(), app::SchedulerOptionsFrom(settings), clock);
    s.RunOnce(std::nullopt);
    clock.Advance(5min);
    EXPECT_EQ(s.RunOnce(std::nullopt), 1);
  }
  api::ControlStore control(db.pool(), app::StoreOptionsFrom(settings), clock);
  std::vector<api::ScheduleRow> rows = control.Schedules();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].name, "every5");
  EXPECT_TRUE(rows[0].has_state);
  EXPECT_EQ(rows[0].next_tick, "2026-01-01T00:10:00.000Z");
  EXPECT_EQ(rows[0].last_tick, "2026-01-01T00:05:00.000Z");
  EXPECT_EQ(rows[0].last_event_code, "sched:kbs-sync:every5:1767225900");
  EXPECT_FALSE(rows[0].last_run_at.empty());

  settings.schedules["every5"].cron = "0 * * * *";  // now hourly: starts over at 01:00
  control::Scheduler s(db.pool(), app::SchedulerOptionsFrom(settings), clock);
  clock.Advance(5min);  // 00:10: the old expression's tick; the new one has none until 01:00
  EXPECT_EQ(s.RunOnce(std::nullopt), 0);
  EXPECT_EQ(Text(db, "SELECT next_tick FROM dsync_schedule WHERE name = 'every5'"), "2026-01-01 01:00:00");
  EXPECT_EQ(Text(db, "SELECT cron FROM dsync_schedule WHERE name = 'every5'"), "0 * * * *");
  EXPECT_EQ(Events(), 1);
}

TEST_F(SchedulerTest, NoProducerTakesATicksCodeThroughTheApiOrTheCli) {
  api::EventStore store(db.pool(), app::StoreOptionsFrom(settings));
  api::NewEvent e;
  e.code = "sched:kbs-sync:every5:1767225900";
  e.topic = "NIGHTLY";
  e.tenant_id = "0";
  e.data_id = "x";
  try {
    store.Produce(e);
    ADD_FAILURE() << "a tick's code was taken";
  } catch (const UsageError& err) {
    EXPECT_EQ(std::string(err.what()),
              "code 'sched:kbs-sync:every5:1767225900' starts with 'sched:', which is reserved for scheduled events "
              "(config schedules)");
  }
  EXPECT_EQ(Events(), 0);
}

TEST(ScheduleEventCodeTest, NamesServiceScheduleAndTickOrHashesWhenLong) {
  const control::WallTime tick{std::chrono::seconds(1767225900)};
  EXPECT_EQ(control::ScheduleEventCode("kbs-sync", "nightly", tick), "sched:kbs-sync:nightly:1767225900");
  const std::string long_code = control::ScheduleEventCode(std::string(60, 's'), "nightly", tick);
  EXPECT_EQ(long_code.rfind("sched:~", 0), 0u);
  EXPECT_TRUE(long_code.ends_with(":1767225900"));
  EXPECT_LE(long_code.size(), 64u);
  EXPECT_NE(control::ScheduleEventCode("a:b", "c", tick), control::ScheduleEventCode("a", "b:c", tick));
}

}  // namespace
}  // namespace dsync::dispatcher
