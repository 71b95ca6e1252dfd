// core/json_limits: the depth pre-scan and the bounded parses of stored JSON.
#include "core/json_limits.h"

#include <string>

#include <gtest/gtest.h>

namespace dsync {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(depth), open) + std::string(static_cast<size_t>(depth), close);
}

TEST(JsonLimits, CountsNestingOutsideStrings) {
  EXPECT_EQ(JsonNestingDepth(""), 0);
  EXPECT_EQ(JsonNestingDepth("42"), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(JsonNestingDepth(R"(["[[[[", "{{{"])"), 1);           // brackets inside strings
  EXPECT_EQ(JsonNestingDepth(R"(["\"[[[", {"k\\": [1]}])"), 3);  // escaped quote, escaped backslash
  EXPECT_EQ(JsonNestingDepth("[][][]"), 1);                      // siblings do not add up
}

TEST(JsonLimits, StopsScanningPastTheLimit) {
  EXPECT_EQ(JsonNestingDepth(Nested(100000), 512), 513);
  EXPECT_EQ(JsonNestingDepth(Nested(512), 512), 512);
}

TEST(JsonLimits, ParsesUpToTheLimitAndRefusesDeeper) {
  EXPECT_TRUE(ParseJsonBounded(Nested(kMaxJsonDepth)).is_array());
  EXPECT_THROW(ParseJsonBounded(Nested(kMaxJsonDepth + 1), "payload"), JsonTooDeepError);
  try {
    ParseJsonBounded(Nested(100000), "payload");
    FAIL() << "no error";
  } catch (const JsonTooDeepError& e) {
    EXPECT_STREQ(e.what(), "payload nests deeper than 512 levels");
  }
  EXPECT_THROW(ParseJsonBounded("{\"a\":"), nlohmann::json::parse_error);
  // Objects count as arrays do.
  std::string deep_objects;
  for (int i = 0; i < 600; ++i) deep_objects += "{\"a\":";
  deep_objects += "1" + std::string(600, '}');
  EXPECT_THROW(ParseJsonBounded(deep_objects), JsonTooDeepError);
}

TEST(JsonLimits, StoredJsonNeverThrows) {
  EXPECT_EQ(ParseStoredJson("  ").problem, StoredJson::kEmpty);
  EXPECT_EQ(ParseStoredJson("not json").problem, StoredJson::kInvalid);
  StoredJson deep = ParseStoredJson(Nested(100000), "result");
  EXPECT_EQ(deep.problem, StoredJson::kTooDeep);
  EXPECT_EQ(deep.message, "result nests deeper than 512 levels");
  EXPECT_TRUE(deep.value.is_null());
  StoredJson ok = ParseStoredJson(R"({"a": 1})");
  EXPECT_EQ(ok.problem, StoredJson::kNone);
  EXPECT_EQ(ok.value["a"], 1);
  // A value at the limit is usable: dump and copy recurse 512 deep at most.
  StoredJson at_limit = ParseStoredJson(Nested(kMaxJsonDepth));
  ASSERT_EQ(at_limit.problem, StoredJson::kNone);
  nlohmann::json copy = at_limit.value;
  EXPECT_EQ(copy.dump().size(), static_cast<size_t>(2 * kMaxJsonDepth));
}


}  // namespace
}  // namespace dsync
