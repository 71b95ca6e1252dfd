#include "events/poll.h"

#include <algorithm>

namespace dsync::events {
namespace {

// Params: node_address, service, served topics (comma list; '' for every topic) twice, limit.
// The events assigned here and not yet claimed; uses idx_node_address (node_address,
// status). The last column, the assignment's age on the database clock, feeds the
// claim-latency metric (NULL: assigned by hand).
constexpr const char* kSelectAssigned = R"(
SELECT id, code, tenant_id, data_id, topic, payload, phase, COALESCE(trace_id, ''),
       version, attempt, retry_count, TIMESTAMPDIFF(MICROSECOND, assigned_time, NOW(3))
FROM distribute_event
WHERE node_address = ? AND status = 'ASSIGNED' AND service = ? AND (? = '' OR FIND_IN_SET(topic, ?) > 0)
ORDER BY id
LIMIT ?)";

}  // namespace

std::vector<AssignedEvent> PollAssigned(storage::Connection& c, const NodeKey& node, int limit,
                                        const std::set<int64_t>& skip, const std::string& topics) {
  std::vector<AssignedEvent> out;
  auto rs = c.Query(kSelectAssigned, node.address, node.service, topics, topics, limit);
  while (rs->next()) {
    if (skip.count(rs->getInt64(1))) continue;
    AssignedEvent e;
    e.id = rs->getInt64(1);
    e.code = rs->getString(2);
    e.tenant_id = rs->getString(3);
    e.data_id = rs->getString(4);
    e.topic = rs->getString(5);
    e.payload = rs->isNull(6) ? "" : rs->getString(6);
    e.phase = rs->getString(7);
    e.trace_id = rs->getString(8);
    e.version = rs->getInt(9);
    e.attempt = rs->getInt(10);
    e.retry_count = rs->getInt(11);
    if (!rs->isNull(12)) e.assigned_age = std::chrono::microseconds(std::max<int64_t>(0, rs->getInt64(12)));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace dsync::events
