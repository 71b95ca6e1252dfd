// The relay protocol (table/relay.h) against a real MariaDB: a source schema, a target
// schema and the framework schema; the source half and the target half each on their
// own thread, meeting only in the relay tables. The target side here applies a chunk
// with plain upserts and deletes in one transaction (the undo records are the target
// writer's business, tested with the table steps) and records every chunk's key range,
// so a test can show that no range is applied twice.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "core/clock.h"
#include "table/relay.h"
#include "table/relay_sides.h"
#include "table/relay_table.h"
#include "tests/support/test_db.h"

namespace dsync::table {
namespace {

using testing::TestSchema;

// Applies chunks with plain statements; remembers the checkpoint and each chunk's range.
class PlainTarget final : public DbTargetReads {
 public:
  using DbTargetReads::DbTargetReads;

  std::vector<KeyRange> Segments() {
    std::lock_guard lock(mu);
    if (finished) return {};
    return {KeyRange{checkpoint, std::nullopt}};
  }
  int64_t Apply(const RelayChunk& chunk) override {
    if (chunk.columns != cols_.names()) throw std::runtime_error("chunk columns differ");
    int64_t n = 0;
    pool_.Transact("apply", [&](storage::Connection& c) {
      n = 0;
      for (const Row& k : chunk.deletes) {
        std::vector<SqlValue> p;
        key_.AppendKeyValues(k, p);
        n += static_cast<int64_t>(
            c.Execute("DELETE FROM " + QuoteIdentifier(table_) + " WHERE " + key_.MatchKeys(1), Bind(p)));
      }
      for (const Row& r : chunk.rows) {
        std::vector<SqlValue> p;
        cols_.AppendValues(r, p);
        std::string set;
        for (const std::string& name : cols_.names()) {
          set += (set.empty() ? "" : ", ") + QuoteIdentifier(name) + " = VALUES(" + QuoteIdentifier(name) + ")";
        }
        c.Execute("INSERT INTO " + QuoteIdentifier(table_) + " (" + cols_.NameList() + ") VALUES " +
                      cols_.ValuesTuple() + " ON DUPLICATE KEY UPDATE " + set,
                  Bind(p));
        ++n;
      }
    });
    std::lock_guard lock(mu);
    applied.push_back({chunk.lo, chunk.hi});
    checkpoint = chunk.hi;
    if (!chunk.hi) finished = true;
    return n;
  }
  void RecordEqual(const KeyRange& range) override {
    std::lock_guard lock(mu);
    equal.push_back(range);
    checkpoint = range.hi;
    if (!range.hi) finished = true;
  }
  void Finish() override {}

  std::mutex mu;
  std::optional<Row> checkpoint;
  bool finished = false;
  std::vector<KeyRange> applied;
  std::vector<KeyRange> equal;
};

class RelayTest : public ::testing::Test {
 protected:
  RelayTest() : src_(false), tgt_(false), relay_(fw_.pool()) {}

  void Exec(TestSchema& db, const std::string& sql) {
    db.pool().Run("exec", [&](storage::Connection& c) { c.ExecuteDdl(sql); });
  }
  int64_t Int(TestSchema& db, const std::string& sql) {
    return db.pool().Run("q", [&](storage::Connection& c) { return c.QueryInt(sql).value_or(-1); });
  }
  std::vector<std::string> Dump(TestSchema& db, const std::string& table) {
    return db.pool().Run("dump", [&](storage::Connection& c) {
      std::vector<std::string> out;
      auto rs = c.Query("SELECT CONCAT_WS('|', QUOTE(id), QUOTE(v), QUOTE(g)) FROM " + table + " ORDER BY id");
      while (rs->next()) out.push_back(rs->getString(1));
      return out;
    });
  }

  // src: n rows; tgt: an older copy (every 10th row changed, every 7th missing, extras).
  void NumberedTables(int n, bool text_key = false) {
    const std::string key_type = text_key ? "VARCHAR(20) COLLATE utf8mb4_bin" : "INT";
    for (TestSchema* db : {&src_, &tgt_}) {
      Exec(*db, "CREATE TABLE n (id " + key_type + " PRIMARY KEY, v VARCHAR(40), g INT) DEFAULT CHARSET=utf8mb4");
    }
    const std::string id = text_key ? "CONCAT('k', LPAD(seq, 7, '0'))" : "seq";
    Exec(src_, "INSERT INTO n SELECT " + id + ", CONCAT('value ', seq), seq % 5 FROM seq_1_to_" + std::to_string(n));
    Exec(tgt_, "INSERT INTO n SELECT " + id + ", IF(seq % 10 = 0, 'old', CONCAT('value ', seq)), seq % 5 FROM seq_1_to_" +
                   std::to_string(n) + " WHERE seq % 7 <> 0");
    Exec(tgt_, "INSERT INTO n SELECT " + (text_key ? std::string("CONCAT('k', LPAD(seq, 7, '0'), 'x')") : "seq + 10000000") +
                   ", 'extra', 0 FROM seq_1_to_50");
  }

  struct Sides {
    std::unique_ptr<DbSourceSide> source;
    std::unique_ptr<PlainTarget> target;
  };
  Sides MakeSides() {
    auto describe = [](TestSchema& db, const std::string& ds) {
      return db.pool().Run("describe", [&](storage::Connection& c) { return DescribeTable(c, ds, "n").value(); });
    };
    const TableSchema s = describe(src_, "env_a"), t = describe(tgt_, "env_b");
    const std::vector<std::string> names = {"id", "v", "g"};
    Sides sides;
    sides.source = std::make_unique<DbSourceSide>(src_.pool(), "n", ColumnSet(s, names), ColumnSet(s, {"id"}),
                                                  BoundFilter{});
    sides.target = std::make_unique<PlainTarget>(tgt_.pool(), "n", ColumnSet(t, names), ColumnSet(t, {"id"}),
                                                 BoundFilter{});
    return sides;
  }

  void Open(int64_t window = 64 << 20) {
    RelaySpec spec{"EV-1#1", "EV-1", "docs", "n", "env_a", "env_b", window};
    relay_.Open(spec);
  }

  RelayOptions Options(bool delete_missing = false) {
    RelayOptions o;
    o.compare_rows = 1000;
    o.chunk_rows = 500;
    o.poll = Millis(5);
    o.idle_poll = Millis(20);
    o.delete_missing = delete_missing;
    return o;
  }

  // Both halves to the end, each on its own thread.
  std::pair<RelayTotals, RelayTotals> RunBoth(Sides& sides, RelayOptions o, int target_attempt = 1,
                                              int source_attempt = 1) {
    RelayHalf t = relay_.TakeTarget("EV-1#1", target_attempt, "b1:7000");
    RelayHalf s = relay_.TakeSource("EV-1#1", t.epoch, source_attempt, "a1:7000");
    RelayTotals st;
    std::exception_ptr source_error;
    std::thread source([&] {
      try {
        RelaySource half(relay_, s, *sides.source, o, RelayControl{clock_, {}, {}, {}});
        st = half.Run();
      } catch (...) {
        source_error = std::current_exception();
      }
    });
    RelayTarget target(relay_, t, *sides.target, sides.target->Segments(), o, RelayControl{clock_, {}, {}, {}});
    RelayTotals tt = target.Run();
    source.join();
    if (source_error) std::rethrow_exception(source_error);
    return {st, tt};
  }

  // No chunk range applied overlaps another, and they follow each other in key order.
  static void ExpectNoRangeTwice(const PlainTarget& t) {
    std::optional<int64_t> prev_hi;
    for (const KeyRange& r : t.applied) {
      const int64_t lo = r.lo ? std::stoll(*(*r.lo)[0]) : INT64_MIN;
      if (prev_hi) {
        EXPECT_GE(lo, *prev_hi) << "a chunk starts before the previous one ended";
      }
      prev_hi = r.hi ? std::stoll(*(*r.hi)[0]) : INT64_MAX;
      EXPECT_LE(lo, *prev_hi);
    }
  }

  TestSchema fw_;
  TestSchema src_, tgt_;
  RelayTable relay_;
  SystemClock clock_;
};

TEST_F(RelayTest, AnOlderCopyBecomesEqualAndOnlyDifferencesTravel) {
  NumberedTables(20000);
  Open();
  Sides sides = MakeSides();
  auto [source, target] = RunBoth(sides, Options());
  std::vector<std::string> want = Dump(src_, "n");
  std::vector<std::string> got = Dump(tgt_, "n");
  // Without delete_missing the 50 extras stay: everything else is equal.
  ASSERT_EQ(got.size(), want.size() + 50);
  got.resize(want.size());
  EXPECT_EQ(got, want);
  // 2,857 missing (every 7th) and 1,715 changed rows (every 10th, not also a 7th)
  // travelled, not 20,000.
  EXPECT_EQ(target.rows_relayed, 2857 + 1715);
  EXPECT_EQ(source.rows_relayed, target.rows_relayed);
  EXPECT_EQ(Int(fw_, "SELECT COUNT(*) FROM dsync_relay_chunk"), 0);
  EXPECT_EQ(Int(fw_, "SELECT COUNT(*) FROM dsync_relay_range"), 0);
  EXPECT_EQ(relay_.Read("EV-1#1")->state, "DONE");
  ExpectNoRangeTwice(*sides.target);
}

TEST_F(RelayTest, AnUnchangedTableMovesNoRows) {
  NumberedTables(20000);
  Exec(tgt_, "DELETE FROM n");
  Exec(tgt_, "INSERT INTO n SELECT seq, CONCAT('value ', seq), seq % 5 FROM seq_1_to_20000");
  Open();
  Sides sides = MakeSides();
  auto [source, target] = RunBoth(sides, Options());
  EXPECT_EQ(target.chunks, 0);
  EXPECT_EQ(target.ranges_equal, target.ranges);
  EXPECT_EQ(relay_.Read("EV-1#1")->bytes_relayed, 0);
  EXPECT_EQ(Dump(tgt_, "n"), Dump(src_, "n"));
}

TEST_F(RelayTest, ACopyIntoAnEmptyTargetStaysInsideTheWindow) {
  NumberedTables(20000);
  Exec(tgt_, "DELETE FROM n");
  Open(/*window=*/64 << 10);
  Sides sides = MakeSides();
  auto [source, target] = RunBoth(sides, Options());
  EXPECT_EQ(Dump(tgt_, "n"), Dump(src_, "n"));
  EXPECT_EQ(target.rows_relayed, 20000);
  const std::optional<RelayStatus> st = relay_.Read("EV-1#1");
  EXPECT_LE(st->peak_bytes, 64 << 10);
  EXPECT_GT(st->peak_bytes, 0);
  ExpectNoRangeTwice(*sides.target);
}

TEST_F(RelayTest, DeleteMissingRemovesTheExtras) {
  NumberedTables(5000);
  Open();
  Sides sides = MakeSides();
  RunBoth(sides, Options(/*delete_missing=*/true));
  EXPECT_EQ(Dump(tgt_, "n"), Dump(src_, "n"));
}

TEST_F(RelayTest, TextKeysAreComparedWholeRangeByRange) {
  NumberedTables(5000, /*text_key=*/true);
  Open();
  Sides sides = MakeSides();
  RunBoth(sides, Options(/*delete_missing=*/true));
  EXPECT_EQ(Dump(tgt_, "n"), Dump(src_, "n"));
}

// The target half stops after a few chunks (its node died); a new target half (a later
// claim) starts a new epoch from the checkpoint; the old epoch's source half ends with
// RelayLost, a source half of the new epoch takes over, and the end is equal with no key
// range applied twice.
TEST_F(RelayTest, ATargetTakeoverResumesFromTheCheckpoint) {
  NumberedTables(20000);
  Exec(tgt_, "DELETE FROM n WHERE id > 2000");
  Open(/*window=*/32 << 10);
  Sides sides = MakeSides();
  RelayOptions o = Options();
  RelayHalf t1 = relay_.TakeTarget("EV-1#1", 1, "b1:7000");
  RelayHalf s1 = relay_.TakeSource("EV-1#1", t1.epoch, 1, "a1:7000");
  std::exception_ptr old_source_error;
  std::thread old_source([&] {
    try {
      RelaySource half(relay_, s1, *sides.source, o, RelayControl{clock_, {}, {}, {}});
      half.Run();
    } catch (...) {
      old_source_error = std::current_exception();
    }
  });
  std::stop_source stop;
  std::thread stopper([&] {
    for (;;) {
      {
        std::lock_guard lock(sides.target->mu);
        if (sides.target->applied.size() >= 5) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    stop.request_stop();
  });
  RelayTarget first(relay_, t1, *sides.target, sides.target->Segments(), o, RelayControl{clock_, stop.get_token(), {}, {}});
  EXPECT_THROW(first.Run(), RelayStopped);
  stopper.join();
  RelayHalf t2 = relay_.TakeTarget("EV-1#1", 2, "b2:7000");
  old_source.join();
  ASSERT_TRUE(old_source_error);
  EXPECT_THROW(std::rethrow_exception(old_source_error), RelayLost);
  // The old target half, late, writes nothing.
  EXPECT_THROW(relay_.PublishRanges(t1, {{99, std::nullopt, std::nullopt, 0, "0:0", "PUBLISHED", std::nullopt}}),
               RelayLost);
  RelayHalf s2 = relay_.TakeSource("EV-1#1", t2.epoch, 1, "a2:7000");
  std::exception_ptr source_error;
  std::thread source([&] {
    try {
      RelaySource half(relay_, s2, *sides.source, o, RelayControl{clock_, {}, {}, {}});
      half.Run();
    } catch (...) {
      source_error = std::current_exception();
    }
  });
  RelayTarget second(relay_, t2, *sides.target, sides.target->Segments(), o, RelayControl{clock_, {}, {}, {}});
  second.Run();
  source.join();
  if (source_error) std::rethrow_exception(source_error);
  EXPECT_EQ(Dump(tgt_, "n"), Dump(src_, "n"));
  ExpectNoRangeTwice(*sides.target);
  EXPECT_EQ(relay_.Read("EV-1#1")->epoch, 2);
}

// The source half stops mid-way (its node died); a new source half resumes from the
// ranges' states; nothing is sent twice into the target.
TEST_F(RelayTest, ASourceTakeoverResumesFromTheRangesStates) {
  NumberedTables(20000);
  Exec(tgt_, "DELETE FROM n WHERE id > 2000");
  Open(/*window=*/32 << 10);
  Sides sides = MakeSides();
  RelayOptions o = Options();
  RelayHalf t = relay_.TakeTarget("EV-1#1", 1, "b1:7000");
  RelayHalf s1 = relay_.TakeSource("EV-1#1", t.epoch, 1, "a1:7000");
  std::exception_ptr target_error;
  std::thread target([&] {
    try {
      RelayTarget half(relay_, t, *sides.target, sides.target->Segments(), o, RelayControl{clock_, {}, {}, {}});
      half.Run();
    } catch (...) {
      target_error = std::current_exception();
    }
  });
  {
    std::stop_source stop;
    std::thread stopper([&] {
      while (relay_.Read("EV-1#1")->chunks_relayed < 8) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      stop.request_stop();
    });
    RelaySource first(relay_, s1, *sides.source, o, RelayControl{clock_, stop.get_token(), {}, {}});
    EXPECT_THROW(first.Run(), RelayStopped);
    stopper.join();
  }
  RelayHalf s2 = relay_.TakeSource("EV-1#1", t.epoch, 2, "a2:7000");
  EXPECT_THROW(relay_.AddChunk(s1, 1, false, 0, "x", std::nullopt), RelayLost);
  RelaySource second(relay_, s2, *sides.source, o, RelayControl{clock_, {}, {}, {}});
  second.Run();
  target.join();
  if (target_error) std::rethrow_exception(target_error);
  EXPECT_EQ(Dump(tgt_, "n"), Dump(src_, "n"));
  ExpectNoRangeTwice(*sides.target);
}

TEST_F(RelayTest, HashListsRoundTrip) {
  NumberedTables(100);
  Sides sides = MakeSides();
  const KeyHashes h = sides.target->Hashes({std::nullopt, std::nullopt});
  const KeyHashes back = DecodeKeyHashes(sides.target->key(), EncodeKeyHashes(sides.target->key(), h));
  ASSERT_EQ(back.size(), h.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(back.key(i), h.key(i));
    EXPECT_EQ(back.hash(i), h.hash(i));
  }
  EXPECT_THROW(DecodeKeyHashes(sides.target->key(), "garbage"), RelayFormatError);
}

}  // namespace
}  // namespace dsync::table
