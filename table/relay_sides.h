// The database sides of a relayed table_sync (table/relay.h): DbSourceSide reads the
// source table for the source half; DbTargetReads is what the target half reads of the
// target table (range checksums, row hashes, range ends), to which the target writer
// adds Apply, RecordEqual, Checkpoint and Finish.
//
//   table::DbSourceSide source(pool, "kb_doc", cols, key, filter);   // filter bound on the source
//
// Every statement is the one direct mode runs on that side (table/chunks.h), so a
// relayed sync reads each database exactly as a direct one does.
//
// Thread safety: one half's thread; the pool is thread-safe.
#pragma once

#include <string>
#include <vector>

#include "storage/connection_pool.h"
#include "table/chunks.h"
#include "table/relay.h"
#include "table/sql.h"

namespace dsync::table {

class DbSourceSide final : public SourceSide {
 public:
  DbSourceSide(storage::ConnectionPool& pool, std::string table, ColumnSet cols, ColumnSet key, BoundFilter filter);

  const ColumnSet& key() const override { return key_; }
  RangeChecksum Checksum(const KeyRange& range) override;
  KeyHashes Hashes(const KeyRange& range, size_t limit) override;
  std::vector<Row> Rows(const KeyRange& range, size_t limit) override;
  std::vector<Row> RowsOfKeys(const std::vector<Row>& keys) override;
  std::vector<std::string> column_names() const override { return cols_.names(); }
  Row KeyOf(const Row& row) const override;

 private:
  storage::ConnectionPool& pool_;
  std::string table_;
  ColumnSet cols_;
  ColumnSet key_;
  BoundFilter filter_;
  std::vector<int> key_pos_;  // the key columns' places in cols_
};

// A source side whose rows are their keys alone (a verify's source half): checksums
// and row hashes over every synced column from `full`, rows from `keys` (a side over
// the key columns only).
class KeysOnlySource final : public SourceSide {
 public:
  KeysOnlySource(SourceSide& full, SourceSide& keys) : full_(full), keys_(keys) {}
  const ColumnSet& key() const override { return full_.key(); }
  RangeChecksum Checksum(const KeyRange& range) override { return full_.Checksum(range); }
  KeyHashes Hashes(const KeyRange& range, size_t limit) override { return full_.Hashes(range, limit); }
  std::vector<Row> Rows(const KeyRange& range, size_t limit) override { return keys_.Rows(range, limit); }
  std::vector<Row> RowsOfKeys(const std::vector<Row>& keys) override { return keys_.RowsOfKeys(keys); }
  std::vector<std::string> column_names() const override { return keys_.column_names(); }
  Row KeyOf(const Row& row) const override { return keys_.KeyOf(row); }

 private:
  SourceSide& full_;
  SourceSide& keys_;
};

// The reads of the target half; a target writer derives from it.
class DbTargetReads : public TargetSide {
 public:
  DbTargetReads(storage::ConnectionPool& pool, std::string table, ColumnSet cols, ColumnSet key, BoundFilter filter);

  const ColumnSet& key() const override { return key_; }
  RangeChecksum Checksum(const KeyRange& range) override;
  KeyHashes Hashes(const KeyRange& range) override;
  std::optional<Row> NthKeyAfter(const std::optional<Row>& lo, size_t n) override;

 protected:
  storage::ConnectionPool& pool_;
  std::string table_;
  ColumnSet cols_;
  ColumnSet key_;
  BoundFilter filter_;
};

}  // namespace dsync::table
