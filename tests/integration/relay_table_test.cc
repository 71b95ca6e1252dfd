// The relay tables' statements (table/relay_table.h) against a real MariaDB: the two
// halves' fences, epochs, the window, and byte-exact chunk data.
#include "table/relay_table.h"

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

#include "table/relay_codec.h"
#include "tests/support/db_test.h"

namespace dsync::table {
namespace {

class RelayTableTest : public testing::DbTest {
 protected:
  RelayTableTest() : relay_(db_.pool()) {
    spec_.step_code = "E1#1";
    spec_.event_code = "E1";
    spec_.step_name = "docs";
    spec_.table = "kb_doc";
    spec_.source = "env_a";
    spec_.target = "env_b";
    spec_.window_bytes = 1000;
    relay_.Open(spec_);
  }

  int64_t Chunks() { return Int("SELECT COUNT(*) FROM dsync_relay_chunk WHERE step_code = ?", spec_.step_code); }
  int64_t Ranges() { return Int("SELECT COUNT(*) FROM dsync_relay_range WHERE step_code = ?", spec_.step_code); }
  static std::string Bytes(size_t n) { return std::string(n, 'x'); }

  static std::vector<RelayRange> ThreeRanges() {
    return {{1, std::nullopt, R"(["100"])", 100, "100:77", "PUBLISHED", std::nullopt},
            {2, R"(["100"])", R"(["200"])", 100, "100:78", "PUBLISHED", std::nullopt},
            {3, R"(["200"])", std::nullopt, 0, "0:0", "PUBLISHED", std::nullopt}};
  }

  RelaySpec spec_;
  RelayTable relay_;
};

TEST_F(RelayTableTest, OpenIsOnceAndReadShowsTheRow) {
  relay_.Open(spec_);
  EXPECT_EQ(Int("SELECT COUNT(*) FROM dsync_relay WHERE step_code = ?", spec_.step_code), 1);
  std::optional<RelayStatus> s = relay_.Read(spec_.step_code);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "OPEN");
  EXPECT_EQ(s->epoch, 0);
  EXPECT_EQ(s->window_bytes, 1000);
  EXPECT_FALSE(relay_.Read("no such step"));
  // Codes are bytes: a case variant is another step.
  EXPECT_FALSE(relay_.Read("e1#1"));
}

TEST_F(RelayTableTest, HalvesPublishAndReadRangesSchemasAndHashes) {
  RelayHalf t = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  RelayHalf s = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  EXPECT_EQ(t.epoch, 1);
  EXPECT_EQ(s.epoch, 1);
  relay_.PublishSchema(t, R"({"columns":["id","title"]})");
  relay_.PublishSchema(s, R"({"columns":["id","title","extra"]})");
  relay_.PublishRanges(t, ThreeRanges());

  std::vector<RelayRange> got = relay_.ReadRanges(s, 0, 10);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_FALSE(got[0].lo_key);
  EXPECT_EQ(got[1].hi_key, R"(["200"])");
  EXPECT_FALSE(got[2].hi_key);
  EXPECT_EQ(got[1].target_checksum, "100:78");
  EXPECT_EQ(relay_.ReadRanges(s, 1, 1).at(0).range_no, 2);

  relay_.SetRangeState(s, 1, "EQUAL");
  relay_.SetRangeState(s, 2, "HASHES_WANTED");
  EXPECT_FALSE(relay_.ReadHashes(s, 2));
  const std::string hashes("\x00\x01\xff hashes \x00", 12);
  relay_.PublishHashes(t, 2, hashes);
  EXPECT_EQ(relay_.ReadHashes(s, 2), hashes);
  EXPECT_EQ(relay_.ReadRanges(s, 1, 1).at(0).state, "HASHES");

  std::optional<RelayStatus> st = relay_.Read(spec_.step_code);
  EXPECT_EQ(st->target_schema, R"({"columns":["id","title"]})");
  EXPECT_EQ(st->source_schema, R"({"columns":["id","title","extra"]})");

  relay_.DropRangesThrough(t, 2);
  EXPECT_EQ(relay_.ReadRanges(s, 0, 10).size(), 1u);
}

TEST_F(RelayTableTest, ChunkDataRoundTripsByteForByte) {
  RelayHalf t = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  RelayHalf s = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  relay_.PublishRanges(t, ThreeRanges());
  RelayChunk chunk;
  chunk.columns = {"id", "bin"};
  chunk.key_columns = {"id"};
  chunk.rows = {Row{"1", std::string("\x00\xff\x80 end", 7)}, Row{"2", std::nullopt}};
  const std::string data = EncodeRelayChunk(chunk);
  std::optional<int> no = relay_.AddChunk(s, 1, /*last_of_range=*/false, 2, data, R"(["2"])");
  ASSERT_EQ(no, 1);
  EXPECT_EQ(relay_.ReadRanges(s, 0, 1).at(0).state, "SENDING");
  EXPECT_EQ(relay_.ReadRanges(s, 0, 1).at(0).sent_hi, R"(["2"])");

  std::vector<RelayChunkRow> rows = relay_.ReadChunks(t, 0, 10);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].data, data);
  EXPECT_EQ(DecodeRelayChunk(rows[0].data), chunk);
  EXPECT_EQ(rows[0].row_count, 2);
  EXPECT_FALSE(rows[0].last_of_range);
}

TEST_F(RelayTableTest, TheWindowBoundsBytesInFlight) {
  RelayHalf t = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  RelayHalf s = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  EXPECT_EQ(relay_.AddChunk(s, 1, false, 1, Bytes(800), std::nullopt), 1);
  EXPECT_EQ(relay_.AddChunk(s, 1, false, 1, Bytes(300), std::nullopt), std::nullopt);  // 1100 > 1000
  EXPECT_EQ(relay_.AddChunk(s, 1, false, 1, Bytes(200), std::nullopt), 2);             // exactly 1000
  EXPECT_EQ(Chunks(), 2);
  relay_.RemoveChunk(t, 1);
  relay_.RemoveChunk(t, 1);  // again: nothing more
  EXPECT_EQ(relay_.Read(spec_.step_code)->bytes_in_flight, 200);
  EXPECT_EQ(relay_.AddChunk(s, 1, false, 1, Bytes(300), std::nullopt), 3);
  relay_.RemoveChunk(t, 2);
  relay_.RemoveChunk(t, 3);
  // Larger than the window, alone: it moves (else a wide row could never pass).
  EXPECT_EQ(relay_.AddChunk(s, 1, true, 1, Bytes(5000), std::nullopt), 4);
  EXPECT_EQ(relay_.AddChunk(s, 2, false, 1, Bytes(1), std::nullopt), std::nullopt);
  std::optional<RelayStatus> st = relay_.Read(spec_.step_code);
  EXPECT_EQ(st->bytes_in_flight, 5000);
  EXPECT_EQ(st->peak_bytes, 5000);
  EXPECT_EQ(st->bytes_relayed, 6300);
  EXPECT_EQ(st->chunks_relayed, 4);
}

// A source half taken over (its node froze past the offline timeout; the child event
// was claimed again elsewhere) writes nothing after the takeover, whatever it tries.
TEST_F(RelayTableTest, ASourceHalfTakenOverWritesNothing) {
  RelayHalf t = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  relay_.PublishRanges(t, ThreeRanges());
  RelayHalf old_source = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  ASSERT_EQ(relay_.AddChunk(old_source, 1, false, 1, Bytes(10), std::nullopt), 1);
  RelayHalf new_source = relay_.TakeSource(spec_.step_code, 1, 2, "a2:7000");

  EXPECT_THROW(relay_.AddChunk(old_source, 1, false, 1, Bytes(10), std::nullopt), RelayLost);
  EXPECT_THROW(relay_.SetRangeState(old_source, 2, "EQUAL"), RelayLost);
  EXPECT_THROW(relay_.PublishSchema(old_source, "{}"), RelayLost);
  EXPECT_THROW(relay_.SetState(old_source, "SOURCE_DONE"), RelayLost);
  EXPECT_THROW(relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000"), RelayLost);  // an older claim, late
  EXPECT_EQ(Chunks(), 1);
  EXPECT_EQ(relay_.ReadRanges(t, 1, 1).at(0).state, "PUBLISHED");
  EXPECT_EQ(relay_.AddChunk(new_source, 1, true, 1, Bytes(10), std::nullopt), 2);
  try {
    relay_.AddChunk(old_source, 2, false, 1, Bytes(10), std::nullopt);
    FAIL() << "no RelayLost";
  } catch (const RelayLost& e) {
    EXPECT_EQ(std::string(e.what()), "relay of step 'E1#1': the source half of attempt 1 was taken over by attempt 2");
  }
}

// A target takeover starts a new epoch: what the old epoch published and relayed is
// gone, and neither the old target half nor the old epoch's source half writes again; a
// source half of the new epoch starts afresh (chunk numbers are never reused).
TEST_F(RelayTableTest, ATargetTakeoverStartsANewEpoch) {
  RelayHalf old_target = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  RelayHalf s = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  relay_.PublishRanges(old_target, ThreeRanges());
  relay_.PublishSchema(s, "{}");
  ASSERT_TRUE(relay_.AddChunk(s, 1, false, 1, Bytes(100), std::nullopt));

  RelayHalf t = relay_.TakeTarget(spec_.step_code, 2, "b2:7000");
  EXPECT_EQ(t.epoch, 2);
  EXPECT_EQ(Chunks(), 0);
  EXPECT_EQ(Ranges(), 0);
  std::optional<RelayStatus> st = relay_.Read(spec_.step_code);
  EXPECT_EQ(st->bytes_in_flight, 0);
  EXPECT_EQ(st->source_attempt, 0);
  EXPECT_FALSE(st->source_schema);
  EXPECT_THROW(relay_.PublishRanges(old_target, ThreeRanges()), RelayLost);
  EXPECT_THROW(relay_.RemoveChunk(old_target, 1), RelayLost);
  EXPECT_THROW(relay_.AddChunk(s, 1, false, 1, Bytes(100), std::nullopt), RelayLost);
  EXPECT_THROW(relay_.TakeTarget(spec_.step_code, 1, "b1:7000"), RelayLost);
  EXPECT_THROW(relay_.TakeSource(spec_.step_code, 1, 2, "a1:7000"), RelayLost);  // an ended epoch

  RelayHalf s2 = relay_.TakeSource(spec_.step_code, 2, 1, "a2:7000");
  relay_.PublishRanges(t, ThreeRanges());
  EXPECT_EQ(relay_.AddChunk(s2, 1, false, 1, Bytes(100), std::nullopt), 2);  // numbers never reused
  EXPECT_EQ(relay_.ReadChunks(t, 0, 10).size(), 1u);
}

// The fence is taken under the relay row's lock: chunks added by a source half while a
// takeover races it are either all before the takeover or refused, never after it.
TEST_F(RelayTableTest, AddsRacingATakeoverNeverLandAfterIt) {
  RelayHalf t = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  (void)t;
  RelayHalf old_source = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  std::atomic<bool> stop{false};
  std::atomic<int> added{0}, refused{0};
  std::thread writer([&] {
    while (!stop) {
      try {
        if (relay_.AddChunk(old_source, 1, false, 1, Bytes(1), std::nullopt)) ++added;
      } catch (const RelayLost&) {
        ++refused;
        return;
      }
    }
  });
  while (added < 20) std::this_thread::yield();
  relay_.TakeSource(spec_.step_code, 1, 2, "a2:7000");
  const int64_t at_takeover = Chunks();
  writer.join();
  stop = true;
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(Chunks(), at_takeover);
  EXPECT_EQ(Chunks(), added.load());
}

TEST_F(RelayTableTest, StateAndDrop) {
  RelayHalf t = relay_.TakeTarget(spec_.step_code, 1, "b1:7000");
  RelayHalf s = relay_.TakeSource(spec_.step_code, 1, 1, "a1:7000");
  relay_.PublishRanges(t, ThreeRanges());
  relay_.AddChunk(s, 1, false, 1, Bytes(10), std::nullopt);
  relay_.SetState(s, "SOURCE_DONE");
  EXPECT_EQ(relay_.Read(spec_.step_code)->state, "SOURCE_DONE");
  relay_.SetState(t, "FAILED", std::string("schema preflight: column `title` differs"));
  EXPECT_EQ(relay_.Read(spec_.step_code)->error, "schema preflight: column `title` differs");
  relay_.Drop(spec_.step_code);
  EXPECT_FALSE(relay_.Read(spec_.step_code));
  EXPECT_EQ(Chunks(), 0);
  EXPECT_EQ(Ranges(), 0);
  EXPECT_THROW(relay_.AddChunk(s, 1, false, 1, Bytes(1), std::nullopt), RelayLost);
}

// Retention: a relay untouched past the bound goes with its ranges and chunks unless its
// event is in flight; a fresh one stays.
TEST_F(RelayTableTest, PurgeDropsOldRelaysWhoseEventIsNotInFlight) {
  RelaySpec running = spec_, gone = spec_, fresh = spec_;
  running.step_code = "E2#1", running.event_code = "E2";
  gone.step_code = "V9", gone.event_code = "verify-V9";  // a verify's relay: no event
  fresh.step_code = "E3#1", fresh.event_code = "E3";
  for (const RelaySpec* r : {&running, &gone, &fresh}) relay_.Open(*r);
  RelayHalf t = relay_.TakeTarget(gone.step_code, 1, "b1:7000");
  relay_.PublishRanges(t, ThreeRanges());
  Exec("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status) VALUES "
       "('t', 'E1', 'd', 'SYNC', '{}', 'SUCCESS'), ('t', 'E2', 'd', 'SYNC', '{}', 'RUNNING')");
  Exec("UPDATE dsync_relay SET updated_at = NOW(3) - INTERVAL 2 HOUR WHERE step_code <> 'E3#1'");

  EXPECT_EQ(relay_.Purge(/*older_than_us=*/3600LL * 1000 * 1000, 100), 2);  // E1#1 (SUCCESS), V9 (no event)
  EXPECT_FALSE(relay_.Read(spec_.step_code));
  EXPECT_FALSE(relay_.Read(gone.step_code));
  EXPECT_EQ(Int("SELECT COUNT(*) FROM dsync_relay_range WHERE step_code = 'V9'"), 0);
  EXPECT_TRUE(relay_.Read(running.step_code)) << "its event is in flight";
  EXPECT_TRUE(relay_.Read(fresh.step_code)) << "touched within the bound";
  EXPECT_EQ(relay_.Purge(3600LL * 1000 * 1000, 100), 0);
}

}  // namespace
}  // namespace dsync::table
