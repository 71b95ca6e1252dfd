// A keyed sync without chunk planning (table/keyed_sync.h).
//
// Thread safety: see the header.
#include "table/keyed_sync.h"

#include <algorithm>
#include <cstddef>
#include <future>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

#include <spdlog/spdlog.h>

#include "table/bind.h"
#include "table/describe.h"
#include "table/row_io.h"
#include "table/source_reader.h"
#include "table/target_table.h"
#include "table/target_writer.h"
#include "table/writer_target.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

// "1 = 1" however spaced: the filter of a sync of every row.
bool MatchesEveryRow(const CompiledWhere& w) {
  std::string s;
  for (char c : w.sql) {
    if (c != ' ') s += c;
  }
  return s == "1=1";
}

bool TextKey(const ColumnSet& key) {
  for (size_t i = 0; i < key.size(); ++i) {
    const ColumnKind k = key.at(i).kind;
    if (k != ColumnKind::kSigned && k != ColumnKind::kUnsigned) return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<const KeyedTable> DescribeKeyed(RunContext& ctx, const Spec& spec) {
  if (!spec.delete_missing) throw PermanentError("step '" + spec.step + "': a keyed sync needs delete_missing");
  ConnectionPool& src = ctx.Pool(spec.source);
  ConnectionPool& tgt = ctx.Pool(spec.target);
  // As RunSync reads them (table/sync.cc), the two sides at once.
  auto target_side = std::async(std::launch::async, [&] { return Describe(tgt, spec, spec.target); });
  const TableSchema s = Describe(src, spec, spec.source);
  const TableSchema t = target_side.get();
  Plan plan = MakePlan(spec, s, t);
  auto tgt_shape_read = std::async(std::launch::async, [&] {
    return tgt.Run(spec.What("preflight target"),
                   [&](Connection& c) { return ReadShape(c, spec.table, plan.tgt_image.names(), t.key); });
  });
  const TableShape src_shape = src.Run(spec.What("preflight source"), [&](Connection& c) {
    return ReadShape(c, spec.table, plan.src_cols.names(), s.key);
  });
  const TableShape tgt_shape = tgt_shape_read.get();
  TableShape shape = Preflight(spec, plan, s, t, src_shape, tgt_shape);
  const Inner src_inner = DescribeSubqueryTables(src, spec, spec.source);
  if (!src_inner.missing.empty()) throw PermanentError(src_inner.missing);
  BoundFilter source_filter{spec.where.sql, FilterValues(spec, ctx.payload(), s, src_inner.schemas)};
  const Inner tgt_inner = DescribeSubqueryTables(tgt, spec, spec.target);
  if (!tgt_inner.missing.empty()) throw PermanentError(tgt_inner.missing);
  bool on_target = true;
  for (const std::string& c : spec.where.columns) on_target = on_target && t.Find(c) != nullptr;
  BoundFilter target_filter;
  if (on_target) {
    target_filter = BoundFilter{spec.where.sql, FilterValues(spec, ctx.payload(), t, tgt_inner.schemas)};
    PinCompareHash(plan.src_cols, plan.tgt_cols, PinnedIntegers(spec.where, s, t, source_filter.params));
  }
  const bool text_key = TextKey(plan.src_key);
  const int64_t packet = tgt.Run(spec.What("max_allowed_packet"), [](Connection& c) { return MaxAllowedPacket(c); });
  return std::make_shared<const KeyedTable>(KeyedTable{spec, std::move(plan), std::move(shape), std::move(source_filter),
                                                       std::move(target_filter),
                                                       on_target && !MatchesEveryRow(spec.where), text_key, packet});
}

namespace {

// One chunk transaction for `keys` (the source's rows of them read first); halves
// of it when its before-image does not fit in one statement.
// counts.chunks counts the chunk transactions committed (each one chunk record).
void ApplyKeys(RunContext& ctx, const KeyedTable& kt, SourceReader& source, TargetWriter& target,
               const std::vector<Row>& keys, Counts& counts) {
  const Plan& plan = kt.plan;
  ChunkWork w;
  w.rows = source.RowsOfKeys(keys);
  w.rows_read = static_cast<int64_t>(w.rows.size());
  counts.rows_fetched += w.rows_read;
  // Keys the read did not return: their rows are gone from the source or left its
  // filter. (Text keys: a key that differs from the stored one only in case or
  // trailing spaces is present in SQL terms; MissingKeys asks the source so.)
  std::unordered_set<std::string> found;
  for (const Row& r : w.rows) found.insert(EncodeKey(Project(r, plan.sync_key_pos)));
  std::vector<Row> gone;
  for (const Row& k : keys) {
    if (found.count(EncodeKey(k)) == 0) gone.push_back(k);
  }
  if (!gone.empty() && kt.text_key) gone = source.MissingKeys(gone);
  // Of those, the target deletes the rows that match the filter there (as table_sync
  // compares the target's rows under its filter).
  if (!gone.empty() && kt.filter_on_target) {
    gone = ctx.Pool(kt.spec.target).Run(kt.spec.What("read target keys"), [&](Connection& c) {
      return ReadByKeys(c, kt.spec.table, plan.tgt_key, plan.tgt_key, gone, kt.spec.chunk_size, false,
                        &kt.target_filter);
    });
  }
  w.delete_keys = std::move(gone);
  try {
    counts += target.Commit(w);
  } catch (const ChunkTooBig& e) {
    if (keys.size() <= 1) throw PermanentError(e.what());
    const auto half = keys.begin() + static_cast<std::ptrdiff_t>(keys.size() / 2);
    ApplyKeys(ctx, kt, source, target, std::vector<Row>(keys.begin(), half), counts);
    ApplyKeys(ctx, kt, source, target, std::vector<Row>(half, keys.end()), counts);
    return;
  }
  ++counts.chunks;
  counts.rows += w.rows_read;
}

}  // namespace

SyncResult RunKeyedSync(RunContext& ctx, const KeyedTable& kt, const std::vector<Row>& keys, ChunkTable& chunks) {
  const Spec& spec = kt.spec;
  ConnectionPool& tgt = ctx.Pool(spec.target);
  chunks.Prepare(tgt, spec);
  // A later claim of the event fences off the runs of the claims before it (which may
  // still be running on a frozen node); the first claim has none.
  if (ctx.attempt() > 1) TakeOver(tgt, spec, ctx.step_code(), ctx.attempt(), ctx.clock());
  SourceReader source(ctx.Pool(spec.source), spec, kt.plan, kt.source_filter);
  TargetWriter::Commits commits;
  commits.packet = kt.packet;
  commits.isolation = storage::Isolation::kReadCommitted;
  // A chunk committed by an earlier claim is no reason to stop: this run applies the
  // keys again (the fence, checked under the step lock, stops the earlier claims).
  commits.resumed_after = std::numeric_limits<int64_t>::max();
  std::mutex mu;
  commits.ctx_mu = &mu;
  TargetWriter target(ctx, tgt, spec, kt.plan, kt.target_filter, commits);
  Counts counts;
  ApplyKeys(ctx, kt, source, target, keys, counts);
  const int64_t records = counts.chunks;
  if (counts.inserted + counts.updated + counts.deleted > 0) counts.chunks_written = records;
  json out = {{"rows", counts.rows},         {"inserted", counts.inserted}, {"updated", counts.updated},
              {"unchanged", counts.unchanged}, {"deleted", counts.deleted},   {"keys", keys.size()},
              {"chunks", counts.chunks},     {"chunk_records", records},    {"rows_fetched", counts.rows_fetched},
              {"schema_fingerprint", kt.shape.Fingerprint()}};
  if (!kt.plan.not_in_target.empty()) out["source_columns_not_in_target"] = kt.plan.not_in_target;
  spdlog::debug("TABLE_SYNC_KEYED step={} code={} result={}", spec.step, ctx.step_code(), out.dump());
  return SyncResult{std::move(out), ChunkUndoRef(spec, ctx.step_code(), records, kt.shape)};
}

}  // namespace dsync::table
