// examples/space_sync.json (README.md "Custom steps") loads and its plan builds with the
// built-in step types: table_sync, then http, then exec, each with its compensation.
// Also the child-process runner's helpers (core/child_process.h) and Retry-After parsing
// (core/http_client.h), which need neither a database nor a peer.
#include <filesystem>

#include <gtest/gtest.h>

#include "config/settings.h"
#include "core/child_process.h"
#include "core/http_client.h"
#include "saga/saga_engine.h"
#include "saga/step_handler.h"
#include "saga/step_type_stats.h"

namespace dsync {
namespace {

TEST(StepExamples, SpaceSyncConfigLoadsAndItsPlanBuilds) {
  auto path = std::filesystem::path(__FILE__).parent_path() / "../../examples/space_sync.json";
  Settings s = LoadSettings(path.string(), {});
  ASSERT_EQ(s.topics.count("SPACE_SYNC"), 1u);
  const TopicSettings& t = s.topics.at("SPACE_SYNC");
  ASSERT_EQ(t.steps.size(), 3u);
  EXPECT_EQ(t.steps[0].type, "table_sync");
  EXPECT_EQ(t.steps[1].type, "http");
  EXPECT_EQ(t.steps[2].type, "exec");
  EXPECT_NO_THROW(saga::Plans(s.topics, saga::StepRegistry::WithBuiltins(s.topics)));
}

TEST(ChildProcessText, LastLinesKeepsTheTailOnOneLine) {
  EXPECT_EQ(LastLines("a\nb\n\nc\r\nd\n", 3), "b | c | d");
  EXPECT_EQ(LastLines("only", 5), "only");
  EXPECT_EQ(LastLines("", 5), "");
  EXPECT_EQ(LastLines("x\ty\n", 1), "x y");
}

TEST(HttpUrls, ParseAndRefuse) {
  std::string why;
  auto u = ParseHttpUrl("https://Svc.local:8443/a/b?c=d#frag", why);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->scheme, "https");
  EXPECT_EQ(u->host, "Svc.local");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(u->target, "/a/b?c=d");
  u = ParseHttpUrl("http://[::1]/", why);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 80);
  EXPECT_FALSE(ParseHttpUrl("file:///etc/passwd", why));
  EXPECT_EQ(why, "has scheme 'file': only http and https are allowed");
  EXPECT_FALSE(ParseHttpUrl("http://x:99999/", why));
  EXPECT_EQ(why, "has a bad port '99999'");
  EXPECT_FALSE(ParseHttpUrl("http://x/a b", why));
  EXPECT_FALSE(ParseHttpUrl("http:///nohost", why));
  EXPECT_EQ(why, "has no host");
}

TEST(HttpRetryAfter, SecondsAndDates) {
  EXPECT_EQ(ParseRetryAfter("120"), std::chrono::milliseconds(120000));
  EXPECT_EQ(ParseRetryAfter(" 0 "), std::chrono::milliseconds(0));
  EXPECT_EQ(ParseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"), std::chrono::milliseconds(0));  // in the past
  EXPECT_FALSE(ParseRetryAfter("soon"));
  EXPECT_FALSE(ParseRetryAfter(""));
}

TEST(StepTypeMetrics, CallsByTypeActionAndOutcomeWithDurations) {
  saga::StepTypeStats stats;
  stats.Observe("http", "execute", "ok", std::chrono::milliseconds(3));
  stats.Observe("http", "execute", "ok", std::chrono::milliseconds(5));
  stats.Observe("http", "execute", "timeout", std::chrono::milliseconds(2000));
  stats.Observe("exec", "compensate", "permanent", std::chrono::milliseconds(20));
  EXPECT_EQ(stats.Calls("http", "execute", "ok"), 2u);
  EXPECT_EQ(stats.Calls("http", "execute", "timeout"), 1u);
  EXPECT_EQ(stats.Calls("http", "execute", "transient"), 0u);
  metrics::TextWriter w;
  stats.Write(w);
  const std::string& text = w.str();
  EXPECT_NE(text.find("# TYPE dsync_step_calls_total counter"), std::string::npos) << text;
  EXPECT_NE(text.find("dsync_step_calls_total{type=\"http\",action=\"execute\",outcome=\"ok\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("dsync_step_calls_total{type=\"exec\",action=\"compensate\",outcome=\"permanent\"} 1"), std::string::npos);
  EXPECT_NE(text.find("dsync_step_call_duration_seconds_count{type=\"http\",action=\"execute\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("dsync_step_call_duration_seconds_count{type=\"exec\",action=\"compensate\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace dsync
