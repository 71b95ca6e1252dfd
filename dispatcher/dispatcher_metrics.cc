// dispatcher::WriteMetrics: the dispatcher's families of /metrics (lease, dispatch
// cycles, sweeper, and its reasons of dsync_event_resets_total).
#include <algorithm>

#include "dispatcher/dispatcher_service.h"
#include "events/reset_metrics.h"

namespace dsync::dispatcher {

void WriteMetrics(const DispatcherStats& s, metrics::TextWriter& w) {
  using metrics::Type;
  metrics::Labels none;
  w.Family("dsync_dispatcher_leader", "1 while this process holds the dispatcher lease.", Type::kGauge);
  w.Sample("dsync_dispatcher_leader", none, s.lease.leader ? 1 : 0);
  w.Family("dsync_lease_acquired_total", "Lease tenures started by this process.", Type::kCounter);
  w.Sample("dsync_lease_acquired_total", none, static_cast<double>(s.lease.acquired));
  w.Family("dsync_lease_lost_total", "Lease tenures lost by this process, by cause.", Type::kCounter);
  w.Sample("dsync_lease_lost_total", {{"cause", "watchdog"}}, static_cast<double>(s.lease.lost_by_watchdog));
  w.Sample("dsync_lease_lost_total", {{"cause", "other"}},
           static_cast<double>(s.lease.lost - std::min(s.lease.lost, s.lease.lost_by_watchdog)));
  w.Family("dsync_dispatch_cycles_total", "Dispatch cycles run, by result.", Type::kCounter);
  w.Sample("dsync_dispatch_cycles_total", {{"result", "ok"}},
           static_cast<double>(s.cycle.cycles - std::min(s.cycle.cycles, s.cycle.failures)));
  w.Sample("dsync_dispatch_cycles_total", {{"result", "failed"}}, static_cast<double>(s.cycle.failures));
  w.Family("dsync_dispatch_assigned_total", "Events assigned to a node.", Type::kCounter);
  w.Sample("dsync_dispatch_assigned_total", none, static_cast<double>(s.cycle.assigned));
  w.Family("dsync_dispatch_lost_races_total", "Assignments whose event changed since it was read.", Type::kCounter);
  w.Sample("dsync_dispatch_lost_races_total", none, static_cast<double>(s.cycle.lost_races));
  w.Family("dsync_dispatch_fenced_out_total", "Cycles whose writes the lease fence refused.", Type::kCounter);
  w.Sample("dsync_dispatch_fenced_out_total", none, static_cast<double>(s.cycle.fenced_out));
  w.Family("dsync_dispatch_latency_seconds", "From an event being due to its assignment to a node.",
           Type::kHistogram);
  w.Histogram("dsync_dispatch_latency_seconds", none, s.cycle.dispatch_latency);
  w.Family("dsync_dispatch_cycle_duration_seconds", "Duration of a dispatch cycle.", Type::kHistogram);
  w.Histogram("dsync_dispatch_cycle_duration_seconds", none, s.cycle.cycle_duration);
  w.Family("dsync_events_unroutable",
           "PENDING events of a topic no live node can run (none serves it, reaches its datasources, or "
           "could build its plan), at the leader's last check; reasons in v_events_needing_attention.",
           Type::kGauge);
  for (const auto& [topic, u] : s.cycle.unroutable) {
    w.Sample("dsync_events_unroutable", {{"topic", topic}}, static_cast<double>(u.pending));
  }
  w.Family("dsync_sweeps_total", "Sweeper passes, by result.", Type::kCounter);
  w.Sample("dsync_sweeps_total", {{"result", "ok"}}, static_cast<double>(s.sweeper.sweeps - std::min(s.sweeper.sweeps, s.sweeper.failures)));
  w.Sample("dsync_sweeps_total", {{"result", "failed"}}, static_cast<double>(s.sweeper.failures));
  w.Family("dsync_nodes_marked_offline_total", "Nodes the sweeper marked offline.", Type::kCounter);
  w.Sample("dsync_nodes_marked_offline_total", none, static_cast<double>(s.sweeper.marked_offline));
  w.Family("dsync_event_reset_races_total", "Resets skipped because the event changed since it was read.",
           Type::kCounter);
  w.Sample("dsync_event_reset_races_total", none, static_cast<double>(s.sweeper.reset_races));
  events::WriteEventResets(w, "node_offline", s.sweeper.resets_node_offline);
  events::WriteEventResets(w, "timed_out", s.sweeper.resets_timed_out);
  events::WriteEventResets(w, "not_claimed", s.sweeper.resets_not_claimed);
  w.Family("dsync_retention_removed_total",
           "Finished events and steps removed (deleted or archived) by this process's retention passes.",
           Type::kCounter);
  w.Sample("dsync_retention_removed_total", {{"table", "event"}}, static_cast<double>(s.retention.events_removed));
  w.Sample("dsync_retention_removed_total", {{"table", "step"}}, static_cast<double>(s.retention.steps_removed));
  w.Family("dsync_retention_passes_total", "Retention passes, by result.", Type::kCounter);
  w.Sample("dsync_retention_passes_total", {{"result", "ok"}}, static_cast<double>(s.retention.passes));
  w.Sample("dsync_retention_passes_total", {{"result", "failed"}}, static_cast<double>(s.retention.failures));
  w.Family("dsync_batches_completed_total", "Completion events of finished batches produced by this process.",
           Type::kCounter);
  w.Sample("dsync_batches_completed_total", none, static_cast<double>(s.batches_completed));
}

}  // namespace dsync::dispatcher
