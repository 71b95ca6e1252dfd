#include "dispatcher/retention.h"

#include "events/status.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "table/relay_table.h"

namespace dsync::dispatcher {
namespace {

// A leader's pass pauses after each batch at least this many times as long as the
// batch took: it keeps the database busy at most a quarter of the time, and backs off
// by itself when the database is slow (loaded), so dispatching keeps its speed.
constexpr int kPausePerWork = 3;

// The oldest verify results past the bound (idx_finished; finished_at is UTC).
// params: older_than (µs), limit
constexpr const char* kPurgeVerifyResultsSql = R"(
DELETE FROM dsync_verify_result WHERE finished_at < UTC_TIMESTAMP(3) - INTERVAL ? MICROSECOND
ORDER BY finished_at LIMIT ?)";

// At most 100 years, so that the microseconds fit.
int64_t BoundMicros(Millis d) {
  constexpr int64_t kMaxMs = 100LL * 366 * 24 * 3600 * 1000;
  return std::clamp<int64_t>(d.count(), 0, kMaxMs) * 1000;
}

}  // namespace

int64_t Retention::PurgeVerifyResults(storage::ConnectionPool& pool, Clock& clock, Millis older_than, int batch_size,
                                      Millis pause, int pause_per_work, std::stop_token stop,
                                      const std::function<bool()>& keep_going, const std::function<bool()>& busy,
                                      Millis busy_pause) {
  int64_t removed = 0;
  while (!stop.stop_requested() && keep_going()) {
    const Clock::TimePoint started = clock.Now();
    const uint64_t n = pool.Run("retention verify results", [&](storage::Connection& c) {
      return c.Execute(kPurgeVerifyResultsSql, BoundMicros(older_than), batch_size);
    });
    removed += static_cast<int64_t>(n);
    if (n < static_cast<uint64_t>(batch_size)) break;
    const Millis worked = std::chrono::duration_cast<Millis>(clock.Now() - started);
    Millis wait = std::max(pause, worked * pause_per_work);
    if (busy && busy()) wait = std::max(wait, busy_pause);
    if (wait.count() > 0 && !clock.SleepFor(wait, stop)) break;
  }
  return removed;
}

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
  int64_t verify_results = 0;
  int64_t relays = 0;
  try {
    total += Purge(pool_, clock_, purger_, {{events::ToText(events::EventStatus::kSuccess), events::ToText(events::EventStatus::kCompensated)}, settings_.finished_after, service_},
                   settings_.batch_pause, kPausePerWork, stop, keep_going, busy, settings_.busy_pause);
    total += Purge(pool_, clock_, purger_, {{events::ToText(events::EventStatus::kFailed)}, settings_.failed_after, service_}, settings_.batch_pause,
                   kPausePerWork, stop, keep_going, busy, settings_.busy_pause);
    verify_results = PurgeVerifyResults(pool_, clock_, settings_.verify_results_after, settings_.batch_size,
                                        settings_.batch_pause, kPausePerWork, stop, keep_going, busy,
                                        settings_.busy_pause);
    // Relays (docs/relay.md) of events no longer in flight, as long as finished events
    // are kept; one batch a pass (a relay is one row once its step ended).
    if (!stop.stop_requested() && keep_going()) {
      relays = table::RelayTable(pool_).Purge(BoundMicros(settings_.finished_after), settings_.batch_size);
    }
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
  verify_results_ += static_cast<uint64_t>(verify_results);
  relays_ += static_cast<uint64_t>(relays);
  if (total.events > 0 || verify_results > 0 || relays > 0) {
    spdlog::info(
        "RETENTION_PASS service={} events={} steps={} batches={} verify_results={} relays={} archive={} by_status={}",
        service_, total.events, total.steps, total.batches, verify_results, relays, settings_.archive,
        FormatByStatus(total.by_status));
  }
  return total;
}

RetentionStats Retention::stats() const {
  return {passes_.load(),  failures_.load(),       events_.load(), steps_.load(),
          batches_.load(), verify_results_.load(), relays_.load()};
}

std::string FormatByStatus(const std::map<std::string, int64_t>& by_status) {
  std::string out;
  for (const auto& [status, n] : by_status) out += (out.empty() ? "" : ",") + status + ":" + std::to_string(n);
  return out.empty() ? "-" : out;
}

}  // namespace dsync::dispatcher
