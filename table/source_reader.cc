#include "table/source_reader.h"

#include <unordered_set>

#include "table/row_io.h"

namespace dsync::table {

using storage::Connection;

SourceReader::SourceReader(storage::ConnectionPool& pool, const Spec& spec, const Plan& plan,
                           const BoundFilter& filter)
    : pool_(pool), spec_(spec), plan_(plan), filter_(filter) {}

RangeChecksum SourceReader::Checksum(const KeyRange& range) {
  return pool_.Run(spec_.What("checksum source"), [&](Connection& c) {
    return ChecksumRange(c, spec_.table, plan_.src_cols, plan_.src_key, filter_, range);
  });
}

KeyHashes SourceReader::RowHashes(const KeyRange& range, size_t limit) {
  return pool_.Run(spec_.What("row hashes source"), [&](Connection& c) {
    return table::RowHashes(c, spec_.table, plan_.src_cols, plan_.src_key, filter_, range, limit);
  });
}

std::vector<Row> SourceReader::Rows(const KeyRange& range, size_t limit) {
  return pool_.Run(spec_.What("read source"), [&](Connection& c) {
    return ReadRange(c, spec_.table, plan_.src_cols, plan_.src_key, filter_, range, limit, false);
  });
}

std::vector<Row> SourceReader::RowsOfKeys(const std::vector<Row>& keys) {
  return pool_.Run(spec_.What("read source rows"), [&](Connection& c) {
    return ReadByKeys(c, spec_.table, plan_.src_cols, plan_.src_key, keys, spec_.chunk_size, false, &filter_);
  });
}

std::optional<Row> SourceReader::NthKeyAfter(const std::optional<Row>& lo, size_t n) {
  return pool_.Run(spec_.What("chunk boundary"), [&](Connection& c) {
    return table::NthKeyAfter(c, spec_.table, plan_.src_key, filter_, lo, n);
  });
}

std::vector<Row> SourceReader::MissingKeys(const std::vector<Row>& candidates) {
  if (candidates.empty()) return {};
  std::vector<Row> present = pool_.Run(spec_.What("read source keys"), [&](Connection& c) {
    return ReadByKeys(c, spec_.table, plan_.src_key, plan_.src_key, candidates, spec_.chunk_size, false, &filter_);
  });
  // A key that differs only in case (a _ci collation) is present in SQL terms but
  // not as text: such a candidate is checked on its own.
  std::unordered_set<std::string> found;
  for (const Row& k : present) found.insert(EncodeKey(k));
  std::vector<Row> out;
  for (const Row& k : candidates) {
    if (found.count(EncodeKey(k)) == 0) out.push_back(k);
  }
  if (out.size() + present.size() == candidates.size()) return out;
  std::vector<Row> strict;
  for (const Row& k : out) {
    bool exists = pool_.Run(spec_.What("read source key"), [&](Connection& c) {
      return !ReadByKeys(c, spec_.table, plan_.src_key, plan_.src_key, {k}, 1, false, &filter_).empty();
    });
    if (!exists) strict.push_back(k);
  }
  return strict;
}

}  // namespace dsync::table
