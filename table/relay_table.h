// The relay tables in the framework database (sql/migrations/V020__relay.sql,
// docs/relay.md): every statement on dsync_relay, dsync_relay_range and
// dsync_relay_chunk, one named function each, the statement beside it.
//
//   table::RelayTable relay(pool);                       // the framework database
//   relay.Open(spec);                                     // the step's row, once
//   table::RelayHalf t = relay.TakeTarget(code, attempt, node);   // target half: new epoch
//   relay.PublishRanges(t, ranges);
//   table::RelayHalf s = relay.TakeSource(code, t.epoch, attempt, node);   // source half
//   auto chunk_no = relay.AddChunk(s, {...});           // nullopt: the window is full
//   for (auto& ch : relay.ReadChunks(t, after, 4)) { apply; relay.RemoveChunk(t, ch); }
//
// Fencing: a half is (step, side, attempt, epoch). Every write of a half runs in its own
// short transaction (ConnectionPool::Transact: deadlocks and lost connections before
// COMMIT are retried from BEGIN) that first locks the step's dsync_relay row and checks that the
// half's attempt is still that side's newest and its epoch the current one; if not, it
// writes nothing and throws RelayLost. So a half frozen past its takeover (a node that
// was SIGSTOPped, then resumed) cannot write again. The attempts are the events'
// claim attempts: the target half's is its event's, the source half's its own event's
// (one per epoch); both only grow.
//
// Epochs: a target-half takeover starts a new epoch and deletes the ranges and chunks of
// the old ones (what was applied is in the target's checkpoint; the rest is computed
// again). A source half belongs to one epoch (the target half of that epoch starts it
// as an event of its own): when the epoch ends it stops, and the new epoch's target half
// starts another. Within an epoch, a source-half takeover (a later claim of that event)
// resumes from the ranges' states.
//
// The window: AddChunk adds a chunk only while bytes_in_flight + its bytes <=
// window_bytes, or when nothing is in flight (a chunk larger than the window still
// moves, alone); RemoveChunk gives its bytes back. peak_bytes is the highest
// bytes_in_flight reached.
//
// Thread safety: as its pool (thread-safe); the halves are separate objects.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "storage/connection_pool.h"

namespace dsync::table {

enum class RelaySide { kSource, kTarget };
const char* RelaySideName(RelaySide side);  // "source", "target"

// This half was taken over (a later attempt of its side, or a new epoch): stop.
class RelayLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct RelaySpec {
  std::string step_code;
  std::string event_code;
  std::string step_name;
  std::string table;
  std::string source;  // datasource names
  std::string target;
  int64_t window_bytes = 64 << 20;
};

struct RelayHalf {
  std::string step_code;
  RelaySide side = RelaySide::kTarget;
  int attempt = 0;
  int epoch = 0;
};

struct RelayStatus {
  int epoch = 0;
  int target_attempt = 0;
  int source_attempt = 0;
  std::string state;  // OPEN, SOURCE_DONE, DONE, FAILED
  std::optional<std::string> error;
  std::optional<std::string> target_schema;
  std::optional<std::string> source_schema;
  int64_t window_bytes = 0;
  int64_t bytes_in_flight = 0;
  int64_t peak_bytes = 0;
  int64_t bytes_relayed = 0;
  int chunks_relayed = 0;
  int64_t rows_relayed = 0;
};

struct RelayRange {
  int range_no = 0;
  std::optional<std::string> lo_key;  // JSON array of key cells; nullopt: from the first key
  std::optional<std::string> hi_key;  // nullopt: open above
  int64_t target_rows = 0;
  std::string target_checksum;
  std::string state = "PUBLISHED";    // PUBLISHED, EQUAL, HASHES_WANTED, HASHES, SENDING, SENT, APPLIED
  std::optional<std::string> sent_hi;
};

struct RelayChunkRow {
  int chunk_no = 0;
  int range_no = 0;
  bool last_of_range = false;
  int row_count = 0;
  std::string data;  // table/relay_codec.h
};

// A process that runs a relay's target half outside the event machinery (a verify
// across the gap) holds this while it runs: a named lock on a framework-database session
// of its own, which the server releases when the process dies (kill -9 included), so
// the source half can tell it is gone (RelayTable::TargetGone) instead of waiting for
// its own event's deadline.
class RelayPresence {
 public:
  RelayPresence(storage::ConnectionPool& pool, const std::string& step_code);  // throws DbError
  ~RelayPresence();
  RelayPresence(const RelayPresence&) = delete;
  RelayPresence& operator=(const RelayPresence&) = delete;

 private:
  storage::ConnectionPool::Lease lease_;
  std::string name_;
};

class RelayTable {
 public:
  explicit RelayTable(storage::ConnectionPool& pool) : pool_(pool) {}
  storage::ConnectionPool& pool() { return pool_; }

  // The step's row, if it has none yet (a later call changes nothing).
  void Open(const RelaySpec& spec);
  // nullopt: no row for the step.
  std::optional<RelayStatus> Read(const std::string& step_code);

  // The target half of claim `attempt` takes over: target_attempt becomes `attempt`, a
  // new epoch starts (the ranges and chunks of the earlier ones are deleted, nothing is
  // in flight, no source half yet, no source schema), state OPEN. Throws RelayLost when
  // a later attempt holds it already.
  RelayHalf TakeTarget(const std::string& step_code, int attempt, const std::string& node);
  // The source half of claim `attempt` for `epoch`: source_attempt becomes `attempt`.
  // Throws RelayLost when the epoch ended or a later attempt holds it already.
  RelayHalf TakeSource(const std::string& step_code, int epoch, int attempt, const std::string& node);

  // The half's table shape (JSON text) into target_schema / source_schema.
  void PublishSchema(const RelayHalf& h, const std::string& schema_json);

  // Target half: ranges of its epoch (range_no ascending, after any published before).
  void PublishRanges(const RelayHalf& target, const std::vector<RelayRange>& ranges);
  // The epoch's ranges after `after_range_no`, at most `limit`, in order (without hashes).
  std::vector<RelayRange> ReadRanges(const RelayHalf& h, int after_range_no, int limit);
  // A range's state (and the source half's progress in it, when given).
  void SetRangeState(const RelayHalf& h, int range_no, std::string_view state,
                     const std::optional<std::string>& sent_hi = std::nullopt);
  // Target half: the target's row hashes of a range (state HASHES).
  void PublishHashes(const RelayHalf& target, int range_no, const std::string& hashes);
  // nullopt: not published (yet).
  std::optional<std::string> ReadHashes(const RelayHalf& h, int range_no);
  // Target half: the epoch's ranges up to `range_no` are done; their rows go.
  void DropRangesThrough(const RelayHalf& target, int range_no);

  // Source half: the next chunk of the epoch, if the window has room; its number
  // (numbered in order within the epoch), or nullopt when the window is full (wait for
  // the target half). With `sent_hi` the range's progress is recorded in the same
  // transaction (state SENDING), and with last_of_range its state becomes SENT.
  std::optional<int> AddChunk(const RelayHalf& source, int range_no, bool last_of_range, int row_count,
                              const std::string& data, const std::optional<std::string>& sent_hi);
  // The epoch's chunks after `after_chunk_no`, at most `limit`, in order, with their data.
  std::vector<RelayChunkRow> ReadChunks(const RelayHalf& target, int after_chunk_no, int limit);
  // Target half: the chunk is applied (or was before a takeover): it goes, its bytes
  // leave the window.
  void RemoveChunk(const RelayHalf& target, int chunk_no);

  // The step's state: SOURCE_DONE (source half, every range answered), DONE or FAILED
  // (with a one-line error; FAILED also removes the step's chunks and ranges: nothing
  // will apply them). Fenced like every write.
  void SetState(const RelayHalf& h, std::string_view state, const std::optional<std::string>& error = std::nullopt);
  // Every row of the step (after its last use: the target half of a finished step).
  void Drop(const std::string& step_code);
  // Whether the RelayPresence of `step_code` is gone (never held, or its process
  // released it or died).
  bool TargetGone(const std::string& step_code);
  // Retention: drops up to `limit` relays untouched for `older_than_us` microseconds
  // whose event is not in flight (finished, purged, or none: a verify's relay left by
  // a process killed with kill -9), with their ranges and chunks. Returns how many.
  int64_t Purge(int64_t older_than_us, int limit);

 private:

  storage::ConnectionPool& pool_;
};

}  // namespace dsync::table
