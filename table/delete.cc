#include "table/delete.h"

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "table/describe.h"
#include "table/row_io.h"
#include "table/target_table.h"
#include "table/target_writer.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

// SELECT cols FROM table WHERE (filter) [AND key > last] ORDER BY key LIMIT chunk [FOR UPDATE]
std::string ScanSql(const Spec& spec, const ColumnSet& cols, const ColumnSet& key, bool after, bool for_update) {
  std::string sql =
      "SELECT " + cols.SelectList() + " FROM " + QuoteIdentifier(spec.table) + " WHERE (" + spec.where.sql + ")";
  if (after) sql += " AND (" + key.AfterKey() + ")";
  sql += " ORDER BY " + key.OrderBy() + " LIMIT " + std::to_string(spec.chunk_size);
  if (for_update) sql += " FOR UPDATE";
  return sql;
}

// The rows the filter matches (table_delete's ceiling).   params: the filter's
std::string CountSql(const Spec& spec) {
  return "SELECT COUNT(*) FROM " + QuoteIdentifier(spec.table) + " WHERE (" + spec.where.sql + ")";
}

std::vector<SqlValue> ScanParams(const std::vector<SqlValue>& filter, const ColumnSet& key, const std::optional<Row>& last) {
  std::vector<SqlValue> params = filter;
  if (last) key.AppendAfterKeyValues(*last, params);
  return params;
}

// The before-image of a run, merged with what earlier runs of the same step recorded:
// a key's before-state is the one seen the first time the step changed that row.
class ImageBuilder {
 public:
  ImageBuilder(const Spec& spec, const ColumnSet& image_cols, const std::vector<std::string>& key,
               const std::optional<json>& earlier)
      : key_pos_(Positions(image_cols, key)) {
    image_.table = spec.table;
    image_.columns = image_cols.names();
    image_.key = key;
    for (size_t i = 0; i < image_cols.size(); ++i) {
      if (image_cols.at(i).kind == ColumnKind::kBinary) image_.binary.push_back(image_cols.at(i).name);
    }
    if (!earlier) return;
    Image first = ParseImage(*earlier, spec);
    if (first.table != image_.table || first.columns != image_.columns || first.key != image_.key) {
      throw PermanentError("table " + spec.target + "." + spec.table + " changed its columns since step '" +
                           spec.step + "' first ran; its before-image cannot be extended");
    }
    image_.restore = std::move(first.restore);
    image_.remove = std::move(first.remove);
    for (const Row& r : image_.restore) covered_.insert(EncodeKey(Project(r, key_pos_)));
    for (const Row& k : image_.remove) covered_.insert(EncodeKey(k));
  }

  // A row as it was before this step changed or deleted it (full image columns).
  void Restore(const Row& row) {
    if (covered_.insert(EncodeKey(Project(row, key_pos_))).second) image_.restore.push_back(row);
  }
  // The key of a row this step creates.
  void Remove(const Row& key) {
    if (covered_.insert(EncodeKey(key)).second) image_.remove.push_back(key);
  }
  const Image& image() const { return image_; }

 private:
  std::vector<int> key_pos_;
  Image image_;
  std::unordered_set<std::string> covered_;
};

// Writes the image into the undo row (locked earlier in the same transaction).
json SaveImage(Connection& c, const std::string& step_code, const Spec& spec, const Image& image) {
  json j = image.ToJson();
  std::string text = j.dump();
  int64_t packet = MaxAllowedPacket(c);
  if (packet > 0 && static_cast<int64_t>(text.size()) + 4096 > packet) {
    throw PermanentError("step '" + spec.step + "': the before-image (" + std::to_string(text.size()) +
                         " bytes) exceeds max_allowed_packet of " + spec.target + " (" + std::to_string(packet) +
                         " bytes); narrow the step's where");
  }
  SaveUndo(c, step_code, spec.table, text);
  return j;
}

// Locks the undo row; returns the before-image earlier runs recorded (none after a
// compensation: a forward run after it starts over).
std::optional<json> LockUndo(Connection& c, const Spec& spec, const std::string& step_code) {
  LockUndoRow(c, step_code, spec.step, spec.table);
  UndoRecord r = ReadUndo(c, step_code, spec);
  if (r.compensated) return std::nullopt;
  return r.image;
}

// Thrown inside the delete's transaction: it rolls back, nothing is deleted.
[[noreturn]] void RefuseCeiling(const Spec& spec, int64_t rows) {
  throw PermanentError("table_delete " + spec.step + ": " + std::to_string(rows) + " rows of " + spec.target + "." +
                       spec.table + " match, more than max_rows " + std::to_string(spec.max_rows) +
                       "; nothing deleted");
}

}  // namespace

DeleteResult RunDelete(RunContext& ctx, const Spec& spec, UndoTable& undo) {
  ConnectionPool& tgt = ctx.Pool(spec.target);
  undo.Prepare(tgt, spec);
  const TableSchema t = Describe(tgt, spec, spec.target);
  RequireKey(t);
  RequireFilterColumns(spec, t);
  const ColumnSet cols(t, t.WritableColumns());
  const ColumnSet key(t, t.key);
  const std::vector<int> key_pos = Positions(cols, t.key);
  const Inner inner = DescribeSubqueryTables(tgt, spec, spec.target);
  if (!inner.missing.empty()) throw PermanentError(inner.missing);
  const std::vector<SqlValue> filter = FilterValues(spec, ctx.payload(), t, inner.schemas);
  const std::string& step_code = ctx.step_code();

  int64_t deleted = 0;
  json image = tgt.Transact(spec.What("delete"), [&](Connection& tc) {
    deleted = 0;
    ImageBuilder builder(spec, cols, t.key, LockUndo(tc, spec, step_code));
    // The ceiling, before any row goes: a filter (or a payload value) matching more
    // rows than max_rows deletes none.
    const int64_t matching = tc.QueryInt(CountSql(spec), Bind(filter)).value_or(0);
    if (matching > spec.max_rows) RefuseCeiling(spec, matching);
    std::optional<Row> last;
    for (;;) {
      CheckStop(ctx);
      std::vector<Row> rows;
      {
        auto rs = tc.Query(ScanSql(spec, cols, key, last.has_value(), true), Bind(ScanParams(filter, key, last)));
        rows = cols.ReadAll(*rs);
      }
      if (rows.empty()) break;
      std::vector<Row> keys;
      for (const Row& r : rows) {
        builder.Restore(r);
        keys.push_back(Project(r, key_pos));
      }
      // Rows that came to match since the count count too.
      if (deleted + static_cast<int64_t>(rows.size()) > spec.max_rows) {
        RefuseCeiling(spec, deleted + static_cast<int64_t>(rows.size()));
      }
      DeleteKeys(tc, spec.table, key, keys, spec.chunk_size);
      deleted += static_cast<int64_t>(rows.size());
      last = keys.back();
      if (rows.size() < static_cast<size_t>(spec.chunk_size)) break;
    }
    CheckStillOwner(ctx);
    return SaveImage(tc, step_code, spec, builder.image());
  });
  json out = {{"rows", deleted}, {"deleted", deleted}};
  spdlog::debug("TABLE_DELETE step={} code={} result={}", spec.step, step_code, out.dump());
  return DeleteResult{std::move(out), std::move(image)};
}

json CompensateFromUndo(RunContext& ctx, const Spec& spec, UndoTable& undo_table) {
  ConnectionPool& pool = ctx.Pool(spec.target);
  undo_table.Prepare(pool, spec);
  const std::string& step_code = ctx.step_code();
  json out = pool.Transact(spec.What("compensate"), [&](Connection& c) -> json {
    CheckStop(ctx);
    UndoRecord undo = ReadUndo(c, step_code, spec);
    if (undo.compensated) return {{"already_compensated", true}};
    std::optional<Image> image;
    if (undo.image) {
      image = ParseImage(*undo.image, spec);
    } else if (!ctx.compensation_data().is_null() &&
               !(ctx.compensation_data().is_object() && ctx.compensation_data().empty())) {
      image = ParseImage(ctx.compensation_data(), spec);  // the undo row was purged
    }
    size_t removed = 0, restored = 0;
    if (image) {
      if (image->table != spec.table) {
        throw PermanentError("step '" + spec.step + "': its before-image is of table " + image->table +
                             ", not " + spec.table);
      }
      RestoreImage(c, spec, *image, ctx);
      removed = image->remove.size();
      restored = image->restore.size();
    }
    CheckStillOwner(ctx);
    MarkUndoCompensated(c, step_code, spec.step, spec.table);
    return {{"removed", removed}, {"restored", restored}};
  });
  spdlog::debug("TABLE_STEP_COMPENSATED step={} code={} result={}", spec.step, step_code, out.dump());
  return out;
}

}  // namespace dsync::table
