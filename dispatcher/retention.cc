#include "dispatcher/retention.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace dsync::dispatcher {
namespace {

// A leader's pass pauses after each batch at least this many times as long as the
// batch took: it keeps the database busy at most a quarter of the time, and backs off
// by itself when the database is slow (loaded), so dispatching keeps its speed.
constexpr int kPausePerWork = 3;

}  // namespace

Retention::Retention(storage::ConnectionPool& pool, Clock& clock, std::string service, RetentionSettings settings)
    : pool_(pool),
      clock_(clock),
      service_(std::move(service)),
      settings_(settings),
      purger_(settings.archive, settings.batch_size) {}

events::PurgeCounts Retention::Purge(storage::ConnectionPool& pool, Clock& clock, events::Purger& purger,
                                     const events::PurgeSelector& selector, Millis pause, int pause_per_work,
                                     std::stop_token stop, const std::function<bool()>& keep_going,
                                     const std::function<bool()>& busy, Millis busy_pause) {
  events::PurgeCounts total;
  events::PurgeCursor cursor =
      pool.Run("retention bound", [&](storage::Connection& c) { return purger.Begin(c, selector); });
  while (!cursor.done && !stop.stop_requested() && keep_going()) {
    const Clock::TimePoint started = clock.Now();
    std::vector<int64_t> ids = pool.Run("retention scan", [&](storage::Connection& c) {
      return purger.NextCandidates(c, selector, cursor);
    });
    if (ids.empty()) break;
    total += pool.Transact("retention batch", [&](storage::Connection& c) {
      return purger.RemoveBatch(c, selector, cursor, ids);
    });
    const Millis worked = std::chrono::duration_cast<Millis>(clock.Now() - started);
    Millis wait = std::max(pause, worked * pause_per_work);
    if (busy && busy()) wait = std::max(wait, busy_pause);
    if (!cursor.done && wait.count() > 0 && !clock.SleepFor(wait, stop)) break;
  }
  return total;
}

events::PurgeCounts Retention::RunPass(std::stop_token stop, const std::function<bool()>& keep_going,
                                       const std::function<bool()>& busy) {
  events::PurgeCounts total;
  try {
    total += Purge(pool_, clock_, purger_, {{"SUCCESS", "COMPENSATED"}, settings_.finished_after, service_},
                   settings_.batch_pause, kPausePerWork, stop, keep_going, busy, settings_.busy_pause);
    total += Purge(pool_, clock_, purger_, {{"FAILED"}, settings_.failed_after, service_}, settings_.batch_pause,
                   kPausePerWork, stop, keep_going, busy, settings_.busy_pause);
  } catch (...) {
    ++failures_;
    events_ += static_cast<uint64_t>(total.events);
    steps_ += static_cast<uint64_t>(total.steps);
    batches_ += static_cast<uint64_t>(total.batches);
    throw;
  }
  ++passes_;
  events_ += static_cast<uint64_t>(total.events);
  steps_ += static_cast<uint64_t>(total.steps);
  batches_ += static_cast<uint64_t>(total.batches);
  if (total.events > 0) {
    spdlog::info("RETENTION_PASS service={} events={} steps={} batches={} archive={} by_status={}", service_,
                 total.events, total.steps, total.batches, settings_.archive, FormatByStatus(total.by_status));
  }
  return total;
}

RetentionStats Retention::stats() const {
  return {passes_.load(), failures_.load(), events_.load(), steps_.load(), batches_.load()};
}

std::string FormatByStatus(const std::map<std::string, int64_t>& by_status) {
  std::string out;
  for (const auto& [status, n] : by_status) out += (out.empty() ? "" : ",") + status + ":" + std::to_string(n);
  return out.empty() ? "-" : out;
}

}  // namespace dsync::dispatcher
