#include "registry/offline_sweeper.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace dsync::registry {
namespace {

// Params: offline timeout in microseconds (int64), service. Only the service's nodes:
// another service's leader judges its own (its offline timeout may differ).
constexpr const char* kMarkStaleOffline = R"(
UPDATE distribute_node_registry SET status = 0
WHERE last_heartbeat_time < NOW(3) - INTERVAL ? MICROSECOND AND status <> 0 AND service_name = ?)";

// Params: purge_after in microseconds (int64), service.
constexpr const char* kPurgeSilent = R"(
DELETE FROM distribute_node_registry
WHERE last_heartbeat_time < NOW(3) - INTERVAL ? MICROSECOND AND service_name = ?)";

// Params: purge_after in microseconds (int64), service.
constexpr const char* kCountSilent = R"(
SELECT COUNT(*) FROM distribute_node_registry
WHERE last_heartbeat_time < NOW(3) - INTERVAL ? MICROSECOND AND service_name = ?)";

}  // namespace

const char* MarkStaleOfflineSql() { return kMarkStaleOffline; }

OfflineSweeper::OfflineSweeper(storage::ConnectionPool& pool, std::string service, Millis offline_timeout,
                               Millis purge_after)
    : pool_(pool), service_(std::move(service)), offline_timeout_(offline_timeout), purge_after_(purge_after) {}

uint64_t OfflineSweeper::MarkOffline() {
  // Transact, so that a deadlock with a concurrent sweep or heartbeat is retried.
  uint64_t n = pool_.Transact("mark stale nodes offline", [&](storage::Connection& c) {
    return c.Execute(kMarkStaleOffline, Micros(offline_timeout_), service_);
  });
  if (n > 0) {
    spdlog::info("NODE_MARKED_OFFLINE count={} service={} timeout_ms={}", n, service_, offline_timeout_.count());
  }
  return n;
}

uint64_t OfflineSweeper::Purge() {
  uint64_t n = pool_.Transact("purge silent nodes", [&](storage::Connection& c) {
    return c.Execute(kPurgeSilent, Micros(purge_after_), service_);
  });
  if (n > 0) spdlog::info("NODES_PURGED count={} service={} purge_after_ms={}", n, service_, purge_after_.count());
  return n;
}

uint64_t OfflineSweeper::CountPurgeable() {
  return static_cast<uint64_t>(pool_.Run("count silent nodes", [&](storage::Connection& c) {
    return c.QueryInt(kCountSilent, Micros(purge_after_), service_).value_or(0);
  }));
}

SweepResult OfflineSweeper::Sweep() {
  SweepResult r;
  r.marked_offline = MarkOffline();
  r.purged = Purge();
  return r;
}

}  // namespace dsync::registry
