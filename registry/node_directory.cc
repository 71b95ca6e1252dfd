#include "registry/node_directory.h"

#include <algorithm>
#include <optional>
#include <utility>

#include <spdlog/spdlog.h>

namespace dsync::registry {
namespace {

// Params: service_name, offline timeout in microseconds (int64).
// uk_service_instance serves both the filter and the order.
constexpr const char* kSelectLiveNodes = R"(
SELECT node_address, status, metadata, TIMESTAMPDIFF(MICROSECOND, last_heartbeat_time, NOW(3)),
       not_claimed_count, CONCAT(LEFT(DATE_FORMAT(last_not_claimed_time, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')
FROM distribute_node_registry
WHERE service_name = ? AND status IN (1, 2)
  AND last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND
ORDER BY node_address)";

// Params: service_name.
constexpr const char* kSelectAllNodes = R"(
SELECT node_address, status, metadata, TIMESTAMPDIFF(MICROSECOND, last_heartbeat_time, NOW(3)),
       not_claimed_count, CONCAT(LEFT(DATE_FORMAT(last_not_claimed_time, '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z')
FROM distribute_node_registry
WHERE service_name = ?
ORDER BY node_address)";

// Params: node_address. By idx_node_liveness (node_address, ...).
constexpr const char* kNoteNotClaimed = R"(
UPDATE distribute_node_registry
SET not_claimed_count = not_claimed_count + 1, last_not_claimed_time = NOW(3)
WHERE node_address = ?)";

// Params: service_name, node_address, offline timeout in microseconds. A live row of
// that address (as kSelectLiveNodes judges), by uk_service_instance.
constexpr const char* kSelectLiveHolder = R"(
SELECT metadata, TIMESTAMPDIFF(MICROSECOND, last_heartbeat_time, NOW(3))
FROM distribute_node_registry
WHERE service_name = ? AND node_address = ? AND status IN (1, 2)
  AND last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND)";

struct RawRow {
  std::string node_address;
  int64_t status = 0;
  std::optional<std::string> metadata;
  int64_t age_us = 0;
  int64_t not_claimed_count = 0;
  std::string last_not_claimed_time;
};

}  // namespace

const char* LiveNodesSql() { return kSelectLiveNodes; }

void NoteNotClaimed(storage::Connection& c, const std::string& node_address) {
  c.Execute(kNoteNotClaimed, node_address);
}

std::optional<LiveHolder> ReadLiveHolder(storage::Connection& c, const std::string& service,
                                         const std::string& node_address, Millis offline_timeout) {
  auto rs = c.Query(kSelectLiveHolder, service, node_address, static_cast<int64_t>(offline_timeout.count()) * 1000);
  if (!rs->next()) return std::nullopt;
  std::optional<std::string> metadata;
  if (!rs->isNull(1)) metadata = rs->getString(1);
  LiveHolder h;
  h.metadata = ParseNodeMetadata(metadata).metadata;
  h.heartbeat_age = Millis(rs->getInt64(2) / 1000);
  return h;
}

NodeDirectory::NodeDirectory(storage::ConnectionPool& pool, std::string service_name,
                             Millis offline_timeout)
    : pool_(pool), service_name_(std::move(service_name)), offline_timeout_(offline_timeout) {}

std::vector<NodeInfo> NodeDirectory::LiveNodes() { return Read(/*live_only=*/true); }

std::vector<NodeInfo> NodeDirectory::AllNodes() { return Read(/*live_only=*/false); }

std::vector<NodeInfo> NodeDirectory::Read(bool live_only) {
  const int64_t timeout_us = static_cast<int64_t>(offline_timeout_.count()) * 1000;
  std::vector<RawRow> rows = pool_.Run("read node registry", [&](storage::Connection& c) {
    std::vector<RawRow> out;  // fresh on every (retried) attempt
    auto rs = live_only ? c.Query(kSelectLiveNodes, service_name_, timeout_us)
                        : c.Query(kSelectAllNodes, service_name_);
    while (rs->next()) {
      RawRow r;
      r.node_address = rs->getString(1);
      r.status = rs->getInt(2);
      if (!rs->isNull(3)) r.metadata = std::string(rs->getString(3));
      r.age_us = rs->isNull(4) ? 0 : rs->getInt64(4);
      r.not_claimed_count = rs->getInt64(5);
      if (!rs->isNull(6)) r.last_not_claimed_time = rs->getString(6);
      out.push_back(std::move(r));
    }
    return out;
  });

  std::vector<NodeInfo> nodes;
  nodes.reserve(rows.size());
  for (auto& r : rows) {
    ParsedMetadata parsed = ParseNodeMetadata(r.metadata);
    NodeInfo n;
    n.node_address = std::move(r.node_address);
    n.status = NodeStatusFromInt(r.status);
    n.metadata = std::move(parsed.metadata);
    n.metadata_valid = !parsed.problem.has_value();
    // The heartbeat may be committed a moment after this statement's NOW(3).
    n.heartbeat_age = Millis(std::max<int64_t>(0, r.age_us / 1000));
    n.not_claimed_count = r.not_claimed_count;
    n.last_not_claimed_time = std::move(r.last_not_claimed_time);

    // Reported once per (node, problem), not per metadata text: the text changes with
    // every beat (load figures), the problem does not. A node that becomes valid
    // again is forgotten, so a later relapse is reported again.
    const std::string prefix = n.node_address + '\n';
    bool report = false;
    {
      std::lock_guard lock(mu_);
      if (parsed.problem) {
        report = warned_.insert(prefix + *parsed.problem).second;
      } else {
        auto it = warned_.lower_bound(prefix);
        while (it != warned_.end() && it->compare(0, prefix.size(), prefix) == 0) {
          it = warned_.erase(it);
        }
      }
    }
    if (report) {
      spdlog::warn("NODE_METADATA_INVALID node={} service={} problem={}", n.node_address,
                   service_name_, *parsed.problem);
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

}  // namespace dsync::registry
