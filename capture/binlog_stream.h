// A capture's connection to its source as a replica (MariaDB's replication protocol,
// through libmariadb's mariadb_rpl_* API, Debian libmariadb-dev): it asks for the
// binlog from a GTID position and turns each binlog event into a BinlogItem, decoding
// of each ROWS event only the primary keys of the changed rows (capture/row_image.h)
// of the tables a KeyCatalog names.
//
//   BinlogStream stream(url, server_id, catalog, {.heartbeat = 500ms});
//   stream.Open("0-11-42");                 // after transaction 0-11-42 of domain 0
//   for (;;) { BinlogItem item = stream.Next(); ... }   // blocks at most ~a heartbeat
//
// The server sends a heartbeat when it has had nothing to send for `heartbeat`, so
// Next() returns at least that often (kHeartbeat) while the source is idle; a source
// that is silent for 4 heartbeats is a lost connection (the read times out).
//
// Errors: StreamError with a one-line message; kind() tells the runner what to do
// (kPurged and kRefused are definitive until an operator acts, kConnection is retried).
//
// Thread safety: one thread uses a stream at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture/row_image.h"
#include "storage/db_url.h"

namespace dsync::capture {

class StreamError : public std::runtime_error {
 public:
  enum class Kind {
    kConnection,  // could not connect, connection lost, the server went away: retry
    kRefused,     // the user lacks a privilege, the server is not a MariaDB with a binlog
    kPurged,      // the start position is no longer in the source's binlogs
    kFormat,      // an event or row could not be decoded
  };
  StreamError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// The primary key of a captured table as row images lay it out.
struct TableKey {
  std::vector<KeyColumn> columns;
  size_t column_count = 0;  // the table's columns now (a TABLE_MAP with another count: the table changed)
};

// Which tables are captured, and their keys. Keys() returns null for a table that is
// not captured. Called on the stream's thread.
class KeyCatalog {
 public:
  virtual ~KeyCatalog() = default;
  virtual const TableKey* Keys(const std::string& schema, const std::string& table) = 0;
};

struct BinlogItem {
  enum class Type {
    kGtid,       // a transaction begins: gtid, timestamp, standalone (a DDL: no commit event follows)
    kRows,       // a captured table's rows changed: table, keys
    kShapeChange,// a captured table's TABLE_MAP does not match its key: table, text
    kCommit,     // the transaction committed (XID, or COMMIT of a non-transactional one)
    kQuery,      // a statement: schema, text (DDL; BEGIN and COMMIT are not reported)
    kHeartbeat,  // nothing new
    kOther,
  };
  Type type = Type::kOther;
  uint32_t timestamp = 0;     // the event's header time (source clock, seconds)
  std::string file;           // the binlog file this event is in
  uint64_t end_pos = 0;       // offset after this event in `file`
  // kGtid
  uint32_t domain = 0, server = 0;
  uint64_t sequence = 0;
  bool standalone = false;
  // kRows, kShapeChange, kQuery
  std::string schema, table, text;
  std::vector<nlohmann::json> keys;  // kRows: key arrays (an UPDATE: before and after of each row)
  int64_t rows = 0;                  // kRows: rows changed (an UPDATE's row counts once)
};

struct StreamOptions {
  std::chrono::milliseconds heartbeat{500};
  std::chrono::milliseconds connect_timeout{5000};
};

class BinlogStream {
 public:
  // `catalog` must outlive the stream. Does not connect.
  BinlogStream(storage::DbUrl url, uint32_t server_id, KeyCatalog& catalog, StreamOptions options = {});
  ~BinlogStream();
  BinlogStream(const BinlogStream&) = delete;
  BinlogStream& operator=(const BinlogStream&) = delete;

  // Connects and asks for the binlog after `gtid_position` ("" = from the oldest
  // binlog). Throws StreamError.
  void Open(const std::string& gtid_position);
  // The next item; blocks until the server sends something. Throws StreamError.
  BinlogItem Next();
  void Close();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A replica server id for a capture: stable per (service, capture), in
// [2^30, 2^31), away from the small ids servers are usually given.
uint32_t CaptureServerId(const std::string& service, const std::string& capture);

}  // namespace dsync::capture
