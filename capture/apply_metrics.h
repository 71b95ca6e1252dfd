// What a node process's capture_sync steps applied (saga/steps/capture_step.cc), per
// capture, for /metrics (issue 36 "Visible"):
//   dsync_capture_events_applied_total{capture}   keyed-sync events whose apply returned ok
//   dsync_capture_rows_applied_total{capture}     the keys (rows) they applied
//   dsync_capture_apply_lag_seconds{capture}      histogram: source commit of the batch's
//       last transaction -> the apply's end (this process's clock against the source's
//       binlog timestamp, which has second precision: up to 1 s high)
// Counted when the step returns ok, before the engine's commit (a commit that fails
// after it is counted too, and retried).
//
//   capture::ApplyMetrics::Instance().Applied("orders", 120, 0.4);
//   capture::ApplyMetrics::Instance().Write(writer);   // nothing when none applied
//
// Thread safety: every method from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/metrics.h"

namespace dsync::capture {

class ApplyMetrics {
 public:
  static ApplyMetrics& Instance();

  void Applied(const std::string& capture, uint64_t keys, std::optional<double> lag_s);
  void Write(metrics::TextWriter& w) const;

 private:
  struct PerCapture {
    uint64_t events = 0, keys = 0;
    std::unique_ptr<metrics::Histogram> lag;
  };
  mutable std::mutex mu_;
  std::map<std::string, PerCapture> by_capture_;
};

}  // namespace dsync::capture
