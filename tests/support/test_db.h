// Test support for integration tests: a fresh, empty schema per test on the
// throwaway server named by DSYNC_TEST_DB_URL (scripts/test.sh starts it), dropped
// when the test ends. Tests never share tables, so they run in parallel.
#pragma once

#include <memory>
#include <string>

#include "storage/connection_pool.h"
#include "storage/db_url.h"

namespace dsync::testing {

// The server URL from DSYNC_TEST_DB_URL; fails the test (not skips) when unset.
storage::DbUrl ServerUrl();

class TestSchema {
 public:
  // Creates schema `t_<pid>_<n>`; with migrate=true applies the embedded migrations.
  explicit TestSchema(bool migrate = true);
  ~TestSchema();

  const storage::DbUrl& url() const { return url_; }
  // A pool on the test schema (created on first use).
  storage::ConnectionPool& pool();
  // A one-off admin statement on the test schema (text protocol; test code only).
  void Exec(const std::string& sql);
  int64_t QueryInt(const std::string& sql);

 private:
  storage::DbUrl url_;
  std::unique_ptr<storage::ConnectionPool> pool_;
};

}  // namespace dsync::testing
