#include "table/relay_table.h"

#include <algorithm>

#include "table/bundle_file.h"
#include "events/status.h"

namespace dsync::table {
namespace {

using storage::Connection;

// (step_code, event_code, step_name, table_name, source_ds, target_ds, window_bytes)
constexpr const char* kRelayOpenSql = R"(
INSERT INTO dsync_relay (step_code, event_code, step_name, table_name, source_ds, target_ds, window_bytes)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE step_code = step_code)";

// (step_code)
constexpr const char* kRelayReadSql = R"(
SELECT epoch, target_attempt, source_attempt, state, error, target_schema, source_schema, window_bytes,
       bytes_in_flight, peak_bytes, bytes_relayed, chunks_relayed, rows_relayed
FROM dsync_relay WHERE step_code = ?)";

// (step_code): the fence, under the row lock every write of a half takes first.
constexpr const char* kRelayLockSql = R"(
SELECT epoch, target_attempt, source_attempt, window_bytes, bytes_in_flight, peak_bytes, chunks_relayed
FROM dsync_relay WHERE step_code = ? FOR UPDATE)";

// (attempt, node, epoch, step_code)
constexpr const char* kRelayTakeTargetSql = R"(
UPDATE dsync_relay SET target_attempt = ?, target_node = ?, epoch = ?, state = 'OPEN', error = NULL,
  bytes_in_flight = 0, source_attempt = 0, source_node = NULL, source_schema = NULL, target_schema = NULL,
  updated_at = NOW(3)
WHERE step_code = ?)";

// (step_code, epoch): what earlier epochs left
constexpr const char* kRelayDropOldRangesSql = "DELETE FROM dsync_relay_range WHERE step_code = ? AND epoch < ?";
constexpr const char* kRelayDropOldChunksSql = "DELETE FROM dsync_relay_chunk WHERE step_code = ? AND epoch < ?";

// (attempt, node, step_code)
constexpr const char* kRelayTakeSourceSql = R"(
UPDATE dsync_relay SET source_attempt = ?, source_node = ?, updated_at = NOW(3) WHERE step_code = ?)";

// (schema_json, step_code)
constexpr const char* kRelayTargetSchemaSql =
    "UPDATE dsync_relay SET target_schema = ?, updated_at = NOW(3) WHERE step_code = ?";
constexpr const char* kRelaySourceSchemaSql =
    "UPDATE dsync_relay SET source_schema = ?, updated_at = NOW(3) WHERE step_code = ?";

// Rows of (step_code, epoch, range_no, lo_key, hi_key, target_rows, target_checksum, state)
constexpr const char* kRelayInsertRangesHead = R"(
INSERT INTO dsync_relay_range (step_code, epoch, range_no, lo_key, hi_key, target_rows, target_checksum, state)
VALUES )";
constexpr const char* kRelayRangeTuple = "(?, ?, ?, ?, ?, ?, ?, ?)";

// (step_code, epoch, after_range_no, limit)
constexpr const char* kRelayReadRangesSql = R"(
SELECT range_no, lo_key, hi_key, target_rows, target_checksum, state, sent_hi
FROM dsync_relay_range WHERE step_code = ? AND epoch = ? AND range_no > ?
ORDER BY range_no LIMIT ?)";

// (state, sent_hi or NULL: unchanged, step_code, epoch, range_no)
constexpr const char* kRelaySetRangeStateSql = R"(
UPDATE dsync_relay_range SET state = ?, sent_hi = COALESCE(?, sent_hi)
WHERE step_code = ? AND epoch = ? AND range_no = ?)";

// (hashes, step_code, epoch, range_no)
constexpr const char* kRelayPublishHashesSql = R"(
UPDATE dsync_relay_range SET target_hashes = ?, state = 'HASHES'
WHERE step_code = ? AND epoch = ? AND range_no = ?)";

// (step_code, epoch, range_no)
constexpr const char* kRelayReadHashesSql = R"(
SELECT target_hashes FROM dsync_relay_range WHERE step_code = ? AND epoch = ? AND range_no = ?)";

// (step_code, epoch, range_no)
constexpr const char* kRelayDropRangesThroughSql =
    "DELETE FROM dsync_relay_range WHERE step_code = ? AND epoch = ? AND range_no <= ?";

// (step_code, epoch, chunk_no, range_no, last_of_range, row_count, bytes, data)
constexpr const char* kRelayInsertChunkSql = R"(
INSERT INTO dsync_relay_chunk (step_code, epoch, chunk_no, range_no, last_of_range, row_count, bytes, data)
VALUES (?, ?, ?, ?, ?, ?, ?, ?))";

// (bytes_in_flight, peak_bytes, bytes, chunks_relayed, rows, step_code): values computed
// under the row lock, so the statement does not depend on the order of assignments.
constexpr const char* kRelayChunkAddedSql = R"(
UPDATE dsync_relay SET bytes_in_flight = ?, peak_bytes = ?, bytes_relayed = bytes_relayed + ?,
  chunks_relayed = ?, rows_relayed = rows_relayed + ?, updated_at = NOW(3)
WHERE step_code = ?)";

// (step_code, epoch, after_chunk_no, limit)
constexpr const char* kRelayReadChunksSql = R"(
SELECT chunk_no, range_no, last_of_range, row_count, data
FROM dsync_relay_chunk WHERE step_code = ? AND epoch = ? AND chunk_no > ?
ORDER BY chunk_no LIMIT ?)";

// (step_code, epoch, chunk_no)
constexpr const char* kRelayChunkBytesSql =
    "SELECT bytes FROM dsync_relay_chunk WHERE step_code = ? AND epoch = ? AND chunk_no = ? FOR UPDATE";
constexpr const char* kRelayDeleteChunkSql =
    "DELETE FROM dsync_relay_chunk WHERE step_code = ? AND epoch = ? AND chunk_no = ?";

// (bytes_in_flight, step_code)
constexpr const char* kRelayInFlightSql =
    "UPDATE dsync_relay SET bytes_in_flight = ?, updated_at = NOW(3) WHERE step_code = ?";

// (state, error, step_code)
constexpr const char* kRelayNoBytesInFlightSql = "UPDATE dsync_relay SET bytes_in_flight = 0 WHERE step_code = ?";
constexpr const char* kRelaySetStateSql = "UPDATE dsync_relay SET state = ?, error = ?, updated_at = NOW(3) WHERE step_code = ?";
// (step_code): the source half's word never overwrites the target half's DONE or FAILED.
constexpr const char* kRelaySourceDoneSql =
    "UPDATE dsync_relay SET state = 'SOURCE_DONE', updated_at = NOW(3) WHERE step_code = ? AND state = 'OPEN'";

// (step_code)
constexpr const char* kRelayDropRelaySql = "DELETE FROM dsync_relay WHERE step_code = ?";
// Relays untouched past the bound whose event is not in flight (retention).
//   params: older_than (µs), limit
constexpr const char* kRelayStaleSql = R"(
SELECT r.step_code FROM dsync_relay r
WHERE r.updated_at < NOW(3) - INTERVAL ? MICROSECOND
  AND NOT EXISTS (SELECT 1 FROM distribute_event e WHERE e.code = r.event_code
                  AND e.status NOT IN )" DSYNC_SQL_TERMINAL R"()
ORDER BY r.updated_at LIMIT ?)";
constexpr const char* kRelayDropRangesSql = "DELETE FROM dsync_relay_range WHERE step_code = ?";
constexpr const char* kRelayDropChunksSql = "DELETE FROM dsync_relay_chunk WHERE step_code = ?";

struct RelayLocked {
  int epoch = 0;
  int target_attempt = 0;
  int source_attempt = 0;
  int64_t window_bytes = 0;
  int64_t bytes_in_flight = 0;
  int64_t peak_bytes = 0;
  int chunks_relayed = 0;
};

// The step's row, locked; throws RelayLost when it is gone.
RelayLocked LockRelay(Connection& c, const std::string& step_code) {
  auto rs = c.Query(kRelayLockSql, step_code);
  if (!rs->next()) throw RelayLost("relay of step '" + step_code + "': no relay row (dropped)");
  return {rs->getInt(1), rs->getInt(2), rs->getInt(3), rs->getInt64(4), rs->getInt64(5), rs->getInt64(6),
          rs->getInt(7)};
}

// Locks the step's row and checks that `h` still holds its side in the current epoch.
RelayLocked FenceRelay(Connection& c, const RelayHalf& h) {
  RelayLocked l = LockRelay(c, h.step_code);
  const int newest = h.side == RelaySide::kTarget ? l.target_attempt : l.source_attempt;
  if (newest != h.attempt) {
    throw RelayLost("relay of step '" + h.step_code + "': the " + RelaySideName(h.side) + " half of attempt " +
                    std::to_string(h.attempt) + " was taken over by attempt " + std::to_string(newest));
  }
  if (l.epoch != h.epoch) {
    throw RelayLost("relay of step '" + h.step_code + "': epoch " + std::to_string(h.epoch) +
                    " ended (the target half started epoch " + std::to_string(l.epoch) + ")");
  }
  return l;
}

std::optional<std::string> RelayOptString(const storage::ResultSet& rs, int col) {
  if (rs.isNull(col)) return std::nullopt;
  return rs.getString(col);
}

}  // namespace

const char* RelaySideName(RelaySide side) { return side == RelaySide::kTarget ? "target" : "source"; }

void RelayTable::Open(const RelaySpec& spec) {
  pool_.Run("relay open", [&](Connection& c) {
    c.Execute(kRelayOpenSql, spec.step_code, spec.event_code, spec.step_name, spec.table, spec.source, spec.target,
              spec.window_bytes);
  });
}

std::optional<RelayStatus> RelayTable::Read(const std::string& step_code) {
  return pool_.Run("relay read", [&](Connection& c) -> std::optional<RelayStatus> {
    auto rs = c.Query(kRelayReadSql, step_code);
    if (!rs->next()) return std::nullopt;
    RelayStatus s;
    s.epoch = rs->getInt(1);
    s.target_attempt = rs->getInt(2);
    s.source_attempt = rs->getInt(3);
    s.state = rs->getString(4);
    s.error = RelayOptString(*rs, 5);
    s.target_schema = RelayOptString(*rs, 6);
    s.source_schema = RelayOptString(*rs, 7);
    s.window_bytes = rs->getInt64(8);
    s.bytes_in_flight = rs->getInt64(9);
    s.peak_bytes = rs->getInt64(10);
    s.bytes_relayed = rs->getInt64(11);
    s.chunks_relayed = rs->getInt(12);
    s.rows_relayed = rs->getInt64(13);
    return s;
  });
}

RelayHalf RelayTable::TakeTarget(const std::string& step_code, int attempt, const std::string& node) {
  return pool_.Transact("relay take target", [&](Connection& c) {
    const RelayLocked l = LockRelay(c, step_code);
    if (l.target_attempt > attempt) {
      throw RelayLost("relay of step '" + step_code + "': the target half of attempt " + std::to_string(attempt) +
                      " comes after attempt " + std::to_string(l.target_attempt) + " took it");
    }
    const RelayHalf h{step_code, RelaySide::kTarget, attempt, l.epoch + 1};
    c.Execute(kRelayTakeTargetSql, attempt, node, h.epoch, step_code);
    c.Execute(kRelayDropOldRangesSql, step_code, h.epoch);
    c.Execute(kRelayDropOldChunksSql, step_code, h.epoch);
    return h;
  });
}

RelayHalf RelayTable::TakeSource(const std::string& step_code, int epoch, int attempt, const std::string& node) {
  return pool_.Transact("relay take source", [&](Connection& c) {
    const RelayLocked l = LockRelay(c, step_code);
    if (l.epoch != epoch) {
      throw RelayLost("relay of step '" + step_code + "': epoch " + std::to_string(epoch) +
                      " ended (the target half started epoch " + std::to_string(l.epoch) + ")");
    }
    if (l.source_attempt > attempt) {
      throw RelayLost("relay of step '" + step_code + "': the source half of attempt " + std::to_string(attempt) +
                      " comes after attempt " + std::to_string(l.source_attempt) + " took it");
    }
    c.Execute(kRelayTakeSourceSql, attempt, node, step_code);
    return RelayHalf{step_code, RelaySide::kSource, attempt, epoch};
  });
}

void RelayTable::PublishSchema(const RelayHalf& h, const std::string& schema_json) {
  pool_.Transact("relay publish schema", [&](Connection& c) {
    FenceRelay(c, h);
    c.Execute(h.side == RelaySide::kTarget ? kRelayTargetSchemaSql : kRelaySourceSchemaSql, schema_json, h.step_code);
  });
}

void RelayTable::PublishRanges(const RelayHalf& target, const std::vector<RelayRange>& ranges) {
  if (ranges.empty()) return;
  pool_.Transact("relay publish ranges", [&](Connection& c) {
    FenceRelay(c, target);
    constexpr size_t kPerStatement = 500;
    for (size_t begin = 0; begin < ranges.size(); begin += kPerStatement) {
      const size_t end = std::min(ranges.size(), begin + kPerStatement);
      std::string sql = kRelayInsertRangesHead;
      std::vector<storage::Value> values;
      for (size_t i = begin; i < end; ++i) {
        const RelayRange& r = ranges[i];
        sql += i == begin ? kRelayRangeTuple : std::string(", ") + kRelayRangeTuple;
        values.emplace_back(target.step_code);
        values.emplace_back(int64_t{target.epoch});
        values.emplace_back(int64_t{r.range_no});
        values.emplace_back(r.lo_key ? storage::Value(*r.lo_key) : storage::Value());
        values.emplace_back(r.hi_key ? storage::Value(*r.hi_key) : storage::Value());
        values.emplace_back(r.target_rows);
        values.emplace_back(r.target_checksum);
        values.emplace_back(r.state);
      }
      c.Execute(sql, storage::Values(values));
    }
  });
}

std::vector<RelayRange> RelayTable::ReadRanges(const RelayHalf& h, int after_range_no, int limit) {
  return pool_.Run("relay read ranges", [&](Connection& c) {
    std::vector<RelayRange> out;
    auto rs = c.Query(kRelayReadRangesSql, h.step_code, h.epoch, after_range_no, limit);
    while (rs->next()) {
      RelayRange r;
      r.range_no = rs->getInt(1);
      r.lo_key = RelayOptString(*rs, 2);
      r.hi_key = RelayOptString(*rs, 3);
      r.target_rows = rs->getInt64(4);
      r.target_checksum = rs->getString(5);
      r.state = rs->getString(6);
      r.sent_hi = RelayOptString(*rs, 7);
      out.push_back(std::move(r));
    }
    return out;
  });
}

void RelayTable::SetRangeState(const RelayHalf& h, int range_no, std::string_view state,
                               const std::optional<std::string>& sent_hi) {
  pool_.Transact("relay range state", [&](Connection& c) {
    FenceRelay(c, h);
    c.Execute(kRelaySetRangeStateSql, state, sent_hi, h.step_code, h.epoch, range_no);
  });
}

void RelayTable::PublishHashes(const RelayHalf& target, int range_no, const std::string& hashes) {
  pool_.Transact("relay publish hashes", [&](Connection& c) {
    FenceRelay(c, target);
    c.Execute(kRelayPublishHashesSql, hashes, target.step_code, target.epoch, range_no);
  });
}

std::optional<std::string> RelayTable::ReadHashes(const RelayHalf& h, int range_no) {
  return pool_.Run("relay read hashes", [&](Connection& c) -> std::optional<std::string> {
    auto rs = c.Query(kRelayReadHashesSql, h.step_code, h.epoch, range_no);
    if (!rs->next()) return std::nullopt;
    return RelayOptString(*rs, 1);
  });
}

void RelayTable::DropRangesThrough(const RelayHalf& target, int range_no) {
  pool_.Transact("relay drop ranges", [&](Connection& c) {
    FenceRelay(c, target);
    c.Execute(kRelayDropRangesThroughSql, target.step_code, target.epoch, range_no);
  });
}

std::optional<int> RelayTable::AddChunk(const RelayHalf& source, int range_no, bool last_of_range, int row_count,
                                        const std::string& data, const std::optional<std::string>& sent_hi) {
  return pool_.Transact("relay add chunk", [&](Connection& c) -> std::optional<int> {
    const RelayLocked l = FenceRelay(c, source);
    const int64_t bytes = static_cast<int64_t>(data.size());
    if (l.bytes_in_flight > 0 && l.bytes_in_flight + bytes > l.window_bytes) return std::nullopt;
    const int chunk_no = l.chunks_relayed + 1;
    c.Execute(kRelayInsertChunkSql, source.step_code, source.epoch, chunk_no, range_no, last_of_range ? 1 : 0,
              row_count, bytes, data);
    const int64_t in_flight = l.bytes_in_flight + bytes;
    c.Execute(kRelayChunkAddedSql, in_flight, std::max(l.peak_bytes, in_flight), bytes, chunk_no, int64_t{row_count},
              source.step_code);
    if (sent_hi || last_of_range) {
      c.Execute(kRelaySetRangeStateSql, last_of_range ? "SENT" : "SENDING", sent_hi, source.step_code,
                source.epoch, range_no);
    }
    return chunk_no;
  });
}

std::vector<RelayChunkRow> RelayTable::ReadChunks(const RelayHalf& target, int after_chunk_no, int limit) {
  return pool_.Run("relay read chunks", [&](Connection& c) {
    std::vector<RelayChunkRow> out;
    auto rs = c.Query(kRelayReadChunksSql, target.step_code, target.epoch, after_chunk_no, limit);
    while (rs->next()) {
      out.push_back({rs->getInt(1), rs->getInt(2), rs->getInt(3) != 0, rs->getInt(4), rs->getString(5)});
    }
    return out;
  });
}

void RelayTable::RemoveChunk(const RelayHalf& target, int chunk_no) {
  pool_.Transact("relay remove chunk", [&](Connection& c) {
    const RelayLocked l = FenceRelay(c, target);
    auto rs = c.Query(kRelayChunkBytesSql, target.step_code, target.epoch, chunk_no);
    if (!rs->next()) return;  // removed before (a repeated call)
    const int64_t bytes = rs->getInt64(1);
    rs.reset();
    c.Execute(kRelayDeleteChunkSql, target.step_code, target.epoch, chunk_no);
    c.Execute(kRelayInFlightSql, std::max<int64_t>(0, l.bytes_in_flight - bytes), target.step_code);
  });
}

void RelayTable::SetState(const RelayHalf& h, std::string_view state, const std::optional<std::string>& error) {
  pool_.Transact("relay state", [&](Connection& c) {
    FenceRelay(c, h);
    if (h.side == RelaySide::kSource && state == "SOURCE_DONE") {
      c.Execute(kRelaySourceDoneSql, h.step_code);
    } else {
      c.Execute(kRelaySetStateSql, state, error, h.step_code);
    }
    if (state == "FAILED") {  // nothing will apply what is in flight: its rows go now
      c.Execute(kRelayDropChunksSql, h.step_code);
      c.Execute(kRelayDropRangesSql, h.step_code);
      c.Execute(kRelayNoBytesInFlightSql, h.step_code);
    }
  });
}

namespace {

// GET_LOCK names are at most 64 characters (MySQL): the step code's SHA-256, shortened.
std::string PresenceLockName(const std::string& step_code) {
  return "dsync-relay-" + Sha256Hex(step_code).substr(0, 48);
}

}  // namespace

RelayPresence::RelayPresence(storage::ConnectionPool& pool, const std::string& step_code)
    : lease_(pool.Borrow()), name_(PresenceLockName(step_code)) {
  lease_->QueryInt("SELECT GET_LOCK(?, 0)", name_);
}

RelayPresence::~RelayPresence() {
  try {
    lease_->QueryInt("SELECT RELEASE_LOCK(?)", name_);
  } catch (const std::exception&) {
    lease_->mark_broken();  // the session goes, and its lock with it
  }
}

bool RelayTable::TargetGone(const std::string& step_code) {
  return pool_.Run("relay presence", [&](Connection& c) {
    return c.QueryInt("SELECT IS_USED_LOCK(?) IS NULL", PresenceLockName(step_code)).value_or(1) == 1;
  });
}

int64_t RelayTable::Purge(int64_t older_than_us, int limit) {
  const std::vector<std::string> codes = pool_.Run("relay retention", [&](Connection& c) {
    std::vector<std::string> out;
    auto rs = c.Query(kRelayStaleSql, older_than_us, limit);
    while (rs->next()) out.push_back(rs->getString(1));
    return out;
  });
  for (const std::string& code : codes) Drop(code);
  return static_cast<int64_t>(codes.size());
}

void RelayTable::Drop(const std::string& step_code) {
  pool_.Transact("relay drop", [&](Connection& c) {
    c.Execute(kRelayDropChunksSql, step_code);
    c.Execute(kRelayDropRangesSql, step_code);
    c.Execute(kRelayDropRelaySql, step_code);
  });
}

}  // namespace dsync::table
