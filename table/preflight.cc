#include "table/preflight.h"

#include <cstdint>
#include <cstdio>
#include <map>

namespace dsync::table {
namespace {

// SELECT: every column of the table with what the preflight compares.
//   param: table name
constexpr const char* kShapeSql = R"(
SELECT COLUMN_NAME, LOWER(COLUMN_TYPE), IS_NULLABLE = 'YES', COALESCE(COLLATION_NAME, '')
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
ORDER BY ORDINAL_POSITION)";

std::string Describe(const ColumnShape& c) {
  std::string s = c.column_type + (c.nullable ? " NULL" : " NOT NULL");
  if (!c.collation.empty()) s += " COLLATE " + c.collation;
  return s;
}

std::string KeyText(const std::vector<std::string>& key) {
  std::string s = "(";
  for (const std::string& k : key) s += (s.size() > 1 ? ", `" : "`") + k + "`";
  return s + ")";
}

}  // namespace

std::string TableShape::Fingerprint() const {
  const std::string text = ToJson().dump();
  uint64_t h = 14695981039346656037ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json TableShape::ToJson() const {
  nlohmann::json cols = nlohmann::json::array();
  for (const ColumnShape& c : columns) cols.push_back({c.name, c.column_type, c.nullable, c.collation});
  return {{"columns", cols}, {"key", key}};
}

std::optional<TableShape> TableShape::FromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("columns") || !j["columns"].is_array() || !j.contains("key") ||
      !j["key"].is_array()) {
    return std::nullopt;
  }
  TableShape out;
  for (const auto& c : j["columns"]) {
    if (!c.is_array() || c.size() != 4 || !c[0].is_string() || !c[1].is_string() || !c[2].is_boolean() ||
        !c[3].is_string()) {
      return std::nullopt;
    }
    out.columns.push_back({c[0].get<std::string>(), c[1].get<std::string>(), c[2].get<bool>(), c[3].get<std::string>()});
  }
  for (const auto& k : j["key"]) {
    if (!k.is_string()) return std::nullopt;
    out.key.push_back(k.get<std::string>());
  }
  return out;
}

TableShape ReadShape(storage::Connection& c, const std::string& table, const std::vector<std::string>& columns,
                     const std::vector<std::string>& key) {
  std::map<std::string, ColumnShape> all;
  auto rs = c.Query(kShapeSql, table);
  while (rs->next()) {
    ColumnShape s{std::string(rs->getString(1)), std::string(rs->getString(2)), rs->getBoolean(3),
                  std::string(rs->getString(4))};
    all.emplace(s.name, std::move(s));
  }
  TableShape out;
  out.key = key;
  for (const std::string& n : columns) {
    auto it = all.find(n);
    if (it != all.end()) out.columns.push_back(it->second);
  }
  return out;
}

bool PlainTextHashable(const TableShape& shape) {
  std::string collation;
  for (const ColumnShape& c : shape.columns) {
    if (c.collation.empty()) continue;
    if (!collation.empty() && c.collation != collation) return false;
    collation = c.collation;
  }
  if (collation.empty()) return true;
  const std::string charset = collation.substr(0, collation.find('_'));
  return charset == "utf8mb4" || charset == "utf8mb3" || charset == "utf8" || charset == "latin1" ||
         charset == "ascii";
}

std::optional<std::string> CompareShapes(const TableShape& source, const std::string& source_label,
                                         const TableShape& target, const std::string& target_label) {
  std::map<std::string, const ColumnShape*> in_target;
  for (const ColumnShape& c : target.columns) in_target.emplace(c.name, &c);
  for (const ColumnShape& s : source.columns) {
    auto it = in_target.find(s.name);
    if (it == in_target.end()) return "column `" + s.name + "` is missing from " + target_label;
    if (!(s == *it->second)) {
      return "column `" + s.name + "` is " + Describe(s) + " in " + source_label + " but " + Describe(*it->second) +
             " in " + target_label;
    }
  }
  if (source.columns.size() != target.columns.size()) {
    for (const ColumnShape& t : target.columns) {
      bool found = false;
      for (const ColumnShape& s : source.columns) found = found || s.name == t.name;
      if (!found) return "column `" + t.name + "` is missing from " + source_label;
    }
  }
  if (source.key != target.key) {
    return "the primary key is " + KeyText(source.key) + " in " + source_label + " but " + KeyText(target.key) +
           " in " + target_label;
  }
  return std::nullopt;
}

std::string DescribeChange(const TableShape& then, const TableShape& now) {
  std::map<std::string, const ColumnShape*> current;
  for (const ColumnShape& c : now.columns) current.emplace(c.name, &c);
  for (const ColumnShape& c : then.columns) {
    auto it = current.find(c.name);
    if (it == current.end()) return "column `" + c.name + "` was dropped";
    if (!(c == *it->second)) return "column `" + c.name + "` was " + Describe(c) + ", now " + Describe(*it->second);
  }
  if (then.key != now.key) return "the primary key was " + KeyText(then.key) + ", now " + KeyText(now.key);
  return "";
}

}  // namespace dsync::table
