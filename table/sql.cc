#include "table/sql.h"

#include <algorithm>
#include <charconv>
#include <set>
#include <stdexcept>

namespace dsync::table {

std::string QuoteIdentifier(std::string_view name) {
  std::string out = "`";
  for (char c : name) {
    if (c == '`') out += '`';
    out += c;
  }
  return out + "`";
}

namespace {

// SELECT: one row per column of the table, in ordinal order.
//   param: table name
constexpr const char* kDescribeColumnsSql = R"(
SELECT COLUMN_NAME, LOWER(DATA_TYPE), LOWER(COLUMN_TYPE), COALESCE(NUMERIC_PRECISION, 0),
       COALESCE(NUMERIC_SCALE, 0), COALESCE(GENERATION_EXPRESSION, ''), IS_NULLABLE = 'YES'
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
ORDER BY ORDINAL_POSITION)";

// SELECT: the primary key columns in index order.
//   param: table name
constexpr const char* kDescribeKeySql = R"(
SELECT COLUMN_NAME
FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY'
ORDER BY ORDINAL_POSITION)";

ColumnKind KindOf(const std::string& data_type, const std::string& column_type) {
  static const std::set<std::string> kInts = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"};
  static const std::set<std::string> kTemporal = {"date", "time", "datetime", "timestamp", "year"};
  static const std::set<std::string> kBinary = {
      "binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
      "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
      "geometrycollection", "geomcollection"};
  if (kInts.count(data_type)) {
    return column_type.find("unsigned") != std::string::npos ? ColumnKind::kUnsigned : ColumnKind::kSigned;
  }
  if (data_type == "decimal" || data_type == "numeric") return ColumnKind::kDecimal;
  if (data_type == "float" || data_type == "double" || data_type == "real") return ColumnKind::kFloat;
  if (data_type == "bit") return ColumnKind::kBit;
  if (kTemporal.count(data_type)) return ColumnKind::kTemporal;
  if (kBinary.count(data_type)) return ColumnKind::kBinary;
  return ColumnKind::kText;  // char, varchar, *text, enum, set, json, uuid, inet6, ...
}

// How a column is selected to be read into a Row's text (ColumnSet::ReadRow). Integers
// come as they are and are written as decimal text here: the server sends 8 bytes
// instead of formatting a string (a re-sync of 1M narrow rows with 1 % changed, which
// reads every key with its row hash: server CPU 1.09-1.17 s against 1.19-1.25 s).
std::string ReadExpr(const Column& c) {
  switch (c.kind) {
    case ColumnKind::kBinary: return "HEX(" + QuoteIdentifier(c.name) + ")";
    case ColumnKind::kFloat:
    case ColumnKind::kSigned:
    case ColumnKind::kUnsigned: return QuoteIdentifier(c.name);
    case ColumnKind::kBit: return "CAST(CAST(" + QuoteIdentifier(c.name) + " AS UNSIGNED) AS CHAR)";
    default: return "CAST(" + QuoteIdentifier(c.name) + " AS CHAR)";
  }
}

// The placeholder for a value written into the column.
std::string WriteSlot(const Column& c) {
  return c.kind == ColumnKind::kBinary ? "UNHEX(?)" : "?";
}

// The placeholder for a value compared with the column (same type semantics on
// MariaDB and MySQL: decimals compared as decimals, not doubles).
std::string CompareSlot(const Column& c) {
  if (c.kind == ColumnKind::kBinary) return "UNHEX(?)";
  if (c.kind == ColumnKind::kDecimal) {
    return "CAST(? AS DECIMAL(" + std::to_string(c.precision) + "," + std::to_string(c.scale) + "))";
  }
  return "?";
}

std::string ShortestDouble(double d) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  return std::string(buf, r.ptr);
}

[[noreturn]] void BadImage(const std::string& why) {
  throw std::invalid_argument("compensation data is not a table before-image: " + why);
}

const nlohmann::json& ArrayField(const nlohmann::json& j, const char* field) {
  if (!j.contains(field) || !j[field].is_array()) BadImage(std::string("'") + field + "' is not an array");
  return j[field];
}

std::vector<std::string> Names(const nlohmann::json& j, const char* field, bool required_non_empty) {
  std::vector<std::string> out;
  for (const auto& v : ArrayField(j, field)) {
    if (!v.is_string()) BadImage(std::string("'") + field + "' has a non-string entry");
    out.push_back(v.get<std::string>());
  }
  if (required_non_empty && out.empty()) BadImage(std::string("'") + field + "' is empty");
  return out;
}

std::vector<Row> Rows(const nlohmann::json& j, const char* field, size_t width) {
  const nlohmann::json& rows = ArrayField(j, field);
  std::vector<Row> out;
  out.reserve(rows.size());
  for (const auto& r : rows) {
    if (!r.is_array() || r.size() != width) BadImage(std::string("a row of '") + field + "' has the wrong width");
    Row row;
    row.reserve(width);
    for (const auto& cell : r) {
      if (cell.is_null()) row.emplace_back(std::nullopt);
      else if (cell.is_string()) row.emplace_back(cell.get<std::string>());
      else BadImage(std::string("a cell of '") + field + "' is neither a string nor null");
    }
    out.push_back(std::move(row));
  }
  return out;
}

// term(column) for each column, joined by `separator`: "`a`, `b`", "`a` = ? AND `b` = ?".
template <class F>
std::string EachColumn(const std::vector<Column>& columns, const char* separator, F&& term) {
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) out += separator;
    out += term(columns[i]);
  }
  return out;
}

// Keyset bounds over the key columns in order: (a OP ?) OR (a = ? AND b OP ?) OR ...,
// each disjunct a range the optimizer uses; the last disjunct compares with `last_op`.
std::string KeyBound(const std::vector<Column>& columns, const char* op, const char* last_op) {
  std::string out;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (i > 0) out += " OR ";
    out += "(";
    for (size_t j = 0; j < i; ++j) out += QuoteIdentifier(columns[j].name) + " = " + CompareSlot(columns[j]) + " AND ";
    out += QuoteIdentifier(columns[i].name) + (i + 1 == columns.size() ? last_op : op) + CompareSlot(columns[i]) + ")";
  }
  return out;
}

nlohmann::json RowsJson(const std::vector<Row>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& row : rows) {
    nlohmann::json r = nlohmann::json::array();
    for (const Cell& cell : row) {
      if (cell) r.push_back(*cell);
      else r.push_back(nullptr);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

const Column* TableSchema::Find(std::string_view name) const {
  for (const Column& c : columns) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::vector<std::string> TableSchema::WritableColumns() const {
  std::vector<std::string> out;
  for (const Column& c : columns) {
    if (!c.generated) out.push_back(c.name);
  }
  return out;
}

std::optional<TableSchema> DescribeTable(storage::Connection& c, const std::string& datasource,
                                         const std::string& table) {
  TableSchema schema;
  schema.label = datasource + "." + table;
  schema.table = table;
  {
    auto rs = c.Query(kDescribeColumnsSql, table);
    while (rs->next()) {
      Column col;
      col.name = std::string(rs->getString(1));
      std::string data_type = std::string(rs->getString(2));
      col.column_type = std::string(rs->getString(3));
      col.precision = static_cast<int>(rs->getInt64(4));
      col.scale = static_cast<int>(rs->getInt64(5));
      col.generated = !std::string(rs->getString(6)).empty();
      col.nullable = rs->getInt64(7) != 0;
      col.kind = KindOf(data_type, col.column_type);
      schema.columns.push_back(std::move(col));
    }
  }
  if (schema.columns.empty()) return std::nullopt;
  auto rs = c.Query(kDescribeKeySql, table);
  while (rs->next()) schema.key.push_back(std::string(rs->getString(1)));
  return schema;
}

ColumnSet::ColumnSet(const TableSchema& schema, const std::vector<std::string>& names) : names_(names) {
  for (const std::string& n : names) {
    const Column* c = schema.Find(n);
    if (c == nullptr) throw std::logic_error("ColumnSet: no column " + n + " in " + schema.label);
    columns_.push_back(*c);
  }
}

int ColumnSet::IndexOf(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) return static_cast<int>(i);
  }
  return -1;
}

std::string ColumnSet::SelectList() const { return EachColumn(columns_, ", ", ReadExpr); }

std::string ColumnSet::NameList() const {
  return EachColumn(columns_, ", ", [](const Column& c) { return QuoteIdentifier(c.name); });
}

std::string ColumnSet::OrderBy() const { return NameList(); }

Row ColumnSet::ReadRow(const storage::ResultSet& rs) const {
  Row row;
  row.reserve(columns_.size());
  for (size_t i = 0; i < columns_.size(); ++i) {
    auto idx = static_cast<uint32_t>(i + 1);
    if (rs.isNull(idx)) {
      row.emplace_back(std::nullopt);
    } else if (columns_[i].kind == ColumnKind::kFloat) {
      row.emplace_back(ShortestDouble(static_cast<double>(rs.getDouble(idx))));
    } else if (columns_[i].kind == ColumnKind::kSigned) {
      row.emplace_back(std::to_string(rs.getInt64(idx)));
    } else if (columns_[i].kind == ColumnKind::kUnsigned) {
      row.emplace_back(std::to_string(rs.getUInt64(idx)));
    } else {
      row.emplace_back(std::string(rs.getString(idx)));
    }
  }
  return row;
}

std::vector<Row> ColumnSet::ReadAll(storage::ResultSet& rs) const {
  std::vector<Row> rows;
  while (rs.next()) rows.push_back(ReadRow(rs));
  return rows;
}

void ColumnSet::AppendValues(const Row& row, std::vector<SqlValue>& out) const {
  for (size_t i = 0; i < columns_.size(); ++i) out.push_back(ToSqlValue(columns_[i], row[i]));
}

std::string ColumnSet::ValuesTuple() const { return "(" + EachColumn(columns_, ", ", WriteSlot) + ")"; }

std::string ColumnSet::MatchKeys(size_t n) const {
  std::string out;
  if (columns_.size() == 1) {
    out = QuoteIdentifier(columns_[0].name) + " IN (";
    std::string slot = CompareSlot(columns_[0]);
    for (size_t i = 0; i < n; ++i) out += (i > 0 ? ", " : "") + slot;
    return out + ")";
  }
  // One key: "(a = ? AND b = ?)" (MariaDB 10.11 plans a DELETE with a row IN list of one
  // row as a full scan). More: a row IN list, one range per key for the optimizer. (An OR
  // of those equalities cost MariaDB time growing with the square of the keys: 265 ms
  // for 600 keys of two columns, bench/RESULTS.md section 12.)
  if (n == 1) {
    auto equals = [](const Column& c) { return QuoteIdentifier(c.name) + " = " + CompareSlot(c); };
    return "(" + EachColumn(columns_, " AND ", equals) + ")";
  }
  const std::string one = "(" + EachColumn(columns_, ", ", CompareSlot) + ")";
  out = "(" + NameList() + ") IN (";
  for (size_t i = 0; i < n; ++i) out += (i > 0 ? ", " : "") + one;
  return out + ")";
}

void ColumnSet::AppendKeyValues(const Row& key, std::vector<SqlValue>& out) const {
  AppendValues(key, out);
}

// (a > ?) OR (a = ? AND b > ?) OR ...
std::string ColumnSet::AfterKey() const { return KeyBound(columns_, " > ", " > "); }

// (a < ?) OR (a = ? AND b <= ?): the complement of AfterKey.
std::string ColumnSet::AtOrBeforeKey() const { return KeyBound(columns_, " < ", " <= "); }

std::string ColumnSet::RowHashExpr() const {
  const std::string sep = plain_text_hash_ ? "_binary'|'" : "'|'";
  auto value = [this](const Column& c) {
    return plain_text_hash_ ? QuoteIdentifier(c.name) : "CAST(" + QuoteIdentifier(c.name) + " AS BINARY)";
  };
  if (!compare_hash_) {
    std::string values, nulls;
    for (const Column& c : columns_) {
      values += ", " + value(c);
      nulls += (nulls.empty() ? "" : ", ") + std::string("ISNULL(") + QuoteIdentifier(c.name) + ")";
    }
    return "CRC32(CONCAT_WS(" + sep + values + ", CONCAT(" + nulls + ")))";
  }
  // The compare form: the marked (nullable) columns first, then the others; one
  // BIGINT per 62 marked columns, "ISNULL(`a`) + 2 * ISNULL(`b`) + ..."; then the byte
  // length of each column that can hold '|' (text, binary, bit) but the last.
  auto pinned = [this](size_t i) { return i < compare_pinned_.size() && compare_pinned_[i]; };
  std::vector<const Column*> order;
  for (size_t i = 0; i < columns_.size(); ++i) {
    if ((*compare_hash_)[i] && !pinned(i)) order.push_back(&columns_[i]);
  }
  const size_t marked = order.size();
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (!(*compare_hash_)[i] && !pinned(i)) order.push_back(&columns_[i]);
  }
  std::vector<std::string> values, markers, lengths;
  for (const Column* c : order) values.push_back(value(*c));
  for (size_t i = 0; i < marked; ++i) {
    const std::string flag = "ISNULL(" + QuoteIdentifier(order[i]->name) + ")";
    if (i % 62 == 0) {
      markers.push_back(flag);
    } else {
      markers.back() += " + " + std::to_string(uint64_t{1} << (i % 62)) + " * " + flag;
    }
  }
  std::vector<const Column*> open;
  for (const Column* c : order) {
    if (c->kind == ColumnKind::kText || c->kind == ColumnKind::kBinary || c->kind == ColumnKind::kBit) {
      open.push_back(c);
    }
  }
  for (size_t i = 0; i + 1 < open.size(); ++i) lengths.push_back("LENGTH(" + QuoteIdentifier(open[i]->name) + ")");
  std::string joined = "CONCAT_WS(" + sep;  // NULLs skipped, their places in the markers
  for (const auto* list : {&values, &markers, &lengths}) {
    for (const std::string& item : *list) joined += ", " + item;
  }
  joined += ")";
  if (markers.empty()) return "CRC32(" + joined + ")";
  // A row without NULLs (most rows of most tables) has every marker 0: the same bytes
  // come from one CONCAT, which is NULL as soon as a marked column is (the marked ones
  // come first, so that is found early), and only then is the CONCAT_WS with its
  // markers computed. The marker arithmetic is about a fifth of the row hash's server
  // CPU on narrow rows (1M rows of 5 columns, 3 nullable: 0.33 -> 0.29 s a pass; a
  // table with half its rows holding a NULL: 0.30 -> 0.31 s).
  std::string whole = "CONCAT(" + values[0];
  for (size_t i = 1; i < values.size(); ++i) whole += ", " + sep + ", " + values[i];
  const std::string zero = plain_text_hash_ ? "_binary'|0'" : "'|0'";
  for (size_t i = 0; i < markers.size(); ++i) whole += ", " + zero;
  for (const std::string& l : lengths) whole += ", " + sep + ", " + l;
  whole += ")";
  return "CRC32(COALESCE(" + whole + ", " + joined + "))";
}

void UseCompareHash(ColumnSet& a, ColumnSet& b) {
  if (a.names() != b.names()) throw std::logic_error("UseCompareHash: different columns");
  std::vector<bool> nullable;
  for (size_t i = 0; i < a.size(); ++i) nullable.push_back(a.at(i).nullable || b.at(i).nullable);
  a.set_compare_hash(nullable);
  b.set_compare_hash(std::move(nullable));
}

void PinCompareHash(ColumnSet& a, ColumnSet& b, const std::set<std::string>& pinned) {
  if (a.names() != b.names()) throw std::logic_error("PinCompareHash: different columns");
  std::vector<bool> flags;
  for (const std::string& n : a.names()) flags.push_back(pinned.count(n) > 0);
  if (std::find(flags.begin(), flags.end(), false) == flags.end()) return;
  a.set_compare_pinned(flags);
  b.set_compare_pinned(std::move(flags));
}

void ColumnSet::AppendAfterKeyValues(const Row& last, std::vector<SqlValue>& out) const {
  for (size_t i = 0; i < columns_.size(); ++i) {
    for (size_t j = 0; j <= i; ++j) out.push_back(ToSqlValue(columns_[j], last[j]));
  }
}

SqlValue ToSqlValue(const Column& column, const Cell& cell) {
  if (!cell) return {std::monostate{}};
  switch (column.kind) {
    case ColumnKind::kSigned:
      if (auto v = ParseInt<int64_t>(*cell)) return {*v};
      break;
    case ColumnKind::kUnsigned:
    case ColumnKind::kBit:
      if (auto v = ParseInt<uint64_t>(*cell)) return {*v};
      break;
    default:
      break;
  }
  return {*cell};
}

Row Project(const Row& row, const std::vector<int>& positions) {
  Row out;
  out.reserve(positions.size());
  for (int p : positions) out.push_back(row[static_cast<size_t>(p)]);
  return out;
}

std::string EncodeKey(const Row& key) {
  std::string out;
  for (const Cell& c : key) {
    if (!c) {
      out += "N;";
    } else {
      out += std::to_string(c->size());
      out += ':';
      out += *c;
    }
  }
  return out;
}

size_t PaddedCount(size_t n, size_t cap) {
  if (n >= cap) return cap;
  size_t p = 1;
  while (p < n) p <<= 2;
  return std::min(p, cap);
}

WriteBatch NextWriteBatch(size_t n, size_t cap, bool may_pad) {
  if (n >= cap) return {cap, cap};
  const size_t padded = PaddedCount(n, cap);
  if (may_pad && (padded - n) * 8 <= padded) return {n, padded};
  size_t p = 1;
  while (p * 4 <= n) p *= 4;
  return {p, p};
}

nlohmann::json Image::ToJson() const {
  return nlohmann::json{{"format", 1},          {"table", table},
                        {"columns", columns},   {"key", key},
                        {"binary", binary},     {"restore", RowsJson(restore)},
                        {"remove", RowsJson(remove)}};
}

Image Image::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) BadImage("not an object");
  if (!j.contains("format") || j["format"] != 1) BadImage("unknown format");
  if (!j.contains("table") || !j["table"].is_string()) BadImage("'table' is not a string");
  Image img;
  img.table = j["table"].get<std::string>();
  img.columns = Names(j, "columns", true);
  img.key = Names(j, "key", true);
  img.binary = Names(j, "binary", false);
  for (const std::string& k : img.key) {
    if (std::find(img.columns.begin(), img.columns.end(), k) == img.columns.end()) {
      BadImage("key column '" + k + "' is not among its columns");
    }
  }
  img.restore = Rows(j, "restore", img.columns.size());
  img.remove = Rows(j, "remove", img.key.size());
  return img;
}

}  // namespace dsync::table
