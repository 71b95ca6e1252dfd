#include "registry/node_metadata.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace dsync::registry {
namespace {

NodeMetadata Sample() {
  NodeMetadata md;
  md.version = "0.1.0";
  md.weight = 2.5;
  md.capacity = 8;
  md.prefetch = 4;
  md.processing_count = 3;
  md.load = 0.375;
  md.topics = {"SPACE_ADD", "DOC_SYNC"};
  md.host = "web-3";
  md.pid = 4242;
  md.started_at = "2026-11-20T10:00:00.000Z";
  md.incarnation = "web-3:4242:1763632800000";
  return md;
}

void ExpectDefaults(const NodeMetadata& md) {
  NodeMetadata defaults;
  EXPECT_EQ(md.capacity, 1);
  EXPECT_EQ(md.prefetch, 0);
  EXPECT_TRUE(md.topics.empty());
  EXPECT_EQ(md.processing_count, 0);
  EXPECT_DOUBLE_EQ(md.load, 0.0);
  EXPECT_DOUBLE_EQ(md.weight, defaults.weight);
  EXPECT_TRUE(md.ServesTopic("ANY_TOPIC"));
}

TEST(NodeMetadataTest, ToJsonWritesEveryField) {
  auto j = nlohmann::json::parse(Sample().ToJson());
  for (const char* key : {"version", "weight", "capacity", "prefetch", "processing_count", "load",
                          "topics", "host", "pid", "started_at", "incarnation"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["capacity"], 8);
  EXPECT_EQ(j["prefetch"], 4);
  EXPECT_EQ(j["topics"], nlohmann::json({"SPACE_ADD", "DOC_SYNC"}));
}

TEST(NodeMetadataTest, RoundTrip) {
  NodeMetadata md = Sample();
  ParsedMetadata parsed = ParseNodeMetadata(md.ToJson());
  EXPECT_FALSE(parsed.problem.has_value()) << *parsed.problem;
  const NodeMetadata& got = parsed.metadata;
  EXPECT_EQ(got.version, md.version);
  EXPECT_DOUBLE_EQ(got.weight, md.weight);
  EXPECT_EQ(got.capacity, md.capacity);
  EXPECT_EQ(got.prefetch, md.prefetch);
  EXPECT_EQ(got.processing_count, md.processing_count);
  EXPECT_DOUBLE_EQ(got.load, md.load);
  EXPECT_EQ(got.topics, md.topics);
  EXPECT_EQ(got.host, md.host);
  EXPECT_EQ(got.pid, md.pid);
  EXPECT_EQ(got.started_at, md.started_at);
  EXPECT_EQ(got.incarnation, md.incarnation);
}

TEST(NodeMetadataTest, RoundTripOfDefaults) {
  ParsedMetadata parsed = ParseNodeMetadata(NodeMetadata().ToJson());
  EXPECT_FALSE(parsed.problem.has_value());
  ExpectDefaults(parsed.metadata);
}

TEST(NodeMetadataTest, ToJsonSurvivesInvalidUtf8) {
  NodeMetadata md;
  md.host = "bad\xff";
  std::string text;
  ASSERT_NO_THROW(text = md.ToJson());
  EXPECT_FALSE(ParseNodeMetadata(text).problem.has_value());
}

TEST(NodeMetadataTest, MissingOrUnparseableTextGivesDefaultsAndProblem) {
  for (const std::optional<std::string>& text :
       {std::optional<std::string>(), std::optional<std::string>(""),
        std::optional<std::string>("  \n"), std::optional<std::string>("not json"),
        std::optional<std::string>("{\"capacity\": 4"), std::optional<std::string>("[1,2]"),
        std::optional<std::string>("42"), std::optional<std::string>("\"text\""),
        std::optional<std::string>("null")}) {
    ParsedMetadata parsed;
    ASSERT_NO_THROW(parsed = ParseNodeMetadata(text)) << text.value_or("<null>");
    ASSERT_TRUE(parsed.problem.has_value()) << text.value_or("<null>");
    EXPECT_EQ(parsed.problem->find('\n'), std::string::npos);
    ExpectDefaults(parsed.metadata);
  }
}

// Each case: one bad field. It is defaulted and named in `problem`; the other fields
// are still read.
struct BadField {
  const char* field;
  const char* json_value;
};

class NodeMetadataBadFieldTest : public ::testing::TestWithParam<BadField> {};

TEST_P(NodeMetadataBadFieldTest, FieldDefaultedOthersRead) {
  const BadField& bad = GetParam();
  nlohmann::json j = nlohmann::json::parse(Sample().ToJson());
  j[bad.field] = nlohmann::json::parse(bad.json_value);
  ParsedMetadata parsed = ParseNodeMetadata(j.dump());
  ASSERT_TRUE(parsed.problem.has_value());
  EXPECT_NE(parsed.problem->find(bad.field), std::string::npos) << *parsed.problem;
  EXPECT_EQ(parsed.problem->find('\n'), std::string::npos);

  const NodeMetadata expected = Sample();
  const NodeMetadata defaults;
  const NodeMetadata& got = parsed.metadata;
  const std::string f = bad.field;
  EXPECT_EQ(got.capacity, f == "capacity" ? defaults.capacity : expected.capacity);
  EXPECT_EQ(got.prefetch, f == "prefetch" ? defaults.prefetch : expected.prefetch);
  EXPECT_EQ(got.processing_count,
            f == "processing_count" ? defaults.processing_count : expected.processing_count);
  EXPECT_DOUBLE_EQ(got.load, f == "load" ? defaults.load : expected.load);
  EXPECT_DOUBLE_EQ(got.weight, f == "weight" ? defaults.weight : expected.weight);
  EXPECT_EQ(got.topics, f == "topics" ? defaults.topics : expected.topics);
  EXPECT_EQ(got.version, f == "version" ? defaults.version : expected.version);
  EXPECT_EQ(got.host, f == "host" ? defaults.host : expected.host);
  EXPECT_EQ(got.pid, f == "pid" ? defaults.pid : expected.pid);
  EXPECT_EQ(got.incarnation, f == "incarnation" ? defaults.incarnation : expected.incarnation);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, NodeMetadataBadFieldTest,
    ::testing::Values(BadField{"capacity", "\"x\""}, BadField{"capacity", "0"},
                      BadField{"capacity", "-3"}, BadField{"capacity", "2.5"},
                      BadField{"capacity", "8.0"}, BadField{"capacity", "3000000000"},
                      BadField{"capacity", "true"}, BadField{"prefetch", "-1"},
                      BadField{"prefetch", "\"8\""}, BadField{"prefetch", "1.5"},
                      BadField{"prefetch", "3000000000"}, BadField{"load", "-0.5"},
                      BadField{"load", "\"high\""}, BadField{"weight", "0"},
                      BadField{"weight", "-1"}, BadField{"weight", "\"heavy\""},
                      BadField{"processing_count", "-1"}, BadField{"processing_count", "1.5"},
                      BadField{"processing_count", "{}"}, BadField{"topics", "\"SPACE_ADD\""},
                      BadField{"topics", "[\"A\", 1]"}, BadField{"topics", "{}"},
                      BadField{"version", "1"}, BadField{"host", "[]"},
                      BadField{"pid", "\"4242\""}, BadField{"incarnation", "7"}));

TEST(NodeMetadataTest, SeveralBadFieldsAllNamedOnOneLine) {
  ParsedMetadata parsed =
      ParseNodeMetadata(R"({"capacity":"x","load":-1,"topics":[1],"host":"h1","pid":7})");
  ASSERT_TRUE(parsed.problem.has_value());
  for (const char* f : {"capacity", "load", "topics"}) {
    EXPECT_NE(parsed.problem->find(f), std::string::npos) << *parsed.problem;
  }
  EXPECT_EQ(parsed.problem->find('\n'), std::string::npos);
  EXPECT_EQ(parsed.metadata.host, "h1");
  EXPECT_EQ(parsed.metadata.pid, 7);
  ExpectDefaults(parsed.metadata);
}

TEST(NodeMetadataTest, UnknownFieldsIgnoredMissingAndNullFieldsDefaulted) {
  ParsedMetadata parsed = ParseNodeMetadata(
      R"({"capacity":4,"zone":"eu-1","future":{"x":[1,2]},"load":null,"topics":null})");
  EXPECT_FALSE(parsed.problem.has_value()) << *parsed.problem;
  EXPECT_EQ(parsed.metadata.capacity, 4);
  EXPECT_DOUBLE_EQ(parsed.metadata.load, 0.0);
  EXPECT_TRUE(parsed.metadata.topics.empty());

  // A node that publishes no prefetch (older versions) gets none.
  EXPECT_EQ(parsed.metadata.prefetch, 0);
  EXPECT_EQ(ParseNodeMetadata(R"({"prefetch":0})").metadata.prefetch, 0);
  EXPECT_EQ(ParseNodeMetadata(R"({"prefetch":16})").metadata.prefetch, 16);

  ParsedMetadata empty = ParseNodeMetadata("{}");
  EXPECT_FALSE(empty.problem.has_value());
  ExpectDefaults(empty.metadata);
}

TEST(NodeMetadataTest, IntegerFieldsAcceptLargeValuesWithinRange) {
  ParsedMetadata parsed = ParseNodeMetadata(
      R"({"capacity":2147483647,"pid":9007199254740993,"weight":3,"load":0})");
  EXPECT_FALSE(parsed.problem.has_value()) << *parsed.problem;
  EXPECT_EQ(parsed.metadata.capacity, 2147483647);
  EXPECT_EQ(parsed.metadata.pid, 9007199254740993LL);
  EXPECT_DOUBLE_EQ(parsed.metadata.weight, 3.0);
}

TEST(NodeMetadataTest, ServesTopic) {
  NodeMetadata md;
  EXPECT_TRUE(md.ServesTopic("SPACE_ADD"));  // empty: every topic

  md.topics = {"SPACE_ADD", "DOC_SYNC"};
  EXPECT_TRUE(md.ServesTopic("SPACE_ADD"));
  EXPECT_TRUE(md.ServesTopic("DOC_SYNC"));
  EXPECT_FALSE(md.ServesTopic("SPACE_DEL"));
  EXPECT_FALSE(md.ServesTopic("space_add"));
  EXPECT_FALSE(md.ServesTopic(""));

  md.topics = {"DOC_SYNC", "*"};
  EXPECT_TRUE(md.ServesTopic("SPACE_DEL"));
}

// Routing facts (datasource-aware routing): what the node reaches, what it could not
// build. An older node publishes none of them.
TEST(NodeMetadataTest, RoutingFieldsRoundTrip) {
  NodeMetadata md = Sample();
  md.datasources = std::vector<std::string>{"env_a", "env_b"};
  md.datasource_errors = {{"env_c", "cannot connect to 127.0.0.1:1"}};
  md.bad_topics = {{"DOC_SYNC", "config: topics.DOC_SYNC.steps[0] (docs): unknown step type 'x'"}};
  ParsedMetadata parsed = ParseNodeMetadata(md.ToJson());
  EXPECT_FALSE(parsed.problem.has_value()) << *parsed.problem;
  ASSERT_TRUE(parsed.metadata.datasources.has_value());
  EXPECT_EQ(*parsed.metadata.datasources, (std::vector<std::string>{"env_a", "env_b"}));
  EXPECT_EQ(parsed.metadata.datasource_errors, md.datasource_errors);
  EXPECT_EQ(parsed.metadata.bad_topics, md.bad_topics);
  EXPECT_TRUE(parsed.metadata.ReachesDatasource("env_b"));
  EXPECT_FALSE(parsed.metadata.ReachesDatasource("env_c"));
}

TEST(NodeMetadataTest, AbsentDatasourcesMeansReachingAllEmptyMeansNone) {
  // An older node: no field at all.
  NodeMetadata old = ParseNodeMetadata(R"({"capacity":2,"topics":["*"]})").metadata;
  EXPECT_FALSE(old.datasources.has_value());
  EXPECT_TRUE(old.ReachesDatasource("env_b"));
  EXPECT_TRUE(old.bad_topics.empty());
  // Null reads as absent (like every other field).
  EXPECT_FALSE(ParseNodeMetadata(R"({"datasources":null})").metadata.datasources.has_value());
  // A node that reaches nothing (or has not finished its first check).
  NodeMetadata none = ParseNodeMetadata(R"({"datasources":[]})").metadata;
  ASSERT_TRUE(none.datasources.has_value());
  EXPECT_TRUE(none.datasources->empty());
  EXPECT_FALSE(none.ReachesDatasource("env_a"));
  // ToJson leaves the field out when not reported, writes [] when empty.
  EXPECT_FALSE(nlohmann::json::parse(NodeMetadata().ToJson()).contains("datasources"));
  NodeMetadata empty;
  empty.datasources.emplace();
  EXPECT_EQ(nlohmann::json::parse(empty.ToJson())["datasources"], nlohmann::json::array());
}

TEST(NodeMetadataTest, MalformedRoutingFieldsAreNamedAndDefaulted) {
  // datasources not a list of strings: taken as not reported (reaching all, as before
  // nodes reported it), named in the problem; the other fields still read.
  for (const char* bad : {R"("env_a")", R"(["env_a", 3])", R"({"env_a":true})"}) {
    nlohmann::json j = nlohmann::json::parse(Sample().ToJson());
    j["datasources"] = nlohmann::json::parse(bad);
    ParsedMetadata parsed = ParseNodeMetadata(j.dump());
    ASSERT_TRUE(parsed.problem.has_value()) << bad;
    EXPECT_NE(parsed.problem->find("datasources"), std::string::npos) << *parsed.problem;
    EXPECT_FALSE(parsed.metadata.datasources.has_value()) << bad;
    EXPECT_EQ(parsed.metadata.capacity, Sample().capacity);
  }
  for (const char* field : {"bad_topics", "datasource_errors"}) {
    for (const char* bad : {R"(["T"])", R"({"T":1})", R"("T")"}) {
      nlohmann::json j = nlohmann::json::parse(Sample().ToJson());
      j[field] = nlohmann::json::parse(bad);
      ParsedMetadata parsed = ParseNodeMetadata(j.dump());
      ASSERT_TRUE(parsed.problem.has_value()) << field << " " << bad;
      EXPECT_NE(parsed.problem->find(field), std::string::npos) << *parsed.problem;
      EXPECT_TRUE(parsed.metadata.bad_topics.empty());
      EXPECT_TRUE(parsed.metadata.datasource_errors.empty());
      EXPECT_EQ(parsed.metadata.topics, Sample().topics);
    }
  }
}

}  // namespace
}  // namespace dsync::registry
