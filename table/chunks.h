// Key ranges of a table and what each database says about the rows in one: the chunk
// boundaries, an aggregate checksum and per-row hashes, computed inside the database
// so only a few bytes cross the wire. table_sync uses them to skip the chunks that are
// already equal and to fetch only the rows that differ; a verify step can compare two
// datasources the same way:
//
//   KeyRange r{lo, hi};                              // (lo, hi] in key order
//   RangeChecksum a = ChecksumRange(src, "kb_doc", cols, key, {where_sql, values}, r);
//   RangeChecksum b = ChecksumRange(tgt, "kb_doc", cols, key, {where_sql, values}, r);
//   if (a != b) { auto ha = RowHashes(src, ...), hb = RowHashes(tgt, ...); ... }
//
// The checksum of a range is (COUNT(*), BIT_XOR of each row's CRC32 times an odd
// 32-bit constant: a plain BIT_XOR of CRC32s, as pt-table-checksum computes it, lets
// rows changed by the same bit pattern cancel in pairs), the row hash the
// CRC32 of a byte-exact encoding (ColumnSet::RowHashExpr, in its compare form): NULL, ''
// and 'NULL' differ, 'a' and 'A' or 'x' and 'x ' differ under any collation, binary
// columns and fractional seconds count, and so does a '|' moved from one column to the
// next. 32 bits per row: a changed row escapes with probability
// 2^-32 (measured: an MD5-based 64-bit hash costs about 1.4x as much server CPU, which
// is the whole cost of re-syncing unchanged data, so CRC32 it is; the rows fetched for
// a differing chunk are then compared exactly). Column values must encode alike on both
// datasources (same types); DOUBLE/FLOAT print shortest round-trip on MariaDB 10.11.
//
// Thread safety: pure functions over a connection the caller owns.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "table/sql.h"
#include "storage/connection.h"

namespace dsync::table {

// Rows whose key is after `lo` (exclusive) and at or before `hi` (inclusive), in key
// order; nullopt: unbounded on that side. Keys are cells of the key columns.
struct KeyRange {
  std::optional<Row> lo;
  std::optional<Row> hi;
};

// A filter's SQL (`?` placeholders) and the values bound to them, in order.
struct BoundFilter {
  std::string sql = "1 = 1";
  std::vector<SqlValue> params;
};

// "(filter) AND (key > ?) AND (key <= ?)" for `range`, and its values.
std::string RangeWhere(const ColumnSet& key, const BoundFilter& filter, const KeyRange& range);
std::vector<SqlValue> RangeValues(const ColumnSet& key, const BoundFilter& filter, const KeyRange& range);

struct RangeChecksum {
  int64_t rows = 0;
  uint64_t crc_xor = 0;  // BIT_XOR of the rows' CRC32 * 2654435761
  bool operator==(const RangeChecksum& o) const { return rows == o.rows && crc_xor == o.crc_xor; }
  bool operator!=(const RangeChecksum& o) const { return !(*this == o); }
};

// The checksum of the rows of `table` in `range` matching `filter`, over `cols`.
RangeChecksum ChecksumRange(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                            const ColumnSet& key, const BoundFilter& filter, const KeyRange& range);

bool SingleIntegerKey(const ColumnSet& key);

struct KeyHash {
  Row key;
  uint32_t hash = 0;
};

// The (key, hash) row `rs` is on, from a SELECT of key.SelectList() then a row hash.
KeyHash ReadKeyHash(const storage::ResultSet& rs, const ColumnSet& key);

struct HashDiff;

// The keys and row hashes of one range on one side, in key order (RowHashes). A key of
// one integer column (SingleIntegerKey, not nullable) is held as a number: 12 bytes a
// row and no allocation, where a differing range's rows are read on both sides (a
// range with 1 % of its rows changed reads every row's hash: as rows, that was about
// 130 ms of node CPU per million rows, as numbers 80, most of it the driver's).
// Other keys are held as rows.
class KeyHashes {
 public:
  KeyHashes() = default;                     // keys as rows
  explicit KeyHashes(const ColumnSet& key);  // as numbers where the key allows
  // Appends the (key, hash) row `rs` is on, from a SELECT of key.SelectList() then a
  // row hash (`key`: the set this was made for).
  void Read(const storage::ResultSet& rs, const ColumnSet& key);
  // Appends a key given as a row (canonical integer text where held as numbers).
  void Add(const Row& key, uint32_t hash);
  void reserve(size_t n);
  size_t size() const { return hashes_.size(); }
  bool empty() const { return hashes_.empty(); }
  uint32_t hash(size_t i) const { return hashes_[i]; }
  Row key(size_t i) const;
  // Whether row i here and row j of `o` have the same key, as text (integers held as
  // numbers print canonically, so equal numbers are equal texts).
  bool SameKey(size_t i, const KeyHashes& o, size_t j) const;
  std::string EncodedKey(size_t i) const;  // EncodeKey(key(i))

 private:
  friend HashDiff DiffHashes(const KeyHashes& source, const KeyHashes& target);
  enum class Kind { kRows, kSigned, kUnsigned };
  __int128 Number(size_t i) const {
    return kind_ == Kind::kSigned ? __int128{static_cast<int64_t>(ints_[i])} : __int128{ints_[i]};
  }
  Kind kind_ = Kind::kRows;
  std::vector<Row> rows_;       // kRows
  std::vector<uint64_t> ints_;  // kSigned (two's complement) and kUnsigned
  std::vector<uint32_t> hashes_;
};

// Each row's key and hash over `cols`, in key order; at most `limit` (0: all).
KeyHashes RowHashes(storage::Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                    const BoundFilter& filter, const KeyRange& range, size_t limit = 0);

// How the (key, hash) lists of one range on two sides differ; each list in its own
// side's key order, keys compared as text (EncodeKey). Positions index the lists.
struct HashDiff {
  std::vector<size_t> missing;    // source rows whose key the target lacks
  std::vector<size_t> different;  // source rows whose target row hashes differently
  std::vector<size_t> extra;      // target rows whose key the source lacks
  size_t equal = 0;               // source rows the target holds with the same hash
};
// While both lists hold the same keys at the same positions (a range where rows only
// changed) they are walked side by side; from the first position where they part, the
// rest is matched by key. Either way the result is the same.
HashDiff DiffHashes(const KeyHashes& source, const KeyHashes& target);

// The key of the n-th row (n >= 1) after `lo` matching `filter`; nullopt when fewer
// rows follow (the range (lo, end) then holds them all).
std::optional<Row> NthKeyAfter(storage::Connection& c, const std::string& table, const ColumnSet& key,
                               const BoundFilter& filter, const std::optional<Row>& lo, size_t n);

// The rows (`cols`) of `range` matching `filter`, in key order, at most `limit`
// (0: no limit); FOR UPDATE locks them and the gaps between them.
std::vector<Row> ReadRange(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                           const ColumnSet& key, const BoundFilter& filter, const KeyRange& range, size_t limit,
                           bool for_update);

// An inclusive range [lo, hi] of a key of one integer column (SingleIntegerKey) that
// holds every key of `keys` and at most about twice as many keys in all (hi - lo <
// 2 * keys + 64); nullopt when `keys` is empty, sparser than that, or not integers.
// A chunk's target rows are then read by one range scan instead of by matching each
// key: a long IN list costs the server's range optimiser plus one index lookup per key,
// most of a full copy's server time on narrow rows. Integer text is canonical, so a row
// of the span whose key is not among `keys` as text is a row those keys do not touch
// (text keys could match in SQL but not as text under a case-insensitive collation).
struct KeySpan {
  SqlValue lo, hi;
};
std::optional<KeySpan> DenseSpan(const ColumnSet& key, const std::vector<Row>& keys);

// Every row (`cols`) of `span`, in no particular order; FOR UPDATE locks the span.
std::vector<Row> ReadSpan(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                          const ColumnSet& key, const KeySpan& span, bool for_update);

// The row hash over `cols` of every row of `span`, by EncodeKey of its key.
std::unordered_map<std::string, uint32_t> HashesInSpan(storage::Connection& c, const std::string& table,
                                                       const ColumnSet& cols, const ColumnSet& key,
                                                       const KeySpan& span);

// The number of rows of the next chunk: starts at min(max_rows, start_rows) and
// adapts toward `target` time per chunk from the rate the last chunk achieved (at most
// 4x larger or smaller per step, within [1, max_rows]), and keeps the rows it holds in
// memory under `max_bytes` and `max_held_rows` (0: max_rows) (pt-table-checksum's
// --chunk-time idea). A chunk may cover more rows than it holds (a compare chunk holds
// only the rows that differ).
class ChunkSizer {
 public:
  struct Options {
    size_t start_rows = 1000;
    std::chrono::nanoseconds target = std::chrono::milliseconds(500);
    size_t max_bytes = 2u << 20;
    size_t max_held_rows = 0;
  };
  explicit ChunkSizer(size_t max_rows) : ChunkSizer(max_rows, Options{}) {}
  ChunkSizer(size_t max_rows, Options options);

  size_t next() const { return next_; }
  // The last chunk covered `rows` rows in `took`, holding `held_rows` of them, of
  // `held_bytes` bytes in all, in memory. The next chunk aims at the target time and
  // at holding at most max_bytes (at the last chunk's bytes held per row covered).
  void Observe(size_t rows, std::chrono::nanoseconds took, size_t held_bytes, size_t held_rows);
  // The last chunk was too big to record: a quarter of it next.
  void Shrink();

 private:
  size_t max_rows_;
  Options options_;
  size_t next_;
};

// A key of one integer column (SingleIntegerKey), signed or unsigned 64-bit, as a
// number: lanes are split and their checkpoints placed by it.
class IntKey {
 public:
  // Throws std::invalid_argument unless `key` is one cell of canonical integer text
  // (table::ParseInt) of the int64 or uint64 range, the range ToRow writes.
  static IntKey Of(const Row& key);
  static IntKey Of(const std::string& text);
  explicit IntKey(__int128 v = 0) : v_(v) {}
  __int128 value() const { return v_; }
  Row ToRow() const;
  auto operator<=>(const IntKey&) const = default;

 private:
  __int128 v_;
};

// The lowest and highest key of `table` (unfiltered) when its key is one integer
// column (SingleIntegerKey); nullopt when the table is empty.
using KeyBounds = std::pair<IntKey, IntKey>;
std::optional<KeyBounds> ReadKeyBounds(storage::Connection& c, const std::string& table, const ColumnSet& key);
// The bounds of both sides together: the lower of the lowest keys, the higher of the
// highest.
std::optional<KeyBounds> Union(const std::optional<KeyBounds>& a, const std::optional<KeyBounds>& b);

// The ranges a compare chunk covers when the key is one integer column: a range ends
// at its start plus the keys that should hold the rows asked for, at the density the
// ranges before it had (1 key per row to begin with), so its checksum on each side is
// one plain range scan, both at once. (Ending it at the N-th row's key costs the source
// a pass of its own, or, in one statement with the checksum, a derived table the server
// materialises: about a third more of its time.) `first` and `last`: the lowest and
// highest key of either side when the run began.
class KeySpanRanges {
 public:
  KeySpanRanges(IntKey first, IntKey last) : first_(first), last_(last) {}
  // The end of the range after `lo` (nullopt: from the lowest key) meant to hold about
  // `rows` rows; `end` (the lane's) once it reaches it. With `end` nullopt (the table's
  // end) that is once it passes `last`: keys added above it meanwhile are in that range.
  std::optional<Row> End(const std::optional<Row>& lo, size_t rows, const std::optional<Row>& end) const;
  // The range (lo, hi] held `rows` rows (on the side that has more): the density the
  // next ranges assume. An empty one makes the next 4x as long.
  void Observe(const std::optional<Row>& lo, const Row& hi, int64_t rows);
  double keys_per_row() const { return keys_per_row_; }

 private:
  IntKey From(const std::optional<Row>& lo) const { return lo ? IntKey::Of(*lo) : IntKey(first_.value() - 1); }
  IntKey first_, last_;
  double keys_per_row_ = 1;
};

// Split keys for up to `lanes` key ranges of [lo, hi] of at least
// `min_keys` keys each: s1 < s2 < ..., the ranges being (-inf, s1], (s1, s2], ...,
// (s_last, +inf). Empty (one range) when [lo, hi] holds fewer than 2 * min_keys keys.
std::vector<Row> EvenSplits(IntKey lo, IntKey hi, int lanes, int64_t min_keys);
// The same of integer texts (IntKey::Of; throws std::invalid_argument).
std::vector<Row> EvenSplits(const std::string& lo, const std::string& hi, int lanes, int64_t min_keys);

// Key cells as JSON (strings and nulls) and back, for checkpoints.
nlohmann::json KeyToJson(const Row& key);
Row KeyFromJson(const nlohmann::json& j);  // throws std::invalid_argument

}  // namespace dsync::table
