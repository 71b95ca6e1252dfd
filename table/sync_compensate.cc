// Compensation of table_sync from its chunk records (table/sync.h CompensateSync), and
// its conflicts (the contract: saga/steps/table_steps.h "Conflict-safe compensation").
// Each chunk record also holds, for every row of its before-image, the hash
// (ColumnSet::RowHashExpr over the image's columns) of the target row as the chunk left
// it, or null where it deleted it ("after" in the record's JSON). Compensation reads
// the same hashes now; a row whose hash differs was changed by someone else since.

#include "table/sync.h"

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/json_limits.h"
#include "table/chunk_table.h"
#include "table/preflight.h"
#include "table/row_io.h"
#include "table/run_context.h"
#include "table/target_writer.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

// Rows changed by someone else since the sync: their count and the first keys.
constexpr size_t kMaxConflictKeys = 100;
constexpr size_t kKeysInMessage = 20;

struct Conflicts {
  int64_t total = 0;
  json keys = json::array();  // at most kMaxConflictKeys, each a JSON array of key cells
  void Add(const Row& key) {
    ++total;
    if (keys.size() < kMaxConflictKeys) keys.push_back(KeyToJson(key));
  }
  void Add(const Conflicts& o) {
    total += o.total;
    for (const json& k : o.keys) {
      if (keys.size() < kMaxConflictKeys) keys.push_back(k);
    }
  }
};

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

// A chunk's before-image and after-image hashes; nullopt when compensated already
// or without an image.   [FOR UPDATE with `lock`]
std::optional<ChunkImage> ReadImage(Connection& c, const Spec& spec, const std::string& step_code, int chunk_no,
                                    bool lock) {
  const std::optional<std::string> text = ReadChunkImage(c, step_code, chunk_no, lock);
  if (!text) return std::nullopt;
  json j;
  try {
    j = ParseJsonBounded(*text, "the chunk image");
  } catch (const JsonTooDeepError& e) {
    throw PermanentError(std::string(e.what()) + " (chunk " + std::to_string(chunk_no) + " of step '" +
                         spec.step + "' in " + spec.target + ".dsync_sync_chunk)");
  } catch (const json::exception&) {
    throw PermanentError("chunk " + std::to_string(chunk_no) + " of step '" + spec.step + "' in " +
                         spec.target + ".dsync_sync_chunk is not valid JSON");
  }
  ChunkImage out{ParseImage(j, spec), j.contains("after") ? j["after"] : json()};
  const size_t entries = out.image.restore.size() + out.image.remove.size();
  if (!out.after.is_null() && (!out.after.is_array() || out.after.size() != entries)) {
    throw PermanentError("chunk " + std::to_string(chunk_no) + " of step '" + spec.step + "' in " +
                         spec.target + ".dsync_sync_chunk has after-image hashes that do not fit its image");
  }
  return out;
}

// Marks the entries of the chunk whose target row differs from what the chunk left
// (EntryKeys order) and adds them to `out`. A chunk recorded without after-image
// hashes has no conflicts. A column of the image that is gone or retyped: let
// RestoreImage say so.
std::vector<bool> FindConflicts(Connection& c, const Spec& spec, const ChunkImage& chunk, bool lock, Conflicts& out) {
  const size_t entries = chunk.image.restore.size() + chunk.image.remove.size();
  std::vector<bool> conflict(entries, false);
  if (chunk.after.is_null() || entries == 0) return conflict;
  auto t = DescribeTable(c, spec.target, spec.table);
  if (!t) throw PermanentError("table " + spec.target + "." + spec.table + " does not exist");
  for (const std::string& name : chunk.image.columns) {
    if (t->Find(name) == nullptr || t->Find(name)->generated) return conflict;
  }
  const ColumnSet cols(*t, chunk.image.columns);
  const ColumnSet key(*t, chunk.image.key);
  const std::vector<int> key_pos = Positions(cols, chunk.image.key);
  const json now = AfterState(c, spec.table, cols, key, key_pos, chunk.image, spec.chunk_size, lock);
  const std::vector<Row> keys = EntryKeys(chunk.image, key_pos);
  for (size_t i = 0; i < entries; ++i) {
    if (now[i] != chunk.after[i]) {
      conflict[i] = true;
      out.Add(keys[i]);
    }
  }
  return conflict;
}

Image WithoutEntries(const Image& image, const std::vector<bool>& skip) {
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

// One chunk restored in one target transaction with its compensated mark. Throws
// Refusal (on_conflict fail) when rows conflict.
Restored RestoreChunk(RunContext& ctx, const Spec& spec, ConnectionPool& tgt, const std::string& step_code,
                      int chunk_no, bool check) {
  return tgt.Transact(spec.What("compensate chunk"), [&](Connection& c) {
    Restored out;
    LockStep(c, step_code, spec.step, spec.table);
    CheckFence(c, spec, step_code, ctx.attempt());
    auto chunk = ReadImage(c, spec, step_code, chunk_no, true);
    if (!chunk) return out;
    if (check) {
      std::vector<bool> skip = FindConflicts(c, spec, *chunk, true, out.skipped);
      if (out.skipped.total > 0 && spec.on_conflict == OnConflict::kFail) {
        throw Refusal{out.skipped};  // changed since the first pass; nothing of this chunk restored
      }
      if (out.skipped.total > 0) chunk->image = WithoutEntries(chunk->image, skip);
    }
    std::tie(out.removed, out.restored) = RestoreImage(c, spec, chunk->image, ctx);
    CheckStillOwner(ctx);
    MarkChunkCompensated(c, step_code, chunk_no);
    return out;
  });
}

// "the schema of env_b.t changed since the sync (fingerprint a -> b): column ..."
// from the shape kept in the compensation data; "" when unchanged or unknown.
std::string SchemaSinceSync(RunContext& ctx, const Spec& spec, ConnectionPool& tgt) {
  const json& data = ctx.compensation_data();
  if (!data.is_object() || !data.contains("schema")) return "";
  auto then = TableShape::FromJson(data["schema"]);
  if (!then) return "";
  std::vector<std::string> names;
  for (const auto& c : then->columns) names.push_back(c.name);
  try {
    auto now = tgt.Run(spec.What("read schema"), [&](Connection& c) -> std::optional<TableShape> {
      auto t = DescribeTable(c, spec.target, spec.table);
      if (!t) return std::nullopt;
      return ReadShape(c, spec.table, names, t->key);
    });
    if (!now) return "table " + spec.target + "." + spec.table + " was dropped since the sync";
    if (now->Fingerprint() == then->Fingerprint()) return "";
    return "the schema of " + spec.target + "." + spec.table + " changed since the sync (fingerprint " +
           then->Fingerprint() + ", now " + now->Fingerprint() + "): " + DescribeChange(*then, *now);
  } catch (const DbError&) {
    return "";
  }
}

// on_conflict fail: records the refusal as the step row's output and fails the
// compensation permanently, naming the keys (and how the table's schema changed
// since the sync, when it did).
[[noreturn]] void Refuse(RunContext& ctx, const Spec& spec, ConnectionPool& tgt, const Conflicts& conflicts) {
  std::string keys;
  for (size_t i = 0; i < conflicts.keys.size() && i < kKeysInMessage; ++i) {
    keys += (keys.empty() ? "" : ", ") + conflicts.keys[i].dump();
  }
  if (conflicts.total > static_cast<int64_t>(kKeysInMessage)) {
    keys += ", ... (" + std::to_string(conflicts.total - static_cast<int64_t>(kKeysInMessage)) + " more)";
  }
  std::string why = "step '" + spec.step + "': compensation refused (on_conflict fail): " +
                    std::to_string(conflicts.total) + " row(s) of " + spec.target + "." + spec.table +
                    " changed since the sync wrote them, keys " + keys;
  const std::string schema = SchemaSinceSync(ctx, spec, tgt);
  if (!schema.empty()) why += "; " + schema;
  ctx.ReportProgress({{"compensation", "refused"}, {"on_conflict", "fail"}, {"conflicts", conflicts.total},
                      {"conflict_keys", conflicts.keys}});
  spdlog::error("TABLE_SYNC_COMPENSATION_REFUSED event={} step={} code={} conflicts={} keys={}", ctx.event_code(),
                spec.step, ctx.step_code(), conflicts.total, conflicts.keys.dump());
  throw PermanentError(why);
}

}  // namespace

// Compensation: each chunk with a before-image, last first, restored in its own
// target transaction together with its compensated mark. Rows someone else changed
// since the chunk wrote them (their hash differs from the chunk's after-image) are
// conflicts, handled by on_conflict: fail refuses before restoring anything (and
// again under each chunk's locks), skip leaves them and restores the rest,
// overwrite restores them anyway. The outcome is the step row's output.
json CompensateSync(RunContext& ctx, const Spec& spec, ChunkTable& chunk_table) {
  ConnectionPool& tgt = ctx.Pool(spec.target);
  chunk_table.Prepare(tgt, spec);
  const std::string& step_code = ctx.step_code();
  const json& data = ctx.compensation_data();
  const int64_t expected = data.is_object() ? data.value("chunks", int64_t{0}) : 0;
  auto state = tgt.Run(spec.What("read chunks"), [&](Connection& c) {
    std::vector<int> todo = ChunksToRestore(c, step_code);
    bool step_compensated = ReadStepRow(c, step_code).compensated;
    int64_t records = ReadStepState(c, step_code).records;
    return std::make_tuple(todo, step_compensated, records);
  });
  auto& [todo, step_compensated, records] = state;
  if (step_compensated) return {{"already_compensated", true}};
  if (records == 0 && expected > 0) {
    throw PermanentError("step '" + spec.step + "': its " + std::to_string(expected) + " chunk record(s) in " +
                         spec.target + ".dsync_sync_chunk are gone (purged after undo_retention_days, or "
                         "deleted); its before-image cannot be restored");
  }
  TakeOver(tgt, spec, step_code, ctx.attempt(), ctx.clock());
  const bool check = spec.on_conflict != OnConflict::kOverwrite;
  Conflicts conflicts;
  if (spec.on_conflict == OnConflict::kFail) {
    // Read-only first pass: a refusal restores nothing.
    for (int chunk_no : todo) {
      CheckStop(ctx);
      tgt.Run(spec.What("check conflicts"), [&](Connection& c) {
        auto chunk = ReadImage(c, spec, step_code, chunk_no, false);
        if (chunk) FindConflicts(c, spec, *chunk, false, conflicts);
      });
    }
    if (conflicts.total > 0) Refuse(ctx, spec, tgt, conflicts);
  }
  int64_t removed = 0, restored = 0, chunks = 0;
  for (int chunk_no : todo) {
    CheckStop(ctx);
    Restored r;
    try {
      r = RestoreChunk(ctx, spec, tgt, step_code, chunk_no, check);
    } catch (const Refusal& refusal) {
      Refuse(ctx, spec, tgt, refusal.conflicts);
    }
    removed += r.removed;
    restored += r.restored;
    conflicts.Add(r.skipped);
    ++chunks;
    ctx.ReportProgress({{"compensating", true}, {"chunks", chunks}, {"removed", removed}, {"restored", restored}});
  }
  tgt.Transact(spec.What("compensate step"), [&](Connection& c) {
    LockStep(c, step_code, spec.step, spec.table);
    CheckFence(c, spec, step_code, ctx.attempt());
    CheckStillOwner(ctx);
    MarkStepCompensated(c, step_code);
  });
  json out = {{"removed", removed}, {"restored", restored}, {"chunks", chunks},
              {"on_conflict", OnConflictName(spec.on_conflict)}, {"conflicts", conflicts.total}};
  if (conflicts.total > 0) {
    out["skipped_keys"] = conflicts.keys;
    spdlog::warn("TABLE_SYNC_COMPENSATION_SKIPPED event={} step={} code={} conflicts={} keys={}", ctx.event_code(),
                 spec.step, step_code, conflicts.total, conflicts.keys.dump());
  }
  ctx.ReportProgress(out);  // the outcome stays the step row's output
  spdlog::debug("TABLE_SYNC_COMPENSATED step={} code={} result={}", spec.step, step_code, out.dump());
  return out;
}

}  // namespace dsync::table
