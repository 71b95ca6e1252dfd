// DispatcherService (dispatcher/dispatcher_service.h): real threads, real clock,
// short intervals, against a real MariaDB. Waits are for background progress only,
// never for a timeout to pass.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "app/options.h"
#include "core/clock.h"
#include "dispatcher/dispatcher_service.h"
#include "tests/integration/dispatcher_fixtures.h"
#include "tests/support/eventually.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using namespace fixtures;

// Polls `done` every 5 ms for up to 15 s.
template <class F>
bool Eventually(F done) {
  return testing::Eventually(done, 15s, 5ms);
}

TEST(DispatcherServiceTest, TwoDispatchersAssignEveryEventExactlyOnceWithOneLeaderAtATime) {
  TestSchema db;
  constexpr int kEvents = 2000;
  Settings s = TestSettings();
  s.dispatcher.batch_size = 100;
  // Room for half of the events until more nodes join.
  for (int i = 0; i < 4; ++i) AddNode(db, {.address = "n" + std::to_string(i) + ":1", .capacity = 250});
  AddPendingEvents(db, kEvents, "T", "e");

  SystemClock clock;
  storage::ConnectionPool pool_a(db.url()), pool_b(db.url());
  auto a = std::make_unique<DispatcherService>(pool_a, app::DispatcherOptionsFrom(s), clock, "host-a:1:aaaa");
  auto b = std::make_unique<DispatcherService>(pool_b, app::DispatcherOptionsFrom(s), clock, "host-b:2:bbbb");
  std::atomic<bool> watching{true};
  std::atomic<int> both_leading{0}, samples{0};
  std::thread watcher([&] {
    while (watching) {
      bool la = a->is_leader(), lb = b->is_leader();
      if (la && lb) ++both_leading;
      ++samples;
      std::this_thread::sleep_for(200us);
    }
  });
  a->Start();
  b->Start();

  ASSERT_TRUE(Eventually([&] { return Count(db, "status = 'ASSIGNED'") == kEvents / 2; }));
  DispatcherService* first = a->is_leader() ? a.get() : b.get();
  DispatcherService* second = first == a.get() ? b.get() : a.get();
  EXPECT_FALSE(second->is_leader());
  // The cycle counts a page after it commits it (and may read the next page first).
  EXPECT_TRUE(Eventually([&] { return first->stats().cycle.assigned == static_cast<uint64_t>(kEvents / 2); }))
      << first->stats().cycle.assigned;

  // The leader stops (releasing its lease); more capacity arrives; the other leads.
  first->Stop();
  EXPECT_FALSE(first->is_leader());
  for (int i = 4; i < 8; ++i) AddNode(db, {.address = "n" + std::to_string(i) + ":1", .capacity = 250});
  ASSERT_TRUE(Eventually([&] { return Count(db, "status = 'ASSIGNED'") == kEvents; }));
  EXPECT_TRUE(second->is_leader());
  second->Stop();
  watching = false;
  watcher.join();

  EXPECT_EQ(Count(db, "status = 'ASSIGNED' AND version = 2 AND node_address IS NOT NULL"), kEvents);
  EXPECT_EQ(db.QueryInt("SELECT MAX(c) FROM (SELECT COUNT(*) c FROM distribute_event "
                        "WHERE status = 'ASSIGNED' GROUP BY node_address) t"), 250);
  DispatcherStats sa = a->stats(), sb = b->stats();
  EXPECT_EQ(sa.cycle.assigned + sb.cycle.assigned, static_cast<uint64_t>(kEvents));
  EXPECT_EQ(sa.cycle.lost_races + sb.cycle.lost_races, 0u);
  EXPECT_EQ(sa.cycle.fenced_out + sb.cycle.fenced_out, 0u);
  EXPECT_EQ(sa.lease.acquired, 1u);
  EXPECT_EQ(sb.lease.acquired, 1u);
  EXPECT_EQ(sa.lease.lost + sb.lease.lost, 0u);
  EXPECT_EQ(second->stats().lease.token, first->stats().lease.token + 1);
  EXPECT_EQ(db.QueryInt("SELECT token FROM distribute_lease_lock WHERE lock_name = 'dispatcher:kbs-sync'"), 2);
  EXPECT_EQ(Text(db, "SELECT COALESCE(owner, 'none') FROM distribute_lease_lock"), "none");  // released
  EXPECT_EQ(both_leading.load(), 0) << "of " << samples.load() << " samples";
  EXPECT_GT(samples.load(), 10);
}

TEST(DispatcherServiceTest, TheLeaderSweepsADeadNodeAndRedispatchesItsEvents) {
  TestSchema db;
  Settings s = TestSettings();
  AddNode(db, {.address = "live:1", .capacity = 100});
  AddNode(db, {.address = "dead:1", .capacity = 100, .age_ms = 45000});
  for (int i = 0; i < 10; ++i) {
    AddEvent(db, {.code = "r" + std::to_string(i), .status = i % 2 ? "RUNNING" : "ASSIGNED", .node = "dead:1",
                  .version = i % 2 ? 3 : 2});
  }
  SystemClock clock;
  storage::ConnectionPool pool(db.url());
  DispatcherService service(pool, app::DispatcherOptionsFrom(s), clock, "host-a:1:aaaa");
  service.Start();
  ASSERT_TRUE(Eventually([&] { return Count(db, "status = 'ASSIGNED' AND node_address = 'live:1'") == 10; }));
  service.Stop();
  EXPECT_EQ(Count(db, "code LIKE 'r%' AND last_error = 'reset (not charged): node dead:1 offline'"), 10);
  // The RUNNING ones count a reset, none a retry (a dead node is not a step failing).
  EXPECT_EQ(Count(db, "status = 'ASSIGNED' AND reset_count = 1 AND retry_count = 0"), 5);
  EXPECT_EQ(Count(db, "code LIKE 'r%' AND retry_count = 0"), 10);
  DispatcherStats st = service.stats();
  EXPECT_EQ(st.sweeper.resets_node_offline, 10u);
  EXPECT_EQ(st.sweeper.marked_offline, 1u);
  EXPECT_EQ(st.cycle.assigned, 10u);
  EXPECT_GE(st.sweeper.sweeps, 1u);
  EXPECT_FALSE(st.lease.leader);
  EXPECT_EQ(db.QueryInt("SELECT status FROM distribute_node_registry WHERE node_address = 'dead:1'"), 0);
}

TEST(DispatcherServiceTest, AFollowerNeverDispatches) {
  TestSchema db;
  Settings s = TestSettings();
  AddNode(db, {.address = "live:1", .capacity = 100});
  // Someone else holds the lease for the whole test.
  db.Exec("INSERT INTO distribute_lease_lock (lock_name, owner, token, expires_at) "
          "VALUES ('dispatcher:kbs-sync', 'elsewhere:9:zzzz', 5, NOW(3) + INTERVAL 1 HOUR)");
  AddPendingEvents(db, 10, "T", "e");
  SystemClock clock;
  storage::ConnectionPool pool(db.url());
  DispatcherService service(pool, app::DispatcherOptionsFrom(s), clock);
  service.Start();
  // Several acquire attempts (every lease_ttl / 10 = 300 ms) and dispatch polls pass.
  std::this_thread::sleep_for(700ms);
  EXPECT_FALSE(service.is_leader());
  EXPECT_EQ(Count(db, "status = 'PENDING'"), 10);
  EXPECT_EQ(service.stats().cycle.cycles, 0u);

  // The holder releases: this one takes over with the next token and dispatches.
  db.Exec("UPDATE distribute_lease_lock SET owner = NULL");
  ASSERT_TRUE(Eventually([&] { return Count(db, "status = 'ASSIGNED'") == 10; }));
  EXPECT_EQ(service.stats().lease.token, 6);
  service.Stop();
}

}  // namespace
}  // namespace dsync::dispatcher
