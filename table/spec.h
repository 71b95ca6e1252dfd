// The configuration of one table_sync or table_delete step (README.md "Built-in
// steps"; the keys are documented atop saga/steps/table_steps.h), parsed and checked
// once, when the plan is loaded: anything else is a ConfigError naming the step.
//
//   table::Spec s = table::ParseSpec(step_spec, /*sync=*/true);   // throws ConfigError
//   table::NarrowToKeys(s, {"id"}, 3);   // table_repair: only keys dsync_k0_0 .. dsync_k2_0
//
// Thread safety: a Spec is immutable once parsed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/settings.h"
#include "table/where.h"

namespace dsync::table {

// What compensation does with rows someone else changed since the sync wrote them.
enum class OnConflict { kFail, kSkip, kOverwrite };
const char* OnConflictName(OnConflict o);

constexpr int kDefaultDeleteChunkSize = 500;  // table_delete: rows per read and write statement
constexpr int kDefaultSyncChunkSize = 10000;  // table_sync: the largest chunk that holds its rows
constexpr int kMaxChunkSize = 100000;
// table_delete's ceiling: a filter matching more rows than this fails, deleting none.
constexpr int kDefaultDeleteMaxRows = 10000;
constexpr int kMaxDeleteMaxRows = 10000000;
constexpr int kDefaultUndoRetentionDays = 7;
// table_sync lanes: key ranges of one step worked at once (table/planner.h).
constexpr int kDefaultLanes = 2;
constexpr int kMaxLanes = 16;

struct Spec {
  std::string type;   // table_sync | table_delete
  std::string step;   // step name, for messages
  std::string source;
  std::string target;
  std::string table;
  std::string where_text;
  CompiledWhere where;
  int chunk_size = kDefaultDeleteChunkSize;
  std::vector<std::string> columns;
  bool delete_missing = false;
  OnConflict on_conflict = OnConflict::kFail;
  int undo_retention_days = kDefaultUndoRetentionDays;
  int lanes = kDefaultLanes;  // table_sync: key ranges worked at once
  bool like_patterns = false;  // payload values bound into LIKE are patterns
  int64_t max_rows = kDefaultDeleteMaxRows;  // table_delete: the most rows one run deletes

  // "table_sync <step>: <action>": a unit of work's name in errors and logs.
  std::string What(std::string_view action) const { return type + " " + step + ": " + std::string(action); }
};

// A table_sync (`sync`) or table_delete step's params. Throws ConfigError
// ("config: step 'docs' (table_sync): <reason>").
Spec ParseSpec(const StepSpec& spec, bool sync);

// table_repair's sync: restricts a table_sync spec to `keys` keys of its table's
// primary key `key_columns`: its filter becomes "(where) AND (key IN (k0, k1, ...))"
// ("(a, b) IN ((a0, b0), ...)" for a composite key, "a = a0 AND b = b0" for one of
// them), the i-th key's j-th value bound from the payload field RepairKeyField(i, j),
// beside the where's own fields. Built from the compiled filter, not from text: no text
// or placeholder limit of the where grammar applies to the keys. Throws ConfigError.
void NarrowToKeys(Spec& spec, const std::vector<std::string>& key_columns, size_t keys);
std::string RepairKeyField(size_t key, size_t column);  // "dsync_k<key>_<column>"

}  // namespace dsync::table
