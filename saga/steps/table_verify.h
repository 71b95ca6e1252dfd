// Verify and repair: does the target hold exactly the source's rows of one table and
// filter, and which keys differ (DESIGN.md "CONTRACT: second-round additions").
//
// CompareTable walks the source's rows matching the filter in primary-key order, a key
// range (lo, hi] at a time (sized by table::ChunkSizer toward 0.5 s per range; with a
// key of one integer column the ranges are key spans, table::KeySpanRanges), and
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
//   TableDiff d = CompareTable(datasources, check, payload, {});   // throws VerifyInputError, DbError
//   d.equal(); d.ToJson(100);
//
// The step types built here:
//   table_verify  (the keys of table_sync): Execute compares; any difference is a
//                 permanent failure naming the counts and the first keys, so a plan
//                 "sync, then verify" compensates the sync when they differ. Nothing
//                 to compensate.
//   table_repair  (no keys): syncs exactly the keys listed in the event payload
//                 (RepairPayload below) by running a configured table_sync step,
//                 exactly as the config has it, with its filter narrowed to
//                 "(where) AND (key IN (...))" (MakeKeyedTableSyncStep): missing and
//                 different rows are upserted, extra rows deleted only when that
//                 step has delete_missing, with table_sync's chunk records, so
//                 compensation restores the target exactly. The payload names a
//                 configured topic and its table_sync step, the values of the
//                 step's where, and the keys: nothing else. Source, target, table,
//                 filter, columns and delete_missing are the step's config, so a
//                 repair event can do at most what an event of that topic would
//                 (a payload naming anything else fails permanently, writing nothing).
//
// Thread safety: handlers are stateless after construction (shared by workers);
// CompareTable uses pools of the given Datasources (thread-safe).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "saga/step_handler.h"
#include "table/sql.h"
#include "table/where.h"

namespace dsync::saga {

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
  table::CompiledWhere where;
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

struct VerifyOptions {
  size_t keep_keys = 100;  // keys kept per list (the totals count them all)
  std::stop_token stop;    // checked between ranges
};

struct TableDiff {
  std::string step, table, source, target, where;
  std::vector<std::string> key_columns;
  std::vector<table::ColumnKind> key_kinds;
  int64_t source_rows = 0, target_rows = 0, chunks = 0, chunks_differing = 0;
  int64_t missing_total = 0, extra_total = 0, different_total = 0;
  std::vector<table::Row> missing, extra, different;  // the first keep_keys of each, in key order

  bool equal() const { return missing_total == 0 && extra_total == 0 && different_total == 0; }
  // A key as a JSON array of its values in key order (integers as numbers).
  nlohmann::json KeyJson(const table::Row& key) const;
  // {"table", "source_rows", "target_rows", "missing_in_target": [keys],
  //  "extra_in_target": [keys], "different": [keys], "chunks", "chunks_differing",
  //  "missing_in_target_total", "extra_in_target_total", "different_total",
  //  "step"?, "source", "target", "where"}; lists cut at `max_keys`.
  nlohmann::json ToJson(size_t max_keys) const;
};

// Compares `check` with the filter's :names bound from `values` (the event payload, or
// --params). Throws VerifyInputError, UsageError (unknown datasource), DbError.
TableDiff CompareTable(Datasources& datasources, const TableCheck& check, const nlohmann::json& values,
                       const VerifyOptions& options);

// The largest number of keys one repair event syncs, and of key values (keys times
// key columns: each is a statement parameter of every read of the repair's sync).
constexpr int64_t kMaxRepairKeys = 10000;
constexpr int64_t kMaxRepairKeyValues = 30000;

// What a sync of `check` (the configured table_sync step) writes for `diff`: the one
// answer `dsync verify --plan` prints and a repair event carries, so the plan is
// exactly what --repair does. Missing rows are inserted, different rows updated, and
// extra rows deleted when the step has delete_missing, else kept (a sync leaves them).
struct RepairPlan {
  std::vector<table::Row> insert, update, remove, keep;  // the first keys of each
  int64_t insert_total = 0, update_total = 0, remove_total = 0, keep_total = 0;
  int64_t writes() const { return insert_total + update_total + remove_total; }
  // The keys a repair syncs: insert, update, remove (a complete diff holds them all).
  std::vector<table::Row> Keys() const;
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

std::unique_ptr<StepHandler> MakeTableVerifyStep(const StepSpec& spec);
// `topics`: the configured topics whose table_sync steps repairs may name (the node's
// plans); null or empty: every repair fails permanently, naming why.
std::unique_ptr<StepHandler> MakeTableRepairStep(
    const StepSpec& spec, std::shared_ptr<const std::map<std::string, TopicSettings>> topics = nullptr);

}  // namespace dsync::saga
