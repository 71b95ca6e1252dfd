// The metric writers of the components one process runs, registered in the order
// /metrics shows them (pool, dispatcher, consumer node, saga engine). The wiring lives
// here, in app/, because only app/ knows every module; each writer sits beside its
// component's stats struct (storage::WriteMetrics, dispatcher::WriteMetrics, ...).
//
// Thread safety: the registry returned is filled; it reads the components' stats
// (thread-safe snapshots) whenever it is written.
#pragma once

#include "core/metrics.h"

namespace dsync::storage {
class ConnectionPool;
}
namespace dsync::dispatcher {
class DispatcherService;
}
namespace dsync::saga {
struct SagaStats;
}
namespace dsync::consumer {
struct ConsumerStats;
}

namespace dsync::app {

class CaptureComponent;

// In-process components whose counters /metrics exports. Each is optional (null: not
// in this process); each must outlive the registry's use.
struct MetricsComponents {
  storage::ConnectionPool* pool = nullptr;
  dispatcher::DispatcherService* dispatcher = nullptr;
  saga::SagaStats* saga = nullptr;
  consumer::ConsumerStats* consumer = nullptr;
  const CaptureComponent* captures = nullptr;  // app/capture_command.h
};

metrics::Registry ComponentMetrics(const MetricsComponents& c);

}  // namespace dsync::app
