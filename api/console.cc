#include "api/console.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace dsync::api::console {

using nlohmann::json;

const Asset* FindAsset(std::string_view path) {
  std::string_view name;
  if (path == "/" || path == "/index.html") {
    name = "index.html";
  } else if (path.substr(0, 8) == "/assets/" && path.size() > 8) {
    name = path.substr(8);
    if (name == "index.html") return nullptr;  // one address for the page
  } else {
    return nullptr;
  }
  for (const Asset& a : EmbeddedAssets()) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

std::string ETag(const Asset& asset) {
  // FNV-1a over the bytes: a validator for caches, not a security property.
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : asset.text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"%016llx\"", static_cast<unsigned long long>(h));
  return buf;
}

ThroughputHistory::ThroughputHistory(Clock& clock, Millis min_spacing, Millis window)
    : clock_(clock), min_spacing_(min_spacing), window_(window) {}

void ThroughputHistory::Record(int64_t total, int64_t finished) {
  std::lock_guard lock(mu_);
  const Clock::TimePoint now = clock_.Now();
  while (!samples_.empty() && now - samples_.front().at > window_) samples_.pop_front();
  if (!samples_.empty() && now - samples_.back().at < min_spacing_) return;
  samples_.push_back({now, total, finished});
}

json ThroughputHistory::Series() {
  std::lock_guard lock(mu_);
  const Clock::TimePoint now = clock_.Now();
  json out = json::array();
  for (const Sample& s : samples_) {
    if (now - s.at > window_) continue;
    out.push_back({{"age_ms", std::chrono::duration_cast<Millis>(now - s.at).count()},
                   {"total", s.total},
                   {"finished", s.finished}});
  }
  return out;
}

json Overview(EventStore& store, ThroughputHistory& history, bool by_topic) {
  constexpr int kAttentionPerReason = 20;
  json counts = json::object();
  std::map<std::string, int64_t> totals;
  if (by_topic) {
    for (const auto& [topic, status, n] : store.CountByTopicStatus()) {
      counts[topic][status] = n;
      totals[status] += n;
    }
  } else {
    totals = store.CountByStatus();
  }
  int64_t total = 0, finished = 0;
  for (const auto& [status, n] : totals) {
    total += n;
    if (IsTerminal(status)) finished += n;
  }
  history.Record(total, finished);
  json attention = json::array();
  for (const auto& a : store.NeedingAttention(kAttentionPerReason)) attention.push_back(ToJson(a));
  json nodes = json::array();
  for (const auto& n : store.Nodes(false)) nodes.push_back(ToJson(n));
  Health h = store.CheckHealth();
  json out = {{"totals", totals},
          {"total", total},
          {"attention", std::move(attention)},
          {"attention_limit", kAttentionPerReason},
          {"nodes", std::move(nodes)},
          {"lease",
           {{"held", h.lease.held},
            {"owner", h.lease.owner.empty() ? json(nullptr) : json(h.lease.owner)},
            {"token", h.lease.token},
            {"expires_in_ms", h.lease.expires_in_ms}}},
          {"throughput", history.Series()}};
  if (by_topic) out["counts"] = std::move(counts);
  return out;
}

}  // namespace dsync::api::console
