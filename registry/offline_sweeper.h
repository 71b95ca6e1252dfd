// Marks nodes offline whose heartbeat is older than the offline timeout, and deletes
// rows silent for longer than `purge_after`. Both are judged by the database clock:
//
//   UPDATE distribute_node_registry SET status = 0
//   WHERE status <> 0 AND last_heartbeat_time < NOW(3) - INTERVAL ? MICROSECOND
//     AND service_name = ?
//
// One service's nodes only: a service's leader never judges another's (docs/
// event-lifecycle.md, "Services").
// Any process may run it, several at once: each pass is a single conditional
// statement, so concurrent sweeps only repeat each other's work.
//
// Thread safety: thread-safe (no mutable state besides atomic counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "core/clock.h"
#include "storage/connection_pool.h"

namespace dsync::registry {

struct SweepResult {
  uint64_t marked_offline = 0;
  uint64_t purged = 0;
};

// The stale-node UPDATE, for bench/dispatch_bench.cc's EXPLAIN. Params: timeout (µs), service.
const char* MarkStaleOfflineSql();

class OfflineSweeper {
 public:
  OfflineSweeper(storage::ConnectionPool& pool, std::string service, Millis offline_timeout, Millis purge_after);

  // Marks the service's stale nodes offline. Throws DbError.
  uint64_t MarkOffline();
  // Deletes the service's rows whose last heartbeat is older than purge_after. Throws DbError.
  uint64_t Purge();
  // How many rows Purge() would delete now (`dsync purge --dry-run`). Throws DbError.
  uint64_t CountPurgeable();
  // Both.
  SweepResult Sweep();

 private:
  storage::ConnectionPool& pool_;
  const std::string service_;
  const Millis offline_timeout_;
  const Millis purge_after_;
};

}  // namespace dsync::registry
