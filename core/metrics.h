// Metrics primitives: a fixed-bucket latency histogram, a labelled counter, a writer
// for the Prometheus text exposition format (version 0.0.4), and a Registry of
// component writers. No globals: each component keeps its metrics in its stats struct
// and has a writer function beside it (`WriteMetrics(const XStats&, TextWriter&)`, as
// userver's DumpMetric); app/ registers the writers of the components a process runs,
// and /metrics (api::HttpServer) concatenates them.
//
//   metrics::Histogram latency;                       // seconds, 0.001 .. 10 (+Inf)
//   latency.Observe(std::chrono::microseconds(1800)); // one lock-free update
//
//   metrics::TextWriter w;
//   w.Family("dsync_claim_latency_seconds", "Assigned -> RUNNING.", metrics::Type::kHistogram);
//   w.Histogram("dsync_claim_latency_seconds", {}, latency.snapshot());
//   w.Family("dsync_events", "Events by topic and status.", metrics::Type::kGauge);
//   w.Sample("dsync_events", {{"topic", "SPACE_ADD"}, {"status", "PENDING"}}, 12);
//   std::string body = w.str();
//
//   metrics::Registry components;                     // filled once in app/
//   components.Add([&](metrics::TextWriter& w) { dispatcher::WriteMetrics(d.stats(), w); });
//   components.WriteTo(w);                            // each writer's families, in order
//
// Label values may be any bytes (topics come from the database, where a plain SQL
// producer may have written anything): the writer escapes \ " and newline as the
// format requires and replaces invalid UTF-8 by U+FFFD, so every line parses.
// Metric and label names are the caller's constants and must match
// [a-zA-Z_:][a-zA-Z0-9_:]* (checked: std::invalid_argument otherwise).
//
// Thread safety: Histogram and LabeledCounter are safe to update and snapshot from
// any thread (Histogram without locks: one relaxed atomic add per bucket, count and
// sum). A snapshot taken during updates may see an observation in the bucket but not
// yet in the sum; scrapers tolerate that. TextWriter is a plain value. A Registry is
// filled before it is shared; WriteTo may then run on any number of threads at once.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dsync::metrics {

// Upper bounds, in seconds, of the default latency buckets: 1 ms .. 10 s.
const std::vector<double>& DefaultSecondsBuckets();

struct HistogramSnapshot {
  std::vector<double> bounds;    // upper bounds, ascending (the +Inf bucket is implied)
  std::vector<uint64_t> counts;  // per bucket, NOT cumulative; size bounds.size() + 1 (last: > every bound)
  uint64_t count = 0;            // sum of counts
  double sum = 0;                // sum of observed values

  // Merges another snapshot with the same bounds (std::invalid_argument otherwise).
  void Add(const HistogramSnapshot& other);
};

class Histogram {
 public:
  // `bounds` ascending and finite (std::invalid_argument otherwise).
  explicit Histogram(std::vector<double> bounds = DefaultSecondsBuckets());
  Histogram(const Histogram&) = delete;
  Histogram& operator=(const Histogram&) = delete;

  void Observe(double value);
  // A duration in seconds; negative durations (clock skew) count as 0.
  template <class Rep, class Period>
  void Observe(std::chrono::duration<Rep, Period> d) {
    Observe(std::max(0.0, std::chrono::duration<double>(d).count()));
  }

  HistogramSnapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0};
};

using Labels = std::vector<std::pair<std::string, std::string>>;

// A counter per label-value tuple (e.g. HTTP requests by route and code), for label
// sets only known at run time. The label names are fixed at construction.
class LabeledCounter {
 public:
  explicit LabeledCounter(std::vector<std::string> label_names);
  // `values` in the order of the label names (std::invalid_argument on a size mismatch).
  void Increment(const std::vector<std::string>& values, uint64_t by = 1);
  uint64_t Get(const std::vector<std::string>& values) const;
  // Every tuple seen, as labels, with its count; ordered by the values.
  std::vector<std::pair<Labels, uint64_t>> snapshot() const;

 private:
  const std::vector<std::string> names_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, uint64_t> counts_;
};

enum class Type { kCounter, kGauge, kHistogram };

class TextWriter {
 public:
  // The family's `# HELP` and `# TYPE` lines. Call once per family, before its samples.
  void Family(std::string_view name, std::string_view help, Type type);
  // `name{labels} value`.
  void Sample(std::string_view name, const Labels& labels, double value);
  // `name_bucket{labels,le="..."}` cumulative per bound and +Inf, `name_sum`, `name_count`.
  void Histogram(std::string_view name, const Labels& labels, const HistogramSnapshot& h);

  // A sample of a family that several components write (e.g. event resets by reason,
  // counted by the dispatcher and by the consumer). Not written here: Registry::WriteTo
  // collects these from every writer and writes the family once, with every writer's
  // samples in order, right after the last writer that added one. Each writer passes
  // the same `help` and `type`.
  void SharedSample(std::string_view family, std::string_view help, Type type, const Labels& labels,
                    double value);

  const std::string& str() const { return out_; }

 private:
  friend class Registry;
  struct Shared {
    std::string family, help;
    Type type;
    Labels labels;
    double value;
  };
  void WriteLabels(const Labels& labels, std::string_view le);
  std::string out_;
  std::vector<Shared> shared_;
};

// The metric writers of the components one process runs, in the order /metrics shows
// them.
class Registry {
 public:
  using Writer = std::function<void(TextWriter&)>;
  // `writer` must stay callable (the component it reads alive) while the registry is used.
  void Add(Writer writer);
  // Runs every writer, appending their families to `out` in the order added, and the
  // shared families (TextWriter::SharedSample) after the last writer that added to each.
  void WriteTo(TextWriter& out) const;
  bool empty() const { return writers_.empty(); }

 private:
  std::vector<Writer> writers_;
};

// Exposed for tests.
std::string EscapeLabelValue(std::string_view value);
std::string FormatValue(double value);  // integers without exponent; +Inf, -Inf, NaN

}  // namespace dsync::metrics
