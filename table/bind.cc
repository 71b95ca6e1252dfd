#include "table/bind.h"

#include <charconv>
#include <cstdint>
#include <optional>
#include <stdexcept>

namespace dsync::table {
namespace {

bool IsIntegerKind(ColumnKind k) {
  return k == ColumnKind::kSigned || k == ColumnKind::kUnsigned || k == ColumnKind::kBit;
}

[[noreturn]] void Fail(const std::function<void(const BindFailure&)>& fail, BindFailure f) {
  fail(f);
  throw std::logic_error("BindWhereParams: the failure callback returned");
}

}  // namespace

std::vector<SqlValue> BindWhereParams(const CompiledWhere& where, const nlohmann::json& values,
                                      const TableSchema& outer, const std::map<std::string, TableSchema>& inner,
                                      const std::function<void(const BindFailure&)>& fail) {
  std::vector<SqlValue> out;
  for (size_t i = 0; i < where.params.size(); ++i) {
    const std::string& field = where.params[i];
    if (!values.is_object() || !values.contains(field)) {
      BindFailure f;
      f.field = field;
      Fail(fail, f);
    }
    const nlohmann::json& v = values[field];
    const TableSchema* schema = &outer;
    if (!where.param_tables[i].empty()) {
      auto it = inner.find(where.param_tables[i]);
      schema = it == inner.end() ? nullptr : &it->second;
    }
    const Column* column =
        where.param_columns[i].empty() || schema == nullptr ? nullptr : schema->Find(where.param_columns[i]);
    if (v.is_null()) {
      out.push_back({std::monostate{}});
    } else if (v.is_boolean()) {
      out.push_back({v.get<bool>()});
    } else if (v.is_number_unsigned()) {
      out.push_back({v.get<uint64_t>()});
    } else if (v.is_number_integer()) {
      out.push_back({v.get<int64_t>()});
    } else if (v.is_number_float()) {
      out.push_back({v.get<double>()});
    } else if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (column != nullptr && IsIntegerKind(column->kind)) {
        if (auto n = ParseInt<int64_t>(s)) out.push_back({*n});
        else if (auto u = ParseInt<uint64_t>(s)) out.push_back({*u});
        else {
          BindFailure f;
          f.kind = BindFailure::Kind::kNotInteger;
          f.field = field;
          f.column = column;
          f.schema = schema;
          f.value = s;
          Fail(fail, f);
        }
      } else if (i < where.like_literal.size() && where.like_literal[i]) {
        out.push_back({EscapeLike(s)});
      } else {
        out.push_back({s});
      }
    } else {
      BindFailure f;
      f.kind = BindFailure::Kind::kUnbindable;
      f.field = field;
      f.json_kind = v.is_array() ? "an array" : "an object";
      Fail(fail, f);
    }
  }
  return out;
}

std::set<std::string> PinnedIntegers(const CompiledWhere& where, const TableSchema& a, const TableSchema& b,
                                     const std::vector<SqlValue>& params) {
  auto integer = [](const TableSchema& t, const std::string& name) {
    const Column* c = t.Find(name);
    return c != nullptr && (c->kind == ColumnKind::kSigned || c->kind == ColumnKind::kUnsigned);
  };
  std::set<std::string> out;
  for (const CompiledWhere::Pin& p : where.pins) {
    if (!integer(a, p.column) || !integer(b, p.column)) continue;
    bool exact = false;
    if (p.param < 0) {
      exact = ParseInt<int64_t>(p.number).has_value() || ParseInt<uint64_t>(p.number).has_value();
    } else if (static_cast<size_t>(p.param) < params.size()) {
      const SqlValue& v = params[static_cast<size_t>(p.param)];
      exact = std::holds_alternative<int64_t>(v) || std::holds_alternative<uint64_t>(v);
    }
    if (exact) out.insert(p.column);
  }
  return out;
}

}  // namespace dsync::table
