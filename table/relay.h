// The two halves of a relayed table_sync (docs/relay.md): when no node reaches both the
// source and the target of a step, a node reaching the target runs RelayTarget (it owns
// the event, applies chunks with their undo records and checkpoints in the target) and
// a node reaching the source runs RelaySource (a child event of the step); they talk
// only through the relay tables of the framework database (table/relay_table.h).
//
//   // target half (the step's owner), after the schemas agreed:
//   table::RelayTarget target(relay, half, target_side, options, control);
//   table::RelayTotals totals = target.Run();
//   // source half (its own event, on another node):
//   table::RelaySource source(relay, half, source_side, options, control);
//   source.Run();
//
// The exchange, range by range in key order:
//   1. the target half publishes ranges (lo, hi] after its checkpoint, each holding up to
//      `compare_rows` of the target's keys, with the target's COUNT and checksum; the
//      last is open above; at most `lookahead` ranges are published and unfinished;
//   2. the source half checksums each range on its side (up to `lookahead` ahead of the
//      one it sends): equal -> EQUAL; else, if the target holds rows there,
//      HASHES_WANTED, which the target half answers with its (key, hash) list (HASHES);
//   3. the source half sends the front range: copy (the target holds no row there: every
//      source row, in chunks of at most `chunk_rows` rows and `chunk_bytes` bytes) or
//      diff (the source's row hashes in slices of up to 4 * chunk_rows, compared with the
//      target's, and only the rows that differ or are missing, plus the keys to delete
//      with delete_missing); each chunk covers a key range (lo, hi] that starts where the
//      previous one ended, so the target's checkpoint is exact; the range's last chunk is
//      flagged (an empty one when nothing was left to send);
//   4. the target half applies the front range's chunks in order (TargetSide::Apply: one
//      target transaction with the before-image, the writes, the undo record and the
//      checkpoint), removes each from the framework database once applied, and records
//      EQUAL ranges as checkpoints.
// Chunks are sent only for the front range, so the window can never fill with chunks the
// target half cannot apply yet.
//
// Takeovers (table/relay_table.h): a new target half starts a new epoch from its
// checkpoint (the old epoch's ranges and chunks go: nothing applied twice) and a source
// half of its own; the old epoch's source half gets RelayLost and ends. A new source
// half of the same epoch resumes from the ranges' states (sent_hi inside a range). A
// half that lost its part gets RelayLost from its next write (or its next look at the
// relay row while idle) and stops.
//
// Thread safety: each half runs on one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "table/chunks.h"
#include "table/relay_codec.h"
#include "table/relay_table.h"
#include "table/sql.h"

namespace dsync::table {

struct RelayOptions {
  size_t compare_rows = 4000;            // target keys per published range
  size_t chunk_rows = 1000;              // most rows a relay chunk holds
  size_t chunk_bytes = 2u << 20;         // most bytes of rows a relay chunk holds
  int lookahead = 16;                    // ranges published / checksummed ahead of the front
  Millis poll{20};                       // wait between looks when the other half is behind
  Millis idle_poll{200};                 // the same after a second with nothing to do
  bool delete_missing = false;
};

// What the source half needs of the source table (the step's filter bound on the source).
class SourceSide {
 public:
  virtual ~SourceSide() = default;
  virtual const ColumnSet& key() const = 0;
  virtual RangeChecksum Checksum(const KeyRange& range) = 0;
  // Keys and row hashes of `range` in key order, at most `limit` (0: all).
  virtual KeyHashes Hashes(const KeyRange& range, size_t limit) = 0;
  // Rows of `range` in key order, at most `limit` (0: all).
  virtual std::vector<Row> Rows(const KeyRange& range, size_t limit) = 0;
  // The rows of `keys` (source keys, in key order), in key order.
  virtual std::vector<Row> RowsOfKeys(const std::vector<Row>& keys) = 0;
  virtual std::vector<std::string> column_names() const = 0;
  // The key cells of a row of Rows()/RowsOfKeys().
  virtual Row KeyOf(const Row& row) const = 0;
};

// What the target half needs of the target table.
class TargetSide {
 public:
  virtual ~TargetSide() = default;
  virtual const ColumnSet& key() const = 0;
  virtual RangeChecksum Checksum(const KeyRange& range) = 0;
  virtual KeyHashes Hashes(const KeyRange& range) = 0;
  virtual std::optional<Row> NthKeyAfter(const std::optional<Row>& lo, size_t n) = 0;
  // One chunk, in one target transaction with its undo record and checkpoint `chunk.hi`
  // (nullopt: the end). Returns the rows written (inserted, updated or deleted).
  virtual int64_t Apply(const RelayChunk& chunk) = 0;
  // The range (lo, hi] is equal: record it as a checkpoint (a side may batch these).
  virtual void RecordEqual(const KeyRange& range) = 0;
  // Every range is applied: write what RecordEqual batched.
  virtual void Finish() = 0;
};

// How a half waits and is stopped.
struct RelayControl {
  Clock& clock;
  std::stop_token stop;
  // About once a second with the half's counters (the step's progress); may be empty.
  std::function<void(const nlohmann::json&)> progress;
  // Source half: whether the target half's process is gone for good (a verify's, which
  // no takeover replaces: RelayTable::TargetGone); asked at most every 5 s while idle.
  // Then the source half ends with RelayFailed. May be empty.
  std::function<bool()> target_gone;
};

struct RelayTotals {
  int64_t ranges = 0;
  int64_t ranges_equal = 0;
  int64_t chunks = 0;
  int64_t rows_relayed = 0;   // rows in chunks (source) / applied from chunks (target)
  int64_t rows_written = 0;   // target: rows the chunks changed
  int64_t bytes_relayed = 0;
  nlohmann::json ToJson() const;
};

// The other half failed for good (its error, recorded in the relay row): this one stops too.
class RelayFailed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The relay stopped: the stop token was requested (shutdown, deadline).
class RelayStopped : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RelaySource {
 public:
  RelaySource(RelayTable& relay, RelayHalf half, SourceSide& side, RelayOptions options, RelayControl control);
  // Until every range is answered and sent (state SOURCE_DONE), or the target half is
  // DONE. Throws RelayLost (a later source half took over, or the epoch ended),
  // RelayFailed (the target half failed), RelayStopped, DbError.
  RelayTotals Run();

 private:
  bool GiveVerdicts(std::vector<RelayRange>& ranges);
  bool SendFront(RelayRange& range);
  bool Copy(RelayRange& range);
  bool Diff(RelayRange& range);
  // Adds one chunk, waiting while the window is full. Throws RelayLost, RelayStopped.
  void Send(const RelayRange& range, RelayChunk chunk, bool last);
  void Wait(bool idle);
  void Report();

  RelayTable& relay_;
  RelayHalf half_;
  SourceSide& side_;
  RelayOptions options_;
  RelayControl control_;
  RelayTotals totals_;
  Clock::TimePoint last_report_{};
  Clock::TimePoint last_progress_{};
  Clock::TimePoint last_presence_check_{};
};

class RelayTarget {
 public:
  // `segments`: the key ranges still to sync, in key order, each (checkpoint, end]: one
  // per lane not done (table/planner.h; a range never spans two, so each lane's
  // checkpoint stays its own); the last one open above. None: nothing is left.
  RelayTarget(RelayTable& relay, RelayHalf half, TargetSide& side, std::vector<KeyRange> segments,
              RelayOptions options, RelayControl control);
  // Until the last range is applied (state DONE). Throws RelayLost (a later target half
  // took over), RelayFailed (the source half failed), RelayStopped, RelayFormatError (a
  // chunk that does not decode), DbError, and what TargetSide::Apply throws.
  RelayTotals Run();

 private:
  bool PublishMore();
  bool AnswerHashes(const std::vector<RelayRange>& ranges);
  bool ApplyFront(const RelayRange& range);
  void Wait(bool idle);
  void Report();

  RelayTable& relay_;
  RelayHalf half_;
  TargetSide& side_;
  std::vector<KeyRange> segments_;
  RelayOptions options_;
  RelayControl control_;
  RelayTotals totals_;
  // Publishing: the next range starts after `next_lo_` in segment `segment_`; done once
  // the last segment's last range is out.
  size_t segment_ = 0;
  std::optional<Row> next_lo_;
  bool published_all_ = false;
  int next_range_no_ = 1;
  int front_ = 0;            // the last range finished (applied or equal)
  int last_chunk_ = 0;       // the last chunk applied of the front range
  Clock::TimePoint last_report_{};
  Clock::TimePoint last_progress_{};
};

// The target's (key, hash) list of a range as bytes for the relay (a relay chunk of the
// key columns and one "#hash" column), and back.
std::string EncodeKeyHashes(const ColumnSet& key, const KeyHashes& hashes);
KeyHashes DecodeKeyHashes(const ColumnSet& key, const std::string& bytes);  // throws RelayFormatError

// A range's target checksum as the relay stores it: "<rows>:<crc_xor>".
std::string ChecksumText(const RangeChecksum& c);

}  // namespace dsync::table
