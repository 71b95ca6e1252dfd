// From binlog items to captured transactions (pure logic, no I/O): which keys of
// which captured tables each committed transaction changed, which captured tables a
// DDL touched, and the GTID position after it.
//
//   TransactionAssembler assembler({"orders", "order_line"});
//   if (auto t = assembler.Feed(item)) { ... t->keys["orders"] ... }
//
// A transaction begins with its GTID event and ends with its commit (XID, or COMMIT of
// a non-transactional table); a standalone GTID (a DDL) ends with its statement. Row
// changes of a transaction that never commits in the stream (the stream broke) are
// dropped with it: the next reader reads the whole transaction again.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "capture/binlog_stream.h"

namespace dsync::capture {

// A MariaDB GTID position: the last transaction of each replication domain.
class GtidPosition {
 public:
  GtidPosition() = default;
  // "0-11-42,1-12-7" ("" = empty). Throws std::invalid_argument when malformed.
  static GtidPosition Parse(const std::string& text);
  void Advance(uint32_t domain, uint32_t server, uint64_t sequence);
  std::string Text() const;  // domains in ascending order
  bool empty() const { return domains_.empty(); }

 private:
  struct Last {
    uint32_t server = 0;
    uint64_t sequence = 0;
  };
  std::map<uint32_t, Last> domains_;
};

struct CapturedTransaction {
  uint32_t domain = 0, server = 0;
  uint64_t sequence = 0;
  uint32_t committed_at = 0;  // source clock, seconds
  std::string file;           // binlog file and offset after its last event
  uint64_t end_pos = 0;
  // table -> its changed keys (each once, by their JSON text)
  std::map<std::string, std::map<std::string, nlohmann::json>> keys;
  // table -> why its capture must pause (a DDL on it, a row image that does not fit)
  std::map<std::string, std::string> pause;
  int64_t row_changes = 0;    // rows changed in captured tables (an UPDATE's row counts once)

  std::string GtidText() const;  // "domain-server-sequence"
};

class TransactionAssembler {
 public:
  explicit TransactionAssembler(std::set<std::string> tables) : tables_(std::move(tables)) {}

  // The transaction `item` completes, if any.
  std::optional<CapturedTransaction> Feed(const BinlogItem& item);

 private:
  std::set<std::string> tables_;
  std::optional<CapturedTransaction> open_;
  bool standalone_ = false;
};

// The captured tables a statement changes the definition of (ALTER, CREATE, DROP,
// RENAME, TRUNCATE naming one of them as a word, with or without backticks or schema);
// empty for any other statement. Conservative: a same-named table of another schema
// matches too.
std::set<std::string> DdlTables(const std::string& statement, const std::set<std::string>& tables);

}  // namespace dsync::capture
