// core/metrics: histogram bucketing, concurrent updates, labelled counters and the
// Prometheus text writer (format, escaping, hostile label values).
#include <chrono>
#include <cmath>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/metrics.h"

namespace dsync::metrics {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// One sample line of the text format: name, optional {label="value",...}, a value.
const std::regex& SampleLine() {
  static const std::regex re(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\[\\"n])*")*\})? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$)");
  return re;
}

TEST(HistogramTest, BucketsAreInclusiveUpperBoundsAndOverflowGoesToInf) {
  Histogram h({0.1, 1, 10});
  h.Observe(0.05);
  h.Observe(0.1);   // on the bound: le="0.1"
  h.Observe(0.5);
  h.Observe(10.0);
  h.Observe(11.0);  // above every bound: +Inf only
  h.Observe(std::nan(""));  // ignored
  HistogramSnapshot s = h.snapshot();
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{2, 1, 1, 1}));
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 0.05 + 0.1 + 0.5 + 10.0 + 11.0);
}

TEST(HistogramTest, DurationsAreSecondsAndNegativeDurationsCountAsZero) {
  Histogram h;  // default seconds buckets
  h.Observe(1500us);
  h.Observe(-3ms);
  h.Observe(2s);
  HistogramSnapshot s = h.snapshot();
  EXPECT_EQ(s.bounds, DefaultSecondsBuckets());
  EXPECT_EQ(s.counts[0], 1u);  // the clamped -3 ms: le 0.001
  EXPECT_EQ(s.counts[1], 1u);  // 1.5 ms: le 0.0025
  EXPECT_EQ(s.counts[10], 1u);  // 2 s: le 2.5
  EXPECT_NEAR(s.sum, 2.0015, 1e-9);
}

TEST(HistogramTest, RejectsUnorderedBounds) {
  EXPECT_THROW(Histogram({1, 0.5}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, 1}), std::invalid_argument);
  EXPECT_THROW(Histogram({1, std::numeric_limits<double>::infinity()}), std::invalid_argument);
}

TEST(HistogramTest, ConcurrentObservationsAreAllCounted) {
  Histogram h({1, 2});
  constexpr int kThreads = 4, kEach = 50000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < kEach; ++i) h.Observe(static_cast<double>(t % 3));  // 0, 1, 2, 0
    });
  }
  for (auto& t : threads) t.join();
  HistogramSnapshot s = h.snapshot();
  EXPECT_EQ(s.count, static_cast<uint64_t>(kThreads * kEach));
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{3u * kEach, 1u * kEach, 0}))
      << "0 and 1 land in le=1 (threads 0, 1, 3), 2 in le=2 (thread 2)";
  EXPECT_DOUBLE_EQ(s.sum, (0 + 1 + 2 + 0) * static_cast<double>(kEach));
}

TEST(HistogramTest, SnapshotsMergeOnlyWithTheSameBuckets) {
  Histogram a({1}), b({1}), c({2});
  a.Observe(0.5);
  b.Observe(3);
  HistogramSnapshot s = a.snapshot();
  s.Add(b.snapshot());
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(s.count, 2u);
  EXPECT_THROW(s.Add(c.snapshot()), std::invalid_argument);
}

TEST(LabeledCounterTest, CountsPerTupleInValueOrder) {
  LabeledCounter c({"route", "code"});
  c.Increment({"/v1/events", "201"});
  c.Increment({"/v1/events", "201"}, 2);
  c.Increment({"/healthz", "200"});
  EXPECT_EQ(c.Get({"/v1/events", "201"}), 3u);
  EXPECT_EQ(c.Get({"/v1/events", "400"}), 0u);
  auto snap = c.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].first, (Labels{{"route", "/healthz"}, {"code", "200"}}));
  EXPECT_EQ(snap[1].second, 3u);
  EXPECT_THROW(c.Increment({"only-one"}), std::invalid_argument);
  EXPECT_THROW(LabeledCounter({"bad-name"}), std::invalid_argument);
}

TEST(TextWriterTest, WritesFamiliesSamplesAndCumulativeHistograms) {
  Histogram h({0.01, 0.1});
  h.Observe(0.005);
  h.Observe(0.05);
  h.Observe(0.05);
  h.Observe(3);
  TextWriter w;
  w.Family("dsync_events", "Events by topic and status.", Type::kGauge);
  w.Sample("dsync_events", {{"topic", "T"}, {"status", "PENDING"}}, 12);
  w.Family("dsync_up", "Up.", Type::kGauge);
  w.Sample("dsync_up", {}, 1);
  w.Family("dsync_claim_latency_seconds", "Claim latency.", Type::kHistogram);
  w.Histogram("dsync_claim_latency_seconds", {{"node", "a"}}, h.snapshot());
  EXPECT_EQ(w.str(),
            "# HELP dsync_events Events by topic and status.\n"
            "# TYPE dsync_events gauge\n"
            "dsync_events{topic=\"T\",status=\"PENDING\"} 12\n"
            "# HELP dsync_up Up.\n"
            "# TYPE dsync_up gauge\n"
            "dsync_up 1\n"
            "# HELP dsync_claim_latency_seconds Claim latency.\n"
            "# TYPE dsync_claim_latency_seconds histogram\n"
            "dsync_claim_latency_seconds_bucket{node=\"a\",le=\"0.01\"} 1\n"
            "dsync_claim_latency_seconds_bucket{node=\"a\",le=\"0.1\"} 3\n"
            "dsync_claim_latency_seconds_bucket{node=\"a\",le=\"+Inf\"} 4\n"
            "dsync_claim_latency_seconds_sum{node=\"a\"} 3.105\n"
            "dsync_claim_latency_seconds_count{node=\"a\"} 4\n");
}

TEST(TextWriterTest, FormatsValues) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(-7), "-7");
  EXPECT_EQ(FormatValue(0.001), "0.001");
  EXPECT_EQ(FormatValue(2.5), "2.5");
  EXPECT_EQ(FormatValue(123456789012.0), "123456789012");
  EXPECT_EQ(FormatValue(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(FormatValue(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(FormatValue(std::nan("")), "NaN");
}

TEST(TextWriterTest, EscapesHostileLabelValuesIntoOneParsableLine) {
  const std::string hostile[] = {
      "quote\"d",
      "back\\slash",
      "new\nline",
      "'; DROP TABLE distribute_event; --",
      std::string("nul\0byte", 8),
      "emoji \xF0\x9F\x98\x80",
      "bad utf8 \xC3\x28 and \xFF",
      std::string(10000, 'x'),
  };
  TextWriter w;
  w.Family("dsync_events", "help with \\ and\nnewline", Type::kGauge);
  for (const auto& v : hostile) w.Sample("dsync_events", {{"topic", v}}, 1);
  auto lines = Lines(w.str());
  ASSERT_EQ(lines.size(), 2u + std::size(hostile));
  EXPECT_EQ(lines[0], "# HELP dsync_events help with \\\\ and\\nnewline");
  for (size_t i = 2; i < lines.size(); ++i) {
    EXPECT_TRUE(std::regex_match(lines[i], SampleLine())) << lines[i].substr(0, 200);
  }
  EXPECT_EQ(EscapeLabelValue("quote\"d"), "quote\\\"d");
  EXPECT_EQ(EscapeLabelValue("back\\slash"), "back\\\\slash");
  EXPECT_EQ(EscapeLabelValue("new\nline"), "new\\nline");
  EXPECT_EQ(EscapeLabelValue("emoji \xF0\x9F\x98\x80"), "emoji \xF0\x9F\x98\x80");
  EXPECT_EQ(EscapeLabelValue("bad \xC3\x28 \xFF"), "bad \xEF\xBF\xBD( \xEF\xBF\xBD");
  EXPECT_EQ(EscapeLabelValue("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD")
      << "a UTF-16 surrogate encoded in UTF-8 is not valid UTF-8";
}

TEST(TextWriterTest, RejectsInvalidMetricAndLabelNames) {
  TextWriter w;
  EXPECT_THROW(w.Family("1abc", "x", Type::kGauge), std::invalid_argument);
  EXPECT_THROW(w.Sample("dsync-x", {}, 1), std::invalid_argument);
  EXPECT_THROW(w.Sample("dsync_x", {{"a b", "v"}}, 1), std::invalid_argument);
}

TEST(RegistryTest, WritersInOrderAndASharedFamilyOnceAfterItsLastWriter) {
  Registry r;
  r.Add([](TextWriter& w) {
    w.Family("a_total", "A.", Type::kCounter);
    w.Sample("a_total", {}, 1);
    w.SharedSample("resets_total", "Resets.", Type::kCounter, {{"reason", "x"}}, 2);
  });
  r.Add([](TextWriter& w) {
    w.SharedSample("resets_total", "Resets.", Type::kCounter, {{"reason", "y"}}, 3);
    w.Family("b", "B.", Type::kGauge);
    w.Sample("b", {}, 4);
  });
  r.Add([](TextWriter& w) {
    w.Family("c", "C.", Type::kGauge);
    w.Sample("c", {}, 5);
  });
  TextWriter out;
  out.Family("first", "Before the registry.", Type::kGauge);
  out.Sample("first", {}, 0);
  r.WriteTo(out);
  EXPECT_EQ(out.str(),
            "# HELP first Before the registry.\n# TYPE first gauge\nfirst 0\n"
            "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
            "# HELP b B.\n# TYPE b gauge\nb 4\n"
            "# HELP resets_total Resets.\n# TYPE resets_total counter\n"
            "resets_total{reason=\"x\"} 2\nresets_total{reason=\"y\"} 3\n"
            "# HELP c C.\n# TYPE c gauge\nc 5\n");

  // No writer adding to it: no family at all; an empty registry writes nothing.
  Registry none;
  none.Add([](TextWriter& w) { w.Family("c", "C.", Type::kGauge); });
  TextWriter o2;
  none.WriteTo(o2);
  EXPECT_EQ(o2.str(), "# HELP c C.\n# TYPE c gauge\n");
  TextWriter o3;
  Registry().WriteTo(o3);
  EXPECT_EQ(o3.str(), "");
  EXPECT_THROW(TextWriter().SharedSample("bad-name", "x", Type::kCounter, {}, 1), std::invalid_argument);
}

}  // namespace
}  // namespace dsync::metrics
