// Unit tests of the configuration loader (config/settings.h): defaults, the example
// file, unknown keys, strict types, step params, environment overrides, Validate's
// cross-field rules, and the consistency of AllSettingKeys with what is parsed.
#include "config/settings.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace dsync {
namespace {

const std::string kMinimalTopics =
    R"("topics": {"T": {"steps": [{"name": "s1", "type": "demo"}]}})";

std::string WithTopics(const std::string& members) {
  return "{" + members + (members.empty() ? "" : ", ") + kMinimalTopics + "}";
}

// The message of the ConfigError that parsing `text` throws ("" if none is thrown).
std::string ParseError(const std::string& text, const EnvMap& env = {}) {
  try {
    ParseSettings(text, env);
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_EQ(message.rfind("config: ", 0), 0u) << message;
    return message;
  }
  ADD_FAILURE() << "no ConfigError for: " << text;
  return "";
}

std::string ValidateError(const Settings& settings) {
  try {
    settings.Validate();
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "Validate accepted the settings";
  return "";
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(SettingsTest, DefaultsWhenOnlyTopicsGiven) {
  Settings s = ParseSettings(WithTopics(""), {});
  EXPECT_EQ(s.database, "");
  EXPECT_EQ(s.service, "kbs-sync");
  EXPECT_EQ(s.log_level, "info");
  EXPECT_TRUE(s.datasources.empty());
  EXPECT_EQ(s.registry.heartbeat_interval, Millis(10000));
  EXPECT_EQ(s.registry.offline_timeout, Millis(30000));
  EXPECT_EQ(s.registry.sweep_interval, Millis(5000));
  EXPECT_EQ(s.registry.purge_after, Millis(604800000));
  EXPECT_EQ(s.dispatcher.poll_interval, Millis(200));
  EXPECT_EQ(s.dispatcher.idle_interval, Millis(1000));
  EXPECT_EQ(s.dispatcher.busy_interval, Millis(2));
  EXPECT_EQ(s.dispatcher.lease_ttl, Millis(10000));
  EXPECT_EQ(s.dispatcher.batch_size, 500);
  EXPECT_EQ(s.consumer.poll_interval, Millis(200));
  EXPECT_EQ(s.consumer.drain_timeout, Millis(30000));
  EXPECT_EQ(s.consumer.capacity, 8);
  EXPECT_EQ(s.consumer.prefetch, -1);
  EXPECT_EQ(s.api.listen, "127.0.0.1:8080");
  EXPECT_EQ(s.api.token, "");
  EXPECT_EQ(s.api.max_body_bytes, 1048576);
  EXPECT_TRUE(s.retention.enabled);
  EXPECT_EQ(s.retention.finished_after, Millis(604800000));  // 7 days
  EXPECT_EQ(s.retention.failed_after, Millis(2592000000));   // 30 days
  EXPECT_FALSE(s.retention.archive);
  EXPECT_EQ(s.retention.busy_pause, Millis(2000));
  ASSERT_EQ(s.topics.size(), 1u);
  const TopicSettings& t = s.topics.at("T");
  EXPECT_EQ(t.max_retry, 3);
  EXPECT_EQ(t.backoff_base, Millis(1000));
  EXPECT_EQ(t.backoff_max, Millis(60000));
  EXPECT_EQ(t.max_processing_time, Millis(300000));
  EXPECT_EQ(t.step_timeout, Millis(0));
  EXPECT_EQ(t.StepTimeout(), Millis(300000));  // max_processing_time_ms
  EXPECT_EQ(t.batch_limit, 0);
  EXPECT_EQ(t.priority, 0);
  EXPECT_EQ(t.strategy, "least_load");
  EXPECT_TRUE(t.ordered);
  ASSERT_EQ(t.steps.size(), 1u);
  EXPECT_EQ(t.steps[0].name, "s1");
  EXPECT_EQ(t.steps[0].type, "demo");
  EXPECT_EQ(t.steps[0].max_retry, -1);
  EXPECT_EQ(t.steps[0].timeout, Millis(0));
  EXPECT_TRUE(t.steps[0].params.empty());
  EXPECT_NO_THROW(s.Validate());
}

TEST(SettingsTest, ExampleFileParsesAndValidates) {
  auto path = std::filesystem::path(__FILE__).parent_path() / "../../config/dsync.example.json";
  Settings s = LoadSettings(path.string(), {});
  EXPECT_NO_THROW(s.Validate());
  EXPECT_EQ(s.database, "mysql://dsync:secret@127.0.0.1:3306/dsync");
  EXPECT_EQ(s.service, "kbs-sync");
  EXPECT_EQ(s.datasources.size(), 2u);
  EXPECT_TRUE(s.datasources.count("env_a"));
  EXPECT_TRUE(s.datasources.count("env_b"));
  ASSERT_EQ(s.topics.size(), 4u);

  const auto& add = s.topics.at("SPACE_ADD").steps;
  ASSERT_EQ(add.size(), 4u);
  EXPECT_EQ(add[0].type, "table_sync");
  EXPECT_EQ(add[0].params.at("table"), "kb_space");
  EXPECT_EQ(add[0].params.at("where"), "id = :space_id");
  EXPECT_EQ(add[0].params.at("source"), "env_a");
  EXPECT_EQ(add[0].params.at("target"), "env_b");
  EXPECT_EQ(add[1].params.at("table"), "kb_doc");
  EXPECT_EQ(add[2].params.at("table"), "kb_tag");
  EXPECT_EQ(add[3].params.at("table"), "kb_permission");

  const auto& del = s.topics.at("SPACE_DELETE").steps;
  ASSERT_EQ(del.size(), 4u);
  EXPECT_EQ(del[0].params.at("table"), "kb_permission");
  EXPECT_EQ(del[3].params.at("table"), "kb_space");
  for (const auto& step : del) {
    EXPECT_EQ(step.type, "table_delete");
    EXPECT_EQ(step.params.at("target"), "env_b");
  }

  const auto& doc = s.topics.at("DOC_UPDATE").steps;
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_EQ(doc[0].params.at("where"), "id = :doc_id");

  const auto& demo = s.topics.at("DEMO").steps;
  ASSERT_EQ(demo.size(), 3u);
  EXPECT_EQ(demo[0].name, "s1");
  EXPECT_EQ(demo[1].name, "s2");
  EXPECT_EQ(demo[2].name, "s3");
  for (const auto& step : demo) {
    EXPECT_EQ(step.type, "demo");
    EXPECT_TRUE(step.params.empty());
  }
}

// A step attempt's deadline (step_timeout_ms) is its own setting, defaulting to
// max_processing_time_ms (issue 39 item 5); a step's timeout_ms overrides both.
TEST(SettingsTest, StepTimeoutDefaultsToMaxProcessingTime) {
  const std::string steps = R"("steps": [{"name": "a", "type": "demo"}])";
  Settings s = ParseSettings(R"({"topics": {"T": {"max_processing_time_ms": 9000, )" + steps +
                                 R"(}, "U": {"max_processing_time_ms": 9000, "step_timeout_ms": 4000, )" + steps + "}}}",
                             {});
  EXPECT_EQ(s.topics.at("T").StepTimeout(), Millis(9000));
  EXPECT_EQ(s.topics.at("U").StepTimeout(), Millis(4000));
  EXPECT_EQ(s.topics.at("U").max_processing_time, Millis(9000));
  s.Validate();  // the unset step_timeout (0) is no error
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"step_timeout_ms": 99, )" + steps + "}}}"),
            "config: topics.T.step_timeout_ms: must be at least 100, got 99");
  s.topics.at("U").step_timeout = Millis(5);
  EXPECT_EQ(ValidateError(s), "config: topics.U.step_timeout_ms: must be at least 100, got 5");
}

TEST(SettingsTest, UnknownKeysReportTheirPath) {
  EXPECT_EQ(ParseError(WithTopics(R"("servce": "x")")), "config: servce: unknown key");
  EXPECT_EQ(ParseError(WithTopics(R"("registry": {"heartbeat_intervall_ms": 1})")),
            "config: registry.heartbeat_intervall_ms: unknown key");
  EXPECT_EQ(ParseError(WithTopics(R"("api": {"port": 1})")), "config: api.port: unknown key");
  EXPECT_EQ(ParseError(R"({"topics": {"SPACE_ADD": {"stepz": [], "steps": [{"name": "a", "type": "demo"}]}}})"),
            "config: topics.SPACE_ADD.stepz: unknown key");
}

TEST(SettingsTest, StepExtraKeysLandInParams) {
  Settings s = ParseSettings(R"({"topics": {"T": {"steps": [
      {"name": "a", "type": "table_sync", "source": "env_a", "table": "kb_doc",
       "where": "id = :id", "chunk": 100, "nested": {"x": [1, 2]},
       "max_retry": 0, "timeout_ms": 2500}]}}})",
                             {});
  const StepSpec& step = s.topics.at("T").steps.at(0);
  EXPECT_EQ(step.max_retry, 0);
  EXPECT_EQ(step.timeout, Millis(2500));
  EXPECT_EQ(step.params.size(), 5u);
  EXPECT_EQ(step.params.at("source"), "env_a");
  EXPECT_EQ(step.params.at("chunk"), 100);
  EXPECT_EQ(step.params.at("nested"), nlohmann::json::parse(R"({"x": [1, 2]})"));
  EXPECT_FALSE(step.params.contains("name"));
  EXPECT_FALSE(step.params.contains("max_retry"));
}

TEST(SettingsTest, TopicsAndStepsAreRequired) {
  EXPECT_EQ(ParseError("{}"), "config: topics: required");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {}}})"), "config: topics.T.steps: required");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": []}}})"),
            "config: topics.T.steps: must list at least one step");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": {}}}})"),
            "config: topics.T.steps: expected an array, got an object");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": [{"type": "demo"}]}}})"),
            "config: topics.T.steps[0].name: required");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": [{"name": "a"}]}}})"),
            "config: topics.T.steps[0].type: required");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": [{"name": "", "type": "demo"}]}}})"),
            "config: topics.T.steps[0].name: must not be empty");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": ["a"]}}})"),
            "config: topics.T.steps[0]: expected an object, got a string");
}

TEST(SettingsTest, DuplicateStepNamesRejected) {
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": [
      {"name": "a", "type": "demo"}, {"name": "b", "type": "demo"}, {"name": "a", "type": "demo"}]}}})"),
            "config: topics.T.steps[2].name: duplicate step name 'a'");
  // The same name in two topics is fine.
  EXPECT_NO_THROW(ParseSettings(R"({"topics": {"A": {"steps": [{"name": "a", "type": "demo"}]},
                                               "B": {"steps": [{"name": "a", "type": "demo"}]}}})",
                                {}));
}

TEST(SettingsTest, WrongTypesRejected) {
  EXPECT_EQ(ParseError(WithTopics(R"("registry": {"heartbeat_interval_ms": "1000"})")),
            "config: registry.heartbeat_interval_ms: expected an integer, got a string");
  EXPECT_EQ(ParseError(WithTopics(R"("registry": {"offline_timeout_ms": 1.5})")),
            "config: registry.offline_timeout_ms: expected an integer, got a non-integer number");
  EXPECT_EQ(ParseError(WithTopics(R"("registry": {"sweep_interval_ms": 0})")),
            "config: registry.sweep_interval_ms: must be at least 100, got 0");
  EXPECT_EQ(ParseError(WithTopics(R"("registry": {"purge_after_ms": -5})")),
            "config: registry.purge_after_ms: must be at least 1, got -5");
  EXPECT_EQ(ParseError(WithTopics(R"("dispatcher": {"batch_size": 0})")),
            "config: dispatcher.batch_size: must be at least 1, got 0");
  EXPECT_EQ(ParseError(WithTopics(R"("dispatcher": {"batch_size": 3000000000})")),
            "config: dispatcher.batch_size: must be at most 10000, got 3000000000");
  EXPECT_EQ(ParseError(WithTopics(R"("consumer": {"capacity": true})")),
            "config: consumer.capacity: expected an integer, got a boolean");
  EXPECT_EQ(ParseError(WithTopics(R"("consumer": {"capacity": 10001})")),
            "config: consumer.capacity: must be at most 10000, got 10001");
  EXPECT_EQ(ParseError(WithTopics(R"("api": {"max_body_bytes": 0})")),
            "config: api.max_body_bytes: must be at least 1, got 0");
  EXPECT_EQ(ParseError(WithTopics(R"("api": {"token": 5})")),
            "config: api.token: expected a string, got an integer");
  EXPECT_EQ(ParseError(WithTopics(R"("service": null)")),
            "config: service: expected a string, got null");
  EXPECT_EQ(ParseError(WithTopics(R"("log_level": "verbose")")),
            "config: log_level: expected one of trace|debug|info|warn|error|off, got 'verbose'");
  EXPECT_EQ(ParseError(WithTopics(R"("registry": [])")),
            "config: registry: expected an object, got an array");
  EXPECT_EQ(ParseError(WithTopics(R"("datasources": {"env_a": 1})")),
            "config: datasources.env_a: expected a string or an object, got an integer");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"ordered": "yes", "steps": [{"name": "a", "type": "demo"}]}}})"),
            "config: topics.T.ordered: expected true or false, got a string");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"max_retry": -1, "steps": [{"name": "a", "type": "demo"}]}}})"),
            "config: topics.T.max_retry: must be at least 0, got -1");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"batch_limit": -1, "steps": [{"name": "a", "type": "demo"}]}}})"),
            "config: topics.T.batch_limit: must be at least 0, got -1");
  EXPECT_EQ(ParseError(R"({"topics": {"SPACE_ADD": {"steps": [{"name": "a", "type": "demo"}, {"name": 7, "type": "demo"}]}}})"),
            "config: topics.SPACE_ADD.steps[1].name: expected a string, got an integer");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": [{"name": "a", "type": "demo", "timeout_ms": 0}]}}})"),
            "config: topics.T.steps[0].timeout_ms: must be at least 1, got 0");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"steps": [{"name": "a", "type": "demo", "max_retry": "3"}]}}})"),
            "config: topics.T.steps[0].max_retry: expected an integer, got a string");
  EXPECT_EQ(ParseError("[1, 2]"), "config: expected a JSON object at the top level, got an array");
}

// Issue 34: a setting that can hurt (a busy loop, a flood of log lines, a body or a
// transaction without bound) is refused at start, naming its key; the defaults and the
// example file stay valid (ExampleFileParsesAndValidates).
TEST(SettingsTest, HarmfulValuesRefusedWithTheirKey) {
  struct Case {
    std::string json;
    std::string message;
  };
  const Case cases[] = {
      {R"("dispatcher": {"lease_ttl_ms": 1})", "config: dispatcher.lease_ttl_ms: must be at least 1000, got 1"},
      {R"("dispatcher": {"lease_ttl_ms": 86400000})", "config: dispatcher.lease_ttl_ms: must be at most 600000, got 86400000"},
      {R"("dispatcher": {"batch_size": 2000000000})", "config: dispatcher.batch_size: must be at most 10000, got 2000000000"},
      {R"("dispatcher": {"poll_interval_ms": 1, "busy_interval_ms": 1})", "config: dispatcher.poll_interval_ms: must be at least 10, got 1"},
      {R"("dispatcher": {"idle_interval_ms": 5})", "config: dispatcher.idle_interval_ms: must be at least 10, got 5"},
      {R"("dispatcher": {"batch_check_interval_ms": 1})", "config: dispatcher.batch_check_interval_ms: must be at least 100, got 1"},
      {R"("registry": {"heartbeat_interval_ms": 1})", "config: registry.heartbeat_interval_ms: must be at least 100, got 1"},
      {R"("registry": {"offline_timeout_ms": 10})", "config: registry.offline_timeout_ms: must be at least 1000, got 10"},
      {R"("registry": {"sweep_interval_ms": 5})", "config: registry.sweep_interval_ms: must be at least 100, got 5"},
      {R"("consumer": {"poll_interval_ms": 1})", "config: consumer.poll_interval_ms: must be at least 10, got 1"},
      {R"("retention": {"interval_ms": 1})", "config: retention.interval_ms: must be at least 100, got 1"},
      {R"("api": {"max_body_bytes": 9223372036854775807})", "config: api.max_body_bytes: must be at most 67108864, got 9223372036854775807"},
      {R"("api": {"allowed_hosts": "localhost"})", "config: api.allowed_hosts: expected an array of strings, got a string"},
      {R"("api": {"allowed_hosts": ["localhost", ""]})", "config: api.allowed_hosts[1]: must not be empty"},
      {R"("api": {"allowed_hosts": [7]})", "config: api.allowed_hosts[0]: expected a string, got an integer"},
  };
  for (const Case& c : cases) EXPECT_EQ(ParseError(WithTopics(c.json)), c.message) << c.json;
  const std::string steps = R"("steps": [{"name": "a", "type": "demo"}])";
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"max_processing_time_ms": 1, )" + steps + "}}}"),
            "config: topics.T.max_processing_time_ms: must be at least 100, got 1");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"claim_timeout_ms": 1, )" + steps + "}}}"),
            "config: topics.T.claim_timeout_ms: must be at least 100, got 1");
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"batch_limit": 2000000000, )" + steps + "}}}"),
            "config: topics.T.batch_limit: must be at most 10000, got 2000000000");
  // The environment and flags (Validate) meet the same bounds.
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_DISPATCHER_LEASE_TTL_MS", "1"}}),
            "config: DSYNC_DISPATCHER_LEASE_TTL_MS: must be at least 1000, got 1");
  Settings s = ParseSettings(WithTopics(""), {});
  s.api.max_body_bytes = int64_t{1} << 40;
  EXPECT_EQ(ValidateError(s), "config: api.max_body_bytes: must be at most 67108864, got 1099511627776");
  // The bounds themselves are accepted.
  EXPECT_NO_THROW(ParseSettings(WithTopics(R"("dispatcher": {"lease_ttl_ms": 1000, "batch_size": 10000},
      "registry": {"heartbeat_interval_ms": 500, "offline_timeout_ms": 1000, "sweep_interval_ms": 100},
      "api": {"max_body_bytes": 67108864, "allowed_hosts": ["*"]})"), {}).Validate());
}

TEST(SettingsTest, AllowedHostsFromFileAndEnvironment) {
  EXPECT_TRUE(ParseSettings(WithTopics(""), {}).api.allowed_hosts.empty());
  EXPECT_EQ(ParseSettings(WithTopics(R"("api": {"allowed_hosts": ["dsync.internal", "*"]})"), {}).api.allowed_hosts,
            (std::vector<std::string>{"dsync.internal", "*"}));
  EXPECT_EQ(ParseSettings(WithTopics(""), {{"DSYNC_API_ALLOWED_HOSTS", " a.example ,b.example"}}).api.allowed_hosts,
            (std::vector<std::string>{"a.example", "b.example"}));
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_API_ALLOWED_HOSTS", "a,,b"}}),
            "config: DSYNC_API_ALLOWED_HOSTS[1]: must not be empty");
}

TEST(SettingsTest, TopicNamesChecked) {
  const std::string steps = R"({"steps": [{"name": "a", "type": "demo"}]})";
  EXPECT_NO_THROW(ParseSettings(R"({"topics": {"a.B-c_9": )" + steps + "}}", {}));
  EXPECT_NO_THROW(ParseSettings(R"({"topics": {")" + std::string(50, 'X') + "\": " + steps + "}}", {}));
  EXPECT_TRUE(Contains(ParseError(R"({"topics": {")" + std::string(51, 'X') + "\": " + steps + "}}"),
                       "topic name must be"));
  EXPECT_TRUE(Contains(ParseError(R"({"topics": {"": )" + steps + "}}"), "config: topics.: topic name"));
  EXPECT_TRUE(Contains(ParseError(R"({"topics": {"a b": )" + steps + "}}"), "config: topics.a b: topic"));
  // A newline in a key is escaped, so the message stays one line.
  EXPECT_TRUE(Contains(ParseError(R"({"topics": {"a\nb": )" + steps + "}}"), "topics.a\\x0ab"));
}

TEST(SettingsTest, BadStrategyRejected) {
  EXPECT_EQ(ParseError(R"({"topics": {"T": {"strategy": "random", "steps": [{"name": "a", "type": "demo"}]}}})"),
            "config: topics.T.strategy: expected one of "
            "least_load|weighted|least_connections|round_robin|consistent_hash, got 'random'");
  for (const char* strategy :
       {"least_load", "weighted", "least_connections", "round_robin", "consistent_hash"}) {
    Settings s = ParseSettings(std::string(R"({"topics": {"T": {"strategy": ")") + strategy +
                                   R"(", "steps": [{"name": "a", "type": "demo"}]}}})",
                               {});
    EXPECT_EQ(s.topics.at("T").strategy, strategy);
  }
}

TEST(SettingsTest, NonJsonRejectedOnOneLine) {
  std::string message = ParseError("{\"database\": \"mysql://u:hunter2@h/db\n");
  EXPECT_EQ(message.rfind("config: not valid JSON: ", 0), 0u) << message;
  EXPECT_FALSE(Contains(message, "hunter2")) << message;
  EXPECT_FALSE(Contains(message, "[json.exception")) << message;
  message = ParseError(R"({"database": "mysql://u:hunter2@h/db)");  // unterminated string
  EXPECT_TRUE(Contains(message, "missing closing quote")) << message;
  EXPECT_FALSE(Contains(message, "hunter2")) << message;
  EXPECT_EQ(ParseError("").rfind("config: not valid JSON: ", 0), 0u);
  EXPECT_EQ(ParseError("{\n\"a\": 1,\n}").rfind("config: not valid JSON: ", 0), 0u);
}

TEST(SettingsTest, SecretsNeverEchoed) {
  std::string message = ParseError(WithTopics(R"("database": ["mysql://u:hunter2@h/db"])"));
  EXPECT_EQ(message, "config: database: expected a string, got an array");
  message = ParseError(WithTopics(R"("datasources": {"env_a": ""})"));
  EXPECT_EQ(message, "config: datasources.env_a: must not be empty");
}

TEST(SettingsTest, EnvironmentOverridesBeatTheFile) {
  const std::string file = WithTopics(
      R"("service": "from-file", "registry": {"heartbeat_interval_ms": 2000},
         "database": "mysql://a:b@file/db", "api": {"token": "file-token"})");
  Settings s = ParseSettings(file, {{"DSYNC_REGISTRY_HEARTBEAT_INTERVAL_MS", "1000"},
                                    {"DSYNC_SERVICE", "from-env"},
                                    {"DSYNC_DB_URL", "mysql://a:b@env/db"},
                                    {"DSYNC_API_TOKEN", "env-token"},
                                    {"DSYNC_TEST_DB_URL", "ignored"},
                                    {"DSYNC_SOMETHING_ELSE", "ignored"}});
  EXPECT_EQ(s.registry.heartbeat_interval, Millis(1000));
  EXPECT_EQ(s.service, "from-env");
  EXPECT_EQ(s.database, "mysql://a:b@env/db");
  EXPECT_EQ(s.api.token, "env-token");

  Settings unchanged = ParseSettings(file, {});
  EXPECT_EQ(unchanged.registry.heartbeat_interval, Millis(2000));
  EXPECT_EQ(unchanged.service, "from-file");
  EXPECT_EQ(unchanged.database, "mysql://a:b@file/db");
}

TEST(SettingsTest, BadEnvironmentValueNamesTheVariable) {
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_REGISTRY_HEARTBEAT_INTERVAL_MS", "abc"}}),
            "config: DSYNC_REGISTRY_HEARTBEAT_INTERVAL_MS: expected an integer, got 'abc'");
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_DISPATCHER_BATCH_SIZE", "10x"}}),
            "config: DSYNC_DISPATCHER_BATCH_SIZE: expected an integer, got '10x'");
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_CONSUMER_CAPACITY", ""}}),
            "config: DSYNC_CONSUMER_CAPACITY: expected an integer, got ''");
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_CONSUMER_CAPACITY", "0"}}),
            "config: DSYNC_CONSUMER_CAPACITY: must be at least 1, got 0");
  EXPECT_EQ(ParseError(WithTopics(""), {{"DSYNC_LOG_LEVEL", "loud"}}),
            "config: DSYNC_LOG_LEVEL: expected one of trace|debug|info|warn|error|off, got 'loud'");
  EXPECT_TRUE(Contains(ParseError(WithTopics(""), {{"DSYNC_API_MAX_BODY_BYTES", "99999999999999999999"}}),
                       "config: DSYNC_API_MAX_BODY_BYTES: expected an integer"));
}

TEST(SettingsTest, LoadWithoutFileUsesDefaultsAndEnvironment) {
  Settings s = LoadSettings("", {{"DSYNC_DB_URL", "mysql://u:p@h:3306/d"},
                                 {"DSYNC_CONSUMER_CAPACITY", "3"}});
  EXPECT_TRUE(s.topics.empty());
  EXPECT_EQ(s.database, "mysql://u:p@h:3306/d");
  EXPECT_EQ(s.consumer.capacity, 3);
  EXPECT_EQ(s.service, "kbs-sync");
  EXPECT_NO_THROW(s.Validate());
}

TEST(SettingsTest, UnreadableFileNamed) {
  try {
    LoadSettings("/nonexistent/dsync.json", {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "config: cannot read /nonexistent/dsync.json: No such file or directory");
  }
  try {
    LoadSettings(std::filesystem::temp_directory_path().string(), {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Contains(e.what(), "config: cannot read ")) << e.what();
  }
}

TEST(SettingsTest, ValidateHeartbeatAgainstOfflineTimeout) {
  Settings s;
  s.registry.offline_timeout = Millis(30000);
  s.registry.heartbeat_interval = Millis(15000);  // exactly half: accepted
  EXPECT_NO_THROW(s.Validate());
  s.registry.heartbeat_interval = Millis(15001);
  EXPECT_EQ(ValidateError(s),
            "config: registry.heartbeat_interval_ms (15001) must be at most half of "
            "registry.offline_timeout_ms (30000)");
  s.registry.heartbeat_interval = Millis(20000);
  EXPECT_EQ(ValidateError(s),
            "config: registry.heartbeat_interval_ms (20000) must be at most half of "
            "registry.offline_timeout_ms (30000)");
}

TEST(SettingsTest, ValidateOtherCrossFieldRules) {
  Settings s;
  s.dispatcher.poll_interval = Millis(2000);
  EXPECT_EQ(ValidateError(s),
            "config: dispatcher.poll_interval_ms (2000) must be at most "
            "dispatcher.idle_interval_ms (1000)");
  s = Settings();
  s.dispatcher.busy_interval = Millis(201);
  EXPECT_EQ(ValidateError(s),
            "config: dispatcher.busy_interval_ms (201) must be at most "
            "dispatcher.poll_interval_ms (200)");
  s.dispatcher.busy_interval = Millis(200);
  EXPECT_NO_THROW(s.Validate());
  s = Settings();
  s.registry.purge_after = Millis(30000);
  EXPECT_EQ(ValidateError(s),
            "config: registry.offline_timeout_ms (30000) must be less than "
            "registry.purge_after_ms (30000)");
  s = Settings();
  s.topics["T"].backoff_base = Millis(5000);
  s.topics["T"].backoff_max = Millis(4000);
  EXPECT_EQ(ValidateError(s),
            "config: topics.T.backoff_base_ms (5000) must be at most topics.T.backoff_max_ms (4000)");
  // Values set after parsing (by flags) are checked against the same limits.
  s = Settings();
  s.consumer.capacity = 0;
  EXPECT_EQ(ValidateError(s), "config: consumer.capacity: must be at least 1, got 0");
  s = Settings();
  s.consumer.prefetch = -2;
  EXPECT_EQ(ValidateError(s), "config: consumer.prefetch: must be at least -1, got -2");
  s = Settings();
  s.log_level = "chatty";
  EXPECT_TRUE(Contains(ValidateError(s), "config: log_level: expected one of"));
}

TEST(SettingsTest, PrefetchAcceptsMinusOneAndUp) {
  Settings s = ParseSettings(WithTopics(R"("consumer": {"capacity": 4, "prefetch": 2})"), {});
  EXPECT_EQ(s.consumer.prefetch, 2);
  EXPECT_TRUE(Contains(ParseError(WithTopics(R"("consumer": {"prefetch": -2})"), {}),
                       "config: consumer.prefetch: must be at least -1, got -2"));
}

TEST(SettingsTest, ValidateWakeupListen) {
  Settings s;
  s.dispatcher.wakeup_listen = "127.0.0.1:0";  // any free port
  s.consumer.wakeup_listen = "";               // the node address
  EXPECT_NO_THROW(s.Validate());
  s.dispatcher.wakeup_listen = "nocolon";
  EXPECT_EQ(ValidateError(s), "config: dispatcher.wakeup_listen: expected HOST:PORT with a port from 0 to "
                              "65535, got 'nocolon'");
  s.dispatcher.wakeup_listen = "127.0.0.1:0";
  s.consumer.wakeup_listen = "host:0";
  EXPECT_EQ(ValidateError(s), "config: consumer.wakeup_listen: expected HOST:PORT with a port from 1 to "
                              "65535, got 'host:0'");
}

TEST(SettingsTest, ValidateApiListen) {
  for (const char* good : {"127.0.0.1:8080", "0.0.0.0:1", "localhost:65535", "[::1]:8080"}) {
    Settings s;
    s.api.listen = good;
    EXPECT_NO_THROW(s.Validate()) << good;
  }
  for (const char* bad : {"8080", ":8080", "host:", "host:0", "host:65536", "host:80x", "host:-1"}) {
    Settings s;
    s.api.listen = bad;
    EXPECT_EQ(ValidateError(s), std::string("config: api.listen: expected HOST:PORT with a port "
                                            "from 1 to 65535, got '") + bad + "'");
  }
}

// How the tests read each environment-overridable key back, and a valid non-default
// value to set it to. Must cover exactly the keys AllSettingKeys gives an env name.
struct EnvProbe {
  std::string sample;
  std::function<std::string(const Settings&)> read;
};

std::map<std::string, EnvProbe> EnvProbes() {
  auto ms = [](Millis m) { return std::to_string(m.count()); };
  return {
      {"database", {"mysql://u:p@h:1/d", [](const Settings& s) { return s.database; }}},
      {"service", {"other-svc", [](const Settings& s) { return s.service; }}},
      {"log_level", {"debug", [](const Settings& s) { return s.log_level; }}},
      {"registry.heartbeat_interval_ms", {"1234", [=](const Settings& s) { return ms(s.registry.heartbeat_interval); }}},
      {"registry.offline_timeout_ms", {"4321", [=](const Settings& s) { return ms(s.registry.offline_timeout); }}},
      {"registry.sweep_interval_ms", {"777", [=](const Settings& s) { return ms(s.registry.sweep_interval); }}},
      {"registry.purge_after_ms", {"86400000", [=](const Settings& s) { return ms(s.registry.purge_after); }}},
      {"dispatcher.poll_interval_ms", {"50", [=](const Settings& s) { return ms(s.dispatcher.poll_interval); }}},
      {"dispatcher.idle_interval_ms", {"5000", [=](const Settings& s) { return ms(s.dispatcher.idle_interval); }}},
      {"dispatcher.busy_interval_ms", {"5", [=](const Settings& s) { return ms(s.dispatcher.busy_interval); }}},
      {"dispatcher.lease_ttl_ms", {"3000", [=](const Settings& s) { return ms(s.dispatcher.lease_ttl); }}},
      {"dispatcher.batch_size", {"42", [](const Settings& s) { return std::to_string(s.dispatcher.batch_size); }}},
      {"dispatcher.wakeups", {"false", [](const Settings& s) { return s.dispatcher.wakeups ? "true" : "false"; }}},
      {"dispatcher.wakeup_listen", {"127.0.0.1:7500", [](const Settings& s) { return s.dispatcher.wakeup_listen; }}},
      {"dispatcher.batch_check_interval_ms", {"250", [=](const Settings& s) { return ms(s.dispatcher.batch_check_interval); }}},
      {"retention.enabled", {"false", [](const Settings& s) { return s.retention.enabled ? "true" : "false"; }}},
      {"retention.finished_after_ms", {"3600000", [=](const Settings& s) { return ms(s.retention.finished_after); }}},
      {"retention.failed_after_ms", {"7200000", [=](const Settings& s) { return ms(s.retention.failed_after); }}},
      {"retention.verify_results_after_ms",
       {"5400000", [=](const Settings& s) { return ms(s.retention.verify_results_after); }}},
      {"retention.archive", {"true", [](const Settings& s) { return s.retention.archive ? "true" : "false"; }}},
      {"retention.batch_size", {"100", [](const Settings& s) { return std::to_string(s.retention.batch_size); }}},
      {"retention.interval_ms", {"5000", [=](const Settings& s) { return ms(s.retention.interval); }}},
      {"retention.batch_pause_ms", {"5", [=](const Settings& s) { return ms(s.retention.batch_pause); }}},
      {"retention.busy_pause_ms", {"500", [=](const Settings& s) { return ms(s.retention.busy_pause); }}},
      {"consumer.poll_interval_ms", {"99", [=](const Settings& s) { return ms(s.consumer.poll_interval); }}},
      {"consumer.drain_timeout_ms", {"1500", [=](const Settings& s) { return ms(s.consumer.drain_timeout); }}},
      {"consumer.capacity", {"16", [](const Settings& s) { return std::to_string(s.consumer.capacity); }}},
      {"consumer.prefetch", {"0", [](const Settings& s) { return std::to_string(s.consumer.prefetch); }}},
      {"consumer.wakeups", {"false", [](const Settings& s) { return s.consumer.wakeups ? "true" : "false"; }}},
      {"consumer.wakeup_listen", {"127.0.0.1:7400", [](const Settings& s) { return s.consumer.wakeup_listen; }}},
      {"relay.window_bytes", {"8388608", [](const Settings& s) { return std::to_string(s.relay.window_bytes); }}},
      {"relay.poll_interval_ms", {"50", [](const Settings& s) { return std::to_string(s.relay.poll_interval.count()); }}},
      {"relay.verify_wait_ms", {"5000", [](const Settings& s) { return std::to_string(s.relay.verify_wait.count()); }}},
      {"bundle.key", {"bundle-s3cret", [](const Settings& s) { return s.bundle.key; }}},
      {"fairness.enabled", {"false", [](const Settings& s) { return s.fairness.enabled ? "true" : "false"; }}},
      {"api.listen", {"0.0.0.0:9090", [](const Settings& s) { return s.api.listen; }}},
      {"api.token", {"s3cret", [](const Settings& s) { return s.api.token; }}},
      {"api.max_body_bytes", {"4096", [](const Settings& s) { return std::to_string(s.api.max_body_bytes); }}},
      {"api.allowed_hosts", {"a.example,b.example", [](const Settings& s) {
         std::string joined;
         for (const auto& h : s.api.allowed_hosts) joined += (joined.empty() ? "" : ",") + h;
         return joined;
       }}},
  };
}

TEST(SettingsTest, EveryEnvKeyRoundTripsAndMatchesItsDefault) {
  const auto probes = EnvProbes();
  std::set<std::string> covered;
  const Settings defaults;
  for (const SettingKey& key : AllSettingKeys()) {
    if (key.env.empty()) continue;
    SCOPED_TRACE(key.path);
    auto probe = probes.find(key.path);
    ASSERT_NE(probe, probes.end()) << "no probe for " << key.path;
    covered.insert(key.path);

    // The documented default is the struct's default.
    if (!key.default_value.empty()) {
      auto parsed = nlohmann::json::parse(key.default_value);
      std::string expected = parsed.is_string() ? parsed.get<std::string>() : parsed.dump();
      if (parsed.is_array()) {  // lists read back comma-joined, as their variable is written
        expected.clear();
        for (const auto& item : parsed) expected += (expected.empty() ? "" : ",") + item.get<std::string>();
      }
      EXPECT_EQ(probe->second.read(defaults), expected);
    }
    // The variable overrides the file and the default.
    Settings s = ParseSettings(WithTopics(""), {{key.env, probe->second.sample}});
    EXPECT_EQ(probe->second.read(s), probe->second.sample);
    EXPECT_NE(probe->second.read(defaults), probe->second.sample);
    // A value of the wrong type is reported under the variable's name (strings and
    // lists of strings take anything).
    if (key.default_value.empty() || (key.default_value[0] != '"' && key.default_value[0] != '[')) {
      if (key.path != "database") {
        std::string message = ParseError(WithTopics(""), {{key.env, "not-a-number"}});
        EXPECT_EQ(message.rfind("config: " + key.env + ": ", 0), 0u) << message;
      }
    }
  }
  EXPECT_EQ(covered.size(), probes.size());
}

TEST(SettingsTest, AllSettingKeysFollowTheNamingRules) {
  std::set<std::string> paths;
  for (const SettingKey& key : AllSettingKeys()) {
    EXPECT_TRUE(paths.insert(key.path).second) << "duplicate " << key.path;
    EXPECT_FALSE(key.doc.empty()) << key.path;
    if (!key.default_value.empty()) {
      EXPECT_TRUE(nlohmann::json::accept(key.default_value)) << key.path;
    }
    if (key.path.rfind("topics", 0) == 0 || key.path.rfind("datasources", 0) == 0 || key.path == "fairness.weights" ||
        key.path == "schedules" || key.path == "captures") {
      EXPECT_EQ(key.env, "") << key.path;
      continue;
    }
    if (key.path == "database") {
      EXPECT_EQ(key.env, "DSYNC_DB_URL");
      continue;
    }
    std::string expected = "DSYNC_";
    for (char c : key.path) expected += c == '.' ? '_' : static_cast<char>(std::toupper(c));
    EXPECT_EQ(key.env, expected) << key.path;
  }
  for (const char* path :
       {"registry.sweep_interval_ms", "registry.purge_after_ms", "consumer.capacity", "log_level",
        "topics", "topics.<name>.max_retry", "topics.<name>.priority", "topics.<name>.steps",
        "topics.<name>.steps[].name", "topics.<name>.steps[].timeout_ms"}) {
    EXPECT_TRUE(paths.count(path)) << path;
  }
}

TEST(SettingsTest, EnvironmentReadsTheProcessEnvironment) {
  ::setenv("DSYNC_SETTINGS_TEST_PROBE", "a=b", 1);
  EnvMap env = Environment();
  ::unsetenv("DSYNC_SETTINGS_TEST_PROBE");
  ASSERT_TRUE(env.count("DSYNC_SETTINGS_TEST_PROBE"));
  EXPECT_EQ(env.at("DSYNC_SETTINGS_TEST_PROBE"), "a=b");
}

}  // namespace
}  // namespace dsync
