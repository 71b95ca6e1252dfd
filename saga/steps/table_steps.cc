#include "saga/steps/table_steps.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <exception>
#include <future>
#include <tuple>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/json_limits.h"
#include "table/bind.h"
#include "table/chunks.h"
#include "table/preflight.h"
#include "table/sql.h"
#include "table/text.h"
#include "table/where.h"
#include "storage/error_class.h"

namespace dsync::saga {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;
using table::Bind;
using table::Cell;
using table::ColumnKind;
using table::ColumnSet;
using table::Image;
using table::JsonKind;
using table::Printable;
using table::Row;
using table::SqlValue;
using table::TableSchema;

constexpr int kDefaultChunkSize = 500;
constexpr int kMaxChunkSize = 100000;
// table_delete's ceiling: a filter matching more rows than this fails, deleting none.
constexpr int kDefaultDeleteMaxRows = 10000;
constexpr int kMaxDeleteMaxRows = 10000000;
constexpr int kDefaultSyncChunkSize = 10000;  // table_sync: the largest chunk that holds its rows
constexpr size_t kCompareSpan = 4;            // a compare chunk covers up to this many times as many
constexpr int kDefaultUndoRetentionDays = 7;
// table_sync lanes: key ranges of one step worked at once, each with its own target
// transaction (table_steps.h "Lanes"); a lane spans at least kMinLaneKeys keys.
constexpr int kDefaultLanes = 2;
constexpr int kMaxLanes = 16;
constexpr int64_t kMinLaneKeys = 20000;
// The server refuses statements with more than 65535 placeholders.
constexpr size_t kMaxParamsPerStatement = 60000;
constexpr const char* kUndoTable = "dsync_step_undo";

// The undo table on a target datasource (see table_steps.h). Created on first use.
constexpr const char* kCreateUndoSql = R"(
CREATE TABLE IF NOT EXISTS dsync_step_undo (
  step_code      VARCHAR(128) NOT NULL PRIMARY KEY COMMENT 'idempotency key (distribute_event_step.code)',
  step_name      VARCHAR(64)  NOT NULL,
  table_name     VARCHAR(64)  NOT NULL,
  before_image   LONGTEXT     NULL COMMENT 'JSON before-image; NULL only inside the writing transaction',
  created_at     DATETIME(3)  NOT NULL,
  compensated_at DATETIME(3)  NULL,
  KEY idx_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='dsync: before-images of table_sync / table_delete steps')";

// Takes the step's undo row lock, inserting an empty row if there is none, so that
// concurrent runs of one step serialise here.   params: step_code, step_name, table_name
constexpr const char* kLockUndoSql = R"(
INSERT INTO dsync_step_undo (step_code, step_name, table_name, created_at)
VALUES (?, ?, ?, NOW(3))
ON DUPLICATE KEY UPDATE step_code = step_code)";

// The step's undo row, locked.   params: step_code
constexpr const char* kReadUndoSql = R"(
SELECT before_image, compensated_at IS NOT NULL
FROM dsync_step_undo WHERE step_code = ? FOR UPDATE)";

// Records the (merged) before-image of a forward run. A run after a compensation
// starts a new record.   params: before_image, table_name, step_code
constexpr const char* kSaveUndoSql = R"(
UPDATE dsync_step_undo
SET before_image = ?, table_name = ?,
    created_at = IF(compensated_at IS NULL, created_at, NOW(3)), compensated_at = NULL
WHERE step_code = ?)";

// Marks the step compensated (a repeated compensation then does nothing).
//   params: step_code, step_name, table_name
constexpr const char* kMarkCompensatedSql = R"(
INSERT INTO dsync_step_undo (step_code, step_name, table_name, created_at, compensated_at)
VALUES (?, ?, ?, NOW(3), NOW(3))
ON DUPLICATE KEY UPDATE compensated_at = NOW(3))";

// Best-effort retention.   params: days
constexpr const char* kPurgeUndoSql = R"(
DELETE FROM dsync_step_undo WHERE created_at < NOW(3) - INTERVAL ? DAY LIMIT 1000)";

constexpr const char* kMaxPacketSql = "SELECT @@max_allowed_packet";

// A run stopped before committing (cancelled, lost ownership): transient.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A lane stopped because another lane of its step failed (that failure is the step's).
class LaneStopped : public Interrupted {
 public:
  using Interrupted::Interrupted;
};

// A chunk whose before-image would not fit in one statement: retried smaller.
class ChunkTooBig : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------
// Configuration

// What compensation does with rows someone else changed since the sync wrote them.
enum class OnConflict { kFail, kSkip, kOverwrite };

const char* OnConflictName(OnConflict o) {
  switch (o) {
    case OnConflict::kFail: return "fail";
    case OnConflict::kSkip: return "skip";
    default: return "overwrite";
  }
}

struct Config {
  std::string type;   // table_sync | table_delete
  std::string step;   // step name, for messages
  std::string source;
  std::string target;
  std::string table;
  std::string where_text;
  table::CompiledWhere where;
  int chunk_size = kDefaultChunkSize;
  std::vector<std::string> columns;
  bool delete_missing = false;
  OnConflict on_conflict = OnConflict::kFail;
  int undo_retention_days = kDefaultUndoRetentionDays;
  int lanes = kDefaultLanes;  // table_sync: key ranges worked at once
  bool like_patterns = false;  // payload values bound into LIKE are patterns
  int64_t max_rows = kDefaultDeleteMaxRows;  // table_delete: the most rows one run deletes

  // "table_sync <step>: <action>": a unit of work's name in errors and logs.
  std::string What(std::string_view action) const { return type + " " + step + ": " + std::string(action); }
};

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
    if (!table::IsPlainIdentifier(s)) {
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
      if (!c.is_string() || !table::IsPlainIdentifier(c.get_ref<const std::string&>())) {
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

  table::CompiledWhere Where(const std::string& text, bool like_patterns) const {
    try {
      return table::CompileWhere(text, like_patterns);
    } catch (const table::WhereError& e) {
      Fail(std::string("'where' ") + e.what());
    }
  }

 private:
  const StepSpec& spec_;
  const char* type_;
};

Config ParseConfig(const StepSpec& spec, bool sync) {
  const char* type = sync ? "table_sync" : "table_delete";
  ConfigReader r(spec, type);
  if (sync) {
    r.CheckKeys({"source", "target", "table", "where", "chunk_size", "columns", "delete_missing",
                 "on_conflict", "undo_retention_days", "lanes", "like_patterns"});
  } else {
    r.CheckKeys({"target", "table", "where", "chunk_size", "undo_retention_days", "like_patterns", "max_rows"});
  }
  Config c;
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
  c.chunk_size = r.Int("chunk_size", sync ? kDefaultSyncChunkSize : kDefaultChunkSize, 1, kMaxChunkSize);
  c.undo_retention_days = r.Int("undo_retention_days", kDefaultUndoRetentionDays, 1, 3650);
  if (sync) {
    c.columns = r.Columns("columns");
    c.delete_missing = r.Bool("delete_missing", false);
    c.on_conflict = r.Conflict("on_conflict");
    c.lanes = r.Int("lanes", kDefaultLanes, 1, kMaxLanes);
  }
  return c;
}

// ---------------------------------------------------------------------------
// Helpers shared by both steps

std::vector<int> Positions(const ColumnSet& in, const std::vector<std::string>& names) {
  std::vector<int> out;
  for (const std::string& n : names) out.push_back(in.IndexOf(n));
  return out;
}



// The filter's values from the payload, in placeholder order. `schema` types the
// columns the placeholders are compared with.
// `inner`: the schemas of the filter's subquery tables on the same datasource.
using InnerSchemas = std::map<std::string, TableSchema>;

std::vector<SqlValue> FilterValues(const Config& cfg, const json& payload, const TableSchema& outer,
                                   const InnerSchemas& inner = {}) {
  return table::BindWhereParams(cfg.where, payload, outer, inner, [&](const table::BindFailure& f) {
    switch (f.kind) {
      case table::BindFailure::Kind::kMissing:
        throw PermanentStepError("payload has no field '" + f.field + "' needed by step '" + cfg.step + "'");
      case table::BindFailure::Kind::kNotInteger:
        throw PermanentStepError("payload field '" + f.field + "' must be an integer (column `" + f.column->name +
                                 "` of " + f.schema->label + "), got a string that is not one; step '" + cfg.step +
                                 "'");
      case table::BindFailure::Kind::kUnbindable:
        throw PermanentStepError("payload field '" + f.field + "' is " + f.json_kind + "; step '" + cfg.step +
                                 "' binds only strings, numbers, booleans and null");
    }
  });
}

void CheckStop(StepContext& ctx) {
  // The engine requests a stop at ctx.deadline() (with its own clock) and at shutdown.
  if (ctx.stop_token().stop_requested()) throw Interrupted("cancelled; target changes rolled back");
}

void CheckStillOwner(StepContext& ctx) {
  if (!ctx.StillOwner()) throw Interrupted("lost ownership of the event; target changes rolled back");
}

std::string Backticked(const std::string& name) { return table::QuoteIdentifier(name); }

size_t RowsPerStatement(size_t params_per_row, int chunk_size) {
  size_t cap = std::max<size_t>(1, kMaxParamsPerStatement / std::max<size_t>(1, params_per_row));
  return std::min(cap, static_cast<size_t>(chunk_size));
}

// Rows per statement as a power of four (at most `cap`): full statements of that
// size, the last ones padded or split (table::PaddedCount, NextWriteBatch), so a
// connection prepares few texts.
size_t StatementRows(size_t cap) {
  size_t p = 1;
  while (p * 4 <= cap) p *= 4;
  return p;
}

// About this many bytes of values per multi-row statement (well below the default
// max_allowed_packet of 16 MiB even after padding).
constexpr size_t kStatementBytes = 1 << 20;

size_t CellBytes(const Row& row) {
  size_t n = 0;
  for (const Cell& c : row) n += c ? c->size() : 1;
  return n;
}

// `keys` in batches of one statement each: calls batch(padded, params) with `padded`
// keys to match (key.MatchKeys(padded)), the last repeated up to table::PaddedCount, and
// `params` = `lead` then their values.
template <class F>
void ForKeyBatches(const ColumnSet& key, const std::vector<Row>& keys, int chunk_size,
                   const std::vector<SqlValue>& lead, F&& batch) {
  const size_t per = StatementRows(RowsPerStatement(key.size(), chunk_size));
  for (size_t begin = 0; begin < keys.size(); begin += per) {
    size_t n = std::min(per, keys.size() - begin);
    size_t padded = table::PaddedCount(n, per);
    std::vector<SqlValue> params = lead;
    for (size_t i = 0; i < padded; ++i) key.AppendKeyValues(keys[begin + std::min(i, n - 1)], params);
    batch(padded, params);
  }
}

// SELECT cols FROM table WHERE [(filter) AND] key IN (keys) [FOR UPDATE], in batches.
std::vector<Row> ReadByKeys(Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                            const std::vector<Row>& keys, int chunk_size, bool for_update,
                            const table::BoundFilter* filter = nullptr) {
  std::vector<Row> out;
  const std::vector<SqlValue> lead = filter != nullptr ? filter->params : std::vector<SqlValue>();
  ForKeyBatches(key, keys, chunk_size, lead, [&](size_t padded, const std::vector<SqlValue>& params) {
    std::string sql = "SELECT " + cols.SelectList() + " FROM " + Backticked(table) + " WHERE " +
                      (filter != nullptr ? "(" + filter->sql + ") AND (" : "(") + key.MatchKeys(padded) + ")" +
                      (for_update ? " FOR UPDATE" : "");
    auto rs = c.Query(sql, Bind(params));
    for (Row& r : cols.ReadAll(*rs)) out.push_back(std::move(r));
  });
  return out;
}

// The row hash (ColumnSet::RowHashExpr over `cols`) of each row of `table` whose key
// is among `keys`, by table::EncodeKey of the key as the table stores it, in batches:
//   SELECT <key>, <row hash> FROM table WHERE key IN (keys) [FOR UPDATE]
std::unordered_map<std::string, uint32_t> HashesByKeys(Connection& c, const std::string& table, const ColumnSet& cols,
                                                       const ColumnSet& key, const std::vector<Row>& keys,
                                                       int chunk_size, bool for_update) {
  std::unordered_map<std::string, uint32_t> out;
  const std::string head = "SELECT " + key.SelectList() + ", " + cols.RowHashExpr() + " FROM " + Backticked(table) +
                           " WHERE ";
  ForKeyBatches(key, keys, chunk_size, {}, [&](size_t padded, const std::vector<SqlValue>& params) {
    auto rs = c.Query(head + key.MatchKeys(padded) + (for_update ? " FOR UPDATE" : ""), Bind(params));
    while (rs->next()) {
      table::KeyHash kh = table::ReadKeyHash(*rs, key);
      out[table::EncodeKey(kh.key)] = kh.hash;
    }
  });
  return out;
}

// The keys of a before-image's entries: its restore rows' keys, then its remove keys.
std::vector<Row> EntryKeys(const Image& image, const std::vector<int>& key_pos) {
  std::vector<Row> keys;
  keys.reserve(image.restore.size() + image.remove.size());
  for (const Row& r : image.restore) keys.push_back(table::Project(r, key_pos));
  for (const Row& k : image.remove) keys.push_back(k);
  return keys;
}

// The after-image hashes of a chunk (conflict-safe compensation): for each entry of
// `image` (EntryKeys order), the row hash over the image's columns of the target row
// with that key as it is now, or null where there is none. Recorded as the chunk
// commits, and compared with the same read when it is compensated.
// `span`: a DenseSpan holding every entry's key, read whole instead of key by key.
json AfterState(Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                const std::vector<int>& key_pos, const Image& image, int chunk_size, bool for_update,
                const std::optional<table::KeySpan>& span = std::nullopt) {
  const std::vector<Row> keys = EntryKeys(image, key_pos);
  const auto hashes = span && !for_update ? table::HashesInSpan(c, table, cols, key, *span)
                                          : HashesByKeys(c, table, cols, key, keys, chunk_size, for_update);
  json out = json::array();
  for (const Row& k : keys) {
    auto it = hashes.find(table::EncodeKey(k));
    if (it == hashes.end()) out.push_back(nullptr);
    else out.push_back(it->second);
  }
  return out;
}

// A chunk record's JSON: Image::ToJson() plus "after" (AfterState), written straight
// into one string instead of through a JSON tree, which held the chunk's rows a second
// and third time (tree, then text) at the chunk's peak.
std::string ChunkRecordText(const Image& image, const json& after) {
  std::string out;
  size_t bytes = 256;
  for (const Row& r : image.restore) bytes += CellBytes(r) + 4 * r.size();
  for (const Row& r : image.remove) bytes += CellBytes(r) + 4 * r.size();
  out.reserve(bytes + 12 * after.size());
  auto text = [&](const std::string& s) { out += json(s).dump(); };  // escaped, UTF-8 checked
  auto field = [&](const char* name) {  // ,"name":
    out += ",\"";
    out += name;
    out += "\":";
  };
  auto names = [&](const char* name, const std::vector<std::string>& v) {
    field(name);
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ',';
      text(v[i]);
    }
    out += ']';
  };
  auto rows = [&](const char* name, const std::vector<Row>& v) {
    field(name);
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      out += i > 0 ? ",[" : "[";
      for (size_t c = 0; c < v[i].size(); ++c) {
        if (c > 0) out += ',';
        if (v[i][c]) text(*v[i][c]);
        else out += "null";
      }
      out += ']';
    }
    out += ']';
  };
  out += "{\"format\":1,\"table\":";
  text(image.table);
  names("columns", image.columns);
  names("key", image.key);
  names("binary", image.binary);
  rows("restore", image.restore);
  rows("remove", image.remove);
  field("after");
  out += after.dump();
  out += '}';
  return out;
}

// Multi-row INSERT ... ON DUPLICATE KEY UPDATE of `rows`, or with `insert_only` a plain INSERT
// (rows whose keys the target does not hold: a duplicate key is then an error, not
// an update of whichever row holds it). Statements of a power of four rows; upserts
// pad the last one with repeats of its last row (NextWriteBatch), inserts cannot.
void Upsert(Connection& c, const std::string& table, const ColumnSet& cols, const std::vector<const Row*>& rows,
            int chunk_size, bool insert_only = false) {
  if (rows.empty()) return;
  std::string update;
  for (const std::string& n : cols.names()) {
    update += (update.empty() ? "" : ", ") + Backticked(n) + " = VALUES(" + Backticked(n) + ")";
  }
  size_t bytes = 0;
  for (const Row* r : rows) bytes += CellBytes(*r);
  const size_t avg = std::max<size_t>(1, bytes / rows.size());
  const size_t per = StatementRows(
      std::min(RowsPerStatement(cols.size(), chunk_size), std::max<size_t>(1, kStatementBytes / avg)));
  const std::string tuple = cols.ValuesTuple();
  for (size_t begin = 0, n = 0; begin < rows.size(); begin += n) {
    const table::WriteBatch batch = table::NextWriteBatch(rows.size() - begin, per, /*may_pad=*/!insert_only);
    n = batch.rows;
    const size_t padded = batch.padded;
    std::vector<SqlValue> params;
    params.reserve(padded * cols.size());
    std::string sql = "INSERT INTO " + Backticked(table) + " (" + cols.NameList() + ") VALUES ";
    for (size_t i = 0; i < padded; ++i) {
      sql += (i > 0 ? ", " : "") + tuple;
      cols.AppendValues(*rows[begin + std::min(i, n - 1)], params);
    }
    if (!insert_only) sql += " ON DUPLICATE KEY UPDATE " + update;
    c.Execute(sql, Bind(params));
  }
}

void DeleteKeys(Connection& c, const std::string& table, const ColumnSet& key, const std::vector<Row>& keys,
                int chunk_size) {
  ForKeyBatches(key, keys, chunk_size, {}, [&](size_t padded, const std::vector<SqlValue>& params) {
    c.Execute("DELETE FROM " + Backticked(table) + " WHERE " + key.MatchKeys(padded), Bind(params));
  });
}

// SELECT cols FROM table WHERE (filter) [AND key > last] ORDER BY key LIMIT chunk [FOR UPDATE]
std::string ScanSql(const Config& cfg, const ColumnSet& cols, const ColumnSet& key, bool after, bool for_update) {
  std::string sql = "SELECT " + cols.SelectList() + " FROM " + Backticked(cfg.table) + " WHERE (" + cfg.where.sql + ")";
  if (after) sql += " AND (" + key.AfterKey() + ")";
  sql += " ORDER BY " + key.OrderBy() + " LIMIT " + std::to_string(cfg.chunk_size);
  if (for_update) sql += " FOR UPDATE";
  return sql;
}

// The rows the filter matches (table_delete's ceiling).   params: the filter's
std::string CountSql(const Config& cfg) {
  return "SELECT COUNT(*) FROM " + Backticked(cfg.table) + " WHERE (" + cfg.where.sql + ")";
}

std::vector<SqlValue> ScanParams(const std::vector<SqlValue>& filter, const ColumnSet& key, const std::optional<Row>& last) {
  std::vector<SqlValue> params = filter;
  if (last) key.AppendAfterKeyValues(*last, params);
  return params;
}

// The undo row of a step, locked by the current transaction.
struct UndoRecord {
  bool exists = false;
  bool compensated = false;
  std::optional<json> image;
};

UndoRecord ReadUndo(Connection& c, const std::string& step_code, const Config& cfg) {
  UndoRecord r;
  auto rs = c.Query(kReadUndoSql, step_code);
  if (!rs->next()) return r;
  r.exists = true;
  r.compensated = rs->getBoolean(2);
  if (!rs->isNull(1)) {
    try {
      r.image = ParseJsonBounded(std::string(rs->getString(1)), "the undo record");
    } catch (const JsonTooDeepError& e) {
      throw PermanentStepError(std::string(e.what()) + " (step '" + cfg.step + "', " + cfg.target + "." + kUndoTable + ")");
    } catch (const json::exception&) {
      throw PermanentStepError("the undo record of step '" + cfg.step + "' in " + cfg.target + "." + kUndoTable +
                               " is not valid JSON");
    }
  }
  return r;
}

Image ParseImage(const json& j, const Config& cfg) {
  try {
    return Image::FromJson(j);
  } catch (const std::invalid_argument& e) {
    throw PermanentStepError("step '" + cfg.step + "': " + e.what());
  }
}

// A table the steps keep in each target datasource (dsync_step_undo, dsync_sync_chunk).
// Prepare creates it on a handler's first use of a target (remembered by the target's
// masked URL until Forget, so that one dropped behind our back is created again) and
// purges records older than the step's undo_retention_days at every use; a failed purge
// is logged as `purge_failed_event`, it never fails the step.
//
// Thread safety: Prepare and Forget may be called from any thread.
class TargetTable {
 public:
  TargetTable(const char* name, const char* create_sql, const char* purge_sql, const char* purge_failed_event)
      : name_(name), create_sql_(create_sql), purge_sql_(purge_sql), purge_failed_event_(purge_failed_event) {}

  void Prepare(ConnectionPool& pool, const Config& cfg) {
    const std::string id = pool.url().Masked();
    bool ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready = ready_.count(id) > 0;
    }
    if (!ready) {
      pool.Run(cfg.What(std::string("create ") + name_), [&](Connection& c) { c.Execute(create_sql_); });
      std::lock_guard<std::mutex> lock(mu_);
      ready_.insert(id);
    }
    try {
      pool.Run(cfg.What(std::string("purge ") + name_),
               [&](Connection& c) { return c.Execute(purge_sql_, cfg.undo_retention_days); });
    } catch (const DbError& e) {
      spdlog::warn("{} step={} err={}", purge_failed_event_, cfg.step, e.what());
    }
  }

  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    ready_.clear();
  }

 private:
  const char* const name_;
  const char* const create_sql_;
  const char* const purge_sql_;
  const char* const purge_failed_event_;
  std::mutex mu_;
  std::set<std::string> ready_;  // targets (masked URL) where the table exists
};

// The before-image of a run, merged with what earlier runs of the same step recorded:
// a key's before-state is the one seen the first time the step changed that row.
class ImageBuilder {
 public:
  ImageBuilder(const Config& cfg, const ColumnSet& image_cols, const std::vector<std::string>& key,
               const std::optional<json>& earlier)
      : key_pos_(Positions(image_cols, key)) {
    image_.table = cfg.table;
    image_.columns = image_cols.names();
    image_.key = key;
    for (size_t i = 0; i < image_cols.size(); ++i) {
      if (image_cols.at(i).kind == ColumnKind::kBinary) image_.binary.push_back(image_cols.at(i).name);
    }
    if (!earlier) return;
    Image first = ParseImage(*earlier, cfg);
    if (first.table != image_.table || first.columns != image_.columns || first.key != image_.key) {
      throw PermanentStepError("table " + cfg.target + "." + cfg.table + " changed its columns since step '" +
                               cfg.step + "' first ran; its before-image cannot be extended");
    }
    image_.restore = std::move(first.restore);
    image_.remove = std::move(first.remove);
    for (const Row& r : image_.restore) covered_.insert(table::EncodeKey(table::Project(r, key_pos_)));
    for (const Row& k : image_.remove) covered_.insert(table::EncodeKey(k));
  }

  // A row as it was before this step changed or deleted it (full image columns).
  void Restore(const Row& row) {
    if (covered_.insert(table::EncodeKey(table::Project(row, key_pos_))).second) image_.restore.push_back(row);
  }
  // The key of a row this step creates.
  void Remove(const Row& key) {
    if (covered_.insert(table::EncodeKey(key)).second) image_.remove.push_back(key);
  }
  const Image& image() const { return image_; }

 private:
  std::vector<int> key_pos_;
  Image image_;
  std::unordered_set<std::string> covered_;
};

// Writes the image into the undo row (locked earlier in the same transaction).
json SaveUndo(Connection& c, const std::string& step_code, const Config& cfg, const Image& image) {
  json j = image.ToJson();
  std::string text = j.dump();
  int64_t packet = c.QueryInt(kMaxPacketSql).value_or(0);
  if (packet > 0 && static_cast<int64_t>(text.size()) + 4096 > packet) {
    throw PermanentStepError("step '" + cfg.step + "': the before-image (" + std::to_string(text.size()) +
                             " bytes) exceeds max_allowed_packet of " + cfg.target + " (" + std::to_string(packet) +
                             " bytes); narrow the step's where");
  }
  c.Execute(kSaveUndoSql, text, cfg.table, step_code);
  return j;
}

bool IsPermanent(const DbError& e) {
  if (storage::IsPermanentSqlError(e)) return true;  // syntax, access, missing table or column
  switch (e.kind()) {
    case DbError::Kind::kNoSuchTable:
    case DbError::Kind::kDuplicateKey:  // a secondary unique key: retrying will not help
    case DbError::Kind::kUnknownDatabase:
      return true;
    case DbError::Kind::kOther:
      switch (e.code()) {
        case 1048:  // column cannot be null
        case 1054:  // unknown column
        case 1216: case 1217: case 1451: case 1452:  // foreign key
        case 1264:  // out of range
        case 1265:  // data truncated
        case 1292:  // incorrect date/time value
        case 1364:  // no default value
        case 1366:  // incorrect value (charset)
        case 1406:  // data too long
        case 1690:  // value out of range
        case 3819: case 4025:  // CHECK constraint
          return true;
        default:
          return false;
      }
    default:
      return false;
  }
}

// ---------------------------------------------------------------------------
// The steps

class TableStep : public StepHandler {
 public:
  explicit TableStep(Config cfg) : cfg_(std::move(cfg)) {}

  StepResult Compensate(StepContext& ctx) override {
    return Guarded([&] { return Undo(ctx); });
  }

  // Every change is recorded with its before-image in the target as it commits (undo
  // and chunk records, keyed by the step code): an interrupted attempt can be undone.
  bool CompensatesInterrupted() const override { return true; }

 protected:
  // Expected failures become results; transient database errors propagate.
  template <class F>
  StepResult Guarded(F&& body) {
    try {
      return body();
    } catch (const PermanentStepError& e) {
      return StepResult::Permanent(e.what());
    } catch (const Interrupted& e) {
      return StepResult::Transient(e.what());
    } catch (const DbError& e) {
      if (e.kind() == DbError::Kind::kNoSuchTable && std::string(e.what()).find(kUndoTable) != std::string::npos) {
        undo_table_.Forget();  // dropped behind our back: recreate on the next try
        throw;
      }
      if (IsPermanent(e)) return StepResult::Permanent("step '" + cfg_.step + "': " + e.what());
      throw;
    } catch (const UsageError& e) {  // unknown datasource name
      return StepResult::Permanent("step '" + cfg_.step + "': " + e.what());
    } catch (const json::exception& e) {  // e.g. a before-image that is not UTF-8
      return StepResult::Permanent("step '" + cfg_.step + "': " + e.what());
    }
  }

  std::string What(const char* action) const { return cfg_.What(action); }

  TableSchema Describe(ConnectionPool& pool, const std::string& datasource) {
    auto schema = pool.Run(What("describe table"), [&](Connection& c) {
      return table::DescribeTable(c, datasource, cfg_.table);
    });
    if (!schema) throw PermanentStepError("table " + datasource + "." + cfg_.table + " does not exist");
    return std::move(*schema);
  }

  static void RequireKey(const TableSchema& t) {
    if (t.key.empty()) throw PermanentStepError("table " + t.label + " has no primary key");
    for (const std::string& k : t.key) {
      const table::Column* c = t.Find(k);
      if (c->kind == ColumnKind::kFloat) {
        throw PermanentStepError("primary key column `" + k + "` of " + t.label + " is " + c->column_type +
                                 ": floating-point keys are not supported");
      }
      if (c->generated) {
        throw PermanentStepError("primary key column `" + k + "` of " + t.label + " is generated: not supported");
      }
    }
  }

  void RequireFilterColumns(const TableSchema& t) const {
    for (const std::string& c : cfg_.where.columns) {
      if (t.Find(c) == nullptr) {
        throw PermanentStepError("where of step '" + cfg_.step + "' reads column `" + c + "`, which " + t.label +
                                 " does not have");
      }
    }
  }

  // The schemas of the filter's subquery tables on a datasource, each checked to have
  // the columns the filter reads; `missing` says which is not there.
  struct Inner {
    InnerSchemas schemas;
    std::string missing;  // "" when all are there
  };
  Inner DescribeSubqueryTables(ConnectionPool& pool, const std::string& datasource) {
    Inner r;
    InnerSchemas& out = r.schemas;
    for (const auto& sq : cfg_.where.subqueries) {
      if (out.count(sq.table) > 0) continue;
      auto schema = pool.Run(What("describe subquery table"), [&](Connection& c) {
        return table::DescribeTable(c, datasource, sq.table);
      });
      if (!schema) {
        r.missing = "table " + datasource + "." + sq.table + " (read by the where of step '" + cfg_.step +
                    "') does not exist";
        return r;
      }
      out.emplace(sq.table, std::move(*schema));
    }
    for (const auto& sq : cfg_.where.subqueries) {
      for (const std::string& c : sq.columns) {
        if (out.at(sq.table).Find(c) == nullptr) {
          r.missing = "where of step '" + cfg_.step + "' reads column `" + c + "`, which " + datasource + "." +
                      sq.table + " does not have";
          return r;
        }
      }
    }
    return r;
  }

  // Puts a before-image back on the target through `c` (the caller's transaction):
  // deletes the rows the step created, upserts the rows it changed or deleted.
  // Returns (removed, restored).
  std::pair<int64_t, int64_t> RestoreImage(Connection& c, const Image& image, StepContext& ctx) {
    if (image.table != cfg_.table) {
      throw PermanentStepError("step '" + cfg_.step + "': its before-image is of table " + image.table + ", not " +
                               cfg_.table);
    }
    auto t = table::DescribeTable(c, cfg_.target, cfg_.table);
    if (!t) throw PermanentStepError("table " + cfg_.target + "." + cfg_.table + " does not exist");
    for (const std::string& name : image.columns) {
      const table::Column* col = t->Find(name);
      bool was_binary = std::find(image.binary.begin(), image.binary.end(), name) != image.binary.end();
      if (col == nullptr || col->generated || (col->kind == ColumnKind::kBinary) != was_binary) {
        throw PermanentStepError("column `" + name + "` of " + t->label + " was dropped or changed type since step '" +
                                 cfg_.step + "' ran; cannot restore its before-image");
      }
    }
    ColumnSet cols(*t, image.columns);
    ColumnSet key(*t, image.key);
    DeleteKeys(c, cfg_.table, key, image.remove, cfg_.chunk_size);
    CheckStop(ctx);
    // As a sync chunk writes (ApplyChunk): rows whose key the target holds now are
    // upserted back, the others inserted, so a clash over a secondary unique key with
    // a row written since fails instead of overwriting that row. When a row matched a
    // key in SQL only (a case-insensitive collation), every row is upserted.
    const std::vector<int> key_pos = Positions(cols, image.key);
    std::vector<Row> keys;
    keys.reserve(image.restore.size());
    for (const Row& r : image.restore) keys.push_back(table::Project(r, key_pos));
    std::unordered_set<std::string> wanted, present;
    for (const Row& k : keys) wanted.insert(table::EncodeKey(k));
    bool sql_only_match = false;
    for (const Row& k : ReadByKeys(c, cfg_.table, key, key, keys, cfg_.chunk_size, /*for_update=*/true)) {
      std::string enc = table::EncodeKey(k);
      sql_only_match = sql_only_match || wanted.count(enc) == 0;
      present.insert(std::move(enc));
    }
    std::vector<const Row*> updates, inserts;
    for (size_t i = 0; i < image.restore.size(); ++i) {
      const bool held = sql_only_match || present.count(table::EncodeKey(keys[i])) > 0;
      (held ? updates : inserts).push_back(&image.restore[i]);
    }
    Upsert(c, cfg_.table, cols, updates, cfg_.chunk_size);
    InsertAbsent(c, cols, inserts, "compensation of step '" + cfg_.step + "'");
    return {static_cast<int64_t>(image.remove.size()), static_cast<int64_t>(image.restore.size())};
  }

  // Inserts rows whose keys a locked read found absent (Upsert with insert_only). A
  // clash over the primary key (a row inserted meanwhile, at READ COMMITTED) is
  // Interrupted: rolled back, run again. One over another unique key is permanent,
  // named, `who` leading the message.
  void InsertAbsent(Connection& c, const ColumnSet& cols, const std::vector<const Row*>& rows,
                    const std::string& who) const {
    try {
      Upsert(c, cfg_.table, cols, rows, cfg_.chunk_size, /*insert_only=*/true);
    } catch (const DbError& e) {
      if (e.kind() != DbError::Kind::kDuplicateKey) throw;
      if (std::string(e.what()).find("PRIMARY") != std::string::npos) {
        throw Interrupted("a target row was inserted into the key range while " + who + " ran (" +
                          std::string(e.what()) + "); target changes rolled back");
      }
      throw PermanentStepError(who + ": a row clashes with another row of " + cfg_.target + "." + cfg_.table +
                               " over a unique key (" + e.what() + "); target changes rolled back");
    }
  }

  // Locks the undo row; returns the before-image earlier runs recorded (none after a
  // compensation: a forward run after it starts over).
  std::optional<json> LockUndo(Connection& c, const std::string& step_code) const {
    c.Execute(kLockUndoSql, step_code, cfg_.step, cfg_.table);
    UndoRecord r = ReadUndo(c, step_code, cfg_);
    if (r.compensated) return std::nullopt;
    return r.image;
  }

  const Config cfg_;
  TargetTable undo_table_{kUndoTable, kCreateUndoSql, kPurgeUndoSql, "TABLE_STEP_UNDO_PURGE_FAILED"};

 private:
  StepResult Undo(StepContext& ctx) {
    ConnectionPool& pool = ctx.datasources().Get(cfg_.target);
    undo_table_.Prepare(pool, cfg_);
    const std::string step_code = ctx.idempotency_key();
    json out = pool.Transact(What("compensate"), [&](Connection& c) -> json {
      CheckStop(ctx);
      UndoRecord undo = ReadUndo(c, step_code, cfg_);
      if (undo.compensated) return {{"already_compensated", true}};
      std::optional<Image> image;
      if (undo.image) {
        image = ParseImage(*undo.image, cfg_);
      } else if (!ctx.compensation_data().is_null() &&
                 !(ctx.compensation_data().is_object() && ctx.compensation_data().empty())) {
        image = ParseImage(ctx.compensation_data(), cfg_);  // the undo row was purged
      }
      size_t removed = 0, restored = 0;
      if (image) {
        if (image->table != cfg_.table) {
          throw PermanentStepError("step '" + cfg_.step + "': its before-image is of table " + image->table +
                                   ", not " + cfg_.table);
        }
        RestoreImage(c, *image, ctx);
        removed = image->remove.size();
        restored = image->restore.size();
      }
      CheckStillOwner(ctx);
      c.Execute(kMarkCompensatedSql, step_code, cfg_.step, cfg_.table);
      return {{"removed", removed}, {"restored", restored}};
    });
    spdlog::debug("TABLE_STEP_COMPENSATED step={} code={} result={}", cfg_.step, step_code, out.dump());
    return StepResult::Ok(std::move(out));
  }
};

// ---------------------------------------------------------------------------
// table_sync: chunk by chunk (see table_steps.h "Chunks")

// The chunk table on a target datasource. Created on first use.
constexpr const char* kCreateChunkTableSql = R"(
CREATE TABLE IF NOT EXISTS dsync_sync_chunk (
  step_code      VARCHAR(128) NOT NULL COMMENT 'idempotency key (distribute_event_step.code)',
  chunk_no       INT          NOT NULL COMMENT '0: the step (its lock, compensated mark); 1, 2, ...: chunks in key order',
  step_name      VARCHAR(64)  NOT NULL,
  table_name     VARCHAR(64)  NOT NULL,
  attempt        INT          NOT NULL DEFAULT 0 COMMENT 'claim attempt of the run that committed the chunk',
  lo_key         LONGTEXT     NULL COMMENT 'JSON key cells, exclusive lower end; NULL: the start',
  hi_key         LONGTEXT     NULL COMMENT 'JSON key cells, inclusive upper end (the checkpoint); NULL: the end. Row 0: the lanes'' split keys',
  before_image   LONGTEXT     NULL COMMENT 'JSON before-image of the rows the chunk changed; NULL: none',
  rows_read      BIGINT       NOT NULL DEFAULT 0,
  rows_written   BIGINT       NOT NULL DEFAULT 0,
  created_at     DATETIME(3)  NOT NULL,
  compensated_at DATETIME(3)  NULL,
  PRIMARY KEY (step_code, chunk_no),
  KEY idx_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='dsync: checkpoints and before-images of table_sync chunks')";

// The step's row 0: taken first by every chunk transaction and compensation, so runs
// of one step serialise on it.   params: step_code, step_name, table_name
constexpr const char* kLockStepSql = R"(
INSERT INTO dsync_sync_chunk (step_code, chunk_no, step_name, table_name, created_at)
VALUES (?, 0, ?, ?, NOW(3))
ON DUPLICATE KEY UPDATE step_code = step_code)";

// The step's fencing token (row 0's attempt): the highest claim attempt of the event
// that has run the step on this target. A run raises it to its own attempt before its
// first write; a chunk or compensation transaction of an older attempt then finds it
// higher and rolls back (table_steps.h "Fencing").   params: step_code
constexpr const char* kReadFenceSql = R"(
SELECT attempt FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = 0 FOR UPDATE)";

// Raises the token to the caller's attempt.   params: attempt, step_code, attempt
constexpr const char* kRaiseFenceSql = R"(
UPDATE dsync_sync_chunk SET attempt = ? WHERE step_code = ? AND chunk_no = 0 AND attempt < ?)";

// What earlier runs committed.   params: step_code
constexpr const char* kStepStateSql = R"(
SELECT COALESCE(MAX(chunk_no), 0), COUNT(*), COALESCE(SUM(compensated_at IS NOT NULL), 0),
       COALESCE(SUM(rows_written), 0)
FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0)";

// The step's row 0: its compensated mark, its lanes' split keys (a JSON array of keys;
// NULL: one lane).   params: step_code
constexpr const char* kStepRowSql = R"(
SELECT compensated_at IS NOT NULL, hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = 0)";

// The newest chunk record (under the step lock: its number + 1 is the next chunk's).
//   params: step_code
constexpr const char* kNewestChunkSql = R"(
SELECT chunk_no, attempt FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0
ORDER BY chunk_no DESC LIMIT 1 FOR UPDATE)";

// Records the lanes' split keys in row 0, once (at the step's first run).
//   params: splits, step_code
constexpr const char* kRecordLanesSql = R"(
UPDATE dsync_sync_chunk SET hi_key = ? WHERE step_code = ? AND chunk_no = 0 AND hi_key IS NULL)";

// What row 0 holds then, under the step lock.   params: step_code
constexpr const char* kLockedLanesSql = R"(
SELECT hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = 0 FOR UPDATE)";

// Every chunk's upper end, oldest first (each lane's checkpoint).   params: step_code
constexpr const char* kChunkEndsSql = R"(
SELECT hi_key IS NULL, hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0 ORDER BY chunk_no)";

// A chunk's upper end.   params: step_code, chunk_no
constexpr const char* kChunkHiSql = R"(
SELECT hi_key IS NULL, hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = ?)";

// A committed chunk.   params: step_code, chunk_no, step_name, table_name, attempt, lo_key,
// hi_key, before_image, rows_read, rows_written
constexpr const char* kInsertChunkSql = R"(
INSERT INTO dsync_sync_chunk (step_code, chunk_no, step_name, table_name, attempt, lo_key, hi_key,
  before_image, rows_read, rows_written, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(3)))";

// A forward run after a full compensation starts over.   params: step_code
// (Row 0 stays, its fencing token raised by this run; its marks are cleared.)
constexpr const char* kForgetChunksSql = "DELETE FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0";
constexpr const char* kForgetStepSql = R"(
UPDATE dsync_sync_chunk SET compensated_at = NULL, hi_key = NULL WHERE step_code = ? AND chunk_no = 0)";

// Chunks left to restore, last first.   params: step_code
constexpr const char* kChunksToRestoreSql = R"(
SELECT chunk_no FROM dsync_sync_chunk
WHERE step_code = ? AND chunk_no > 0 AND compensated_at IS NULL AND before_image IS NOT NULL
ORDER BY chunk_no DESC)";

// One chunk's image, locked.   params: step_code, chunk_no
constexpr const char* kReadChunkImageSql = R"(
SELECT before_image, compensated_at IS NOT NULL FROM dsync_sync_chunk
WHERE step_code = ? AND chunk_no = ? FOR UPDATE)";

// The same without the lock (the conflict check's first pass).   params: step_code, chunk_no
constexpr const char* kPeekChunkImageSql = R"(
SELECT before_image, compensated_at IS NOT NULL FROM dsync_sync_chunk
WHERE step_code = ? AND chunk_no = ?)";

// params: step_code, chunk_no
constexpr const char* kMarkChunkCompensatedSql = R"(
UPDATE dsync_sync_chunk SET compensated_at = NOW(3) WHERE step_code = ? AND chunk_no = ?)";

// The whole step (row 0 and checkpoint-only chunks) once every chunk is restored.
//   params: step_code
constexpr const char* kMarkStepCompensatedSql = R"(
UPDATE dsync_sync_chunk SET compensated_at = NOW(3) WHERE step_code = ? AND compensated_at IS NULL)";

// Best-effort retention.   params: days
constexpr const char* kPurgeChunksSql = R"(
DELETE FROM dsync_sync_chunk WHERE created_at < NOW(3) - INTERVAL ? DAY LIMIT 1000)";

using table::KeyBounds;

// Runs f and g at once (source and target are different servers), returns both.
template <class F, class G>
auto Both(F&& f, G&& g) {
  auto second = std::async(std::launch::async, std::forward<G>(g));
  auto first = f();
  return std::make_pair(std::move(first), second.get());
}

std::string NullableJson(const std::optional<Row>& key) {
  return key ? table::KeyToJson(*key).dump() : std::string();
}

// A range of the source read ahead on another thread, while the chunk before it is
// worked on (source and target are different servers). `Result` is what a read gives:
// the range's rows, or their row hashes.
//   ReadAhead<std::vector<Row>> ahead;
//   rows = ahead.Take(lo, size, read);            // read ahead from lo, else read(lo, size) now
//   if (rows.size() == size) ahead.Start(hi, next_size, read);
// Take sets `size` to the size the range was read with (a range read ahead has the size
// planned one chunk earlier), so "fewer rows than asked: the end" still holds.
// Dropping it (Drop, a Take from another key, destruction) waits for the read.
template <class Result>
class ReadAhead {
 public:
  template <class Read>
  Result Take(const std::optional<Row>& lo, size_t& size, Read&& read) {
    if (ahead_ && ahead_->lo == lo) {
      Ahead a = std::move(*ahead_);
      ahead_.reset();
      size = a.size;
      return a.result.get();
    }
    ahead_.reset();
    return read(lo, size);
  }
  template <class Read>
  void Start(const Row& lo, size_t size, Read& read) {
    ahead_.reset();
    ahead_ = Ahead{lo, size, std::async(std::launch::async, [&read, lo, size] { return read(lo, size); })};
  }
  void Drop() { ahead_.reset(); }

 private:
  struct Ahead {
    std::optional<Row> lo;
    size_t size = 0;
    std::future<Result> result;
  };
  std::optional<Ahead> ahead_;
};

class TableSyncStep final : public TableStep {
 public:
  using TableStep::TableStep;

  StepResult Execute(StepContext& ctx) override {
    return Guarded([&] { return Sync(ctx); });
  }

  StepResult Compensate(StepContext& ctx) override {
    const json& data = ctx.compensation_data();
    // Images of the single-transaction format (format 1) live in dsync_step_undo.
    if (data.is_object() && data.value("format", 0) == 1) return TableStep::Compensate(ctx);
    return Guarded([&] { return UndoChunks(ctx); });
  }

 private:
  // Column sets of one run; positions index rows read through them.
  struct Plan {
    ColumnSet src_cols;        // synced columns, read from the source
    ColumnSet src_key;
    ColumnSet tgt_cols;        // synced columns, written to the target
    ColumnSet tgt_key;
    ColumnSet tgt_image;       // every writable target column: the before-image
    std::vector<int> sync_key_pos;   // key within synced columns
    std::vector<int> image_key_pos;  // key within image columns
    std::vector<int> sync_in_image;  // each synced column within image columns
    std::vector<std::string> not_in_target;  // source columns not synced: the target lacks them
  };

  struct Counts {
    int64_t rows = 0, inserted = 0, updated = 0, unchanged = 0, deleted = 0;
    int64_t chunks = 0, chunks_equal = 0, chunks_written = 0, rows_fetched = 0;
    Counts& operator+=(const Counts& o) {
      rows += o.rows, inserted += o.inserted, updated += o.updated, unchanged += o.unchanged;
      deleted += o.deleted, chunks += o.chunks, chunks_equal += o.chunks_equal;
      chunks_written += o.chunks_written, rows_fetched += o.rows_fetched;
      return *this;
    }
  };

  // What earlier runs of the step committed.
  struct Resume {
    int last_chunk = 0;           // highest chunk_no (0: none)
    std::optional<Row> checkpoint;  // its hi_key
    bool finished = false;        // its hi_key is the end
    int64_t records = 0;          // chunk records
    int64_t rows_written = 0;
    std::optional<std::string> lanes;  // row 0's split keys (JSON), if recorded
  };

  // One chunk's work, decided before its target transaction.
  struct ChunkWork {
    table::KeyRange range;
    std::vector<Row> rows;        // source rows to upsert where they differ (synced columns)
    std::vector<Row> delete_keys; // target keys to delete (delete_missing)
    int64_t rows_read = 0;        // source rows in the range
    int64_t equal_by_hash = 0;    // rows the row hashes showed equal (not fetched)
    bool equal = false;           // the range checksums matched: nothing to do
  };

  Plan MakePlan(const TableSchema& s, const TableSchema& t) const {
    RequireKey(t);
    for (const std::string& k : t.key) {
      const table::Column* sc = s.Find(k);
      if (sc == nullptr) {
        throw PermanentStepError("table " + s.label + " has no column `" + k + "` (primary key of " + t.label + ")");
      }
      if (sc->column_type != t.Find(k)->column_type) {
        throw PermanentStepError("primary key column `" + k + "` is " + sc->column_type + " in " + s.label +
                                 " but " + t.Find(k)->column_type + " in " + t.label);
      }
    }
    std::vector<std::string> names;
    if (!cfg_.columns.empty()) {
      for (const std::string& n : cfg_.columns) {
        const table::Column* tc = t.Find(n);
        if (s.Find(n) == nullptr || tc == nullptr || tc->generated) {
          throw PermanentStepError("column `" + n + "` of step '" + cfg_.step + "' is missing from " +
                                   (s.Find(n) == nullptr ? s.label : t.label) +
                                   (tc != nullptr && tc->generated ? " (generated)" : ""));
        }
      }
      for (const std::string& k : t.key) {
        if (std::find(cfg_.columns.begin(), cfg_.columns.end(), k) == cfg_.columns.end()) {
          throw PermanentStepError("columns of step '" + cfg_.step + "' must include the primary key column `" +
                                   k + "` of " + t.label);
        }
      }
      names = cfg_.columns;
    } else {
      for (const std::string& n : t.WritableColumns()) {
        if (s.Find(n) != nullptr) names.push_back(n);
      }
    }
    std::vector<std::string> not_in_target;
    if (cfg_.columns.empty()) {
      for (const table::Column& c : s.columns) {
        if (!c.generated && t.Find(c.name) == nullptr) not_in_target.push_back(c.name);
      }
    }
    RequireFilterColumns(s);
    if (cfg_.delete_missing) RequireFilterColumns(t);
    Plan p{ColumnSet(s, names), ColumnSet(s, t.key), ColumnSet(t, names), ColumnSet(t, t.key),
           ColumnSet(t, t.WritableColumns()), {}, {}, {}, std::move(not_in_target)};
    p.sync_key_pos = Positions(p.src_cols, t.key);
    p.image_key_pos = Positions(p.tgt_image, t.key);
    p.sync_in_image = Positions(p.tgt_image, names);
    return p;
  }

  // Schema preflight (table_steps.h): the synced columns and the primary key agree on
  // both sides, else a permanent failure naming the column. Returns the target's shape
  // over the before-image columns, kept with the step. Sets the synced columns' row
  // hashes plain (no CAST per column) when both sides allow it, and in their compare
  // form (ColumnSet::set_compare_hash).
  table::TableShape Preflight(ConnectionPool& src, ConnectionPool& tgt, Plan& plan, const TableSchema& s,
                              const TableSchema& t) const {
    auto [a, b] = Both(
        [&] {
          return src.Run(What("preflight source"), [&](Connection& c) {
            return table::ReadShape(c, cfg_.table, plan.src_cols.names(), s.key);
          });
        },
        [&] {
          return tgt.Run(What("preflight target"), [&](Connection& c) {
            return table::ReadShape(c, cfg_.table, plan.tgt_image.names(), t.key);
          });
        });
    table::TableShape synced;
    synced.key = b.key;
    for (const table::ColumnShape& c : b.columns) {
      if (plan.tgt_cols.IndexOf(c.name) >= 0) synced.columns.push_back(c);
    }
    if (auto why = table::CompareShapes(a, s.label, synced, t.label)) {
      throw PermanentStepError("schema preflight of step '" + cfg_.step + "': " + *why);
    }
    const bool plain = table::PlainTextHashable(a) && table::PlainTextHashable(synced);
    plan.src_cols.set_plain_text_hash(plain);
    plan.tgt_cols.set_plain_text_hash(plain);
    table::UseCompareHash(plan.src_cols, plan.tgt_cols);
    return b;
  }

  Resume ReadResume(Connection& c, const std::string& step_code) const {
    Resume r;
    int64_t count = 0, compensated = 0;
    {
      auto rs = c.Query(kStepStateSql, step_code);
      if (rs->next()) {
        r.last_chunk = static_cast<int>(rs->getInt64(1));
        count = rs->getInt64(2);
        r.records = count;
        compensated = rs->getInt64(3);
        r.rows_written = rs->getInt64(4);
      }
    }
    bool step_compensated = false;
    {
      auto rs = c.Query(kStepRowSql, step_code);
      if (rs->next()) {
        step_compensated = rs->getBoolean(1);
        if (!rs->isNull(2)) r.lanes = std::string(rs->getString(2));
      }
    }
    if (step_compensated || (count > 0 && compensated == count)) {
      // Compensated before: this forward run starts a new record.
      c.Execute(kForgetChunksSql, step_code);
      c.Execute(kForgetStepSql, step_code);
      return Resume{};
    }
    if (compensated > 0) {
      throw PermanentStepError("step '" + cfg_.step + "' was partly compensated (" + std::to_string(compensated) +
                               " of " + std::to_string(count) + " chunks in " + cfg_.target +
                               ".dsync_sync_chunk); finish its compensation before running it again");
    }
    if (r.last_chunk > 0) {
      auto rs = c.Query(kChunkHiSql, step_code, r.last_chunk);
      if (rs->next()) {
        r.finished = rs->getBoolean(1);
        if (!r.finished) {
          try {
            r.checkpoint = table::KeyFromJson(ParseJsonBounded(std::string(rs->getString(2)), "the checkpoint"));
          } catch (const std::exception& e) {
            throw PermanentStepError("the checkpoint of step '" + cfg_.step + "' in " + cfg_.target +
                                     ".dsync_sync_chunk is not a key: " + e.what());
          }
        }
      }
    }
    return r;
  }

  // A key range of the step, worked through chunk by chunk on its own thread with its
  // own checkpoint (table_steps.h "Lanes").
  struct Lane {
    int index = 0;
    std::optional<Row> end;  // inclusive upper end; nullopt: the table's end
    std::optional<Row> lo;   // the checkpoint: the last key done (the lane's start if none)
    bool done = false;
  };

  // What the lanes of one run share.
  struct SyncRun {
    SyncRun(StepContext& c, ConnectionPool& s, ConnectionPool& t, const Plan& p, const table::BoundFilter& sf,
            const table::BoundFilter& tf, const std::string& code, const Resume& r)
        : ctx(c), src(s), tgt(t), plan(p), src_filter(sf), tgt_filter(tf), step_code(code), resume(r) {}
    StepContext& ctx;
    ConnectionPool& src;
    ConnectionPool& tgt;
    const Plan& plan;
    const table::BoundFilter& src_filter;
    const table::BoundFilter& tgt_filter;
    const std::string& step_code;
    const Resume& resume;
    int64_t packet = 0;
    storage::Isolation isolation = storage::Isolation::kSession;
    std::atomic<bool> failed{false};  // a lane failed: the others stop
    // Guards what follows, and ctx (one thread at a time: its StillOwner, ReportProgress).
    std::mutex mu;
    std::exception_ptr failure;  // the first lane's error: the step's
    std::vector<Counts> counts;  // per lane
    int64_t records = 0;         // the step's chunk records, earlier runs' included
    std::chrono::steady_clock::time_point last_progress;
    // The lowest and highest key of either side (single integer keys; nullopt when
    // both are empty): where compare ranges by key span begin and end.
    std::optional<KeyBounds> key_bounds;
  };

  // The step's lanes. Their split keys are chosen at the step's first run and kept in
  // row 0's hi_key, so a run that resumes works the same ranges; a lane's checkpoint
  // is the upper end of its newest chunk record. Without recorded splits (a small
  // table, `lanes` 1, a key that is not one integer column, or records of an earlier
  // version) there is one lane over the whole table.
  // `src_bounds`: the source's lowest and highest key (single integer keys).
  std::vector<Lane> PlanLanes(StepContext& ctx, ConnectionPool& tgt, const std::optional<KeyBounds>& src_bounds,
                              const std::string& step_code, const Resume& resume) {
    std::optional<std::string> stored = resume.lanes;
    if (!stored && resume.records == 0 && cfg_.lanes > 1 && src_bounds) {
      const std::vector<Row> splits =
          table::EvenSplits(src_bounds->first, src_bounds->second, cfg_.lanes,
                            std::max<int64_t>(kMinLaneKeys, int64_t{4} * cfg_.chunk_size));
      if (!splits.empty()) {
        json j = json::array();
        for (const Row& k : splits) j.push_back(table::KeyToJson(k));
        stored = tgt.Transact(What("record lanes"), [&](Connection& c) {
          c.Execute(kLockStepSql, step_code, cfg_.step, cfg_.table);
          CheckFence(c, ctx, step_code);
          c.Execute(kRecordLanesSql, j.dump(), step_code);
          return c.QueryString(kLockedLanesSql, step_code);
        });
      }
    }
    std::vector<Lane> lanes(1);
    if (!stored) {
      lanes[0].lo = resume.checkpoint;
      lanes[0].done = resume.finished;
      return lanes;
    }
    std::vector<table::IntKey> ends;  // each lane's end but the last's
    try {
      const json j = ParseJsonBounded(*stored, "the lanes");
      if (!j.is_array() || j.empty()) throw std::invalid_argument("not a non-empty array of keys");
      for (const json& k : j) {
        lanes.back().end = table::KeyFromJson(k);
        ends.push_back(table::IntKey::Of(*lanes.back().end));
        lanes.emplace_back();
        lanes.back().index = static_cast<int>(lanes.size()) - 1;
      }
    } catch (const std::exception& e) {
      throw PermanentStepError("the lanes of step '" + cfg_.step + "' in " + cfg_.target +
                               ".dsync_sync_chunk are not integer keys: " + e.what());
    }
    for (size_t i = 1; i < lanes.size(); ++i) lanes[i].lo = lanes[i - 1].end;  // the lane's start
    // Each record belongs to the lane its upper end falls in; records come oldest first.
    tgt.Run(What("read checkpoints"), [&](Connection& c) {
      auto rs = c.Query(kChunkEndsSql, step_code);
      while (rs->next()) {
        if (rs->getBoolean(1)) {
          lanes.back().done = true;
          continue;
        }
        try {
          Row hi = table::KeyFromJson(ParseJsonBounded(std::string(rs->getString(2)), "a checkpoint"));
          const table::IntKey h = table::IntKey::Of(hi);
          size_t l = 0;
          while (l < ends.size() && ends[l] < h) ++l;
          lanes[l].done = l < ends.size() && h == ends[l];
          lanes[l].lo = std::move(hi);
        } catch (const std::exception& e) {
          throw PermanentStepError("a checkpoint of step '" + cfg_.step + "' in " + cfg_.target +
                                   ".dsync_sync_chunk is not an integer key: " + e.what());
        }
      }
    });
    return lanes;
  }

  StepResult Sync(StepContext& ctx) {
    ConnectionPool& src = ctx.datasources().Get(cfg_.source);
    ConnectionPool& tgt = ctx.datasources().Get(cfg_.target);
    // Each lane compares with a connection to each side: opened while the schemas are
    // read, not lane after lane as they start (a fresh node's pools are empty).
    auto warm_src = std::async(std::launch::async, [&] { src.Prewarm(cfg_.lanes); });
    auto warm_tgt = std::async(std::launch::async, [&] { tgt.Prewarm(cfg_.lanes); });
    chunk_table_.Prepare(tgt, cfg_);
    const TableSchema s = Describe(src, cfg_.source);
    const TableSchema t = Describe(tgt, cfg_.target);
    Plan plan = MakePlan(s, t);
    const table::TableShape shape = Preflight(src, tgt, plan, s, t);
    const Inner src_inner = DescribeSubqueryTables(src, cfg_.source);
    if (!src_inner.missing.empty()) throw PermanentStepError(src_inner.missing);
    const table::BoundFilter src_filter{cfg_.where.sql, FilterValues(cfg_, ctx.payload(), s, src_inner.schemas)};
    // On the target the filter reads the target's own columns and tables; a target
    // without them is compared by key range alone (delete_missing requires them).
    const Inner tgt_inner = DescribeSubqueryTables(tgt, cfg_.target);
    if (!tgt_inner.missing.empty() && cfg_.delete_missing) throw PermanentStepError(tgt_inner.missing);
    bool target_filter = tgt_inner.missing.empty();
    for (const std::string& c : cfg_.where.columns) target_filter = target_filter && t.Find(c) != nullptr;
    const table::BoundFilter tgt_filter =
        target_filter ? table::BoundFilter{cfg_.where.sql, FilterValues(cfg_, ctx.payload(), t, tgt_inner.schemas)}
                      : table::BoundFilter{};
    if (target_filter) {
      table::PinCompareHash(plan.src_cols, plan.tgt_cols, table::PinnedIntegers(cfg_.where, s, t, src_filter.params));
    }
    const std::string step_code = ctx.idempotency_key();

    // The fence first: what is read after it is every chunk an earlier claim will ever
    // commit (one committing at that instant committed before the fence was raised).
    TakeOver(ctx, tgt, step_code);
    const Resume resume =
        tgt.Transact(What("read checkpoint"), [&](Connection& c) { return ReadResume(c, step_code); });
    // Single integer keys: each side's lowest and highest key, for the lanes' split and
    // the compare ranges by key span.
    std::optional<KeyBounds> src_bounds, tgt_bounds;
    if (table::SingleIntegerKey(plan.src_key)) {
      std::tie(src_bounds, tgt_bounds) = Both(
          [&] {
            return src.Run(What("key bounds"),
                           [&](Connection& c) { return table::ReadKeyBounds(c, cfg_.table, plan.src_key); });
          },
          [&] {
            return tgt.Run(What("key bounds"),
                           [&](Connection& c) { return table::ReadKeyBounds(c, cfg_.table, plan.tgt_key); });
          });
    }
    std::vector<Lane> lanes = PlanLanes(ctx, tgt, src_bounds, step_code, resume);
    if (resume.last_chunk > 0) {
      spdlog::info("TABLE_SYNC_RESUME step={} code={} after_chunk={} finished={} lanes={}", cfg_.step, step_code,
                   resume.last_chunk, std::all_of(lanes.begin(), lanes.end(), [](const Lane& l) { return l.done; }),
                   lanes.size());
    }

    SyncRun run(ctx, src, tgt, plan, src_filter, tgt_filter, step_code, resume);
    run.packet = tgt.Run(What("max_allowed_packet"), [](Connection& c) {
      return c.QueryInt(kMaxPacketSql).value_or(0);
    });
    // Lanes' chunk transactions run at once: READ COMMITTED, so two lanes of a range the
    // target has no rows in yet do not lock the same gap (table_steps.h "Lanes").
    run.isolation = lanes.size() > 1 ? storage::Isolation::kReadCommitted : storage::Isolation::kSession;
    run.counts.resize(lanes.size());
    run.key_bounds = table::Union(src_bounds, tgt_bounds);
    run.records = resume.records;
    run.last_progress = std::chrono::steady_clock::now();
    auto work = [&](size_t i) {
      try {
        RunLane(run, lanes[i]);
      } catch (const LaneStopped&) {
        // stopped because another lane failed: that lane's error is the step's
      } catch (...) {
        std::lock_guard<std::mutex> lock(run.mu);
        if (!run.failure) run.failure = std::current_exception();
        run.failed = true;
      }
    };
    {
      std::vector<std::future<void>> others;
      for (size_t i = 1; i < lanes.size(); ++i) others.push_back(std::async(std::launch::async, work, i));
      work(0);
      for (std::future<void>& f : others) f.get();
    }
    if (run.failure) std::rethrow_exception(run.failure);

    const Counts counts = Total(run.counts);
    json out = Progress(counts, resume, run.records, lanes.size(), true);
    out["schema_fingerprint"] = shape.Fingerprint();
    // Without `columns`, the columns both tables have are synced; the source's others
    // are named here, so a column dropped or renamed on one side is visible.
    if (!plan.not_in_target.empty()) out["source_columns_not_in_target"] = plan.not_in_target;
    spdlog::debug("TABLE_SYNC step={} code={} result={}", cfg_.step, step_code, out.dump());
    json ref = {{"format", 2},
                {"undo", "dsync_sync_chunk"},
                {"target", cfg_.target},
                {"table", cfg_.table},
                {"step_code", step_code},
                {"chunks", run.records},
                {"schema_fingerprint", shape.Fingerprint()},
                {"schema", shape.ToJson()}};
    return StepResult::Ok(std::move(out), std::move(ref));
  }

  // One lane's chunks, in key order, from its checkpoint to its end.
  void RunLane(SyncRun& run, Lane& lane) {
    StepContext& ctx = run.ctx;
    ConnectionPool& src = run.src;
    ConnectionPool& tgt = run.tgt;
    const Plan& plan = run.plan;
    const table::BoundFilter& src_filter = run.src_filter;
    const table::BoundFilter& tgt_filter = run.tgt_filter;
    const std::optional<Row> end = lane.end;
    Counts counts;
    std::optional<Row> lo = lane.lo;
    bool done = lane.done;
    bool compare = !done && HasAnyRow(tgt, plan, table::KeyRange{lo, end});
    // A copy chunk holds every row it covers: at most chunk_size. A compare chunk holds
    // a key and a hash per row it covers and only the rows that differ, so it may cover
    // kCompareSpan times as many (fewer transactions and round trips while few rows
    // differ); one that would hold more than chunk_size differing rows is retried at a
    // quarter of its size.
    // Lanes share those bounds (rows and bytes held), so a step holds what one lane would.
    const size_t lanes = run.counts.size();
    const auto max_held = std::max<size_t>(1, static_cast<size_t>(cfg_.chunk_size) / lanes);
    table::ChunkSizer::Options copy_options;
    copy_options.max_bytes /= lanes;
    table::ChunkSizer copy_sizer(max_held, copy_options);
    table::ChunkSizer::Options compare_options = copy_options;
    compare_options.max_held_rows = max_held;
    table::ChunkSizer compare_sizer(max_held * kCompareSpan, compare_options);
    auto last_record = std::chrono::steady_clock::now();
    bool recorded_last = true;  // the latest range processed is in the chunk table
    bool by_hash = false;       // compare by row hashes without a range checksum first
    // Compare ranges by key span (single integer keys, from the lowest and highest key
    // of either side; table::KeySpanRanges), else ending at the source's N-th key.
    std::optional<table::KeySpanRanges> spans;
    if (run.key_bounds) spans.emplace(run.key_bounds->first, run.key_bounds->second);
    auto read_source = [&](const std::optional<Row>& after, size_t n) {
      return src.Run(What("read source"), [&](Connection& c) {
        return table::ReadRange(c, cfg_.table, plan.src_cols, plan.src_key, src_filter, {after, end}, n, false);
      });
    };
    auto source_hashes = [&](const std::optional<Row>& after, size_t n) {
      return src.Run(What("row hashes source"), [&](Connection& c) {
        return table::RowHashes(c, cfg_.table, plan.src_cols, plan.src_key, src_filter, {after, end}, n);
      });
    };
    // The source's next range, read while the target works on this one: its rows while
    // copying, its row hashes while comparing by row hashes. (After the reads they
    // call: destroyed first, waiting for a read under way.)
    ReadAhead<std::vector<Row>> rows_ahead;
    ReadAhead<table::KeyHashes> hashes_ahead;
    while (!done) {
      CheckStop(ctx);
      if (run.failed) throw LaneStopped("another lane of step '" + cfg_.step + "' failed");
      const auto started = std::chrono::steady_clock::now();
      table::ChunkSizer& sizer = compare ? compare_sizer : copy_sizer;
      const size_t planned = sizer.next();
      size_t size = planned;
      ChunkWork w;
      w.range.lo = lo;
      if (compare) rows_ahead.Drop();
      if (!compare || !by_hash) hashes_ahead.Drop();
      if (!compare) {
        w.rows = rows_ahead.Take(lo, size, read_source);
        // Fewer rows than asked: the range runs to the lane's end.
        w.range.hi = w.rows.size() == size ? table::Project(w.rows.back(), plan.sync_key_pos) : end;
        if (w.range.hi != end) rows_ahead.Start(*w.range.hi, planned, read_source);
        w.rows_read = static_cast<int64_t>(w.rows.size());
        counts.rows_fetched += w.rows_read;
        if (cfg_.delete_missing) AddDeleteCandidates(src, tgt, plan, src_filter, tgt_filter, w);
      } else if (by_hash) {
        // The source's row hashes of the next `size` rows give the range's end too: one
        // pass over the source instead of a boundary, a checksum and the hashes. The
        // next range's are read while the target's of this one are (reading the
        // target's ahead too, after the source's, measured slower: the two reads then
        // run one after the other).
        table::KeyHashes sh = hashes_ahead.Take(lo, size, source_hashes);
        w.range.hi = sh.size() == size ? sh.key(sh.size() - 1) : end;
        if (w.range.hi != end) hashes_ahead.Start(*w.range.hi, planned, source_hashes);
        if (!DiffByRowHash(src, tgt, plan, src_filter, tgt_filter, w, counts, max_held, &sh)) {
          sizer.Shrink();
          continue;  // the same range start again, smaller
        }
        if (w.equal_by_hash == w.rows_read && w.rows.empty() && w.delete_keys.empty()) {
          w.equal = true;
          ++counts.chunks_equal;
        }
      } else {
        if (spans) {
          w.range.hi = spans->End(lo, size, end);
        } else {
          // (Lanes split single integer keys only: a key of other types has one lane,
          // whose end is the table's.)
          w.range.hi = src.Run(What("chunk boundary"), [&](Connection& c) {
            return table::NthKeyAfter(c, cfg_.table, plan.src_key, src_filter, lo, size);
          });
        }
        const auto [a, b] = Both(
            [&] {
              return src.Run(What("checksum source"), [&](Connection& c) {
                return table::ChecksumRange(c, cfg_.table, plan.src_cols, plan.src_key, src_filter, w.range);
              });
            },
            [&] {
              return tgt.Run(What("checksum target"), [&](Connection& c) {
                return table::ChecksumRange(c, cfg_.table, plan.tgt_cols, plan.tgt_key, tgt_filter, w.range);
              });
            });
        const int64_t covered = std::max(a.rows, b.rows);
        if (spans && w.range.hi) {
          spans->Observe(lo, *w.range.hi, covered);
          // A range denser than the ones before, with more rows than a compare chunk
          // covers: the same start again, shorter (at the density just seen; a range
          // of one key holds one row).
          if (a != b && covered > static_cast<int64_t>(max_held * kCompareSpan)) continue;
        }
        w.rows_read = a.rows;
        if (a == b) {
          w.equal = true;
          ++counts.chunks_equal;
        } else if (b.rows == 0 && !HasAnyRow(tgt, plan, w.range)) {
          // Nothing on the target in this range: copy it (and read the next ranges
          // whole too, until a chunk meets target rows), at most a copy chunk's rows of it.
          w.rows = src.Run(What("read source"), [&](Connection& c) {
            return table::ReadRange(c, cfg_.table, plan.src_cols, plan.src_key, src_filter, w.range, max_held,
                                    false);
          });
          if (w.rows.size() == max_held && a.rows > static_cast<int64_t>(max_held)) {
            w.range.hi = table::Project(w.rows.back(), plan.sync_key_pos);
          }
          w.rows_read = static_cast<int64_t>(w.rows.size());
          counts.rows_fetched += w.rows_read;
          compare = false;
        } else if (!DiffByRowHash(src, tgt, plan, src_filter, tgt_filter, w, counts, max_held)) {
          sizer.Shrink();
          continue;
        }
      }
      const bool last = w.range.hi == end;
      const bool need_write = !w.rows.empty() || !w.delete_keys.empty();
      // Equal ranges need no transaction; a checkpoint of them is written every
      // kCheckpointEvery (so a re-run does not compare them all again) and at the end.
      const bool checkpoint_due =
          std::chrono::steady_clock::now() - last_record >= kCheckpointEvery || (last && !recorded_last);
      if (need_write || checkpoint_due) {
        Counts delta;
        try {
          delta = CommitChunk(run, w);
        } catch (const ChunkTooBig& e) {
          if (size <= 1) throw PermanentStepError(e.what());
          sizer.Shrink();
          continue;  // the same range start again, smaller
        }
        recorded_last = true;
        last_record = std::chrono::steady_clock::now();
        if (delta.inserted + delta.updated + delta.deleted > 0) ++counts.chunks_written;
        counts += delta;  // (a chunk's delta counts rows written and unchanged only)
        // Copy while most rows change, compare while most are equal. (One or the other:
        // a copy chunk has no row hashes, so the second test would undo the first.)
        if (!compare) {
          if (delta.unchanged * 2 > w.rows_read) compare = true;
        } else if (!w.equal && w.equal_by_hash * 2 < w.rows_read) {
          compare = false;
        }
      } else {
        recorded_last = false;
      }
      // Compare by range checksums while ranges are equal; by row hashes straight away
      // while ranges differ in a few rows (scattered changes: every range differs, and
      // its checksum would only cost one more pass).
      if (compare && !by_hash && !w.equal && w.rows_read > 0 && w.equal_by_hash * 2 >= w.rows_read) by_hash = true;
      if (by_hash && (!compare || w.equal_by_hash == w.rows_read)) by_hash = false;
      ++counts.chunks;
      counts.rows += w.rows_read;
      counts.unchanged += w.equal ? w.rows_read : w.equal_by_hash;
      sizer.Observe(static_cast<size_t>(std::max<int64_t>(w.rows_read, 1)),
                    std::chrono::steady_clock::now() - started, RowBytes(w.rows), w.rows.size());
      lo = w.range.hi;
      done = last;
      Publish(run, lane.index, counts);
    }
  }

  // A lane's counts so far into the run's; about every kProgressEvery the step row gets
  // the progress of all lanes.
  void Publish(SyncRun& run, int lane, const Counts& counts) const {
    std::lock_guard<std::mutex> lock(run.mu);
    run.counts[static_cast<size_t>(lane)] = counts;
    if (std::chrono::steady_clock::now() - run.last_progress < kProgressEvery) return;
    run.last_progress = std::chrono::steady_clock::now();
    run.ctx.ReportProgress(Progress(Total(run.counts), run.resume, run.records, run.counts.size(), false));
  }

  static Counts Total(const std::vector<Counts>& lanes) {
    Counts t;
    for (const Counts& c : lanes) t += c;
    return t;
  }

  json Progress(const Counts& c, const Resume& resume, int64_t records, size_t lanes, bool final) const {
    json out = {{"rows", c.rows}, {"inserted", c.inserted}, {"updated", c.updated}, {"unchanged", c.unchanged}};
    if (cfg_.delete_missing) out["deleted"] = c.deleted;
    out["chunks"] = c.chunks;
    out["chunks_equal"] = c.chunks_equal;
    out["chunks_written"] = c.chunks_written;
    out["rows_fetched"] = c.rows_fetched;
    out["chunk_records"] = records;
    if (lanes > 1) out["lanes"] = lanes;
    if (resume.last_chunk > 0) {
      out["resumed_after_chunk"] = resume.last_chunk;
      out["resumed_rows_written"] = resume.rows_written;
    }
    if (!final) out["running"] = true;
    return out;
  }

  static size_t RowBytes(const std::vector<Row>& rows) {
    size_t n = 0;
    for (const Row& r : rows) {
      for (const Cell& c : r) n += c ? c->size() : 1;
    }
    return n;
  }

  bool HasAnyRow(ConnectionPool& tgt, const Plan& plan, const table::KeyRange& range) const {
    return tgt.Run(What("probe target range"), [&](Connection& c) {
      const table::BoundFilter all;
      return !table::ReadRange(c, cfg_.table, plan.tgt_key, plan.tgt_key, all, range, 1, false).empty();
    });
  }

  // A differing range: the rows whose hashes differ or that the target lacks are
  // fetched from the source; target rows the source lacks are delete candidates.
  // `source_hashes`: the source's hashes of the range, already read. Returns false,
  // having fetched nothing, when more than `max_held` rows differ (the range is then
  // retried smaller).
  bool DiffByRowHash(ConnectionPool& src, ConnectionPool& tgt, const Plan& plan, const table::BoundFilter& src_filter,
                     const table::BoundFilter& tgt_filter, ChunkWork& w, Counts& counts, size_t max_held,
                     table::KeyHashes* source_hashes = nullptr) const {
    auto target_hashes = [&] {
      return tgt.Run(What("row hashes target"), [&](Connection& c) {
        return table::RowHashes(c, cfg_.table, plan.tgt_cols, plan.tgt_key, tgt_filter, w.range);
      });
    };
    table::KeyHashes sh, th;
    if (source_hashes != nullptr) {
      sh = std::move(*source_hashes);
      th = target_hashes();
    } else {
      std::tie(sh, th) = Both(
          [&] {
            return src.Run(What("row hashes source"), [&](Connection& c) {
              return table::RowHashes(c, cfg_.table, plan.src_cols, plan.src_key, src_filter, w.range);
            });
          },
          target_hashes);
    }
    const table::HashDiff d = table::DiffHashes(sh, th);
    w.equal_by_hash += static_cast<int64_t>(d.equal);
    std::vector<size_t> differ = d.missing;  // in the source's key order
    differ.insert(differ.end(), d.different.begin(), d.different.end());
    std::sort(differ.begin(), differ.end());
    std::vector<Row> fetch;
    for (size_t i : differ) fetch.push_back(sh.key(i));
    std::vector<Row> candidates;
    if (cfg_.delete_missing) {
      for (size_t j : d.extra) candidates.push_back(th.key(j));
    }
    if (fetch.size() + candidates.size() > max_held && sh.size() > 1) return false;
    w.rows_read = static_cast<int64_t>(sh.size());
    if (!fetch.empty()) {
      w.rows = src.Run(What("read source rows"), [&](Connection& c) {
        return ReadByKeys(c, cfg_.table, plan.src_cols, plan.src_key, fetch, cfg_.chunk_size, false, &src_filter);
      });
      counts.rows_fetched += static_cast<int64_t>(w.rows.size());
    }
    w.delete_keys = ConfirmMissing(src, plan, src_filter, candidates);
    return true;
  }

  // Copy chunks with delete_missing: target rows of the range matching the filter
  // whose key is not among the source rows read, and not in the source either.
  void AddDeleteCandidates(ConnectionPool& src, ConnectionPool& tgt, const Plan& plan,
                           const table::BoundFilter& src_filter, const table::BoundFilter& tgt_filter,
                           ChunkWork& w) const {
    std::vector<Row> keys = tgt.Run(What("read target keys"), [&](Connection& c) {
      return table::ReadRange(c, cfg_.table, plan.tgt_key, plan.tgt_key, tgt_filter, w.range, 0, false);
    });
    if (keys.empty()) return;
    std::unordered_set<std::string> in_source;
    for (const Row& r : w.rows) in_source.insert(table::EncodeKey(table::Project(r, plan.sync_key_pos)));
    std::vector<Row> candidates;
    for (Row& k : keys) {
      if (in_source.count(table::EncodeKey(k)) == 0) candidates.push_back(std::move(k));
    }
    w.delete_keys = ConfirmMissing(src, plan, src_filter, candidates);
  }

  // Of `candidates`, the keys the source has no row for that matches the filter (by
  // SQL comparison, so a key that differs only in case under a _ci collation is found).
  std::vector<Row> ConfirmMissing(ConnectionPool& src, const Plan& plan, const table::BoundFilter& src_filter,
                                  const std::vector<Row>& candidates) const {
    if (candidates.empty()) return {};
    std::vector<Row> present = src.Run(What("read source keys"), [&](Connection& c) {
      return ReadByKeys(c, cfg_.table, plan.src_key, plan.src_key, candidates, cfg_.chunk_size, false, &src_filter);
    });
    // A key that differs only in case (a _ci collation) is present in SQL terms but
    // not as text: such a candidate is checked on its own.
    std::unordered_set<std::string> found;
    for (const Row& k : present) found.insert(table::EncodeKey(k));
    std::vector<Row> out;
    for (const Row& k : candidates) {
      if (found.count(table::EncodeKey(k)) == 0) out.push_back(k);
    }
    if (out.size() + present.size() == candidates.size()) return out;
    std::vector<Row> strict;
    for (const Row& k : out) {
      bool exists = src.Run(What("read source key"), [&](Connection& c) {
        return !ReadByKeys(c, cfg_.table, plan.src_key, plan.src_key, {k}, 1, false, &src_filter).empty();
      });
      if (!exists) strict.push_back(k);
    }
    return strict;
  }

  // One chunk's target transaction: the before-image of the keys it touches (FOR
  // UPDATE), the writes, then the step lock, the fencing and ownership checks and the
  // chunk record, COMMIT. The step lock comes last, so the chunk transactions of a
  // step's lanes overlap up to it; what is read under it is read with locking reads
  // (a plain read would see the snapshot the writes began). Returns its counts.
  Counts CommitChunk(SyncRun& run, const ChunkWork& w) {
    StepContext& ctx = run.ctx;
    const Plan& plan = run.plan;
    Counts delta;
    run.tgt.Transact(What("sync chunk"), run.isolation, [&](Connection& tc) {
      delta = Counts{};
      Image image = EmptyImage(plan);
      const std::optional<table::KeySpan> span = ApplyChunk(tc, plan, w, image, delta);
      const bool changed = !image.restore.empty() || !image.remove.empty();
      std::optional<std::string> image_text;
      if (changed) {
        image_text = ChunkRecordText(image, AfterState(tc, cfg_.table, plan.tgt_image, plan.tgt_key,
                                                       plan.image_key_pos, image, cfg_.chunk_size,
                                                       /*for_update=*/false, span));
      }
      if (image_text && run.packet > 0 && static_cast<int64_t>(image_text->size()) + 4096 > run.packet) {
        throw ChunkTooBig("step '" + cfg_.step + "': a chunk's before-image (" +
                          std::to_string(image_text->size()) + " bytes) exceeds max_allowed_packet of " +
                          cfg_.target + " (" + std::to_string(run.packet) + " bytes)");
      }
      CheckStop(ctx);
      tc.Execute(kLockStepSql, run.step_code, cfg_.step, cfg_.table);
      CheckFence(tc, ctx, run.step_code);
      int64_t newest = 0, newest_attempt = 0;
      {
        auto rs = tc.Query(kNewestChunkSql, run.step_code);
        if (rs->next()) {
          newest = rs->getInt64(1);
          newest_attempt = rs->getInt64(2);
        }
      }
      if (newest > run.resume.last_chunk && newest_attempt != ctx.attempt()) {
        throw Interrupted("another run of step '" + cfg_.step + "' committed chunk " + std::to_string(newest) +
                          " meanwhile; target changes rolled back");
      }
      tc.Execute(kInsertChunkSql, run.step_code, static_cast<long long>(newest + 1), cfg_.step, cfg_.table,
                 ctx.attempt(), w.range.lo ? std::optional<std::string>(NullableJson(w.range.lo)) : std::nullopt,
                 w.range.hi ? std::optional<std::string>(NullableJson(w.range.hi)) : std::nullopt, image_text,
                 static_cast<long long>(w.rows_read),
                 static_cast<long long>(delta.inserted + delta.updated + delta.deleted));
      // Last, right before COMMIT: the window in which a node that loses the event can
      // still commit a chunk is one round trip (at-least-once, table_steps.h).
      std::lock_guard<std::mutex> lock(run.mu);
      CheckStillOwner(ctx);
    });
    std::lock_guard<std::mutex> lock(run.mu);
    ++run.records;
    return delta;
  }

  Image EmptyImage(const Plan& plan) const {
    Image image;
    image.table = cfg_.table;
    image.columns = plan.tgt_image.names();
    image.key = plan.tgt_key.names();
    for (size_t i = 0; i < plan.tgt_image.size(); ++i) {
      if (plan.tgt_image.at(i).kind == ColumnKind::kBinary) image.binary.push_back(plan.tgt_image.at(i).name);
    }
    return image;
  }

  // Upserts the chunk's source rows that differ from the target and deletes its delete
  // keys, after recording the target's before-state of those keys (locked FOR UPDATE).
  // Returns the DenseSpan it read them by, if any.
  std::optional<table::KeySpan> ApplyChunk(Connection& tc, const Plan& plan, const ChunkWork& w, Image& image,
                                    Counts& counts) const {
    std::vector<Row> keys;
    keys.reserve(w.rows.size() + w.delete_keys.size());
    for (const Row& r : w.rows) keys.push_back(table::Project(r, plan.sync_key_pos));
    const size_t upsert_keys = keys.size();
    for (const Row& k : w.delete_keys) keys.push_back(k);
    if (keys.empty()) return std::nullopt;
    const std::optional<table::KeySpan> span = table::DenseSpan(plan.tgt_key, keys);
    std::vector<Row> before =
        span ? table::ReadSpan(tc, cfg_.table, plan.tgt_image, plan.tgt_key, *span, /*for_update=*/true)
             : ReadByKeys(tc, cfg_.table, plan.tgt_image, plan.tgt_key, keys, cfg_.chunk_size, /*for_update=*/true);
    std::unordered_map<std::string, size_t> by_key;
    for (size_t i = 0; i < before.size(); ++i) {
      by_key.emplace(table::EncodeKey(table::Project(before[i], plan.image_key_pos)), i);
    }
    std::unordered_set<std::string> covered;
    // Each before row goes into the image at most once (matched marks it), so it is
    // moved, not copied: a chunk holds its before-rows once.
    auto restore = [&](Row& row) {
      if (covered.insert(table::EncodeKey(table::Project(row, plan.image_key_pos))).second) {
        image.restore.push_back(std::move(row));
      }
    };
    std::vector<bool> matched(before.size(), false);
    std::vector<const Row*> inserts, updates;
    for (size_t r = 0; r < w.rows.size(); ++r) {
      auto it = by_key.find(table::EncodeKey(keys[r]));
      if (it == by_key.end()) {
        ++counts.inserted;
        if (covered.insert(table::EncodeKey(keys[r])).second) image.remove.push_back(keys[r]);
        inserts.push_back(&w.rows[r]);
        continue;
      }
      matched[it->second] = true;
      Row& b = before[it->second];
      bool same = true;
      for (size_t c = 0; c < w.rows[r].size() && same; ++c) {
        same = w.rows[r][c] == b[static_cast<size_t>(plan.sync_in_image[c])];
      }
      if (same) {
        ++counts.unchanged;
        continue;
      }
      ++counts.updated;
      restore(b);
      updates.push_back(&w.rows[r]);
    }
    std::vector<Row> gone;
    for (size_t k = upsert_keys; k < keys.size(); ++k) {
      auto it = by_key.find(table::EncodeKey(keys[k]));
      if (it == by_key.end() || matched[it->second]) continue;
      matched[it->second] = true;
      restore(before[it->second]);
      gone.push_back(keys[k]);
    }
    // A target row whose key matched in SQL but not as text (a case-insensitive
    // collation): the upsert rewrites it, so it is restored too. (A span's rows that
    // match no key are rows the chunk does not touch.)
    bool sql_only_match = false;
    for (size_t i = 0; i < before.size() && !span; ++i) {
      if (!matched[i]) {
        restore(before[i]);
        sql_only_match = true;
      }
    }
    // Keys the locked read found no row for are inserted, not upserted: an upsert of a
    // key the target lacks would, on a clash with another row over a secondary unique
    // key, update that other row, which the before-image does not hold. (Under
    // REPEATABLE READ the read's gap locks keep such keys free until COMMIT; under READ
    // COMMITTED a row inserted meanwhile makes the INSERT fail: the chunk rolls back
    // and the step runs again from its checkpoint.) When a row matched a key in SQL
    // only, every row is upserted as before.
    if (sql_only_match) {
      updates.insert(updates.end(), inserts.begin(), inserts.end());
      inserts.clear();
    }
    Upsert(tc, cfg_.table, plan.tgt_cols, updates, cfg_.chunk_size);
    InsertAbsent(tc, plan.tgt_cols, inserts, "step '" + cfg_.step + "'");
    DeleteKeys(tc, cfg_.table, plan.tgt_key, gone, cfg_.chunk_size);
    counts.deleted += static_cast<int64_t>(gone.size());
    return span;
  }

  // Rows changed by someone else since the sync: their count and the first keys.
  struct Conflicts {
    int64_t total = 0;
    json keys = json::array();  // at most kMaxConflictKeys, each a JSON array of key cells
    void Add(const Row& key) {
      ++total;
      if (keys.size() < kMaxConflictKeys) keys.push_back(table::KeyToJson(key));
    }
    void Add(const Conflicts& o) {
      total += o.total;
      for (const json& k : o.keys) {
        if (keys.size() < kMaxConflictKeys) keys.push_back(k);
      }
    }
  };
  static constexpr size_t kMaxConflictKeys = 100;

  // A refusal found under a chunk's locks (after the first pass saw none).
  struct Refusal {
    Conflicts conflicts;
  };

  struct ChunkImage {
    Image image;
    json after;  // the after-image hashes (AfterState); null for chunks recorded before them
  };

  // What one chunk's compensation did.
  struct Restored {
    int64_t removed = 0, restored = 0;
    Conflicts skipped;  // on_conflict skip
  };

  // Compensation: each chunk with a before-image, last first, restored in its own
  // target transaction together with its compensated mark. Rows someone else changed
  // since the chunk wrote them (their hash differs from the chunk's after-image) are
  // conflicts, handled by on_conflict: fail refuses before restoring anything (and
  // again under each chunk's locks), skip leaves them and restores the rest,
  // overwrite restores them anyway. The outcome is the step row's output.
  StepResult UndoChunks(StepContext& ctx) {
    ConnectionPool& tgt = ctx.datasources().Get(cfg_.target);
    chunk_table_.Prepare(tgt, cfg_);
    const std::string step_code = ctx.idempotency_key();
    const json& data = ctx.compensation_data();
    const int64_t expected = data.is_object() ? data.value("chunks", int64_t{0}) : 0;
    auto state = tgt.Run(What("read chunks"), [&](Connection& c) {
      std::vector<int> todo;
      auto rs = c.Query(kChunksToRestoreSql, step_code);
      while (rs->next()) todo.push_back(static_cast<int>(rs->getInt64(1)));
      bool step_compensated = c.QueryInt(kStepRowSql, step_code).value_or(0) != 0;
      int64_t records = 0;
      auto st = c.Query(kStepStateSql, step_code);
      if (st->next()) records = st->getInt64(2);
      return std::make_tuple(todo, step_compensated, records);
    });
    auto& [todo, step_compensated, records] = state;
    if (step_compensated) return StepResult::Ok({{"already_compensated", true}});
    if (records == 0 && expected > 0) {
      throw PermanentStepError("step '" + cfg_.step + "': its " + std::to_string(expected) + " chunk record(s) in " +
                               cfg_.target + ".dsync_sync_chunk are gone (purged after undo_retention_days, or "
                               "deleted); its before-image cannot be restored");
    }
    TakeOver(ctx, tgt, step_code);
    const bool check = cfg_.on_conflict != OnConflict::kOverwrite;
    Conflicts conflicts;
    if (cfg_.on_conflict == OnConflict::kFail) {
      // Read-only first pass: a refusal restores nothing.
      for (int chunk_no : todo) {
        CheckStop(ctx);
        tgt.Run(What("check conflicts"), [&](Connection& c) {
          auto chunk = ReadChunkImage(c, step_code, chunk_no, false);
          if (chunk) FindConflicts(c, *chunk, false, conflicts);
        });
      }
      if (conflicts.total > 0) Refuse(ctx, tgt, conflicts);
    }
    int64_t removed = 0, restored = 0, chunks = 0;
    for (int chunk_no : todo) {
      CheckStop(ctx);
      Restored r;
      try {
        r = RestoreChunk(ctx, tgt, step_code, chunk_no, check);
      } catch (const Refusal& refusal) {
        Refuse(ctx, tgt, refusal.conflicts);
      }
      removed += r.removed;
      restored += r.restored;
      conflicts.Add(r.skipped);
      ++chunks;
      ctx.ReportProgress({{"compensating", true}, {"chunks", chunks}, {"removed", removed}, {"restored", restored}});
    }
    tgt.Transact(What("compensate step"), [&](Connection& c) {
      c.Execute(kLockStepSql, step_code, cfg_.step, cfg_.table);
      CheckFence(c, ctx, step_code);
      CheckStillOwner(ctx);
      c.Execute(kMarkStepCompensatedSql, step_code);
    });
    json out = {{"removed", removed}, {"restored", restored}, {"chunks", chunks},
                {"on_conflict", OnConflictName(cfg_.on_conflict)}, {"conflicts", conflicts.total}};
    if (conflicts.total > 0) {
      out["skipped_keys"] = conflicts.keys;
      spdlog::warn("TABLE_SYNC_COMPENSATION_SKIPPED event={} step={} code={} conflicts={} keys={}", ctx.event_code(),
                   cfg_.step, step_code, conflicts.total, conflicts.keys.dump());
    }
    ctx.ReportProgress(out);  // the outcome stays the step row's output
    spdlog::debug("TABLE_SYNC_COMPENSATED step={} code={} result={}", cfg_.step, step_code, out.dump());
    return StepResult::Ok(std::move(out));
  }

  // One chunk restored in one target transaction with its compensated mark. Throws
  // Refusal (on_conflict fail) when rows conflict.
  Restored RestoreChunk(StepContext& ctx, ConnectionPool& tgt, const std::string& step_code, int chunk_no,
                        bool check) {
    return tgt.Transact(What("compensate chunk"), [&](Connection& c) {
      Restored out;
      c.Execute(kLockStepSql, step_code, cfg_.step, cfg_.table);
      CheckFence(c, ctx, step_code);
      auto chunk = ReadChunkImage(c, step_code, chunk_no, true);
      if (!chunk) return out;
      if (check) {
        std::vector<bool> skip = FindConflicts(c, *chunk, true, out.skipped);
        if (out.skipped.total > 0 && cfg_.on_conflict == OnConflict::kFail) {
          throw Refusal{out.skipped};  // changed since the first pass; nothing of this chunk restored
        }
        if (out.skipped.total > 0) chunk->image = WithoutEntries(chunk->image, skip);
      }
      std::tie(out.removed, out.restored) = RestoreImage(c, chunk->image, ctx);
      CheckStillOwner(ctx);
      c.Execute(kMarkChunkCompensatedSql, step_code, chunk_no);
      return out;
    });
  }

  // A chunk's before-image and after-image hashes; nullopt when compensated already
  // or without an image.   [FOR UPDATE with `lock`]
  std::optional<ChunkImage> ReadChunkImage(Connection& c, const std::string& step_code, int chunk_no, bool lock) {
    auto q = c.Query(lock ? kReadChunkImageSql : kPeekChunkImageSql, step_code, chunk_no);
    if (!q->next() || q->getBoolean(2) || q->isNull(1)) return std::nullopt;
    json j;
    try {
      j = ParseJsonBounded(std::string(q->getString(1)), "the chunk image");
    } catch (const JsonTooDeepError& e) {
      throw PermanentStepError(std::string(e.what()) + " (chunk " + std::to_string(chunk_no) + " of step '" +
                               cfg_.step + "' in " + cfg_.target + ".dsync_sync_chunk)");
    } catch (const json::exception&) {
      throw PermanentStepError("chunk " + std::to_string(chunk_no) + " of step '" + cfg_.step + "' in " +
                               cfg_.target + ".dsync_sync_chunk is not valid JSON");
    }
    ChunkImage out{ParseImage(j, cfg_), j.contains("after") ? j["after"] : json()};
    const size_t entries = out.image.restore.size() + out.image.remove.size();
    if (!out.after.is_null() && (!out.after.is_array() || out.after.size() != entries)) {
      throw PermanentStepError("chunk " + std::to_string(chunk_no) + " of step '" + cfg_.step + "' in " +
                               cfg_.target + ".dsync_sync_chunk has after-image hashes that do not fit its image");
    }
    return out;
  }

  // Marks the entries of the chunk whose target row differs from what the chunk left
  // (EntryKeys order) and adds them to `out`. A chunk recorded without after-image
  // hashes has no conflicts. A column of the image that is gone or retyped: let
  // RestoreImage say so.
  std::vector<bool> FindConflicts(Connection& c, const ChunkImage& chunk, bool lock, Conflicts& out) {
    const size_t entries = chunk.image.restore.size() + chunk.image.remove.size();
    std::vector<bool> conflict(entries, false);
    if (chunk.after.is_null() || entries == 0) return conflict;
    auto t = table::DescribeTable(c, cfg_.target, cfg_.table);
    if (!t) throw PermanentStepError("table " + cfg_.target + "." + cfg_.table + " does not exist");
    for (const std::string& name : chunk.image.columns) {
      if (t->Find(name) == nullptr || t->Find(name)->generated) return conflict;
    }
    const ColumnSet cols(*t, chunk.image.columns);
    const ColumnSet key(*t, chunk.image.key);
    const std::vector<int> key_pos = Positions(cols, chunk.image.key);
    const json now = AfterState(c, cfg_.table, cols, key, key_pos, chunk.image, cfg_.chunk_size, lock);
    const std::vector<Row> keys = EntryKeys(chunk.image, key_pos);
    for (size_t i = 0; i < entries; ++i) {
      if (now[i] != chunk.after[i]) {
        conflict[i] = true;
        out.Add(keys[i]);
      }
    }
    return conflict;
  }

  static Image WithoutEntries(const Image& image, const std::vector<bool>& skip) {
    Image out = image;
    out.restore.clear();
    out.remove.clear();
    for (size_t i = 0; i < image.restore.size(); ++i) {
      if (!skip[i]) out.restore.push_back(image.restore[i]);
    }
    for (size_t i = 0; i < image.remove.size(); ++i) {
      if (!skip[image.restore.size() + i]) out.remove.push_back(image.remove[i]);
    }
    return out;
  }

  // on_conflict fail: records the refusal as the step row's output and fails the
  // compensation permanently, naming the keys (and how the table's schema changed
  // since the sync, when it did).
  [[noreturn]] void Refuse(StepContext& ctx, ConnectionPool& tgt, const Conflicts& conflicts) {
    std::string keys;
    for (size_t i = 0; i < conflicts.keys.size() && i < kKeysInMessage; ++i) {
      keys += (keys.empty() ? "" : ", ") + conflicts.keys[i].dump();
    }
    if (conflicts.total > static_cast<int64_t>(kKeysInMessage)) {
      keys += ", ... (" + std::to_string(conflicts.total - static_cast<int64_t>(kKeysInMessage)) + " more)";
    }
    std::string why = "step '" + cfg_.step + "': compensation refused (on_conflict fail): " +
                      std::to_string(conflicts.total) + " row(s) of " + cfg_.target + "." + cfg_.table +
                      " changed since the sync wrote them, keys " + keys;
    const std::string schema = SchemaSinceSync(ctx, tgt);
    if (!schema.empty()) why += "; " + schema;
    ctx.ReportProgress({{"compensation", "refused"}, {"on_conflict", "fail"}, {"conflicts", conflicts.total},
                        {"conflict_keys", conflicts.keys}});
    spdlog::error("TABLE_SYNC_COMPENSATION_REFUSED event={} step={} code={} conflicts={} keys={}", ctx.event_code(),
                  cfg_.step, ctx.idempotency_key(), conflicts.total, conflicts.keys.dump());
    throw PermanentStepError(why);
  }
  static constexpr size_t kKeysInMessage = 20;

  // "the schema of env_b.t changed since the sync (fingerprint a -> b): column ..."
  // from the shape kept in the compensation data; "" when unchanged or unknown.
  std::string SchemaSinceSync(StepContext& ctx, ConnectionPool& tgt) {
    const json& data = ctx.compensation_data();
    if (!data.is_object() || !data.contains("schema")) return "";
    auto then = table::TableShape::FromJson(data["schema"]);
    if (!then) return "";
    std::vector<std::string> names;
    for (const auto& c : then->columns) names.push_back(c.name);
    try {
      auto now = tgt.Run(What("read schema"), [&](Connection& c) -> std::optional<table::TableShape> {
        auto t = table::DescribeTable(c, cfg_.target, cfg_.table);
        if (!t) return std::nullopt;
        return table::ReadShape(c, cfg_.table, names, t->key);
      });
      if (!now) return "table " + cfg_.target + "." + cfg_.table + " was dropped since the sync";
      if (now->Fingerprint() == then->Fingerprint()) return "";
      return "the schema of " + cfg_.target + "." + cfg_.table + " changed since the sync (fingerprint " +
             then->Fingerprint() + ", now " + now->Fingerprint() + "): " + table::DescribeChange(*then, *now);
    } catch (const DbError&) {
      return "";
    }
  }

  // Under the step lock (row 0, taken by the caller's transaction): fails when a later
  // claim of the event has run the step on this target since.
  void CheckFence(Connection& c, StepContext& ctx, const std::string& step_code) const {
    const int64_t token = c.QueryInt(kReadFenceSql, step_code).value_or(0);
    if (token > ctx.attempt()) {
      throw Interrupted("step '" + cfg_.step + "' was taken over by a later claim of the event (attempt " +
                        std::to_string(token) + ", this run's " + std::to_string(ctx.attempt()) +
                        "); target changes rolled back");
    }
  }

  // Before a run's first write: raises the step's fencing token to this run's attempt
  // (or stops, if a later claim raised it already).
  void TakeOver(StepContext& ctx, ConnectionPool& tgt, const std::string& step_code) {
    tgt.Transact(What("fence step"), [&](Connection& c) {
      c.Execute(kLockStepSql, step_code, cfg_.step, cfg_.table);
      CheckFence(c, ctx, step_code);
      c.Execute(kRaiseFenceSql, ctx.attempt(), step_code, ctx.attempt());
    });
  }

  static constexpr std::chrono::milliseconds kCheckpointEvery{2000};
  static constexpr std::chrono::milliseconds kProgressEvery{1000};

  TargetTable chunk_table_{"dsync_sync_chunk", kCreateChunkTableSql, kPurgeChunksSql, "TABLE_SYNC_CHUNK_PURGE_FAILED"};
};

class TableDeleteStep final : public TableStep {
 public:
  using TableStep::TableStep;

  StepResult Execute(StepContext& ctx) override {
    return Guarded([&] { return Delete(ctx); });
  }

 private:
  StepResult Delete(StepContext& ctx) {
    ConnectionPool& tgt = ctx.datasources().Get(cfg_.target);
    undo_table_.Prepare(tgt, cfg_);
    const TableSchema t = Describe(tgt, cfg_.target);
    RequireKey(t);
    RequireFilterColumns(t);
    const ColumnSet cols(t, t.WritableColumns());
    const ColumnSet key(t, t.key);
    const std::vector<int> key_pos = Positions(cols, t.key);
    const Inner inner = DescribeSubqueryTables(tgt, cfg_.target);
    if (!inner.missing.empty()) throw PermanentStepError(inner.missing);
    const std::vector<SqlValue> filter = FilterValues(cfg_, ctx.payload(), t, inner.schemas);
    const std::string step_code = ctx.idempotency_key();

    int64_t deleted = 0;
    json image = tgt.Transact(What("delete"), [&](Connection& tc) {
      deleted = 0;
      ImageBuilder builder(cfg_, cols, t.key, LockUndo(tc, step_code));
      // The ceiling, before any row goes: a filter (or a payload value) matching more
      // rows than max_rows deletes none.
      const int64_t matching = tc.QueryInt(CountSql(cfg_), Bind(filter)).value_or(0);
      if (matching > cfg_.max_rows) RefuseCeiling(matching);
      std::optional<Row> last;
      for (;;) {
        CheckStop(ctx);
        std::vector<Row> rows;
        {
          auto rs = tc.Query(ScanSql(cfg_, cols, key, last.has_value(), true), Bind(ScanParams(filter, key, last)));
          rows = cols.ReadAll(*rs);
        }
        if (rows.empty()) break;
        std::vector<Row> keys;
        for (const Row& r : rows) {
          builder.Restore(r);
          keys.push_back(table::Project(r, key_pos));
        }
        // Rows that came to match since the count count too.
        if (deleted + static_cast<int64_t>(rows.size()) > cfg_.max_rows) {
          RefuseCeiling(deleted + static_cast<int64_t>(rows.size()));
        }
        DeleteKeys(tc, cfg_.table, key, keys, cfg_.chunk_size);
        deleted += static_cast<int64_t>(rows.size());
        last = keys.back();
        if (rows.size() < static_cast<size_t>(cfg_.chunk_size)) break;
      }
      CheckStillOwner(ctx);
      return SaveUndo(tc, step_code, cfg_, builder.image());
    });
    json out = {{"rows", deleted}, {"deleted", deleted}};
    spdlog::debug("TABLE_DELETE step={} code={} result={}", cfg_.step, step_code, out.dump());
    return StepResult::Ok(std::move(out), std::move(image));
  }

  // Thrown inside the delete's transaction: it rolls back, nothing is deleted.
  [[noreturn]] void RefuseCeiling(int64_t rows) const {
    throw PermanentStepError("table_delete " + cfg_.step + ": " + std::to_string(rows) + " rows of " + cfg_.target + "." + cfg_.table +
                             " match, more than max_rows " + std::to_string(cfg_.max_rows) + "; nothing deleted");
  }
};

}  // namespace

std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec) {
  return std::make_unique<TableSyncStep>(ParseConfig(spec, /*sync=*/true));
}

std::unique_ptr<StepHandler> MakeTableDeleteStep(const StepSpec& spec) {
  return std::make_unique<TableDeleteStep>(ParseConfig(spec, /*sync=*/false));
}

std::string RepairKeyField(size_t key, size_t column) {
  return "dsync_k" + std::to_string(key) + "_" + std::to_string(column);
}

std::unique_ptr<StepHandler> MakeKeyedTableSyncStep(const StepSpec& spec, const std::vector<std::string>& key_columns,
                                                    size_t keys) {
  Config c = ParseConfig(spec, /*sync=*/true);
  if (key_columns.empty() || keys == 0) throw ConfigError("config: step '" + Printable(spec.name) + "': no keys");
  table::CompiledWhere& w = c.where;
  auto add = [&](size_t i, size_t j) {
    w.params.push_back(RepairKeyField(i, j));
    w.param_columns.push_back(key_columns[j]);
    w.param_tables.emplace_back();
    w.like_literal.push_back(false);
  };
  std::string match;
  if (key_columns.size() == 1) {
    match = Backticked(key_columns[0]) + " IN (";
    for (size_t i = 0; i < keys; ++i) {
      match += i > 0 ? ", ?" : "?";
      add(i, 0);
    }
    match += ")";
  } else {
    for (size_t i = 0; i < keys; ++i) {
      match += i > 0 ? " OR (" : "(";
      for (size_t j = 0; j < key_columns.size(); ++j) {
        match += (j > 0 ? " AND " : "") + Backticked(key_columns[j]) + " = ?";
        add(i, j);
      }
      match += ")";
    }
  }
  for (const std::string& k : key_columns) w.columns.insert(k);
  // The where's pins stay true: every row the conjunction matches matches the where.
  w.sql = "(" + w.sql + ") AND (" + match + ")";
  c.where_text += " AND <" + std::to_string(keys) + " repaired keys>";
  return std::make_unique<TableSyncStep>(std::move(c));
}

}  // namespace dsync::saga
