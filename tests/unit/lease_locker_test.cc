// The generic lease loop (dispatcher/locker.h) against an in-memory lease table, with
// a FakeClock standing for both the process clock and the database clock. Every test
// steps the loop with Tick(): no thread, no sleeping.
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "dispatcher/locker.h"
#include "tests/support/log_capture.h"
#include "tests/support/fake_clock.h"

namespace dsync::dispatcher {
namespace {

using namespace std::chrono_literals;

// One lease row, with the SQL strategy's semantics: the token moves only when the
// owner changes; expiry on the (fake) database clock.
struct MemoryLeaseRow {
  std::optional<std::string> owner;
  int64_t token = 0;
  Clock::TimePoint expires_at{};
};

class MemoryStrategy final : public LeaseStrategy {
 public:
  MemoryStrategy(MemoryLeaseRow& row, FakeClock& clock, std::string owner)
      : row_(row), clock_(clock), owner_(std::move(owner)) {}

  std::optional<int64_t> TryAcquire(Millis ttl) override {
    ++acquires;
    if (fail) throw std::runtime_error("database unreachable");
    Clock::TimePoint now = clock_.Now();
    std::optional<int64_t> result;
    if (!row_.owner || row_.expires_at < now || *row_.owner == owner_) {
      if (row_.owner != owner_) ++row_.token;
      row_.owner = owner_;
      row_.expires_at = now + ttl;
      result = row_.token;
    }
    clock_.Advance(call_duration);  // the answer travels back (or the process froze)
    return result;
  }

  bool Renew(int64_t token, Millis ttl) override {
    ++renews;
    if (fail) {
      clock_.Advance(call_duration);
      throw std::runtime_error("lost connection during query");
    }
    bool ok = row_.owner == owner_ && row_.token == token;
    if (ok) row_.expires_at = clock_.Now() + ttl;
    clock_.Advance(call_duration);
    return ok;
  }

  void Release() override {
    ++releases;
    if (row_.owner == owner_) {
      row_.owner.reset();
      row_.expires_at = clock_.Now();
    }
  }

  const std::string& owner() const override { return owner_; }

  bool fail = false;
  Millis call_duration{0};
  int acquires = 0, renews = 0, releases = 0;

 private:
  MemoryLeaseRow& row_;
  FakeClock& clock_;
  const std::string owner_;
};

using testing::LogCapture;

constexpr Millis kTtl = 9000ms;  // renew every 3000, retry every 900, watchdog at 7200

LockerOptions Options() {
  LockerOptions o;
  o.ttl = kTtl;
  return o;
}

// One lease row on a fake clock, and locker `a` contending for it (not yet ticked).
class LeaseLockerTest : public ::testing::Test {
 protected:
  MemoryLeaseRow row;
  FakeClock clock;
  MemoryStrategy s{row, clock, "a"};
  Locker locker{s, clock, Options(), "test"};
};

// The same with a second contender, b; a and sa name the first.
class TwoLockersTest : public LeaseLockerTest {
 protected:
  MemoryStrategy& sa = s;
  Locker& a = locker;
  MemoryStrategy sb{row, clock, "b"};
  Locker b{sb, clock, Options(), "test"};
};

TEST_F(LeaseLockerTest, DefaultsDeriveFromTtl) {
  EXPECT_EQ(locker.options().renew_interval, 3000ms);
  EXPECT_EQ(locker.options().acquire_interval, 900ms);
  EXPECT_EQ(locker.options().watchdog_margin, 1800ms);
}

TEST_F(LeaseLockerTest, AcquiresAFreeLeaseAndRenewsAtATtlThird) {
  EXPECT_FALSE(locker.is_leader());

  EXPECT_EQ(locker.Tick(), 3000ms);
  EXPECT_TRUE(locker.is_leader());
  EXPECT_EQ(locker.token(), 1);
  EXPECT_EQ(row.owner, "a");
  EXPECT_EQ(locker.stats().acquired, 1u);

  // Ticking early does not talk to the table.
  clock.Advance(2999ms);
  EXPECT_EQ(locker.Tick(), 1ms);
  EXPECT_EQ(s.renews, 0);
  clock.Advance(1ms);
  EXPECT_EQ(locker.Tick(), 3000ms);
  EXPECT_EQ(s.renews, 1);

  // Renewed leases carry leadership far past the first deadline (7200 ms).
  for (int i = 0; i < 10; ++i) {
    clock.Advance(3000ms);
    locker.Tick();
    EXPECT_TRUE(locker.is_leader()) << i;
  }
  EXPECT_EQ(s.renews, 11);
  EXPECT_EQ(locker.token(), 1);  // renewing never changes the token
  EXPECT_EQ(locker.stats().renewals, 11u);
  EXPECT_EQ(locker.stats().lost, 0u);
}

TEST_F(TwoLockersTest, OnlyOneOfTwoContendersLeads) {
  a.Tick();
  EXPECT_EQ(b.Tick(), 900ms);  // a follower retries at ttl / 10
  EXPECT_TRUE(a.is_leader());
  EXPECT_FALSE(b.is_leader());
  for (int step = 0; step < 100; ++step) {
    clock.Advance(300ms);
    a.Tick();
    b.Tick();
    EXPECT_NE(a.is_leader(), b.is_leader()) << step;
  }
  EXPECT_TRUE(a.is_leader());
  EXPECT_EQ(sb.acquires, 1 + 30000 / 900);
}

TEST_F(LeaseLockerTest, WatchdogEndsLeadershipWhenRenewsFailUntilTheDeadline) {
  LogCapture log;
  locker.Tick();  // acquired at t=0: trusted until 9000 - 1800 = 7200
  s.fail = true;

  clock.Advance(3000ms);
  EXPECT_EQ(locker.Tick(), 900ms);  // failed renew: retried sooner
  EXPECT_TRUE(locker.is_leader());
  EXPECT_EQ(locker.stats().renew_failures, 1u);
  for (int i = 0; i < 4; ++i) {  // t = 3900 .. 6600
    clock.Advance(900ms);
    locker.Tick();
    EXPECT_TRUE(locker.is_leader()) << i;
  }
  clock.Advance(599ms);  // t = 7199
  EXPECT_TRUE(locker.is_leader());
  clock.Advance(1ms);  // t = 7200: the watchdog alone ends it, before any Tick
  EXPECT_FALSE(locker.is_leader());
  EXPECT_EQ(locker.token(), std::nullopt);

  locker.Tick();
  LockerStats st = locker.stats();
  EXPECT_FALSE(st.leader);
  EXPECT_EQ(st.lost, 1u);
  EXPECT_EQ(st.lost_by_watchdog, 1u);
  EXPECT_NE(log.text().find("LEASE_LOST lock=test owner=a token=1 reason=watchdog"), std::string::npos)
      << log.text();

  // Still nobody else's: it is taken again with the same token.
  s.fail = false;
  clock.Advance(900ms);
  locker.Tick();
  EXPECT_TRUE(locker.is_leader());
  EXPECT_EQ(locker.token(), 1);
  EXPECT_EQ(locker.stats().acquired, 2u);
}

TEST_F(LeaseLockerTest, ARenewAnsweredAfterTheDeadlineDoesNotCount) {
  locker.Tick();

  // Sent at t=3000 (deadline 3000 + 7200 = 10200); the process freezes and the
  // answer is seen at 13000, after the database's own expiry (12000).
  clock.Advance(3000ms);
  s.call_duration = 10000ms;
  locker.Tick();
  EXPECT_FALSE(locker.is_leader());
  EXPECT_EQ(locker.stats().lost_by_watchdog, 1u);
  EXPECT_EQ(locker.stats().renewals, 0u);

  // A renew answered just before its deadline counts.
  s.call_duration = 0ms;
  locker.Tick();  // re-acquires at once
  ASSERT_TRUE(locker.is_leader());
  clock.Advance(3000ms);
  s.call_duration = 7199ms;
  locker.Tick();
  EXPECT_TRUE(locker.is_leader());
  EXPECT_EQ(locker.stats().renewals, 1u);
}

TEST_F(LeaseLockerTest, AnAcquireAnsweredTooLateDoesNotCount) {
  s.call_duration = 7200ms;
  EXPECT_EQ(locker.Tick(), 0ms);  // try again at once
  EXPECT_FALSE(locker.is_leader());
  EXPECT_EQ(locker.stats().acquired, 0u);
  s.call_duration = 0ms;
  locker.Tick();
  EXPECT_TRUE(locker.is_leader());
  EXPECT_EQ(locker.token(), 1);  // the table never passed to anyone else
}

TEST_F(TwoLockersTest, FrozenLeaderIsTakenOverAndNeverOverlaps) {
  a.Tick();
  b.Tick();
  // a freezes (no ticks); b keeps trying. a must stop believing it leads before b
  // can acquire.
  bool b_led = false;
  for (int step = 0; step < 200; ++step) {
    clock.Advance(100ms);
    b.Tick();
    EXPECT_FALSE(a.is_leader() && b.is_leader()) << step;
    b_led = b_led || b.is_leader();
  }
  ASSERT_TRUE(b_led);
  EXPECT_EQ(b.token(), 2);
  EXPECT_EQ(b.stats().acquired, 1u);

  // a thaws: its watchdog has already ended its tenure, and b's lease is live.
  a.Tick();
  EXPECT_FALSE(a.is_leader());
  EXPECT_EQ(a.stats().lost, 1u);
  clock.Advance(900ms);
  a.Tick();
  EXPECT_FALSE(a.is_leader());
  EXPECT_TRUE(b.is_leader());
}

TEST_F(LeaseLockerTest, RefusedRenewEndsLeadershipAtOnce) {
  locker.Tick();
  row.owner = "operator";  // e.g. an operator's UPDATE took the row
  row.token = 7;
  clock.Advance(3000ms);
  locker.Tick();
  EXPECT_FALSE(locker.is_leader());
  EXPECT_EQ(locker.stats().lost, 1u);
  EXPECT_EQ(locker.stats().lost_by_watchdog, 0u);
}

TEST_F(TwoLockersTest, StopReleasesSoAnotherAcquiresWithANewToken) {
  a.Tick();
  a.Stop();
  a.Stop();  // released once only
  EXPECT_FALSE(a.is_leader());
  EXPECT_EQ(sa.releases, 1);
  EXPECT_FALSE(row.owner.has_value());
  b.Tick();
  EXPECT_TRUE(b.is_leader());
  EXPECT_EQ(b.token(), 2);

  // A locker that never led does not touch the row on Stop.
  MemoryStrategy sc(row, clock, "c");
  {
    Locker c(sc, clock, Options(), "test");
    c.Tick();
  }
  EXPECT_EQ(sc.releases, 0);
  EXPECT_EQ(row.owner, "b");
}

TEST_F(LeaseLockerTest, AcquireFailuresAreCountedAndRetried) {
  s.fail = true;
  EXPECT_EQ(locker.Tick(), 900ms);
  EXPECT_EQ(locker.stats().acquire_failures, 1u);
  EXPECT_FALSE(locker.is_leader());
  s.fail = false;
  clock.Advance(900ms);
  locker.Tick();
  EXPECT_TRUE(locker.is_leader());
}

}  // namespace
}  // namespace dsync::dispatcher
