#include "table/relay_sides.h"

#include <stdexcept>
#include <unordered_map>

#include "table/row_io.h"

namespace dsync::table {
namespace {

// Keys per statement of RowsOfKeys (as direct mode reads them: row_io.h).
constexpr size_t kRelayKeysPerRead = 500;

}  // namespace

DbSourceSide::DbSourceSide(storage::ConnectionPool& pool, std::string table, ColumnSet cols, ColumnSet key,
                           BoundFilter filter)
    : pool_(pool), table_(std::move(table)), cols_(std::move(cols)), key_(std::move(key)), filter_(std::move(filter)) {
  for (const std::string& name : key_.names()) {
    const int i = cols_.IndexOf(name);
    if (i < 0) throw std::invalid_argument("relay: key column " + name + " is not among the synced columns");
    key_pos_.push_back(i);
  }
}

RangeChecksum DbSourceSide::Checksum(const KeyRange& range) {
  return pool_.Run("relay source checksum",
                   [&](storage::Connection& c) { return ChecksumRange(c, table_, cols_, key_, filter_, range); });
}

KeyHashes DbSourceSide::Hashes(const KeyRange& range, size_t limit) {
  return pool_.Run("relay source hashes",
                   [&](storage::Connection& c) { return RowHashes(c, table_, cols_, key_, filter_, range, limit); });
}

std::vector<Row> DbSourceSide::Rows(const KeyRange& range, size_t limit) {
  return pool_.Run("relay source rows", [&](storage::Connection& c) {
    return ReadRange(c, table_, cols_, key_, filter_, range, limit, /*for_update=*/false);
  });
}

std::vector<Row> DbSourceSide::RowsOfKeys(const std::vector<Row>& keys) {
  std::vector<Row> rows = pool_.Run("relay source rows by key", [&](storage::Connection& c) {
    return ReadByKeys(c, table_, cols_, key_, keys, static_cast<int>(kRelayKeysPerRead), /*for_update=*/false, &filter_);
  });
  // In the order of `keys` (the source's key order): the relay cuts chunks by it. A key
  // whose row went meanwhile is left out.
  std::unordered_map<std::string, size_t> at;
  for (size_t i = 0; i < rows.size(); ++i) at.emplace(EncodeKey(KeyOf(rows[i])), i);
  std::vector<Row> out;
  out.reserve(rows.size());
  for (const Row& k : keys) {
    auto it = at.find(EncodeKey(k));
    if (it != at.end()) out.push_back(std::move(rows[it->second]));
  }
  return out;
}

Row DbSourceSide::KeyOf(const Row& row) const {
  Row key;
  key.reserve(key_pos_.size());
  for (int i : key_pos_) key.push_back(row.at(static_cast<size_t>(i)));
  return key;
}

DbTargetReads::DbTargetReads(storage::ConnectionPool& pool, std::string table, ColumnSet cols, ColumnSet key,
                             BoundFilter filter)
    : pool_(pool), table_(std::move(table)), cols_(std::move(cols)), key_(std::move(key)), filter_(std::move(filter)) {}

RangeChecksum DbTargetReads::Checksum(const KeyRange& range) {
  return pool_.Run("relay target checksum",
                   [&](storage::Connection& c) { return ChecksumRange(c, table_, cols_, key_, filter_, range); });
}

KeyHashes DbTargetReads::Hashes(const KeyRange& range) {
  return pool_.Run("relay target hashes",
                   [&](storage::Connection& c) { return RowHashes(c, table_, cols_, key_, filter_, range, 0); });
}

std::optional<Row> DbTargetReads::NthKeyAfter(const std::optional<Row>& lo, size_t n) {
  return pool_.Run("relay target range end",
                   [&](storage::Connection& c) { return table::NthKeyAfter(c, table_, key_, filter_, lo, n); });
}

}  // namespace dsync::table
