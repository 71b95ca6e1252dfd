// saga::WriteMetrics: the saga engine's families of /metrics (claims, runs by outcome,
// steps, claim latency and step durations).
#include "saga/saga_engine.h"

namespace dsync::saga {

void WriteMetrics(const SagaStats& s, metrics::TextWriter& w) {
  using metrics::Type;
  metrics::Labels none;
  w.Family("dsync_events_claimed_total", "Claims tried by this node's saga engine, by result.", Type::kCounter);
  w.Sample("dsync_events_claimed_total", {{"result", "claimed"}}, static_cast<double>(s.claimed.load()));
  w.Sample("dsync_events_claimed_total", {{"result", "not_claimed"}}, static_cast<double>(s.not_claimed.load()));
  w.Family("dsync_event_runs_total", "Runs of claimed events, by where they left the event.", Type::kCounter);
  w.Sample("dsync_event_runs_total", {{"outcome", "succeeded"}}, static_cast<double>(s.succeeded.load()));
  w.Sample("dsync_event_runs_total", {{"outcome", "retry_scheduled"}}, static_cast<double>(s.retries.load()));
  w.Sample("dsync_event_runs_total", {{"outcome", "compensated"}}, static_cast<double>(s.compensated.load()));
  w.Sample("dsync_event_runs_total", {{"outcome", "failed"}}, static_cast<double>(s.failed.load()));
  w.Sample("dsync_event_runs_total", {{"outcome", "lost_ownership"}}, static_cast<double>(s.lost_ownership.load()));
  w.Sample("dsync_event_runs_total", {{"outcome", "handed_on"}}, static_cast<double>(s.handed_on.load()));
  w.Family("dsync_compensations_total", "Events whose compensation started on this node.", Type::kCounter);
  w.Sample("dsync_compensations_total", none, static_cast<double>(s.compensations_started.load()));
  w.Family("dsync_steps_total", "Step handler invocations, by action.", Type::kCounter);
  w.Sample("dsync_steps_total", {{"action", "execute"}}, static_cast<double>(s.steps_executed.load()));
  w.Sample("dsync_steps_total", {{"action", "compensate"}}, static_cast<double>(s.steps_compensated.load()));
  w.Family("dsync_claim_latency_seconds", "From an event's assignment to its claim (ASSIGNED -> RUNNING).",
           Type::kHistogram);
  w.Histogram("dsync_claim_latency_seconds", none, s.claim_latency.snapshot());
  w.Family("dsync_step_duration_seconds", "Step handler run time, by action.", Type::kHistogram);
  w.Histogram("dsync_step_duration_seconds", {{"action", "execute"}}, s.step_duration.snapshot());
  w.Histogram("dsync_step_duration_seconds", {{"action", "compensate"}}, s.compensation_duration.snapshot());
  s.by_type.Write(w);
}

}  // namespace dsync::saga
