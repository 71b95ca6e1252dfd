#include "dispatcher/event_reset.h"

namespace dsync::dispatcher {
namespace {

// Params: last_error, retry_count increment, id, version, status.
constexpr const char* kResetEvent = R"(
UPDATE distribute_event
SET status = 'PENDING', node_address = NULL, version = version + 1, next_run_time = NOW(3),
    last_error = ?, retry_count = retry_count + ?
WHERE id = ? AND version = ? AND status = ?)";

// Params: as kResetEvent, then the idle time in microseconds.
constexpr const char* kResetIdleEvent = R"(
UPDATE distribute_event
SET status = 'PENDING', node_address = NULL, version = version + 1, next_run_time = NOW(3),
    last_error = ?, retry_count = retry_count + ?
WHERE id = ? AND version = ? AND status = ?
  AND modifier_time < NOW(3) - INTERVAL ? MICROSECOND)";

}  // namespace

bool ResetEvent(storage::Connection& c, const HeldEvent& e, const std::string& why,
                std::optional<Millis> idle_for) {
  const int retry = e.status == "RUNNING" ? 1 : 0;
  uint64_t rows = idle_for ? c.Execute(kResetIdleEvent, why, retry, e.id, e.version, e.status,
                                       static_cast<int64_t>(idle_for->count()) * 1000)
                           : c.Execute(kResetEvent, why, retry, e.id, e.version, e.status);
  return rows == 1;
}

}  // namespace dsync::dispatcher
