#include "table/undo_table.h"

#include "core/json_limits.h"
#include "table/run_context.h"

namespace dsync::table {
namespace {

using nlohmann::json;

// The undo table on a target datasource. Created on first use.
constexpr const char* kCreateUndoSql = R"(
CREATE TABLE IF NOT EXISTS dsync_step_undo (
  step_code      VARCHAR(128) NOT NULL PRIMARY KEY COMMENT 'idempotency key (distribute_event_step.code)',
  step_name      VARCHAR(64)  NOT NULL,
  table_name     VARCHAR(64)  NOT NULL,
  before_image   LONGTEXT     NULL COMMENT 'JSON before-image; NULL only inside the writing transaction',
  created_at     DATETIME(3)  NOT NULL,
  compensated_at DATETIME(3)  NULL,
  KEY idx_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='dsync: before-images of table_sync / table_delete steps')";

// Takes the step's undo row lock, inserting an empty row if there is none, so that
// concurrent runs of one step serialise here.   params: step_code, step_name, table_name
constexpr const char* kLockUndoSql = R"(
INSERT INTO dsync_step_undo (step_code, step_name, table_name, created_at)
VALUES (?, ?, ?, NOW(3))
ON DUPLICATE KEY UPDATE step_code = step_code)";

// The step's undo row, locked.   params: step_code
constexpr const char* kReadUndoSql = R"(
SELECT before_image, compensated_at IS NOT NULL
FROM dsync_step_undo WHERE step_code = ? FOR UPDATE)";

// Records the (merged) before-image of a forward run. A run after a compensation
// starts a new record.   params: before_image, table_name, step_code
constexpr const char* kSaveUndoSql = R"(
UPDATE dsync_step_undo
SET before_image = ?, table_name = ?,
    created_at = IF(compensated_at IS NULL, created_at, NOW(3)), compensated_at = NULL
WHERE step_code = ?)";

// Marks the step compensated (a repeated compensation then does nothing).
//   params: step_code, step_name, table_name
constexpr const char* kMarkCompensatedSql = R"(
INSERT INTO dsync_step_undo (step_code, step_name, table_name, created_at, compensated_at)
VALUES (?, ?, ?, NOW(3), NOW(3))
ON DUPLICATE KEY UPDATE compensated_at = NOW(3))";

// Best-effort retention.   params: days
constexpr const char* kPurgeUndoSql = R"(
DELETE FROM dsync_step_undo WHERE created_at < NOW(3) - INTERVAL ? DAY LIMIT 1000)";

}  // namespace

UndoTable::UndoTable() : TargetTable(kUndoTable, kCreateUndoSql, kPurgeUndoSql, "TABLE_STEP_UNDO_PURGE_FAILED") {}

void LockUndoRow(storage::Connection& c, const std::string& step_code, const std::string& step_name,
                 const std::string& table_name) {
  c.Execute(kLockUndoSql, step_code, step_name, table_name);
}

UndoRecord ReadUndo(storage::Connection& c, const std::string& step_code, const Spec& cfg) {
  UndoRecord r;
  auto rs = c.Query(kReadUndoSql, step_code);
  if (!rs->next()) return r;
  r.exists = true;
  r.compensated = rs->getBoolean(2);
  if (!rs->isNull(1)) {
    try {
      r.image = ParseJsonBounded(std::string(rs->getString(1)), "the undo record");
    } catch (const JsonTooDeepError& e) {
      throw PermanentError(std::string(e.what()) + " (step '" + cfg.step + "', " + cfg.target + "." + kUndoTable + ")");
    } catch (const json::exception&) {
      throw PermanentError("the undo record of step '" + cfg.step + "' in " + cfg.target + "." + kUndoTable +
                           " is not valid JSON");
    }
  }
  return r;
}

void SaveUndo(storage::Connection& c, const std::string& step_code, const std::string& table_name,
              const std::string& before_image) {
  c.Execute(kSaveUndoSql, before_image, table_name, step_code);
}

void MarkUndoCompensated(storage::Connection& c, const std::string& step_code, const std::string& step_name,
                         const std::string& table_name) {
  c.Execute(kMarkCompensatedSql, step_code, step_name, table_name);
}

}  // namespace dsync::table
