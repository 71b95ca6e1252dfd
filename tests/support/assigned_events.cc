#include "tests/support/assigned_events.h"

#include "consumer/consumer_node.h"

namespace dsync::testing {

std::vector<saga::AssignedEvent> PollAssigned(storage::ConnectionPool& pool, const std::string& node) {
  return pool.Run("poll", [&](storage::Connection& c) {
    auto rs = c.Query("SELECT id, code, tenant_id, data_id, topic, payload, phase, "
                      "COALESCE(trace_id, ''), version, attempt, retry_count "
                      "FROM distribute_event WHERE status = 'ASSIGNED' AND node_address = ? ORDER BY id",
                      node);
    std::vector<saga::AssignedEvent> out;
    while (rs->next()) out.push_back(consumer::ReadAssignedEvent(*rs));
    return out;
  });
}

}  // namespace dsync::testing
