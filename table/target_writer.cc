#include "table/target_writer.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "table/chunk_table.h"
#include "table/row_io.h"

namespace dsync::table {

using nlohmann::json;
using storage::Connection;

TargetWriter::TargetWriter(RunContext& ctx, storage::ConnectionPool& pool, const Spec& spec, const Plan& plan,
                           const BoundFilter& filter, Commits commits)
    : ctx_(ctx), pool_(pool), spec_(spec), plan_(plan), filter_(filter), commits_(commits) {}

RangeChecksum TargetWriter::Checksum(const KeyRange& range) {
  return pool_.Run(spec_.What("checksum target"), [&](Connection& c) {
    return ChecksumRange(c, spec_.table, plan_.tgt_cols, plan_.tgt_key, filter_, range);
  });
}

KeyHashes TargetWriter::RowHashes(const KeyRange& range) {
  return pool_.Run(spec_.What("row hashes target"), [&](Connection& c) {
    return table::RowHashes(c, spec_.table, plan_.tgt_cols, plan_.tgt_key, filter_, range);
  });
}

bool TargetWriter::HasAnyRow(const KeyRange& range) {
  return pool_.Run(spec_.What("probe target range"), [&](Connection& c) {
    const BoundFilter all;
    return !ReadRange(c, spec_.table, plan_.tgt_key, plan_.tgt_key, all, range, 1, false).empty();
  });
}

std::vector<Row> TargetWriter::Keys(const KeyRange& range) {
  return pool_.Run(spec_.What("read target keys"), [&](Connection& c) {
    return ReadRange(c, spec_.table, plan_.tgt_key, plan_.tgt_key, filter_, range, 0, false);
  });
}

// The step lock comes last, so the chunk transactions of a step's lanes overlap up to
// it; what is read under it is read with locking reads (a plain read would see the
// snapshot the writes began).
Counts TargetWriter::Commit(const ChunkWork& w) {
  const Plan& plan = plan_;
  Counts delta;
  pool_.Transact(spec_.What("sync chunk"), commits_.isolation, [&](Connection& tc) {
    delta = Counts{};
    ShareRun(tc, ctx_.step_code());  // a takeover waits for (or evicts) this transaction
    Image image = EmptyImage();
    const std::optional<KeySpan> span = ApplyChunk(tc, w, image, delta);
    const bool changed = !image.restore.empty() || !image.remove.empty();
    std::optional<std::string> image_text;
    if (changed) {
      image_text = ChunkRecordText(image, AfterState(tc, spec_.table, plan.tgt_image, plan.tgt_key,
                                                     plan.image_key_pos, image, spec_.chunk_size,
                                                     /*for_update=*/false, span));
    }
    if (image_text && commits_.packet > 0 && static_cast<int64_t>(image_text->size()) + 4096 > commits_.packet) {
      throw ChunkTooBig("step '" + spec_.step + "': a chunk's before-image (" +
                        std::to_string(image_text->size()) + " bytes) exceeds max_allowed_packet of " +
                        spec_.target + " (" + std::to_string(commits_.packet) + " bytes)");
    }
    CheckStop(ctx_);
    LockStep(tc, ctx_.step_code(), spec_.step, spec_.table);
    CheckFence(tc, spec_, ctx_.step_code(), ctx_.attempt());
    const NewestChunk newest_chunk = LockNewestChunk(tc, ctx_.step_code());
    const int64_t newest = newest_chunk.chunk_no, newest_attempt = newest_chunk.attempt;
    if (newest > commits_.resumed_after && newest_attempt != ctx_.attempt()) {
      throw Interrupted("another run of step '" + spec_.step + "' committed chunk " + std::to_string(newest) +
                        " meanwhile; target changes rolled back");
    }
    ChunkRecord record;
    record.chunk_no = newest + 1;
    record.attempt = ctx_.attempt();
    record.lo = w.range.lo;
    record.hi = w.range.hi;
    record.before_image = image_text;
    record.rows_read = w.rows_read;
    record.rows_written = delta.inserted + delta.updated + delta.deleted;
    InsertChunk(tc, ctx_.step_code(), spec_, record);
    // Last, right before COMMIT: the window in which a node that loses the event can
    // still commit a chunk is one round trip (at-least-once, saga/steps/table_steps.h).
    std::lock_guard<std::mutex> lock(*commits_.ctx_mu);
    CheckStillOwner(ctx_);
  });
  return delta;
}

Image TargetWriter::EmptyImage() const {
  const Plan& plan = plan_;
  Image image;
  image.table = spec_.table;
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
std::optional<KeySpan> TargetWriter::ApplyChunk(Connection& tc, const ChunkWork& w, Image& image,
                                                Counts& counts) const {
  const Plan& plan = plan_;
  std::vector<Row> keys;
  keys.reserve(w.rows.size() + w.delete_keys.size());
  for (const Row& r : w.rows) keys.push_back(Project(r, plan.sync_key_pos));
  const size_t upsert_keys = keys.size();
  for (const Row& k : w.delete_keys) keys.push_back(k);
  if (keys.empty()) return std::nullopt;
  const std::optional<KeySpan> span = DenseSpan(plan.tgt_key, keys);
  std::vector<Row> before =
      span ? ReadSpan(tc, spec_.table, plan.tgt_image, plan.tgt_key, *span, /*for_update=*/true)
           : ReadByKeys(tc, spec_.table, plan.tgt_image, plan.tgt_key, keys, spec_.chunk_size, /*for_update=*/true);
  std::unordered_map<std::string, size_t> by_key;
  for (size_t i = 0; i < before.size(); ++i) {
    by_key.emplace(EncodeKey(Project(before[i], plan.image_key_pos)), i);
  }
  std::unordered_set<std::string> covered;
  // Each before row goes into the image at most once (matched marks it), so it is
  // moved, not copied: a chunk holds its before-rows once.
  auto restore = [&](Row& row) {
    if (covered.insert(EncodeKey(Project(row, plan.image_key_pos))).second) {
      image.restore.push_back(std::move(row));
    }
  };
  std::vector<bool> matched(before.size(), false);
  std::vector<const Row*> inserts, updates;
  for (size_t r = 0; r < w.rows.size(); ++r) {
    auto it = by_key.find(EncodeKey(keys[r]));
    if (it == by_key.end()) {
      ++counts.inserted;
      if (covered.insert(EncodeKey(keys[r])).second) image.remove.push_back(keys[r]);
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
    auto it = by_key.find(EncodeKey(keys[k]));
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
  Upsert(tc, spec_.table, plan.tgt_cols, updates, spec_.chunk_size);
  InsertAbsent(tc, spec_, plan.tgt_cols, inserts, "step '" + spec_.step + "'");
  DeleteKeys(tc, spec_.table, plan.tgt_key, gone, spec_.chunk_size);
  counts.deleted += static_cast<int64_t>(gone.size());
  return span;
}

Image ParseImage(const json& j, const Spec& spec) {
try {
  return Image::FromJson(j);
} catch (const std::invalid_argument& e) {
  throw PermanentError("step '" + spec.step + "': " + e.what());
}
}

std::pair<int64_t, int64_t> RestoreImage(Connection& c, const Spec& spec, const Image& image, RunContext& ctx) {
  if (image.table != spec.table) {
    throw PermanentError("step '" + spec.step + "': its before-image is of table " + image.table + ", not " +
                         spec.table);
  }
  auto t = DescribeTable(c, spec.target, spec.table);
  if (!t) throw PermanentError("table " + spec.target + "." + spec.table + " does not exist");
  for (const std::string& name : image.columns) {
    const Column* col = t->Find(name);
    bool was_binary = std::find(image.binary.begin(), image.binary.end(), name) != image.binary.end();
    if (col == nullptr || col->generated || (col->kind == ColumnKind::kBinary) != was_binary) {
      throw PermanentError("column `" + name + "` of " + t->label + " was dropped or changed type since step '" +
                           spec.step + "' ran; cannot restore its before-image");
    }
  }
  ColumnSet cols(*t, image.columns);
  ColumnSet key(*t, image.key);
  DeleteKeys(c, spec.table, key, image.remove, spec.chunk_size);
  CheckStop(ctx);
  // As a sync chunk writes (ApplyChunk): rows whose key the target holds now are
  // upserted back, the others inserted, so a clash over a secondary unique key with
  // a row written since fails instead of overwriting that row. When a row matched a
  // key in SQL only (a case-insensitive collation), every row is upserted.
  const std::vector<int> key_pos = Positions(cols, image.key);
  std::vector<Row> keys;
  keys.reserve(image.restore.size());
  for (const Row& r : image.restore) keys.push_back(Project(r, key_pos));
  std::unordered_set<std::string> wanted, present;
  for (const Row& k : keys) wanted.insert(EncodeKey(k));
  bool sql_only_match = false;
  for (const Row& k : ReadByKeys(c, spec.table, key, key, keys, spec.chunk_size, /*for_update=*/true)) {
    std::string enc = EncodeKey(k);
    sql_only_match = sql_only_match || wanted.count(enc) == 0;
    present.insert(std::move(enc));
  }
  std::vector<const Row*> updates, inserts;
  for (size_t i = 0; i < image.restore.size(); ++i) {
    const bool held = sql_only_match || present.count(EncodeKey(keys[i])) > 0;
    (held ? updates : inserts).push_back(&image.restore[i]);
  }
  Upsert(c, spec.table, cols, updates, spec.chunk_size);
  InsertAbsent(c, spec, cols, inserts, "compensation of step '" + spec.step + "'");
  return {static_cast<int64_t>(image.remove.size()), static_cast<int64_t>(image.restore.size())};
}

void InsertAbsent(Connection& c, const Spec& spec, const ColumnSet& cols, const std::vector<const Row*>& rows,
                  const std::string& who) {
  try {
    Upsert(c, spec.table, cols, rows, spec.chunk_size, /*insert_only=*/true);
  } catch (const DbError& e) {
    if (e.kind() != DbError::Kind::kDuplicateKey) throw;
    if (std::string(e.what()).find("PRIMARY") != std::string::npos) {
      throw Interrupted("a target row was inserted into the key range while " + who + " ran (" +
                        std::string(e.what()) + "); target changes rolled back");
    }
    throw PermanentError(who + ": a row clashes with another row of " + spec.target + "." + spec.table +
                         " over a unique key (" + e.what() + "); target changes rolled back");
  }
}

}  // namespace dsync::table
