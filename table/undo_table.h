// dsync_step_undo: the one undo row per step of table_delete (and of table_sync
// before chunks: a table_sync compensation with such format 1 data still restores from
// it), in the target datasource:
//
//   dsync_step_undo(step_code PK, step_name, table_name, before_image LONGTEXT,
//                   created_at, compensated_at)
//
// created on first use (CREATE TABLE IF NOT EXISTS; the datasource user needs the
// CREATE privilege). Records older than undo_retention_days are purged by later runs
// on the same target (best effort). Every statement on it is here, one function each.
//
// Thread safety: stateless functions; UndoTable as TargetTable.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "storage/connection.h"
#include "table/spec.h"
#include "table/target_table.h"

namespace dsync::table {

constexpr const char* kUndoTable = "dsync_step_undo";

// The table on each target: created on first use, purged by retention.
class UndoTable : public TargetTable {
 public:
  UndoTable();
};

// Takes the step's undo row lock, inserting an empty row if there is none, so that
// concurrent runs of one step serialise here.
void LockUndoRow(storage::Connection& c, const std::string& step_code, const std::string& step_name,
                 const std::string& table_name);

// The undo row of a step, locked by the current transaction.
struct UndoRecord {
  bool exists = false;
  bool compensated = false;
  std::optional<nlohmann::json> image;
};
// Throws PermanentError when the image is not valid JSON (naming `spec`'s step).
UndoRecord ReadUndo(storage::Connection& c, const std::string& step_code, const Spec& spec);

// Records the (merged) before-image of a forward run. A run after a compensation
// starts a new record.
void SaveUndo(storage::Connection& c, const std::string& step_code, const std::string& table_name,
              const std::string& before_image);

// Marks the step compensated (a repeated compensation then does nothing).
void MarkUndoCompensated(storage::Connection& c, const std::string& step_code, const std::string& step_name,
                         const std::string& table_name);

}  // namespace dsync::table
