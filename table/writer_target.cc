#include "table/writer_target.h"

#include <chrono>

namespace dsync::table {
namespace {

constexpr std::chrono::milliseconds kWriterTargetCheckpointEvery{2000};

}  // namespace

WriterTarget::WriterTarget(storage::ConnectionPool& pool, const Spec& spec, const Plan& plan,
                           const BoundFilter& filter, TargetWriter& writer, Clock& clock)
    : DbTargetReads(pool, spec.table, plan.tgt_cols, plan.tgt_key, filter),
      spec_(spec),
      plan_(plan),
      writer_(writer),
      clock_(clock),
      last_record_(clock.Now()) {}

int64_t WriterTarget::Apply(const RelayChunk& chunk) {
  if (chunk.columns != plan_.src_cols.names() || chunk.key_columns != plan_.src_key.names()) {
    throw PermanentError(spec_.What("a relayed chunk's columns are not the step's (the tables changed?)"));
  }
  pending_equal_.reset();  // this chunk's record checkpoints past it
  ChunkWork w;
  w.range = {chunk.lo, chunk.hi};
  w.rows = chunk.rows;
  w.delete_keys = chunk.deletes;
  w.rows_read = static_cast<int64_t>(chunk.rows.size());
  return Commit(std::move(w));
}

void WriterTarget::RecordEqual(const KeyRange& range) {
  pending_equal_ = range;
  ++counts.chunks;
  ++counts.chunks_equal;
  if (clock_.Now() - last_record_ >= kWriterTargetCheckpointEvery) FlushEqual();
}

void WriterTarget::Finish() { FlushEqual(); }

int64_t WriterTarget::Commit(ChunkWork w) {
  try {
    const Counts delta = writer_.Commit(w);
    ++records;
    last_record_ = clock_.Now();
    if (delta.inserted + delta.updated + delta.deleted > 0) ++counts.chunks_written;
    counts += delta;
    ++counts.chunks;
    counts.rows += w.rows_read;
    counts.rows_fetched += static_cast<int64_t>(w.rows.size());
    return delta.inserted + delta.updated + delta.deleted;
  } catch (const ChunkTooBig& e) {
    if (w.rows.size() < 2) throw PermanentError(e.what());
    const size_t mid = w.rows.size() / 2;
    ChunkWork first, second;
    first.range = {w.range.lo, Project(w.rows[mid - 1], plan_.sync_key_pos)};
    first.rows.assign(w.rows.begin(), w.rows.begin() + static_cast<std::ptrdiff_t>(mid));
    first.delete_keys = std::move(w.delete_keys);  // all in the first: applied before any checkpoint inside
    first.rows_read = static_cast<int64_t>(first.rows.size());
    second.range = {first.range.hi, w.range.hi};
    second.rows.assign(w.rows.begin() + static_cast<std::ptrdiff_t>(mid), w.rows.end());
    second.rows_read = static_cast<int64_t>(second.rows.size());
    return Commit(std::move(first)) + Commit(std::move(second));
  }
}

void WriterTarget::FlushEqual() {
  if (!pending_equal_) return;
  ChunkWork w;
  w.range = *pending_equal_;
  w.equal = true;
  writer_.Commit(w);
  ++records;
  pending_equal_.reset();
  last_record_ = clock_.Now();
}

nlohmann::json CountsJson(const Spec& spec, const Counts& c) {
  nlohmann::json out = {{"rows", c.rows},     {"inserted", c.inserted},         {"updated", c.updated},
                        {"unchanged", c.unchanged}, {"chunks", c.chunks}, {"chunks_equal", c.chunks_equal},
                        {"chunks_written", c.chunks_written}};
  if (spec.delete_missing) out["deleted"] = c.deleted;
  return out;
}

nlohmann::json ChunkUndoRef(const Spec& spec, const std::string& step_code, int64_t chunks, const TableShape& shape) {
  return {{"format", 2},
          {"undo", "dsync_sync_chunk"},
          {"target", spec.target},
          {"table", spec.table},
          {"step_code", step_code},
          {"chunks", chunks},
          {"schema_fingerprint", shape.Fingerprint()},
          {"schema", shape.ToJson()}};
}

}  // namespace dsync::table
