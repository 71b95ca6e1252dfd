// The source half of a table_sync: what the lane loop (table/sync.h) asks of the
// source database. Only reads, of the rows the step's filter matches: a range's
// checksum, its rows' keys and hashes, its rows, the rows of given keys, which keys are
// absent; and ReadAhead, which reads the next range on another thread while the target
// works on this one.
//
// Thread safety: a SourceReader may be used by several lanes at once (each call takes
// its own connection). A ReadAhead belongs to one lane.
#pragma once

#include <future>
#include <optional>
#include <string>
#include <vector>

#include "storage/connection_pool.h"
#include "table/chunks.h"
#include "table/planner.h"
#include "table/spec.h"
#include "table/sql.h"

namespace dsync::table {

class SourceReader {
 public:
  // `filter`: the step's filter bound for the source. References must outlive the reader.
  SourceReader(storage::ConnectionPool& pool, const Spec& spec, const Plan& plan, const BoundFilter& filter);

  RangeChecksum Checksum(const KeyRange& range);
  // The keys and row hashes of the range's rows, in key order, at most `limit` (0: all).
  KeyHashes RowHashes(const KeyRange& range, size_t limit = 0);
  // The range's rows (synced columns), in key order, at most `limit` (0: all).
  std::vector<Row> Rows(const KeyRange& range, size_t limit);
  // The rows whose key is among `keys`.
  std::vector<Row> RowsOfKeys(const std::vector<Row>& keys);
  // The key of the n-th row after `lo`; nullopt when fewer rows follow.
  std::optional<Row> NthKeyAfter(const std::optional<Row>& lo, size_t n);
  // Of `candidates` (target keys), those the source has no row for that matches the
  // filter (by SQL comparison, so a key that differs only in case under a _ci
  // collation is found).
  std::vector<Row> MissingKeys(const std::vector<Row>& candidates);

 private:
  storage::ConnectionPool& pool_;
  const Spec& spec_;
  const Plan& plan_;
  const BoundFilter& filter_;
};

// A range of the source read ahead on another thread, while the chunk before it is
// worked on (source and target are different servers). `Result` is what a read gives:
// the range's rows, or their row hashes.
//   ReadAhead<std::vector<Row>> ahead;
//   rows = ahead.Take(lo, size, read);            // read ahead from lo, else read(lo, size) now
//   if (rows.size() == size) ahead.Start(hi, next_size, read);
// Take sets `size` to the size the range was read with (a range read ahead has the size
// planned one chunk earlier), so "fewer rows than asked: the end" still holds.
// Dropping it (Drop, a Take from another key, destruction) waits for the read.
template <class Result>
class ReadAhead {
 public:
  template <class Read>
  Result Take(const std::optional<Row>& lo, size_t& size, Read&& read) {
    if (ahead_ && ahead_->lo == lo) {
      Ahead a = std::move(*ahead_);
      ahead_.reset();
      size = a.size;
      return a.result.get();
    }
    ahead_.reset();
    return read(lo, size);
  }
  template <class Read>
  void Start(const Row& lo, size_t size, Read& read) {
    ahead_.reset();
    ahead_ = Ahead{lo, size, std::async(std::launch::async, [&read, lo, size] { return read(lo, size); })};
  }
  void Drop() { ahead_.reset(); }

 private:
  struct Ahead {
    std::optional<Row> lo;
    size_t size = 0;
    std::future<Result> result;
  };
  std::optional<Ahead> ahead_;
};

}  // namespace dsync::table
