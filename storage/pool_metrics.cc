// storage::WriteMetrics: the connection pool's families of /metrics.
#include <algorithm>

#include "storage/connection_pool.h"

namespace dsync::storage {

void WriteMetrics(const PoolStats& p, metrics::TextWriter& w) {
  using metrics::Type;
  w.Family("dsync_db_pool_connections", "Framework database connections by state.", Type::kGauge);
  w.Sample("dsync_db_pool_connections", {{"state", "in_use"}}, p.in_use);
  w.Sample("dsync_db_pool_connections", {{"state", "idle"}}, std::max(0, p.open - p.in_use));
  w.Family("dsync_db_pool_max_connections", "Size limit of the connection pool.", Type::kGauge);
  w.Sample("dsync_db_pool_max_connections", {}, p.max_size);
  w.Family("dsync_db_pool_connects_total", "Connections opened.", Type::kCounter);
  w.Sample("dsync_db_pool_connects_total", {}, static_cast<double>(p.connects));
  w.Family("dsync_db_pool_discarded_total", "Connections dropped as broken.", Type::kCounter);
  w.Sample("dsync_db_pool_discarded_total", {}, static_cast<double>(p.discarded));
  w.Family("dsync_db_pool_borrow_waits_total", "Borrows that waited for a free connection.", Type::kCounter);
  w.Sample("dsync_db_pool_borrow_waits_total", {}, static_cast<double>(p.borrow_waits));
  w.Family("dsync_db_retries_total", "Units of work re-run after a deadlock, lock timeout or lost connection.",
           Type::kCounter);
  w.Sample("dsync_db_retries_total", {}, static_cast<double>(p.retries));
}

}  // namespace dsync::storage
