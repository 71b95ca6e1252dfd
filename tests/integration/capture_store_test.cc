// capture/capture_store.h against a real MariaDB: the capture's lease and the fenced
// commit of its events with its checkpoint, the exactly-once mechanism of
// docs/capture.md. Expiry is produced by moving lease_until into the past with SQL.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "capture/capture_events.h"
#include "capture/capture_store.h"
#include "events/rows.h"
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

// V026: a FAILED capture, each paused table, and a RUNNING capture whose lag exceeds
// its lag_bound_s (by its oldest unfinished event, or by its reader's lag at the last
// checkpoint) are rows of v_events_needing_attention, and the reads of the CLI, the
// API and /metrics (events/rows.h) list the same rows with the same details.
TEST_F(CaptureStoreTest, CapturesNeedingAttentionAreListedByTheViewAndByTheReads) {
  auto running = [&](const std::string& name, int bound) {
    store_.Ensure(name, "a", "b", bound);
    auto token = store_.TryAcquire(name, "A", 10s);
    EXPECT_TRUE(token);
    Checkpoint cp = At(1);
    cp.last_commit_at_s = 0;
    store_.Commit(name, "A", *token, 10s, 1s, cp, {});
    return *token;
  };
  auto events_of = [&](const std::string& name, uint64_t seq) {
    CapturedTransaction t;
    t.server = 1;
    t.sequence = seq;
    t.keys["t1"].emplace("[1]", nlohmann::json::array({1}));
    return KeyedSyncEvents({name, "svc", "a,b"}, {t});
  };
  // paused: two tables of one capture
  const int64_t p = running("paused", 10);
  Checkpoint cp = At(2);
  cp.pause["t1"] = "DDL on t1: ALTER TABLE t1 ADD COLUMN x INT";
  cp.pause["t2"] = "DDL on t2";
  store_.Commit("paused", "A", p, 10s, 1s, cp, {});
  // failed
  const int64_t f = running("failed", 10);
  store_.RecordError("failed", "A", f, "FAILED", "initial copy event X ended FAILED");
  // lagging by its oldest unfinished event (30 s old, bound 5)
  const int64_t l = running("slow", 5);
  store_.Commit("slow", "A", l, 10s, 1s, At(3), events_of("slow", 3));
  Exec("UPDATE distribute_event SET create_time = NOW(3) - INTERVAL 30 SECOND WHERE data_id LIKE 'slow#%'");
  // lagging by its reader: the last checkpoint recorded a transaction committed 20 s before it
  running("behind", 10);
  Exec("UPDATE dsync_capture SET last_commit_at = updated_at - INTERVAL 20 SECOND WHERE name = 'behind'");
  // within their bounds: an unfinished event 2 s old (bound 10), a finished old one
  const int64_t ok = running("fine", 10);
  store_.Commit("fine", "A", ok, 10s, 1s, At(4), events_of("fine", 4));
  Exec("UPDATE distribute_event SET create_time = NOW(3) - INTERVAL 2 SECOND WHERE data_id LIKE 'fine#%'");
  const int64_t done = running("done", 1);
  store_.Commit("done", "A", done, 10s, 1s, At(5), events_of("done", 5));
  Exec("UPDATE distribute_event SET status = 'SUCCESS', create_time = NOW(3) - INTERVAL 1 HOUR WHERE data_id LIKE 'done#%'");

  using Row = std::tuple<std::string, std::string, std::string, std::string>;  // reason, code, status, detail
  std::set<Row> view;
  db_.pool().Run("view", [&](storage::Connection& c) {
    auto rs = c.Query("SELECT reason, code, status, detail, data_id, tenant_id, topic FROM v_events_needing_attention "
                      "WHERE reason LIKE 'capture%'");
    while (rs->next()) {
      view.emplace(rs->getString(1), rs->getString(2), rs->getString(3), rs->getString(4));
      EXPECT_EQ(rs->getString(6), "dsync.capture");
      EXPECT_EQ(rs->getString(7), "dsync.capture");
    }
  });
  const std::set<Row> expected = {
      {"capture_table_paused", "capture:paused:t1", "RUNNING",
       "table t1 of capture paused paused: DDL on t1: ALTER TABLE t1 ADD COLUMN x INT; align the target, then: dsync "
       "capture resume paused"},
      {"capture_table_paused", "capture:paused:t2", "RUNNING",
       "table t2 of capture paused paused: DDL on t2; align the target, then: dsync capture resume paused"},
      {"capture_failed", "capture:failed", "FAILED",
       "capture failed failed; fix the cause, then: dsync capture resume failed"},
      {"capture_lagging", "capture:slow", "RUNNING",
       "capture slow lags 30 s, above its bound of 5 s (captures.slow.lag_bound_s)"},
      {"capture_lagging", "capture:behind", "RUNNING",
       "capture behind lags 20 s, above its bound of 10 s (captures.behind.lag_bound_s)"},
  };
  EXPECT_EQ(view, expected);

  std::set<Row> reads;
  std::map<std::string, int64_t> counts;
  db_.pool().Run("reads", [&](storage::Connection& c) {
    reads.clear();
    for (const auto& a : events::ReadNeedingAttention(c, 100)) {
      if (a.reason.starts_with("capture")) reads.emplace(a.reason, a.code, a.status, a.detail);
      if (a.reason == "capture_failed") {
        EXPECT_EQ(a.last_error, "initial copy event X ended FAILED");
      }
    }
    counts = events::CountNeedingAttention(c, 100);
  });
  EXPECT_EQ(reads, expected);
  EXPECT_EQ(counts["capture_table_paused"], 2);
  EXPECT_EQ(counts["capture_failed"], 1);
  EXPECT_EQ(counts["capture_lagging"], 2);
  const auto& reasons = events::AttentionReasons();
  EXPECT_EQ(std::set<std::string>(reasons.end() - 3, reasons.end()),
            (std::set<std::string>{"capture_failed", "capture_table_paused", "capture_lagging"}));

  // Resumed and caught up: nothing left.
  store_.Resume("paused", false);
  store_.Resume("failed", false);
  Exec("UPDATE distribute_event SET status = 'SUCCESS' WHERE data_id LIKE 'slow#%'");
  Exec("UPDATE dsync_capture SET last_commit_at = updated_at WHERE name = 'behind'");
  EXPECT_EQ(Int("SELECT COUNT(*) FROM v_events_needing_attention WHERE reason LIKE 'capture%'"), 0);
}

}  // namespace
}  // namespace dsync::capture
