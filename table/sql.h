// SQL plumbing of the table steps (table_sync, table_delete): table discovery from
// information_schema, exact text encoding of values, run-time-sized statements, and
// the before-image that compensation restores. Internal to table/ (used by the table steps and verify).
//
// Value encoding (a Cell is a text or NULL, exact for every type):
//   - binary, varbinary, *blob, geometry: read HEX(col), written UNHEX(?)  (hex text)
//   - float, double: read natively and printed shortest-round-trip on the client, so
//     exactness does not depend on how the server formats floating point
//   - bit: read CAST(CAST(col AS UNSIGNED) AS CHAR), bound as an unsigned integer
//   - everything else (ints, decimal, date/time with their fractional digits,
//     char/text/enum/set/json): CAST(col AS CHAR), bound as a string; integer
//     columns are bound as integers, decimal keys compared as CAST(? AS DECIMAL(p,s)).
// Sessions are UTC (storage::Connection), so TIMESTAMP text round-trips too.
//
// Statements with a run-time number of values bind them with storage::Values.
//
// Thread safety: value types and pure functions.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/connection.h"

namespace dsync::table {

// `name` as a backticked identifier, its backticks doubled (`a``b`): every table and
// column name of the table steps' SQL goes through it (column names come from
// information_schema and may hold any character).
std::string QuoteIdentifier(std::string_view name);

enum class ColumnKind { kText, kTemporal, kSigned, kUnsigned, kDecimal, kFloat, kBit, kBinary };

struct Column {
  std::string name;
  ColumnKind kind = ColumnKind::kText;
  std::string column_type;  // information_schema COLUMN_TYPE, e.g. "datetime(3)"
  int precision = 0;        // decimal
  int scale = 0;            // decimal
  bool generated = false;   // virtual/stored generated: never written
  bool nullable = true;     // information_schema IS_NULLABLE
};

struct TableSchema {
  std::string label;                // "<datasource>.<table>", for messages
  std::string table;
  std::vector<Column> columns;      // in ordinal order
  std::vector<std::string> key;     // primary key columns in index order; empty: none

  const Column* Find(std::string_view name) const;
  // The columns that can be written (not generated), in ordinal order.
  std::vector<std::string> WritableColumns() const;
};

// Reads the table's columns and primary key from the connection's schema.
// nullopt: no such table. Throws DbError (callers run it in a pool).
std::optional<TableSchema> DescribeTable(storage::Connection& c, const std::string& datasource,
                                         const std::string& table);

using Cell = std::optional<std::string>;
using Row = std::vector<Cell>;

// A value bound to one `?`; lists bind through storage::Values (Bind below).
using SqlValue = storage::Value;
inline storage::ValueList Bind(const std::vector<SqlValue>& values) { return storage::Values(values); }

// A list of columns of one table and the SQL to read, write and match them.
class ColumnSet {
 public:
  // REQUIRES: every name is a column of `schema`.
  ColumnSet(const TableSchema& schema, const std::vector<std::string>& names);

  size_t size() const { return columns_.size(); }
  const Column& at(size_t i) const { return columns_[i]; }
  const std::vector<std::string>& names() const { return names_; }
  int IndexOf(std::string_view name) const;  // -1 if absent

  std::string SelectList() const;                        // "CAST(`a` AS CHAR), HEX(`b`)"
  std::string NameList() const;                          // "`a`, `b`"
  // The row rs is on, one cell per column from its first (floats as the shortest text
  // that reads back as the same double), and every row of rs.
  Row ReadRow(const storage::ResultSet& rs) const;
  std::vector<Row> ReadAll(storage::ResultSet& rs) const;

  // Values of `row` (one cell per column, in order) for an INSERT tuple.
  void AppendValues(const Row& row, std::vector<SqlValue>& out) const;
  std::string ValuesTuple() const;                       // "(?, UNHEX(?))"

  // Matching keys (this set = the key columns), `n` keys:
  //   "`id` IN (?, ?)"  or  "(`a`, `b`) IN ((?, ?), (?, ?))"  ("(`a` = ? AND `b` = ?)" for one key)
  std::string MatchKeys(size_t n) const;
  void AppendKeyValues(const Row& key, std::vector<SqlValue>& out) const;
  // Keyset pagination: rows strictly after `last` in key order.
  std::string AfterKey() const;
  void AppendAfterKeyValues(const Row& last, std::vector<SqlValue>& out) const;
  // The upper end of a key range: rows at or before `last` in key order (values as
  // AppendAfterKeyValues).
  std::string AtOrBeforeKey() const;
  std::string OrderBy() const;                           // "`a`, `b`"
  // CRC32 of a byte-exact encoding of the row's columns (each cast to binary, so
  // case-, pad- and accent-insensitive collations do not hide differences, joined by
  // '|', then one ISNULL flag per column so NULL, '' and 'NULL' differ). An unsigned
  // 32-bit integer; the same text on every datasource for the same column names
  // (unless set_compare_hash or set_plain_text_hash changed it: then for the same calls).
  std::string RowHashExpr() const;
  // The form of RowHashExpr for comparing two datasources as they are now (table_sync's
  // diff, verify); set on both sides alike by UseCompareHash. `nullable` (one flag per
  // column): NULLs are marked only in the flagged columns, as one integer per 62 of them
  // (bit i: the i-th flagged column is NULL), not at all when none is flagged: a third
  // less server CPU per row hash on narrow rows (measured, 1M rows of 5 columns: 0.37 ->
  // 0.26 s). And the byte length of every column that can hold the separator (text,
  // binary, bit) but the last is hashed too, so no '|' can move from one column to
  // another unseen (('a|', 'b') and ('a', '|b') join to the same text). The flagged
  // columns come first; a row without NULLs is hashed from one CONCAT of the same bytes
  // (markers 0), the CONCAT_WS with its markers only for a row holding a NULL. Unset:
  // RowHashExpr keeps the form of the after-image hashes stored in chunk records (one
  // flag per column, no lengths), so records written by earlier versions still compare.
  void set_compare_hash(std::vector<bool> nullable) { compare_hash_ = std::move(nullable); }
  // Columns the compare form leaves out (one flag per column): integer columns the
  // filter pins to one integer on both sides (PinCompareHash).
  void set_compare_pinned(std::vector<bool> pinned) { compare_pinned_ = std::move(pinned); }
  // With `plain`, RowHashExpr hashes the same bytes without a CAST per column: right
  // only when the text columns share one collation of an ASCII-compatible character
  // set on both datasources (PlainTextHashable in table_preflight.h), so CONCAT_WS
  // cannot meet an illegal mix of collations; a binary separator makes the result the
  // columns' own bytes, as the CASTs do. The CASTs cost about 2.5x the whole hash on
  // wide text rows (measured by bench.sh sync's verify line).
  void set_plain_text_hash(bool plain) { plain_text_hash_ = plain; }

 private:
  std::vector<Column> columns_;
  std::vector<std::string> names_;
  bool plain_text_hash_ = false;
  std::optional<std::vector<bool>> compare_hash_;
  std::vector<bool> compare_pinned_;
};

// Sets the compare form of the row hash on two column sets of the same names (source
// and target) alike: a column's NULLs are marked where it is nullable on either side.
void UseCompareHash(ColumnSet& a, ColumnSet& b);

// Leaves `pinned` out of the compare form on both sides: columns that every row of a
// range compared holds one and the same integer in, on either side, because the
// filter on both says "column = <that integer>" (an entity filter: "tenant_id =
// :tenant"). Hashing them would only add the same bytes to every row (measured: an
// INT column is about 8 % of a narrow row's hash). Names not in the sets are ignored;
// when every column would be left out, none is.
void PinCompareHash(ColumnSet& a, ColumnSet& b, const std::set<std::string>& pinned);

// `s` as a T when it is exactly a canonical integer of T's range (all of it, no sign
// for unsigned T, no spaces); nullopt otherwise.
template <class T>
std::optional<T> ParseInt(const std::string& s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// The value a cell binds as for a column of this kind (integers typed).
SqlValue ToSqlValue(const Column& column, const Cell& cell);

// Cells of `row` at `positions`, in that order.
Row Project(const Row& row, const std::vector<int>& positions);
// An injective encoding of a row of cells, for hash maps.
std::string EncodeKey(const Row& key);

// Row counts per statement: `n` rounded up to a power of four (at most `cap`), the
// gap filled by repeating the last row. Repeats are harmless (an upsert of the same
// values, a repeated IN-list entry) and keep the number of distinct prepared
// statements per connection small (the server's max_prepared_stmt_count is global).
size_t PaddedCount(size_t n, size_t cap);

// The next multi-row write of `n` rows left (n >= 1), at most `cap` (a power of four):
// {rows, padded}. Padded as PaddedCount only while `may_pad` and the repeats are at
// most an eighth of the statement, else the largest power of four that fits, unpadded:
// a repeated row in an upsert is a duplicate key the server reads and compares again
// (a chunk of 10,000 rows at 4,096 per statement sent 12,288), and in a plain INSERT
// it is an error.
struct WriteBatch {
  size_t rows = 0, padded = 0;
};
WriteBatch NextWriteBatch(size_t n, size_t cap, bool may_pad = true);

// The before-image of one step: what compensation needs to restore the target
// exactly. JSON form (the step's compensation_data and dsync_step_undo.before_image):
//   {"format": 1, "table": "kb_doc", "columns": [...], "key": [...],
//    "binary": [columns whose cells are hex], "restore": [[cell, ...], ...],
//    "remove": [[key cell, ...], ...]}
// restore: full rows (all writable columns) as they were before the step changed or
// deleted them; remove: keys of rows the step created. Cells are strings or null.
struct Image {
  std::string table;
  std::vector<std::string> columns;
  std::vector<std::string> key;
  std::vector<std::string> binary;
  std::vector<Row> restore;
  std::vector<Row> remove;

  nlohmann::json ToJson() const;
  // Throws std::invalid_argument for anything but the form above.
  static Image FromJson(const nlohmann::json& j);
};

}  // namespace dsync::table
