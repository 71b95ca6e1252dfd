#include "table/chunk_table.h"

#include "table/chunks.h"
#include "table/row_io.h"
#include "table/run_context.h"
#include "storage/lock_eviction.h"

namespace dsync::table {
namespace {

using nlohmann::json;
using storage::Connection;

// The chunk table on a target datasource. Created on first use.
constexpr const char* kCreateChunkTableSql = R"(
CREATE TABLE IF NOT EXISTS dsync_sync_chunk (
  step_code      VARCHAR(128) NOT NULL COMMENT 'idempotency key (distribute_event_step.code)',
  chunk_no       INT          NOT NULL COMMENT '-1: the run lock; 0: the step (its lock, compensated mark); 1, 2, ...: chunks in key order',
  step_name      VARCHAR(64)  NOT NULL,
  table_name     VARCHAR(64)  NOT NULL,
  attempt        INT          NOT NULL DEFAULT 0 COMMENT 'claim attempt of the run that committed the chunk',
  lo_key         LONGTEXT     NULL COMMENT 'JSON key cells, exclusive lower end; NULL: the start',
  hi_key         LONGTEXT     NULL COMMENT 'JSON key cells, inclusive upper end (the checkpoint); NULL: the end. Row 0: the lanes'' split keys',
  before_image   LONGTEXT     NULL COMMENT 'JSON before-image of the rows the chunk changed; NULL: none',
  rows_read      BIGINT       NOT NULL DEFAULT 0,
  rows_written   BIGINT       NOT NULL DEFAULT 0,
  created_at     DATETIME(3)  NOT NULL,
  compensated_at DATETIME(3)  NULL,
  PRIMARY KEY (step_code, chunk_no),
  KEY idx_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
  COMMENT='dsync: checkpoints and before-images of table_sync chunks')";

// The step's row 0: taken first by every chunk transaction and compensation, so runs
// of one step serialise on it.   params: step_code, step_name, table_name
constexpr const char* kLockStepSql = R"(
INSERT INTO dsync_sync_chunk (step_code, chunk_no, step_name, table_name, created_at)
VALUES (?, 0, ?, ?, NOW(3))
ON DUPLICATE KEY UPDATE step_code = step_code)";

// The step's run row (-1): a chunk transaction holds it shared from its start, a
// takeover exclusively, so a takeover waits for the chunk transactions of the runs it
// supersedes (and evicts one that a frozen node holds open: TakeOver), while the lanes
// of one run, each holding it shared, do not wait for each other.   params: step_code,
// step_name, table_name / step_code
constexpr const char* kLockRunSql = R"(
INSERT INTO dsync_sync_chunk (step_code, chunk_no, step_name, table_name, created_at)
VALUES (?, -1, ?, ?, NOW(3))
ON DUPLICATE KEY UPDATE step_code = step_code)";
constexpr const char* kShareRunSql = R"(
SELECT 1 FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = -1 LOCK IN SHARE MODE)";

// The step's fencing token (row 0's attempt): the highest claim attempt of the event
// that has run the step on this target. A run raises it to its own attempt before its
// first write; a chunk or compensation transaction of an older attempt then finds it
// higher and rolls back (saga/steps/table_steps.h "Fencing").   params: step_code
constexpr const char* kReadFenceSql = R"(
SELECT attempt FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = 0 FOR UPDATE)";

// Raises the token to the caller's attempt.   params: attempt, step_code, attempt
constexpr const char* kRaiseFenceSql = R"(
UPDATE dsync_sync_chunk SET attempt = ? WHERE step_code = ? AND chunk_no = 0 AND attempt < ?)";

// What earlier runs committed.   params: step_code
constexpr const char* kStepStateSql = R"(
SELECT COALESCE(MAX(chunk_no), 0), COUNT(*), COALESCE(SUM(compensated_at IS NOT NULL), 0),
       COALESCE(SUM(rows_written), 0)
FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0)";

// The step's row 0: its compensated mark, its lanes' split keys (a JSON array of keys;
// NULL: one lane).   params: step_code
constexpr const char* kStepRowSql = R"(
SELECT compensated_at IS NOT NULL, hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = 0)";

// The newest chunk record (under the step lock: its number + 1 is the next chunk's).
//   params: step_code
constexpr const char* kNewestChunkSql = R"(
SELECT chunk_no, attempt FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0
ORDER BY chunk_no DESC LIMIT 1 FOR UPDATE)";

// Records the lanes' split keys in row 0, once (at the step's first run).
//   params: splits, step_code
constexpr const char* kRecordLanesSql = R"(
UPDATE dsync_sync_chunk SET hi_key = ? WHERE step_code = ? AND chunk_no = 0 AND hi_key IS NULL)";

// What row 0 holds then, under the step lock.   params: step_code
constexpr const char* kLockedLanesSql = R"(
SELECT hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = 0 FOR UPDATE)";

// Every chunk's upper end, oldest first (each lane's checkpoint).   params: step_code
constexpr const char* kChunkEndsSql = R"(
SELECT hi_key IS NULL, hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0 ORDER BY chunk_no)";

// A chunk's upper end.   params: step_code, chunk_no
constexpr const char* kChunkHiSql = R"(
SELECT hi_key IS NULL, hi_key FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no = ?)";

// A committed chunk.   params: step_code, chunk_no, step_name, table_name, attempt, lo_key,
// hi_key, before_image, rows_read, rows_written
constexpr const char* kInsertChunkSql = R"(
INSERT INTO dsync_sync_chunk (step_code, chunk_no, step_name, table_name, attempt, lo_key, hi_key,
  before_image, rows_read, rows_written, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(3)))";

// A forward run after a full compensation starts over.   params: step_code
// (Row 0 stays, its fencing token raised by this run; its marks are cleared.)
constexpr const char* kForgetChunksSql = "DELETE FROM dsync_sync_chunk WHERE step_code = ? AND chunk_no > 0";
constexpr const char* kForgetStepSql = R"(
UPDATE dsync_sync_chunk SET compensated_at = NULL, hi_key = NULL WHERE step_code = ? AND chunk_no = 0)";

// Chunks left to restore, last first.   params: step_code
constexpr const char* kChunksToRestoreSql = R"(
SELECT chunk_no FROM dsync_sync_chunk
WHERE step_code = ? AND chunk_no > 0 AND compensated_at IS NULL AND before_image IS NOT NULL
ORDER BY chunk_no DESC)";

// One chunk's image, locked.   params: step_code, chunk_no
constexpr const char* kReadChunkImageSql = R"(
SELECT before_image, compensated_at IS NOT NULL FROM dsync_sync_chunk
WHERE step_code = ? AND chunk_no = ? FOR UPDATE)";

// The same without the lock (the conflict check's first pass).   params: step_code, chunk_no
constexpr const char* kPeekChunkImageSql = R"(
SELECT before_image, compensated_at IS NOT NULL FROM dsync_sync_chunk
WHERE step_code = ? AND chunk_no = ?)";

// params: step_code, chunk_no
constexpr const char* kMarkChunkCompensatedSql = R"(
UPDATE dsync_sync_chunk SET compensated_at = NOW(3) WHERE step_code = ? AND chunk_no = ?)";

// The whole step (row 0 and checkpoint-only chunks) once every chunk is restored.
//   params: step_code
constexpr const char* kMarkStepCompensatedSql = R"(
UPDATE dsync_sync_chunk SET compensated_at = NOW(3) WHERE step_code = ? AND compensated_at IS NULL)";

// Best-effort retention.   params: days
constexpr const char* kPurgeChunksSql = R"(
DELETE FROM dsync_sync_chunk WHERE created_at < NOW(3) - INTERVAL ? DAY LIMIT 1000)";

std::string NullableJson(const std::optional<Row>& key) {
  return key ? KeyToJson(*key).dump() : std::string();
}

}  // namespace

ChunkTable::ChunkTable()
    : TargetTable(kChunkTable, kCreateChunkTableSql, kPurgeChunksSql, "TABLE_SYNC_CHUNK_PURGE_FAILED") {}

void LockStep(Connection& c, const std::string& step_code, const std::string& step_name,
              const std::string& table_name) {
  c.Execute(kLockStepSql, step_code, step_name, table_name);
}

void ShareRun(Connection& c, const std::string& step_code) { (void)c.QueryInt(kShareRunSql, step_code); }

void CheckFence(Connection& c, const Spec& spec, const std::string& step_code, int attempt) {
  const int64_t token = c.QueryInt(kReadFenceSql, step_code).value_or(0);
  if (token > attempt) {
    throw Interrupted("step '" + spec.step + "' was taken over by a later claim of the event (attempt " +
                      std::to_string(token) + ", this run's " + std::to_string(attempt) +
                      "); target changes rolled back");
  }
}

void TakeOver(storage::ConnectionPool& tgt, const Spec& spec, const std::string& step_code, int attempt,
              Clock& clock) {
  tgt.Transact(spec.What("fence step"), [&](Connection& c) {
    // Only a run this claim supersedes can hold the step row now: a node frozen inside
    // one of its chunk transactions would hold it for as long as it stays frozen.
    storage::WhileEvictingStaleLocks(tgt, c, clock, kEvictStaleRunAfter, spec.What("fence step"), [&] {
      c.Execute(kLockRunSql, step_code, spec.step, spec.table);
      LockStep(c, step_code, spec.step, spec.table);
    });
    CheckFence(c, spec, step_code, attempt);
    c.Execute(kRaiseFenceSql, attempt, step_code, attempt);
  });
}

StepState ReadStepState(Connection& c, const std::string& step_code) {
  StepState s;
  auto rs = c.Query(kStepStateSql, step_code);
  if (rs->next()) {
    s.last_chunk = rs->getInt64(1);
    s.records = rs->getInt64(2);
    s.compensated = rs->getInt64(3);
    s.rows_written = rs->getInt64(4);
  }
  return s;
}

StepRow ReadStepRow(Connection& c, const std::string& step_code) {
  StepRow r;
  auto rs = c.Query(kStepRowSql, step_code);
  if (rs->next()) {
    r.compensated = rs->getBoolean(1);
    if (!rs->isNull(2)) r.lanes = std::string(rs->getString(2));
  }
  return r;
}

std::optional<std::string> RecordLanes(Connection& c, const std::string& step_code, const std::string& splits) {
  c.Execute(kRecordLanesSql, splits, step_code);
  return c.QueryString(kLockedLanesSql, step_code);
}

std::vector<ChunkEnd> ReadChunkEnds(Connection& c, const std::string& step_code) {
  std::vector<ChunkEnd> out;
  auto rs = c.Query(kChunkEndsSql, step_code);
  while (rs->next()) {
    if (rs->getBoolean(1)) out.emplace_back(std::nullopt);
    else out.emplace_back(std::string(rs->getString(2)));
  }
  return out;
}

std::optional<ChunkEnd> ReadChunkEnd(Connection& c, const std::string& step_code, int64_t chunk_no) {
  auto rs = c.Query(kChunkHiSql, step_code, chunk_no);
  if (!rs->next()) return std::nullopt;
  if (rs->getBoolean(1)) return ChunkEnd();
  return ChunkEnd(std::string(rs->getString(2)));
}

NewestChunk LockNewestChunk(Connection& c, const std::string& step_code) {
  NewestChunk n;
  auto rs = c.Query(kNewestChunkSql, step_code);
  if (rs->next()) {
    n.chunk_no = rs->getInt64(1);
    n.attempt = rs->getInt64(2);
  }
  return n;
}

void InsertChunk(Connection& c, const std::string& step_code, const Spec& spec, const ChunkRecord& r) {
  c.Execute(kInsertChunkSql, step_code, static_cast<long long>(r.chunk_no), spec.step, spec.table, r.attempt,
            r.lo ? std::optional<std::string>(NullableJson(r.lo)) : std::nullopt,
            r.hi ? std::optional<std::string>(NullableJson(r.hi)) : std::nullopt, r.before_image,
            static_cast<long long>(r.rows_read), static_cast<long long>(r.rows_written));
}

void ForgetChunks(Connection& c, const std::string& step_code) {
  c.Execute(kForgetChunksSql, step_code);
  c.Execute(kForgetStepSql, step_code);
}

std::vector<int> ChunksToRestore(Connection& c, const std::string& step_code) {
  std::vector<int> todo;
  auto rs = c.Query(kChunksToRestoreSql, step_code);
  while (rs->next()) todo.push_back(static_cast<int>(rs->getInt64(1)));
  return todo;
}

std::optional<std::string> ReadChunkImage(Connection& c, const std::string& step_code, int chunk_no, bool lock) {
  auto q = c.Query(lock ? kReadChunkImageSql : kPeekChunkImageSql, step_code, chunk_no);
  if (!q->next() || q->getBoolean(2) || q->isNull(1)) return std::nullopt;
  return std::string(q->getString(1));
}

void MarkChunkCompensated(Connection& c, const std::string& step_code, int chunk_no) {
  c.Execute(kMarkChunkCompensatedSql, step_code, chunk_no);
}

void MarkStepCompensated(Connection& c, const std::string& step_code) {
  c.Execute(kMarkStepCompensatedSql, step_code);
}

std::string ChunkRecordText(const Image& image, const json& after) {
  std::string out;
  size_t bytes = 256;
  for (const Row& r : image.restore) bytes += CellBytes(r) + 4 * r.size();
  for (const Row& r : image.remove) bytes += CellBytes(r) + 4 * r.size();
  out.reserve(bytes + 12 * after.size());
  auto text = [&](const std::string& s) { out += json(s).dump(); };  // escaped, UTF-8 checked
  auto field = [&](const char* name) {  // ,"name":
    out += ",\"";
    out += name;
    out += "\":";
  };
  auto names = [&](const char* name, const std::vector<std::string>& v) {
    field(name);
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ',';
      text(v[i]);
    }
    out += ']';
  };
  auto rows = [&](const char* name, const std::vector<Row>& v) {
    field(name);
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      out += i > 0 ? ",[" : "[";
      for (size_t c = 0; c < v[i].size(); ++c) {
        if (c > 0) out += ',';
        if (v[i][c]) text(*v[i][c]);
        else out += "null";
      }
      out += ']';
    }
    out += ']';
  };
  out += "{\"format\":1,\"table\":";
  text(image.table);
  names("columns", image.columns);
  names("key", image.key);
  names("binary", image.binary);
  rows("restore", image.restore);
  rows("remove", image.remove);
  field("after");
  out += after.dump();
  out += '}';
  return out;
}

}  // namespace dsync::table
