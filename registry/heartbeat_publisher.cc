#include "registry/heartbeat_publisher.h"

#include <exception>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace dsync::registry {
namespace {

// Params: service_name, node_address, status (1, or 2 when draining), metadata JSON,
// metadata_version, incarnation.
// Draining is sticky within one incarnation: a row already at 2 stays 2 when the
// same process beats again (it may be an operator's drain this process has not seen
// yet); a new incarnation starts at the status it asks for. `status` is assigned
// before `incarnation`, since assignments apply left to right and the IF must see
// the old incarnation.
constexpr const char* kUpsertHeartbeat = R"(
INSERT INTO distribute_node_registry
  (service_name, node_address, status, last_heartbeat_time, metadata, metadata_version, incarnation)
VALUES (?, ?, ?, NOW(3), ?, ?, ?)
ON DUPLICATE KEY UPDATE
  status = IF(status = 2 AND incarnation = VALUES(incarnation), 2, VALUES(status)),
  last_heartbeat_time = NOW(3),
  metadata = VALUES(metadata),
  metadata_version = VALUES(metadata_version),
  incarnation = VALUES(incarnation))";

// Params: service_name, node_address.
constexpr const char* kSelectStatus = R"(
SELECT status FROM distribute_node_registry WHERE service_name = ? AND node_address = ?)";

// Params: service_name, node_address, incarnation.
constexpr const char* kMarkOffline = R"(
UPDATE distribute_node_registry SET status = 0
WHERE service_name = ? AND node_address = ? AND incarnation = ?)";

}  // namespace

HeartbeatPublisher::HeartbeatPublisher(storage::ConnectionPool& pool, Clock& clock,
                                       std::string service_name, std::string node_address,
                                       Millis interval, MetadataSource metadata)
    : pool_(pool),
      clock_(clock),
      service_name_(std::move(service_name)),
      node_address_(std::move(node_address)),
      interval_(interval),
      metadata_(std::move(metadata)) {}

HeartbeatPublisher::~HeartbeatPublisher() { Stop(); }

NodeStatus HeartbeatPublisher::Beat() {
  NodeStatus status;
  try {
    NodeMetadata md = metadata_();
    bool draining;
    {
      std::lock_guard lock(mu_);
      draining = draining_;
    }
    const std::string json = md.ToJson();
    const int wanted = draining ? 2 : 1;
    // Autocommit statements, never a transaction: a node paused between its upsert and
    // the COMMIT (SIGSTOP, a frozen VM, a partition) would keep its registry row
    // locked, and the offline sweeper's UPDATE over idx_heartbeat_time would wait for
    // that lock (Transact retrying each lock-wait timeout): no node marked offline and
    // no orphan reset for as long as the node stays paused (found by tests/chaos). An
    // autocommit statement leaves no lock behind a stalled client. A deadlock between
    // concurrent first inserts (1213) is retried here.
    int64_t row_status = 0;
    for (int attempt = 1;; ++attempt) {
      try {
        row_status = pool_.Run("heartbeat", [&](storage::Connection& c) {
          c.Execute(kUpsertHeartbeat, service_name_, node_address_, wanted, json,
                    kMetadataVersion, md.incarnation);
          return c.QueryInt(kSelectStatus, service_name_, node_address_).value_or(wanted);
        });
        break;
      } catch (const DbError& e) {
        if (e.kind() != DbError::Kind::kDeadlock || attempt >= 3) throw;
      }
    }
    status = NodeStatusFromInt(row_status);
  } catch (...) {
    std::lock_guard lock(mu_);
    ++stats_.failures;
    throw;
  }
  bool newly_draining = false;
  {
    std::lock_guard lock(mu_);
    ++stats_.beats;
    if (status == NodeStatus::kDraining && !draining_) {
      draining_ = true;
      newly_draining = true;
    }
  }
  if (newly_draining) {
    spdlog::info("NODE_DRAINING node={} service={} by=operator", node_address_, service_name_);
  }
  return status;
}

void HeartbeatPublisher::Start() {
  std::lock_guard lock(mu_);
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { Loop(stop); });
}

void HeartbeatPublisher::Stop() {
  std::jthread thread;
  {
    std::lock_guard lock(mu_);
    thread = std::move(thread_);
  }
  if (thread.joinable()) {
    thread.request_stop();
    thread.join();
  }
}

void HeartbeatPublisher::Loop(std::stop_token stop) {
  uint64_t failed_in_row = 0;
  do {
    try {
      Beat();
      if (failed_in_row > 0) {
        spdlog::info("HEARTBEAT_RECOVERED node={} service={} failed_beats={}", node_address_,
                     service_name_, failed_in_row);
      }
      failed_in_row = 0;
    } catch (const std::exception& e) {
      ++failed_in_row;
      spdlog::warn("HEARTBEAT_FAILED node={} service={} err={}", node_address_, service_name_,
                   e.what());
    } catch (...) {
      ++failed_in_row;
      spdlog::warn("HEARTBEAT_FAILED node={} service={} err=unknown", node_address_,
                   service_name_);
    }
  } while (clock_.SleepFor(interval_, stop));
}

void HeartbeatPublisher::MarkDraining() {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
  }
  spdlog::info("NODE_DRAINING node={} service={} by=self", node_address_, service_name_);
  Beat();
}

void HeartbeatPublisher::MarkOffline() {
  Stop();
  const std::string incarnation = metadata_().incarnation;
  uint64_t rows = pool_.Transact("mark node offline", [&](storage::Connection& c) {
    return c.Execute(kMarkOffline, service_name_, node_address_, incarnation);
  });
  spdlog::info("NODE_OFFLINE node={} service={} incarnation={} rows={}", node_address_,
               service_name_, incarnation, rows);
}

bool HeartbeatPublisher::draining() {
  std::lock_guard lock(mu_);
  return draining_;
}

HeartbeatStats HeartbeatPublisher::stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace dsync::registry
