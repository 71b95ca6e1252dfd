// The pure parts of verify: what POST /v1/verify and `dsync verify` accept, the
// table_verify / table_repair step keys, and the repair payload built from a diff.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/verify_service.h"
#include "core/error.h"
#include "saga/steps/table_verify.h"
#include "tests/support/saga_fixtures.h"

namespace dsync {
namespace {

using nlohmann::json;

StepSpec Spec(const std::string& type, json params) { return testing::Step("check", type, std::move(params)); }

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
  saga::TableCheck c = saga::ParseTableCheck(
      Spec("table_verify", {{"source", "a"}, {"target", "b"}, {"table", "kb_doc"}, {"where", "space_id = :s"},
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
    EXPECT_THROW(saga::MakeTableVerifyStep(Spec("table_verify", bad)), ConfigError) << bad.dump();
  }
  EXPECT_THROW(saga::MakeTableRepairStep(Spec("table_repair", {{"table", "t"}})), ConfigError);
  EXPECT_NE(saga::MakeTableRepairStep(Spec("table_repair", json::object())), nullptr);
  EXPECT_THROW(saga::MakeTableCheck("a", "b", "t", "id = 1 -- x"), saga::VerifyInputError);
  EXPECT_THROW(saga::MakeTableCheck("a", "a", "t", "1 = 1"), saga::VerifyInputError);
}

TEST(RepairPayload, ListsEveryDifferingKeyWithTheFilterValues) {
  saga::TableCheck c = saga::MakeTableCheck("a", "b", "doc", "grp = :g AND a > :min");
  saga::TableDiff d;
  d.table = "doc";
  d.key_columns = {"a", "b"};
  d.key_kinds = {saga::table::ColumnKind::kSigned, saga::table::ColumnKind::kText};
  d.missing = {{std::string("5"), std::string("k")}};
  d.extra = {{std::string("500"), std::string("zz")}};
  d.different = {{std::string("10"), std::string("k")}};
  d.missing_total = d.extra_total = d.different_total = 1;
  json p = saga::RepairPayload(c, {{"g", 1}, {"min", 0}, {"unrelated", "x"}}, d);
  EXPECT_EQ(p["keys"], json::parse(R"([[5, "k"], [10, "k"], [500, "zz"]])"));
  EXPECT_EQ(p["params"], json::parse(R"({"g": 1, "min": 0})"));
  EXPECT_EQ(p["key_columns"], json::parse(R"(["a", "b"])"));
  EXPECT_EQ(p["where"], "grp = :g AND a > :min");
  d.different_total = saga::kMaxRepairKeys;  // more than a repair syncs
  EXPECT_THROW(saga::RepairPayload(c, json::object(), d), saga::VerifyInputError);
}

}  // namespace
}  // namespace dsync
