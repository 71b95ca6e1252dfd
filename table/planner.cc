#include "table/planner.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "table/chunk_table.h"
#include "table/describe.h"
#include "table/row_io.h"
#include "table/run_context.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;

// A lane spans at least this many keys (and 4 chunk_size).
constexpr int64_t kMinLaneKeys = 20000;

}  // namespace

Plan MakePlan(const Spec& spec, const TableSchema& s, const TableSchema& t) {
  RequireKey(t);
  for (const std::string& k : t.key) {
    const Column* sc = s.Find(k);
    if (sc == nullptr) {
      throw PermanentError("table " + s.label + " has no column `" + k + "` (primary key of " + t.label + ")");
    }
    if (sc->column_type != t.Find(k)->column_type) {
      throw PermanentError("primary key column `" + k + "` is " + sc->column_type + " in " + s.label +
                           " but " + t.Find(k)->column_type + " in " + t.label);
    }
  }
  std::vector<std::string> names;
  if (!spec.columns.empty()) {
    for (const std::string& n : spec.columns) {
      const Column* tc = t.Find(n);
      if (s.Find(n) == nullptr || tc == nullptr || tc->generated) {
        throw PermanentError("column `" + n + "` of step '" + spec.step + "' is missing from " +
                             (s.Find(n) == nullptr ? s.label : t.label) +
                             (tc != nullptr && tc->generated ? " (generated)" : ""));
      }
    }
    for (const std::string& k : t.key) {
      if (std::find(spec.columns.begin(), spec.columns.end(), k) == spec.columns.end()) {
        throw PermanentError("columns of step '" + spec.step + "' must include the primary key column `" +
                             k + "` of " + t.label);
      }
    }
    names = spec.columns;
  } else {
    for (const std::string& n : t.WritableColumns()) {
      if (s.Find(n) != nullptr) names.push_back(n);
    }
  }
  std::vector<std::string> not_in_target;
  if (spec.columns.empty()) {
    for (const Column& c : s.columns) {
      if (!c.generated && t.Find(c.name) == nullptr) not_in_target.push_back(c.name);
    }
  }
  RequireFilterColumns(spec, s);
  if (spec.delete_missing) RequireFilterColumns(spec, t);
  Plan p{ColumnSet(s, names), ColumnSet(s, t.key), ColumnSet(t, names), ColumnSet(t, t.key),
         ColumnSet(t, t.WritableColumns()), {}, {}, {}, std::move(not_in_target)};
  p.sync_key_pos = Positions(p.src_cols, t.key);
  p.image_key_pos = Positions(p.tgt_image, t.key);
  p.sync_in_image = Positions(p.tgt_image, names);
  return p;
}

TableShape Preflight(const Spec& spec, Plan& plan, const TableSchema& s, const TableSchema& t,
                     const TableShape& a, const TableShape& b) {
  TableShape synced;
  synced.key = b.key;
  for (const ColumnShape& c : b.columns) {
    if (plan.tgt_cols.IndexOf(c.name) >= 0) synced.columns.push_back(c);
  }
  if (auto why = CompareShapes(a, s.label, synced, t.label)) {
    throw PermanentError("schema preflight of step '" + spec.step + "': " + *why);
  }
  const bool plain = PlainTextHashable(a) && PlainTextHashable(synced);
  plan.src_cols.set_plain_text_hash(plain);
  plan.tgt_cols.set_plain_text_hash(plain);
  UseCompareHash(plan.src_cols, plan.tgt_cols);
  return b;
}

Resume ReadResume(Connection& c, const Spec& spec, const std::string& step_code) {
  Resume r;
  const StepState state = ReadStepState(c, step_code);
  r.last_chunk = static_cast<int>(state.last_chunk);
  const int64_t count = state.records;
  r.records = count;
  const int64_t compensated = state.compensated;
  r.rows_written = state.rows_written;
  const StepRow row = ReadStepRow(c, step_code);
  const bool step_compensated = row.compensated;
  r.lanes = row.lanes;
  if (step_compensated || (count > 0 && compensated == count)) {
    // Compensated before: this forward run starts a new record.
    ForgetChunks(c, step_code);
    return Resume{};
  }
  if (compensated > 0) {
    throw PermanentError("step '" + spec.step + "' was partly compensated (" + std::to_string(compensated) +
                         " of " + std::to_string(count) + " chunks in " + spec.target +
                         ".dsync_sync_chunk); finish its compensation before running it again");
  }
  if (r.last_chunk > 0) {
    if (const std::optional<ChunkEnd> hi = ReadChunkEnd(c, step_code, r.last_chunk)) {
      r.finished = !hi->has_value();
      if (!r.finished) {
        try {
          r.checkpoint = KeyFromJson(ParseJsonBounded(**hi, "the checkpoint"));
        } catch (const std::exception& e) {
          throw PermanentError("the checkpoint of step '" + spec.step + "' in " + spec.target +
                               ".dsync_sync_chunk is not a key: " + e.what());
        }
      }
    }
  }
  return r;
}

std::vector<Lane> PlanLanes(const Spec& spec, storage::ConnectionPool& tgt, int attempt,
                            const std::optional<KeyBounds>& src_bounds, const std::string& step_code,
                            const Resume& resume) {
  std::optional<std::string> stored = resume.lanes;
  if (!stored && resume.records == 0 && spec.lanes > 1 && src_bounds) {
    const std::vector<Row> splits =
        EvenSplits(src_bounds->first, src_bounds->second, spec.lanes,
                          std::max<int64_t>(kMinLaneKeys, int64_t{4} * spec.chunk_size));
    if (!splits.empty()) {
      json j = json::array();
      for (const Row& k : splits) j.push_back(KeyToJson(k));
      stored = tgt.Transact(spec.What("record lanes"), [&](Connection& c) {
        LockStep(c, step_code, spec.step, spec.table);
        CheckFence(c, spec, step_code, attempt);
        return RecordLanes(c, step_code, j.dump());
      });
    }
  }
  std::vector<Lane> lanes(1);
  if (!stored) {
    lanes[0].lo = resume.checkpoint;
    lanes[0].done = resume.finished;
    return lanes;
  }
  std::vector<IntKey> ends;  // each lane's end but the last's
  try {
    const json j = ParseJsonBounded(*stored, "the lanes");
    if (!j.is_array() || j.empty()) throw std::invalid_argument("not a non-empty array of keys");
    for (const json& k : j) {
      lanes.back().end = KeyFromJson(k);
      ends.push_back(IntKey::Of(*lanes.back().end));
      lanes.emplace_back();
      lanes.back().index = static_cast<int>(lanes.size()) - 1;
    }
  } catch (const std::exception& e) {
    throw PermanentError("the lanes of step '" + spec.step + "' in " + spec.target +
                         ".dsync_sync_chunk are not integer keys: " + e.what());
  }
  for (size_t i = 1; i < lanes.size(); ++i) lanes[i].lo = lanes[i - 1].end;  // the lane's start
  // Each record belongs to the lane its upper end falls in; records come oldest first.
  const std::vector<ChunkEnd> records =
      tgt.Run(spec.What("read checkpoints"), [&](Connection& c) { return ReadChunkEnds(c, step_code); });
  for (const ChunkEnd& end : records) {
    if (!end) {
      lanes.back().done = true;
      continue;
    }
    try {
      Row hi = KeyFromJson(ParseJsonBounded(*end, "a checkpoint"));
      const IntKey h = IntKey::Of(hi);
      size_t l = 0;
      while (l < ends.size() && ends[l] < h) ++l;
      lanes[l].done = l < ends.size() && h == ends[l];
      lanes[l].lo = std::move(hi);
    } catch (const std::exception& e) {
      throw PermanentError("a checkpoint of step '" + spec.step + "' in " + spec.target +
                           ".dsync_sync_chunk is not an integer key: " + e.what());
    }
  }
  return lanes;
}

}  // namespace dsync::table
