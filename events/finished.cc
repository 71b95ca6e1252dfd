#include "events/finished.h"
#include "events/status.h"

namespace dsync::events {
namespace {

// Params: result, code. Only a row this call inserted (PENDING, never assigned) moves.
constexpr const char* kFinish =
    "UPDATE distribute_event SET status = " DSYNC_SQL_STATUS(SUCCESS) ", fair_pending = 0, result = ?, finished_time = NOW(3) "
    "WHERE code = ? AND status = " DSYNC_SQL_STATUS(PENDING) " AND node_address IS NULL";

}  // namespace

bool RecordFinishedEvent(storage::Connection& c, const NewEventRow& e, const std::vector<NewStep>& steps,
                         const std::string& result, const std::string& node) {
  if (!InsertEvent(c, e)) return false;
  if (c.Execute(kFinish, result, e.code) != 1) {
    throw DbError(DbError::Kind::kOther, 0, "event " + e.code + " changed while it was being recorded");
  }
  InsertSteps(c, steps, node, /*attempt=*/1);
  return true;
}

std::string StatusOfEvent(storage::Connection& c, const std::string& code) {
  auto rs = c.Query("SELECT status FROM distribute_event WHERE code = ?", code);
  return rs->next() ? rs->getString(1) : std::string();
}

}  // namespace dsync::events
