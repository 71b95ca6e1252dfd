#include "tests/support/test_db.h"

#include <atomic>
#include <cstdlib>

#include <gtest/gtest.h>
#include <unistd.h>

#include "storage/migrator.h"

namespace dsync::testing {

storage::DbUrl ServerUrl() {
  const char* url = std::getenv("DSYNC_TEST_DB_URL");
  if (url == nullptr || *url == '\0') {
    ADD_FAILURE() << "DSYNC_TEST_DB_URL is not set: run integration tests via scripts/test.sh";
    throw std::runtime_error("DSYNC_TEST_DB_URL not set");
  }
  return storage::DbUrl::Parse(url);
}

TestSchema::TestSchema(bool migrate) {
  static std::atomic<int> counter{0};
  storage::DbUrl server = ServerUrl();
  std::string name = "t_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
  url_ = server.WithSchema(name);
  {
    storage::Connection admin(server);
    admin.ExecuteDdl("DROP DATABASE IF EXISTS `" + name + "`");
    admin.ExecuteDdl("CREATE DATABASE `" + name + "`");
  }
  if (migrate) storage::Migrator(pool()).Migrate();
}

TestSchema::~TestSchema() {
  pool_.reset();
  try {
    storage::Connection admin(url_.WithSchema("dsync"));
    admin.ExecuteDdl("DROP DATABASE IF EXISTS `" + url_.schema + "`");
  } catch (...) {
  }
}

storage::ConnectionPool& TestSchema::pool() {
  if (!pool_) pool_ = std::make_unique<storage::ConnectionPool>(url_);
  return *pool_;
}

void TestSchema::Exec(const std::string& sql) {
  pool().Run("test exec", [&](storage::Connection& c) { c.ExecuteDdl(sql); });
}

int64_t TestSchema::QueryInt(const std::string& sql) {
  return pool().Run("test query", [&](storage::Connection& c) { return c.QueryInt(sql).value_or(-1); });
}

}  // namespace dsync::testing
