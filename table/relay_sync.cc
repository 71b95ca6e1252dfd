#include "table/relay_sync.h"

#include <optional>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "table/describe.h"
#include "table/planner.h"
#include "table/preflight.h"
#include "table/relay_schema.h"
#include "table/relay_sides.h"
#include "table/target_table.h"
#include "table/target_writer.h"
#include "table/writer_target.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

constexpr size_t kRelayChunkBytes = 2u << 20;
constexpr int kRelayMaxCompareRows = 40000;

std::vector<std::string> ColumnNames(const TableSchema& t) {
  std::vector<std::string> names;
  for (const Column& c : t.columns) names.push_back(c.name);
  return names;
}

// The target half failed for good: the relay row says so (the source half stops) and
// what was in flight goes.
void RecordFailure(RelayTable& relay, const RelayHalf& half, const Spec& spec, const std::string& why) {
  try {
    relay.SetState(half, "FAILED", why.substr(0, 1000));
  } catch (const std::exception& e) {
    spdlog::warn("TABLE_SYNC_RELAY_FAIL_UNRECORDED step={} code={} err={}", spec.step, half.step_code, e.what());
  }
}

}  // namespace

// `full`'s columns named in `names`, in that order (a name it lacks is left out, as
// ReadShape leaves out a missing column).
TableShape RelayShapeOf(const TableShape& full, const std::vector<std::string>& names) {
  TableShape out;
  out.key = full.key;
  for (const std::string& n : names) {
    for (const ColumnShape& c : full.columns) {
      if (c.name == n) out.columns.push_back(c);
    }
  }
  return out;
}


TableShape RelayFullShape(ConnectionPool& pool, const Spec& spec, const TableSchema& t, const char* what) {
  return pool.Run(spec.What(what), [&](Connection& c) { return ReadShape(c, spec.table, ColumnNames(t), t.key); });
}

RelayOptions RelayOptionsFor(const Spec& spec, const RelayedSyncOptions& o) {
  RelayOptions r = o.relay;
  r.chunk_rows = static_cast<size_t>(spec.chunk_size);
  r.chunk_bytes = kRelayChunkBytes;
  // As direct mode compares 4 x chunk_size keys a range: fewer, larger ranges cost fewer
  // round trips through the framework database (a range's hash list, when asked for, is
  // about 12 bytes a key: at most ~0.5 MB).
  r.compare_rows = 4 * static_cast<size_t>(std::min(spec.chunk_size, kRelayMaxCompareRows / 4));
  r.delete_missing = spec.delete_missing;
  return r;
}

// Waits until the other half has described its table; RelayLost when the relay moved on
// without this half (a new epoch, a later claim, a failure).
RelaySchema AwaitOtherHalf(RunContext& ctx, RelayTable& relay, const RelayHalf& half, Millis poll, Millis timeout) {
  const auto started = ctx.clock().Now();
  for (;;) {
    CheckStop(ctx);
    const std::optional<RelayStatus> st = relay.Read(half.step_code);
    if (!st) throw RelayLost("relay of step '" + half.step_code + "': no relay row (dropped)");
    const int newest = half.side == RelaySide::kTarget ? st->target_attempt : st->source_attempt;
    if (st->epoch != half.epoch || newest != half.attempt) {
      throw RelayLost("relay of step '" + half.step_code + "': the " + RelaySideName(half.side) +
                      " half of attempt " + std::to_string(half.attempt) + " was taken over");
    }
    if (st->state == "FAILED") throw RelayFailed(st->error.value_or("the other half failed"));
    const std::optional<std::string>& doc = half.side == RelaySide::kTarget ? st->source_schema : st->target_schema;
    if (doc) {
      try {
        return ParseRelaySchema(*doc);
      } catch (const RelayFormatError& e) {
        throw PermanentError(e.what());
      }
    }
    if (timeout.count() > 0 && ctx.clock().Now() - started >= timeout) {
      const bool target = half.side == RelaySide::kTarget;
      throw PermanentError("relay of '" + half.step_code + "': no " + (target ? "source" : "target") +
                           " half described its table within " + std::to_string(timeout.count() / 1000) +
                           " s (is a node reaching the " + (target ? "source" : "target") +
                           " live? dsync nodes; dsync events --attention)");
    }
    if (!ctx.clock().SleepFor(poll, ctx.stop_token())) throw Interrupted("stopped while waiting for the other half");
  }
}

BoundFilter RelayTargetFilter(RunContext& ctx, const Spec& spec, ConnectionPool& tgt, const TableSchema& t) {
  const Inner tgt_inner = DescribeSubqueryTables(tgt, spec, spec.target);
  if (!tgt_inner.missing.empty() && spec.delete_missing) throw PermanentError(tgt_inner.missing);
  bool target_filter = tgt_inner.missing.empty();
  for (const std::string& c : spec.where.columns) target_filter = target_filter && t.Find(c) != nullptr;
  return target_filter ? BoundFilter{spec.where.sql, FilterValues(spec, ctx.payload(), t, tgt_inner.schemas)}
                       : BoundFilter{};
}

void RethrowTargetHalfFailure(RelayTable& relay, const RelayHalf& half, const Spec& spec) {
  try {
    throw;
  } catch (const RelayFailed& e) {
    throw PermanentError(spec.What(std::string("relay: ") + e.what()));
  } catch (const PermanentError& e) {
    RecordFailure(relay, half, spec, e.what());
    throw;
  } catch (const DbError& e) {
    if (IsPermanent(e)) RecordFailure(relay, half, spec, e.what());  // e.g. a value the target refuses
    throw;
  } catch (const RelayLost& e) {
    throw Interrupted(e.what());
  } catch (const RelayStopped& e) {
    throw Interrupted(e.what());
  } catch (const RelayFormatError& e) {
    throw PermanentError(spec.What(e.what()));
  }
}

json SourceHalfArgs::ToJson() const { return {{"step_code", step_code}, {"epoch", epoch}, {"payload", payload}}; }

SourceHalfArgs SourceHalfArgs::FromJson(const json& j) {
  SourceHalfArgs a;
  if (!j.is_object() || !j.contains("step_code") || !j["step_code"].is_string() || !j.contains("epoch") ||
      !j["epoch"].is_number_integer() || !j.contains("payload")) {
    throw PermanentError("relay source half: its payload must be {\"step_code\", \"epoch\", \"payload\"}");
  }
  a.step_code = j["step_code"].get<std::string>();
  a.epoch = j["epoch"].get<int>();
  a.payload = j["payload"];
  return a;
}

SyncResult RunRelayedTarget(RunContext& ctx, const Spec& spec, ChunkTable& chunks, RelayTable& relay,
                            const RelayedSyncOptions& options, const std::function<void(int epoch)>& start_source) {
  ConnectionPool& tgt = ctx.Pool(spec.target);
  const std::string& step_code = ctx.step_code();
  chunks.Prepare(tgt, spec);
  const TableSchema t = Describe(tgt, spec, spec.target);
  const TableShape t_full = RelayFullShape(tgt, spec, t, "describe target");
  relay.Open(RelaySpec{step_code, ctx.event_code(), spec.step, spec.table, spec.source, spec.target,
                       options.window_bytes});
  RelayHalf half;
  try {
    half = relay.TakeTarget(step_code, ctx.attempt(), options.node);
  } catch (const RelayLost& e) {
    throw Interrupted(e.what());
  }
  spdlog::info("TABLE_SYNC_RELAYED step={} code={} epoch={} source={} target={} node={}", spec.step, step_code,
               half.epoch, spec.source, spec.target, options.node);
  try {
    relay.PublishSchema(half, RelaySchemaJson(t, t_full));
    start_source(half.epoch);
    const RelaySchema other = AwaitOtherHalf(ctx, relay, half, options.schema_wait_poll);
    const TableSchema& s = other.schema;
    Plan plan = MakePlan(spec, s, t);
    const TableShape shape = Preflight(spec, plan, s, t, RelayShapeOf(other.shape, plan.src_cols.names()),
                                       RelayShapeOf(t_full, plan.tgt_image.names()));
    const BoundFilter tgt_filter = RelayTargetFilter(ctx, spec, tgt, t);

    TakeOver(tgt, spec, step_code, ctx.attempt(), ctx.clock());
    const Resume resume =
        tgt.Transact(spec.What("read checkpoint"), [&](Connection& c) { return ReadResume(c, spec, step_code); });
    const std::vector<Lane> lanes = PlanLanes(spec, tgt, ctx.attempt(), std::nullopt, step_code, resume);
    std::vector<KeyRange> segments;
    for (const Lane& l : lanes) {
      if (!l.done) segments.push_back({l.lo, l.end});
    }
    TargetWriter::Commits commits;
    commits.packet = tgt.Run(spec.What("max_allowed_packet"), [](Connection& c) { return MaxAllowedPacket(c); });
    commits.resumed_after = resume.last_chunk;
    std::mutex mu;
    commits.ctx_mu = &mu;
    TargetWriter writer(ctx, tgt, spec, plan, tgt_filter, commits);
    WriterTarget side(tgt, spec, plan, tgt_filter, writer, ctx.clock());

    auto progress = [&](const json& p) {
      json out = {{"rows", side.counts.rows},         {"inserted", side.counts.inserted},
                  {"updated", side.counts.updated},   {"chunks", side.counts.chunks},
                  {"chunks_equal", side.counts.chunks_equal}, {"relayed", true},
                  {"relay", p},                       {"running", true}};
      std::lock_guard<std::mutex> lock(mu);
      ctx.ReportProgress(out);
    };
    RelayTarget run(relay, half, side, std::move(segments), RelayOptionsFor(spec, options),
                    RelayControl{ctx.clock(), ctx.stop_token(), progress, {}});
    const RelayTotals totals = run.Run();

    const Counts& c = side.counts;
    json out = CountsJson(spec, c);
    out["rows_fetched"] = c.rows_fetched;
    out["chunk_records"] = resume.records + side.records;
    if (resume.last_chunk > 0) {
      out["resumed_after_chunk"] = resume.last_chunk;
      out["resumed_rows_written"] = resume.rows_written;
    }
    out["schema_fingerprint"] = shape.Fingerprint();
    if (!plan.not_in_target.empty()) out["source_columns_not_in_target"] = plan.not_in_target;
    const std::optional<RelayStatus> st = relay.Read(step_code);
    json r = totals.ToJson();
    r["epoch"] = half.epoch;
    r["window_bytes"] = options.window_bytes;
    r["peak_bytes"] = st ? st->peak_bytes : 0;
    out["relayed"] = true;
    out["relay"] = r;
    spdlog::info("TABLE_SYNC_RELAYED_DONE step={} code={} epoch={} ranges={} chunks={} bytes={} peak_bytes={}",
                 spec.step, step_code, half.epoch, totals.ranges, totals.chunks, totals.bytes_relayed,
                 r["peak_bytes"].get<int64_t>());
    json ref = ChunkUndoRef(spec, step_code, resume.records + side.records, shape);
    return SyncResult{std::move(out), std::move(ref)};
  } catch (...) {
    RethrowTargetHalfFailure(relay, half, spec);
  }
}

json RunRelayedSource(RunContext& ctx, const Spec& spec, const SourceHalfArgs& args, RelayTable& relay,
                      const RelayedSyncOptions& options, bool keys_only) {
  ConnectionPool& src = ctx.Pool(spec.source);
  const TableSchema s = Describe(src, spec, spec.source);
  const TableShape s_full = RelayFullShape(src, spec, s, "describe source");
  // Why this half is not needed any more (nullopt: it was taken over by a later claim).
  auto moved_on = [&]() -> std::optional<std::string> {
    const std::optional<RelayStatus> st = relay.Read(args.step_code);
    if (!st) return "the relay is gone";
    if (st->epoch != args.epoch) return "epoch " + std::to_string(args.epoch) + " ended";
    if (st->state == "DONE") return "the target half finished";
    if (st->state == "FAILED") return "the target half failed: " + st->error.value_or("");
    return std::nullopt;
  };
  RelayHalf half;
  try {
    half = relay.TakeSource(args.step_code, args.epoch, ctx.attempt(), options.node);
    relay.PublishSchema(half, RelaySchemaJson(s, s_full));
    const RelaySchema other = AwaitOtherHalf(ctx, relay, half, options.schema_wait_poll);
    const TableSchema& t = other.schema;
    Plan plan = MakePlan(spec, s, t);
    Preflight(spec, plan, s, t, RelayShapeOf(s_full, plan.src_cols.names()),
              RelayShapeOf(other.shape, plan.tgt_image.names()));
    const Inner src_inner = DescribeSubqueryTables(src, spec, spec.source);
    if (!src_inner.missing.empty()) throw PermanentError(src_inner.missing);
    const BoundFilter src_filter{spec.where.sql, FilterValues(spec, args.payload, s, src_inner.schemas)};
    DbSourceSide full(src, spec.table, plan.src_cols, plan.src_key, src_filter);
    DbSourceSide keys(src, spec.table, plan.src_key, plan.src_key, src_filter);
    KeysOnlySource key_side(full, keys);
    SourceSide& side = keys_only ? static_cast<SourceSide&>(key_side) : full;
    auto progress = [&](const json& p) { ctx.ReportProgress(p); };
    RelayControl control{ctx.clock(), ctx.stop_token(), progress, {}};
    // A verify's target half (a `dsync verify` process, or a table_verify step) has no
    // takeover that would end this half: it is watched instead (RelayPresence).
    if (keys_only) control.target_gone = [&] { return relay.TargetGone(args.step_code); };
    RelaySource run(relay, half, side, RelayOptionsFor(spec, options), std::move(control));
    json out = run.Run().ToJson();
    out["half"] = "source";
    out["epoch"] = args.epoch;
    return out;
  } catch (const PermanentError& e) {
    // The target half cannot go on without this one: it fails the step with this error.
    if (half.attempt > 0) {
      try {
        relay.SetState(half, "FAILED", std::string(e.what()).substr(0, 1000));
      } catch (const std::exception&) {
      }
    }
    throw;
  } catch (const RelayFailed& e) {
    return json{{"stopped", std::string("the target half failed: ") + e.what()}, {"epoch", args.epoch}};
  } catch (const RelayLost& e) {
    if (std::optional<std::string> why = moved_on()) return json{{"stopped", *why}, {"epoch", args.epoch}};
    throw Interrupted(e.what());
  } catch (const RelayStopped& e) {
    throw Interrupted(e.what());
  } catch (const RelayFormatError& e) {
    throw PermanentError(spec.What(e.what()));
  }
}

}  // namespace dsync::table
