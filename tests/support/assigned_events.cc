#include "tests/support/assigned_events.h"

#include <limits>

#include "events/poll.h"
#include "events/rows.h"

namespace dsync::testing {

std::vector<saga::AssignedEvent> PollAssigned(storage::ConnectionPool& pool, const std::string& node,
                                              const std::string& service) {
  return pool.Run("poll", [&](storage::Connection& c) {
    std::vector<saga::AssignedEvent> out =
        events::PollAssigned(c, events::NodeKey{service, node}, std::numeric_limits<int>::max());
    for (auto& e : out) e.assigned_age = std::chrono::microseconds(-1);  // latency not observed
    return out;
  });
}

saga::AssignedEvent LoadAssigned(storage::ConnectionPool& pool, const std::string& code) {
  std::optional<events::EventRow> row =
      pool.Run("load event", [&](storage::Connection& c) { return events::ReadEvent(c, code); });
  saga::AssignedEvent e;
  if (!row) return e;
  e.id = row->id;
  e.code = row->code;
  e.tenant_id = row->tenant_id;
  e.data_id = row->data_id;
  e.topic = row->topic;
  e.payload = row->payload;
  e.phase = row->phase;
  e.trace_id = row->trace_id;
  e.version = row->version;
  e.attempt = row->attempt;
  e.retry_count = row->retry_count;
  e.reset_count = row->reset_count;
  return e;
}

}  // namespace dsync::testing
