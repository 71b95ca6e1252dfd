#include "app/component_metrics.h"

#include "app/capture_command.h"
#include "capture/apply_metrics.h"
#include "consumer/consumer_node.h"
#include "dispatcher/dispatcher_service.h"
#include "saga/saga_engine.h"
#include "storage/connection_pool.h"

namespace dsync::app {

metrics::Registry ComponentMetrics(const MetricsComponents& c) {
  metrics::Registry r;
  if (c.pool != nullptr) {
    r.Add([pool = c.pool](metrics::TextWriter& w) { storage::WriteMetrics(pool->stats(), w); });
  }
  if (c.dispatcher != nullptr) {
    r.Add([d = c.dispatcher](metrics::TextWriter& w) { dispatcher::WriteMetrics(d->stats(), w); });
    r.Add([d = c.dispatcher](metrics::TextWriter& w) { control::WriteMetrics(d->scheduler_stats(), w); });  // issue 37
  }
  if (c.consumer != nullptr) {
    r.Add([s = c.consumer](metrics::TextWriter& w) { consumer::WriteMetrics(*s, w); });
  }
  if (c.saga != nullptr) {
    r.Add([s = c.saga](metrics::TextWriter& w) { saga::WriteMetrics(*s, w); });
  }
  if (c.saga != nullptr) {  // what this process's capture_sync steps applied (nothing when none)
    r.Add([](metrics::TextWriter& w) { capture::ApplyMetrics::Instance().Write(w); });
  }
  if (c.captures != nullptr && c.captures->size() > 0) {
    r.Add([stats = c.captures->Stats()](metrics::TextWriter& w) { capture::WriteMetrics(stats, w); });
  }
  return r;
}

}  // namespace dsync::app
