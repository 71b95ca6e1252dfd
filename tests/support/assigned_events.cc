#include "tests/support/assigned_events.h"

#include <limits>

#include "events/poll.h"

namespace dsync::testing {

std::vector<saga::AssignedEvent> PollAssigned(storage::ConnectionPool& pool, const std::string& node) {
  return pool.Run("poll", [&](storage::Connection& c) {
    std::vector<saga::AssignedEvent> out =
        events::PollAssigned(c, node, std::numeric_limits<int>::max());
    for (auto& e : out) e.assigned_age = std::chrono::microseconds(-1);  // latency not observed
    return out;
  });
}

}  // namespace dsync::testing
