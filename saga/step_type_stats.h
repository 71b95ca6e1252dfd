// Step handler calls counted by step type (http, exec, table_sync, demo, ...): how
// many, how long, and how each ended, for /metrics (saga::WriteMetrics):
//
//   dsync_step_calls_total{type="http",action="execute",outcome="ok"} 12
//     outcome: ok | transient | permanent | timeout (the attempt's deadline passed)
//   dsync_step_call_duration_seconds{type="http",action="execute"} (histogram)
//
// Thread safety: Observe and Write from any thread (one short lock per call).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/metrics.h"

namespace dsync::saga {

class StepTypeStats {
 public:
  // `action` "execute" or "compensate"; `outcome` as above.
  void Observe(const std::string& type, const char* action, const char* outcome, std::chrono::nanoseconds took);
  void Write(metrics::TextWriter& w) const;
  uint64_t Calls(const std::string& type, const char* action, const char* outcome) const {
    return outcomes_.Get({type, action, outcome});
  }

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<metrics::Histogram>> durations_;  // (type, action)
  metrics::LabeledCounter outcomes_{{"type", "action", "outcome"}};
};

}  // namespace dsync::saga
