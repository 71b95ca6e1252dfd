// One physical database connection, with its prepared statements cached by SQL text.
//
// All SQL goes through Execute/Query with `?` placeholders bound from typed
// arguments; there is no API for splicing values into SQL text. The only raw text
// execution is ExecuteDdl, used for the migrations in sql/.
//
// Errors: every failure of the driver below this layer is translated here, once, into
// StatementError (storage/result_set.h), a dsync::DbError; callers never see the
// driver's types (Query returns a storage::ResultSet).
//
// Thread safety: a Connection is used by one thread at a time (the pool lends it out
// exclusively).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include <cppconn/connection.h>
#include <cppconn/exception.h>
#include <cppconn/prepared_statement.h>
#include <cppconn/resultset.h>
#include <cppconn/statement.h>

#include "core/error.h"
#include "storage/db_url.h"
#include "storage/result_set.h"

namespace dsync::storage {

// A value for one `?` when the number of values is known only at run time
// (multi-row VALUES, IN lists): monostate is NULL.
using Value = std::variant<std::monostate, std::string, int64_t, uint64_t, double, bool>;

// A run-time list of values binding consecutive placeholders from its position:
//   c.Execute("INSERT INTO t (a, b) VALUES (?, ?), (?, ?)", storage::Values(list));
struct ValueList {
  const std::vector<Value>& values;
};
inline ValueList Values(const std::vector<Value>& values) { return {values}; }

// "?, ?, ?": n parameter marks for an IN list or a multi-row VALUES.
inline std::string Marks(size_t n) {
  std::string m;
  m.reserve(n * 3);
  for (size_t i = 0; i < n; ++i) m += i == 0 ? "?" : ", ?";
  return m;
}

// Argument binding for prepared statements. Null is std::nullopt / std::optional{}.
// Each One() binds at position i and returns how many positions it used.
namespace bind {
inline int One(sql::PreparedStatement& ps, int i, std::string_view v) {
  ps.setString(i, sql::SQLString(v.data(), v.size()));
  return 1;
}
inline int One(sql::PreparedStatement& ps, int i, const std::string& v) { ps.setString(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, const char* v) { ps.setString(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, bool v) { ps.setBoolean(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, int v) { ps.setInt(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, unsigned v) { ps.setUInt(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, long v) { ps.setInt64(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, long long v) { ps.setInt64(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, unsigned long v) { ps.setUInt64(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, double v) { ps.setDouble(i, v); return 1; }
inline int One(sql::PreparedStatement& ps, int i, std::nullopt_t) { ps.setNull(i, 0); return 1; }
template <class T>
int One(sql::PreparedStatement& ps, int i, const std::optional<T>& v) {
  if (v) return One(ps, i, *v);
  ps.setNull(i, 0);
  return 1;
}
int One(sql::PreparedStatement& ps, int i, const Value& v);
int One(sql::PreparedStatement& ps, int i, const ValueList& list);
}  // namespace bind

class Connection {
 public:
  // Connects and prepares the session (UTC time zone, autocommit on). With several
  // hosts in the URL, tries them in ring order from `first_host` and keeps the first
  // that answers and is ready (a Galera member with wsrep_ready ON in the primary
  // component; a server without Galera always is); host_index() says which. (With
  // one host there is nothing to choose: no readiness check.)
  // Throws DbError (kUnreachable, kAccessDenied, kUnknownDatabase, ...); with several
  // hosts, the message lists why each was passed over.
  explicit Connection(const DbUrl& url);
  Connection(const DbUrl& url, size_t first_host);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs a statement; returns affected rows (rows *matched* for UPDATE, as the
  // connection sets CLIENT_FOUND_ROWS). Throws StatementError.
  template <class... Args>
  uint64_t Execute(std::string_view sql, const Args&... args) {
    try {
      auto& ps = Bound(sql, args...);
      return static_cast<uint64_t>(ps.executeUpdate());
    } catch (const sql::SQLException& e) {
      throw Translate(e);
    }
  }

  // Runs a query; the result set is read before the next statement on this connection.
  // Throws StatementError.
  template <class... Args>
  std::unique_ptr<ResultSet> Query(std::string_view sql, const Args&... args) {
    try {
      auto& ps = Bound(sql, args...);
      return std::make_unique<ResultSet>(std::unique_ptr<sql::ResultSet>(ps.executeQuery()));
    } catch (const sql::SQLException& e) {
      throw Translate(e);
    }
  }

  // A single-value query; nullopt when there is no row or the value is NULL.
  template <class... Args>
  std::optional<int64_t> QueryInt(std::string_view sql, const Args&... args) {
    auto rs = Query(sql, args...);
    if (!rs->next() || rs->isNull(1)) return std::nullopt;
    return rs->getInt64(1);
  }
  template <class... Args>
  std::optional<std::string> QueryString(std::string_view sql, const Args&... args) {
    auto rs = Query(sql, args...);
    if (!rs->next() || rs->isNull(1)) return std::nullopt;
    return rs->getString(1);
  }

  // Trusted DDL text from sql/ migrations only; never user input. Throws StatementError.
  void ExecuteDdl(const std::string& ddl);

  // Transaction control (storage::Transaction is the usual way). Throw StatementError.
  void Begin();
  void Commit();
  void Rollback() noexcept;  // best effort; marks the connection broken if it fails

  // The server's id for this session (for KILL in tests and diagnostics).
  uint64_t server_id() const { return server_id_; }
  // Which of the URL's hosts this connection reached.
  size_t host_index() const { return host_index_; }
  // Set when the connection must not be reused (lost, or in an unknown state).
  bool broken() const { return broken_; }
  void mark_broken() { broken_ = true; }
  // Set by a user that changed the session (saga::CommitGroups: autocommit off): the
  // pool closes the connection when it comes back instead of lending it again.
  bool retired() const { return retired_; }
  void retire() { retired_ = true; }
  // Round trip to check the session is alive.
  bool Ping() noexcept;

 private:
  template <class... Args>
  sql::PreparedStatement& Bound(std::string_view sql, const Args&... args) {
    auto& ps = Prepared(sql);
    ps.clearParameters();
    int i = 1;
    ((i += bind::One(ps, i, args)), ...);
    (void)i;  // statements without parameters
    return ps;
  }
  void Open(const DbUrl& url, size_t host_index);  // connects to that host only
  sql::PreparedStatement& Prepared(std::string_view sql);
  sql::Statement& Text();
  void RunText(const std::string& text);  // throws StatementError

  std::unique_ptr<sql::Connection> conn_;
  // Prepared statements by SQL text, least recently used first in lru_. Bounded:
  // max_prepared_stmt_count is server-wide, and statement texts built at run time
  // (table steps) vary.
  static constexpr size_t kMaxCachedStatements = 128;
  struct Cached {
    std::unique_ptr<sql::PreparedStatement> statement;
    std::list<std::string>::iterator lru_position;
  };
  std::unordered_map<std::string, Cached> statements_;
  std::list<std::string> lru_;
  std::unique_ptr<sql::Statement> text_;
  uint64_t server_id_ = 0;
  size_t host_index_ = 0;
  bool broken_ = false;
  bool retired_ = false;
};

}  // namespace dsync::storage
