// capture::WriteMetrics: the capture families of /metrics (capture/capture_runner.h).
#include "capture/capture_runner.h"

namespace dsync::capture {

void WriteMetrics(const std::vector<std::pair<std::string, const RunnerStats*>>& captures, metrics::TextWriter& w) {
  if (captures.empty()) return;
  using metrics::Type;
  auto family = [&](const char* name, const char* help, Type type, auto value) {
    w.Family(name, help, type);
    for (const auto& [capture, stats] : captures) {
      w.Sample(name, {{"capture", capture}}, static_cast<double>(value(*stats)));
    }
  };
  family("dsync_capture_transactions_total", "Source transactions read past by this process's readers.",
         Type::kCounter, [](const RunnerStats& s) { return s.transactions.load(); });
  family("dsync_capture_row_changes_total", "Rows of captured tables changed in them.", Type::kCounter,
         [](const RunnerStats& s) { return s.row_changes.load(); });
  family("dsync_capture_events_total", "Keyed-sync events produced.", Type::kCounter,
         [](const RunnerStats& s) { return s.events.load(); });
  family("dsync_capture_commits_total", "Checkpoint commits (events and position together).", Type::kCounter,
         [](const RunnerStats& s) { return s.commits.load(); });
  family("dsync_capture_reader_starts_total", "Leases of the capture taken by this process.", Type::kCounter,
         [](const RunnerStats& s) { return s.lease_acquired.load(); });
  family("dsync_capture_leases_lost_total", "Leases lost (taken over, expired) before a commit.", Type::kCounter,
         [](const RunnerStats& s) { return s.lease_lost.load(); });
  family("dsync_capture_errors_total", "Reader errors (source, framework database); each is retried.",
         Type::kCounter, [](const RunnerStats& s) { return s.errors.load(); });
  family("dsync_capture_flushes_held_total",
         "Batches whose commit waited for the previous batch's events to end (group commit under load).",
         Type::kCounter, [](const RunnerStats& s) { return s.held.load(); });
  family("dsync_capture_reading", "1 while this process holds the capture's lease and reads its binlog.",
         Type::kGauge, [](const RunnerStats& s) { return s.leading.load() ? 1 : 0; });
  family("dsync_capture_last_commit_timestamp_seconds",
         "Source commit time of the last captured transaction (the source's clock; 0: none yet).", Type::kGauge,
         [](const RunnerStats& s) { return s.last_commit_at_s.load(); });
}

}  // namespace dsync::capture
