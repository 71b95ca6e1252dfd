#include "table/bundle.h"

#include <chrono>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "table/chunk_table.h"
#include "table/describe.h"
#include "table/planner.h"
#include "table/preflight.h"
#include "table/relay.h"
#include "table/relay_codec.h"
#include "table/relay_schema.h"
#include "table/relay_sides.h"
#include "table/relay_sync.h"
#include "table/target_table.h"
#include "table/target_writer.h"
#include "table/writer_target.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;
using storage::ConnectionPool;

// Rows a chunk of a bundle holds at most (the step's chunk_size when smaller).
constexpr size_t kBundleChunkRows = 5000;
// Reads of one chunk whose row count and checksum disagreed (the source changed between
// the two statements: a server whose default isolation is not REPEATABLE READ).
constexpr int kChunkReadTries = 5;
constexpr size_t kMaxListedDiffering = 100;

std::string NewBundleId() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json StepJson(const StepSpec& st) {
  json j = st.params;
  j["name"] = st.name;
  j["type"] = st.type;
  return j;
}

json KeyOrNull(const std::optional<Row>& key) { return key ? KeyToJson(*key) : json(nullptr); }

std::optional<Row> KeyOrNone(const json& j) {
  if (j.is_null()) return std::nullopt;
  try {
    return KeyFromJson(j);
  } catch (const std::invalid_argument& e) {
    throw BundleError(std::string("bundle manifest: a chunk's key is malformed: ") + e.what());
  }
}

// The manifest table's field `name` of type `kind` ("string", "array", ...). Throws
// BundleError.
const json& Field(const json& table, const char* name, json::value_t kind) {
  if (!table.is_object() || !table.contains(name) || table[name].type() != kind) {
    throw BundleError(std::string("bundle manifest: a table lacks its \"") + name + "\"");
  }
  return table[name];
}

// The source's description in the manifest.
RelaySchema SourceSchema(const json& table) {
  try {
    return ParseRelaySchema(Field(table, "schema", json::value_t::string).get<std::string>());
  } catch (const RelayFormatError& e) {
    throw BundleError(std::string("bundle manifest: ") + e.what());
  }
}

// One table exported in one transaction of the source (a consistent snapshot under
// REPEATABLE READ).
json ExportTable(RunContext& ctx, const StepSpec& step, const json& payload, BundleWriter& writer,
                 size_t& sections) {
  Spec spec;
  try {
    spec = ParseSpec(step, /*sync=*/true);
  } catch (const std::exception& e) {
    throw PermanentError(e.what());
  }
  ConnectionPool& src = ctx.Pool(spec.source);
  const TableSchema s = Describe(src, spec, spec.source);
  const TableShape s_full = RelayFullShape(src, spec, s, "describe source");
  Plan plan = MakePlan(spec, s, s);
  const TableShape shape = Preflight(spec, plan, s, s, RelayShapeOf(s_full, plan.src_cols.names()),
                                     RelayShapeOf(s_full, plan.tgt_image.names()));
  const Inner inner = DescribeSubqueryTables(src, spec, spec.source);
  if (!inner.missing.empty()) throw PermanentError(inner.missing);
  const BoundFilter filter{spec.where.sql, FilterValues(spec, payload, s, inner.schemas)};
  const size_t limit = std::min(kBundleChunkRows, static_cast<size_t>(spec.chunk_size));

  json chunks = json::array();
  int64_t rows_total = 0;
  const size_t first_section = sections;
  bool started = false;
  src.Transact(spec.What("export a bundle"), [&](Connection& c) {
    // A retried transaction would append its chunks twice: the file cannot take them back.
    if (started) throw PermanentError(spec.What("the source connection failed during the export; run it again"));
    started = true;
    std::optional<Row> lo;
    for (;;) {
      CheckStop(ctx);
      std::vector<Row> rows;
      std::optional<Row> hi;
      RangeChecksum cs;
      for (int tries = 1;; ++tries) {
        rows = ReadRange(c, spec.table, plan.src_cols, plan.src_key, filter, KeyRange{lo, std::nullopt}, limit,
                         /*for_update=*/false);
        hi = rows.size() < limit ? std::nullopt : std::optional<Row>(Project(rows.back(), plan.sync_key_pos));
        cs = ChecksumRange(c, spec.table, plan.src_cols, plan.src_key, filter, KeyRange{lo, hi});
        if (cs.rows == static_cast<int64_t>(rows.size())) break;
        if (tries == kChunkReadTries) {
          throw PermanentError(spec.What("the source changed under the export (the server's isolation is not "
                                         "REPEATABLE READ?): run it again"));
        }
      }
      RelayChunk chunk{.columns = plan.src_cols.names(), .key_columns = plan.src_key.names(), .lo = lo, .hi = hi,
                       .rows = std::move(rows), .deletes = {}};
      writer.AddSection(EncodeRelayChunk(chunk));
      ++sections;
      rows_total += cs.rows;
      chunks.push_back({{"lo", KeyOrNull(lo)}, {"hi", KeyOrNull(hi)}, {"rows", cs.rows},
                        {"checksum", ChecksumText(cs)}});
      if (!hi) break;
      lo = std::move(hi);
    }
  });
  spdlog::info("BUNDLE_TABLE_EXPORTED step={} table={} source={} rows={} chunks={}", spec.step, spec.table,
               spec.source, rows_total, chunks.size());
  return {{"step", StepJson(step)},
          {"source", spec.source},
          {"target", spec.target},
          {"table", spec.table},
          {"schema", RelaySchemaJson(s, s_full)},
          {"schema_fingerprint", shape.Fingerprint()},
          {"rows", rows_total},
          {"first_section", first_section},
          {"chunks", std::move(chunks)}};
}

// `chunk`'s rows over the plan's source columns, in that order (its keys projected
// likewise). Throws PermanentError when the bundle lacks a column the plan syncs.
RelayChunk ForPlan(const Spec& spec, const Plan& plan, RelayChunk chunk) {
  const std::vector<std::string> want = plan.src_cols.names();
  if (chunk.columns == want && chunk.key_columns == plan.src_key.names()) return chunk;
  std::vector<int> at;
  for (const std::string& n : want) {
    int pos = -1;
    for (size_t i = 0; i < chunk.columns.size(); ++i) {
      if (chunk.columns[i] == n) pos = static_cast<int>(i);
    }
    if (pos < 0) throw PermanentError(spec.What("the bundle lacks column " + n + " that the target's table syncs"));
    at.push_back(pos);
  }
  if (chunk.key_columns != plan.src_key.names()) {
    throw PermanentError(spec.What("the bundle's primary key differs from the target's"));
  }
  RelayChunk out{.columns = want, .key_columns = chunk.key_columns, .lo = chunk.lo, .hi = chunk.hi, .rows = {},
                 .deletes = {}};
  out.rows.reserve(chunk.rows.size());
  for (const Row& r : chunk.rows) out.rows.push_back(Project(r, at));
  return out;
}

// The target half of a bundle's table: its description, plan and filter.
struct TargetPlan {
  TableSchema t;
  Plan plan;
  TableShape shape;
  BoundFilter filter;
};

TargetPlan PlanTarget(RunContext& ctx, const Spec& spec, ConnectionPool& tgt, const json& table) {
  const RelaySchema other = SourceSchema(table);
  TableSchema t = Describe(tgt, spec, spec.target);
  const TableShape t_full = RelayFullShape(tgt, spec, t, "describe target");
  Plan plan = MakePlan(spec, other.schema, t);
  TableShape shape = Preflight(spec, plan, other.schema, t, RelayShapeOf(other.shape, plan.src_cols.names()),
                               RelayShapeOf(t_full, plan.tgt_image.names()));
  BoundFilter filter = RelayTargetFilter(ctx, spec, tgt, t);
  return TargetPlan{std::move(t), std::move(plan), std::move(shape), std::move(filter)};
}

KeyRange ChunkRange(const json& entry) {
  if (!entry.is_object() || !entry.contains("lo") || !entry.contains("hi") || !entry.contains("checksum") ||
      !entry["checksum"].is_string()) {
    throw BundleError("bundle manifest: a chunk entry lacks lo, hi or checksum");
  }
  return KeyRange{KeyOrNone(entry["lo"]), KeyOrNone(entry["hi"])};
}

}  // namespace

json ExportBundle(RunContext& ctx, const BundleExportRequest& request, const std::string& path,
                  const std::string& key) {
  BundleWriter writer(path, key);
  json tables = json::array();
  size_t sections = 0;
  for (const StepSpec& st : request.steps) tables.push_back(ExportTable(ctx, st, request.payload, writer, sections));
  json manifest = {{"bundle_id", NewBundleId()}, {"created", UtcNow()}, {"topic", request.topic},
                   {"payload", request.payload}, {"tables", std::move(tables)}};
  writer.Finish(manifest);
  manifest["bytes"] = writer.bytes_written();
  return manifest;
}

Spec BundleSpec(const json& table, const std::string& target) {
  const json& step = Field(table, "step", json::value_t::object);
  StepSpec st;
  st.params = step;
  st.params.erase("name");
  st.params.erase("type");
  st.name = step.value("name", "");
  st.type = step.value("type", "");
  Spec spec;
  try {
    spec = ParseSpec(st, /*sync=*/true);
  } catch (const std::exception& e) {
    throw BundleError(std::string("bundle manifest: ") + e.what());
  }
  if (!target.empty()) spec.target = target;
  return spec;
}

BundleApplied ImportBundleTable(RunContext& ctx, const Spec& spec, BundleReader& reader, const json& table) {
  ConnectionPool& tgt = ctx.Pool(spec.target);
  const std::string& step_code = ctx.step_code();
  ChunkTable chunks;
  chunks.Prepare(tgt, spec);
  TargetPlan p = PlanTarget(ctx, spec, tgt, table);
  const json& entries = Field(table, "chunks", json::value_t::array);
  const size_t first = Field(table, "first_section", json::value_t::number_unsigned).get<size_t>();
  if (first + entries.size() > reader.sections()) throw BundleError("bundle manifest: a table's chunks run past its sections");

  TakeOver(tgt, spec, step_code, ctx.attempt(), ctx.clock());
  const Resume resume =
      tgt.Transact(spec.What("read checkpoint"), [&](Connection& c) { return ReadResume(c, spec, step_code); });
  TargetWriter::Commits commits;
  commits.packet = tgt.Run(spec.What("max_allowed_packet"), [](Connection& c) { return MaxAllowedPacket(c); });
  commits.resumed_after = resume.last_chunk;
  std::mutex mu;
  commits.ctx_mu = &mu;
  TargetWriter writer(ctx, tgt, spec, p.plan, p.filter, commits);
  WriterTarget side(tgt, spec, p.plan, p.filter, writer, ctx.clock());

  for (size_t k = 0; k < entries.size(); ++k) {
    CheckStop(ctx);
    const KeyRange range = ChunkRange(entries[k]);
    if (ChecksumText(side.Checksum(range)) == entries[k]["checksum"].get<std::string>()) {
      side.RecordEqual(range);
      continue;
    }
    RelayChunk chunk;
    try {
      chunk = DecodeRelayChunk(reader.Section(first + k));
    } catch (const RelayFormatError& e) {
      throw BundleError(std::string("bundle section ") + std::to_string(first + k) + ": " + e.what());
    }
    if (chunk.lo != range.lo || chunk.hi != range.hi) {
      throw BundleError("bundle section " + std::to_string(first + k) + " does not cover its manifest range");
    }
    chunk = ForPlan(spec, p.plan, std::move(chunk));
    if (spec.delete_missing) {
      std::unordered_set<std::string> keep;
      for (const Row& r : chunk.rows) keep.insert(EncodeKey(Project(r, p.plan.sync_key_pos)));
      for (Row& k : writer.Keys(range)) {
        if (!keep.contains(EncodeKey(k))) chunk.deletes.push_back(std::move(k));
      }
    }
    side.Apply(chunk);
  }
  side.Finish();

  const Counts& c = side.counts;
  json out = CountsJson(spec, c);
  out["chunk_records"] = resume.records + side.records;
  out["schema_fingerprint"] = p.shape.Fingerprint();
  if (!p.plan.not_in_target.empty()) out["source_columns_not_in_target"] = p.plan.not_in_target;
  json ref = ChunkUndoRef(spec, step_code, resume.records + side.records, p.shape);
  spdlog::info("BUNDLE_TABLE_IMPORTED step={} code={} table={} target={} inserted={} updated={} chunks_equal={}",
               spec.step, step_code, spec.table, spec.target, c.inserted, c.updated, c.chunks_equal);
  return {std::move(out), std::move(ref)};
}

json BundleCheck::ToJson() const {
  return {{"table", table},     {"target", target},
          {"bundle_rows", bundle_rows}, {"target_rows", target_rows},
          {"chunks", chunks},   {"chunks_differing", chunks_differing},
          {"differing", differing}};
}

BundleCheck VerifyBundleTable(RunContext& ctx, const Spec& spec, const json& table) {
  ConnectionPool& tgt = ctx.Pool(spec.target);
  const TargetPlan p = PlanTarget(ctx, spec, tgt, table);
  BundleCheck check;
  check.table = spec.table;
  check.target = spec.target;
  for (const json& entry : Field(table, "chunks", json::value_t::array)) {
    CheckStop(ctx);
    const KeyRange range = ChunkRange(entry);
    const RangeChecksum cs = tgt.Run(spec.What("checksum"), [&](Connection& c) {
      return ChecksumRange(c, spec.table, p.plan.tgt_cols, p.plan.tgt_key, p.filter, range);
    });
    ++check.chunks;
    check.bundle_rows += entry.value("rows", int64_t{0});
    check.target_rows += cs.rows;
    if (ChecksumText(cs) != entry["checksum"].get<std::string>()) {
      ++check.chunks_differing;
      if (check.differing.size() < kMaxListedDiffering) {
        check.differing.push_back({{"lo", entry["lo"]}, {"hi", entry["hi"]}});
      }
    }
  }
  return check;
}

}  // namespace dsync::table
