// One database transaction on a connection the caller holds: BEGIN, the caller's
// statements, then COMMIT or ROLLBACK; the one place that knows what a failure of each
// means. Used by ConnectionPool::Transact, the saga engine's step transactions and the
// commit groups.
//
//   storage::Transaction tx(conn, "record step");   // BEGIN
//   conn.Execute(...);                               // throws StatementError
//   tx.Commit();                                     // or the destructor rolls back
//
// Failures (all DbError, worded "<what>: ..."):
//   - Fail(e) turns a statement's StatementError into the error to throw: a lost
//     connection marks it broken (the pool then discards it) and closes the
//     transaction (the server rolled it back); anything else leaves it open for the
//     caller's Rollback().
//   - Commit() on a connection lost during COMMIT throws kCommitUnknown: the commit may
//     or may not have applied, so the caller must not retry it as if it had not.
//
// Thread safety: one thread, like its Connection.
#pragma once

#include <string>
#include <string_view>

#include "core/error.h"
#include "storage/connection.h"

namespace dsync::storage {

class Transaction {
 public:
  // Does not begin: Begin() does (so a caller may set the isolation level first).
  Transaction(Connection& c, std::string what) : c_(c), what_(std::move(what)) {}
  ~Transaction() { Rollback(); }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // BEGIN. Throws DbError.
  void Begin();
  // For a session with autocommit off, where every statement is inside a transaction
  // that COMMIT or ROLLBACK ends: marks it open without sending anything.
  void BeginImplicitly() { open_ = true; }
  // COMMIT. Throws DbError; kCommitUnknown when the connection was lost during it.
  // `what` names the unit of work in the error instead of the constructor's name.
  void Commit() { Commit(what_); }
  void Commit(std::string_view what);
  // ROLLBACK if open; best effort (a failure marks the connection broken).
  void Rollback() noexcept;

  // The error to throw for a statement of this transaction that failed (see above).
  DbError Fail(const StatementError& e) { return Fail(e, what_); }
  DbError Fail(const StatementError& e, std::string_view what);

  bool open() const { return open_; }
  Connection& connection() { return c_; }
  const std::string& what() const { return what_; }

 private:
  Connection& c_;
  const std::string what_;
  bool open_ = false;
};

}  // namespace dsync::storage
