#include "table/spec.h"

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "table/sql.h"
#include "table/text.h"

namespace dsync::table {
namespace {

using nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const StepSpec& spec, const char* type) : spec_(spec), type_(type) {}

  [[noreturn]] void Fail(const std::string& why) const {
    throw ConfigError("config: step '" + Printable(spec_.name) + "' (" + type_ + "): " + why);
  }

  void CheckKeys(const std::set<std::string>& allowed) const {
    if (!spec_.params.is_object()) Fail("params must be an object");
    for (const auto& [key, value] : spec_.params.items()) {
      if (allowed.count(key) == 0) {
        std::string known;
        for (const auto& k : allowed) known += (known.empty() ? "" : ", ") + k;
        Fail("unknown key '" + Printable(key) + "' (known: " + known + ")");
      }
    }
  }

  const json* Get(const char* key) const {
    auto it = spec_.params.find(key);
    return it == spec_.params.end() ? nullptr : &*it;
  }

  std::string String(const char* key) const {
    const json* v = Get(key);
    if (v == nullptr) Fail(std::string("missing key '") + key + "'");
    if (!v->is_string()) Fail(std::string("'") + key + "' must be a string, got " + JsonKind(*v));
    if (v->get_ref<const std::string&>().empty()) Fail(std::string("'") + key + "' must not be empty");
    return v->get<std::string>();
  }

  std::string Identifier(const char* key) const {
    std::string s = String(key);
    if (!IsPlainIdentifier(s)) {
      Fail(std::string("'") + key + "' must be a plain identifier ([A-Za-z0-9_$], at most 64), got '" +
           Printable(s) + "'");
    }
    return s;
  }

  int Int(const char* key, int def, int lo, int hi) const {
    const json* v = Get(key);
    if (v == nullptr) return def;
    bool ok = v->is_number_integer() || v->is_number_unsigned();
    if (ok) {
      auto n = v->get<int64_t>();
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) ok = false;
      else if (n < lo || n > hi) ok = false;
      else return static_cast<int>(n);
    }
    Fail(std::string("'") + key + "' must be an integer from " + std::to_string(lo) + " to " +
         std::to_string(hi) + ", got " + Printable(v->dump()));
  }

  bool Bool(const char* key, bool def) const {
    const json* v = Get(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) Fail(std::string("'") + key + "' must be true or false, got " + JsonKind(*v));
    return v->get<bool>();
  }

  std::vector<std::string> Columns(const char* key) const {
    const json* v = Get(key);
    if (v == nullptr) return {};
    if (!v->is_array() || v->empty()) Fail(std::string("'") + key + "' must be a non-empty array of column names");
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (const json& c : *v) {
      if (!c.is_string() || !IsPlainIdentifier(c.get_ref<const std::string&>())) {
        Fail(std::string("'") + key + "' has a bad column name " + Printable(c.dump()) +
             " (plain identifiers only: [A-Za-z0-9_$], at most 64)");
      }
      if (!seen.insert(c.get<std::string>()).second) {
        Fail(std::string("'") + key + "' lists '" + c.get<std::string>() + "' twice");
      }
      out.push_back(c.get<std::string>());
    }
    return out;
  }

  OnConflict Conflict(const char* key) const {
    const json* v = Get(key);
    if (v == nullptr) return OnConflict::kFail;
    if (v->is_string()) {
      for (OnConflict o : {OnConflict::kFail, OnConflict::kSkip, OnConflict::kOverwrite}) {
        if (v->get_ref<const std::string&>() == OnConflictName(o)) return o;
      }
    }
    Fail(std::string("'") + key + "' must be \"fail\", \"skip\" or \"overwrite\", got " + Printable(v->dump()));
  }

  CompiledWhere Where(const std::string& text, bool like_patterns) const {
    try {
      return CompileWhere(text, like_patterns);
    } catch (const WhereError& e) {
      Fail(std::string("'where' ") + e.what());
    }
  }

 private:
  const StepSpec& spec_;
  const char* type_;
};

}  // namespace

const char* OnConflictName(OnConflict o) {
  switch (o) {
    case OnConflict::kFail: return "fail";
    case OnConflict::kSkip: return "skip";
    default: return "overwrite";
  }
}

Spec ParseSpec(const StepSpec& spec, bool sync) {
  const char* type = sync ? "table_sync" : "table_delete";
  ConfigReader r(spec, type);
  if (sync) {
    r.CheckKeys({"source", "target", "table", "where", "chunk_size", "columns", "delete_missing",
                 "on_conflict", "undo_retention_days", "lanes", "like_patterns"});
  } else {
    r.CheckKeys({"target", "table", "where", "chunk_size", "undo_retention_days", "like_patterns", "max_rows"});
  }
  Spec c;
  c.type = type;
  c.step = spec.name;
  if (sync) c.source = r.String("source");
  c.target = r.String("target");
  if (sync && c.source == c.target) r.Fail("'source' and 'target' are the same datasource '" + Printable(c.source) + "'");
  c.table = r.Identifier("table");
  c.where_text = r.String("where");
  c.like_patterns = r.Bool("like_patterns", false);
  c.where = r.Where(c.where_text, c.like_patterns);
  if (!sync) c.max_rows = r.Int("max_rows", kDefaultDeleteMaxRows, 1, kMaxDeleteMaxRows);
  c.chunk_size = r.Int("chunk_size", sync ? kDefaultSyncChunkSize : kDefaultDeleteChunkSize, 1, kMaxChunkSize);
  c.undo_retention_days = r.Int("undo_retention_days", kDefaultUndoRetentionDays, 1, 3650);
  if (sync) {
    c.columns = r.Columns("columns");
    c.delete_missing = r.Bool("delete_missing", false);
    c.on_conflict = r.Conflict("on_conflict");
    c.lanes = r.Int("lanes", kDefaultLanes, 1, kMaxLanes);
  }
  return c;
}

std::string RepairKeyField(size_t key, size_t column) {
  return "dsync_k" + std::to_string(key) + "_" + std::to_string(column);
}

void NarrowToKeys(Spec& c, const std::vector<std::string>& key_columns, size_t keys) {
  if (key_columns.empty() || keys == 0) throw ConfigError("config: step '" + Printable(c.step) + "': no keys");
  CompiledWhere& w = c.where;
  auto add = [&](size_t i, size_t j) {
    w.params.push_back(RepairKeyField(i, j));
    w.param_columns.push_back(key_columns[j]);
    w.param_tables.emplace_back();
    w.like_literal.push_back(false);
  };
  std::string match;
  if (key_columns.size() == 1) {
    match = QuoteIdentifier(key_columns[0]) + " IN (";
    for (size_t i = 0; i < keys; ++i) {
      match += i > 0 ? ", ?" : "?";
      add(i, 0);
    }
    match += ")";
  } else if (keys == 1) {
    // One key as equalities, as ColumnSet::MatchKeys.
    for (size_t j = 0; j < key_columns.size(); ++j) {
      match += (j > 0 ? " AND " : "") + QuoteIdentifier(key_columns[j]) + " = ?";
      add(0, j);
    }
  } else {
    // A row IN list, as ColumnSet::MatchKeys (the optimizer's cost of an OR of ANDs grows
    // with the square of the keys).
    match = "(";
    for (size_t j = 0; j < key_columns.size(); ++j) match += (j > 0 ? ", " : "") + QuoteIdentifier(key_columns[j]);
    match += ") IN (";
    for (size_t i = 0; i < keys; ++i) {
      match += i > 0 ? ", (" : "(";
      for (size_t j = 0; j < key_columns.size(); ++j) {
        match += j > 0 ? ", ?" : "?";
        add(i, j);
      }
      match += ")";
    }
    match += ")";
  }
  for (const std::string& k : key_columns) w.columns.insert(k);
  // The where's pins stay true: every row the conjunction matches matches the where.
  w.sql = "(" + w.sql + ") AND (" + match + ")";
  c.where_text += " AND <" + std::to_string(keys) + " repaired keys>";
}

}  // namespace dsync::table
