// Evicting a stale lock holder: a statement that waits for a row lock which only an
// owner that lost its work can hold (a node frozen by SIGSTOP, or cut off, inside a
// transaction of a step it no longer owns) would otherwise wait as long as that node
// stays frozen: the database never ends a transaction whose session is alive. While
// `fn` runs on `c`, a watcher on a connection of its own (to the same server) looks
// every `poll` for the transaction `c` waits for; once `c` has waited `after` for the
// same blocker, the blocker's session is killed (KILL: its transaction rolls back, and
// the frozen process finds its connection gone when it wakes up).
//
//   storage::WhileEvictingStaleLocks(pool, c, clock, Millis{3000}, "fence step", [&] { LockStep(c, ...); });
//
// Only for locks whose every other holder is stale by construction (table/chunk_table.h:
// the step row of a run taken over by a later claim). Finding the blocker reads
// information_schema.INNODB_LOCK_WAITS (MariaDB) or performance_schema.data_lock_waits
// (MySQL 8.0); where neither answers, or KILL is refused (another user's session
// without the PROCESS/CONNECTION ADMIN privilege), it logs once and the statement
// waits as before. Logged: DB_LOCK_HOLDER_EVICTED with the session ids and the wait.
//
// Thread safety: one call per connection at a time; the watcher is joined before return.
#pragma once

#include <functional>
#include <string_view>

#include "core/clock.h"
#include "storage/connection.h"
#include "storage/connection_pool.h"

namespace dsync::storage {

void WhileEvictingStaleLocks(ConnectionPool& pool, Connection& c, Clock& clock, Millis after, std::string_view what,
                             const std::function<void()>& fn, Millis poll = Millis{500});

}  // namespace dsync::storage
