// storage/ on a real 3-member Galera cluster (tests/galera/galera_test.sh starts it
// with scripts/galera.sh and sets DSYNC_TEST_DB_URL to its three members and
// DSYNC_GALERA_DIR to its folder): the pool skips a dead host and a member outside
// the primary component, fails over when its member is kill -9'd and stays on the
// new one after the old one rejoined; a certification conflict between members is
// retried by Transact; the migrator's lock serialises runs through different
// members; idle_transaction_timeout ends an idle transaction on a member.
//
// The tests run one after another (they kill and isolate members).
#include <cstdlib>
#include <optional>
#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "storage/migrator.h"
#include "tests/support/test_db.h"

namespace dsync {
namespace {

using namespace std::chrono_literals;
using storage::Connection;
using storage::ConnectionPool;
using storage::DbHost;
using storage::DbUrl;

std::string GaleraDir() {
  const char* dir = std::getenv("DSYNC_GALERA_DIR");
  if (dir == nullptr || *dir == '\0') throw std::runtime_error("DSYNC_GALERA_DIR is not set: run galera_test.sh");
  return dir;
}

// scripts/galera.sh COMMAND DIR MEMBER (kill, restart, ...).
void Galera(const std::string& command, int member) {
  const char* src = std::getenv("DSYNC_SOURCE_DIR");
  std::string cmd = "bash " + std::string(src ? src : ".") + "/scripts/galera.sh " + command + " " + GaleraDir() +
                    " " + std::to_string(member) + " >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// `sql` on `c` fails as on a lost connection (the member ended the session); `if_not`
// says what it means if the query runs.
void ExpectConnectionLost(Connection& c, const std::string& sql, const std::string& if_not) {
  try {
    c.QueryInt(sql);
    ADD_FAILURE() << if_not;
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::kConnectionLost) << e.what();
  }
}

// member N (1-based) of the cluster, alone.
DbUrl Member(const DbUrl& cluster, int n) {
  DbUrl one = cluster;
  one.hosts = {cluster.hosts.at(n - 1)};
  return one;
}

// The cluster's members starting at member N.
DbUrl From(const DbUrl& cluster, int n) {
  DbUrl rotated = cluster;
  rotated.hosts.clear();
  for (size_t i = 0; i < cluster.hosts.size(); ++i)
    rotated.hosts.push_back(cluster.hosts[(n - 1 + i) % cluster.hosts.size()]);
  return rotated;
}

// Until `table` is visible through `pool`'s member: DDL committed through another
// member is applied here a moment later (reads are not causal across members unless
// wsrep_sync_wait is set).
void WaitForTable(ConnectionPool& pool, const std::string& table) {
  for (int i = 0; i < 200; ++i) {
    try {
      pool.Run("wait", [&](Connection& c) { return c.QueryInt("SELECT COUNT(*) FROM " + table); });
      return;
    } catch (const DbError& e) {
      if (e.kind() != DbError::Kind::kNoSuchTable) throw;
    }
    std::this_thread::sleep_for(50ms);
  }
  FAIL() << table << " not visible after 10 s";
}

// Until the URL's schema exists on its first member (CREATE DATABASE went through member 1).
void WaitForSchema(const DbUrl& url) {
  for (int i = 0; i < 200; ++i) {
    try {
      Connection c(url);
      return;
    } catch (const DbError& e) {
      if (e.kind() != DbError::Kind::kUnknownDatabase) throw;
    }
    std::this_thread::sleep_for(50ms);
  }
  FAIL() << url.schema << " not visible after 10 s";
}

std::string NodeName(ConnectionPool& pool) {
  return pool.Run("node name", [](Connection& c) { return *c.QueryString("SELECT @@wsrep_node_name"); });
}

TEST(Galera, PoolSkipsADeadHostAndStaysOnTheFirstReadyMember) {
  testing::TestSchema db;
  DbUrl url = db.url();
  url.hosts.insert(url.hosts.begin(), DbHost{"127.0.0.1", 1});  // nothing listens there
  url.connect_timeout = 1000ms;
  ConnectionPool pool(url);
  EXPECT_EQ(NodeName(pool), "m1");
  EXPECT_EQ(pool.stats().failovers, 1u);
  EXPECT_EQ(pool.stats().host, url.hosts[1].Label());
  // Every later connection goes to the same member.
  std::vector<ConnectionPool::Lease> leases;
  for (int i = 0; i < 4; ++i) leases.push_back(pool.Borrow());
  for (auto& l : leases) EXPECT_EQ(*l->QueryString("SELECT @@wsrep_node_name"), "m1");
}

TEST(Galera, MemberOutsideThePrimaryComponentIsSkipped) {
  testing::TestSchema db;
  // Member 3 cut off from the others: it leaves the primary component.
  Connection admin3(Member(db.url(), 3).WithSchema("dsync"));
  admin3.ExecuteDdl("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=1'");
  struct Rejoin {  // back into the cluster, and Synced, before the next test
    Connection& c;
    ~Rejoin() {
      try {
        c.ExecuteDdl("SET GLOBAL wsrep_provider_options = 'gmcast.isolate=0'");
        for (int i = 0; i < 300; ++i) {
          auto rs = c.Query("SHOW GLOBAL STATUS LIKE 'wsrep_local_state_comment'");
          if (rs->next() && std::string(rs->getString(2)) == "Synced") return;
          std::this_thread::sleep_for(100ms);
        }
        ADD_FAILURE() << "member 3 did not rejoin within 30 s";
      } catch (const std::exception& e) {
        ADD_FAILURE() << "member 3 did not rejoin: " << e.what();
      }
    }
  } rejoin{admin3};
  auto status3 = [&] {
    auto rs = admin3.Query("SHOW GLOBAL STATUS LIKE 'wsrep_cluster_status'");
    return rs->next() ? std::string(rs->getString(2)) : std::string();
  };
  for (int i = 0; i < 100 && status3() == "Primary"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_NE(status3(), "Primary");

  try {
    DbUrl only3 = Member(db.url(), 3);
    only3.hosts.push_back(DbHost{"127.0.0.1", 1});  // a list (readiness is checked) with nothing else
    only3.connect_timeout = 1000ms;
    Connection alone(only3);
    ADD_FAILURE() << "connected to a member outside the primary component";
  } catch (const DbError& e) {
    EXPECT_NE(std::string(e.what()).find("Galera member not ready"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find(db.url().password), std::string::npos) << e.what();
  }
  ConnectionPool pool(From(db.url(), 3));
  EXPECT_EQ(NodeName(pool), "m1");
  // A session already open on it gets 1047 and counts as lost, not as a plain error.
  ExpectConnectionLost(admin3, "SELECT COUNT(*) FROM mysql.user", "a query ran on a non-primary member");
}

TEST(Galera, CertificationConflictsBetweenMembersAreRetried) {
  testing::TestSchema db;
  db.Exec("CREATE TABLE counter (id INT PRIMARY KEY, n INT NOT NULL)");
  db.Exec("INSERT INTO counter VALUES (1, 0)");
  constexpr int kPerWriter = 150;
  std::vector<std::thread> writers;
  std::vector<std::unique_ptr<ConnectionPool>> pools;
  // Three writers on one hot row lose often; the default 6 attempts are meant for
  // rarer conflicts.
  storage::PoolOptions options;
  options.retry.max_attempts = 100;
  options.retry.max_delay = Millis(50);
  for (int m = 1; m <= 3; ++m) {
    WaitForSchema(Member(db.url(), m));
    pools.push_back(std::make_unique<ConnectionPool>(From(db.url(), m), options));
    WaitForTable(*pools.back(), "counter");
  }
  std::atomic<int> failed{0};
  for (auto& pool : pools) {
    writers.emplace_back([&pool, &failed] {
      for (int i = 0; i < kPerWriter; ++i) try {
        pool->Transact("increment", [](Connection& c) {
          int64_t n = *c.QueryInt("SELECT n FROM counter WHERE id = 1 FOR UPDATE");
          std::this_thread::sleep_for(1ms);  // widen the window for a conflict
          return c.Execute("UPDATE counter SET n = ? WHERE id = 1", n + 1);
        });
      } catch (const DbError& e) {
        if (failed++ < 3) ADD_FAILURE() << pool->stats().host << ": " << e.what();
      }
    });
  }
  for (auto& t : writers) t.join();
  ASSERT_EQ(failed.load(), 0);
  // Every increment applied exactly once, although the members certified against
  // each other (FOR UPDATE locks on the local member only): the losers got 1213 (at a
  // statement or at COMMIT) and ran again.
  // Reads are not causal across members (no wsrep_sync_wait): the member read here may
  // apply the last writers' commits a moment later. A lost update stays short forever.
  int64_t n = -1;
  for (int i = 0; i < 50 && (n = db.QueryInt("SELECT n FROM counter WHERE id = 1")) != 3 * kPerWriter; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(n, 3 * kPerWriter);
  uint64_t retries = 0;
  for (auto& pool : pools) {
    retries += pool->stats().retries;
    EXPECT_EQ(pool->stats().failovers, 0u) << "a writer left its member: the conflicts were not between members";
  }
  EXPECT_GT(retries, 0u) << "no conflict happened: the test proved nothing";
  std::cout << "certification retries: " << retries << " for " << 3 * kPerWriter << " transactions\n";
}

TEST(Galera, MigrationsThroughDifferentMembersRunOnce) {
  testing::TestSchema db(/*migrate=*/false);
  std::vector<std::thread> runners;
  std::atomic<int> applied{0}, ok{0};
  for (int m = 1; m <= 3; ++m) WaitForSchema(Member(db.url(), m));
  for (int m = 1; m <= 3; ++m) {
    runners.emplace_back([&, m] {
      try {
        ConnectionPool pool(From(db.url(), m));
        applied += static_cast<int>(storage::Migrator(pool).Migrate().applied.size());
        ok++;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "migrate through member " << m << ": " << e.what();
      }
    });
  }
  for (auto& t : runners) t.join();
  EXPECT_EQ(ok.load(), 3);
  EXPECT_EQ(applied.load(), static_cast<int>(storage::EmbeddedMigrations().size()));
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM dsync_schema_version"),
            static_cast<int64_t>(storage::EmbeddedMigrations().size()));
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM dsync_migration_lock"), 0);
}

TEST(Galera, EveryTableHasAPrimaryKey) {
  testing::TestSchema db;
  // Galera replicates rows by key; a table without a primary key is replicated
  // inefficiently and DELETEs on it can diverge between members.
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM information_schema.tables t WHERE t.table_schema = DATABASE() "
                        "AND t.table_type = 'BASE TABLE' AND NOT EXISTS (SELECT 1 FROM "
                        "information_schema.table_constraints k WHERE k.table_schema = t.table_schema AND "
                        "k.table_name = t.table_name AND k.constraint_type = 'PRIMARY KEY')"),
            0);
}

TEST(Galera, IdleTransactionTimeoutEndsTheSessionOnAMember) {
  testing::TestSchema db;
  DbUrl url = From(db.url(), 2);
  url.idle_transaction_timeout = 1s;
  WaitForSchema(Member(db.url(), 2));
  Connection c(url);
  EXPECT_EQ(*c.QueryString("SELECT @@time_zone"), "+00:00");
  EXPECT_EQ(*c.QueryInt("SELECT @@idle_transaction_timeout"), 1);
  c.ExecuteDdl("CREATE TABLE idle_t (id INT PRIMARY KEY)");
  c.Begin();
  c.Execute("INSERT INTO idle_t VALUES (1)");
  std::this_thread::sleep_for(2500ms);
  ExpectConnectionLost(c, "SELECT 1", "the idle transaction survived idle_transaction_timeout");
}

// Last: kills and restarts a member.
TEST(Galera, PoolFailsOverWhenItsMemberIsKilledAndStaysAfterItRejoins) {
  testing::TestSchema db;
  WaitForSchema(Member(db.url(), 2));
  ConnectionPool pool(From(db.url(), 2));
  pool.Run("create", [](Connection& c) { c.ExecuteDdl("CREATE TABLE t (id INT PRIMARY KEY)"); });
  int id = 0;
  auto insert = [&] { pool.Transact("insert", [&](Connection& c) { return c.Execute("INSERT INTO t VALUES (?)", ++id); }); };
  insert();
  EXPECT_EQ(NodeName(pool), "m2");
  Galera("kill", 2);
  auto t0 = std::chrono::steady_clock::now();
  insert();  // the idle connections are dead: lost before COMMIT, retried on member 3
  auto failover_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  std::cout << "failover after kill -9 of the pool's member: " << failover_ms.count() << " ms\n";
  EXPECT_EQ(NodeName(pool), "m3");
  EXPECT_EQ(pool.stats().host, db.url().hosts[2].Label());
  Galera("restart", 2);  // rejoins by IST
  for (int i = 0; i < 20; ++i) insert();
  EXPECT_EQ(NodeName(pool), "m3") << "the pool moved back to a member it had left";
  ConnectionPool m2(Member(db.url(), 2));
  WaitForTable(m2, "t");
  for (int i = 0; i < 100 && m2.Run("count", [](Connection& c) { return c.QueryInt("SELECT COUNT(*) FROM t"); }) != id; ++i)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(m2.Run("count", [](Connection& c) { return c.QueryInt("SELECT COUNT(*) FROM t"); }), id)
      << "member 2 did not catch up";
}

}  // namespace
}  // namespace dsync
