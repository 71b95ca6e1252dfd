#include "table/describe.h"

#include "table/bind.h"
#include "table/run_context.h"

namespace dsync::table {

using storage::Connection;
using storage::ConnectionPool;

std::vector<SqlValue> FilterValues(const Spec& spec, const nlohmann::json& payload, const TableSchema& outer,
                                   const InnerSchemas& inner) {
  return BindWhereParams(spec.where, payload, outer, inner, [&](const BindFailure& f) {
    switch (f.kind) {
      case BindFailure::Kind::kMissing:
        throw PermanentError("payload has no field '" + f.field + "' needed by step '" + spec.step + "'");
      case BindFailure::Kind::kNotInteger:
        throw PermanentError("payload field '" + f.field + "' must be an integer (column `" + f.column->name +
                             "` of " + f.schema->label + "), got a string that is not one; step '" + spec.step +
                             "'");
      case BindFailure::Kind::kUnbindable:
        throw PermanentError("payload field '" + f.field + "' is " + f.json_kind + "; step '" + spec.step +
                             "' binds only strings, numbers, booleans and null");
    }
  });
}


TableSchema Describe(ConnectionPool& pool, const Spec& spec, const std::string& datasource) {
  auto schema = pool.Run(spec.What("describe table"), [&](Connection& c) {
    return DescribeTable(c, datasource, spec.table);
  });
  if (!schema) throw PermanentError("table " + datasource + "." + spec.table + " does not exist");
  return std::move(*schema);
}

void RequireKey(const TableSchema& t) {
  if (t.key.empty()) throw PermanentError("table " + t.label + " has no primary key");
  for (const std::string& k : t.key) {
    const Column* c = t.Find(k);
    if (c->kind == ColumnKind::kFloat) {
      throw PermanentError("primary key column `" + k + "` of " + t.label + " is " + c->column_type +
                           ": floating-point keys are not supported");
    }
    if (c->generated) {
      throw PermanentError("primary key column `" + k + "` of " + t.label + " is generated: not supported");
    }
  }
}

void RequireFilterColumns(const Spec& spec, const TableSchema& t) {
  for (const std::string& c : spec.where.columns) {
    if (t.Find(c) == nullptr) {
      throw PermanentError("where of step '" + spec.step + "' reads column `" + c + "`, which " + t.label +
                           " does not have");
    }
  }
}

Inner DescribeSubqueryTables(ConnectionPool& pool, const Spec& spec, const std::string& datasource) {
  Inner r;
  InnerSchemas& out = r.schemas;
  for (const auto& sq : spec.where.subqueries) {
    if (out.count(sq.table) > 0) continue;
    auto schema = pool.Run(spec.What("describe subquery table"), [&](Connection& c) {
      return DescribeTable(c, datasource, sq.table);
    });
    if (!schema) {
      r.missing = "table " + datasource + "." + sq.table + " (read by the where of step '" + spec.step +
                  "') does not exist";
      return r;
    }
    out.emplace(sq.table, std::move(*schema));
  }
  for (const auto& sq : spec.where.subqueries) {
    for (const std::string& c : sq.columns) {
      if (out.at(sq.table).Find(c) == nullptr) {
        r.missing = "where of step '" + spec.step + "' reads column `" + c + "`, which " + datasource + "." +
                    sq.table + " does not have";
        return r;
      }
    }
  }
  return r;
}

}  // namespace dsync::table
