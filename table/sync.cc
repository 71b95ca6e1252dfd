#include "table/sync.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "table/bind.h"
#include "table/both.h"
#include "table/describe.h"
#include "table/planner.h"
#include "table/row_io.h"
#include "table/source_reader.h"
#include "table/target_writer.h"
#include "table/writer_target.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

constexpr size_t kCompareSpan = 4;  // a compare chunk covers up to this many times as many
constexpr std::chrono::milliseconds kCheckpointEvery{2000};
constexpr std::chrono::milliseconds kProgressEvery{1000};

// A lane stopped because another lane of its step failed (that failure is the step's).
class LaneStopped : public Interrupted {
 public:
  using Interrupted::Interrupted;
};

// What the lanes of one run share.
struct SyncRun {
  SyncRun(RunContext& c, const Spec& sp, SourceReader& s, TargetWriter& t, const Plan& p, const Resume& r,
          std::mutex& m)
      : ctx(c), spec(sp), source(s), target(t), plan(p), resume(r), mu(m) {}
  RunContext& ctx;
  const Spec& spec;
  SourceReader& source;  // the source half
  TargetWriter& target;  // the target half
  const Plan& plan;
  const Resume& resume;
  std::atomic<bool> failed{false};  // a lane failed: the others stop
  // Guards what follows, and ctx (one thread at a time: its StillOwner, ReportProgress).
  std::mutex& mu;
  std::exception_ptr failure;  // the first lane's error: the step's
  std::vector<Counts> counts;  // per lane
  int64_t records = 0;         // the step's chunk records, earlier runs' included
  Clock::TimePoint last_progress;
  // The lowest and highest key of either side (single integer keys; nullopt when
  // both are empty): where compare ranges by key span begin and end.
  std::optional<KeyBounds> key_bounds;
};

Counts Total(const std::vector<Counts>& lanes) {
  Counts t;
  for (const Counts& c : lanes) t += c;
  return t;
}

json Progress(const Spec& spec, const Counts& c, const Resume& resume, int64_t records, size_t lanes, bool final) {
  json out = {{"rows", c.rows}, {"inserted", c.inserted}, {"updated", c.updated}, {"unchanged", c.unchanged}};
  if (spec.delete_missing) out["deleted"] = c.deleted;
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

// A lane's counts so far into the run's; about every kProgressEvery the step row gets
// the progress of all lanes.
void Publish(SyncRun& run, int lane, const Counts& counts) {
  std::lock_guard<std::mutex> lock(run.mu);
  run.counts[static_cast<size_t>(lane)] = counts;
  if (run.ctx.clock().Now() - run.last_progress < kProgressEvery) return;
  run.last_progress = run.ctx.clock().Now();
  run.ctx.ReportProgress(Progress(run.spec, Total(run.counts), run.resume, run.records, run.counts.size(), false));
}

// A differing range: the rows whose hashes differ or that the target lacks are
// fetched from the source; target rows the source lacks are delete candidates.
// `source_hashes`: the source's hashes of the range, already read. Returns false,
// having fetched nothing, when more than `max_held` rows differ (the range is then
// retried smaller).
bool DiffByRowHash(SyncRun& run, ChunkWork& w, Counts& counts, size_t max_held,
                   KeyHashes* source_hashes = nullptr) {
  const Spec& spec = run.spec;
  KeyHashes sh, th;
  if (source_hashes != nullptr) {
    sh = std::move(*source_hashes);
    th = run.target.RowHashes(w.range);
  } else {
    std::tie(sh, th) = Both([&] { return run.source.RowHashes(w.range); },
                            [&] { return run.target.RowHashes(w.range); });
  }
  const HashDiff d = DiffHashes(sh, th);
  w.equal_by_hash += static_cast<int64_t>(d.equal);
  std::vector<size_t> differ = d.missing;  // in the source's key order
  differ.insert(differ.end(), d.different.begin(), d.different.end());
  std::sort(differ.begin(), differ.end());
  std::vector<Row> fetch;
  for (size_t i : differ) fetch.push_back(sh.key(i));
  std::vector<Row> candidates;
  if (spec.delete_missing) {
    for (size_t j : d.extra) candidates.push_back(th.key(j));
  }
  if (fetch.size() + candidates.size() > max_held && sh.size() > 1) return false;
  w.rows_read = static_cast<int64_t>(sh.size());
  if (!fetch.empty()) {
    w.rows = run.source.RowsOfKeys(fetch);
    counts.rows_fetched += static_cast<int64_t>(w.rows.size());
  }
  w.delete_keys = run.source.MissingKeys(candidates);
  return true;
}

// Copy chunks with delete_missing: target rows of the range matching the filter
// whose key is not among the source rows read, and not in the source either.
void AddDeleteCandidates(SyncRun& run, ChunkWork& w) {
  std::vector<Row> keys = run.target.Keys(w.range);
  if (keys.empty()) return;
  std::unordered_set<std::string> in_source;
  for (const Row& r : w.rows) in_source.insert(EncodeKey(Project(r, run.plan.sync_key_pos)));
  std::vector<Row> candidates;
  for (Row& k : keys) {
    if (in_source.count(EncodeKey(k)) == 0) candidates.push_back(std::move(k));
  }
  w.delete_keys = run.source.MissingKeys(candidates);
}

// Of `candidates`, the keys the source has no row for that matches the filter (by

// One lane's chunks, in key order, from its checkpoint to its end.
void RunLane(SyncRun& run, Lane& lane) {
  RunContext& ctx = run.ctx;
  const Spec& spec = run.spec;
  SourceReader& source = run.source;
  TargetWriter& target = run.target;
  const Plan& plan = run.plan;
  const std::optional<Row> end = lane.end;
  Counts counts;
  std::optional<Row> lo = lane.lo;
  bool done = lane.done;
  bool compare = !done && target.HasAnyRow(KeyRange{lo, end});
  // A copy chunk holds every row it covers: at most chunk_size. A compare chunk holds
  // a key and a hash per row it covers and only the rows that differ, so it may cover
  // kCompareSpan times as many (fewer transactions and round trips while few rows
  // differ); one that would hold more than chunk_size differing rows is retried at a
  // quarter of its size.
  // Lanes share those bounds (rows and bytes held), so a step holds what one lane would.
  const size_t lanes = run.counts.size();
  const auto max_held = std::max<size_t>(1, static_cast<size_t>(spec.chunk_size) / lanes);
  ChunkSizer::Options copy_options;
  copy_options.max_bytes /= lanes;
  ChunkSizer copy_sizer(max_held, copy_options);
  ChunkSizer::Options compare_options = copy_options;
  compare_options.max_held_rows = max_held;
  ChunkSizer compare_sizer(max_held * kCompareSpan, compare_options);
  auto last_record = ctx.clock().Now();
  bool recorded_last = true;  // the latest range processed is in the chunk table
  bool by_hash = false;       // compare by row hashes without a range checksum first
  // Compare ranges by key span (single integer keys, from the lowest and highest key
  // of either side; KeySpanRanges), else ending at the source's N-th key.
  std::optional<KeySpanRanges> spans;
  if (run.key_bounds) spans.emplace(run.key_bounds->first, run.key_bounds->second);
  auto read_source = [&](const std::optional<Row>& after, size_t n) { return source.Rows({after, end}, n); };
  auto source_hashes = [&](const std::optional<Row>& after, size_t n) {
    return source.RowHashes({after, end}, n);
  };
  // The source's next range, read while the target works on this one: its rows while
  // copying, its row hashes while comparing by row hashes. (After the reads they
  // call: destroyed first, waiting for a read under way.)
  ReadAhead<std::vector<Row>> rows_ahead;
  ReadAhead<KeyHashes> hashes_ahead;
  while (!done) {
    CheckStop(ctx);
    if (run.failed) throw LaneStopped("another lane of step '" + spec.step + "' failed");
    const auto started = ctx.clock().Now();
    ChunkSizer& sizer = compare ? compare_sizer : copy_sizer;
    const size_t planned = sizer.next();
    size_t size = planned;
    ChunkWork w;
    w.range.lo = lo;
    if (compare) rows_ahead.Drop();
    if (!compare || !by_hash) hashes_ahead.Drop();
    if (!compare) {
      w.rows = rows_ahead.Take(lo, size, read_source);
      // Fewer rows than asked: the range runs to the lane's end.
      w.range.hi = w.rows.size() == size ? Project(w.rows.back(), plan.sync_key_pos) : end;
      if (w.range.hi != end) rows_ahead.Start(*w.range.hi, planned, read_source);
      w.rows_read = static_cast<int64_t>(w.rows.size());
      counts.rows_fetched += w.rows_read;
      if (spec.delete_missing) AddDeleteCandidates(run, w);
    } else if (by_hash) {
      // The source's row hashes of the next `size` rows give the range's end too: one
      // pass over the source instead of a boundary, a checksum and the hashes. The
      // next range's are read while the target's of this one are (reading the
      // target's ahead too, after the source's, measured slower: the two reads then
      // run one after the other).
      KeyHashes sh = hashes_ahead.Take(lo, size, source_hashes);
      w.range.hi = sh.size() == size ? sh.key(sh.size() - 1) : end;
      if (w.range.hi != end) hashes_ahead.Start(*w.range.hi, planned, source_hashes);
      if (!DiffByRowHash(run, w, counts, max_held, &sh)) {
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
        w.range.hi = source.NthKeyAfter(lo, size);
      }
      // Two calls on the two halves, run at once.
      const auto [a, b] = Both([&] { return source.Checksum(w.range); }, [&] { return target.Checksum(w.range); });
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
      } else if (b.rows == 0 && !target.HasAnyRow(w.range)) {
        // Nothing on the target in this range: copy it (and read the next ranges
        // whole too, until a chunk meets target rows), at most a copy chunk's rows of it.
        w.rows = source.Rows(w.range, max_held);
        if (w.rows.size() == max_held && a.rows > static_cast<int64_t>(max_held)) {
          w.range.hi = Project(w.rows.back(), plan.sync_key_pos);
        }
        w.rows_read = static_cast<int64_t>(w.rows.size());
        counts.rows_fetched += w.rows_read;
        compare = false;
      } else if (!DiffByRowHash(run, w, counts, max_held)) {
        sizer.Shrink();
        continue;
      }
    }
    const bool last = w.range.hi == end;
    const bool need_write = !w.rows.empty() || !w.delete_keys.empty();
    // Equal ranges need no transaction; a checkpoint of them is written every
    // kCheckpointEvery (so a re-run does not compare them all again) and at the end.
    const bool checkpoint_due =
        ctx.clock().Now() - last_record >= kCheckpointEvery || (last && !recorded_last);
    if (need_write || checkpoint_due) {
      Counts delta;
      try {
        delta = target.Commit(w);
      } catch (const ChunkTooBig& e) {
        if (size <= 1) throw PermanentError(e.what());
        sizer.Shrink();
        continue;  // the same range start again, smaller
      }
      {
        std::lock_guard<std::mutex> lock(run.mu);
        ++run.records;
      }
      recorded_last = true;
      last_record = ctx.clock().Now();
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
                  ctx.clock().Now() - started, RowBytes(w.rows), w.rows.size());
    lo = w.range.hi;
    done = last;
    Publish(run, lane.index, counts);
  }
}

}  // namespace

SyncResult RunSync(RunContext& ctx, const Spec& spec, ChunkTable& chunks) {
  ConnectionPool& src = ctx.Pool(spec.source);
  ConnectionPool& tgt = ctx.Pool(spec.target);
  // Each lane compares with a connection to each side: opened while the schemas are
  // read, not lane after lane as they start (a fresh node's pools are empty).
  auto warm_src = std::async(std::launch::async, [&] { src.Prewarm(spec.lanes); });
  auto warm_tgt = std::async(std::launch::async, [&] { tgt.Prewarm(spec.lanes); });
  chunks.Prepare(tgt, spec);
  const TableSchema s = Describe(src, spec, spec.source);
  const TableSchema t = Describe(tgt, spec, spec.target);
  Plan plan = MakePlan(spec, s, t);
  const auto [src_shape, tgt_shape] = Both(
      [&] {
        return src.Run(spec.What("preflight source"), [&](Connection& c) {
          return ReadShape(c, spec.table, plan.src_cols.names(), s.key);
        });
      },
      [&] {
        return tgt.Run(spec.What("preflight target"), [&](Connection& c) {
          return ReadShape(c, spec.table, plan.tgt_image.names(), t.key);
        });
      });
  const TableShape shape = Preflight(spec, plan, s, t, src_shape, tgt_shape);
  const Inner src_inner = DescribeSubqueryTables(src, spec, spec.source);
  if (!src_inner.missing.empty()) throw PermanentError(src_inner.missing);
  const BoundFilter src_filter{spec.where.sql, FilterValues(spec, ctx.payload(), s, src_inner.schemas)};
  // On the target the filter reads the target's own columns and tables; a target
  // without them is compared by key range alone (delete_missing requires them).
  const Inner tgt_inner = DescribeSubqueryTables(tgt, spec, spec.target);
  if (!tgt_inner.missing.empty() && spec.delete_missing) throw PermanentError(tgt_inner.missing);
  bool target_filter = tgt_inner.missing.empty();
  for (const std::string& c : spec.where.columns) target_filter = target_filter && t.Find(c) != nullptr;
  const BoundFilter tgt_filter =
      target_filter ? BoundFilter{spec.where.sql, FilterValues(spec, ctx.payload(), t, tgt_inner.schemas)}
                    : BoundFilter{};
  if (target_filter) {
    PinCompareHash(plan.src_cols, plan.tgt_cols, PinnedIntegers(spec.where, s, t, src_filter.params));
  }
  const std::string& step_code = ctx.step_code();

  // The fence first: what is read after it is every chunk an earlier claim will ever
  // commit (one committing at that instant committed before the fence was raised).
  TakeOver(tgt, spec, step_code, ctx.attempt(), ctx.clock());
  const Resume resume =
      tgt.Transact(spec.What("read checkpoint"), [&](Connection& c) { return ReadResume(c, spec, step_code); });
  // Single integer keys: each side's lowest and highest key, for the lanes' split and
  // the compare ranges by key span.
  std::optional<KeyBounds> src_bounds, tgt_bounds;
  if (SingleIntegerKey(plan.src_key)) {
    std::tie(src_bounds, tgt_bounds) = Both(
        [&] {
          return src.Run(spec.What("key bounds"),
                         [&](Connection& c) { return ReadKeyBounds(c, spec.table, plan.src_key); });
        },
        [&] {
          return tgt.Run(spec.What("key bounds"),
                         [&](Connection& c) { return ReadKeyBounds(c, spec.table, plan.tgt_key); });
        });
  }
  std::vector<Lane> lanes = PlanLanes(spec, tgt, ctx.attempt(), src_bounds, step_code, resume);
  if (resume.last_chunk > 0) {
    spdlog::info("TABLE_SYNC_RESUME step={} code={} after_chunk={} finished={} lanes={}", spec.step, step_code,
                 resume.last_chunk, std::all_of(lanes.begin(), lanes.end(), [](const Lane& l) { return l.done; }),
                 lanes.size());
  }

  SourceReader source(src, spec, plan, src_filter);
  TargetWriter::Commits commits;
  commits.packet = tgt.Run(spec.What("max_allowed_packet"), [](Connection& c) { return MaxAllowedPacket(c); });
  // Lanes' chunk transactions run at once: READ COMMITTED, so two lanes of a range the
  // target has no rows in yet do not lock the same gap (table/target_writer.h).
  commits.isolation = lanes.size() > 1 ? storage::Isolation::kReadCommitted : storage::Isolation::kSession;
  commits.resumed_after = resume.last_chunk;
  std::mutex mu;  // SyncRun::mu
  commits.ctx_mu = &mu;
  TargetWriter target(ctx, tgt, spec, plan, tgt_filter, commits);
  SyncRun run(ctx, spec, source, target, plan, resume, mu);
  run.counts.resize(lanes.size());
  run.key_bounds = Union(src_bounds, tgt_bounds);
  run.records = resume.records;
  run.last_progress = ctx.clock().Now();
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
  json out = Progress(spec, counts, resume, run.records, lanes.size(), true);
  out["schema_fingerprint"] = shape.Fingerprint();
  // Without `columns`, the columns both tables have are synced; the source's others
  // are named here, so a column dropped or renamed on one side is visible.
  if (!plan.not_in_target.empty()) out["source_columns_not_in_target"] = plan.not_in_target;
  spdlog::debug("TABLE_SYNC step={} code={} result={}", spec.step, step_code, out.dump());
  json ref = ChunkUndoRef(spec, step_code, run.records, shape);
  return SyncResult{std::move(out), std::move(ref)};
}

}  // namespace dsync::table
