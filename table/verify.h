// Verify and repair: does the target hold exactly the source's rows of one table and
// filter, and which keys differ (DESIGN.md "CONTRACT: second-round additions").
//
// CompareTable walks the source's rows matching the filter in primary-key order, a key
// range (lo, hi] at a time (sized by ChunkSizer toward 0.5 s per range; with a
// key of one integer column the ranges are key spans, KeySpanRanges), and
// for each range computes the checksum (COUNT and BIT_XOR of each row's CRC32 over a
// byte-exact encoding, table/chunks.h) inside BOTH databases at once; only
// ranges whose checksums differ are drilled into, by key and row hash on both sides.
// The last range is open-ended, so target rows after the source's last key count too.
// A table whose estimated size (information_schema TABLE_ROWS of the source) is at most
// 2M rows is first compared whole, in one checksum statement per side: equal tables,
// the usual answer, then cost one scan of each side (chunks = 1), and only a differing
// one is walked range by range.
// Source and target are separate datasources (pools): two schemas of one server or two
// independent servers alike. No row leaves a database except the keys of differing
// rows. Rows written while a verify runs may show as differences (no snapshot spans
// two servers); run it again to confirm.
//
//   TableCheck check = ParseTableCheck(spec, "table_verify");      // a step's keys
//   TableDiff d = CompareTable(src, tgt, check, payload, {}, clock); // throws VerifyInputError, DbError
//   d.equal(); d.ToJson(100);
//   RepairPayload(topic, check, payload, d);   // a table_repair event (saga/steps/table_verify.h)
//
// Thread safety: CompareTable uses the given pools (thread-safe); the rest is pure.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "core/clock.h"
#include "storage/connection_pool.h"
#include "table/sql.h"
#include "table/where.h"

namespace dsync::table {

// Bad input found when comparing: a missing table or column, a payload or params value
// the filter cannot bind. One line.
class VerifyInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What to compare: the keys of a table_sync or table_verify step.
struct TableCheck {
  std::string step;  // step name ("" for a table named on the command line)
  std::string source, target, table, where_text;
  CompiledWhere where;
  std::vector<std::string> columns;  // empty: every column present in both (as table_sync)
  int chunk_size = 100000;           // the largest range, in rows
  bool delete_missing = false;       // the sync's: with it a sync deletes extra rows
  bool like_patterns = false;        // the sync's: payload values bound into LIKE are patterns
};

// The keys of table_sync (source, target, table, where, chunk_size, columns,
// delete_missing, undo_retention_days). Throws ConfigError
// ("config: step 'docs' (table_verify): <reason>").
TableCheck ParseTableCheck(const StepSpec& spec, const char* type);

// A check of one table named directly (the command line and POST /v1/verify).
// Throws VerifyInputError (bad names, a where outside the grammar).
TableCheck MakeTableCheck(const std::string& source, const std::string& target, const std::string& table,
                          const std::string& where, const std::vector<std::string>& columns = {});

// The table `name` on `datasource`; VerifyInputError when it does not exist.
TableSchema DescribeForCheck(storage::ConnectionPool& pool, const std::string& datasource, const std::string& name);

struct VerifyOptions {
  size_t keep_keys = 100;  // keys kept per list (the totals count them all)
  std::stop_token stop;    // checked between ranges
};

struct TableDiff {
  std::string step, table, source, target, where;
  std::vector<std::string> key_columns;
  std::vector<ColumnKind> key_kinds;
  int64_t source_rows = 0, target_rows = 0, chunks = 0, chunks_differing = 0;
  int64_t missing_total = 0, extra_total = 0, different_total = 0;
  std::vector<Row> missing, extra, different;  // the first keep_keys of each, in key order

  bool equal() const { return missing_total == 0 && extra_total == 0 && different_total == 0; }
  // A key as a JSON array of its values in key order (integers as numbers).
  nlohmann::json KeyJson(const Row& key) const;
  // {"table", "source_rows", "target_rows", "missing_in_target": [keys],
  //  "extra_in_target": [keys], "different": [keys], "chunks", "chunks_differing",
  //  "missing_in_target_total", "extra_in_target_total", "different_total",
  //  "step"?, "source", "target", "where"}; lists cut at `max_keys`.
  nlohmann::json ToJson(size_t max_keys) const;
};

// Compares `check` on the pools of its source and target, with the filter's :names
// bound from `values` (the event payload, or --params); `clock` times the ranges.
// Throws VerifyInputError, DbError.
TableDiff CompareTable(storage::ConnectionPool& src, storage::ConnectionPool& tgt, const TableCheck& check,
                       const nlohmann::json& values, const VerifyOptions& options, Clock& clock);

// The largest number of keys one repair event syncs, and of key values (keys times
// key columns: each is a statement parameter of every read of the repair's sync).
constexpr int64_t kMaxRepairKeys = 10000;
constexpr int64_t kMaxRepairKeyValues = 30000;

// What a sync of `check` (the configured table_sync step) writes for `diff`: the one
// answer `dsync verify --plan` prints and a repair event carries, so the plan is
// exactly what --repair does. Missing rows are inserted, different rows updated, and
// extra rows deleted when the step has delete_missing, else kept (a sync leaves them).
struct RepairPlan {
  std::vector<Row> insert, update, remove, keep;  // the first keys of each
  int64_t insert_total = 0, update_total = 0, remove_total = 0, keep_total = 0;
  int64_t writes() const { return insert_total + update_total + remove_total; }
  // The keys a repair syncs: insert, update, remove (a complete diff holds them all).
  std::vector<Row> Keys() const;
};
RepairPlan PlanRepair(const TableCheck& check, const TableDiff& diff);

// The payload of a table_repair event for `diff` of `topic`'s step check.step (the
// diff must hold every differing key: compare with keep_keys >= kMaxRepairKeys):
// {"topic", "step", "payload": {the where's fields from `values`}, "keys": [[...],
// ...]}, the keys of PlanRepair. Throws VerifyInputError when there are more than
// kMaxRepairKeys keys (or kMaxRepairKeyValues values), a key column is binary, or the
// check is not a configured step (check.step empty).
nlohmann::json RepairPayload(const std::string& topic, const TableCheck& check, const nlohmann::json& values,
                             const TableDiff& diff);

}  // namespace dsync::table
