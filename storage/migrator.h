// Versioned schema migrations (`dsync migrate`).
//
// The migrations are the files sql/migrations/V<NNN>__<name>.sql, compiled into the
// binary. Applied versions are rows of dsync_schema_version. Migrate():
//   - holds the migration lock, a row in dsync_migration_lock (not GET_LOCK, which
//     Galera does not replicate), with a 10-minute lease renewed before every
//     statement, so concurrent `migrate` runs serialise, through one server or
//     through different members of a cluster: the second finds nothing left to do;
//   - refuses a database whose version is newer than this binary knows;
//   - applies each missing version in order and records it. A run interrupted
//     midway can simply run again: CREATE statements say IF NOT EXISTS, an ALTER
//     that finds its column or index already there (1060/1061), and a DROP that finds
//     it already gone (1091), count as done.
//   - a statement that is a SELECT is a check: a non-NULL first value in its answer
//     stops the migration with that text as the error (a migration that cannot apply
//     to the data as it is says why and names the rows; V015).
// RequireCurrent() is what every other command calls at start: it fails with a
// SchemaError telling the user to run `dsync migrate` (or to upgrade dsync).
//
// Thread safety: stateless apart from the pool; safe from several processes at once.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/service.h"
#include "storage/connection_pool.h"
#include "storage/migration.h"

namespace dsync::storage {

// Splits a migration file into statements: `--` comment lines dropped, a statement
// ends with ';' at the end of a line.
std::vector<std::string> SplitSqlStatements(const std::string& text);

struct MigrateResult {
  int from_version = 0;
  int to_version = 0;
  std::vector<int> applied;
};

class Migrator {
 public:
  explicit Migrator(ConnectionPool& pool,
                    const std::vector<Migration>& migrations = EmbeddedMigrations());

  // The service whose events a plain INSERT that names none belongs to, when the
  // migration that adds distribute_event.service (V014) runs here (config `service`).
  void set_default_service(std::string service) { default_service_ = std::move(service); }

  // Throws SchemaError (database newer than the binary), DbError.
  MigrateResult Migrate(Millis lock_timeout = Millis(120000));
  // CREATE DATABASE IF NOT EXISTS for the pool's schema (utf8mb4), through a
  // connection without a default schema. Returns true when it did not exist.
  // Throws UsageError for a schema name outside [A-Za-z0-9_$-], DbError.
  bool CreateSchemaIfMissing();
  // 0 when the schema has never been migrated.
  int CurrentVersion();
  int LatestVersion() const;
  // Throws SchemaError unless the database is exactly at LatestVersion().
  void RequireCurrent();

 private:
  ConnectionPool& pool_;
  const std::vector<Migration>& migrations_;
  std::string default_service_ = kDefaultService;
};

}  // namespace dsync::storage
