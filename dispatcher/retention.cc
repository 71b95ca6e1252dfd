#include "dispatcher/retention.h"

#include <spdlog/spdlog.h>

namespace dsync::dispatcher {

Retention::Retention(storage::ConnectionPool& pool, Clock& clock, RetentionSettings settings)
    : pool_(pool), clock_(clock), settings_(settings), purger_(settings.archive, settings.batch_size) {}

events::PurgeCounts Retention::Purge(storage::ConnectionPool& pool, Clock& clock, events::Purger& purger,
                                     const events::PurgeSelector& selector, Millis pause, std::stop_token stop,
                                     const std::function<bool()>& keep_going) {
  events::PurgeCounts total;
  events::PurgeCursor cursor =
      pool.Run("retention bound", [&](storage::Connection& c) { return purger.Begin(c, selector); });
  while (!cursor.done && !stop.stop_requested() && keep_going()) {
    std::vector<int64_t> ids = pool.Run("retention scan", [&](storage::Connection& c) {
      return purger.NextCandidates(c, selector, cursor);
    });
    if (ids.empty()) break;
    total += pool.Transact("retention batch", [&](storage::Connection& c) {
      return purger.RemoveBatch(c, selector, cursor, ids);
    });
    if (!cursor.done && pause.count() > 0 && !clock.SleepFor(pause, stop)) break;
  }
  return total;
}

events::PurgeCounts Retention::RunPass(std::stop_token stop, const std::function<bool()>& keep_going) {
  events::PurgeCounts total;
  try {
    total += Purge(pool_, clock_, purger_, {{"SUCCESS", "COMPENSATED"}, settings_.finished_after},
                   settings_.batch_pause, stop, keep_going);
    total += Purge(pool_, clock_, purger_, {{"FAILED"}, settings_.failed_after}, settings_.batch_pause, stop,
                   keep_going);
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
    spdlog::info("RETENTION_PASS events={} steps={} batches={} archive={} by_status={}", total.events,
                 total.steps, total.batches, settings_.archive, FormatByStatus(total.by_status));
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
