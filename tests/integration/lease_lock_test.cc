// The SQL lease (dispatcher/lease_lock.h) against a real MariaDB. Expiry is produced
// by moving expires_at into the past with SQL, never by sleeping.
#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "dispatcher/lease_lock.h"
#include "dispatcher/locker.h"
#include "tests/support/test_db.h"
#include "tests/support/fake_clock.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;
using testing::TestSchema;

constexpr const char* kLock = "dispatcher:test";

std::optional<std::string> Owner(TestSchema& db) {
  return db.pool().Run("read owner", [](storage::Connection& c) {
    return c.QueryString("SELECT owner FROM distribute_lease_lock WHERE lock_name = 'dispatcher:test'");
  });
}

int64_t Token(TestSchema& db) {
  return db.QueryInt("SELECT token FROM distribute_lease_lock WHERE lock_name = 'dispatcher:test'");
}

void ExpireLease(TestSchema& db) {
  db.Exec("UPDATE distribute_lease_lock SET expires_at = NOW(3) - INTERVAL 1 SECOND "
          "WHERE lock_name = 'dispatcher:test'");
}

bool FenceHolds(TestSchema& db, const LeaseFence& fence) {
  return db.pool().Transact("fence", [&](storage::Connection& c) { return HoldsLease(c, fence); });
}

// A fresh schema and two contenders, a and b, for the lease kLock.
class LeaseLockTest : public ::testing::Test {
 protected:
  TestSchema db;
  LeaseLock a{db.pool(), kLock, "host-a:1:aaaa"};
  LeaseLock b{db.pool(), kLock, "host-b:2:bbbb"};
};

TEST_F(LeaseLockTest, MissingRowIsCreatedAndTaken) {
  EXPECT_EQ(db.QueryInt("SELECT COUNT(*) FROM distribute_lease_lock"), 0);  // none before the first acquire
  EXPECT_EQ(a.TryAcquire(10s), 1);
  EXPECT_EQ(Owner(db), "host-a:1:aaaa");
  EXPECT_EQ(Token(db), 1);
  // Expiry on the database clock: about now + ttl.
  int64_t ahead_ms = db.QueryInt(
      "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) DIV 1000 FROM distribute_lease_lock");
  EXPECT_GT(ahead_ms, 9000);
  EXPECT_LE(ahead_ms, 10000);
  EXPECT_EQ(db.QueryInt("SELECT acquired_at IS NOT NULL AND renewed_at IS NOT NULL FROM distribute_lease_lock"), 1);

  // A row deleted under a holder is recreated; the holder's renew then fails, and
  // anyone may take the fresh row (never read as "nobody holds it" while a row says so).
  db.Exec("DELETE FROM distribute_lease_lock");
  EXPECT_FALSE(a.Renew(1, 10s));
  EXPECT_EQ(b.TryAcquire(10s), 1);
  EXPECT_EQ(a.TryAcquire(10s), std::nullopt);
}

TEST_F(LeaseLockTest, OfTwoContendersOnlyOneAcquires) {
  EXPECT_EQ(a.TryAcquire(10s), 1);
  EXPECT_EQ(b.TryAcquire(10s), std::nullopt);
  EXPECT_EQ(Owner(db), "host-a:1:aaaa");

  // Racing from many threads, each on its own pool, against a fresh lock: one winner.
  const std::string race_lock = "race";
  constexpr int kContenders = 8;
  std::vector<std::unique_ptr<storage::ConnectionPool>> pools;
  for (int i = 0; i < kContenders; ++i) pools.push_back(std::make_unique<storage::ConnectionPool>(db.url()));
  std::atomic<int> winners{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kContenders; ++i) {
    threads.emplace_back([&, i] {
      LeaseLock lease(*pools[i], race_lock, "host:" + std::to_string(i) + ":x");
      while (!go) std::this_thread::yield();
      if (lease.TryAcquire(10s)) ++winners;
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(winners.load(), 1);
  EXPECT_EQ(db.QueryInt("SELECT token FROM distribute_lease_lock WHERE lock_name = 'race'"), 1);
}

// A dispatcher frozen (SIGSTOP, a VM pause) in the middle of a write transaction must
// not keep the others from taking over once its lease expires: the fence is a plain
// read, it locks nothing. (With a share-locked fence the takeover waited for as long as
// the holder stayed frozen.)
TEST_F(LeaseLockTest, TakeoverDoesNotWaitForTheHoldersOpenTransaction) {
  ASSERT_EQ(a.TryAcquire(10s), 1);
  auto frozen = db.pool().Borrow();
  frozen->Begin();
  EXPECT_TRUE(HoldsLease(*frozen, a.Fence(1)));  // ... and then the holder stops here
  ExpireLease(db);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(b.TryAcquire(10s), 2);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  frozen->Rollback();
  EXPECT_FALSE(FenceHolds(db, a.Fence(1)));
  EXPECT_TRUE(FenceHolds(db, b.Fence(2)));
}

// The fence holds only while the lease has at least its margin left to run.
TEST_F(LeaseLockTest, FenceNeedsItsMarginLeft) {
  ASSERT_EQ(a.TryAcquire(10s), 1);
  EXPECT_TRUE(FenceHolds(db, a.Fence(1, 2s)));
  EXPECT_FALSE(FenceHolds(db, a.Fence(1, 20s)));
}

TEST_F(LeaseLockTest, ExpiredLeaseIsTakenOverWithAHigherToken) {
  ASSERT_EQ(a.TryAcquire(10s), 1);
  ExpireLease(db);
  EXPECT_FALSE(FenceHolds(db, a.Fence(1)));  // expired: a's writes are refused already
  EXPECT_EQ(b.TryAcquire(10s), 2);
  EXPECT_EQ(Owner(db), "host-b:2:bbbb");
  EXPECT_FALSE(a.Renew(1, 10s));
  EXPECT_EQ(a.TryAcquire(10s), std::nullopt);
  EXPECT_TRUE(FenceHolds(db, b.Fence(2)));
  EXPECT_FALSE(FenceHolds(db, a.Fence(1)));
  EXPECT_FALSE(FenceHolds(db, b.Fence(1)));  // the token is part of the fence

  // Back to a after b's expiry: the token keeps rising.
  ExpireLease(db);
  EXPECT_EQ(a.TryAcquire(10s), 3);
}

TEST_F(LeaseLockTest, ReTakingOwnLeaseKeepsTheTokenUnlessSomeoneElseHeldIt) {
  ASSERT_EQ(a.TryAcquire(10s), 1);
  const std::string acquired_at_sql = "SELECT CAST(UNIX_TIMESTAMP(acquired_at) * 1000 AS SIGNED) FROM distribute_lease_lock";
  int64_t acquired_at = db.QueryInt(acquired_at_sql);
  EXPECT_EQ(a.TryAcquire(10s), 1);  // while held
  ExpireLease(db);
  EXPECT_EQ(a.TryAcquire(10s), 1);  // after expiry, nobody else in between
  EXPECT_EQ(db.QueryInt(acquired_at_sql), acquired_at);  // one uninterrupted tenure

  a.Release();
  EXPECT_EQ(Owner(db), std::nullopt);
  EXPECT_EQ(a.TryAcquire(10s), 2);  // released: a new tenure
  ExpireLease(db);
  EXPECT_EQ(b.TryAcquire(10s), 3);
}

TEST_F(LeaseLockTest, RenewExtendsOnlyTheHoldersLeaseOnTheDatabaseClock) {
  ASSERT_EQ(a.TryAcquire(2s), 1);
  db.Exec("UPDATE distribute_lease_lock SET expires_at = NOW(3) + INTERVAL 100000 MICROSECOND");
  EXPECT_TRUE(a.Renew(1, 60s));
  int64_t ahead_ms = db.QueryInt(
      "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at) DIV 1000 FROM distribute_lease_lock");
  EXPECT_GT(ahead_ms, 59000);
  EXPECT_FALSE(a.Renew(2, 60s));   // wrong token
  EXPECT_FALSE(b.Renew(1, 60s));   // not the owner
  EXPECT_EQ(Token(db), 1);
  EXPECT_EQ(Owner(db), "host-a:1:aaaa");
}

TEST_F(LeaseLockTest, ReleaseByANonOwnerHasNoEffect) {
  ASSERT_EQ(a.TryAcquire(10s), 1);
  b.Release();
  EXPECT_EQ(Owner(db), "host-a:1:aaaa");
  EXPECT_EQ(b.TryAcquire(10s), std::nullopt);
  a.Release();
  EXPECT_EQ(Owner(db), std::nullopt);
  EXPECT_EQ(b.TryAcquire(10s), 2);
}

TEST_F(LeaseLockTest, NamesAndOwnerIds) {
  EXPECT_EQ(DispatcherLockName("kbs-sync"), "dispatcher:kbs-sync");
  std::string long_name = DispatcherLockName(std::string(128, 's'));
  EXPECT_EQ(long_name.size(), 64u);
  EXPECT_NE(long_name, DispatcherLockName(std::string(127, 's') + "t"));
  std::string id = MakeLeaseOwnerId();
  EXPECT_NE(id, MakeLeaseOwnerId());
  EXPECT_EQ(std::count(id.begin(), id.end(), ':'), 2) << id;
  EXPECT_THROW(LeaseLock(db.pool(), std::string(65, 'x'), "o"), std::invalid_argument);
}

// The locker on the SQL strategy: local time from a FakeClock, lease time from NOW(3).
TEST_F(LeaseLockTest, LockerOverSqlHandsOverAfterAForcedExpiry) {
  FakeClock clock;
  LockerOptions o;
  o.ttl = 10s;
  Locker locker_a(a, clock, o, kLock), locker_b(b, clock, o, kLock);
  locker_a.Tick();
  locker_b.Tick();
  ASSERT_TRUE(locker_a.is_leader());
  ASSERT_FALSE(locker_b.is_leader());

  ExpireLease(db);
  clock.Advance(1000ms);
  locker_b.Tick();
  EXPECT_TRUE(locker_b.is_leader());
  EXPECT_EQ(locker_b.token(), 2);
  clock.Advance(2500ms);
  locker_a.Tick();  // renew due (ttl / 3): refused, the token moved on
  EXPECT_FALSE(locker_a.is_leader());
  EXPECT_EQ(locker_a.stats().lost, 1u);
  EXPECT_EQ(locker_a.stats().lost_by_watchdog, 0u);

  locker_b.Stop();  // releases
  EXPECT_EQ(Owner(db), std::nullopt);
  clock.Advance(1000ms);
  locker_a.Tick();
  EXPECT_TRUE(locker_a.is_leader());
  EXPECT_EQ(locker_a.token(), 3);
}

}  // namespace
}  // namespace dsync::dispatcher
