// Retention (docs/event-lifecycle.md "Retention"): finished events and their steps
// deleted, or moved to distribute_event_archive / distribute_event_step_archive, in
// small batches. Used by the dispatcher leader (dispatcher/retention_loop.h, config
// `retention`) and by `dsync purge`.
//
// Only one service's terminal events (SUCCESS, COMPENSATED, FAILED) whose finish
// (COALESCE(finished_time, modifier_time)) is older than the bound, by the database
// clock, are ever removed; their steps go with them in the same transaction. One batch:
//
//   1. scan (no locks): up to `batch` ids in (create_time, id) order after a cursor,
//      through idx_create_time (an event finishes after it is created, so
//      create_time < bound prunes the scan to old rows without a new index on the hot
//      path);
//   2. one short transaction:
//        SELECT id, code, status ... WHERE id IN (...) AND <still terminal and old>
//          FOR UPDATE SKIP LOCKED       -- record locks by primary key only; a row a
//                                       -- retry holds is skipped, never waited for
//        [INSERT INTO ..._step_archive SELECT ... WHERE id IN (step ids)]
//        DELETE FROM distribute_event_step WHERE id IN (step ids)
//        [INSERT INTO distribute_event_archive SELECT ... WHERE id IN (ids)]
//        DELETE FROM distribute_event WHERE id IN (ids)
//      Every statement is by primary key, so no gap lock ever blocks a producer's
//      INSERT or a node's step rows; the re-check under the row lock means an event
//      `dsync retry` re-drove in between is left alone.
//
// Thread safety: a Purger is used by one thread at a time; stateless otherwise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/service.h"
#include "storage/connection.h"

namespace dsync::events {

// The terminal statuses; `IsTerminalStatus` says whether a status is one of them.
const std::vector<std::string>& TerminalStatuses();
bool IsTerminalStatus(const std::string& status);

// Which events a purge removes: terminal events of `service` with these statuses
// (each must be terminal) finished more than `older_than` ago.
struct PurgeSelector {
  std::vector<std::string> statuses;
  Millis older_than{0};
  std::string service = kDefaultService;  // config `service`
};

struct PurgeCounts {
  int64_t events = 0;
  int64_t steps = 0;
  std::map<std::string, int64_t> by_status;  // events
  int64_t batches = 0;                       // transactions committed (0 for a count)

  PurgeCounts& operator+=(const PurgeCounts& o);
};

// Where a pass has got to: the last (create_time, id) it handled.
struct PurgeCursor {
  std::string create_time = "1000-01-01 00:00:00.000000";
  int64_t id = 0;
  std::string bound;  // the finish bound, fixed at the pass's start (database clock)
  bool done = false;  // the last scan found fewer than a batch
};

// What a purge would remove, counted without writing (`dsync purge --dry-run`).
// Throws DbError.
PurgeCounts CountPurgeable(storage::Connection& c, const PurgeSelector& selector);

class Purger {
 public:
  // `archive`: move rows to the archive tables instead of deleting them. `batch`:
  // events per transaction (their steps go with them).
  Purger(bool archive, int batch);

  // Starts a pass: fixes the bound NOW(3) - older_than. Throws DbError.
  PurgeCursor Begin(storage::Connection& c, const PurgeSelector& selector);
  // Scans the next candidates of `cursor` (autocommit read) and advances it. Throws
  // DbError.
  std::vector<int64_t> NextCandidates(storage::Connection& c, const PurgeSelector& selector, PurgeCursor& cursor);
  // The transaction of step 2 for `ids`. REQUIRES: inside the caller's transaction
  // (ConnectionPool::Transact). Returns what it removed. Throws DbError.
  PurgeCounts RemoveBatch(storage::Connection& c, const PurgeSelector& selector, const PurgeCursor& cursor,
                          const std::vector<int64_t>& ids);

 private:
  // "col1, col2, ...": the columns the live and archive table share, read once.
  const std::string& SharedColumns(storage::Connection& c, const std::string& table);

  const bool archive_;
  const int batch_;
  std::map<std::string, std::string> columns_;  // live table -> shared column list
};

}  // namespace dsync::events
