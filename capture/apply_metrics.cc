// capture::ApplyMetrics (capture/apply_metrics.h).
#include "capture/apply_metrics.h"

#include <vector>

namespace dsync::capture {

ApplyMetrics& ApplyMetrics::Instance() {
  static ApplyMetrics instance;
  return instance;
}

void ApplyMetrics::Applied(const std::string& capture, uint64_t keys, std::optional<double> lag_s) {
  std::lock_guard lock(mu_);
  PerCapture& p = by_capture_[capture];
  if (!p.lag) p.lag = std::make_unique<metrics::Histogram>(std::vector<double>{0.25, 0.5, 1, 2, 5, 10, 30, 60, 300});
  ++p.events;
  p.keys += keys;
  if (lag_s) p.lag->Observe(*lag_s < 0 ? 0.0 : *lag_s);
}

void ApplyMetrics::Write(metrics::TextWriter& w) const {
  std::lock_guard lock(mu_);
  if (by_capture_.empty()) return;
  using metrics::Type;
  w.Family("dsync_capture_events_applied_total", "Keyed-sync events of the capture this process applied.",
           Type::kCounter);
  for (const auto& [name, p] : by_capture_) w.Sample("dsync_capture_events_applied_total", {{"capture", name}}, static_cast<double>(p.events));
  w.Family("dsync_capture_rows_applied_total", "Rows (keys) of the capture this process applied.", Type::kCounter);
  for (const auto& [name, p] : by_capture_) w.Sample("dsync_capture_rows_applied_total", {{"capture", name}}, static_cast<double>(p.keys));
  w.Family("dsync_capture_apply_lag_seconds",
           "Source commit (binlog timestamp, second precision) -> apply end, per applied event.", Type::kHistogram);
  for (const auto& [name, p] : by_capture_) w.Histogram("dsync_capture_apply_lag_seconds", {{"capture", name}}, p.lag->snapshot());
}

}  // namespace dsync::capture
