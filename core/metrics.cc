#include "core/metrics.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace dsync::metrics {
namespace {

bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

void RequireName(std::string_view name) {
  if (!ValidName(name)) throw std::invalid_argument("invalid metric or label name '" + std::string(name) + "'");
}

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
size_t Utf8Length(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size()) return 0;
  uint32_t cp = len == 1 ? c : c & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

const std::vector<double>& DefaultSecondsBuckets() {
  static const std::vector<double> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                               0.25,  0.5,    1,     2.5,  5,     10};
  return kBuckets;
}

void HistogramSnapshot::Add(const HistogramSnapshot& other) {
  if (other.bounds != bounds || other.counts.size() != counts.size()) {
    throw std::invalid_argument("histogram snapshots with different buckets");
  }
  for (size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
  count += other.count;
  sum += other.sum;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (!std::isfinite(bounds_[i]) || (i > 0 && bounds_[i] <= bounds_[i - 1])) {
      throw std::invalid_argument("histogram bounds must be finite and ascending");
    }
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  if (std::isnan(value)) return;
  // Buckets are few (13 by default): a linear scan beats a binary search here.
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

HistogramSnapshot Histogram::snapshot() const {
  HistogramSnapshot s;
  s.bounds = bounds_;
  s.counts.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    s.counts[i] = counts_[i].load(std::memory_order_relaxed);
    s.count += s.counts[i];
  }
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

LabeledCounter::LabeledCounter(std::vector<std::string> label_names) : names_(std::move(label_names)) {
  for (const auto& n : names_) RequireName(n);
}

void LabeledCounter::Increment(const std::vector<std::string>& values, uint64_t by) {
  if (values.size() != names_.size()) throw std::invalid_argument("label values do not match the label names");
  std::lock_guard lock(mu_);
  counts_[values] += by;
}

uint64_t LabeledCounter::Get(const std::vector<std::string>& values) const {
  std::lock_guard lock(mu_);
  auto it = counts_.find(values);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::pair<Labels, uint64_t>> LabeledCounter::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<std::pair<Labels, uint64_t>> out;
  out.reserve(counts_.size());
  for (const auto& [values, n] : counts_) {
    Labels labels;
    for (size_t i = 0; i < names_.size(); ++i) labels.emplace_back(names_[i], values[i]);
    out.emplace_back(std::move(labels), n);
  }
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size();) {
    const size_t len = Utf8Length(value, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD for a byte that starts no valid sequence
      ++i;
      continue;
    }
    if (len == 1) {
      const char c = value[i];
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    } else {
      out.append(value.substr(i, len));
    }
    i += len;
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  // Shortest text that reads back as the same double ("0.001", not 0.00100000000000000002).
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string("NaN");
}

void TextWriter::Family(std::string_view name, std::string_view help, Type type) {
  RequireName(name);
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  out_ += EscapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += type == Type::kCounter ? " counter\n" : type == Type::kGauge ? " gauge\n" : " histogram\n";
}

void TextWriter::WriteLabels(const Labels& labels, std::string_view le) {
  if (labels.empty() && le.empty()) return;
  out_ += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    RequireName(name);
    if (!first) out_ += ',';
    first = false;
    out_ += name;
    out_ += "=\"";
    out_ += EscapeLabelValue(value);
    out_ += '"';
  }
  if (!le.empty()) {
    if (!first) out_ += ',';
    out_ += "le=\"";
    out_ += le;
    out_ += '"';
  }
  out_ += '}';
}

void TextWriter::Sample(std::string_view name, const Labels& labels, double value) {
  RequireName(name);
  out_ += name;
  WriteLabels(labels, {});
  out_ += ' ';
  out_ += FormatValue(value);
  out_ += '\n';
}

void TextWriter::Histogram(std::string_view name, const Labels& labels, const HistogramSnapshot& h) {
  RequireName(name);
  const std::string base(name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const std::string le = i < h.bounds.size() ? FormatValue(h.bounds[i]) : "+Inf";
    out_ += base + "_bucket";
    WriteLabels(labels, le);
    out_ += ' ' + FormatValue(static_cast<double>(cumulative)) + '\n';
  }
  out_ += base + "_sum";
  WriteLabels(labels, {});
  out_ += ' ' + FormatValue(h.sum) + '\n';
  out_ += base + "_count";
  WriteLabels(labels, {});
  out_ += ' ' + FormatValue(static_cast<double>(cumulative)) + '\n';
}

void TextWriter::SharedSample(std::string_view family, std::string_view help, Type type, const Labels& labels,
                              double value) {
  RequireName(family);
  shared_.push_back({std::string(family), std::string(help), type, labels, value});
}

void Registry::Add(Writer writer) { writers_.push_back(std::move(writer)); }

void Registry::WriteTo(TextWriter& out) const {
  std::vector<TextWriter> parts(writers_.size());
  std::map<std::string, size_t> last;  // shared family -> index of the last writer adding to it
  for (size_t i = 0; i < writers_.size(); ++i) {
    writers_[i](parts[i]);
    for (const auto& s : parts[i].shared_) last[s.family] = i;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    out.out_ += parts[i].out_;
    for (const auto& [family, at] : last) {
      if (at != i) continue;
      bool first = true;
      for (const auto& part : parts) {
        for (const auto& s : part.shared_) {
          if (s.family != family) continue;
          if (first) out.Family(s.family, s.help, s.type);
          first = false;
          out.Sample(s.family, s.labels, s.value);
        }
      }
    }
  }
}

}  // namespace dsync::metrics
