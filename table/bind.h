// Binding a `where`'s placeholders from a JSON object: an event's payload (table_sync,
// table_delete, table_verify) or `dsync verify --params`. Values bind as statement
// parameters, never as SQL text; a string compared with an integer column must be a
// canonical integer (MySQL would compare "1 OR 1=1" with it as the number 1).
//
//   std::vector<SqlValue> v = table::BindWhereParams(where, payload, schema, inner,
//       [&](const table::BindFailure& f) { throw MyError(...); });
//
// Thread safety: a pure function.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "table/sql.h"
#include "table/where.h"

namespace dsync::table {

// Why a value does not bind; the caller words it (and must throw).
struct BindFailure {
  enum class Kind { kMissing, kNotInteger, kUnbindable };
  Kind kind = Kind::kMissing;
  std::string field;                    // the placeholder's name, without ':'
  const Column* column = nullptr;       // kNotInteger: the integer column
  const TableSchema* schema = nullptr;  // kNotInteger: its table
  std::string value;                    // kNotInteger: the string given
  std::string json_kind;                // kUnbindable: "an array" or "an object"
};

// The values of `where`'s placeholders from `values`, in placeholder order. `outer`
// types the columns compared with them; `inner` holds the schemas of the filter's
// subquery tables (by name). `fail` is called for the first value that does not bind
// and must throw.
std::vector<SqlValue> BindWhereParams(const CompiledWhere& where, const nlohmann::json& values,
                                      const TableSchema& outer, const std::map<std::string, TableSchema>& inner,
                                      const std::function<void(const BindFailure&)>& fail);

// The columns `where` pins (CompiledWhere::pins) to one integer on both sides: integer
// columns (signed or unsigned) in `a` and in `b`, compared by "=" with an integer
// literal or with a placeholder bound to an integer (`params`, as BindWhereParams
// gives them). Every row either side's filter matches holds that very integer there,
// so comparing it tells nothing (ColumnSet's PinCompareHash).
std::set<std::string> PinnedIntegers(const CompiledWhere& where, const TableSchema& a, const TableSchema& b,
                                     const std::vector<SqlValue>& params);

}  // namespace dsync::table
