#include "saga/steps/table_steps.h"

#include <algorithm>
#include <charconv>
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
#include "saga/steps/table_sql.h"
#include "saga/steps/table_where.h"

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
using table::Row;
using table::SqlValue;
using table::TableSchema;

constexpr int kDefaultChunkSize = 500;
constexpr int kMaxChunkSize = 10000;
constexpr int kDefaultUndoRetentionDays = 7;
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

// ---------------------------------------------------------------------------
// Configuration

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
  int undo_retention_days = kDefaultUndoRetentionDays;
};

// User text inside a one-line message.
std::string Printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  }
  if (s.size() > 64) out += "...";
  return out;
}

std::string JsonKind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

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

  table::CompiledWhere Where(const std::string& text) const {
    try {
      return table::CompileWhere(text);
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
                 "undo_retention_days"});
  } else {
    r.CheckKeys({"target", "table", "where", "chunk_size", "undo_retention_days"});
  }
  Config c;
  c.type = type;
  c.step = spec.name;
  if (sync) c.source = r.String("source");
  c.target = r.String("target");
  if (sync && c.source == c.target) r.Fail("'source' and 'target' are the same datasource '" + Printable(c.source) + "'");
  c.table = r.Identifier("table");
  c.where_text = r.String("where");
  c.where = r.Where(c.where_text);
  c.chunk_size = r.Int("chunk_size", kDefaultChunkSize, 1, kMaxChunkSize);
  c.undo_retention_days = r.Int("undo_retention_days", kDefaultUndoRetentionDays, 1, 3650);
  if (sync) {
    c.columns = r.Columns("columns");
    c.delete_missing = r.Bool("delete_missing", false);
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

bool IsIntegerKind(ColumnKind k) {
  return k == ColumnKind::kSigned || k == ColumnKind::kUnsigned || k == ColumnKind::kBit;
}

template <class T>
std::optional<T> ParseInteger(const std::string& s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// The filter's values from the payload, in placeholder order. `schema` types the
// columns the placeholders are compared with.
std::vector<SqlValue> FilterValues(const Config& cfg, const json& payload, const TableSchema& schema) {
  std::vector<SqlValue> out;
  for (size_t i = 0; i < cfg.where.params.size(); ++i) {
    const std::string& field = cfg.where.params[i];
    if (!payload.is_object() || !payload.contains(field)) {
      throw PermanentStepError("payload has no field '" + field + "' needed by step '" + cfg.step + "'");
    }
    const json& v = payload[field];
    const table::Column* column =
        cfg.where.param_columns[i].empty() ? nullptr : schema.Find(cfg.where.param_columns[i]);
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
        // MySQL would compare "1 OR 1=1" with an integer column as the number 1.
        if (auto n = ParseInteger<int64_t>(s)) out.push_back({*n});
        else if (auto u = ParseInteger<uint64_t>(s)) out.push_back({*u});
        else {
          throw PermanentStepError("payload field '" + field + "' must be an integer (column `" +
                                   column->name + "` of " + schema.label + "), got a string that is not one; step '" +
                                   cfg.step + "'");
        }
      } else {
        out.push_back({s});
      }
    } else {
      throw PermanentStepError("payload field '" + field + "' is " + JsonKind(v) + "; step '" + cfg.step +
                               "' binds only strings, numbers, booleans and null");
    }
  }
  return out;
}

void CheckStop(StepContext& ctx) {
  // The engine requests a stop at ctx.deadline() (with its own clock) and at shutdown.
  if (ctx.stop_token().stop_requested()) throw Interrupted("cancelled; target changes rolled back");
}

void CheckStillOwner(StepContext& ctx) {
  if (!ctx.StillOwner()) throw Interrupted("lost ownership of the event; target changes rolled back");
}

std::string Backticked(const std::string& name) { return "`" + name + "`"; }

size_t RowsPerStatement(size_t params_per_row, int chunk_size) {
  size_t cap = std::max<size_t>(1, kMaxParamsPerStatement / std::max<size_t>(1, params_per_row));
  return std::min(cap, static_cast<size_t>(chunk_size));
}

// SELECT cols FROM table WHERE key IN (keys) [FOR UPDATE], in batches.
std::vector<Row> ReadByKeys(Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                            const std::vector<Row>& keys, int chunk_size, bool for_update) {
  std::vector<Row> out;
  size_t cap = RowsPerStatement(key.size(), chunk_size);
  for (size_t begin = 0; begin < keys.size(); begin += cap) {
    size_t n = std::min(cap, keys.size() - begin);
    size_t padded = table::PaddedCount(n, cap);
    std::vector<SqlValue> params;
    for (size_t i = 0; i < padded; ++i) key.AppendKeyValues(keys[begin + std::min(i, n - 1)], params);
    std::string sql = "SELECT " + cols.SelectList() + " FROM " + Backticked(table) + " WHERE " +
                      key.MatchKeys(padded) + (for_update ? " FOR UPDATE" : "");
    auto rs = c.Query(sql, Bind(params));
    for (Row& r : cols.ReadAll(*rs)) out.push_back(std::move(r));
  }
  return out;
}

// Multi-row INSERT ... ON DUPLICATE KEY UPDATE of every column, in batches.
void Upsert(Connection& c, const std::string& table, const ColumnSet& cols, const std::vector<const Row*>& rows,
            int chunk_size) {
  if (rows.empty()) return;
  std::string update;
  for (const std::string& n : cols.names()) {
    update += (update.empty() ? "" : ", ") + Backticked(n) + " = VALUES(" + Backticked(n) + ")";
  }
  const std::string tuple = cols.ValuesTuple();
  size_t cap = RowsPerStatement(cols.size(), chunk_size);
  for (size_t begin = 0; begin < rows.size(); begin += cap) {
    size_t n = std::min(cap, rows.size() - begin);
    size_t padded = table::PaddedCount(n, cap);
    std::vector<SqlValue> params;
    std::string sql = "INSERT INTO " + Backticked(table) + " (" + cols.NameList() + ") VALUES ";
    for (size_t i = 0; i < padded; ++i) {
      sql += (i > 0 ? ", " : "") + tuple;
      cols.AppendValues(*rows[begin + std::min(i, n - 1)], params);
    }
    sql += " ON DUPLICATE KEY UPDATE " + update;
    c.Execute(sql, Bind(params));
  }
}

void DeleteKeys(Connection& c, const std::string& table, const ColumnSet& key, const std::vector<Row>& keys,
                int chunk_size) {
  size_t cap = RowsPerStatement(key.size(), chunk_size);
  for (size_t begin = 0; begin < keys.size(); begin += cap) {
    size_t n = std::min(cap, keys.size() - begin);
    size_t padded = table::PaddedCount(n, cap);
    std::vector<SqlValue> params;
    for (size_t i = 0; i < padded; ++i) key.AppendKeyValues(keys[begin + std::min(i, n - 1)], params);
    c.Execute("DELETE FROM " + Backticked(table) + " WHERE " + key.MatchKeys(padded), Bind(params));
  }
}

// SELECT cols FROM table WHERE (filter) [AND key > last] ORDER BY key LIMIT chunk [FOR UPDATE]
std::string ScanSql(const Config& cfg, const ColumnSet& cols, const ColumnSet& key, bool after, bool for_update) {
  std::string sql = "SELECT " + cols.SelectList() + " FROM " + Backticked(cfg.table) + " WHERE (" + cfg.where.sql + ")";
  if (after) sql += " AND (" + key.AfterKey() + ")";
  sql += " ORDER BY " + key.OrderBy() + " LIMIT " + std::to_string(cfg.chunk_size);
  if (for_update) sql += " FOR UPDATE";
  return sql;
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
      r.image = json::parse(std::string(rs->getString(1)));
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
        ForgetUndoTables();  // dropped behind our back: recreate on the next try
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

  std::string What(const char* action) const { return cfg_.type + " " + cfg_.step + ": " + action; }

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

  // Creates the undo table once per target per handler, and purges old records.
  void PrepareUndo(ConnectionPool& pool) {
    const std::string id = pool.url().Masked();
    bool ready;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready = undo_ready_.count(id) > 0;
    }
    if (!ready) {
      pool.Run(What("create dsync_step_undo"), [](Connection& c) { c.Execute(kCreateUndoSql); });
      std::lock_guard<std::mutex> lock(mu_);
      undo_ready_.insert(id);
    }
    try {
      pool.Run(What("purge dsync_step_undo"), [&](Connection& c) {
        return c.Execute(kPurgeUndoSql, cfg_.undo_retention_days);
      });
    } catch (const DbError& e) {
      spdlog::warn("TABLE_STEP_UNDO_PURGE_FAILED step={} err={}", cfg_.step, e.what());
    }
  }

  void ForgetUndoTables() {
    std::lock_guard<std::mutex> lock(mu_);
    undo_ready_.clear();
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

 private:
  StepResult Undo(StepContext& ctx) {
    ConnectionPool& pool = ctx.datasources().Get(cfg_.target);
    PrepareUndo(pool);
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
        auto t = table::DescribeTable(c, cfg_.target, cfg_.table);
        if (!t) throw PermanentStepError("table " + cfg_.target + "." + cfg_.table + " does not exist");
        for (const std::string& name : image->columns) {
          const table::Column* col = t->Find(name);
          bool was_binary = std::find(image->binary.begin(), image->binary.end(), name) != image->binary.end();
          if (col == nullptr || col->generated || (col->kind == ColumnKind::kBinary) != was_binary) {
            throw PermanentStepError("column `" + name + "` of " + t->label +
                                     " was dropped or changed type since step '" + cfg_.step +
                                     "' ran; cannot restore its before-image");
          }
        }
        ColumnSet cols(*t, image->columns);
        ColumnSet key(*t, image->key);
        DeleteKeys(c, cfg_.table, key, image->remove, cfg_.chunk_size);
        CheckStop(ctx);
        std::vector<const Row*> rows;
        for (const Row& r : image->restore) rows.push_back(&r);
        Upsert(c, cfg_.table, cols, rows, cfg_.chunk_size);
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

  std::mutex mu_;
  std::set<std::string> undo_ready_;  // targets (masked URL) whose undo table exists
};

class TableSyncStep final : public TableStep {
 public:
  using TableStep::TableStep;

  StepResult Execute(StepContext& ctx) override {
    return Guarded([&] { return Sync(ctx); });
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
  };

  struct Counts {
    int64_t rows = 0, inserted = 0, updated = 0, unchanged = 0, deleted = 0;
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
    RequireFilterColumns(s);
    if (cfg_.delete_missing) RequireFilterColumns(t);
    Plan p{ColumnSet(s, names), ColumnSet(s, t.key), ColumnSet(t, names), ColumnSet(t, t.key),
           ColumnSet(t, t.WritableColumns()), {}, {}, {}};
    p.sync_key_pos = Positions(p.src_cols, t.key);
    p.image_key_pos = Positions(p.tgt_image, t.key);
    p.sync_in_image = Positions(p.tgt_image, names);
    return p;
  }

  StepResult Sync(StepContext& ctx) {
    ConnectionPool& src = ctx.datasources().Get(cfg_.source);
    ConnectionPool& tgt = ctx.datasources().Get(cfg_.target);
    PrepareUndo(tgt);
    const TableSchema s = Describe(src, cfg_.source);
    const TableSchema t = Describe(tgt, cfg_.target);
    const Plan plan = MakePlan(s, t);
    const std::vector<SqlValue> filter = FilterValues(cfg_, ctx.payload(), s);
    const std::string step_code = ctx.idempotency_key();

    Counts counts;
    json image = tgt.Transact(What("sync"), [&](Connection& tc) {
      counts = Counts{};
      ImageBuilder builder(cfg_, plan.tgt_image, t.key, LockUndo(tc, step_code));
      std::optional<Row> last;
      for (;;) {
        CheckStop(ctx);
        const std::string sql = ScanSql(cfg_, plan.src_cols, plan.src_key, last.has_value(), false);
        const std::vector<SqlValue> params = ScanParams(filter, plan.src_key, last);
        std::vector<Row> rows = src.Run(What("read source"), [&](Connection& sc) {
          auto rs = sc.Query(sql, Bind(params));
          return plan.src_cols.ReadAll(*rs);
        });
        if (rows.empty()) break;
        SyncChunk(tc, plan, rows, builder, counts);
        last = table::Project(rows.back(), plan.sync_key_pos);
        if (rows.size() < static_cast<size_t>(cfg_.chunk_size)) break;
      }
      if (cfg_.delete_missing) DeleteMissing(ctx, src, tc, plan, filter, builder, counts);
      CheckStillOwner(ctx);
      return SaveUndo(tc, step_code, cfg_, builder.image());
    });
    json out = {{"rows", counts.rows},
                {"inserted", counts.inserted},
                {"updated", counts.updated},
                {"unchanged", counts.unchanged}};
    if (cfg_.delete_missing) out["deleted"] = counts.deleted;
    spdlog::debug("TABLE_SYNC step={} code={} result={}", cfg_.step, step_code, out.dump());
    return StepResult::Ok(std::move(out), std::move(image));
  }

  // Upserts the source rows that differ from the target, after recording the
  // target's before-state of their keys (locked FOR UPDATE).
  void SyncChunk(Connection& tc, const Plan& plan, const std::vector<Row>& rows, ImageBuilder& builder,
                 Counts& counts) const {
    std::vector<Row> keys;
    keys.reserve(rows.size());
    for (const Row& r : rows) keys.push_back(table::Project(r, plan.sync_key_pos));
    std::vector<Row> before =
        ReadByKeys(tc, cfg_.table, plan.tgt_image, plan.tgt_key, keys, cfg_.chunk_size, /*for_update=*/true);
    std::unordered_map<std::string, size_t> by_key;
    for (size_t i = 0; i < before.size(); ++i) {
      by_key.emplace(table::EncodeKey(table::Project(before[i], plan.image_key_pos)), i);
    }
    std::vector<bool> matched(before.size(), false);
    std::vector<const Row*> writes;
    for (size_t r = 0; r < rows.size(); ++r) {
      ++counts.rows;
      auto it = by_key.find(table::EncodeKey(keys[r]));
      if (it == by_key.end()) {
        ++counts.inserted;
        builder.Remove(keys[r]);
        writes.push_back(&rows[r]);
        continue;
      }
      matched[it->second] = true;
      const Row& b = before[it->second];
      bool same = true;
      for (size_t c = 0; c < rows[r].size() && same; ++c) {
        same = rows[r][c] == b[static_cast<size_t>(plan.sync_in_image[c])];
      }
      if (same) {
        ++counts.unchanged;
        continue;
      }
      ++counts.updated;
      builder.Restore(b);
      writes.push_back(&rows[r]);
    }
    // A target row whose key matched in SQL but not as text (a case-insensitive
    // collation): the upsert rewrites it, so it is restored too.
    for (size_t i = 0; i < before.size(); ++i) {
      if (!matched[i]) builder.Restore(before[i]);
    }
    Upsert(tc, cfg_.table, plan.tgt_cols, writes, cfg_.chunk_size);
  }

  // delete_missing: target rows matching the filter whose key does not match it in
  // the source any more.
  void DeleteMissing(StepContext& ctx, ConnectionPool& src, Connection& tc, const Plan& plan,
                     const std::vector<SqlValue>& filter, ImageBuilder& builder, Counts& counts) const {
    std::optional<Row> last;
    for (;;) {
      CheckStop(ctx);
      std::vector<Row> rows;
      {
        auto rs = tc.Query(ScanSql(cfg_, plan.tgt_image, plan.tgt_key, last.has_value(), true),
                           Bind(ScanParams(filter, plan.tgt_key, last)));
        rows = plan.tgt_image.ReadAll(*rs);
      }
      if (rows.empty()) break;
      std::vector<Row> keys;
      for (const Row& r : rows) keys.push_back(table::Project(r, plan.image_key_pos));
      std::unordered_set<std::string> present = src.Run(What("read source keys"), [&](Connection& sc) {
        std::unordered_set<std::string> found;
        size_t cap = RowsPerStatement(plan.src_key.size(), cfg_.chunk_size);
        for (size_t begin = 0; begin < keys.size(); begin += cap) {
          size_t n = std::min(cap, keys.size() - begin);
          size_t padded = table::PaddedCount(n, cap);
          std::vector<SqlValue> params = filter;
          for (size_t i = 0; i < padded; ++i) plan.src_key.AppendKeyValues(keys[begin + std::min(i, n - 1)], params);
          auto rs = sc.Query("SELECT " + plan.src_key.SelectList() + " FROM " + Backticked(cfg_.table) + " WHERE (" +
                                 cfg_.where.sql + ") AND (" + plan.src_key.MatchKeys(padded) + ")",
                             Bind(params));
          for (const Row& k : plan.src_key.ReadAll(*rs)) found.insert(table::EncodeKey(k));
        }
        return found;
      });
      std::vector<Row> gone;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (present.count(table::EncodeKey(keys[i])) == 0) {
          builder.Restore(rows[i]);
          gone.push_back(keys[i]);
        }
      }
      DeleteKeys(tc, cfg_.table, plan.tgt_key, gone, cfg_.chunk_size);
      counts.deleted += static_cast<int64_t>(gone.size());
      last = keys.back();
      if (rows.size() < static_cast<size_t>(cfg_.chunk_size)) break;
    }
  }
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
    PrepareUndo(tgt);
    const TableSchema t = Describe(tgt, cfg_.target);
    RequireKey(t);
    RequireFilterColumns(t);
    const ColumnSet cols(t, t.WritableColumns());
    const ColumnSet key(t, t.key);
    const std::vector<int> key_pos = Positions(cols, t.key);
    const std::vector<SqlValue> filter = FilterValues(cfg_, ctx.payload(), t);
    const std::string step_code = ctx.idempotency_key();

    int64_t deleted = 0;
    json image = tgt.Transact(What("delete"), [&](Connection& tc) {
      deleted = 0;
      ImageBuilder builder(cfg_, cols, t.key, LockUndo(tc, step_code));
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
};

}  // namespace

std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec) {
  return std::make_unique<TableSyncStep>(ParseConfig(spec, /*sync=*/true));
}

std::unique_ptr<StepHandler> MakeTableDeleteStep(const StepSpec& spec) {
  return std::make_unique<TableDeleteStep>(ParseConfig(spec, /*sync=*/false));
}

}  // namespace dsync::saga
