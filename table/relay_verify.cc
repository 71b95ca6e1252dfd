#include "table/relay_verify.h"

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <spdlog/spdlog.h>

#include "table/describe.h"
#include "table/planner.h"
#include "table/preflight.h"
#include "table/relay_sides.h"
#include "table/spec.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::ConnectionPool;

// A verify's check as the params of a table_sync step, so both halves plan it as a
// relayed sync of the same table plans it (with delete_missing: extra keys are sent).
json VerifyParams(const TableCheck& check) {
  json p = {{"source", check.source},
            {"target", check.target},
            {"table", check.table},
            {"chunk_size", check.chunk_size},
            {"delete_missing", true}};
  if (!check.where_text.empty()) p["where"] = check.where_text;
  if (!check.columns.empty()) p["columns"] = check.columns;
  if (check.like_patterns) p["like_patterns"] = true;
  return p;
}

Spec SpecOfParams(const json& params, const std::string& step) {
  StepSpec s;
  s.name = step.empty() ? "verify" : step;
  s.type = "table_sync";
  s.params = params;
  try {
    return ParseSpec(s, /*sync=*/true);
  } catch (const ConfigError& e) {
    throw VerifyInputError(e.what());
  }
}

// The target half's side: reads as a relayed sync's target half does, writes nothing;
// each relayed chunk (the keys of the source rows that differ or are missing, and the
// target keys the source lacks) is classified and counted.
class VerifyTarget final : public DbTargetReads {
 public:
  VerifyTarget(ConnectionPool& pool, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
               const BoundFilter& filter, size_t keep)
      : DbTargetReads(pool, table, cols, key, filter), keep_(keep) {}

  RangeChecksum Checksum(const KeyRange& range) override {
    const RangeChecksum c = DbTargetReads::Checksum(range);
    target_rows += c.rows;  // each range is published (and so checksummed) once
    return c;
  }

  int64_t Apply(const RelayChunk& chunk) override {
    if (chunk.columns != key_.names()) {
      throw PermanentError("verify: a relayed chunk holds columns other than the key (a source half of another version?)");
    }
    if (!chunk.rows.empty()) {
      const KeyHashes held = DbTargetReads::Hashes({chunk.lo, chunk.hi});
      std::unordered_set<std::string> present;
      present.reserve(held.size());
      for (size_t i = 0; i < held.size(); ++i) present.insert(held.EncodedKey(i));
      for (const Row& key : chunk.rows) {
        if (present.count(EncodeKey(key)) > 0) {
          Keep(different, different_total, key);
        } else {
          Keep(missing, missing_total, key);
        }
      }
    }
    for (const Row& key : chunk.deletes) Keep(extra, extra_total, key);
    return 0;
  }

  void RecordEqual(const KeyRange&) override {}
  void Finish() override {}

  int64_t target_rows = 0;
  int64_t missing_total = 0, extra_total = 0, different_total = 0;
  std::vector<Row> missing, extra, different;

 private:
  void Keep(std::vector<Row>& list, int64_t& total, const Row& key) {
    ++total;
    if (list.size() < keep_) list.push_back(key);
  }

  size_t keep_;
};

}  // namespace

json VerifySourcePayload(const TableCheck& check, const std::string& code, int epoch, const json& values) {
  json p = SourceHalfArgs{code, epoch, values}.ToJson();
  p["verify"] = VerifyParams(check);
  if (!check.step.empty()) p["step"] = check.step;
  return p;
}

bool IsVerifySourcePayload(const json& payload) {
  return payload.is_object() && payload.contains("verify") && payload["verify"].is_object();
}

TableDiff RunRelayedVerify(RunContext& ctx, const TableCheck& check, RelayTable& relay,
                           const RelayedSyncOptions& options, size_t keep_keys,
                           const std::function<void(int epoch)>& start_source) {
  const Spec spec = SpecOfParams(VerifyParams(check), check.step);
  ConnectionPool& tgt = ctx.Pool(spec.target);
  const TableSchema t = DescribeForCheck(tgt, spec.target, spec.table);
  const TableShape t_full = RelayFullShape(tgt, spec, t, "describe target");
  const std::string& code = ctx.step_code();
  relay.Open(RelaySpec{code, ctx.event_code(), spec.step, spec.table, spec.source, spec.target, options.window_bytes});
  // The relay row and what hangs off it go however the run ends: a verify leaves nothing.
  struct DropAtEnd {
    RelayTable& relay;
    const std::string& code;
    ~DropAtEnd() {
      try {
        relay.Drop(code);
      } catch (const std::exception& e) {
        spdlog::warn("VERIFY_RELAY_DROP_FAILED code={} err={}", code, e.what());
      }
    }
  } drop{relay, code};
  RelayHalf half;
  try {
    half = relay.TakeTarget(code, ctx.attempt(), options.node);
  } catch (const RelayLost& e) {
    throw Interrupted(e.what());
  }
  spdlog::info("VERIFY_RELAYED code={} table={} source={} target={} epoch={}", code, spec.table, spec.source,
               spec.target, half.epoch);
  try {
    // Held until the verify ends: the source half stops when this process is gone.
    const RelayPresence presence(relay.pool(), code);
    relay.PublishSchema(half, RelaySchemaJson(t, t_full));
    start_source(half.epoch);
    const RelaySchema other = AwaitOtherHalf(ctx, relay, half, options.schema_wait_poll, options.other_half_timeout);
    const TableSchema& s = other.schema;
    Plan plan = MakePlan(spec, s, t);
    Preflight(spec, plan, s, t, RelayShapeOf(other.shape, plan.src_cols.names()),
              RelayShapeOf(t_full, plan.tgt_image.names()));
    const BoundFilter tgt_filter = RelayTargetFilter(ctx, spec, tgt, t);
    VerifyTarget side(tgt, spec.table, plan.tgt_cols, plan.tgt_key, tgt_filter, keep_keys);
    RelayTarget run(relay, half, side, {KeyRange{}}, RelayOptionsFor(spec, options),
                    RelayControl{ctx.clock(), ctx.stop_token(), {}, {}});
    const RelayTotals totals = run.Run();

    TableDiff d;
    d.step = check.step;
    d.table = check.table;
    d.source = check.source;
    d.target = check.target;
    d.where = check.where_text;
    d.key_columns = t.key;
    for (const std::string& k : t.key) d.key_kinds.push_back(t.Find(k)->kind);
    d.target_rows = side.target_rows;
    d.source_rows = side.target_rows - side.extra_total + side.missing_total;
    d.chunks = totals.ranges;
    d.chunks_differing = totals.ranges - totals.ranges_equal;
    d.missing_total = side.missing_total;
    d.extra_total = side.extra_total;
    d.different_total = side.different_total;
    d.missing = std::move(side.missing);
    d.extra = std::move(side.extra);
    d.different = std::move(side.different);
    spdlog::info("VERIFY_RELAYED_DONE code={} table={} equal={} ranges={} ranges_equal={} keys_relayed={} bytes={}",
                 code, spec.table, d.equal(), totals.ranges, totals.ranges_equal, totals.rows_relayed,
                 totals.bytes_relayed);
    return d;
  } catch (...) {
    RethrowTargetHalfFailure(relay, half, spec);
  }
}

json RunRelayedVerifySource(RunContext& ctx, const json& payload, RelayTable& relay,
                            const RelayedSyncOptions& options) {
  if (!IsVerifySourcePayload(payload)) throw PermanentError("relay source half: its payload names no verify");
  Spec spec;
  try {
    spec = SpecOfParams(payload["verify"], payload.value("step", std::string()));
  } catch (const VerifyInputError& e) {
    throw PermanentError(e.what());
  }
  const SourceHalfArgs args = SourceHalfArgs::FromJson(payload);
  json out = RunRelayedSource(ctx, spec, args, relay, options, /*keys_only=*/true);
  out["verify"] = true;
  return out;
}

}  // namespace dsync::table
