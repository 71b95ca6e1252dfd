// table_sync's schema preflight (issue 14 item 5): before its first write, a sync
// compares the source and target definitions of the columns it copies (type,
// nullability, collation) and of the primary key, and fails permanently, naming the
// column, when they differ; a value copied between differing columns would be
// converted, truncated or compared differently, and its byte-exact checksums would
// never agree.
//
//   TableShape s = ReadShape(src_conn, "kb_doc", synced_columns, s_key);
//   TableShape t = ReadShape(tgt_conn, "kb_doc", synced_columns, t_key);
//   if (auto why = CompareShapes(s, "env_a.kb_doc", t, "env_b.kb_doc")) fail(*why);
//
// The target's shape (of every column the before-image holds) and its fingerprint
// are kept with the step (its compensation data and output), so that a compensation
// that later refuses to restore rows can say whether, and how, the table changed
// since the sync (DescribeChange).
//
// Thread safety: value types and pure functions over a connection the caller owns.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/connection.h"

namespace dsync::table {

struct ColumnShape {
  std::string name;
  std::string column_type;  // information_schema COLUMN_TYPE, lower case: "varchar(200)"
  bool nullable = false;
  std::string collation;    // "" for non-character columns
  bool operator==(const ColumnShape& o) const = default;
};

struct TableShape {
  std::vector<ColumnShape> columns;  // in the order asked for
  std::vector<std::string> key;      // primary key columns in index order

  // 16 hex digits (FNV-1a 64 over the canonical JSON form).
  std::string Fingerprint() const;
  // {"columns": [[name, type, nullable, collation], ...], "key": [...]}
  nlohmann::json ToJson() const;
  static std::optional<TableShape> FromJson(const nlohmann::json& j);  // nullopt if malformed
};

// The shape of `columns` of `table` (each must exist; a missing one is left out) in
// the connection's schema; `key` as the caller read it. Throws DbError.
TableShape ReadShape(storage::Connection& c, const std::string& table, const std::vector<std::string>& columns,
                     const std::vector<std::string>& key);

// True when the character columns of `shape` share one collation of an
// ASCII-compatible character set (utf8mb4, utf8mb3/utf8, latin1, ascii): a row hash
// over them needs no CAST per column (ColumnSet::set_plain_text_hash).
bool PlainTextHashable(const TableShape& shape);

// nullopt when equal; else one line naming the first differing column (or the key).
std::optional<std::string> CompareShapes(const TableShape& source, const std::string& source_label,
                                         const TableShape& target, const std::string& target_label);

// What changed from `then` to `now` (same table, two times), one line; "" if nothing.
std::string DescribeChange(const TableShape& then, const TableShape& now);

}  // namespace dsync::table
