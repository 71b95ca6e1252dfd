#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "core/error.h"
#include "registry/heartbeat_publisher.h"
#include "registry/node_directory.h"
#include "registry/node_metadata.h"
#include "registry/offline_sweeper.h"
#include "storage/migrator.h"
#include "tests/support/eventually.h"
#include "tests/support/fake_clock.h"
#include "tests/support/log_capture.h"
#include "tests/support/test_db.h"

namespace dsync::registry {
namespace {

using namespace std::chrono_literals;
using testing::TestSchema;

constexpr const char* kService = "kbs-sync";

NodeMetadata Meta(const std::string& incarnation, int capacity = 4) {
  NodeMetadata md;
  md.version = "test";
  md.capacity = capacity;
  md.host = "test-host";
  md.pid = 1;
  md.incarnation = incarnation;
  return md;
}

std::optional<std::string> QueryString(TestSchema& db, const std::string& sql) {
  return db.pool().Run("test query", [&](storage::Connection& c) { return c.QueryString(sql); });
}

int64_t StatusOf(TestSchema& db, const std::string& address) {
  return db.QueryInt("SELECT status FROM distribute_node_registry WHERE node_address = '" +
                     address + "'");
}

// A registry row written directly, its heartbeat `age_ms` in the past on the
// database clock. `metadata_sql` is an SQL literal ('...' or NULL).
void InsertRow(TestSchema& db, const std::string& service, const std::string& address, int status,
               int64_t age_ms, const std::string& metadata_sql = "'{}'") {
  db.Exec("INSERT INTO distribute_node_registry (service_name, node_address, status, "
          "last_heartbeat_time, metadata) VALUES ('" + service + "', '" + address + "', " +
          std::to_string(status) + ", NOW(3) - INTERVAL " + std::to_string(age_ms * 1000) +
          " MICROSECOND, " + metadata_sql + ")");
}

// Staleness is produced by moving last_heartbeat_time into the past on the database
// clock, never by sleeping.
void AgeHeartbeat(TestSchema& db, const std::string& address, int seconds) {
  db.Exec("UPDATE distribute_node_registry SET last_heartbeat_time = NOW(3) - INTERVAL " +
          std::to_string(seconds) + " SECOND WHERE node_address = '" + address + "'");
}

using testing::Eventually;  // every 10 ms for up to 10 s
using testing::LogCapture;

std::vector<std::string> Addresses(const std::vector<NodeInfo>& nodes) {
  std::vector<std::string> out;
  for (const auto& n : nodes) out.push_back(n.node_address);
  return out;
}

TEST(RegistryTest, UpsertKeepsOneRowWithNewestMetadataAndHeartbeat) {
  TestSchema db;
  FakeClock clock;
  int capacity = 4;
  HeartbeatPublisher pub(db.pool(), clock, kService, "a:1", 1000ms,
                         [&] { return Meta("inc-1", capacity); });

  EXPECT_EQ(pub.Beat(), NodeStatus::kOnline);
  const std::string kTimeMs =
      "SELECT CAST(UNIX_TIMESTAMP(last_heartbeat_time) * 1000 AS SIGNED) "
      "FROM distribute_node_registry WHERE node_address = 'a:1'";
  int64_t first_ms = db.QueryInt(kTimeMs);

  capacity = 16;
  EXPECT_EQ(pub.Beat(), NodeStatus::kOnline);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 1);
  EXPECT_GE(db.QueryInt(kTimeMs), first_ms);
  auto text = QueryString(db, "SELECT metadata FROM distribute_node_registry");
  ASSERT_TRUE(text.has_value());
  EXPECT_EQ(*text, Meta("inc-1", 16).ToJson());
  EXPECT_EQ(ParseNodeMetadata(text).metadata.capacity, 16);
  EXPECT_EQ(QueryString(db, "SELECT incarnation FROM distribute_node_registry"), "inc-1");
  EXPECT_EQ(QueryString(db, "SELECT service_name FROM distribute_node_registry"), kService);

  // A beat moves an old heartbeat to the database's now.
  AgeHeartbeat(db, "a:1", 60);
  pub.Beat();
  EXPECT_LT(db.QueryInt("SELECT TIMESTAMPDIFF(MICROSECOND, last_heartbeat_time, NOW(3)) "
                        "FROM distribute_node_registry"),
            5'000'000);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 1);
  EXPECT_EQ(pub.stats().beats, 3u);
  EXPECT_EQ(pub.stats().failures, 0u);
}

TEST(RegistryTest, ConcurrentHeartbeatsLoseNoUpdate) {
  TestSchema db;
  constexpr int kNodes = 20, kThreads = 50, kBeatsPerThread = 40;
  storage::PoolOptions options;
  options.max_size = 32;
  storage::ConnectionPool pool(db.url(), options);
  SystemClock clock;

  struct Node {
    std::mutex mu;  // serialises the node's beats so "last" is well defined
    int seq = 0;
    std::string last_json;
    std::unique_ptr<HeartbeatPublisher> pub;
  };
  std::array<Node, kNodes> nodes;
  for (int i = 0; i < kNodes; ++i) {
    Node& n = nodes[i];
    // Called by Beat() with n.mu held by the beating thread.
    n.pub = std::make_unique<HeartbeatPublisher>(
        pool, clock, kService, "10.0.0." + std::to_string(i) + ":7001", 1000ms, [&n, i] {
          NodeMetadata md = Meta("inc-" + std::to_string(i), 8);
          md.processing_count = n.seq;
          md.load = n.seq / 8.0;
          n.last_json = md.ToJson();
          return md;
        });
  }

  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int j = 0; j < kBeatsPerThread; ++j) {
        Node& n = nodes[(t + j) % kNodes];
        std::lock_guard lock(n.mu);
        ++n.seq;
        try {
          n.pub->Beat();
        } catch (const std::exception& e) {
          ++failures;
          ADD_FAILURE() << e.what();
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), kNodes);
  for (int i = 0; i < kNodes; ++i) {
    Node& n = nodes[i];
    EXPECT_EQ(n.seq, kThreads * kBeatsPerThread / kNodes);
    auto text = QueryString(db, "SELECT metadata FROM distribute_node_registry WHERE node_address = "
                                "'10.0.0." + std::to_string(i) + ":7001'");
    ASSERT_TRUE(text.has_value()) << i;
    EXPECT_EQ(*text, n.last_json) << "node " << i;
    EXPECT_EQ(ParseNodeMetadata(text).metadata.processing_count, n.seq);
    EXPECT_EQ(n.pub->stats().beats, static_cast<uint64_t>(n.seq));
    EXPECT_EQ(n.pub->stats().failures, 0u);
  }
}

TEST(RegistryTest, SweeperMarksOnlyStaleNodesOfflineByDatabaseClock) {
  TestSchema db;
  InsertRow(db, kService, "fresh:1", 1, 0);
  InsertRow(db, kService, "almost:1", 1, 29'000);
  InsertRow(db, kService, "stale:1", 1, 31'000);
  InsertRow(db, kService, "draining-stale:1", 2, 31'000);
  InsertRow(db, kService, "gone:1", 0, 60'000);
  InsertRow(db, "other-service", "other:1", 1, 40'000);

  OfflineSweeper sweeper(db.pool(), kService, 30'000ms, 24h);
  EXPECT_EQ(sweeper.MarkOffline(), 2u);
  EXPECT_EQ(StatusOf(db, "fresh:1"), 1);
  EXPECT_EQ(StatusOf(db, "almost:1"), 1);
  EXPECT_EQ(StatusOf(db, "stale:1"), 0);
  EXPECT_EQ(StatusOf(db, "draining-stale:1"), 0);
  EXPECT_EQ(StatusOf(db, "gone:1"), 0);
  EXPECT_EQ(StatusOf(db, "other:1"), 1);  // another service's: its own leader judges it
  EXPECT_EQ(sweeper.MarkOffline(), 0u);  // repeating a sweep changes nothing
  EXPECT_EQ(OfflineSweeper(db.pool(), "other-service", 30'000ms, 24h).MarkOffline(), 1u);
  EXPECT_EQ(StatusOf(db, "other:1"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 6);
}

TEST(RegistryTest, ConcurrentSweepersEachMarkANodeOnce) {
  TestSchema db;
  constexpr int kStale = 60, kSweepers = 4;
  for (int i = 0; i < kStale; ++i) InsertRow(db, kService, "n" + std::to_string(i) + ":1", 1, 45'000);
  InsertRow(db, kService, "fresh:1", 1, 0);

  std::vector<std::unique_ptr<storage::ConnectionPool>> pools;
  std::atomic<uint64_t> marked{0};
  std::vector<std::thread> threads;
  for (int s = 0; s < kSweepers; ++s) pools.push_back(std::make_unique<storage::ConnectionPool>(db.url()));
  for (int s = 0; s < kSweepers; ++s) {
    threads.emplace_back([&, s] {
      OfflineSweeper sweeper(*pools[s], kService, 30'000ms, 24h);
      marked += sweeper.Sweep().marked_offline;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(marked.load(), static_cast<uint64_t>(kStale));
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry WHERE status = 0"), kStale);
  EXPECT_EQ(StatusOf(db, "fresh:1"), 1);
}

TEST(RegistryTest, PurgeDeletesOnlyRowsOlderThanPurgeAfter) {
  TestSchema db;
  InsertRow(db, kService, "ancient-offline:1", 0, 2 * 3600'000);
  InsertRow(db, kService, "ancient-online:1", 1, 2 * 3600'000);
  InsertRow(db, "other-service", "ancient-other:1", 0, 3 * 3600'000);
  InsertRow(db, kService, "recent-offline:1", 0, 1800'000);
  InsertRow(db, kService, "fresh:1", 1, 0);

  OfflineSweeper sweeper(db.pool(), kService, 30'000ms, 1h);
  EXPECT_EQ(sweeper.Purge(), 2u);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 3);  // the other service's stays
  EXPECT_EQ(OfflineSweeper(db.pool(), "other-service", 30'000ms, 1h).Purge(), 1u);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 2);
  EXPECT_EQ(StatusOf(db, "recent-offline:1"), 0);
  EXPECT_EQ(StatusOf(db, "fresh:1"), 1);
  EXPECT_EQ(sweeper.Purge(), 0u);

  SweepResult r = OfflineSweeper(db.pool(), kService, 30'000ms, 10min).Sweep();
  EXPECT_EQ(r.marked_offline, 0u);
  EXPECT_EQ(r.purged, 1u);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 1);
}

TEST(RegistryTest, DrainingIsStickyWithinAnIncarnationOnly) {
  TestSchema db;
  FakeClock clock;
  HeartbeatPublisher old_process(db.pool(), clock, kService, "a:1", 1000ms,
                                 [] { return Meta("host:100:1"); });
  EXPECT_EQ(old_process.Beat(), NodeStatus::kOnline);
  EXPECT_FALSE(old_process.draining());

  old_process.MarkDraining();
  EXPECT_TRUE(old_process.draining());
  EXPECT_EQ(StatusOf(db, "a:1"), 2);
  EXPECT_EQ(old_process.Beat(), NodeStatus::kDraining);
  EXPECT_EQ(old_process.Beat(), NodeStatus::kDraining);
  EXPECT_EQ(StatusOf(db, "a:1"), 2);

  // A restart under the same address starts online.
  HeartbeatPublisher new_process(db.pool(), clock, kService, "a:1", 1000ms,
                                 [] { return Meta("host:200:2"); });
  EXPECT_EQ(new_process.Beat(), NodeStatus::kOnline);
  EXPECT_EQ(StatusOf(db, "a:1"), 1);
  EXPECT_EQ(QueryString(db, "SELECT incarnation FROM distribute_node_registry"), "host:200:2");

  // An operator's drain is reported by the next beat and sticks.
  db.Exec("UPDATE distribute_node_registry SET status = 2 WHERE node_address = 'a:1'");
  EXPECT_FALSE(new_process.draining());
  EXPECT_EQ(new_process.Beat(), NodeStatus::kDraining);
  EXPECT_TRUE(new_process.draining());
  EXPECT_EQ(new_process.Beat(), NodeStatus::kDraining);
  EXPECT_EQ(StatusOf(db, "a:1"), 2);

  // The old incarnation's shutdown leaves the new one's row alone.
  old_process.MarkOffline();
  EXPECT_EQ(StatusOf(db, "a:1"), 2);
  new_process.MarkOffline();
  EXPECT_EQ(StatusOf(db, "a:1"), 0);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 1);
}

TEST(RegistryTest, NodeSweptOfflineComesBackAtItsNextBeat) {
  TestSchema db;
  FakeClock clock;
  HeartbeatPublisher pub(db.pool(), clock, kService, "a:1", 1000ms, [] { return Meta("inc-1"); });
  pub.Beat();
  AgeHeartbeat(db, "a:1", 40);
  EXPECT_EQ(OfflineSweeper(db.pool(), kService, 30'000ms, 24h).MarkOffline(), 1u);
  EXPECT_EQ(StatusOf(db, "a:1"), 0);
  EXPECT_EQ(pub.Beat(), NodeStatus::kOnline);
  EXPECT_EQ(StatusOf(db, "a:1"), 1);
}

TEST(RegistryTest, MalformedMetadataIsReadAsDefaultsAndReportedOnce) {
  TestSchema db;
  InsertRow(db, kService, "bad-text:1", 1, 0, "'not json'");
  InsertRow(db, kService, "bad-capacity:1", 1, 0, R"('{"capacity":"x"}')");
  InsertRow(db, kService, "null:1", 1, 0, "NULL");
  InsertRow(db, kService, "good:1", 1, 0, R"('{"capacity":3,"topics":["SPACE_ADD"]}')");

  LogCapture log;
  NodeDirectory directory(db.pool(), kService, 30'000ms);
  std::vector<NodeInfo> nodes;
  ASSERT_NO_THROW(nodes = directory.LiveNodes());
  ASSERT_EQ(Addresses(nodes),
            (std::vector<std::string>{"bad-capacity:1", "bad-text:1", "good:1", "null:1"}));
  for (const auto& n : nodes) {
    if (n.node_address == "good:1") {
      EXPECT_TRUE(n.metadata_valid);
      EXPECT_EQ(n.metadata.capacity, 3);
      EXPECT_TRUE(n.metadata.ServesTopic("SPACE_ADD"));
      EXPECT_FALSE(n.metadata.ServesTopic("OTHER"));
    } else {
      EXPECT_FALSE(n.metadata_valid) << n.node_address;
      EXPECT_EQ(n.metadata.capacity, 1) << n.node_address;
      EXPECT_TRUE(n.metadata.ServesTopic("ANY_TOPIC")) << n.node_address;
      EXPECT_EQ(n.status, NodeStatus::kOnline);
    }
  }
  EXPECT_EQ(log.Count("NODE_METADATA_INVALID"), 3);

  directory.LiveNodes();
  directory.AllNodes();
  EXPECT_EQ(log.Count("NODE_METADATA_INVALID"), 3);  // once per node and problem

  // Repaired, then broken again: reported again.
  db.Exec(R"(UPDATE distribute_node_registry SET metadata = '{"capacity":2}' WHERE node_address = 'null:1')");
  directory.LiveNodes();
  db.Exec("UPDATE distribute_node_registry SET metadata = NULL WHERE node_address = 'null:1'");
  directory.LiveNodes();
  EXPECT_EQ(log.Count("NODE_METADATA_INVALID node=null:1"), 2);
}

TEST(RegistryTest, LiveNodesExcludesOfflineAndStaleIncludesDraining) {
  TestSchema db;
  FakeClock clock;
  HeartbeatPublisher online(db.pool(), clock, kService, "a:1", 1000ms, [] { return Meta("a", 6); });
  online.Beat();
  InsertRow(db, kService, "b-offline:1", 0, 0);
  InsertRow(db, kService, "c-stale:1", 1, 60'000);
  HeartbeatPublisher draining(db.pool(), clock, kService, "d:1", 1000ms, [] { return Meta("d"); });
  draining.MarkDraining();
  InsertRow(db, kService, "e-aged:1", 1, 0);
  AgeHeartbeat(db, "e-aged:1", 5);
  InsertRow(db, "other-service", "f-other:1", 1, 0);

  NodeDirectory directory(db.pool(), kService, 30'000ms);
  std::vector<NodeInfo> live = directory.LiveNodes();
  ASSERT_EQ(Addresses(live), (std::vector<std::string>{"a:1", "d:1", "e-aged:1"}));
  EXPECT_EQ(live[0].status, NodeStatus::kOnline);
  EXPECT_EQ(live[0].metadata.capacity, 6);
  EXPECT_EQ(live[0].metadata.incarnation, "a");
  EXPECT_TRUE(live[0].metadata_valid);
  EXPECT_LT(live[0].heartbeat_age, 5000ms);
  EXPECT_EQ(live[1].status, NodeStatus::kDraining);
  EXPECT_GE(live[2].heartbeat_age, 4500ms);
  EXPECT_LE(live[2].heartbeat_age, 20000ms);

  std::vector<NodeInfo> all = directory.AllNodes();
  ASSERT_EQ(Addresses(all),
            (std::vector<std::string>{"a:1", "b-offline:1", "c-stale:1", "d:1", "e-aged:1"}));
  EXPECT_EQ(all[1].status, NodeStatus::kOffline);
  EXPECT_EQ(all[2].status, NodeStatus::kOnline);
  EXPECT_GE(all[2].heartbeat_age, 59'000ms);

  // A shorter timeout, judged by the same database clock, drops the aged node.
  EXPECT_EQ(Addresses(NodeDirectory(db.pool(), kService, 2000ms).LiveNodes()),
            (std::vector<std::string>{"a:1", "d:1"}));
}

TEST(RegistryTest, FailedBeatThrowsDbErrorAndIsCounted) {
  TestSchema db;
  storage::DbUrl bad = db.url();
  bad.password = "not-the-password";
  storage::ConnectionPool pool(bad);
  FakeClock clock;
  HeartbeatPublisher pub(pool, clock, kService, "a:1", 1000ms, [] { return Meta("inc-1"); });
  try {
    pub.Beat();
    ADD_FAILURE() << "Beat() succeeded with a wrong password";
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::kAccessDenied) << e.what();
    EXPECT_EQ(std::string(e.what()).find("not-the-password"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pub.stats().failures, 1u);
  EXPECT_EQ(pub.stats().beats, 0u);
  EXPECT_THROW(pub.MarkDraining(), DbError);
  EXPECT_TRUE(pub.draining());  // kept for the next beat
}

TEST(RegistryTest, BackgroundBeatsSurviveFailuresAndRecover) {
  TestSchema db(/*migrate=*/false);  // no registry table yet: every beat fails
  LogCapture log;  // outlives the publisher's thread
  SystemClock clock;
  HeartbeatPublisher pub(db.pool(), clock, kService, "a:1", 50ms, [] { return Meta("inc-1"); });
  pub.Start();
  pub.Start();  // already running: no second thread
  EXPECT_TRUE(Eventually([&] { return pub.stats().failures >= 2; }));
  EXPECT_EQ(pub.stats().beats, 0u);

  storage::Migrator(db.pool()).Migrate();
  EXPECT_TRUE(Eventually([&] { return pub.stats().beats >= 1; }));
  pub.Stop();
  pub.Stop();  // idempotent
  EXPECT_EQ(db.QueryInt("SELECT status FROM distribute_node_registry WHERE node_address = 'a:1'"), 1);
  EXPECT_GE(log.Count("HEARTBEAT_FAILED node=a:1 service=kbs-sync err="), 2);
  EXPECT_EQ(log.Count("HEARTBEAT_RECOVERED node=a:1"), 1);
}

TEST(RegistryTest, StartBeatsAtOnceAndStopInterruptsTheWait) {
  TestSchema db;
  SystemClock clock;
  HeartbeatPublisher pub(db.pool(), clock, kService, "a:1", 60'000ms, [] { return Meta("inc-1"); });
  pub.Start();
  EXPECT_TRUE(Eventually([&] { return pub.stats().beats >= 1; }));
  auto before = std::chrono::steady_clock::now();
  pub.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - before, 5s);
  EXPECT_EQ(pub.stats().beats, 1u);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_node_registry"), 1);

  // MarkOffline stops the background beats so they cannot revive the row.
  pub.Start();
  EXPECT_TRUE(Eventually([&] { return pub.stats().beats >= 2; }));
  pub.MarkOffline();
  EXPECT_EQ(StatusOf(db, "a:1"), 0);
}

}  // namespace
}  // namespace dsync::registry
