// A bounded pool of database connections, and the two ways work touches the
// database: Run (autocommit statements) and Transact (one transaction).
//
//   storage::ConnectionPool pool(storage::DbUrl::Parse(url));
//   int n = pool.Transact("assign", [&](storage::Connection& c) {
//     return c.Execute(kAssignSql, node, id, version);
//   });
//
// Hosts: a new connection goes to the host the pool writes through (at first the
// URL's first host; with order=random one picked per process, from its pid, so every
// pool of a process starts on the same one) and, if that one does not
// answer or is not ready (a Galera member outside the primary component), to the next
// in the list that is, which then becomes the one the pool writes through
// (DB_FAILOVER). The pool stays there while it is healthy, even once the previous
// host is back: one process's writes go through one member, so they do not conflict
// with each other in certification. Connections still open to the previous host are
// closed as they are returned.
//
// Borrowing validates a connection that sat idle longer than `validate_idle_after`
// (one `SELECT 1`), replacing it if the server closed it. A connection whose session
// is lost mid-use (2006/2013, KILL CONNECTION, a server restart) is discarded, never
// returned to the pool.
//
// Retries, all bounded by RetryPolicy.max_attempts with jittered exponential sleep:
//   - Run: a lost connection is retried on a fresh connection. `fn` must be safe to
//     run twice (a read, an upsert, a fenced conditional UPDATE).
//   - Transact: an optional Isolation for that transaction only (SET TRANSACTION
//     before BEGIN); deadlock (1213, also Galera's certification failure, at any
//     statement including COMMIT: nothing applied), lock-wait timeout (1205) and a
//     connection lost before COMMIT are retried from BEGIN. A connection lost *during* COMMIT is not
//     retried: it throws DbError{kCommitUnknown}, since the commit may have applied.
// Anything else propagates at once as DbError (storage::Transaction words the
// failures; no driver type escapes).
//
// Thread safety: all members are thread-safe. Leases are used by one thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/metrics.h"
#include "storage/connection.h"
#include "storage/db_url.h"
#include "storage/transaction.h"

namespace dsync::storage {

struct RetryPolicy {
  int max_attempts = 6;              // total tries, first included
  Millis base_delay{5};              // doubled per attempt, jittered in [d/2, d]
  Millis max_delay{500};
};

struct PoolStats {
  int max_size = 0;
  int open = 0;       // connections currently open (idle + lent)
  int in_use = 0;     // lent out now
  uint64_t connects = 0;        // connections opened, ever
  uint64_t discarded = 0;       // connections dropped as broken
  uint64_t borrow_waits = 0;    // borrows that had to wait for a free connection
  uint64_t retries = 0;         // units of work re-run after a retryable error
  uint64_t failovers = 0;       // times new connections moved to another host
  std::string host;             // the host new connections go to now ("name:port")
};

// The pool's families of /metrics (dsync_db_pool_*, dsync_db_retries_total);
// storage/pool_metrics.cc.
void WriteMetrics(const PoolStats& stats, metrics::TextWriter& w);

// A transaction's isolation level: the session's (the server default, REPEATABLE READ
// unless configured), or READ COMMITTED (no gap locks: concurrent transactions that
// insert into one gap, like two key ranges of an empty table, do not block each other).
enum class Isolation { kSession, kReadCommitted };

struct PoolOptions {
  int max_size = 0;                 // 0: the URL's pool_size
  Millis borrow_timeout{10000};     // then DbError{kPoolExhausted}
  Millis validate_idle_after{1000}; // idle longer than this: ping before lending
  RetryPolicy retry;
};

class ConnectionPool {
 public:
  using Options = PoolOptions;

  // Does not connect; the first borrow does. `clock` must outlive the pool.
  ConnectionPool(DbUrl url, PoolOptions options, Clock& clock);
  explicit ConnectionPool(DbUrl url, PoolOptions options = PoolOptions());
  ~ConnectionPool();

  class Lease {
   public:
    Lease(ConnectionPool* pool, std::unique_ptr<Connection> conn)
        : pool_(pool), conn_(std::move(conn)) {}
    Lease(Lease&&) = default;
    Lease& operator=(Lease&&) = delete;
    ~Lease() { if (conn_) pool_->Return(std::move(conn_)); }
    Connection* operator->() { return conn_.get(); }
    Connection& operator*() { return *conn_; }

   private:
    ConnectionPool* pool_;
    std::unique_ptr<Connection> conn_;
  };

  // A validated connection, exclusively yours until the Lease dies.
  // Throws DbError (kPoolExhausted, or the connect failure).
  Lease Borrow();

  template <class F>
  auto Run(std::string_view what, F&& fn) -> std::invoke_result_t<F&, Connection&> {
    return WithRetry(what, /*transaction=*/false, fn);
  }

  template <class F>
  auto Transact(std::string_view what, F&& fn) -> std::invoke_result_t<F&, Connection&> {
    return WithRetry(what, /*transaction=*/true, fn);
  }
  template <class F>
  auto Transact(std::string_view what, Isolation isolation, F&& fn) -> std::invoke_result_t<F&, Connection&> {
    return WithRetry(what, /*transaction=*/true, fn, isolation);
  }

  // Opens connections at once, each on its own thread, until `n` are open (at most the
  // pool's size), and keeps them idle: work about to borrow several at a time (a
  // table_sync step's lanes) then does not connect one after another in its critical
  // path (a connection is 1-3 ms here: TCP, authentication, session setup). Returns
  // when they are open; a connection that fails is left to the borrow that meets it.
  void Prewarm(int n);

  // For a user that keeps a lease between units of work (saga::CommitGroups): whether
  // it may keep `c` now. True while `c` reached the host the pool writes through (not
  // after a failover, as Return() checks for the rest) and another borrow would not
  // have to wait (an idle connection, or room to open one).
  bool MayKeep(const Connection& c);

  // Interrupts the statement each connection lent out now is running (`KILL QUERY`
  // through a connection of its own, to the same server): a drain that timed out uses
  // it to stop a step blocked on a row lock or a long query, which then fails with
  // 1317 (query interrupted) and ends its run. Idle sessions are not touched; a lent
  // session between statements is not affected (call it again). Returns the number of
  // sessions signalled; failures are logged (DB_KILL_QUERY_FAILED), never thrown.
  int KillLentStatements();

  const DbUrl& url() const { return url_; }
  PoolStats stats();

 private:
  template <class F>
  auto WithRetry(std::string_view what, bool transaction, F& fn, Isolation isolation = Isolation::kSession)
      -> std::invoke_result_t<F&, Connection&> {
    for (int attempt = 1;; ++attempt) {
      try {
        Lease c = Borrow();
        if (!transaction) {
          try {
            return fn(*c);
          } catch (const StatementError& e) {
            if (e.kind() == DbError::Kind::kConnectionLost) c->mark_broken();
            throw e.WithContext(what);
          }
        }
        Transaction tx(*c, std::string(what));  // rolls back unless committed
        try {
          if (isolation == Isolation::kReadCommitted) {
            c->ExecuteDdl("SET TRANSACTION ISOLATION LEVEL READ COMMITTED");
          }
          tx.Begin();
          if constexpr (std::is_void_v<std::invoke_result_t<F&, Connection&>>) {
            fn(*c);
            tx.Commit();
            return;
          } else {
            auto result = fn(*c);
            tx.Commit();
            return result;
          }
        } catch (const StatementError& e) {
          throw tx.Fail(e);
        }
      } catch (const DbError& err) {
        bool retryable = err.kind() == DbError::Kind::kConnectionLost ||
                         (transaction && err.retryable_in_transaction());
        if (!retryable || attempt >= options_.retry.max_attempts) throw;
        retries_.fetch_add(1, std::memory_order_relaxed);
        spdlog::debug("DB_RETRY what={} attempt={} err={}", what, attempt, err.what());
        BackOff(attempt);
      }
    }
  }

  void Return(std::unique_ptr<Connection> conn);
  // PoolOptions::max_size, or the URL's pool_size when that is 0.
  int MaxSize() const { return options_.max_size > 0 ? options_.max_size : url_.pool_size; }
  void BackOff(int attempt);
  void ChooseFirstHost();

  const DbUrl url_;
  const Options options_;
  SystemClock own_clock_;
  Clock& clock_;

  std::mutex mu_;
  std::condition_variable cv_;
  struct Idle {
    std::unique_ptr<Connection> conn;
    Clock::TimePoint since;
  };
  std::vector<Idle> idle_;  // LIFO: the warmest connection is reused first
  // Connections lent out now: (host index, server id), for KillLentStatements.
  std::map<const Connection*, std::pair<size_t, uint64_t>> lent_;
  int open_ = 0;            // idle + lent + being opened
  int in_use_ = 0;
  uint64_t connects_ = 0, discarded_ = 0, borrow_waits_ = 0, failovers_ = 0;
  size_t preferred_host_ = 0;  // index in url_.hosts new connections try first
  std::atomic<uint64_t> retries_{0};
  std::mt19937 rng_{std::random_device{}()};
};

}  // namespace dsync::storage
