// The web console that `dsync serve` / `dsync all` serve at `/`: its static files
// (compiled into the binary from api/console/ by cmake/embed_assets.cmake) and the
// server side of its overview page.
//
// The files hold no data: the page fetches everything from the token-protected /v1
// routes (with `api.token` set it asks for the token once and sends it as a Bearer
// header), so the files themselves are served without a token. Each answer carries a
// strict Content-Security-Policy (scripts and styles from the same origin only, no
// inline script, no framing) and an ETag (answers 304 to a matching If-None-Match).
//
//   const console::Asset* a = console::FindAsset("/");         // index.html
//   console::ThroughputHistory history(clock);
//   nlohmann::json o = console::Overview(store, history);       // GET /v1/overview
//
// Thread safety: FindAsset and the asset table are immutable; ThroughputHistory is
// internally synchronised; Overview is as thread-safe as the store.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/console_asset.h"
#include "api/event_store.h"
#include "core/clock.h"

namespace dsync::api::console {

// The asset a GET of `path` answers: "/" and "/index.html" the page, "/assets/<name>"
// the other files; nullptr for anything else (the API's routes, unknown files).
const Asset* FindAsset(std::string_view path);

// A strong validator of the asset's bytes ("\"<hex>\"").
std::string ETag(const Asset& asset);

// The Content-Security-Policy header of every console file.
inline constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// Samples of the event table's totals taken whenever the overview is read (at most one
// per `min_spacing`, kept for `window`), from which the page draws its throughput
// chart: the same counts /metrics exports as dsync_events, differenced over time. The
// chart therefore covers the time someone has had the console open, in the last
// `window`; nothing is sampled while nobody looks.
class ThroughputHistory {
 public:
  explicit ThroughputHistory(Clock& clock, Millis min_spacing = Millis(2000), Millis window = Millis(15 * 60 * 1000));
  void Record(int64_t total, int64_t finished);  // events in the table; of those terminal
  // [{age_ms, total, finished}], oldest first; age_ms is how long ago the sample was taken.
  nlohmann::json Series();

 private:
  struct Sample {
    Clock::TimePoint at;
    int64_t total, finished;
  };
  Clock& clock_;
  const Millis min_spacing_, window_;
  std::mutex mu_;
  std::deque<Sample> samples_;
};

// The overview document: {totals: {status: n}, total, attention: [...], nodes: [...],
// lease: {...}, throughput: [...], attention_limit}, and with `by_topic` also
// counts: {topic: {status: n}}. Queries: the count by status (or by topic and status:
// idx_due, index only; the topic costs a temporary table, ~3x the time on 1M events, so
// the page asks for it after its first render and then every 10 s), events needing
// attention (EventStore::NeedingAttention), live nodes with in-flight counts, the lease
// row. Throws DbError.
nlohmann::json Overview(EventStore& store, ThroughputHistory& history, bool by_topic);

}  // namespace dsync::api::console
