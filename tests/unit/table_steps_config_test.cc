// Unit tests (no database) of the table steps' start-time validation: the params of
// table_sync / table_delete, and the `where` grammar that keeps payload values bound.
#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "table/bind.h"
#include "table/chunks.h"
#include "table/sql.h"
#include "saga/steps/table_steps.h"
#include "table/where.h"
#include "tests/support/saga_fixtures.h"

namespace dsync::saga {
namespace {

using nlohmann::json;
using table::CompileWhere;
using table::WhereError;
using table::SqlValue;

// A step named docs (the name the messages quote).
StepSpec Spec(const std::string& type, json params) { return testing::Step("docs", type, std::move(params)); }

json SyncParams() {
  return {{"source", "env_a"}, {"target", "env_b"}, {"table", "kb_doc"}, {"where", "space_id = :space_id"}};
}

// The ConfigError message for these params ("" if accepted).
std::string SyncError(const json& params) {
  try {
    MakeTableSyncStep(Spec("table_sync", params));
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_EQ(m.rfind("config: step 'docs' (table_sync): ", 0), 0u) << m;
    return m;
  }
  return "";
}

std::string DeleteError(const json& params) {
  try {
    MakeTableDeleteStep(Spec("table_delete", params));
  } catch (const ConfigError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("config: step 'docs' (table_delete): ", 0), 0u) << m;
    return m;
  }
  return "";
}

json With(json base, const std::string& key, json value) {
  base[key] = std::move(value);
  return base;
}

json Without(json base, const std::string& key) {
  base.erase(key);
  return base;
}

// A `where` a step must refuse, and what its message must say.
struct WhereCase {
  const char* where;
  const char* reason;
};

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

TEST(TableStepsConfig, AcceptsValidParams) {
  EXPECT_EQ(SyncError(SyncParams()), "");
  json full = SyncParams();
  full["chunk_size"] = 100;
  full["columns"] = {"id", "space_id", "title"};
  full["delete_missing"] = true;
  full["undo_retention_days"] = 30;
  full["where"] = "space_id = :space_id AND (kind IN ('doc', :kind) OR `title` IS NOT NULL)";
  EXPECT_EQ(SyncError(full), "");
  EXPECT_EQ(DeleteError({{"target", "env_b"}, {"table", "kb_doc"}, {"where", "space_id = :space_id"}}), "");
}

TEST(TableStepsConfig, RejectsMissingKeys) {
  EXPECT_HAS(SyncError(Without(SyncParams(), "table")), "missing key 'table'");
  EXPECT_HAS(SyncError(Without(SyncParams(), "source")), "missing key 'source'");
  EXPECT_HAS(SyncError(Without(SyncParams(), "target")), "missing key 'target'");
  EXPECT_HAS(SyncError(Without(SyncParams(), "where")), "missing key 'where'");
  EXPECT_HAS(DeleteError({{"target", "env_b"}, {"table", "kb_doc"}}), "missing key 'where'");
}

TEST(TableStepsConfig, RejectsUnknownAndMisplacedKeys) {
  std::string m = SyncError(With(SyncParams(), "wher", "x = 1"));
  EXPECT_HAS(m, "unknown key 'wher'");
  EXPECT_HAS(m, "known: ");
  // table_delete has no source, columns or delete_missing.
  EXPECT_HAS(DeleteError({{"source", "env_a"}, {"target", "env_b"}, {"table", "t"}, {"where", "1 = 1"}}),
             "unknown key 'source'");
  EXPECT_HAS(DeleteError({{"target", "env_b"}, {"table", "t"}, {"where", "1 = 1"}, {"delete_missing", true}}),
             "unknown key 'delete_missing'");
}

TEST(TableStepsConfig, RejectsWrongTypes) {
  EXPECT_HAS(SyncError(With(SyncParams(), "table", 5)), "'table' must be a string, got an integer");
  EXPECT_HAS(SyncError(With(SyncParams(), "where", json::array())), "'where' must be a string");
  EXPECT_HAS(SyncError(With(SyncParams(), "source", "")), "'source' must not be empty");
  EXPECT_HAS(SyncError(With(SyncParams(), "chunk_size", 0)), "'chunk_size' must be an integer from 1 to 100000, got 0");
  EXPECT_HAS(SyncError(With(SyncParams(), "chunk_size", -5)), "'chunk_size' must be an integer");
  EXPECT_HAS(SyncError(With(SyncParams(), "chunk_size", 100001)), "'chunk_size' must be an integer");
  EXPECT_HAS(SyncError(With(SyncParams(), "chunk_size", "100")), "'chunk_size' must be an integer");
  EXPECT_HAS(SyncError(With(SyncParams(), "chunk_size", 1.5)), "'chunk_size' must be an integer");
  EXPECT_HAS(SyncError(With(SyncParams(), "delete_missing", "yes")), "'delete_missing' must be true or false");
  EXPECT_HAS(SyncError(With(SyncParams(), "columns", json::array())), "'columns' must be a non-empty array");
  EXPECT_HAS(SyncError(With(SyncParams(), "columns", json{"id", 3})), "'columns' has a bad column name 3");
  EXPECT_HAS(SyncError(With(SyncParams(), "columns", json{"id", "id"})), "lists 'id' twice");
  EXPECT_HAS(SyncError(With(SyncParams(), "undo_retention_days", 0)), "'undo_retention_days' must be an integer");
  EXPECT_HAS(SyncError(With(SyncParams(), "target", "env_a")), "'source' and 'target' are the same");
  EXPECT_HAS(SyncError(With(SyncParams(), "lanes", 0)), "'lanes' must be an integer from 1 to 16, got 0");
  EXPECT_HAS(SyncError(With(SyncParams(), "lanes", 17)), "'lanes' must be an integer from 1 to 16");
  EXPECT_HAS(DeleteError({{"target", "env_b"}, {"table", "t"}, {"where", "1 = 1"}, {"lanes", 2}}),
             "unknown key 'lanes'");
}

TEST(TableStepsConfig, RejectsNonIdentifierNames) {
  const std::vector<std::string> bad_names = {"kb doc", "kb_doc; DROP TABLE x", "env.kb_doc", "`kb_doc`",
                                              "kb-doc", "\xF0\x9F\x98\x80", std::string(65, 'a')};
  for (const std::string& bad : bad_names) {
    EXPECT_HAS(SyncError(With(SyncParams(), "table", bad)), "'table' must be a plain identifier") << bad;
  }
  EXPECT_HAS(SyncError(With(SyncParams(), "columns", json{"id", "ti tle"})), "bad column name \"ti tle\"");
  EXPECT_HAS(SyncError(With(SyncParams(), "table", "bad\nname")), "got 'bad?name'");  // stays one line
  EXPECT_EQ(SyncError(With(SyncParams(), "table", "Kb_Doc$2")), "");
}

TEST(TableStepsConfig, RejectsUnsafeWhere) {
  const WhereCase cases[] = {
      {"space_id = :space_id; DROP TABLE kb_doc", "must not contain ';'"},
      {"space_id = :space_id -- comment", "must not contain '--'"},
      {"space_id = :space_id /* x */", "must not contain '/*'"},
      {"space_id = :space_id # x", "must not contain '#'"},
      {"kind = 'doc", "unbalanced single quotes"},
      {"kind = 'it''s' OR kind = 'x", "unbalanced single quotes"},
      {"kind = \"doc\"", "must not contain '\"'"},
      {"kind = 'a\\'", "must not contain a backslash"},
      {"space_id = ?", "use :name placeholders"},
      {"", "must not be empty"},
      {"space_id = : x", "':' without a placeholder name"},
      {"space_id = SLEEP(10)", "must not call functions"},
      {"space_id = (SELECT id FROM kb_space)", "subquery outside 'column [NOT] IN (SELECT ...)'"},
      {"space_id = :a OR", "is not a supported filter"},
      {"space_id", "is not a supported filter"},
      {"space_id = @x", "unsupported character '@'"},
      {"space_id = :a UNION SELECT 1", "must not use UNION"},
      {"(space_id = :a", "is not a supported filter"},
      {"`a b` = 1", "bad column name"},
  };
  for (const WhereCase& c : cases) {
    EXPECT_HAS(SyncError(With(SyncParams(), "where", c.where)), c.reason) << c.where;
  }
}

TEST(TableWhere, CompilesToBoundPlaceholders) {
  auto w = CompileWhere("space_id = :space_id and Kind in ('doc', :kind, 'it''s') OR NOT `order` <=> :space_id");
  EXPECT_EQ(w.sql, "`space_id` = ? AND `Kind` IN ('doc', ?, 'it''s') OR NOT `order` <=> ?");
  EXPECT_EQ(w.params, (std::vector<std::string>{"space_id", "kind", "space_id"}));
  EXPECT_EQ(w.param_columns, (std::vector<std::string>{"space_id", "Kind", "order"}));
  EXPECT_EQ(w.columns, (std::set<std::string>{"space_id", "Kind", "order"}));

  auto all = CompileWhere("1 = 1");
  EXPECT_EQ(all.sql, "1 = 1");
  EXPECT_TRUE(all.params.empty());

  auto between = CompileWhere("n BETWEEN -5 AND :hi AND (t IS NOT NULL) AND s NOT LIKE :p AND :v < x");
  EXPECT_EQ(between.sql, "`n` BETWEEN -5 AND ? AND (`t` IS NOT NULL) AND `s` NOT LIKE ? ESCAPE '!' AND ? < `x`");
  EXPECT_EQ(between.param_columns, (std::vector<std::string>{"n", "s", "x"}));
}

// Pins: "column = :placeholder" or "column = number" conjuncts of an AND at the top,
// and nothing else (OR at the top, NOT, parentheses, other operators, subqueries).
TEST(TableWhere, PinsColumnsEqualToOneValueAtTheTop) {
  auto pins = [](const char* where) {
    std::vector<std::string> out;
    for (const auto& p : CompileWhere(where).pins) {
      out.push_back(p.column + (p.param >= 0 ? "=?" + std::to_string(p.param) : "=" + p.number));
    }
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pins("tenant = :t AND 5 = kind AND n > :n AND :m = `m` AND x = -3"),
            (V{"tenant=?0", "kind=5", "m=?2", "x=-3"}));
  EXPECT_EQ(pins("a = :a OR b = 1"), V{});
  EXPECT_EQ(pins("(a = :a OR b = 1) AND c = 2"), V{"c=2"});
  EXPECT_EQ(pins("(a = 1) AND NOT b = 2 AND c <=> 3 AND d <> 4 AND e IN (5) AND f = 'x' AND g = h"), V{});
  EXPECT_EQ(pins("o IN (SELECT id FROM orders WHERE customer = :c) AND t = :t"), V{"t=?1"});
}

// PinnedIntegers: integer columns on both sides, equal to an integer literal or to a
// placeholder bound to an integer; the compare form then leaves them out.
TEST(TableBind, PinnedIntegersAreLeftOutOfTheCompareForm) {
  auto schema = [](table::ColumnKind b_kind) {
    table::TableSchema t;
    t.columns.push_back(table::Column{"id", table::ColumnKind::kSigned, "int", 0, 0, false});
    t.columns.push_back(table::Column{"g", table::ColumnKind::kUnsigned, "int unsigned", 0, 0, false});
    t.columns.push_back(table::Column{"b", b_kind, "x", 0, 0, false});
    t.columns.push_back(table::Column{"d", table::ColumnKind::kSigned, "bigint", 0, 0, false});
    for (auto& c : t.columns) c.nullable = false;
    return t;
  };
  const table::TableSchema a = schema(table::ColumnKind::kSigned), text = schema(table::ColumnKind::kText);
  const auto where = CompileWhere("g = :g AND b = :b AND d = :d AND id = 7 AND g = 1.0");
  const std::vector<table::SqlValue> ints{uint64_t{4}, int64_t{-2}, 2.0};
  EXPECT_EQ(table::PinnedIntegers(where, a, a, ints), (std::set<std::string>{"g", "b", "id"}));
  // b is text on one side; d's value is a double; strings never pin.
  EXPECT_EQ(table::PinnedIntegers(where, a, text, ints), (std::set<std::string>{"g", "id"}));
  const std::vector<table::SqlValue> strings{std::string("4"), std::string("x"), std::string("2")};
  EXPECT_EQ(table::PinnedIntegers(where, a, a, strings), (std::set<std::string>{"id"}));

  table::ColumnSet sa(a, {"id", "g", "b"}), sb(a, {"id", "g", "b"});
  table::UseCompareHash(sa, sb);
  sa.set_plain_text_hash(true);
  table::PinCompareHash(sa, sb, {"g", "not a column"});
  EXPECT_EQ(sa.RowHashExpr(), "CRC32(CONCAT_WS(_binary'|', `id`, `b`))");
  EXPECT_EQ(sb.RowHashExpr(), "CRC32(CONCAT_WS('|', CAST(`id` AS BINARY), CAST(`b` AS BINARY)))");
  // Every column pinned: none is left out.
  table::ColumnSet ea(a, {"g"}), eb(a, {"g"});
  table::UseCompareHash(ea, eb);
  table::PinCompareHash(ea, eb, {"g"});
  EXPECT_EQ(ea.RowHashExpr(), "CRC32(CONCAT_WS('|', CAST(`g` AS BINARY)))");
}

// Entity graphs: one level of `column [NOT] IN (SELECT column FROM table [WHERE ...])`.
TEST(TableWhere, AcceptsOneLevelOfSubquery) {
  auto w = CompileWhere("order_id IN (SELECT id FROM orders WHERE customer_id = :cid AND state <> 'gone') AND n > :n");
  EXPECT_EQ(w.sql,
            "`order_id` IN (SELECT `orders`.`id` FROM `orders` WHERE `orders`.`customer_id` = ? AND "
            "`orders`.`state` <> 'gone') AND `n` > ?");
  EXPECT_EQ(w.params, (std::vector<std::string>{"cid", "n"}));
  EXPECT_EQ(w.param_columns, (std::vector<std::string>{"customer_id", "n"}));
  EXPECT_EQ(w.param_tables, (std::vector<std::string>{"orders", ""}));
  EXPECT_EQ(w.columns, (std::set<std::string>{"order_id", "n"}));
  ASSERT_EQ(w.subqueries.size(), 1u);
  EXPECT_EQ(w.subqueries[0].table, "orders");
  EXPECT_EQ(w.subqueries[0].columns, (std::set<std::string>{"id", "customer_id", "state"}));

  auto n = CompileWhere("id not in (select `parent` from `Tree$1`) OR id IN (SELECT id FROM t2)");
  EXPECT_EQ(n.sql, "`id` NOT IN (SELECT `Tree$1`.`parent` FROM `Tree$1`) OR `id` IN (SELECT `t2`.`id` FROM `t2`)");
  EXPECT_EQ(n.subqueries.size(), 2u);
}

TEST(TableStepsConfig, RefusesForbiddenSubqueriesNamingTheStep) {
  const WhereCase cases[] = {
      {"a IN (SELECT id FROM t WHERE b IN (SELECT id FROM u))", "nests subqueries"},
      {"a IN (SELECT MAX(id) FROM t)", "must not call functions"},
      {"a IN (SELECT id FROM t WHERE LOWER(x) = :x)", "must not call functions"},
      {"a IN (SELECT id FROM t UNION SELECT id FROM u)", "must not use UNION"},
      {"a IN (SELECT id FROM t WHERE x = 1 UNION SELECT 1)", "must not use UNION"},
      {"a IN (SELECT id FROM t /* c */)", "must not contain '/*'"},
      {"a IN (SELECT id FROM t -- c\n)", "must not contain '--'"},
      {"a IN (SELECT id FROM t) # c", "must not contain '#'"},
      {"a IN (SELECT id, b FROM t)", "more than one column"},
      {"a IN (SELECT * FROM t)", "unsupported character '*'"},
      {"a IN (SELECT id FROM t x)", "more than 'SELECT column FROM table"},
      {"a IN (SELECT id FROM t JOIN u)", "more than 'SELECT column FROM table"},
      {"a IN (SELECT id FROM t LIMIT 1)", "more than 'SELECT column FROM table"},
      {"a IN (SELECT id FROM t WHERE x = 1 LIMIT 1)", "expected ')' closing the subquery"},
      {"a IN (SELECT id FROM db.t)", "unsupported character '.'"},
      {"a IN (SELECT id)", "expected FROM"},
      {"a IN (SELECT id FROM t", "expected ')' closing the subquery"},
      {"1 IN (SELECT id FROM t)", "compared with something other than a column"},
      {"a IN (SELECT id FROM t WHERE y = (SELECT 1))", "subquery outside"},
  };
  for (const WhereCase& c : cases) {
    EXPECT_HAS(SyncError(With(SyncParams(), "where", c.where)), c.reason) << c.where;
    EXPECT_HAS(DeleteError({{"target", "env_b"}, {"table", "kb_doc"}, {"where", c.where}}), c.reason) << c.where;
  }
}

TEST(TableChunks, SizerAdaptsTowardTheTargetTimeWithinBounds) {
  using std::chrono::milliseconds;
  table::ChunkSizer s(10000);
  EXPECT_EQ(s.next(), 1000u);
  s.Observe(1000, milliseconds(100), 0, 0);  // 5x too fast: at most 4x larger
  EXPECT_EQ(s.next(), 4000u);
  s.Observe(4000, milliseconds(250), 0, 0);  // 2x too fast
  EXPECT_EQ(s.next(), 8000u);
  s.Observe(8000, milliseconds(100), 0, 0);  // capped by chunk_size
  EXPECT_EQ(s.next(), 10000u);
  s.Observe(10000, milliseconds(2000), 0, 0);  // 4x too slow
  EXPECT_EQ(s.next(), 2500u);
  s.Observe(2500, milliseconds(500), 1u << 20, 2500);  // on target, held rows weigh 1 MiB
  EXPECT_EQ(s.next(), 2500u);
  s.Observe(2500, milliseconds(500), 40u << 20, 2500);  // 40 MiB: bytes bound (2 MiB), within 4x
  EXPECT_EQ(s.next(), 625u);
  s.Shrink();
  EXPECT_EQ(s.next(), 156u);
  // A mostly equal range holds only its differing rows: 20 rows of 1 KiB out of 2,000
  // covered weigh 10 bytes per row covered, so the byte bound does not shrink it.
  table::ChunkSizer sparse(10000);
  sparse.Observe(2000, milliseconds(100), 20u << 10, 20);  // 5x too fast: 4x larger
  EXPECT_EQ(sparse.next(), 4000u);
  sparse.Observe(4000, milliseconds(500), 40u << 10, 40);
  EXPECT_EQ(sparse.next(), 4000u);
  table::ChunkSizer one(1);
  one.Observe(1, milliseconds(1), 0, 0);
  EXPECT_EQ(one.next(), 1u);
  one.Shrink();
  EXPECT_EQ(one.next(), 1u);
  table::ChunkSizer small(300);
  EXPECT_EQ(small.next(), 300u);
  // A compare sizer: covers up to 40,000 rows, holds at most 10,000 of them.
  table::ChunkSizer::Options held;
  held.max_held_rows = 10000;
  table::ChunkSizer compare(40000, held);
  compare.Observe(1000, milliseconds(10), 10u << 10, 10);  // 1 % held: 4x larger
  EXPECT_EQ(compare.next(), 4000u);
  compare.Observe(4000, milliseconds(40), 40u << 10, 40);
  EXPECT_EQ(compare.next(), 16000u);
  compare.Observe(16000, milliseconds(100), 8000u << 2, 8000);  // half held: 20,000 would hold 10,000
  EXPECT_EQ(compare.next(), 20000u);
  compare.Observe(20000, milliseconds(100), 80u << 10, 20000);  // all held: at most 10,000
  EXPECT_EQ(compare.next(), 10000u);
}

// A chunk's keys, dense enough, are read as one key range; anything else key by key.
// Lanes split a key of one integer column into ranges of about equal key counts, each
// at least min_keys keys; the full signed and unsigned 64-bit ranges work.
TEST(TableChunks, EvenSplitsCoverTheKeySpanInEqualRanges) {
  auto texts = [](const std::vector<table::Row>& rows) {
    std::vector<std::string> out;
    for (const table::Row& r : rows) out.push_back(*r.at(0));
    return out;
  };
  using V = std::vector<std::string>;
  // [1, 1000000] in two: (-inf, 500000], (500000, +inf).
  EXPECT_EQ(texts(table::EvenSplits("1", "1000000", 2, 20000)), (V{"500000"}));
  EXPECT_EQ(texts(table::EvenSplits("1", "1000000", 4, 20000)), (V{"250000", "500000", "750000"}));
  // Too few keys for more than one lane of min_keys: no split, or fewer lanes.
  EXPECT_TRUE(table::EvenSplits("1", "39999", 2, 20000).empty());
  EXPECT_EQ(texts(table::EvenSplits("1", "40000", 2, 20000)), (V{"20000"}));
  EXPECT_EQ(texts(table::EvenSplits("1", "60000", 16, 20000)), (V{"20000", "40000"}));
  EXPECT_TRUE(table::EvenSplits("5", "5", 2, 1).empty());
  EXPECT_TRUE(table::EvenSplits("9", "1", 2, 1).empty());  // an empty table's bounds
  EXPECT_EQ(texts(table::EvenSplits("-100", "99", 2, 10)), (V{"-1"}));
  EXPECT_EQ(texts(table::EvenSplits("-9223372036854775808", "9223372036854775807", 2, 20000)), (V{"-1"}));
  EXPECT_EQ(texts(table::EvenSplits("0", "18446744073709551615", 2, 20000)), (V{"9223372036854775807"}));
  EXPECT_THROW(table::EvenSplits("1", "x", 2, 1), std::invalid_argument);

  EXPECT_LT(table::IntKey::Of("-5"), table::IntKey::Of("3"));
  EXPECT_LT(table::IntKey::Of("9223372036854775807"), table::IntKey::Of("18446744073709551615"));
  EXPECT_EQ(table::IntKey::Of(table::Row{std::string("42")}), table::IntKey::Of("42"));
  EXPECT_EQ(*table::IntKey::Of("-9223372036854775808").ToRow().at(0), "-9223372036854775808");
  EXPECT_THROW(table::IntKey::Of(""), std::invalid_argument);
  EXPECT_THROW(table::IntKey::Of("-"), std::invalid_argument);
  EXPECT_THROW(table::IntKey::Of("1.5"), std::invalid_argument);
  EXPECT_THROW(table::IntKey::Of(table::Row{std::nullopt}), std::invalid_argument);
  EXPECT_THROW(table::IntKey::Of(table::Row{std::string("1"), std::string("2")}), std::invalid_argument);
}

// Compare ranges by key span: a range ends at its start plus the keys that held the
// rows asked for at the last density seen; it stops at the lane's end, and the last
// lane's last range is open (keys above the table's highest at the start included).
TEST(TableChunks, KeySpanRangesFollowTheDensitySeen) {
  auto key = [](const char* text) { return std::optional<table::Row>(table::Row{std::string(text)}); };
  auto text = [](const std::optional<table::Row>& k) { return k ? *k->at(0) : std::string("(end)"); };
  table::KeySpanRanges r(table::IntKey::Of("1"), table::IntKey::Of("1000000"));
  // One key per row to begin with; the first range starts below the lowest key.
  EXPECT_EQ(text(r.End(std::nullopt, 1000, std::nullopt)), "1000");
  EXPECT_EQ(text(r.End(key("1000"), 5000, std::nullopt)), "6000");
  // 5000 keys held 500 rows: 10 keys a row from now on.
  r.Observe(key("1000"), *key("6000"), 500);
  EXPECT_DOUBLE_EQ(r.keys_per_row(), 10);
  EXPECT_EQ(text(r.End(key("6000"), 1000, std::nullopt)), "16000");
  // An empty range: the next ones 4x as long. Denser than a key a row cannot be.
  r.Observe(key("6000"), *key("16000"), 0);
  EXPECT_EQ(text(r.End(key("16000"), 1000, std::nullopt)), "56000");
  r.Observe(key("16000"), *key("17000"), 5000);
  EXPECT_DOUBLE_EQ(r.keys_per_row(), 1);
  // The lane's end, then the table's: the range reaching or passing them ends there.
  EXPECT_EQ(text(r.End(key("17000"), 1000, key("17500"))), "17500");
  EXPECT_EQ(text(r.End(key("17000"), 1000, key("18000"))), "18000");
  EXPECT_EQ(text(r.End(key("17000"), 1000, key("18001"))), "18000");
  EXPECT_EQ(text(r.End(key("999000"), 1000, std::nullopt)), "(end)");
  EXPECT_EQ(text(r.End(key("998999"), 1000, std::nullopt)), "999999");
  // Nothing asked: still a key. The 64-bit ends.
  EXPECT_EQ(text(r.End(key("5"), 0, std::nullopt)), "6");
  table::KeySpanRanges wide(table::IntKey::Of("-9223372036854775808"), table::IntKey::Of("18446744073709551615"));
  EXPECT_EQ(text(wide.End(std::nullopt, 10, std::nullopt)), "-9223372036854775799");
  wide.Observe(std::nullopt, *key("-9223372036854775799"), 0);
  for (int i = 0; i < 40; ++i) wide.Observe(key("0"), *key("1"), 0);  // the density's bound
  EXPECT_EQ(text(wide.End(key("0"), 100000, std::nullopt)), "(end)");
  EXPECT_EQ(text(wide.End(key("0"), 1, key("100"))), "100");
}

TEST(TableChunks, DenseSpanOnlyForDenseIntegerKeys) {
  auto schema = [](table::ColumnKind kind, std::vector<std::string> key) {
    table::TableSchema t;
    t.label = "env_b.t";
    t.table = "t";
    t.columns = {{"id", kind, "int", 0, 0, false}, {"k", table::ColumnKind::kText, "varchar(8)", 0, 0, false}};
    t.key = std::move(key);
    return t;
  };
  auto keys = [](std::vector<std::string> v) {
    std::vector<table::Row> out;
    for (auto& s : v) out.push_back({std::move(s)});
    return out;
  };
  const table::TableSchema ints = schema(table::ColumnKind::kSigned, {"id"});
  const table::ColumnSet key(ints, {"id"});
  auto span = table::DenseSpan(key, keys({"7", "3", "5"}));
  ASSERT_TRUE(span.has_value());
  EXPECT_EQ(span->lo, SqlValue{int64_t{3}});
  EXPECT_EQ(span->hi, SqlValue{int64_t{7}});
  // 3 keys: a width below 2 * 3 + 64 = 70 is dense, 70 is not.
  EXPECT_TRUE(table::DenseSpan(key, keys({"0", "1", "69"})).has_value());
  EXPECT_FALSE(table::DenseSpan(key, keys({"0", "1", "70"})).has_value());
  EXPECT_FALSE(table::DenseSpan(key, {}).has_value());
  EXPECT_FALSE(table::DenseSpan(key, {{std::nullopt}}).has_value());
  EXPECT_FALSE(table::DenseSpan(key, keys({"1", "x"})).has_value());
  // The ends of the type, no overflow either way.
  EXPECT_FALSE(table::DenseSpan(key, keys({"-9223372036854775808", "9223372036854775807"})).has_value());
  span = table::DenseSpan(key, keys({"-9223372036854775808", "-9223372036854775807"}));
  ASSERT_TRUE(span.has_value());
  EXPECT_EQ(span->lo, SqlValue{std::numeric_limits<int64_t>::min()});
  const table::TableSchema unsigned_ints = schema(table::ColumnKind::kUnsigned, {"id"});
  span = table::DenseSpan(table::ColumnSet(unsigned_ints, {"id"}), keys({"18446744073709551615", "18446744073709551600"}));
  ASSERT_TRUE(span.has_value());
  EXPECT_EQ(span->hi, SqlValue{std::numeric_limits<uint64_t>::max()});
  EXPECT_FALSE(table::DenseSpan(table::ColumnSet(unsigned_ints, {"id"}), keys({"-1"})).has_value());
  // Text and composite keys: never (a case-insensitive key matches in SQL, not as text).
  const table::TableSchema text = schema(table::ColumnKind::kText, {"k"});
  EXPECT_FALSE(table::DenseSpan(table::ColumnSet(text, {"k"}), keys({"1", "2"})).has_value());
  const table::TableSchema both = schema(table::ColumnKind::kSigned, {"id", "k"});
  EXPECT_FALSE(table::DenseSpan(table::ColumnSet(both, {"id", "k"}), {{std::string("1"), std::string("a")}}).has_value());
}

// DiffHashes against matching every key through a map, on lists that stay aligned,
// part at the start, in the middle or at the end, and hold NULL keys and keys that
// differ only in case (text keys compare as text); integer keys held as numbers on
// both sides, on one side, or as rows, alike.
TEST(TableChunks, DiffHashesFindsWhatAMapByKeyFinds) {
  using table::KeyHash;
  auto kh = [](std::optional<std::string> k, uint32_t h) { return KeyHash{{std::move(k)}, h}; };
  table::TableSchema signed_schema;
  signed_schema.columns.push_back(table::Column{"id", table::ColumnKind::kSigned, "bigint", 0, 0, false});
  signed_schema.columns.back().nullable = false;
  const table::ColumnSet int_key(signed_schema, {"id"});
  // Held as rows (0), as numbers (1), or the source as numbers and the target as rows (2).
  int held = 0;
  auto hashes = [&](const std::vector<KeyHash>& list, bool source) {
    table::KeyHashes out = held == 1 || (held == 2 && source) ? table::KeyHashes(int_key) : table::KeyHashes();
    for (const KeyHash& k : list) out.Add(k.key, k.hash);
    for (size_t i = 0; i < list.size(); ++i) EXPECT_EQ(out.key(i), list[i].key);
    return out;
  };
  auto diff = [&](const std::vector<KeyHash>& s, const std::vector<KeyHash>& t) {
    return table::DiffHashes(hashes(s, true), hashes(t, false));
  };
  auto sorted = [](table::HashDiff d) {
    std::sort(d.missing.begin(), d.missing.end());
    std::sort(d.different.begin(), d.different.end());
    std::sort(d.extra.begin(), d.extra.end());
    return d;
  };
  auto by_map = [](const std::vector<KeyHash>& s, const std::vector<KeyHash>& t) {
    table::HashDiff d;
    std::map<std::string, size_t> in_t;
    for (size_t j = 0; j < t.size(); ++j) in_t[table::EncodeKey(t[j].key)] = j;
    std::set<std::string> in_s;
    for (size_t i = 0; i < s.size(); ++i) {
      in_s.insert(table::EncodeKey(s[i].key));
      auto it = in_t.find(table::EncodeKey(s[i].key));
      if (it == in_t.end()) d.missing.push_back(i);
      else if (t[it->second].hash != s[i].hash) d.different.push_back(i);
      else ++d.equal;
    }
    for (size_t j = 0; j < t.size(); ++j) {
      if (in_s.count(table::EncodeKey(t[j].key)) == 0) d.extra.push_back(j);
    }
    return d;
  };
  auto expect_same = [&](const std::vector<KeyHash>& s, const std::vector<KeyHash>& t) {
    const table::HashDiff got = sorted(diff(s, t));
    const table::HashDiff want = by_map(s, t);
    EXPECT_EQ(got.missing, want.missing);
    EXPECT_EQ(got.different, want.different);
    EXPECT_EQ(got.extra, want.extra);
    EXPECT_EQ(got.equal, want.equal);
  };

  // Empty sides, NULL keys, case (keys as rows only).
  expect_same({}, {});
  expect_same({kh("a", 1)}, {});
  expect_same({}, {kh("a", 1)});
  expect_same({kh(std::nullopt, 1), kh("a", 2)}, {kh("", 1), kh("A", 2), kh("a", 2)});
  std::mt19937 rng(7);
  for (held = 0; held < 3; ++held) {
  SCOPED_TRACE("held " + std::to_string(held));
  // Aligned: only hashes differ.
  table::HashDiff d = diff({kh("1", 10), kh("2", 20), kh("3", 30)}, {kh("1", 10), kh("2", 21), kh("3", 30)});
  EXPECT_EQ(d.different, (std::vector<size_t>{1}));
  EXPECT_TRUE(d.missing.empty());
  EXPECT_TRUE(d.extra.empty());
  EXPECT_EQ(d.equal, 2u);
  // Parting in the middle: the source has 3, the target has 4 instead.
  d = diff({kh("1", 1), kh("3", 3), kh("5", 5)}, {kh("1", 1), kh("4", 4), kh("5", 6)});
  EXPECT_EQ(d.missing, (std::vector<size_t>{1}));
  EXPECT_EQ(d.different, (std::vector<size_t>{2}));
  EXPECT_EQ(d.extra, (std::vector<size_t>{1}));
  EXPECT_EQ(d.equal, 1u);
  // Negative and 64-bit keys.
  expect_same({kh("-9223372036854775808", 1), kh("-1", 2), kh("9223372036854775807", 3)},
              {kh("-1", 2), kh("9223372036854775807", 4), kh("0", 5)});
  // Random lists: each key of 0..199 on either side or both, same or other hash, and
  // the target's order sometimes shuffled (a collation that sorts otherwise).
  for (int round = 0; round < 300; ++round) {
    std::vector<KeyHash> s, t;
    const int p_only = static_cast<int>(rng() % 20);
    for (int k = 0; k < 200; ++k) {
      const int r = static_cast<int>(rng() % 100);
      const uint32_t h = rng() % 4;
      if (r >= p_only) s.push_back(kh(std::to_string(k), h));
      if (r < p_only || r >= 2 * p_only) t.push_back(kh(std::to_string(k), rng() % 50 == 0 ? h + 1 : h));
    }
    if (round % 5 == 0) std::shuffle(t.begin(), t.end(), rng);
    expect_same(s, t);
  }
  }
}

// The row hash's compare form (UseCompareHash): NULL marks only for the columns
// nullable on either side, as integers of at most 62 bits, none when no column can be
// NULL; and the lengths of the columns that may hold '|' but the last. Without it, the
// form of stored after-image hashes, unchanged: one flag per column.
TEST(TableSql, RowHashCompareFormMarksNullsWhereNeededAndFixesColumnBounds) {
  auto schema = [](std::vector<bool> nullable, table::ColumnKind kind = table::ColumnKind::kSigned) {
    table::TableSchema t;
    t.label = "env.t";
    t.table = "t";
    for (size_t i = 0; i < nullable.size(); ++i) {
      table::Column c{"c" + std::to_string(i), kind, "int", 0, 0, false};
      c.nullable = nullable[i];
      t.columns.push_back(c);
    }
    return t;
  };
  auto names = [](size_t n) {
    std::vector<std::string> out;
    for (size_t i = 0; i < n; ++i) out.push_back("c" + std::to_string(i));
    return out;
  };
  const table::TableSchema a = schema({false, true, false}), b = schema({false, false, true});
  table::ColumnSet sa(a, names(3)), sb(b, names(3));
  EXPECT_EQ(sa.RowHashExpr(),
            "CRC32(CONCAT_WS('|', CAST(`c0` AS BINARY), CAST(`c1` AS BINARY), CAST(`c2` AS BINARY), "
            "CONCAT(ISNULL(`c0`), ISNULL(`c1`), ISNULL(`c2`))))");
  table::UseCompareHash(sa, sb);
  // The marked columns first. A row without NULLs takes the CONCAT, whose bytes are the
  // CONCAT_WS's with its marker 0; a NULL makes the CONCAT NULL and the CONCAT_WS count.
  const std::string marked =
      "CRC32(COALESCE(CONCAT(CAST(`c1` AS BINARY), '|', CAST(`c2` AS BINARY), '|', CAST(`c0` AS BINARY), '|0'), "
      "CONCAT_WS('|', CAST(`c1` AS BINARY), CAST(`c2` AS BINARY), CAST(`c0` AS BINARY), "
      "ISNULL(`c1`) + 2 * ISNULL(`c2`))))";
  EXPECT_EQ(sa.RowHashExpr(), marked);
  EXPECT_EQ(sb.RowHashExpr(), marked);
  const table::TableSchema none = schema({false, false});
  table::ColumnSet na(none, names(2)), nb(none, names(2));
  table::UseCompareHash(na, nb);
  na.set_plain_text_hash(true);
  EXPECT_EQ(na.RowHashExpr(), "CRC32(CONCAT_WS(_binary'|', `c0`, `c1`))");
  // Text columns: every one's length but the last's.
  table::TableSchema mixed = schema({false, false, false, false});
  mixed.columns[1].kind = table::ColumnKind::kText;
  mixed.columns[2].kind = table::ColumnKind::kBinary;
  mixed.columns[3].kind = table::ColumnKind::kBit;
  table::ColumnSet ma(mixed, names(4)), mb(mixed, names(4));
  table::UseCompareHash(ma, mb);
  ma.set_plain_text_hash(true);
  EXPECT_EQ(ma.RowHashExpr(), "CRC32(CONCAT_WS(_binary'|', `c0`, `c1`, `c2`, `c3`, LENGTH(`c1`), LENGTH(`c2`)))");
  // With a nullable text column: it comes first, and the lengths follow that order.
  mixed.columns[3].nullable = true;
  table::ColumnSet xa(mixed, names(4)), xb(mixed, names(4));
  table::UseCompareHash(xa, xb);
  xa.set_plain_text_hash(true);
  EXPECT_EQ(xa.RowHashExpr(),
            "CRC32(COALESCE(CONCAT(`c3`, _binary'|', `c0`, _binary'|', `c1`, _binary'|', `c2`, _binary'|0', "
            "_binary'|', LENGTH(`c3`), _binary'|', LENGTH(`c1`)), "
            "CONCAT_WS(_binary'|', `c3`, `c0`, `c1`, `c2`, ISNULL(`c3`), LENGTH(`c3`), LENGTH(`c1`))))");
  // 64 nullable columns: bits 0..61 in one integer (2^61 < 2^63: no overflow), the
  // last two in a second.
  const table::TableSchema wide = schema(std::vector<bool>(64, true));
  table::ColumnSet wa(wide, names(64)), wb(wide, names(64));
  table::UseCompareHash(wa, wb);
  const std::string w = wa.RowHashExpr();
  EXPECT_NE(w.find(", ISNULL(`c0`) + 2 * ISNULL(`c1`) + 4 * ISNULL(`c2`)"), std::string::npos) << w;
  EXPECT_NE(w.find(" + 2305843009213693952 * ISNULL(`c61`), ISNULL(`c62`) + 2 * ISNULL(`c63`)))"), std::string::npos)
      << w;
  table::ColumnSet other(a, {"c1", "c0"});
  EXPECT_THROW(table::UseCompareHash(sa, other), std::logic_error);
}

TEST(TableWhere, ErrorsAreOneLine) {
  try {
    CompileWhere("a = \n:b\n AND");
    FAIL();
  } catch (const WhereError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST(TableSql, PadsStatementsToFewShapes) {
  EXPECT_EQ(table::PaddedCount(1, 500), 1u);
  EXPECT_EQ(table::PaddedCount(2, 500), 4u);
  EXPECT_EQ(table::PaddedCount(5, 500), 16u);
  EXPECT_EQ(table::PaddedCount(257, 500), 500u);
  EXPECT_EQ(table::PaddedCount(500, 500), 500u);
  EXPECT_EQ(table::PaddedCount(17, 20), 20u);
}

// Upserts pad a statement only while the repeated rows are at most an eighth of it.
TEST(TableSql, WriteBatchesSplitRatherThanPadMuch) {
  auto plan = [](size_t n, size_t cap, bool may_pad = true) {
    std::vector<std::pair<size_t, size_t>> out;
    for (size_t left = n; left > 0;) {
      table::WriteBatch b = table::NextWriteBatch(left, cap, may_pad);
      EXPECT_GE(b.padded, b.rows);
      EXPECT_LE(b.padded, cap) << n << " rows, cap " << cap;
      if (!may_pad) {
        EXPECT_EQ(b.padded, b.rows);
      }
      EXPECT_GT(b.rows, 0u);
      out.emplace_back(b.rows, b.padded);
      left -= b.rows;
    }
    return out;
  };
  using V = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(plan(10000, 4096),
            (V{{4096, 4096}, {4096, 4096}, {1024, 1024}, {256, 256}, {256, 256}, {256, 256}, {16, 16}}));
  EXPECT_EQ(plan(1000, 4096), (V{{1000, 1024}}));  // 24 repeats of 1,024: padded
  EXPECT_EQ(plan(5, 4096), (V{{4, 4}, {1, 1}}));
  EXPECT_EQ(plan(15, 16), (V{{15, 16}}));
  EXPECT_EQ(plan(1, 1), (V{{1, 1}}));
  // More rows than the cap: statements of the cap (they were the largest power of four
  // below n, 4,096 rows where the byte bound allowed 1,024).
  EXPECT_EQ(plan(5000, 1024), (V{{1024, 1024}, {1024, 1024}, {1024, 1024}, {1024, 1024}, {904, 1024}}));
  EXPECT_EQ(plan(1000, 4096, false), (V{{256, 256}, {256, 256}, {256, 256}, {64, 64}, {64, 64}, {64, 64}, {16, 16},
                                        {16, 16}, {4, 4}, {4, 4}}));
  for (size_t n = 1; n <= 5000; ++n) {
    size_t sent = 0, statements = 0;
    for (auto [rows, padded] : plan(n, 1024)) {
      sent += padded;
      ++statements;
    }
    EXPECT_LE(sent * 7, n * 8) << n;                 // repeats at most an eighth of what is sent
    EXPECT_LE(statements, n / 1024 + 3 * 5 + 1) << n;  // a few statements past the full ones
  }
}

TEST(TableSql, BeforeImageRoundTripsAndRejectsOtherShapes) {
  table::Image img;
  img.table = "kb_doc";
  img.columns = {"id", "data"};
  img.key = {"id"};
  img.binary = {"data"};
  img.restore = {{std::string("1"), std::nullopt}, {std::string("2"), std::string("00FF")}};
  img.remove = {{std::string("3")}};
  table::Image back = table::Image::FromJson(img.ToJson());
  EXPECT_EQ(back.ToJson(), img.ToJson());
  EXPECT_EQ(back.restore[0][1], std::nullopt);

  for (const json& bad : {json(nullptr), json::object(), json{{"format", 2}},
                          [&] { json j = img.ToJson(); j["restore"][0].push_back("x"); return j; }(),
                          [&] { json j = img.ToJson(); j["remove"][0][0] = 3; return j; }(),
                          [&] { json j = img.ToJson(); j["key"] = {"nope"}; return j; }()}) {
    EXPECT_THROW(table::Image::FromJson(bad), std::invalid_argument) << bad.dump();
  }
}

}  // namespace
}  // namespace dsync::saga
