// capture/capture_store.h against a real MariaDB: the capture's lease and the fenced
// commit of its events with its checkpoint, the exactly-once mechanism of
// docs/capture.md. Expiry is produced by moving lease_until into the past with SQL.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "capture/capture_events.h"
#include "capture/capture_store.h"
#include "tests/support/db_test.h"

namespace dsync::capture {
namespace {

using namespace std::chrono_literals;

class CaptureStoreTest : public testing::DbTest {
 protected:
  CaptureStore store_{db_.pool(), "svc"};

  void Expire() { Exec("UPDATE dsync_capture SET lease_until = NOW(3) - INTERVAL 1 SECOND WHERE name = 'c1'"); }

  // The events of one batch ending at GTID 0-1-<seq>.
  std::vector<events::NewEventRow> Batch(uint64_t seq) {
    CapturedTransaction t;
    t.server = 1;
    t.sequence = seq;
    t.keys["t1"].emplace("[1]", nlohmann::json::array({1}));
    t.keys["t1"].emplace("[2]", nlohmann::json::array({2}));
    return KeyedSyncEvents({"c1", "svc", "a,b"}, {t});
  }
  Checkpoint At(uint64_t seq) {
    Checkpoint cp;
    cp.gtid = "0-1-" + std::to_string(seq);
    cp.file = "binlog.000001";
    cp.pos = static_cast<int64_t>(seq) * 100;
    cp.state = "RUNNING";
    cp.transactions = 1;
    cp.row_changes = 2;
    return cp;
  }
  int64_t Events() { return Int("SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.capture'"); }
};

TEST_F(CaptureStoreTest, OneHolderAtATimeAndTheTokenRisesOnEveryChange) {
  store_.Ensure("c1", "a", "b");
  auto a = store_.TryAcquire("c1", "A", 10s);
  ASSERT_TRUE(a);
  EXPECT_FALSE(store_.TryAcquire("c1", "B", 10s)) << "B took a live lease";
  EXPECT_EQ(store_.TryAcquire("c1", "A", 10s), a) << "A re-takes its own lease: same token";
  EXPECT_TRUE(store_.Renew("c1", "A", *a, 10s));
  Expire();
  auto b = store_.TryAcquire("c1", "B", 10s);
  ASSERT_TRUE(b);
  EXPECT_GT(*b, *a);
  EXPECT_FALSE(store_.Renew("c1", "A", *a, 10s)) << "A renewed a lease B holds";
  EXPECT_EQ(Int("SELECT reader_starts FROM dsync_capture WHERE name = 'c1'"), 2);
  store_.Release("c1", "A");  // not A's: no effect
  EXPECT_FALSE(store_.TryAcquire("c1", "A", 10s));
  store_.Release("c1", "B");
  EXPECT_TRUE(store_.TryAcquire("c1", "A", 10s));
}

TEST_F(CaptureStoreTest, CommitWritesEventsAndCheckpointTogether) {
  store_.Ensure("c1", "a", "b");
  auto token = store_.TryAcquire("c1", "A", 10s);
  ASSERT_TRUE(token);
  const auto batch = Batch(5);
  store_.Commit("c1", "A", *token, 10s, 1s, At(5), batch);
  auto row = store_.Read("c1");
  ASSERT_TRUE(row);
  EXPECT_EQ(row->gtid, "0-1-5");
  EXPECT_EQ(row->pos, 500);
  EXPECT_EQ(row->state, "RUNNING");
  EXPECT_EQ(row->row_changes, 2);
  EXPECT_EQ(row->events_produced, static_cast<int64_t>(batch.size()));
  EXPECT_EQ(Events(), static_cast<int64_t>(batch.size()));
}

TEST_F(CaptureStoreTest, AReaderThatLostItsLeaseWritesNothing) {
  store_.Ensure("c1", "a", "b");
  auto a = store_.TryAcquire("c1", "A", 10s);
  ASSERT_TRUE(a);
  store_.Commit("c1", "A", *a, 10s, 1s, At(5), Batch(5));
  const int64_t events = Events();
  // A freezes past its lease; B takes over and reads on from 0-1-5.
  Expire();
  auto b = store_.TryAcquire("c1", "B", 10s);
  ASSERT_TRUE(b);
  // A wakes up with the batch it read: refused, nothing of it written.
  EXPECT_THROW(store_.Commit("c1", "A", *a, 10s, 1s, At(9), Batch(9)), LeaseLost);
  EXPECT_EQ(Events(), events);
  EXPECT_EQ(store_.Read("c1")->gtid, "0-1-5");
  EXPECT_THROW(store_.RecordError("c1", "A", *a, "FAILED", "late"), LeaseLost);
  // B reads the same range and commits it once.
  store_.Commit("c1", "B", *b, 10s, 1s, At(9), Batch(9));
  EXPECT_EQ(store_.Read("c1")->gtid, "0-1-9");
  EXPECT_EQ(store_.Read("c1")->row_changes, 4);
  EXPECT_EQ(Events(), events + static_cast<int64_t>(Batch(9).size()));
}

TEST_F(CaptureStoreTest, ALeaseAboutToExpireDoesNotCommit) {
  store_.Ensure("c1", "a", "b");
  auto a = store_.TryAcquire("c1", "A", 10s);
  ASSERT_TRUE(a);
  Exec("UPDATE dsync_capture SET lease_until = NOW(3) + INTERVAL 500000 MICROSECOND WHERE name = 'c1'");
  EXPECT_THROW(store_.Commit("c1", "A", *a, 10s, 2s, At(5), Batch(5)), LeaseLost) << "inside the margin";
  EXPECT_EQ(Events(), 0);
}

TEST_F(CaptureStoreTest, PausesAccumulateAndResumeClearsThem) {
  store_.Ensure("c1", "a", "b");
  auto a = store_.TryAcquire("c1", "A", 10s);
  ASSERT_TRUE(a);
  Checkpoint cp = At(5);
  cp.pause["t1"] = "DDL on t1";
  store_.Commit("c1", "A", *a, 10s, 1s, cp, {});
  cp = At(6);
  cp.pause["t2"] = "DDL on t2";
  store_.Commit("c1", "A", *a, 10s, 1s, cp, {});
  EXPECT_EQ(store_.Read("c1")->paused.size(), 2u);
  const auto resumed = store_.Resume("c1", false);
  EXPECT_EQ(resumed.size(), 2u);
  EXPECT_TRUE(store_.Read("c1")->paused.empty());
  EXPECT_EQ(store_.Read("c1")->state, "RUNNING");
  store_.RecordError("c1", "A", *a, "FAILED", "a refusal");
  EXPECT_EQ(store_.Read("c1")->state, "FAILED");
  store_.Resume("c1", false);
  EXPECT_EQ(store_.Read("c1")->state, "NEW") << "a failed capture starts afresh";
  EXPECT_THROW(store_.Resume("nope", false), NotFoundError);
}

}  // namespace
}  // namespace dsync::capture
