// Publishes this node's liveness and load into distribute_node_registry.
//
// Each beat is one upsert keyed by uk_service_instance (service_name, node_address):
//
//   INSERT INTO distribute_node_registry (service_name, node_address, status,
//       last_heartbeat_time, metadata, metadata_version, incarnation)
//   VALUES (?, ?, ?, NOW(3), ?, ?, ?)
//   ON DUPLICATE KEY UPDATE ...
//
// last_heartbeat_time is the database clock, so liveness never compares machine
// clocks. Draining (status 2) is sticky within one incarnation: once this process
// (or an operator, `dsync drain`) marks the node draining, later beats of the same
// process keep it 2; a new process under the same address starts online again.
// Beat() returns the status the row holds afterwards, so a node learns of an
// operator's drain at its next beat.
//
// Start() runs beats every `interval` on a background thread; a failed beat is
// logged (HEARTBEAT_FAILED) and retried at the next tick, never fatal. Metadata
// comes from a callback so load figures are current at each beat.
//
// Thread safety: all public methods are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "registry/node_metadata.h"
#include "storage/connection_pool.h"

namespace dsync::registry {

// distribute_node_registry.status.
enum class NodeStatus : int { kOffline = 0, kOnline = 1, kDraining = 2 };

// An unknown number reads as online: the column only ever holds 0, 1 or 2.
inline NodeStatus NodeStatusFromInt(int64_t v) {
  return v == 0 ? NodeStatus::kOffline : v == 2 ? NodeStatus::kDraining : NodeStatus::kOnline;
}
inline const char* NodeStatusName(NodeStatus s) {
  return s == NodeStatus::kOffline ? "offline" : s == NodeStatus::kDraining ? "draining" : "online";
}

struct HeartbeatStats {
  uint64_t beats = 0;
  uint64_t failures = 0;
};

class HeartbeatPublisher {
 public:
  using MetadataSource = std::function<NodeMetadata()>;

  HeartbeatPublisher(storage::ConnectionPool& pool, Clock& clock, std::string service_name,
                     std::string node_address, Millis interval, MetadataSource metadata);
  ~HeartbeatPublisher();  // Stop()s

  // One beat now. Returns the row's status after the beat. Throws DbError.
  NodeStatus Beat();
  // Beats at once, then every interval, until Stop().
  void Start();
  void Stop();

  // From now on beats write status 2 (draining); beats at once. Throws DbError.
  void MarkDraining();
  // Final beat of a graceful shutdown: status 0, guarded by this incarnation so a
  // newer process under the same address is never marked offline. Stops the
  // background beats first (a later beat would bring the node back online).
  // Throws DbError.
  void MarkOffline();

  // True once MarkDraining() ran or a beat found the row draining (an operator's
  // drain): the node should take no new work.
  bool draining();
  HeartbeatStats stats();
  const std::string& node_address() const { return node_address_; }

 private:
  void Loop(std::stop_token stop);

  storage::ConnectionPool& pool_;
  Clock& clock_;
  const std::string service_name_;
  const std::string node_address_;
  const Millis interval_;
  MetadataSource metadata_;

  std::mutex mu_;
  bool draining_ = false;
  HeartbeatStats stats_;
  std::jthread thread_;
};

}  // namespace dsync::registry
