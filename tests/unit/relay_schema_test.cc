// The table description one relay half publishes for the other (table/relay_schema.h).
#include "table/relay_schema.h"

#include <gtest/gtest.h>

#include "table/relay_codec.h"

namespace dsync::table {
namespace {

TableSchema SampleSchema() {
  TableSchema s;
  s.label = "env_b.kb_doc";
  s.table = "kb_doc";
  s.columns = {{"id", ColumnKind::kSigned, "bigint(20)", 0, 0, false, false},
               {"price", ColumnKind::kDecimal, "decimal(30,10)", 30, 10, false, true},
               {"data", ColumnKind::kBinary, "blob", 0, 0, false, true},
               {"len", ColumnKind::kUnsigned, "int(10) unsigned", 0, 0, true, true},
               {"odd `name`|", ColumnKind::kText, "varchar(20)", 0, 0, false, true}};
  s.key = {"id"};
  return s;
}

TEST(RelaySchema, RoundTrips) {
  TableShape shape;
  shape.columns = {{"id", "bigint(20)", false, ""}, {"odd `name`|", "varchar(20)", true, "utf8mb4_bin"}};
  shape.key = {"id"};
  const TableSchema sample = SampleSchema();
  const RelaySchema back = ParseRelaySchema(RelaySchemaJson(sample, shape));
  EXPECT_EQ(back.schema.label, "env_b.kb_doc");
  EXPECT_EQ(back.schema.key, sample.key);
  ASSERT_EQ(back.schema.columns.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    const Column& a = back.schema.columns[i];
    const Column& b = sample.columns[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.column_type, b.column_type);
    EXPECT_EQ(a.precision, b.precision);
    EXPECT_EQ(a.scale, b.scale);
    EXPECT_EQ(a.generated, b.generated);
    EXPECT_EQ(a.nullable, b.nullable);
  }
  EXPECT_EQ(back.shape.columns, shape.columns);
  EXPECT_EQ(back.shape.Fingerprint(), shape.Fingerprint());
}

TEST(RelaySchema, MalformedIsOneLine) {
  for (const char* bad : {"", "[]", "{\"label\": 1}", R"({"label":"a","table":"t","key":[],"columns":[{"name":"x",
      "kind":"weird","type":"int","precision":0,"scale":0,"generated":false,"nullable":true}],"shape":{}})"}) {
    try {
      ParseRelaySchema(bad);
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const RelayFormatError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("relay schema: ", 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace dsync::table
