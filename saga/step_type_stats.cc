#include "saga/step_type_stats.h"

namespace dsync::saga {

void StepTypeStats::Observe(const std::string& type, const char* action, const char* outcome,
                            std::chrono::nanoseconds took) {
  outcomes_.Increment({type, action, outcome});
  metrics::Histogram* h = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = durations_[{type, action}];
    if (!slot) slot = std::make_unique<metrics::Histogram>();
    h = slot.get();  // never removed: safe to use after the lock
  }
  h->Observe(took);
}

void StepTypeStats::Write(metrics::TextWriter& w) const {
  w.Family("dsync_step_calls_total", "Step handler calls by step type, action and outcome.", metrics::Type::kCounter);
  for (const auto& [labels, n] : outcomes_.snapshot()) {
    w.Sample("dsync_step_calls_total", labels, static_cast<double>(n));
  }
  w.Family("dsync_step_call_duration_seconds", "Step handler run time by step type and action.",
           metrics::Type::kHistogram);
  std::lock_guard lock(mu_);
  for (const auto& [key, h] : durations_) {
    w.Histogram("dsync_step_call_duration_seconds", {{"type", key.first}, {"action", key.second}}, h->snapshot());
  }
}

}  // namespace dsync::saga
