// Storage layer against a real MariaDB: error translation, the pool replacing a
// killed connection, deadlock retry, bounded borrowing, prepared-statement binding
// of hostile strings.
#include <atomic>
#include <chrono>
#include <barrier>
#include <thread>

#include <gtest/gtest.h>

#include "core/error.h"
#include "storage/connection_pool.h"
#include "storage/lock_eviction.h"
#include "tests/support/test_db.h"
#include "tests/support/fake_clock.h"

namespace dsync {
namespace {

using storage::Connection;
using storage::ConnectionPool;
using storage::DbUrl;

DbError::Kind ConnectErrorKind(const DbUrl& url) {
  try {
    Connection c(url);
  } catch (const DbError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    if (!url.password.empty()) {
      EXPECT_EQ(std::string(e.what()).find(url.password), std::string::npos) << e.what();
    }
    return e.kind();
  }
  ADD_FAILURE() << "connected to " << url.Masked();
  return DbError::Kind::kOther;
}

TEST(Storage, TranslatesConnectFailures) {
  DbUrl server = testing::ServerUrl();
  DbUrl wrong_password = server;
  wrong_password.password = "definitely-not-it";
  EXPECT_EQ(ConnectErrorKind(wrong_password), DbError::Kind::kAccessDenied);
  EXPECT_EQ(ConnectErrorKind(server.WithSchema("no_such_schema_here")), DbError::Kind::kUnknownDatabase);
  DbUrl closed_port = server;
  closed_port.hosts = {{"127.0.0.1", 1}};  // nothing listens on port 1
  closed_port.connect_timeout = Millis(1000);
  EXPECT_EQ(ConnectErrorKind(closed_port), DbError::Kind::kUnreachable);
}

// A host list on a plain server (no Galera: always ready): hosts that do not answer
// are passed over, the pool stays on the one that did, and when every host fails the
// one-line error names each, with the password masked.
TEST(Storage, PoolGoesToTheFirstHostThatAnswersAndStaysThere) {
  testing::TestSchema db;
  DbUrl url = db.url();
  url.hosts.insert(url.hosts.begin(), {{"127.0.0.1", 1}, {"127.0.0.1", 2}});  // nothing listens there
  url.connect_timeout = Millis(1000);
  ConnectionPool pool(url);
  EXPECT_EQ(pool.Run("read", [](Connection& c) { return c.QueryInt("SELECT 1"); }), 1);
  EXPECT_EQ(pool.stats().failovers, 1u);
  EXPECT_EQ(pool.stats().host, db.url().hosts[0].Label());
  {
    auto a = pool.Borrow();
    auto b = pool.Borrow();  // a second connection: straight to the same host
    EXPECT_EQ(a->host_index(), 2u);
    EXPECT_EQ(b->host_index(), 2u);
  }
  EXPECT_EQ(pool.stats().failovers, 1u);

  DbUrl dead = db.url();
  dead.hosts = {{"127.0.0.1", 1}, {"127.0.0.1", 2}};
  dead.connect_timeout = Millis(1000);
  try {
    Connection c(dead);
    FAIL() << "connected to nothing";
  } catch (const DbError& e) {
    std::string what = e.what();
    EXPECT_EQ(e.kind(), DbError::Kind::kUnreachable) << what;
    EXPECT_NE(what.find("127.0.0.1:1"), std::string::npos) << what;
    EXPECT_NE(what.find("127.0.0.1:2"), std::string::npos) << what;
    EXPECT_NE(what.find(":***@"), std::string::npos) << what;
    EXPECT_EQ(what.find(dead.password), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(Storage, TranslatesStatementErrors) {
  testing::TestSchema db;
  try {
    db.pool().Run("read", [](Connection& c) { return c.QueryInt("SELECT COUNT(*) FROM no_such_table"); });
    FAIL() << "no error";
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::kNoSuchTable);
    EXPECT_EQ(e.code(), 1146);
    EXPECT_EQ(std::string(e.what()).rfind("read: ", 0), 0u) << e.what();
  }
  constexpr const char* kInsert =
      "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES (?, ?, ?, ?, ?)";
  db.pool().Run("produce", [&](Connection& c) { return c.Execute(kInsert, "t", "dup", "d", "X", "{}"); });
  try {
    db.pool().Run("produce", [&](Connection& c) { return c.Execute(kInsert, "t", "dup", "d", "X", "{}"); });
    FAIL() << "duplicate accepted";
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::kDuplicateKey);
  }
}

TEST(Storage, SessionRunsInUtc) {
  testing::TestSchema db;
  auto tz = db.pool().Run("tz", [](Connection& c) { return c.QueryString("SELECT @@session.time_zone"); });
  EXPECT_EQ(tz, "+00:00");
}

TEST(Storage, HostileStringsStayBoundValues) {
  testing::TestSchema db;
  const std::string hostile = "x'); DROP TABLE distribute_event; -- \" \\ \xF0\x9F\x98\x80 1 OR 1=1";
  db.pool().Run("produce", [&](Connection& c) {
    return c.Execute(
        "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES (?, ?, ?, ?, ?)",
        "t", "c1", hostile.substr(0, 60), "X", hostile);
  });
  auto payload = db.pool().Run("read", [](Connection& c) {
    return c.QueryString("SELECT payload FROM distribute_event WHERE code = ?", "c1");
  });
  EXPECT_EQ(payload, hostile);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_event"), 1);
}

// A session frozen inside a transaction (SIGSTOP, a VM pause) must not hold its row
// locks for as long as it stays frozen: with idle_transaction_timeout the server ends
// it, and the row is free for the others (the sweeper, the next owner).
TEST(Storage, IdleTransactionIsEndedByTheServer) {
  testing::TestSchema db;
  db.Exec("CREATE TABLE idle_t (id INT PRIMARY KEY, v INT)");
  db.Exec("INSERT INTO idle_t VALUES (1, 0)");
  DbUrl url = db.url();
  url.idle_transaction_timeout = std::chrono::seconds(1);
  Connection frozen(url);
  frozen.Begin();
  EXPECT_EQ(frozen.Execute("UPDATE idle_t SET v = 1 WHERE id = 1"), 1u);  // holds the row lock
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));           // ... and stops here

  Connection other(db.url());
  other.Execute("SET SESSION innodb_lock_wait_timeout = 1");
  EXPECT_EQ(other.Execute("UPDATE idle_t SET v = 2 WHERE id = 1"), 1u);  // not 1205: the lock is gone
  try {
    frozen.Commit();
    ADD_FAILURE() << "the idle transaction survived its timeout";
  } catch (const storage::StatementError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::kConnectionLost) << e.what();
  }
  EXPECT_EQ(db.QueryInt("SELECT v FROM idle_t WHERE id = 1"), 2);  // the frozen write never landed
}

// storage/lock_eviction.h: a statement waiting for a row lock that a stale session holds
// (a transaction left open, as by a node frozen with SIGSTOP) goes on after `after`: the
// holder's session is killed and its write rolled back; a statement that does not wait
// kills nothing.
TEST(Storage, StaleLockHolderIsEvictedAfterTheBound) {
  testing::TestSchema db(false);
  db.Exec("CREATE TABLE lk (id INT PRIMARY KEY, v INT)");
  db.Exec("INSERT INTO lk VALUES (1, 0), (2, 0)");
  Connection holder(db.url());
  holder.Begin();
  holder.Execute("UPDATE lk SET v = 1 WHERE id = 1");  // holds row 1 and stays silent
  ConnectionPool pool(db.url());
  SystemClock clock;

  // Not waiting: row 2 is free, nothing is killed.
  pool.Transact("free row", [&](Connection& c) {
    storage::WhileEvictingStaleLocks(pool, c, clock, Millis(300), "free row",
                                     [&] { c.Execute("UPDATE lk SET v = 5 WHERE id = 2"); }, Millis(50));
  });
  EXPECT_EQ(holder.QueryInt("SELECT 1"), 1) << "a holder nobody waited for stays";

  const auto start = std::chrono::steady_clock::now();
  pool.Transact("held row", [&](Connection& c) {
    storage::WhileEvictingStaleLocks(pool, c, clock, Millis(500), "held row",
                                     [&] { c.Execute("UPDATE lk SET v = 2 WHERE id = 1"); }, Millis(100));
  });
  const auto waited = std::chrono::duration_cast<Millis>(std::chrono::steady_clock::now() - start);
  EXPECT_GE(waited.count(), 500);
  EXPECT_LT(waited.count(), 15000) << "innodb_lock_wait_timeout (50 s) was not what ended the wait";
  EXPECT_ANY_THROW(holder.QueryInt("SELECT 1")) << "the holder's session was killed";
  EXPECT_EQ(db.QueryInt("SELECT v FROM lk WHERE id = 1"), 2) << "the holder's write rolled back, the waiter's committed";
  EXPECT_EQ(db.QueryInt("SELECT v FROM lk WHERE id = 2"), 5);
}

TEST(Storage, KilledConnectionIsReplacedTransparently) {
  testing::TestSchema db;
  storage::PoolOptions options;
  options.max_size = 1;  // the next borrow must get the killed connection first
  options.validate_idle_after = Millis(3600000);  // and not ping it: the query itself hits the dead socket
  ConnectionPool pool(db.url(), options);
  uint64_t victim = pool.Run("id", [](Connection& c) { return c.server_id(); });

  Connection admin(db.url());
  admin.Execute("KILL CONNECTION " + std::to_string(victim));

  // The statement fails with a lost connection, the pool discards it, retries on a
  // new connection, and the caller sees only the answer.
  auto answer = pool.Run("after kill", [](Connection& c) { return c.QueryInt("SELECT 41 + 1"); });
  EXPECT_EQ(answer, 42);
  auto stats = pool.stats();
  EXPECT_EQ(stats.connects, 2u);
  EXPECT_EQ(stats.discarded, 1u);
  EXPECT_GE(stats.retries, 1u);
  EXPECT_NE(pool.Run("id", [](Connection& c) { return c.server_id(); }), victim);
}

TEST(Storage, IdleConnectionIsValidatedOnBorrow) {
  testing::TestSchema db;
  FakeClock clock;
  storage::PoolOptions options;
  options.max_size = 1;
  options.validate_idle_after = Millis(1000);
  ConnectionPool pool(db.url(), options, clock);
  uint64_t victim = pool.Run("id", [](Connection& c) { return c.server_id(); });
  Connection admin(db.url());
  admin.Execute("KILL CONNECTION " + std::to_string(victim));
  clock.Advance(Millis(5000));
  // The ping on borrow finds the dead session; no statement ever fails.
  auto answer = pool.Run("after kill", [](Connection& c) { return c.QueryInt("SELECT 7"); });
  EXPECT_EQ(answer, 7);
  EXPECT_EQ(pool.stats().retries, 0u);
  EXPECT_EQ(pool.stats().discarded, 1u);
}

TEST(Storage, TransactionRolledBackOnException) {
  testing::TestSchema db;
  EXPECT_THROW(db.pool().Transact("fail midway",
                                  [](Connection& c) {
                                    c.Execute("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) "
                                              "VALUES (?, ?, ?)",
                                              "k1", "e1", "s1");
                                    throw std::runtime_error("handler failed");
                                  }),
               std::runtime_error);
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM demo_ledger"), 0);
}

// Two transactions lock rows A and B in opposite order: InnoDB kills one with
// 1213; Transact must re-run it from BEGIN so both units of work commit.
TEST(Storage, DeadlockIsRetried) {
  testing::TestSchema db;
  db.Exec("INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES ('A','e','s'), ('B','e','s')");
  storage::PoolOptions options;
  options.retry.max_attempts = 10;
  ConnectionPool pool(db.url(), options);
  std::barrier both_locked_first_row(2);
  std::atomic<int> runs{0};
  auto worker = [&](const char* first, const char* second) {
    bool first_run = true;
    pool.Transact("deadlock", [&](Connection& c) {
      runs++;
      constexpr const char* kBump = "UPDATE demo_ledger SET applications = applications + 1 WHERE idempotency_key = ?";
      c.Execute(kBump, first);
      if (first_run) {
        first_run = false;
        both_locked_first_row.arrive_and_wait();  // both hold their first row now
      }
      c.Execute(kBump, second);
    });
  };
  std::thread t1(worker, "A", "B"), t2(worker, "B", "A");
  t1.join();
  t2.join();
  EXPECT_GE(runs.load(), 3) << "one transaction must have been re-run after the deadlock";
  EXPECT_GE(pool.stats().retries, 1u);
  // Each unit bumped each row once, net: 1 + 2.
  EXPECT_EQ(db.QueryInt("SELECT SUM(applications) FROM demo_ledger"), 6);
}

TEST(Storage, BorrowIsBoundedAndTimesOut) {
  testing::TestSchema db;
  storage::PoolOptions options;
  options.max_size = 2;
  options.borrow_timeout = Millis(200);
  ConnectionPool pool(db.url(), options);
  auto a = pool.Borrow();
  auto b = pool.Borrow();
  try {
    pool.Borrow();
    FAIL() << "a third connection was lent from a pool of 2";
  } catch (const DbError& e) {
    EXPECT_EQ(e.kind(), DbError::Kind::kPoolExhausted);
  }
  EXPECT_EQ(pool.stats().open, 2);
}

// Prewarm opens connections up to what is asked and the pool's size, idle, and the
// borrows that follow connect no more; a server that does not answer leaves nothing
// open and no error (the borrow that needs one reports it).
TEST(Storage, PrewarmOpensIdleConnectionsUpToThePoolSize) {
  testing::TestSchema db;
  storage::PoolOptions options;
  options.max_size = 3;
  ConnectionPool pool(db.url(), options);
  pool.Prewarm(2);
  EXPECT_EQ(pool.stats().open, 2);
  EXPECT_EQ(pool.stats().in_use, 0);
  EXPECT_EQ(pool.stats().connects, 2u);
  pool.Prewarm(5);  // capped by the pool's size
  EXPECT_EQ(pool.stats().open, 3);
  EXPECT_EQ(pool.stats().connects, 3u);
  {
    auto a = pool.Borrow();
    auto b = pool.Borrow();
    auto c = pool.Borrow();
    EXPECT_EQ((*c).QueryInt("SELECT 1"), 1);
    EXPECT_NE((*a).server_id(), (*b).server_id());
  }
  EXPECT_EQ(pool.stats().connects, 3u);
  pool.Prewarm(3);  // already open: nothing to do
  EXPECT_EQ(pool.stats().connects, 3u);

  DbUrl closed_port = db.url();
  closed_port.hosts = {{"127.0.0.1", 1}};
  closed_port.connect_timeout = Millis(1000);
  ConnectionPool unreachable(closed_port, options);
  unreachable.Prewarm(2);
  EXPECT_EQ(unreachable.stats().open, 0);
  EXPECT_EQ(unreachable.stats().in_use, 0);
  EXPECT_THROW(unreachable.Run("read", [](Connection& c) { return c.QueryInt("SELECT 1"); }), DbError);
}

TEST(Storage, PoolIsSafeUnderManyThreads) {
  testing::TestSchema db;
  storage::PoolOptions options;
  options.max_size = 4;
  ConnectionPool pool(db.url(), options);
  db.Exec("INSERT INTO demo_ledger (idempotency_key, event_code, step_name, applications) VALUES ('n','e','s',0)");
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        pool.Transact("bump", [](Connection& c) {
          return c.Execute("UPDATE demo_ledger SET applications = applications + 1 WHERE idempotency_key = 'n'");
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(db.QueryInt("SELECT applications FROM demo_ledger WHERE idempotency_key = 'n'"), 800);
  EXPECT_LE(pool.stats().open, 4);
  EXPECT_EQ(pool.stats().in_use, 0);
}

}  // namespace
}  // namespace dsync

namespace dsync {
namespace {

// Statement texts built at run time must not pile up server-side prepared
// statements: the per-connection cache is bounded.
TEST(Storage, PreparedStatementCacheIsBounded) {
  testing::TestSchema db;
  storage::PoolOptions options;
  options.max_size = 1;
  storage::ConnectionPool pool(db.url(), options);
  for (int i = 0; i < 400; ++i) {
    auto v = pool.Run("distinct text", [&](storage::Connection& c) {
      return c.QueryInt("SELECT " + std::to_string(i) + " + ?", 1);
    });
    ASSERT_EQ(v, i + 1);
  }
  // This session's own counters (other tests run in parallel on the server): what
  // was prepared minus what the cache closed again is what stays open.
  auto open_statements = pool.Run("count", [](storage::Connection& c) {
    return c.QueryInt(
        "SELECT SUM(IF(VARIABLE_NAME = 'COM_STMT_PREPARE', VARIABLE_VALUE, -VARIABLE_VALUE)) "
        "FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME IN ('COM_STMT_PREPARE', 'COM_STMT_CLOSE')");
  });
  ASSERT_TRUE(open_statements.has_value());
  EXPECT_GT(*open_statements, 64);    // the cache does keep statements
  EXPECT_LE(*open_statements, 128 + 1);  // but no more than its bound (+ the counting query)
  // A statement evicted and needed again is simply prepared again.
  EXPECT_EQ(pool.Run("again", [](storage::Connection& c) { return c.QueryInt("SELECT 0 + ?", 5); }), 5);
}

}  // namespace
}  // namespace dsync
