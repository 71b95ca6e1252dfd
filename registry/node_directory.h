// Reads the live nodes of a service with their parsed metadata: the dispatcher's
// view of who can take work, and `dsync nodes`.
//
// A node is live when status is 1 (online) or 2 (draining; reported, but callers
// give it no new work) and its heartbeat is within the offline timeout by the
// database clock. A row whose metadata is missing or malformed is treated as
// capacity 1 serving every topic, logged once per node and problem
// (NODE_METADATA_INVALID), and never breaks the read.
//
// Thread safety: thread-safe.
#pragma once

#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "registry/heartbeat_publisher.h"
#include "registry/node_metadata.h"
#include "storage/connection_pool.h"

namespace dsync::registry {

struct NodeInfo {
  std::string node_address;
  NodeStatus status = NodeStatus::kOnline;
  NodeMetadata metadata;
  bool metadata_valid = true;
  Millis heartbeat_age{0};  // NOW(3) - last_heartbeat_time on the database clock
  // Events the sweeper handed back because this node did not claim them (V010), and
  // when it last did ("" when never).
  int64_t not_claimed_count = 0;
  std::string last_not_claimed_time;
};

// Counts one hand-back of an event `node_address` did not claim on every registry row
// of that address. Throws DbError (run it inside ConnectionPool::Run / Transact).
void NoteNotClaimed(storage::Connection& c, const std::string& node_address);

// The process holding a node address now: its registry row in `service` is live
// (status 1 or 2, heartbeat within `offline_timeout` by the database clock).
struct LiveHolder {
  NodeMetadata metadata;    // host, pid, incarnation as its last beat wrote them
  Millis heartbeat_age{0};
};
// nullopt when no live row holds the address. Throws DbError.
std::optional<LiveHolder> ReadLiveHolder(storage::Connection& c, const std::string& service,
                                         const std::string& node_address, Millis offline_timeout);

// The live-node SELECT, for bench/dispatch_bench.cc's EXPLAIN. Params: service,
// offline timeout (µs).
const char* LiveNodesSql();

class NodeDirectory {
 public:
  NodeDirectory(storage::ConnectionPool& pool, std::string service_name, Millis offline_timeout);

  // Live nodes (status 1 or 2, heartbeat fresh), ordered by node_address. Throws DbError.
  std::vector<NodeInfo> LiveNodes();
  // Every row of the service, live or not (for `dsync nodes --all`). Throws DbError.
  std::vector<NodeInfo> AllNodes();

 private:
  std::vector<NodeInfo> Read(bool live_only);

  storage::ConnectionPool& pool_;
  const std::string service_name_;
  const Millis offline_timeout_;
  std::mutex mu_;
  std::set<std::string> warned_;  // node_address + "\n" + problem already reported
};

}  // namespace dsync::registry
