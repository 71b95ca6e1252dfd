// consumer::WriteMetrics: the consumer node's families of /metrics (polls, in-flight
// events, and its reasons of dsync_event_resets_total).
#include "consumer/consumer_node.h"
#include "events/reset_metrics.h"

namespace dsync::consumer {

void WriteMetrics(const ConsumerStats& c, metrics::TextWriter& w) {
  using metrics::Type;
  metrics::Labels none;
  w.Family("dsync_consumer_polls_total", "Polls for assigned events.", Type::kCounter);
  w.Sample("dsync_consumer_polls_total", none, static_cast<double>(c.polls.load()));
  w.Family("dsync_consumer_polled_events_total", "Assigned events taken up by this node.", Type::kCounter);
  w.Sample("dsync_consumer_polled_events_total", none, static_cast<double>(c.polled_events.load()));
  w.Family("dsync_consumer_in_flight_events", "Events queued or running on this node.", Type::kGauge);
  w.Sample("dsync_consumer_in_flight_events", none, c.in_flight.load());
  events::WriteEventResets(w, "node_restarted", c.handed_back_at_start.load());
  events::WriteEventResets(w, "node_drained", c.handed_back_at_drain.load());
  events::WriteEventResets(w, "run_abandoned", c.handed_back_abandoned.load());
}

}  // namespace dsync::consumer
