// Retention as the dispatcher leader applies it (config `retention`), and `dsync purge`
// on demand: passes of events::Purger batches (events/purge.h) with a pause between
// batches, so a pass never holds a lock longer than one small transaction and leaves
// the database to dispatch in between (at least retention.batch_pause_ms, and at least
// three times as long as the batch took: the pass backs off when the database is busy),
// and while the dispatcher is assigning events (`busy`) at least retention.busy_pause_ms
// (2 s): a busy queue then loses at most one small batch's work per busy pause to
// retention (measured by `bash scripts/bench.sh purge`), and a queue that is never idle
// is still purged, at most batch_size / busy_pause events per second (250/s at the
// defaults 500 and 2 s).
//
//   dispatcher::Retention retention(pool, clock, settings.service, settings.retention);
//   events::PurgeCounts removed = retention.RunPass(stop, [&] { return locker.is_leader(); },
//                                                   [&] { return assigned_since_last_batch; });
//
// A pass handles SUCCESS + COMPENSATED older than retention.finished_after_ms, then
// FAILED older than retention.failed_after_ms, each to its end (or until `keep_going`
// says no: leadership lost), then the verify history (dsync_verify_result, one row per
// table of each `dsync verify` and POST /v1/verify) older than
// retention.verify_results_after_ms, oldest first, batch_size rows a statement (by its
// finished_at index), with the same pauses; then up to batch_size relays (dsync_relay
// and its ranges and chunks, docs/relay.md) untouched for retention.finished_after_ms
// whose event is not in flight. It logs one line when it removed anything:
//   RETENTION_PASS events=<n> steps=<n> batches=<n> verify_results=<n> relays=<n> archive=<bool> by_status=SUCCESS:<n>,...
//
// Thread safety: RunPass from one thread at a time; stats() from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <stop_token>

#include "config/settings.h"
#include "core/clock.h"
#include "events/purge.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

struct RetentionStats {
  uint64_t passes = 0;
  uint64_t failures = 0;         // passes that threw
  uint64_t events_removed = 0;   // deleted or archived
  uint64_t steps_removed = 0;
  uint64_t batches = 0;
  uint64_t verify_results_removed = 0;  // dsync_verify_result rows deleted
  uint64_t relays_removed = 0;          // dsync_relay rows (with their ranges and chunks) dropped
};

class Retention {
 public:
  // `pool` and `clock` must outlive it.
  // Purges only `service`'s events (config `service`).
  Retention(storage::ConnectionPool& pool, Clock& clock, std::string service, RetentionSettings settings);

  // One pass (see above). Throws DbError (batches committed before stay committed).
  events::PurgeCounts RunPass(std::stop_token stop, const std::function<bool()>& keep_going,
                              const std::function<bool()>& busy = {});

  // Purges one selector to its end, batch after batch, pausing between two batches for
  // `pause` or `pause_per_work` times as long as the batch took, whichever is longer
  // (RunPass: retention.batch_pause_ms and 3, so a pass keeps the database busy at
  // most a quarter of the time and slows down by itself when the database is slow;
  // `dsync purge`: 0 and 0, full speed). Throws DbError.
  // With `busy` (asked after each batch), the pause is at least `busy_pause`
  // (RunPass: retention.busy_pause_ms) while it says true.
  static events::PurgeCounts Purge(storage::ConnectionPool& pool, Clock& clock, events::Purger& purger,
                                   const events::PurgeSelector& selector, Millis pause, int pause_per_work,
                                   std::stop_token stop, const std::function<bool()>& keep_going,
                                   const std::function<bool()>& busy = {},
                                   Millis busy_pause = RetentionSettings{}.busy_pause);

  // Deletes dsync_verify_result rows that finished more than `older_than` ago, up to
  // `batch_size` a statement, pausing as Purge does. Returns the rows deleted. Throws
  // DbError.
  static int64_t PurgeVerifyResults(storage::ConnectionPool& pool, Clock& clock, Millis older_than, int batch_size,
                                    Millis pause, int pause_per_work, std::stop_token stop,
                                    const std::function<bool()>& keep_going, const std::function<bool()>& busy = {},
                                    Millis busy_pause = RetentionSettings{}.busy_pause);

  const RetentionSettings& settings() const { return settings_; }
  RetentionStats stats() const;

 private:
  storage::ConnectionPool& pool_;
  Clock& clock_;
  const std::string service_;
  const RetentionSettings settings_;
  events::Purger purger_;
  std::atomic<uint64_t> passes_{0}, failures_{0}, events_{0}, steps_{0}, batches_{0}, verify_results_{0}, relays_{0};
};

// "SUCCESS:3,FAILED:1".
std::string FormatByStatus(const std::map<std::string, int64_t>& by_status);

}  // namespace dsync::dispatcher
