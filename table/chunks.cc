#include "table/chunks.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace dsync::table {
namespace {

// "COUNT(*), <the checksum of the rows' `hash`>". CRC32 is linear over GF(2): rows
// changed by the same bit pattern at the same place (n -> n+1 on even n, a date moved
// by one second) cancel in pairs under a plain BIT_XOR. Multiplying by an odd constant
// first (the product fits in 64 bits) breaks that linearity.
std::string ChecksumAggregate(const std::string& hash) {
  return "COUNT(*), COALESCE(BIT_XOR(" + hash + " * 2654435761), 0)";
}

}  // namespace

std::string RangeWhere(const ColumnSet& key, const BoundFilter& filter, const KeyRange& range) {
  std::string sql = "(" + filter.sql + ")";
  if (range.lo) sql += " AND (" + key.AfterKey() + ")";
  if (range.hi) sql += " AND (" + key.AtOrBeforeKey() + ")";
  return sql;
}

std::vector<SqlValue> RangeValues(const ColumnSet& key, const BoundFilter& filter, const KeyRange& range) {
  std::vector<SqlValue> out = filter.params;
  if (range.lo) key.AppendAfterKeyValues(*range.lo, out);
  if (range.hi) key.AppendAfterKeyValues(*range.hi, out);  // same shape of values
  return out;
}

// SELECT COUNT(*), BIT_XOR(<row hash> * K) FROM t WHERE <range>
RangeChecksum ChecksumRange(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                            const ColumnSet& key, const BoundFilter& filter, const KeyRange& range) {
  const std::string sql = "SELECT " + ChecksumAggregate(cols.RowHashExpr()) + " FROM " +
                          QuoteIdentifier(table) + " WHERE " + RangeWhere(key, filter, range);
  auto rs = c.Query(sql, Bind(RangeValues(key, filter, range)));
  RangeChecksum out;
  if (rs->next()) {
    out.rows = rs->getInt64(1);
    out.crc_xor = rs->getUInt64(2);
  }
  return out;
}

bool SingleIntegerKey(const ColumnSet& key) {
  return key.size() == 1 && (key.at(0).kind == ColumnKind::kSigned || key.at(0).kind == ColumnKind::kUnsigned);
}

// SELECT <key>, <row hash> FROM t WHERE <range> ORDER BY <key>
KeyHashes RowHashes(storage::Connection& c, const std::string& table, const ColumnSet& cols, const ColumnSet& key,
                    const BoundFilter& filter, const KeyRange& range, size_t limit) {
  std::string sql = "SELECT " + key.SelectList() + ", " + cols.RowHashExpr() + " FROM " + QuoteIdentifier(table) +
                    " WHERE " + RangeWhere(key, filter, range) + " ORDER BY " + key.OrderBy();
  if (limit > 0) sql += " LIMIT " + std::to_string(limit);
  auto rs = c.Query(sql, Bind(RangeValues(key, filter, range)));
  KeyHashes out(key);
  out.reserve(std::min<size_t>(limit, 1u << 20));
  while (rs->next()) out.Read(*rs, key);
  return out;
}

KeyHash ReadKeyHash(const storage::ResultSet& rs, const ColumnSet& key) {
  return KeyHash{key.ReadRow(rs), static_cast<uint32_t>(rs.getUInt64(static_cast<int>(key.size() + 1)))};
}

KeyHashes::KeyHashes(const ColumnSet& key) {
  if (SingleIntegerKey(key) && !key.at(0).nullable) {
    kind_ = key.at(0).kind == ColumnKind::kSigned ? Kind::kSigned : Kind::kUnsigned;
  }
}

void KeyHashes::Read(const storage::ResultSet& rs, const ColumnSet& key) {
  const int hash_column = static_cast<int>(key.size() + 1);
  switch (kind_) {
    case Kind::kRows:
      rows_.push_back(key.ReadRow(rs));
      break;
    case Kind::kSigned:
      ints_.push_back(static_cast<uint64_t>(rs.getInt64(1)));
      break;
    case Kind::kUnsigned:
      ints_.push_back(rs.getUInt64(1));
      break;
  }
  hashes_.push_back(static_cast<uint32_t>(rs.getUInt64(hash_column)));
}

void KeyHashes::Add(const Row& key, uint32_t hash) {
  if (kind_ == Kind::kRows) {
    rows_.push_back(key);
  } else {
    const IntKey k = IntKey::Of(key);
    ints_.push_back(static_cast<uint64_t>(k.value()));  // two's complement for kSigned
  }
  hashes_.push_back(hash);
}

void KeyHashes::reserve(size_t n) {
  if (kind_ == Kind::kRows) {
    rows_.reserve(n);
  } else {
    ints_.reserve(n);
  }
  hashes_.reserve(n);
}

Row KeyHashes::key(size_t i) const {
  switch (kind_) {
    case Kind::kRows:
      return rows_[i];
    case Kind::kSigned:
      return Row{std::to_string(static_cast<int64_t>(ints_[i]))};
    case Kind::kUnsigned:
      return Row{std::to_string(ints_[i])};
  }
  return {};
}

bool KeyHashes::SameKey(size_t i, const KeyHashes& o, size_t j) const {
  if (kind_ != Kind::kRows && o.kind_ != Kind::kRows) return Number(i) == o.Number(j);
  if (kind_ == Kind::kRows && o.kind_ == Kind::kRows) return rows_[i] == o.rows_[j];
  return key(i) == o.key(j);
}

std::string KeyHashes::EncodedKey(size_t i) const { return EncodeKey(key(i)); }

HashDiff DiffHashes(const KeyHashes& source, const KeyHashes& target) {
  HashDiff d;
  auto compare = [&d](size_t i, uint32_t source_hash, uint32_t target_hash) {
    if (source_hash == target_hash) {
      ++d.equal;
    } else {
      d.different.push_back(i);
    }
  };
  // Keys are unique on each side, so the keys after the aligned prefix are not in it.
  size_t aligned = 0;
  while (aligned < source.size() && aligned < target.size() && source.SameKey(aligned, target, aligned)) {
    compare(aligned, source.hash(aligned), target.hash(aligned));
    ++aligned;
  }
  if (aligned == source.size() && aligned == target.size()) return d;
  // The rest by key: as numbers where both sides hold numbers of one kind, else as text.
  std::vector<bool> matched(target.size(), false);
  auto match = [&](auto&& target_key, auto&& source_key) {
    std::unordered_map<std::decay_t<decltype(target_key(size_t{0}))>, size_t> in_target;
    in_target.reserve(target.size() - aligned);
    for (size_t j = aligned; j < target.size(); ++j) in_target.emplace(target_key(j), j);
    for (size_t i = aligned; i < source.size(); ++i) {
      auto it = in_target.find(source_key(i));
      if (it == in_target.end()) {
        d.missing.push_back(i);
        continue;
      }
      matched[it->second] = true;
      compare(i, source.hash(i), target.hash(it->second));
    }
  };
  if (source.kind_ != KeyHashes::Kind::kRows && source.kind_ == target.kind_) {
    match([&](size_t j) { return target.ints_[j]; }, [&](size_t i) { return source.ints_[i]; });
  } else {
    match([&](size_t j) { return target.EncodedKey(j); }, [&](size_t i) { return source.EncodedKey(i); });
  }
  for (size_t j = aligned; j < target.size(); ++j) {
    if (!matched[j]) d.extra.push_back(j);
  }
  return d;
}

// SELECT <key> FROM t WHERE <filter> AND <key > lo> ORDER BY <key> LIMIT 1 OFFSET n-1
std::optional<Row> NthKeyAfter(storage::Connection& c, const std::string& table, const ColumnSet& key,
                               const BoundFilter& filter, const std::optional<Row>& lo, size_t n) {
  const KeyRange range{lo, std::nullopt};
  const std::string sql = "SELECT " + key.SelectList() + " FROM " + QuoteIdentifier(table) + " WHERE " +
                          RangeWhere(key, filter, range) + " ORDER BY " + key.OrderBy() + " LIMIT 1 OFFSET " +
                          std::to_string(n > 0 ? n - 1 : 0);
  auto rs = c.Query(sql, Bind(RangeValues(key, filter, range)));
  std::vector<Row> rows = key.ReadAll(*rs);
  if (rows.empty()) return std::nullopt;
  return std::move(rows.front());
}

// SELECT <cols> FROM t WHERE <range> ORDER BY <key> [LIMIT n] [FOR UPDATE]
std::vector<Row> ReadRange(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                           const ColumnSet& key, const BoundFilter& filter, const KeyRange& range, size_t limit,
                           bool for_update) {
  std::string sql = "SELECT " + cols.SelectList() + " FROM " + QuoteIdentifier(table) + " WHERE " +
                    RangeWhere(key, filter, range) + " ORDER BY " + key.OrderBy();
  if (limit > 0) sql += " LIMIT " + std::to_string(limit);
  if (for_update) sql += " FOR UPDATE";
  auto rs = c.Query(sql, Bind(RangeValues(key, filter, range)));
  return cols.ReadAll(*rs);
}

std::optional<KeySpan> DenseSpan(const ColumnSet& key, const std::vector<Row>& keys) {
  if (keys.empty() || !SingleIntegerKey(key)) return std::nullopt;
  const Column& column = key.at(0);
  auto span = [&](auto zero) -> std::optional<KeySpan> {
    using T = decltype(zero);
    T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::min();
    for (const Row& k : keys) {
      if (k.size() != 1 || !k[0]) return std::nullopt;
      std::optional<T> v = ParseInt<T>(*k[0]);
      if (!v) return std::nullopt;
      lo = std::min(lo, *v);
      hi = std::max(hi, *v);
    }
    // hi - lo in unsigned arithmetic: exact for any pair of T.
    const uint64_t width = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    if (width >= 2 * static_cast<uint64_t>(keys.size()) + 64) return std::nullopt;
    return KeySpan{ToSqlValue(column, std::to_string(lo)), ToSqlValue(column, std::to_string(hi))};
  };
  return column.kind == ColumnKind::kSigned ? span(int64_t{0}) : span(uint64_t{0});
}

namespace {
std::string SpanWhere(const ColumnSet& key) { return QuoteIdentifier(key.at(0).name) + " BETWEEN ? AND ?"; }
}  // namespace

// SELECT <cols> FROM t WHERE <key> BETWEEN lo AND hi [FOR UPDATE]
std::vector<Row> ReadSpan(storage::Connection& c, const std::string& table, const ColumnSet& cols,
                          const ColumnSet& key, const KeySpan& span, bool for_update) {
  auto rs = c.Query("SELECT " + cols.SelectList() + " FROM " + QuoteIdentifier(table) + " WHERE " + SpanWhere(key) +
                        (for_update ? " FOR UPDATE" : ""),
                    span.lo, span.hi);
  return cols.ReadAll(*rs);
}

// SELECT <key>, <row hash> FROM t WHERE <key> BETWEEN lo AND hi
std::unordered_map<std::string, uint32_t> HashesInSpan(storage::Connection& c, const std::string& table,
                                                       const ColumnSet& cols, const ColumnSet& key,
                                                       const KeySpan& span) {
  std::unordered_map<std::string, uint32_t> out;
  auto rs = c.Query("SELECT " + key.SelectList() + ", " + cols.RowHashExpr() + " FROM " + QuoteIdentifier(table) +
                        " WHERE " + SpanWhere(key),
                    span.lo, span.hi);
  while (rs->next()) {
    KeyHash kh = ReadKeyHash(*rs, key);
    out[EncodeKey(kh.key)] = kh.hash;
  }
  return out;
}

ChunkSizer::ChunkSizer(size_t max_rows, Options options)
    : max_rows_(std::max<size_t>(1, max_rows)),
      options_(options),
      next_(std::min(max_rows_, std::max<size_t>(1, options.start_rows))) {}

void ChunkSizer::Observe(size_t rows, std::chrono::nanoseconds took, size_t held_bytes, size_t held_rows) {
  double want = static_cast<double>(max_rows_);
  if (took.count() > 0 && rows > 0) {
    want = static_cast<double>(rows) * static_cast<double>(options_.target.count()) / static_cast<double>(took.count());
  }
  // The byte bound is on what a chunk holds: per row the chunk covered (a chunk of a
  // mostly equal range holds only its differing rows), so the next chunk is expected to
  // hold about max_bytes.
  if (held_rows > 0 && held_bytes > 0) {
    const double per_row = static_cast<double>(held_bytes) / static_cast<double>(std::max(rows, held_rows));
    want = std::min(want, static_cast<double>(options_.max_bytes) / per_row);
  }
  // The same for the count of rows held.
  if (held_rows > 0 && options_.max_held_rows > 0) {
    want = std::min(want, static_cast<double>(options_.max_held_rows) * static_cast<double>(std::max(rows, held_rows)) /
                              static_cast<double>(held_rows));
  }
  const double lo = std::max(1.0, static_cast<double>(next_) / 4);
  const double hi = static_cast<double>(next_) * 4;
  want = std::clamp(want, lo, hi);
  next_ = std::clamp<size_t>(static_cast<size_t>(want), 1, max_rows_);
}

void ChunkSizer::Shrink() { next_ = std::max<size_t>(1, next_ / 4); }

nlohmann::json KeyToJson(const Row& key) {
  nlohmann::json out = nlohmann::json::array();
  for (const Cell& cell : key) {
    if (cell) out.push_back(*cell);
    else out.push_back(nullptr);
  }
  return out;
}

IntKey IntKey::Of(const std::string& text) {
  if (auto v = ParseInt<int64_t>(text)) return IntKey(*v);
  if (auto u = ParseInt<uint64_t>(text)) return IntKey(*u);
  throw std::invalid_argument("'" + text + "' is not an integer key");
}

IntKey IntKey::Of(const Row& key) {
  if (key.size() != 1 || !key[0]) throw std::invalid_argument("a key of one integer column has one non-null cell");
  return Of(*key[0]);
}

Row IntKey::ToRow() const {
  return Row{v_ < 0 ? std::to_string(static_cast<int64_t>(v_)) : std::to_string(static_cast<uint64_t>(v_))};
}

// SELECT MIN(k), MAX(k) FROM t
std::optional<KeyBounds> ReadKeyBounds(storage::Connection& c, const std::string& table, const ColumnSet& key) {
  const std::string k = QuoteIdentifier(key.at(0).name);
  auto rs = c.Query("SELECT MIN(" + k + "), MAX(" + k + ") FROM " + QuoteIdentifier(table));
  if (!rs->next() || rs->isNull(1)) return std::nullopt;
  return KeyBounds(IntKey::Of(std::string(rs->getString(1))), IntKey::Of(std::string(rs->getString(2))));
}

std::optional<KeyBounds> Union(const std::optional<KeyBounds>& a, const std::optional<KeyBounds>& b) {
  if (!a || !b) return a ? a : b;
  return KeyBounds(std::min(a->first, b->first), std::max(a->second, b->second));
}

std::optional<Row> KeySpanRanges::End(const std::optional<Row>& lo, size_t rows, const std::optional<Row>& end) const {
  // keys_per_row_ stays within [1, 2^66], rows within size_t: the product fits an __int128.
  const auto keys = std::max<__int128>(1, static_cast<__int128>(static_cast<double>(rows) * keys_per_row_));
  const __int128 hi = From(lo).value() + keys;
  if (end) {
    if (hi >= IntKey::Of(*end).value()) return end;
  } else if (hi >= last_.value()) {
    return std::nullopt;
  }
  return IntKey(hi).ToRow();
}

void KeySpanRanges::Observe(const std::optional<Row>& lo, const Row& hi, int64_t rows) {
  const auto keys = static_cast<double>(IntKey::Of(hi).value() - From(lo).value());
  keys_per_row_ = rows > 0 ? keys / static_cast<double>(rows) : keys_per_row_ * 4;
  keys_per_row_ = std::clamp(keys_per_row_, 1.0, 0x1p66);
}

std::vector<Row> EvenSplits(const std::string& lo, const std::string& hi, int lanes, int64_t min_keys) {
  return EvenSplits(IntKey::Of(lo), IntKey::Of(hi), lanes, min_keys);
}

std::vector<Row> EvenSplits(IntKey lo, IntKey hi, int lanes, int64_t min_keys) {
  const __int128 first = lo.value();
  const __int128 span = hi.value() - first + 1;  // keys in [lo, hi]
  if (min_keys < 1 || span <= 0) return {};
  const __int128 n = std::min<__int128>(lanes, span / min_keys);
  std::vector<Row> out;
  for (__int128 i = 1; i < n; ++i) out.push_back(IntKey(first + span * i / n - 1).ToRow());
  return out;
}

Row KeyFromJson(const nlohmann::json& j) {
  if (!j.is_array() || j.empty()) throw std::invalid_argument("a key is not a non-empty array");
  Row out;
  for (const auto& cell : j) {
    if (cell.is_null()) out.emplace_back(std::nullopt);
    else if (cell.is_string()) out.emplace_back(cell.get<std::string>());
    else throw std::invalid_argument("a key cell is neither a string nor null");
  }
  return out;
}

}  // namespace dsync::table
