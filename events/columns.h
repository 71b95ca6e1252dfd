// Reading a query's rows in events/ (and its callers' own small queries): a row column
// by column in SELECT order, so readers list their fields as the statement names its
// columns and never number them, and `key, COUNT(*) ... GROUP BY key` rows as a map.
//
//   auto rs = c.Query("SELECT id, code, progress FROM distribute_event WHERE ...");
//   while (rs->next()) {
//     Columns col(*rs);   // a braced list evaluates its initialisers in order
//     out.push_back({.id = col.Int64(),
//                    .code = col.String(),            // NULL reads as ""
//                    .progress = col.OptionalInt()});  // NULL reads as nullopt
//   }
//
// Thread safety: a Columns reads one row of one ResultSet, on that result set's thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "storage/result_set.h"

namespace dsync::events {

class Columns {
 public:
  explicit Columns(const storage::ResultSet& rs) : rs_(rs) {}

  // Each getter reads the next column (the first call the first column). NULL reads
  // as 0 or "" (storage::ResultSet); the Optional getters read it as nullopt.
  int Int() { return rs_.getInt(Next()); }
  int64_t Int64() { return rs_.getInt64(Next()); }
  double Double() { return rs_.getDouble(Next()); }
  std::string String() { return rs_.getString(Next()); }
  bool Flag() { return rs_.getInt(Next()) != 0; }  // an integer column; non-zero is true
  std::optional<int> OptionalInt() {
    const int at = Next();
    return rs_.isNull(at) ? std::nullopt : std::optional<int>(rs_.getInt(at));
  }
  std::optional<int64_t> OptionalInt64() {
    const int at = Next();
    return rs_.isNull(at) ? std::nullopt : std::optional<int64_t>(rs_.getInt64(at));
  }
  std::optional<std::string> OptionalString() {
    const int at = Next();
    return rs_.isNull(at) ? std::nullopt : std::optional<std::string>(rs_.getString(at));
  }

 private:
  int Next() { return ++at_; }

  const storage::ResultSet& rs_;
  int at_ = 0;  // the column read last (columns count from 1)
};

// Every row of `SELECT key, COUNT(*) ... GROUP BY key` as key -> count.
inline std::map<std::string, int64_t> ReadCounts(storage::ResultSet& rs) {
  std::map<std::string, int64_t> out;
  while (rs.next()) out[rs.getString(1)] = rs.getInt64(2);
  return out;
}

}  // namespace dsync::events
