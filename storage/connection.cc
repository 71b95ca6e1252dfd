#include "storage/connection.h"

#include <mysql_driver.h>

#include <cppconn/resultset_metadata.h>
#include <cppconn/statement.h>

namespace dsync::storage {
namespace {

// Connector/C++ wants driver->threadInit() on every thread that uses it (other than
// the one that created the driver) and threadEnd() when the thread exits.
sql::Driver* Driver() {
  static sql::Driver* driver = sql::mysql::get_mysql_driver_instance();
  struct ThreadGuard {
    ThreadGuard() { driver->threadInit(); }
    ~ThreadGuard() { driver->threadEnd(); }
  };
  thread_local ThreadGuard guard;
  return driver;
}

DbError::Kind KindOf(int code) {
  switch (code) {
    case 1213: return DbError::Kind::kDeadlock;
    case 1205: return DbError::Kind::kLockWaitTimeout;
    case 1062: return DbError::Kind::kDuplicateKey;
    case 1146: return DbError::Kind::kNoSuchTable;
    case 1044: case 1045: case 1698: return DbError::Kind::kAccessDenied;
    case 1049: return DbError::Kind::kUnknownDatabase;
    case 2002: case 2003: case 2005: return DbError::Kind::kUnreachable;
    // 2006 gone away, 2013 lost during query, 2055 lost at reading/writing,
    // 1927 (MariaDB) / 1053 / 1077 / 1078 / 1079 connection killed / server shutdown,
    // 2014 commands out of sync (state unknown), 4031 (MySQL) disconnected by server.
    // 1047 is Galera's "WSREP has not yet prepared node for application use": this
    // member left the primary component (or has not joined yet). The session is of no
    // use until it rejoins, so it counts as lost: dropped, retried on a fresh connection
    // (the pool's connect skips members that are not ready), and, when it comes back
    // from COMMIT, the outcome is unknown (the write set may have been ordered in the
    // primary component before this member dropped out). A certification failure
    // (another member's conflicting write set won) comes back as 1213 and is a
    // deadlock: nothing applied anywhere, retried from BEGIN like any deadlock.
    case 2006: case 2013: case 2055: case 1927: case 1053: case 1077: case 1078:
    case 1079: case 2014: case 4031: case 2026: case 2048: case 1047:
      return DbError::Kind::kConnectionLost;
    default: return DbError::Kind::kOther;
  }
}

// Params: none. Rows (Variable_name, Value); none on a server without Galera support.
constexpr const char* kShowWsrepOn = "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'";
// Params: none. SHOW works on a member that is not ready (a SELECT would get 1047).
constexpr const char* kShowWsrepStatus =
    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_ready', 'wsrep_cluster_status')";

// Empty when the server may take writes: a server without Galera (MySQL, or MariaDB
// with wsrep_on OFF), or a Galera member that is ready and in the primary component.
// Otherwise why not, for the error message.
std::string NotReadyReason(sql::Statement& st) {
  {
    std::unique_ptr<sql::ResultSet> rs(st.executeQuery(kShowWsrepOn));
    if (!rs->next() || std::string(rs->getString(2)) != "ON") return "";
  }
  std::string ready = "?", status = "?";
  std::unique_ptr<sql::ResultSet> rs(st.executeQuery(kShowWsrepStatus));
  while (rs->next()) {
    std::string name = rs->getString(1);
    (name == "wsrep_ready" ? ready : status) = rs->getString(2);
  }
  if (ready == "ON" && status == "Primary") return "";
  return "Galera member not ready (wsrep_ready " + ready + ", wsrep_cluster_status " + status + ")";
}

std::string OneLine(std::string s) {
  for (char& c : s) if (c == '\n' || c == '\r') c = ' ';
  return MaskPasswords(s);
}

}  // namespace

namespace bind {

int One(sql::PreparedStatement& ps, int i, const Value& v) {
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) ps.setNull(i, 0);
        else if constexpr (std::is_same_v<T, std::string>) ps.setString(i, sql::SQLString(x.data(), x.size()));
        else if constexpr (std::is_same_v<T, int64_t>) ps.setInt64(i, x);
        else if constexpr (std::is_same_v<T, uint64_t>) ps.setUInt64(i, x);
        else if constexpr (std::is_same_v<T, double>) ps.setDouble(i, x);
        else ps.setBoolean(i, x);
      },
      v);
  return 1;
}

int One(sql::PreparedStatement& ps, int i, const ValueList& list) {
  for (const Value& v : list.values) i += One(ps, i, v);
  return static_cast<int>(list.values.size());
}

}  // namespace bind

StatementError Translate(const sql::SQLException& e) {
  int code = e.getErrorCode();
  std::string what = OneLine(e.what());
  if (what.empty()) what = "error " + std::to_string(code);
  return StatementError(KindOf(code), code, what + " (" + std::to_string(code) + ")");
}

DbError StatementError::WithContext(std::string_view context) const {
  return DbError(kind(), code(), std::string(context) + ": " + what());
}

DbError TranslateSqlException(const sql::SQLException& e, std::string_view context) {
  return Translate(e).WithContext(context);
}

int ResultSet::columnCount() const {
  return Guard([&] { return static_cast<int>(rs_->getMetaData()->getColumnCount()); });
}

std::string ResultSet::columnLabel(int col) const {
  return Guard([&] { return std::string(rs_->getMetaData()->getColumnLabel(col)); });
}

Connection::Connection(const DbUrl& url) : Connection(url, 0) {}

Connection::Connection(const DbUrl& url, size_t first_host) {
  if (url.hosts.empty()) throw UsageError("database URL has no host: " + url.Masked());
  if (url.hosts.size() == 1) {
    Open(url, 0);
    return;
  }
  // Members in ring order from first_host; the first that answers and is ready wins.
  std::string tried;
  std::optional<DbError> last;
  for (size_t i = 0; i < url.hosts.size(); ++i) {
    size_t index = (first_host + i) % url.hosts.size();
    try {
      Open(url, index);
      return;
    } catch (const DbError& e) {
      // Wrong credentials or schema are the same on every member: say so at once.
      if (e.kind() == DbError::Kind::kAccessDenied || e.kind() == DbError::Kind::kUnknownDatabase)
        throw DbError(e.kind(), e.code(), url.Masked() + ": " + e.what());
      tried += (tried.empty() ? "" : "; ") + std::string(e.what());
      last = e;
    }
  }
  throw DbError(last->kind(), last->code(), url.Masked() + ": no host is ready: " + tried);
}

void Connection::Open(const DbUrl& url, size_t index) {
  const DbHost& host = url.hosts.at(index);
  host_index_ = index;
  auto seconds = [](std::chrono::milliseconds ms) {
    return static_cast<int>(std::max<int64_t>(1, (ms.count() + 999) / 1000));
  };
  sql::ConnectOptionsMap opts;
  opts["hostName"] = sql::SQLString("tcp://" + host.Label());
  opts["userName"] = sql::SQLString(url.user);
  opts["password"] = sql::SQLString(url.password);
  // With several hosts, readiness is checked before the schema is selected: a member
  // outside the primary component may lack a schema created meanwhile, and "not
  // ready" is the answer that moves us on to the next. With one host there is no
  // other to move to: a member that is not ready fails the first statement (1047, a
  // lost connection, retried), so the session is opened as it always was.
  const bool choose = url.hosts.size() > 1;
  if (!choose && !url.schema.empty()) opts["schema"] = sql::SQLString(url.schema);
  if (!url.socket.empty()) opts["socket"] = sql::SQLString(url.socket);
  opts["OPT_CONNECT_TIMEOUT"] = seconds(url.connect_timeout);
  opts["OPT_READ_TIMEOUT"] = seconds(url.read_timeout);
  opts["OPT_WRITE_TIMEOUT"] = seconds(url.write_timeout);
  // Reconnection is ours (the pool): a silent driver reconnect would lose the session
  // time zone, open transactions and prepared statements.
  opts["OPT_RECONNECT"] = false;
  opts["CLIENT_FOUND_ROWS"] = true;
  opts["OPT_CHARSET_NAME"] = sql::SQLString("utf8mb4");
  const std::string where = choose ? host.Label() : url.Masked();
  try {
    conn_.reset(Driver()->connect(opts));
    std::unique_ptr<sql::Statement> st(conn_->createStatement());
    // Every DATETIME the project writes or compares is UTC on the database clock.
    // Framework transactions are short: a row lock held 10 s means something is
    // wrong, and Transact's retries of 1205 must not add up to minutes.
    st->execute("SET time_zone = '+00:00', innodb_lock_wait_timeout = 10");
    if (url.idle_transaction_timeout.count() > 0) {
      try {
        st->execute("SET SESSION idle_transaction_timeout = " +
                    std::to_string(url.idle_transaction_timeout.count()));
      } catch (const sql::SQLException& e) {
        if (e.getErrorCode() != 1193) throw;  // unknown system variable: MySQL
      }
    }
    if (choose) {
      if (std::string why = NotReadyReason(*st); !why.empty()) {
        throw DbError(DbError::Kind::kUnreachable, 0, "connect to " + where + ": " + why);
      }
      if (!url.schema.empty()) conn_->setSchema(sql::SQLString(url.schema));
    }
    std::unique_ptr<sql::ResultSet> rs(st->executeQuery("SELECT CONNECTION_ID()"));
    if (rs->next()) server_id_ = rs->getUInt64(1);
  } catch (const sql::SQLException& e) {
    conn_.reset();  // `st` is gone already
    throw TranslateSqlException(e, "connect to " + where);
  }
}

Connection::~Connection() {
  statements_.clear();
  text_.reset();
  if (conn_) {
    try { conn_->close(); } catch (...) {}
  }
}

sql::PreparedStatement& Connection::Prepared(std::string_view sql) {
  std::string key(sql);
  auto it = statements_.find(key);
  if (it != statements_.end()) {
    lru_.splice(lru_.end(), lru_, it->second.lru_position);
    return *it->second.statement;
  }
  if (statements_.size() >= kMaxCachedStatements) {
    statements_.erase(lru_.front());  // closes the server-side statement
    lru_.pop_front();
  }
  std::unique_ptr<sql::PreparedStatement> ps(conn_->prepareStatement(sql::SQLString(sql.data(), sql.size())));
  auto& ref = *ps;
  lru_.push_back(key);
  statements_.emplace(std::move(key), Cached{std::move(ps), std::prev(lru_.end())});
  return ref;
}

void Connection::ExecuteDdl(const std::string& ddl) { RunText(ddl); }

// Transaction control goes over the text protocol (not every server prepares it).
void Connection::Begin() { RunText("START TRANSACTION"); }

void Connection::Commit() { RunText("COMMIT"); }

void Connection::RunText(const std::string& text) {
  try {
    Text().execute(text);
  } catch (const sql::SQLException& e) {
    throw Translate(e);
  }
}

void Connection::Rollback() noexcept {
  try {
    Text().execute("ROLLBACK");
  } catch (...) {
    broken_ = true;
  }
}

sql::Statement& Connection::Text() {
  if (!text_) text_.reset(conn_->createStatement());
  return *text_;
}

bool Connection::Ping() noexcept {
  try {
    auto rs = Query("SELECT 1");
    return rs->next();
  } catch (...) {
    return false;
  }
}

}  // namespace dsync::storage
