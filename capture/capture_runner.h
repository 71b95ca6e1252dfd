// One capture's reader (docs/capture.md): holds the capture's lease, reads the
// source's binlog from the checkpoint and commits, batch by batch, the keyed-sync
// events of the committed transactions together with the position after them
// (capture/capture_store.h). One reader per capture runs at a time across the
// cluster; any process running `dsync capture` for the same service may take over
// from the last checkpoint when the holder's lease expires (it died, froze, or lost
// the framework database).
//
//   CaptureRunner runner(name, settings.captures.at(name), env);
//   std::jthread t([&](std::stop_token st) { runner.Run(st); });
//
// States (dsync_capture.state): NEW (never ran) -> COPYING (the initial copy's
// full-sync events run; the binlog is not read yet, its start position is recorded)
// -> RUNNING; FAILED (a refusal or a failed copy: waits for `dsync capture resume`).
// A table whose DDL or row images the reader cannot follow is paused (paused_tables,
// with why); its changes are skipped until `dsync capture resume NAME`.
//
// Preflight (Preflight below, also run at each lease start): one line naming the fix
// for binlog off, binlog_format not ROW, binlog_row_image not FULL, no MariaDB GTIDs,
// a user without REPLICATION SLAVE or REPLICATION CLIENT, a table without a usable
// key, a purged start position.
//
// Logs: CAPTURE_LEASE_ACQUIRED, CAPTURE_STARTED (position), CAPTURE_COMMIT (debug),
// CAPTURE_TABLE_PAUSED, CAPTURE_LEASE_LOST, CAPTURE_ERROR, CAPTURE_COPY_DONE.
//
// Batching follows the apply (group commit): a batch is committed once its first change
// waited flush_interval AND the previous batch's events have all ended (or max_hold
// passed, or max_batch_keys keys are waiting). Under load, batches grow while the
// previous events run, so events carry more keys instead of queueing up behind each
// other in their lanes (each lane runs one event at a time).
//
// Thread safety: Run on one thread; stats() from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "capture/capture_store.h"
#include "config/captures.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/metrics.h"
#include "storage/connection_pool.h"

namespace dsync::capture {

// A source the capture cannot read; the message is one line naming the fix.
class PreflightError : public Error {
 public:
  using Error::Error;
};

struct RunnerOptions {
  Millis lease_ttl{10000};         // the reader's lease (database clock); renewed every third
  Millis flush_interval{100};      // a captured change waits at least this before its events are committed,
  Millis max_hold{1000};           // and until the previous batch's events all ended, at most this
  Millis checkpoint_interval{1000};// longest an advanced position waits when nothing was captured
  size_t max_batch_keys = 20000;   // keys of one commit, at most (then it commits at once)
  Millis heartbeat{250};           // the source's heartbeat while idle (a held batch is looked at again then)
  Millis retry_pause{1000};        // after an error, before reading again
};

struct CaptureEnv {
  storage::ConnectionPool* framework = nullptr;  // the framework database
  std::string service;
  std::string holder;              // this process: host:pid:random
  std::string source_url;          // the source datasource's URL
  RunnerOptions options;
  Clock* clock = nullptr;
};

struct RunnerStats {
  std::atomic<uint64_t> transactions{0}, row_changes{0}, events{0}, commits{0}, lease_acquired{0},
      lease_lost{0}, errors{0}, held{0};  // held: flushes put off while the previous batch ran
  std::atomic<int64_t> last_commit_at_s{0};  // source commit time of the last captured transaction (its clock)
  std::atomic<bool> leading{false};          // this process reads the capture now
};

// The capture families of /metrics (capture/capture_metrics.cc), one sample per capture
// this process runs: dsync_capture_transactions_total, _row_changes_total,
// _events_total, _commits_total, _reader_starts_total (leases taken),
// _leases_lost_total, _errors_total, _reading (1 while this process holds the
// capture's lease), _last_commit_timestamp_seconds (source clock).
void WriteMetrics(const std::vector<std::pair<std::string, const RunnerStats*>>& captures, metrics::TextWriter& w);

// Checks the source for capture `name` (read-only). Throws PreflightError.
void Preflight(const std::string& name, const CaptureSettings& capture, const std::string& source_url,
               const std::string& start_gtid);

class CaptureRunner {
 public:
  CaptureRunner(std::string name, CaptureSettings capture, CaptureEnv env);
  ~CaptureRunner();

  // Until `stop`: takes the lease when it is free, then reads and commits. Never throws.
  void Run(std::stop_token stop);
  const RunnerStats& stats() const { return stats_; }
  const std::string& name() const { return name_; }

 private:
  struct Lead;
  void LeadOnce(int64_t token, std::stop_token stop);

  const std::string name_;
  const CaptureSettings capture_;
  const CaptureEnv env_;
  CaptureStore store_;
  RunnerStats stats_;
};

}  // namespace dsync::capture
