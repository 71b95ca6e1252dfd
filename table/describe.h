// What a table step checks about its tables before it reads or writes a row: the
// table exists and has a primary key dsync can use, the filter's columns and subquery
// tables exist on a side, and the payload binds the filter's :names (each failure a
// PermanentError naming the table, column or payload field and the step).
//
// Thread safety: stateless functions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "storage/connection_pool.h"
#include "table/spec.h"
#include "table/sql.h"

namespace dsync::table {

// The schemas of the filter's subquery tables on one datasource, by table name.
using InnerSchemas = std::map<std::string, TableSchema>;

// The step's table on `datasource`; PermanentError when it does not exist.
TableSchema Describe(storage::ConnectionPool& pool, const Spec& spec, const std::string& datasource);

// A primary key that is there, not floating-point and not generated.
void RequireKey(const TableSchema& t);

// Every column the filter reads is a column of `t`.
void RequireFilterColumns(const Spec& spec, const TableSchema& t);

// The schemas of the filter's subquery tables on a datasource, each checked to have
// the columns the filter reads; `missing` says which is not there.
struct Inner {
  InnerSchemas schemas;
  std::string missing;  // "" when all are there
};
Inner DescribeSubqueryTables(storage::ConnectionPool& pool, const Spec& spec, const std::string& datasource);

// The filter's values from the payload, in placeholder order. `outer` types the
// columns the placeholders are compared with; `inner`: the schemas of the filter's
// subquery tables on the same datasource.
std::vector<SqlValue> FilterValues(const Spec& spec, const nlohmann::json& payload, const TableSchema& outer,
                                   const InnerSchemas& inner = {});

}  // namespace dsync::table
