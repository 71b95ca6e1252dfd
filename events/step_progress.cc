#include "events/step_progress.h"

#include "events/status.h"

namespace dsync::events {
namespace {

// The step's running output, fenced by the event's claimed version.
//   params: output, step code, event id, version
constexpr const char* kWriteStepProgressSql = R"(
UPDATE distribute_event_step SET output = ?
WHERE code = ? AND status IN ()" DSYNC_SQL_STATUS(EXECUTING) R"(, )" DSYNC_SQL_STATUS(COMPENSATING) R"()
  AND EXISTS (SELECT 1 FROM distribute_event WHERE id = ? AND version = ?))";

// The owner's heartbeat: the event's last activity, fenced by the claimed version, so
// the sweeper does not take a long step for a stuck one (max_processing_time_ms
// counts from the last activity).   params: event id, version
constexpr const char* kTouchRunningEventSql = R"(
UPDATE distribute_event SET modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status IN )" DSYNC_SQL_CLAIMED R"()";

}  // namespace

bool WriteStepProgress(storage::ConnectionPool& pool, const std::string& step_code, int64_t event_id,
                       int version, const nlohmann::json& progress) {
  const std::string text = progress.dump();
  return pool.Run("step progress", [&](storage::Connection& c) {
    if (c.Execute(kTouchRunningEventSql, event_id, static_cast<long long>(version)) != 1) return false;
    return c.Execute(kWriteStepProgressSql, text, step_code, event_id, static_cast<long long>(version)) == 1;
  });
}

}  // namespace dsync::events
