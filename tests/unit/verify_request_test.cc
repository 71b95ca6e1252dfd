// The pure parts of verify: what POST /v1/verify and `dsync verify` accept, the
// table_verify / table_repair step keys, and the repair payload built from a diff.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/verify_service.h"
#include "core/error.h"
#include "saga/steps/table_verify.h"
#include "table/sql.h"
#include "table/verify.h"
#include "table/where.h"
#include "tests/support/saga_fixtures.h"

namespace dsync {
namespace {

using nlohmann::json;

StepSpec VerifySpec(const std::string& type, json params) { return testing::Step("check", type, std::move(params)); }

TEST(VerifyRequest, TopicOrOneTable) {
  api::VerifyRequest t = api::ParseVerifyRequest({{"topic", "SPACE_ADD"}, {"payload", {{"space_id", 9}}}});
  EXPECT_TRUE(t.topic_mode());
  EXPECT_EQ(t.subject(), "SPACE_ADD");
  EXPECT_EQ(t.filter(), R"({"space_id":9})");
  api::VerifyRequest o = api::ParseVerifyRequest(
      {{"source", "a"}, {"target", "b"}, {"table", "kb_doc"}, {"where", "id = :id"}, {"params", {{"id", 1}}},
       {"max_keys", 5}});
  EXPECT_FALSE(o.topic_mode());
  EXPECT_EQ(o.subject(), "kb_doc");
  EXPECT_EQ(o.filter(), R"(id = :id {"id":1})");
  EXPECT_EQ(o.max_keys, 5u);
}

TEST(VerifyRequest, RejectsBadBodies) {
  for (const json& body : {json::array(), json{{"topic", "T"}, {"table", "x"}}, json{{"topic", 1}},
                           json{{"topic", "T"}, {"payload", "x"}}, json{{"source", "a"}, {"target", "b"}},
                           json{{"source", "a"}, {"target", "b"}, {"table", "t"}, {"where", "1 = 1"}, {"params", 3}},
                           json{{"topic", "T"}, {"max_keys", 0}}, json{{"topic", "T"}, {"sql", "DROP"}}}) {
    EXPECT_THROW(api::ParseVerifyRequest(body), UsageError) << body.dump();
  }
}

TEST(TableCheck, TakesTheKeysOfTableSync) {
  table::TableCheck c = table::ParseTableCheck(
      VerifySpec("table_verify", {{"source", "a"}, {"target", "b"}, {"table", "kb_doc"}, {"where", "space_id = :s"},
                            {"columns", {"id", "title"}}, {"chunk_size", 500}, {"delete_missing", true},
                            {"undo_retention_days", 3}}),
      "table_verify");
  EXPECT_EQ(c.table, "kb_doc");
  EXPECT_EQ(c.where.params, std::vector<std::string>{"s"});
  EXPECT_EQ(c.columns, (std::vector<std::string>{"id", "title"}));
  EXPECT_TRUE(c.delete_missing);
  for (const json& bad : {json{{"source", "a"}, {"target", "a"}, {"table", "t"}, {"where", "1 = 1"}},
                          json{{"source", "a"}, {"target", "b"}, {"table", "t;x"}, {"where", "1 = 1"}},
                          json{{"source", "a"}, {"target", "b"}, {"table", "t"}, {"where", "1 = 1; DROP TABLE t"}},
                          json{{"source", "a"}, {"target", "b"}, {"table", "t"}, {"where", "1 = 1"}, {"typo", 1}},
                          json{{"source", "a"}, {"target", "b"}, {"table", "t"}, {"where", "1 = 1"}, {"chunk_size", 0}}}) {
    EXPECT_THROW(saga::MakeTableVerifyStep(VerifySpec("table_verify", bad)), ConfigError) << bad.dump();
  }
  EXPECT_THROW(saga::MakeTableRepairStep(VerifySpec("table_repair", {{"table", "t"}})), ConfigError);
  EXPECT_NE(saga::MakeTableRepairStep(VerifySpec("table_repair", json::object())), nullptr);
  EXPECT_THROW(table::MakeTableCheck("a", "b", "t", "id = 1 -- x"), table::VerifyInputError);
  EXPECT_THROW(table::MakeTableCheck("a", "a", "t", "1 = 1"), table::VerifyInputError);
}

// The differences of a table: 5 and 7 missing in the target, 10 different, 500 extra.
table::TableDiff Diff() {
  table::TableDiff d;
  d.table = "doc";
  d.key_columns = {"a", "b"};
  d.key_kinds = {table::ColumnKind::kSigned, table::ColumnKind::kText};
  d.missing = {{std::string("5"), std::string("k")}, {std::string("7"), std::string("b")}};
  d.extra = {{std::string("500"), std::string("zz")}};
  d.different = {{std::string("10"), std::string("k")}};
  d.missing_total = 2;
  d.extra_total = d.different_total = 1;
  return d;
}

table::TableCheck SyncStep(bool delete_missing) {
  json params = {{"source", "a"}, {"target", "b"}, {"table", "doc"}, {"where", "grp = :g AND a > :min"}};
  if (delete_missing) params["delete_missing"] = true;
  return table::ParseTableCheck(testing::Step("docs", "table_sync", params), "table_sync");
}

// A repair event names the topic, its step, the where's values and the keys: nothing
// a node would take a datasource, table or filter from.
TEST(RepairPayload, NamesTheTopicStepAndKeysOnly) {
  const table::TableDiff d = Diff();
  json p = table::RepairPayload("SYNC", SyncStep(true), {{"g", 1}, {"min", 0}, {"unrelated", "x"}}, d);
  EXPECT_EQ(p, json::parse(R"({"topic": "SYNC", "step": "docs", "payload": {"g": 1, "min": 0},
                               "keys": [[5, "k"], [7, "b"], [10, "k"], [500, "zz"]]})"));
  // Without delete_missing a sync keeps extra rows: so does the repair.
  p = table::RepairPayload("SYNC", SyncStep(false), {{"g", 1}, {"min", 0}}, d);
  EXPECT_EQ(p["keys"], json::parse(R"([[5, "k"], [7, "b"], [10, "k"]])"));
  // One table named on the command line is no configured step.
  EXPECT_THROW(table::RepairPayload("", table::MakeTableCheck("a", "b", "doc", "1 = 1"), json::object(), d),
               table::VerifyInputError);
  table::TableDiff big = d;
  big.different_total = table::kMaxRepairKeys;  // more than a repair syncs
  EXPECT_THROW(table::RepairPayload("SYNC", SyncStep(true), json::object(), big), table::VerifyInputError);
}

// --plan and --repair read one plan: inserts, updates, and deletes only with
// delete_missing (else the extra rows are kept, and no repair key names them).
TEST(RepairPlan, IsWhatTheSyncWouldWrite) {
  const table::TableDiff d = Diff();
  for (bool delete_missing : {false, true}) {
    const table::RepairPlan plan = table::PlanRepair(SyncStep(delete_missing), d);
    EXPECT_EQ(plan.insert_total, 2);
    EXPECT_EQ(plan.update_total, 1);
    EXPECT_EQ(plan.remove_total, delete_missing ? 1 : 0);
    EXPECT_EQ(plan.keep_total, delete_missing ? 0 : 1);
    EXPECT_EQ(plan.writes(), delete_missing ? 4 : 3);
    EXPECT_EQ(static_cast<int64_t>(plan.Keys().size()), plan.writes());
    json keys = table::RepairPayload("SYNC", SyncStep(delete_missing), json::object(), d)["keys"];
    ASSERT_EQ(static_cast<int64_t>(keys.size()), plan.writes());
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(keys[i], d.KeyJson(plan.Keys()[i]));
  }
}

// POST /v1/verify compares what the config names: a topic and its payload, never one
// table with a free filter (a probe that reads a column a character at a time).
TEST(VerifyRequest, TheApiTakesConfiguredTopicsOnly) {
  EXPECT_TRUE(api::ParseApiVerifyRequest({{"topic", "SYNC"}, {"payload", {{"g", 1}}}}).topic_mode());
  for (const json& body :
       {json{{"source", "env_a"}, {"target", "env_b"}, {"table", "users"}, {"where", "token LIKE 's3c%'"}},
        json{{"table", "users"}}, json::object()}) {
    EXPECT_THROW(api::ParseApiVerifyRequest(body), UsageError) << body.dump();
  }
  EXPECT_THROW(api::ParseApiVerifyRequest(json::array()), UsageError);
}

// A payload value bound as a LIKE pattern is escaped to match literally, unless the
// step opts into patterns.
TEST(Where, LikePlaceholdersMatchLiterally) {
  table::CompiledWhere w = table::CompileWhere("kind LIKE :k AND :v LIKE title AND title LIKE 'a%'");
  EXPECT_EQ(w.sql, "`kind` LIKE ? ESCAPE '!' AND ? LIKE `title` AND `title` LIKE 'a%'");
  EXPECT_EQ(w.like_literal, (std::vector<bool>{true, false}));
  table::CompiledWhere p = table::CompileWhere("kind LIKE :k", /*like_patterns=*/true);
  EXPECT_EQ(p.sql, "`kind` LIKE ?");
  EXPECT_EQ(p.like_literal, (std::vector<bool>{false}));
  EXPECT_EQ(table::EscapeLike("100%_off! a\\b"), "100!%!_off!! a\\b");
  EXPECT_EQ(table::QuoteIdentifier("a`b"), "`a``b`");
}

}  // namespace
}  // namespace dsync
