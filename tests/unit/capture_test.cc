// capture/ pure logic: key extraction from binlog row images (row_image.h), GTID
// positions and transaction assembly (transactions.h), the events a batch becomes
// (capture_events.h), and the config's `captures` (config/captures.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "capture/apply_metrics.h"
#include "capture/capture_events.h"
#include "capture/row_image.h"
#include "capture/transactions.h"
#include "config/captures.h"
#include "core/error.h"

namespace dsync::capture {
namespace {

using nlohmann::json;
using Bytes = std::vector<uint8_t>;

// Type bytes of a TABLE_MAP and their metadata, built column by column.
struct MapBuilder {
  std::string types, meta;
  MapBuilder& Col(uint8_t type, Bytes m = {}) {
    types.push_back(static_cast<char>(type));
    for (uint8_t b : m) meta.push_back(static_cast<char>(b));
    return *this;
  }
};

void Le(Bytes& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void Text(Bytes& out, const std::string& s, int prefix) {
  Le(out, s.size(), prefix);
  out.insert(out.end(), s.begin(), s.end());
}

// A table whose key (k_text, k_int) comes after columns of every width rule:
//   0 dec DECIMAL(12,3)  1 at DATETIME(3)  2 tag CHAR(3) utf8mb4  3 big CHAR(100) utf8mb4
//   4 kind ENUM  5 flags SET  6 bits BIT(10)  7 note BLOB  8 k_text VARCHAR(100)  9 k_int INT
std::vector<MappedColumn> Columns() {
  MapBuilder m;
  m.Col(246, {12, 3})      // NEWDECIMAL: precision, scale
      .Col(18, {3})        // DATETIME2(3)
      .Col(254, {0xfe, 12})  // CHAR(3) utf8mb4: 12 bytes
      .Col(254, {0xee, 0x90})  // CHAR(100) utf8mb4: 400 bytes, high bits folded into the type byte
      .Col(254, {247, 1})  // ENUM, 1 byte
      .Col(254, {248, 1})  // SET, 1 byte
      .Col(16, {2, 1})     // BIT(10): 2 bits + 1 byte
      .Col(252, {2})       // BLOB: 2-byte length
      .Col(15, {0x90, 0x01})  // VARCHAR(100) utf8mb4: 400 bytes, little-endian
      .Col(3);             // LONG
  return ParseColumns(m.types, m.meta);
}
const std::vector<KeyColumn> kKey = {{8, false, "k_text"}, {9, false, "k_int"}};

// One row image with every column present; `nulls` marks NULL columns.
void Row(Bytes& out, const std::string& k_text, int32_t k_int, const std::vector<int>& nulls = {}) {
  uint16_t bitmap = 0;
  for (int n : nulls) bitmap |= static_cast<uint16_t>(1u << n);
  Le(out, bitmap, 2);  // 10 columns: 2 bytes of null bits
  auto is_null = [&](int c) { return (bitmap >> c) & 1; };
  if (!is_null(0)) out.insert(out.end(), 6, 0x80);  // DECIMAL(12,3): 4 + 2 bytes
  if (!is_null(1)) out.insert(out.end(), 7, 0x99);  // DATETIME2(3): 5 + 2 bytes
  if (!is_null(2)) Text(out, "ab", 1);
  if (!is_null(3)) Text(out, std::string(300, 'x'), 2);
  if (!is_null(4)) out.push_back(2);
  if (!is_null(5)) out.push_back(3);
  if (!is_null(6)) out.insert(out.end(), {0x03, 0xff});
  if (!is_null(7)) Text(out, std::string(1000, '\0'), 2);
  if (!is_null(8)) Text(out, k_text, 2);
  if (!is_null(9)) Le(out, static_cast<uint32_t>(k_int), 4);
}

const uint8_t kAll[2] = {0xff, 0x03};

TEST(RowImage, KeysAfterColumnsOfEveryWidth) {
  Bytes data;
  Row(data, "héllo", 42);
  Row(data, "", -7, {0, 1, 2, 3, 7});
  auto keys = RowKeys(Columns(), kKey, RowsKind::kWrite, kAll, nullptr, data.data(), data.size());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], json::array({"héllo", 42}));
  EXPECT_EQ(keys[1], json::array({"", -7}));
}

TEST(RowImage, UpdateGivesBeforeAndAfterKeys) {
  Bytes data;
  Row(data, "old", 1);
  Row(data, "new", 2);
  auto keys = RowKeys(Columns(), kKey, RowsKind::kUpdate, kAll, kAll, data.data(), data.size());
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(keys[0], json::array({"old", 1}));
  EXPECT_EQ(keys[1], json::array({"new", 2}));
}

TEST(RowImage, IntegerWidthsAndSignedness) {
  MapBuilder m;
  m.Col(1).Col(2).Col(9).Col(8);  // TINY, SHORT, INT24, LONGLONG
  const auto cols = ParseColumns(m.types, m.meta);
  Bytes data{0x00};                     // no NULLs
  Le(data, 0xff, 1);                    // -1 / 255
  Le(data, 0x8000, 2);                  // -32768 / 32768
  Le(data, 0xfffffe, 3);                // -2
  Le(data, 0xffffffffffffffffull, 8);   // -1 / 2^64-1
  const uint8_t present[1] = {0x0f};
  auto s = RowKeys(cols, {{0, false, "a"}, {1, false, "b"}, {2, false, "c"}, {3, false, "d"}}, RowsKind::kDelete,
                   present, nullptr, data.data(), data.size());
  EXPECT_EQ(s.at(0), json::array({-1, -32768, -2, -1}));
  auto u = RowKeys(cols, {{0, true, "a"}, {1, true, "b"}, {2, true, "c"}, {3, true, "d"}}, RowsKind::kDelete, present,
                   nullptr, data.data(), data.size());
  EXPECT_EQ(u.at(0), json::array({255u, 32768u, 16777214u, 18446744073709551615ull}));
}

TEST(RowImage, TruncatedRowsAndBadKeysAreErrors) {
  Bytes data;
  Row(data, "k", 1);
  data.pop_back();
  EXPECT_THROW(RowKeys(Columns(), kKey, RowsKind::kWrite, kAll, nullptr, data.data(), data.size()), RowFormatError);
  Bytes latin1;
  Row(latin1, std::string("\xe9t\xe9"), 1);  // not UTF-8
  EXPECT_THROW(RowKeys(Columns(), kKey, RowsKind::kWrite, kAll, nullptr, latin1.data(), latin1.size()), RowFormatError);
  Bytes null_key;
  Row(null_key, "k", 1, {9});
  EXPECT_THROW(RowKeys(Columns(), kKey, RowsKind::kWrite, kAll, nullptr, null_key.data(), null_key.size()),
               RowFormatError);
  EXPECT_THROW(ParseColumns(std::string(1, static_cast<char>(15)), std::string(1, '\x10')), RowFormatError);
}

TEST(RowImage, KeyColumnTypes) {
  EXPECT_EQ(KeyColumnProblem("bigint"), "");
  EXPECT_EQ(KeyColumnProblem("varchar"), "");
  EXPECT_NE(KeyColumnProblem("datetime"), "");
  EXPECT_NE(KeyColumnProblem("varbinary"), "");
}

TEST(GtidPosition, ParsesAdvancesAndPrints) {
  GtidPosition p = GtidPosition::Parse("1-12-7,0-11-42");
  EXPECT_EQ(p.Text(), "0-11-42,1-12-7");
  p.Advance(0, 13, 43);
  p.Advance(2, 1, 1);
  EXPECT_EQ(p.Text(), "0-13-43,1-12-7,2-1-1");
  EXPECT_TRUE(GtidPosition::Parse("").empty());
  EXPECT_THROW(GtidPosition::Parse("0-1"), std::invalid_argument);
  EXPECT_THROW(GtidPosition::Parse("0-x-1"), std::invalid_argument);
}

BinlogItem Gtid(uint64_t seq, bool standalone = false) {
  BinlogItem i;
  i.type = BinlogItem::Type::kGtid;
  i.domain = 0;
  i.server = 11;
  i.sequence = seq;
  i.standalone = standalone;
  i.timestamp = 1000;
  return i;
}
BinlogItem Rows(const std::string& table, std::vector<json> keys, int64_t rows) {
  BinlogItem i;
  i.type = BinlogItem::Type::kRows;
  i.table = table;
  i.keys = std::move(keys);
  i.rows = rows;
  return i;
}
BinlogItem Commit(uint64_t end) {
  BinlogItem i;
  i.type = BinlogItem::Type::kCommit;
  i.file = "binlog.000002";
  i.end_pos = end;
  return i;
}

TEST(TransactionAssembler, GroupsRowChangesByTransaction) {
  TransactionAssembler a({"t1", "t2"});
  EXPECT_FALSE(a.Feed(Rows("t1", {json::array({9})}, 1)));  // before the first GTID: not ours
  EXPECT_FALSE(a.Feed(Gtid(5)));
  EXPECT_FALSE(a.Feed(Rows("t1", {json::array({1}), json::array({2})}, 1)));  // an UPDATE: before, after
  EXPECT_FALSE(a.Feed(Rows("t1", {json::array({1})}, 1)));
  EXPECT_FALSE(a.Feed(Rows("t2", {json::array({"a", 1})}, 1)));
  auto t = a.Feed(Commit(900));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->GtidText(), "0-11-5");
  EXPECT_EQ(t->end_pos, 900u);
  EXPECT_EQ(t->file, "binlog.000002");
  EXPECT_EQ(t->keys.at("t1").size(), 2u);  // key 1 once
  EXPECT_EQ(t->keys.at("t2").size(), 1u);
  EXPECT_EQ(t->row_changes, 3);
  EXPECT_TRUE(t->pause.empty());
}

TEST(TransactionAssembler, StandaloneDdlEndsItsTransactionAndPausesItsTable) {
  TransactionAssembler a({"orders"});
  EXPECT_FALSE(a.Feed(Gtid(6, /*standalone=*/true)));
  BinlogItem q;
  q.type = BinlogItem::Type::kQuery;
  q.text = "ALTER TABLE `orders` ADD COLUMN x INT";
  auto t = a.Feed(q);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->pause.count("orders"), 1u);
  EXPECT_FALSE(a.Feed(Gtid(7, true)));
  q.text = "CREATE TABLE orders_archive (id INT)";
  auto u = a.Feed(q);
  ASSERT_TRUE(u);
  EXPECT_TRUE(u->pause.empty());
}

TEST(TransactionAssembler, ShapeChangePausesTable) {
  TransactionAssembler a({"t1"});
  a.Feed(Gtid(8));
  BinlogItem s;
  s.type = BinlogItem::Type::kShapeChange;
  s.table = "t1";
  s.text = "the binlog has 5 columns for it, the table has 4";
  a.Feed(s);
  auto t = a.Feed(Commit(10));
  ASSERT_TRUE(t);
  EXPECT_EQ(t->pause.count("t1"), 1u);
}

TEST(DdlTables, WordsOfDdlStatementsOnly) {
  const std::set<std::string> tables = {"doc", "t1"};
  EXPECT_EQ(DdlTables("alter table doc add x int", tables), std::set<std::string>{"doc"});
  EXPECT_EQ(DdlTables("/* by tool */ RENAME TABLE db.`doc` TO doc_old", tables), std::set<std::string>{"doc"});
  EXPECT_EQ(DdlTables("TRUNCATE t1", tables), std::set<std::string>{"t1"});
  EXPECT_TRUE(DdlTables("ALTER TABLE document ADD x INT", tables).empty());
  EXPECT_TRUE(DdlTables("INSERT INTO doc VALUES (1)", tables).empty());
  EXPECT_TRUE(DdlTables("", tables).empty());
}

CapturedTransaction Txn(uint64_t seq, const std::string& table, int first, int n) {
  CapturedTransaction t;
  t.domain = 0;
  t.server = 11;
  t.sequence = seq;
  t.committed_at = 1700000000;
  for (int k = first; k < first + n; ++k) t.keys[table].emplace(std::to_string(k), json::array({k}));
  return t;
}

TEST(CaptureEvents, ShardsKeysAndNamesCodesByTheLastGtid) {
  EventContext ctx{"c1", "svc", "a,b"};
  auto evs = KeyedSyncEvents(ctx, {Txn(5, "t1", 0, 1500), Txn(6, "t1", 1000, 1000), Txn(7, "t2", 0, 3)});
  size_t keys = 0;
  std::set<std::string> codes;
  for (const auto& e : evs) {
    const json p = json::parse(e.payload);
    keys += p["keys"].size();
    EXPECT_LE(p["keys"].size(), kMaxKeysPerEvent);
    EXPECT_EQ(p["gtid"], "0-11-7");
    EXPECT_EQ(e.topic, kCaptureTopic);
    EXPECT_EQ(e.tenant_id, kCaptureTenant);
    EXPECT_TRUE(e.data_id.starts_with("c1#"));
    EXPECT_EQ(e.route, "a,b");
    EXPECT_TRUE(e.code.starts_with("cap:c1:0-11-7:"));
    codes.insert(e.code);
  }
  EXPECT_EQ(keys, 2000u + 3u);  // each key once
  EXPECT_EQ(codes.size(), evs.size());
  // The same batch gives the same events (a re-read range produces the same codes).
  auto again = KeyedSyncEvents(ctx, {Txn(5, "t1", 0, 1500), Txn(6, "t1", 1000, 1000), Txn(7, "t2", 0, 3)});
  ASSERT_EQ(again.size(), evs.size());
  for (size_t i = 0; i < evs.size(); ++i) EXPECT_EQ(again[i].code, evs[i].code);
  // A key lands in the same shard whichever batch it is in: its changes stay in order.
  auto one = KeyedSyncEvents(ctx, {Txn(9, "t1", 1234, 1)});
  for (const auto& e : evs) {
    if (json::parse(e.payload)["keys"].dump().find("[1234]") != std::string::npos) {
      EXPECT_EQ(e.data_id, one[0].data_id);
    }
  }
  EXPECT_TRUE(KeyedSyncEvents(ctx, {}).empty());
  // One lane per (shard, table): the events of t2 never share a lane with t1's.
  for (const auto& e : evs) {
    const json p = json::parse(e.payload);
    EXPECT_TRUE(e.data_id.ends_with("#" + p["table"].get<std::string>())) << e.data_id;
  }
  EXPECT_LE(LaneOf(std::string(40, 'c'), 3, std::string(64, 't')).size(), 64u);
  EXPECT_TRUE(LaneOf(std::string(40, 'c'), 3, std::string(64, 't')).starts_with(std::string(40, 'c') + "#3#"));
  EXPECT_NE(LaneOf("c", 0, std::string(64, 't')), LaneOf("c", 0, std::string(63, 't') + "u"));
}

TEST(ApplyMetrics, CountsRowsAndLagPerCapture) {
  ApplyMetrics& m = ApplyMetrics::Instance();
  m.Applied("unit_a", 120, 0.4);
  m.Applied("unit_a", 30, 3.0);
  m.Applied("unit_b", 0, std::nullopt);  // a copy event: no keys, no lag
  metrics::TextWriter w;
  m.Write(w);
  const std::string& out = w.str();
  EXPECT_NE(out.find("dsync_capture_rows_applied_total{capture=\"unit_a\"} 150\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsync_capture_events_applied_total{capture=\"unit_a\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsync_capture_events_applied_total{capture=\"unit_b\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsync_capture_apply_lag_seconds_bucket{capture=\"unit_a\",le=\"0.5\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsync_capture_apply_lag_seconds_bucket{capture=\"unit_a\",le=\"5\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("dsync_capture_apply_lag_seconds_count{capture=\"unit_b\"} 0\n"), std::string::npos) << out;
}

TEST(CaptureEvents, CodesFitTheColumn) {
  EXPECT_EQ(BoundedCode("cap:c:0-1-2:0"), "cap:c:0-1-2:0");
  const std::string long_code = "cap:" + std::string(40, 'n') + ":4294967295-4294967295-18446744073709551615:12";
  EXPECT_LE(BoundedCode(long_code).size(), 64u);
  EXPECT_EQ(BoundedCode(long_code), BoundedCode(long_code));
  EXPECT_NE(BoundedCode(long_code), BoundedCode(long_code + "3"));
}

TEST(CaptureConfig, ParsesAndRejectsWithPaths) {
  auto c = ParseCaptures(json::parse(R"({"c1": {"source": "a", "target": "b", "tables": ["t1", "t2"],
                                                "where": {"t1": "tenant = 7"}}})"));
  EXPECT_EQ(c.at("c1").tables.size(), 2u);
  EXPECT_EQ(c.at("c1").where.at("t1"), "tenant = 7");
  auto fails = [](const char* text, const char* want) {
    try {
      ParseCaptures(json::parse(text));
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  fails(R"({"c1": {"source": "a", "target": "b", "tables": ["t"], "extra": 1}})", "captures.c1.extra: unknown key");
  EXPECT_EQ(c.at("c1").lag_bound_s, 10) << "the default";
  EXPECT_EQ(ParseCaptures(json::parse(R"({"c1": {"source": "a", "target": "b", "tables": ["t"], "lag_bound_s": 3}})"))
                .at("c1").lag_bound_s, 3);
  fails(R"({"c1": {"source": "a", "target": "b", "tables": ["t"], "lag_bound_s": 0}})", "captures.c1.lag_bound_s");
  fails(R"({"c1": {"source": "a", "target": "b", "tables": ["t"], "lag_bound_s": "5"}})", "captures.c1.lag_bound_s");
  fails(R"({"c 1": {"source": "a", "target": "b", "tables": ["t"]}})", "capture name");
  fails(R"({"c1": {"source": "a", "target": "b", "tables": []}})", "captures.c1.tables");
  fails(R"({"c1": {"source": "a", "target": "b", "tables": ["t", "t"]}})", "listed twice");
  fails(R"({"c1": {"source": "a", "target": "b", "tables": ["t"], "where": {"u": "1 = 1"}}})", "not in captures.c1.tables");
  fails(R"({"c1": {"target": "b", "tables": ["t"]}})", "captures.c1.source: required");
  EXPECT_THROW(ValidateCaptures(c, {{"a", "u"}}), ConfigError);               // no datasource b
  EXPECT_NO_THROW(ValidateCaptures(c, {{"a", "u"}, {"b", "v"}}));
  c.at("c1").target = "a";
  EXPECT_THROW(ValidateCaptures(c, {{"a", "u"}, {"b", "v"}}), ConfigError);  // source == target
}

}  // namespace
}  // namespace dsync::capture
