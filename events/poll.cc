#include "events/poll.h"

#include <algorithm>

#include "events/columns.h"
#include "events/status.h"

namespace dsync::events {
namespace {

// Params: node_address, service, served topics (comma list; '' for every topic) twice, limit.
// The events assigned here and not yet claimed; uses idx_node_address (node_address,
// status). The last column, the assignment's age on the database clock, feeds the
// claim-latency metric (NULL: assigned by hand).
constexpr const char* kSelectAssigned = R"(
SELECT id, code, tenant_id, data_id, topic, payload, phase, COALESCE(trace_id, ''),
       version, attempt, retry_count, reset_count, TIMESTAMPDIFF(MICROSECOND, assigned_time, NOW(3))
FROM distribute_event
WHERE node_address = ? AND status = )" DSYNC_SQL_STATUS(ASSIGNED) R"( AND service = ? AND (? = '' OR FIND_IN_SET(topic, ?) > 0)
ORDER BY id
LIMIT ?)";

}  // namespace

std::vector<AssignedEvent> PollAssigned(storage::Connection& c, const NodeKey& node, int limit,
                                        const std::set<int64_t>& skip, const std::string& topics) {
  std::vector<AssignedEvent> out;
  auto rs = c.Query(kSelectAssigned, node.address, node.service, topics, topics, limit);
  while (rs->next()) {
    Columns col(*rs);
    const int64_t id = col.Int64();
    if (skip.count(id)) continue;
    AssignedEvent e{.id = id, .code = col.String(), .tenant_id = col.String(), .data_id = col.String(),
                    .topic = col.String(), .payload = col.String(), .phase = col.String(),
                    .trace_id = col.String(), .version = col.Int(), .attempt = col.Int(),
                    .retry_count = col.Int(), .reset_count = col.Int()};
    if (auto age_us = col.OptionalInt64()) e.assigned_age = std::chrono::microseconds(std::max<int64_t>(0, *age_us));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace dsync::events
