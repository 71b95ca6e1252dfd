#include "table/verify.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <future>
#include <map>
#include <set>
#include <utility>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "table/bind.h"
#include "table/both.h"
#include "table/chunks.h"
#include "table/preflight.h"
#include "table/text.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

constexpr int kMaxChunkRows = 100000;
// Tables of at most this many rows (the source's estimate) are first compared whole.
constexpr int64_t kWholeTableRows = 2000000;

// The source table's estimated row count.   params: table
constexpr const char* kTableRowsSql = R"(
SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?)";

std::string Who(const TableCheck& c) { return c.step.empty() ? "table " + c.table : "step '" + c.step + "'"; }

// The filter's values from `values` in placeholder order; a string compared with an
// integer column must be a canonical integer (as table_sync binds them).
std::vector<SqlValue> FilterValues(const TableCheck& check, const json& values, const TableSchema& outer,
                                   const std::map<std::string, TableSchema>& inner) {
  return BindWhereParams(check.where, values, outer, inner, [&](const BindFailure& f) {
    switch (f.kind) {
      case BindFailure::Kind::kMissing:
        throw VerifyInputError("no value for :" + f.field + " (needed by the where of " + Who(check) + ")");
      case BindFailure::Kind::kNotInteger:
        throw VerifyInputError(":" + f.field + " must be an integer (column `" + f.column->name + "` of " +
                               f.schema->label + "), got '" + Printable(f.value) + "'");
      case BindFailure::Kind::kUnbindable:
        throw VerifyInputError(":" + f.field + " is " + f.json_kind +
                               "; only strings, numbers, booleans and null bind");
    }
  });
}

std::map<std::string, TableSchema> DescribeSubqueries(ConnectionPool& pool, const std::string& datasource,
                                                      const TableCheck& check) {
  std::map<std::string, TableSchema> out;
  for (const auto& sq : check.where.subqueries) {
    if (out.count(sq.table) == 0) out.emplace(sq.table, DescribeForCheck(pool, datasource, sq.table));
    for (const std::string& c : sq.columns) {
      if (out.at(sq.table).Find(c) == nullptr) {
        throw VerifyInputError("the where of " + Who(check) + " reads column `" + c + "`, which " + datasource + "." +
                               sq.table + " does not have");
      }
    }
  }
  return out;
}

// The synced columns, as table_sync chooses them.
std::vector<std::string> ColumnNames(const TableCheck& check, const TableSchema& s, const TableSchema& t) {
  if (t.key.empty()) throw VerifyInputError("table " + t.label + " has no primary key");
  for (const std::string& k : t.key) {
    const Column* sc = s.Find(k);
    if (sc == nullptr) throw VerifyInputError("table " + s.label + " has no column `" + k + "` (primary key of " + t.label + ")");
    if (sc->column_type != t.Find(k)->column_type) {
      throw VerifyInputError("primary key column `" + k + "` is " + sc->column_type + " in " + s.label + " but " +
                             t.Find(k)->column_type + " in " + t.label);
    }
    if (sc->kind == ColumnKind::kFloat) throw VerifyInputError("floating-point key `" + k + "` is not supported");
  }
  std::vector<std::string> names;
  if (!check.columns.empty()) {
    for (const std::string& n : check.columns) {
      if (s.Find(n) == nullptr || t.Find(n) == nullptr) {
        throw VerifyInputError("column `" + n + "` of " + Who(check) + " is missing from " +
                               (s.Find(n) == nullptr ? s.label : t.label));
      }
    }
    for (const std::string& k : t.key) {
      if (std::find(check.columns.begin(), check.columns.end(), k) == check.columns.end()) {
        throw VerifyInputError("the columns of " + Who(check) + " must include the primary key column `" + k + "`");
      }
    }
    return check.columns;
  }
  for (const std::string& n : t.WritableColumns()) {
    if (s.Find(n) != nullptr) names.push_back(n);
  }
  return names;
}

void RequireFilterColumns(const TableCheck& check, const TableSchema& t) {
  for (const std::string& c : check.where.columns) {
    if (t.Find(c) == nullptr) {
      throw VerifyInputError("the where of " + Who(check) + " reads column `" + c + "`, which " + t.label +
                             " does not have");
    }
  }
}

// True when the text columns among `names` share one collation of an ASCII-compatible
// character set (PlainTextHashable): then the row hash needs no CAST per text
// column and yields the same bytes (checked by tests/cli/verify_test.sh's repair round
// trip, whose repair event hashes through table_sync).
bool UniformAsciiCollation(ConnectionPool& pool, const std::string& table, const std::vector<std::string>& names) {
  return PlainTextHashable(
      pool.Run("verify: collations", [&](Connection& c) { return ReadShape(c, table, names, {}); }));
}

// How one side computes checksums and row hashes.
struct Side {
  ConnectionPool& pool;
  const ColumnSet& cols;
  const ColumnSet& key;
  const BoundFilter& filter;
};

// The range's checksum and its rows' hashes on one side (ChecksumRange and
// RowHashes over the side's columns, hashed as the side says).
RangeChecksum Checksum(const Side& side, const std::string& table_name, const KeyRange& range) {
  return side.pool.Run("verify: checksum", [&](Connection& c) {
    return ChecksumRange(c, table_name, side.cols, side.key, side.filter, range);
  });
}

KeyHashes Hashes(const Side& side, const std::string& table_name, const KeyRange& range) {
  return side.pool.Run("verify: row hashes", [&](Connection& c) {
    return RowHashes(c, table_name, side.cols, side.key, side.filter, range);
  });
}

void Keep(std::vector<Row>& list, int64_t& total, const Row& key, size_t keep) {
  ++total;
  if (list.size() < keep) list.push_back(key);
}

// Drills into one differing range: keys and row hashes from both sides.
void DiffRange(const Side& src, const Side& tgt, const std::string& table_name, const KeyRange& range,
               const VerifyOptions& options, TableDiff& d) {
  auto [sh, th] = Both([&] { return Hashes(src, table_name, range); }, [&] { return Hashes(tgt, table_name, range); });
  const HashDiff hd = DiffHashes(sh, th);
  for (size_t i : hd.missing) Keep(d.missing, d.missing_total, sh.key(i), options.keep_keys);
  for (size_t i : hd.different) Keep(d.different, d.different_total, sh.key(i), options.keep_keys);
  for (size_t j : hd.extra) Keep(d.extra, d.extra_total, th.key(j), options.keep_keys);
}

// ---------------------------------------------------------------------------
// Step config (the keys of table_sync)

[[noreturn]] void Fail(const StepSpec& spec, const char* type, const std::string& why) {
  throw ConfigError("config: step '" + Printable(spec.name) + "' (" + type + "): " + why);
}

std::string StringKey(const StepSpec& spec, const char* type, const char* key) {
  auto it = spec.params.find(key);
  if (it == spec.params.end()) Fail(spec, type, std::string("missing key '") + key + "'");
  if (!it->is_string() || it->get_ref<const std::string&>().empty()) {
    Fail(spec, type, std::string("'") + key + "' must be a non-empty string");
  }
  return it->get<std::string>();
}

}  // namespace

// ---------------------------------------------------------------------------

TableSchema DescribeForCheck(ConnectionPool& pool, const std::string& datasource, const std::string& name) {
  auto schema = pool.Run("verify: describe table",
                         [&](Connection& c) { return DescribeTable(c, datasource, name); });
  if (!schema) throw VerifyInputError("table " + datasource + "." + name + " does not exist");
  return std::move(*schema);
}

TableCheck ParseTableCheck(const StepSpec& spec, const char* type) {
  static const std::set<std::string> kKeys = {"source", "target", "table", "where", "chunk_size", "columns",
                                              "delete_missing", "undo_retention_days", "on_conflict",
                                              "like_patterns"};
  if (!spec.params.is_object()) Fail(spec, type, "params must be an object");
  // A table_sync step's own factory checks its keys (which may grow); a table_verify
  // step is checked here.
  for (const auto& [key, _] : spec.params.items()) {
    if (kKeys.count(key) == 0 && std::string_view(type) != "table_sync") {
      Fail(spec, type, "unknown key '" + Printable(key) + "'");
    }
  }
  TableCheck c;
  c.step = spec.name;
  c.source = StringKey(spec, type, "source");
  c.target = StringKey(spec, type, "target");
  if (c.source == c.target) Fail(spec, type, "'source' and 'target' are the same datasource");
  c.table = StringKey(spec, type, "table");
  if (!IsPlainIdentifier(c.table)) Fail(spec, type, "'table' must be a plain identifier");
  c.where_text = StringKey(spec, type, "where");
  if (auto it = spec.params.find("like_patterns"); it != spec.params.end()) {
    if (!it->is_boolean()) Fail(spec, type, "'like_patterns' must be true or false");
    c.like_patterns = it->get<bool>();
  }
  try {
    c.where = CompileWhere(c.where_text, c.like_patterns);
  } catch (const WhereError& e) {
    Fail(spec, type, std::string("'where' ") + e.what());
  }
  if (auto it = spec.params.find("columns"); it != spec.params.end()) {
    if (!it->is_array() || it->empty()) Fail(spec, type, "'columns' must be a non-empty array of column names");
    for (const json& n : *it) {
      if (!n.is_string() || !IsPlainIdentifier(n.get_ref<const std::string&>())) {
        Fail(spec, type, "'columns' has a bad column name " + Printable(n.dump()));
      }
      c.columns.push_back(n.get<std::string>());
    }
  }
  if (auto it = spec.params.find("chunk_size"); it != spec.params.end()) {
    // Checked as table_sync checks it. A sync's chunk is bounded by the rows it holds
    // in memory; a checksum range holds none, so verify ranges grow to kMaxChunkRows.
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxChunkRows) {
      Fail(spec, type, "'chunk_size' must be an integer from 1 to " + std::to_string(kMaxChunkRows));
    }
  }
  if (auto it = spec.params.find("delete_missing"); it != spec.params.end()) {
    if (!it->is_boolean()) Fail(spec, type, "'delete_missing' must be true or false");
    c.delete_missing = it->get<bool>();
  }
  return c;
}

TableCheck MakeTableCheck(const std::string& source, const std::string& target, const std::string& table_name,
                          const std::string& where, const std::vector<std::string>& columns) {
  TableCheck c;
  c.source = source;
  c.target = target;
  if (source.empty() || target.empty()) throw VerifyInputError("both a source and a target datasource are needed");
  if (source == target) throw VerifyInputError("source and target are the same datasource '" + Printable(source) + "'");
  if (!IsPlainIdentifier(table_name)) {
    throw VerifyInputError("table must be a plain identifier ([A-Za-z0-9_$], at most 64), got '" +
                           Printable(table_name) + "'");
  }
  c.table = table_name;
  c.where_text = where;
  try {
    c.where = CompileWhere(where);
  } catch (const WhereError& e) {
    throw VerifyInputError(std::string("where ") + e.what());
  }
  for (const std::string& n : columns) {
    if (!IsPlainIdentifier(n)) throw VerifyInputError("bad column name '" + Printable(n) + "'");
  }
  c.columns = columns;
  return c;
}

json TableDiff::KeyJson(const Row& key) const {
  json out = json::array();
  for (size_t i = 0; i < key.size(); ++i) {
    const Cell& cell = key[i];
    if (!cell) {
      out.push_back(nullptr);
      continue;
    }
    ColumnKind kind = i < key_kinds.size() ? key_kinds[i] : ColumnKind::kText;
    if (kind == ColumnKind::kSigned) {
      if (auto v = ParseInt<int64_t>(*cell)) {
        out.push_back(*v);
        continue;
      }
    } else if (kind == ColumnKind::kUnsigned || kind == ColumnKind::kBit) {
      if (auto v = ParseInt<uint64_t>(*cell)) {
        out.push_back(*v);
        continue;
      }
    }
    out.push_back(*cell);  // binary keys as hex
  }
  return out;
}

json TableDiff::ToJson(size_t max_keys) const {
  auto list = [&](const std::vector<Row>& keys) {
    json a = json::array();
    for (size_t i = 0; i < keys.size() && i < max_keys; ++i) a.push_back(KeyJson(keys[i]));
    return a;
  };
  json out = {{"table", table},
              {"source", source},
              {"target", target},
              {"where", where},
              {"key_columns", key_columns},
              {"source_rows", source_rows},
              {"target_rows", target_rows},
              {"missing_in_target", list(missing)},
              {"extra_in_target", list(extra)},
              {"different", list(different)},
              {"missing_in_target_total", missing_total},
              {"extra_in_target_total", extra_total},
              {"different_total", different_total},
              {"chunks", chunks},
              {"chunks_differing", chunks_differing},
              {"equal", equal()}};
  if (!step.empty()) out["step"] = step;
  return out;
}

TableDiff CompareTable(ConnectionPool& src, ConnectionPool& tgt, const TableCheck& check, const json& values,
                       const VerifyOptions& options, Clock& clock) {
  const TableSchema s = DescribeForCheck(src, check.source, check.table);
  const TableSchema t = DescribeForCheck(tgt, check.target, check.table);
  const std::vector<std::string> names = ColumnNames(check, s, t);
  RequireFilterColumns(check, s);
  RequireFilterColumns(check, t);
  const auto src_inner = DescribeSubqueries(src, check.source, check);
  const auto tgt_inner = DescribeSubqueries(tgt, check.target, check);
  const BoundFilter src_filter{check.where.sql, FilterValues(check, values, s, src_inner)};
  const BoundFilter tgt_filter{check.where.sql, FilterValues(check, values, t, tgt_inner)};
  ColumnSet src_cols(s, names), tgt_cols(t, names);
  const ColumnSet src_key(s, t.key), tgt_key(t, t.key);
  auto [src_uniform, tgt_uniform] = Both([&] { return UniformAsciiCollation(src, check.table, names); },
                                         [&] { return UniformAsciiCollation(tgt, check.table, names); });
  // Both sides hash alike (the same expression) unless both qualify for the fast one.
  src_cols.set_plain_text_hash(src_uniform && tgt_uniform);
  tgt_cols.set_plain_text_hash(src_uniform && tgt_uniform);
  UseCompareHash(src_cols, tgt_cols);
  // Integer columns the filter pins to one integer on both sides are left out.
  PinCompareHash(src_cols, tgt_cols, PinnedIntegers(check.where, s, t, src_filter.params));
  const Side src_side{src, src_cols, src_key, src_filter};
  const Side tgt_side{tgt, tgt_cols, tgt_key, tgt_filter};

  TableDiff d;
  d.step = check.step;
  d.table = check.table;
  d.source = check.source;
  d.target = check.target;
  d.where = check.where_text;
  d.key_columns = t.key;
  for (const std::string& k : t.key) d.key_kinds.push_back(t.Find(k)->kind);

  // A table small enough to scan in one statement is first compared whole: equal
  // tables (the usual answer) then cost one checksum statement per side.
  const int64_t estimated_rows = src.Run("verify: table size", [&](Connection& c) {
    return c.QueryInt(kTableRowsSql, check.table).value_or(0);
  });
  if (estimated_rows <= kWholeTableRows) {
    const KeyRange all;
    auto [a, b] = Both([&] { return Checksum(src_side, check.table, all); },
                       [&] { return Checksum(tgt_side, check.table, all); });
    if (a == b) {
      d.chunks = 1;
      d.source_rows = a.rows;
      d.target_rows = b.rows;
      return d;
    }
  }

  ChunkSizer::Options sizing;
  sizing.max_bytes = SIZE_MAX;  // a range's rows stay in the databases
  ChunkSizer sizer(static_cast<size_t>(check.chunk_size), sizing);
  // With a key of one integer column, ranges by key span (KeySpanRanges): no
  // pass over the source to find each range's end before its checksums.
  std::optional<KeySpanRanges> spans;
  if (SingleIntegerKey(src_key)) {
    auto bounds = [&](ConnectionPool& pool, const ColumnSet& key) {
      return pool.Run("verify: key bounds", [&](Connection& c) { return ReadKeyBounds(c, check.table, key); });
    };
    const auto [sb, tb] = Both([&] { return bounds(src, src_key); }, [&] { return bounds(tgt, tgt_key); });
    if (const auto both = Union(sb, tb)) spans.emplace(both->first, both->second);
  }
  std::optional<Row> lo;
  for (;;) {
    if (options.stop.stop_requested()) throw Error("verify of " + check.table + " was cancelled");
    const auto started = clock.Now();
    KeyRange range{lo, spans ? spans->End(lo, sizer.next(), std::nullopt)
                                    : src.Run("verify: range boundary", [&](Connection& c) {
                                        return NthKeyAfter(c, check.table, src_key, src_filter, lo,
                                                                  sizer.next());
                                      })};
    auto [a, b] = Both([&] { return Checksum(src_side, check.table, range); },
                       [&] { return Checksum(tgt_side, check.table, range); });
    if (spans && range.hi) {
      const int64_t covered = std::max(a.rows, b.rows);
      spans->Observe(lo, *range.hi, covered);
      // Denser than the ranges before: a differing range is drilled into row by row,
      // so it is taken again, shorter, when it holds more than twice a range's rows.
      if (a != b && covered > 2 * static_cast<int64_t>(check.chunk_size)) continue;
    }
    ++d.chunks;
    d.source_rows += a.rows;
    d.target_rows += b.rows;
    if (a != b) {
      ++d.chunks_differing;
      DiffRange(src_side, tgt_side, check.table, range, options, d);
    }
    sizer.Observe(static_cast<size_t>(std::max<int64_t>(a.rows, 1)), clock.Now() - started, 0, 0);
    if (!range.hi) break;
    lo = range.hi;
  }
  spdlog::debug("VERIFY_TABLE table={} source={} target={} equal={} chunks={} differing={}", check.table,
                check.source, check.target, d.equal(), d.chunks, d.chunks_differing);
  return d;
}

std::vector<Row> RepairPlan::Keys() const {
  std::vector<Row> out;
  for (const auto* list : {&insert, &update, &remove}) out.insert(out.end(), list->begin(), list->end());
  return out;
}

RepairPlan PlanRepair(const TableCheck& check, const TableDiff& diff) {
  RepairPlan plan;
  plan.insert = diff.missing;
  plan.insert_total = diff.missing_total;
  plan.update = diff.different;
  plan.update_total = diff.different_total;
  (check.delete_missing ? plan.remove : plan.keep) = diff.extra;
  (check.delete_missing ? plan.remove_total : plan.keep_total) = diff.extra_total;
  return plan;
}

json RepairPayload(const std::string& topic, const TableCheck& check, const json& values, const TableDiff& diff) {
  if (topic.empty() || check.step.empty()) {
    throw VerifyInputError("a repair names a configured topic's table_sync step; one table named on the command "
                           "line has none (verify it with --topic)");
  }
  const RepairPlan plan = PlanRepair(check, diff);
  const int64_t total = plan.writes();
  if (total > kMaxRepairKeys || total * static_cast<int64_t>(diff.key_columns.size()) > kMaxRepairKeyValues) {
    throw VerifyInputError(std::to_string(total) + " keys of " + check.table + " differ; a repair syncs at most " +
                           std::to_string(kMaxRepairKeys) + " (and " + std::to_string(kMaxRepairKeyValues) +
                           " key values; run the topic's sync instead)");
  }
  const std::vector<Row> rows = plan.Keys();
  if (static_cast<int64_t>(rows.size()) != total) {
    throw std::logic_error("RepairPayload: the diff does not hold every differing key");
  }
  for (ColumnKind k : diff.key_kinds) {
    if (k == ColumnKind::kBinary) throw VerifyInputError("a repair of a table with a binary key is not supported");
  }
  json keys = json::array();
  for (const Row& k : rows) keys.push_back(diff.KeyJson(k));
  json fields = json::object();
  for (const std::string& name : check.where.params) {
    if (values.is_object() && values.contains(name)) fields[name] = values[name];
  }
  return {{"topic", topic}, {"step", check.step}, {"payload", fields}, {"keys", keys}};
}

}  // namespace dsync::table
