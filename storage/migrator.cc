#include "storage/migrator.h"

#include "core/process.h"

#include <cctype>
#include <random>
#include <sstream>

#include <spdlog/spdlog.h>
#include <strings.h>
#include <unistd.h>

namespace dsync::storage {
namespace {

constexpr const char* kCreateVersionTable = R"(
CREATE TABLE IF NOT EXISTS dsync_schema_version (
  version    INT NOT NULL PRIMARY KEY,
  name       VARCHAR(200) NOT NULL,
  checksum   VARCHAR(32) NOT NULL COMMENT 'FNV-1a of the migration text',
  applied_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  applied_by VARCHAR(191) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='applied dsync schema migrations')";

// Params: none. Null when no version has been applied.
constexpr const char* kSelectVersion = "SELECT MAX(version) FROM dsync_schema_version";

// Params: version, name, checksum, applied_by.
constexpr const char* kInsertVersion = R"(
INSERT INTO dsync_schema_version (version, name, checksum, applied_by) VALUES (?, ?, ?, ?))";

// Params: table name. 1 when the table exists in the current schema.
constexpr const char* kTableExists = R"(
SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = ?)";

// Params: schema name. 1 when it exists.
constexpr const char* kSchemaExists =
    "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?";

// The migration lock is a row, not GET_LOCK(): a named server lock lives on one
// server, and on a Galera cluster two `migrate` runs through different members would
// both hold it. A row is replicated and certified like any write.
constexpr const char* kCreateLockTable = R"(
CREATE TABLE IF NOT EXISTS dsync_migration_lock (
  name       VARCHAR(64) NOT NULL PRIMARY KEY,
  holder     VARCHAR(191) NOT NULL COMMENT 'host:pid:token of the migrate run',
  expires_at DATETIME(3) NOT NULL COMMENT 'UTC; renewed before every statement'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='who runs dsync migrate now')";

// Params: holder, lease seconds. Takes the lock if it is free, expired or already
// ours (then extends it); otherwise changes nothing. Assignments run left to right,
// so expires_at sees the new holder.
constexpr const char* kTakeLock = R"(
INSERT INTO dsync_migration_lock (name, holder, expires_at)
VALUES ('migrate', ?, UTC_TIMESTAMP(3) + INTERVAL ? SECOND)
ON DUPLICATE KEY UPDATE
  holder = IF(expires_at < UTC_TIMESTAMP(3) OR holder = VALUES(holder), VALUES(holder), holder),
  expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at))";

// Params: none. Who holds the lock and until when.
constexpr const char* kReadLock = R"(
SELECT holder, DATE_FORMAT(expires_at, '%Y-%m-%d %H:%i:%s') FROM dsync_migration_lock WHERE name = 'migrate')";

// Params: holder.
constexpr const char* kReleaseLock = "DELETE FROM dsync_migration_lock WHERE name = 'migrate' AND holder = ?";

// A run's lease; renewed before every statement, so only a run that crashed (or one
// statement running longer than this) lets another take over.
constexpr int kLockLeaseSeconds = 600;

// 1050 table exists, 1060 duplicate column, 1061 duplicate key name, 1091 can't drop
// (the index or column is already gone).
bool IsAlreadyApplied(int code) {
  return code == 1050 || code == 1060 || code == 1061 || code == 1091;
}

// A migration's SELECT is a check (see migrator.h).
bool IsCheck(const std::string& statement) {
  const auto first = statement.find_first_not_of(" \t\r\n");
  return first != std::string::npos && statement.size() - first > 7 &&
         strncasecmp(statement.c_str() + first, "SELECT", 6) == 0 &&
         std::isspace(static_cast<unsigned char>(statement[first + 6]));
}

std::string Checksum(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  std::ostringstream out;
  out << std::hex << h;
  return out.str();
}

int ReadVersion(Connection& c) {
  if (c.QueryInt(kTableExists, "dsync_schema_version").value_or(0) == 0) return 0;
  return static_cast<int>(c.QueryInt(kSelectVersion).value_or(0));
}

}  // namespace

std::vector<std::string> SplitSqlStatements(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line, current;
  while (std::getline(in, line)) {
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line.compare(first, 2, "--") == 0) continue;
    current += line + "\n";
    auto last = line.find_last_not_of(" \t\r");
    if (line[last] == ';') {
      current.erase(current.find_last_of(';'));
      out.push_back(current);
      current.clear();
    }
  }
  if (current.find_first_not_of(" \t\r\n") != std::string::npos) out.push_back(current);
  return out;
}

Migrator::Migrator(ConnectionPool& pool, const std::vector<Migration>& migrations)
    : pool_(pool), migrations_(migrations) {}

bool Migrator::CreateSchemaIfMissing() {
  const std::string& name = pool_.url().schema;
  if (name.empty() || name.size() > 64 ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$-") !=
          std::string::npos) {
    throw UsageError("schema name '" + name + "' must be 1-64 characters of [A-Za-z0-9_$-]");
  }
  try {
    Connection server(pool_.url().WithSchema(""));
    // An identifier cannot be a bound parameter; the name was checked above.
    bool existed = server.QueryInt(kSchemaExists, name).value_or(0) > 0;
    if (!existed) {
      server.ExecuteDdl("CREATE DATABASE IF NOT EXISTS `" + name +
                        "` DEFAULT CHARACTER SET utf8mb4");
      spdlog::info("SCHEMA_CREATED schema={}", name);
    }
    return !existed;
  } catch (const StatementError& e) {
    throw e.WithContext("create schema " + name);
  }
}

int Migrator::LatestVersion() const {
  return migrations_.empty() ? 0 : migrations_.back().version;
}

int Migrator::CurrentVersion() {
  return pool_.Run("read schema version", [](Connection& c) { return ReadVersion(c); });
}

void Migrator::RequireCurrent() {
  int current = CurrentVersion();
  int latest = LatestVersion();
  if (current < latest) {
    throw SchemaError("database schema is at version " + std::to_string(current) +
                      ", this dsync needs " + std::to_string(latest) + ": run `dsync migrate`");
  }
  if (current > latest) {
    throw SchemaError("database schema version " + std::to_string(current) +
                      " is newer than this dsync (knows up to " + std::to_string(latest) +
                      "): upgrade dsync");
  }
}

namespace {

// Takes the migration lock for `holder`, waiting up to `timeout`. A certification
// failure (Galera: another member's run took the row at the same time) or a deadlock
// is one more try. Throws SchemaError naming the holder when the wait runs out.
void TakeLock(Connection& c, const std::string& holder, Millis timeout, Clock& clock) {
  const auto deadline = clock.Now() + timeout;
  std::string seen;
  for (;;) {
    try {
      c.Execute(kTakeLock, holder, kLockLeaseSeconds);
      auto rs = c.Query(kReadLock);
      if (rs->next()) {
        if (std::string(rs->getString(1)) == holder) return;
        seen = std::string(rs->getString(1)) + " until " + std::string(rs->getString(2)) + " UTC";
      }
    } catch (const StatementError& e) {
      if (!e.retryable_in_transaction()) throw;
    }
    if (clock.Now() >= deadline) {
      throw SchemaError("another `dsync migrate` holds the migration lock (" + seen + "); waited " +
                        std::to_string(timeout.count() / 1000) +
                        " s (if that process is gone, delete its row from dsync_migration_lock)");
    }
    clock.SleepFor(Millis(200), {});
  }
}

std::string NewHolder() {
  std::random_device rd;
  return HostAndPid() + ":" + std::to_string(rd() % 1000000);
}

}  // namespace

MigrateResult Migrator::Migrate(Millis lock_timeout) {
  SystemClock clock;
  const std::string holder = NewHolder();
  auto conn = pool_.Borrow();
  try {
    conn->ExecuteDdl(kCreateLockTable);
    TakeLock(*conn, holder, lock_timeout, clock);
    struct Unlock {
      Connection& c;
      const std::string& holder;
      ~Unlock() {
        try { c.Execute(kReleaseLock, holder); } catch (...) { c.mark_broken(); }
      }
    } unlock{*conn, holder};

    conn->ExecuteDdl(kCreateVersionTable);
    conn->Execute("SET @dsync_service = ?", default_service_);  // read by V014
    MigrateResult result;
    result.from_version = result.to_version = ReadVersion(*conn);
    if (result.from_version > LatestVersion()) {
      throw SchemaError("database schema version " + std::to_string(result.from_version) +
                        " is newer than this dsync (knows up to " +
                        std::to_string(LatestVersion()) + "): upgrade dsync");
    }
    for (const Migration& m : migrations_) {
      if (m.version <= result.from_version) continue;
      spdlog::info("MIGRATION_APPLYING version={} name={}", m.version, m.name);
      for (const std::string& statement : SplitSqlStatements(m.text)) {
        TakeLock(*conn, holder, lock_timeout, clock);  // renews our lease
        if (IsCheck(statement)) {
          if (auto problem = conn->QueryString(statement)) {
            throw SchemaError("migration " + std::to_string(m.version) + " (" + m.name + ") cannot apply: " + *problem);
          }
          continue;
        }
        try {
          conn->ExecuteDdl(statement);
        } catch (const StatementError& e) {
          // A run interrupted between a statement and the version row left this
          // statement applied; MySQL has no ADD COLUMN IF NOT EXISTS (nor DROP INDEX
          // IF EXISTS), so accept "already exists" and "already gone" as done.
          if (!IsAlreadyApplied(e.code())) throw;
          spdlog::info("MIGRATION_STATEMENT_ALREADY_APPLIED version={} code={}", m.version,
                       e.code());
        }
      }
      conn->Execute(kInsertVersion, m.version, m.name, Checksum(m.text), HostAndPid());
      result.applied.push_back(m.version);
      result.to_version = m.version;
    }
    return result;
  } catch (const StatementError& e) {
    if (e.kind() == DbError::Kind::kConnectionLost) conn->mark_broken();
    throw e.WithContext("migrate");
  }
}

}  // namespace dsync::storage
