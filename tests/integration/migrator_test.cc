// Schema migrations against a real MariaDB: apply, re-run as a no-op, concurrent
// runs, refusal of a newer database, and that the seed's plain INSERT producer
// works on the migrated schema.
#include "storage/migrator.h"

#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/support/test_db.h"

namespace dsync {
namespace {

using storage::Migrator;

int Latest() { return storage::EmbeddedMigrations().back().version; }

TEST(Migrator, AppliesThenRerunIsNoop) {
  testing::TestSchema db(/*migrate=*/false);
  Migrator migrator(db.pool());
  EXPECT_EQ(migrator.CurrentVersion(), 0);
  EXPECT_THROW(migrator.RequireCurrent(), SchemaError);

  auto first = migrator.Migrate();
  EXPECT_EQ(first.from_version, 0);
  EXPECT_EQ(first.to_version, Latest());
  EXPECT_EQ(first.applied.size(), storage::EmbeddedMigrations().size());
  EXPECT_NO_THROW(migrator.RequireCurrent());

  auto second = migrator.Migrate();
  EXPECT_TRUE(second.applied.empty());
  EXPECT_EQ(second.from_version, Latest());
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM dsync_schema_version"),
            static_cast<int64_t>(storage::EmbeddedMigrations().size()));
  for (const char* table : {"distribute_node_registry", "distribute_event", "distribute_event_step",
                            "distribute_lease_lock", "demo_ledger"}) {
    EXPECT_EQ(db.QueryInt(std::string("SELECT COUNT(*) FROM information_schema.tables WHERE "
                                       "table_schema = DATABASE() AND table_name = '") + table + "'"),
              1)
        << table;
  }
}

TEST(Migrator, ConcurrentRunsAllSucceedAndApplyOnce) {
  testing::TestSchema db(/*migrate=*/false);
  constexpr int kRunners = 4;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0}, applied_total{0};
  for (int i = 0; i < kRunners; ++i) {
    threads.emplace_back([&] {
      storage::ConnectionPool own_pool(db.url());  // separate sessions, like separate processes
      auto result = Migrator(own_pool).Migrate();
      applied_total += static_cast<int>(result.applied.size());
      ok++;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kRunners);
  EXPECT_EQ(applied_total.load(), static_cast<int>(storage::EmbeddedMigrations().size()));
  EXPECT_EQ(Migrator(db.pool()).CurrentVersion(), Latest());
}

// V014 (events carry their service): on an upgraded database whose registry holds one
// service, the existing events and batches become that service's and so do the rows
// later inserted without naming one; on a new database the default is the migrating
// config's service.
TEST(Migrator, TheServiceColumnDefaultsToTheDatabasesService) {
  std::vector<storage::Migration> before_v14;
  for (const auto& m : storage::EmbeddedMigrations()) {
    if (m.version < 14) before_v14.push_back(m);
  }
  ASSERT_GE(storage::EmbeddedMigrations().back().version, 14);
  testing::TestSchema old(/*migrate=*/false);
  Migrator(old.pool(), before_v14).Migrate();
  old.Exec("INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time) "
           "VALUES ('orders-sync', 'a:1', 1, NOW(3)), ('orders-sync', 'b:1', 0, NOW(3))");
  old.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('t', 'e1', 'd', 'T', '{}')");
  old.Exec("INSERT INTO distribute_batch (batch_code, on_complete_topic) VALUES ('b1', 'DONE')");
  Migrator upgrade(old.pool());
  upgrade.set_default_service("kbs-sync");  // the registry's sole service wins
  upgrade.Migrate();
  auto service_of = [&](const std::string& code) {
    return old.pool().Run("read", [&](storage::Connection& c) {
      return c.QueryString("SELECT service FROM distribute_event WHERE code = ?", code).value_or("");
    });
  };
  EXPECT_EQ(service_of("e1"), "orders-sync");
  old.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('t', 'e2', 'd', 'T', '{}')");
  EXPECT_EQ(service_of("e2"), "orders-sync");
  EXPECT_EQ(old.QueryInt("SELECT COUNT(*) FROM distribute_batch WHERE service = 'orders-sync'"), 1);

  testing::TestSchema fresh(/*migrate=*/false);
  Migrator create(fresh.pool());
  create.set_default_service("billing-sync");
  create.Migrate();
  fresh.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('t', 'e', 'd', 'T', '{}')");
  EXPECT_EQ(fresh.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE service = 'billing-sync'"), 1);
}

TEST(Migrator, RefusesDatabaseNewerThanBinary) {
  testing::TestSchema db;
  db.Exec("INSERT INTO dsync_schema_version (version, name, checksum, applied_by) "
          "VALUES (999, 'from_the_future', '0', 'test')");
  Migrator migrator(db.pool());
  try {
    migrator.Migrate();
    FAIL() << "migrated a newer database";
  } catch (const SchemaError& e) {
    EXPECT_NE(std::string(e.what()).find("newer than this dsync"), std::string::npos) << e.what();
  }
  EXPECT_THROW(migrator.RequireCurrent(), SchemaError);
}

TEST(Migrator, SeedPlainInsertProducerWorks) {
  testing::TestSchema db;
  db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) "
          "VALUES ('t1', 'E-1', 'space-9', 'SPACE_ADD', '{\"space_id\": 9}')");
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE code = 'E-1' AND status = 'PENDING' "
                        "AND version = 1 AND attempt = 0 AND priority = 0 AND next_run_time <= NOW(3)"),
            1);
  // Idempotent producing: the same code again is rejected by uk_code.
  EXPECT_ANY_THROW(db.Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) "
                           "VALUES ('t1', 'E-1', 'space-9', 'SPACE_ADD', '{}')"));
  db.Exec("INSERT INTO distribute_event_step (tenant_id, code, job_code, step_type, step_name) "
          "VALUES ('t1', 'E-1#0', 'E-1', 'table_sync', 'space')");
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event_step WHERE status = 'PENDING'"), 1);
}

TEST(Migrator, SplitsStatementsAndDropsComments) {
  auto parts = storage::SplitSqlStatements("-- header; not a statement\nCREATE TABLE a (x INT);\n\n"
                                           "  -- note\nCREATE TABLE b (\n  y INT\n) ;\nSELECT 1");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0], "CREATE TABLE a (x INT)");
  EXPECT_NE(parts[1].find("CREATE TABLE b"), std::string::npos);
  EXPECT_EQ(parts[1].find(';'), std::string::npos);
  EXPECT_NE(parts[2].find("SELECT 1"), std::string::npos);
}

}  // namespace
}  // namespace dsync

namespace dsync {
namespace {

// A migration interrupted after some of its statements: the rerun completes it.
TEST(Migrator, RerunAfterInterruptedMigrationCompletes) {
  testing::TestSchema db;
  int latest = storage::EmbeddedMigrations().back().version;
  ASSERT_GE(latest, 2);
  // Forget V2+ was recorded, as if the process died before writing the version row;
  // its columns stay.
  db.Exec("DELETE FROM dsync_schema_version WHERE version >= 2");
  auto result = storage::Migrator(db.pool()).Migrate();
  EXPECT_EQ(result.from_version, 1);
  EXPECT_EQ(result.to_version, latest);
  EXPECT_NO_THROW(storage::Migrator(db.pool()).RequireCurrent());
}

}  // namespace
}  // namespace dsync

namespace dsync {
namespace {

// A plain-SQL producer whose session is not UTC must not delay its own event:
// next_run_time's default is "due at once", independent of the session time zone.
TEST(Migrator, PlainInsertFromNonUtcSessionIsDueAtOnce) {
  testing::TestSchema db;
  db.pool().Run("produce from UTC+08:00", [](storage::Connection& c) {
    c.ExecuteDdl("SET time_zone = '+08:00'");
    c.Execute("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES (?, ?, ?, ?, ?)",
              "t", "tz-1", "d", "DEMO", "{}");
    c.ExecuteDdl("SET time_zone = '+00:00'");
  });
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event WHERE code = 'tz-1' AND next_run_time <= NOW(3)"), 1);
}

}  // namespace
}  // namespace dsync

namespace dsync {
namespace {

// The archive tables keep the live tables' columns (V011 built them LIKE the live ones;
// every later column must reach both): same names, types and nullability, in the same
// order, so a query written for a live table runs on its archive unchanged.
TEST(Migrator, ArchiveTablesHaveTheLiveTablesColumnsInOrder) {
  testing::TestSchema db;
  auto columns = [&](const std::string& table) {
    return db.pool().Run("columns", [&](storage::Connection& c) {
      c.Execute("SET SESSION group_concat_max_len = 65536");  // the default 1024 would cut the list
      return c.QueryString(
                  "SELECT GROUP_CONCAT(CONCAT_WS(' ', column_name, column_type, is_nullable) "
                  "ORDER BY ordinal_position SEPARATOR ', ') "
                  "FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?",
                  table)
          .value_or("");
    });
  };
  for (const auto& [live, archive] : {std::pair<std::string, std::string>{"distribute_event", "distribute_event_archive"},
                                      {"distribute_event_step", "distribute_event_step_archive"}}) {
    SCOPED_TRACE(live);
    const std::string live_columns = columns(live);
    EXPECT_NE(live_columns.find("code varchar"), std::string::npos) << live_columns;  // read at all
    EXPECT_EQ(columns(archive), live_columns);
  }
  EXPECT_NE(columns("distribute_event_archive").find("service varchar"), std::string::npos);  // V014's column too
}

}  // namespace
}  // namespace dsync
