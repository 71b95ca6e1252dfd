// Test support: the base of integration-test fixtures that own a fresh schema
// (testing::TestSchema, migrated) and read or write it with one-line statements.
//
//   class MyTest : public testing::DbTest {};
//   TEST_F(MyTest, X) { Exec("UPDATE distribute_event SET status = 'PENDING' WHERE code = ?", "E1");
//                       EXPECT_EQ(Str("SELECT status FROM distribute_event WHERE code = ?", "E1"), "PENDING"); }
//
// Thread safety: the helpers go through the schema's pool (thread-safe).
#pragma once

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "storage/connection_pool.h"
#include "tests/support/test_db.h"

namespace dsync::testing {

class DbTest : public ::testing::Test {
 protected:
  // Rows affected.
  template <class... Args>
  uint64_t Exec(const std::string& sql, const Args&... args) {
    return db_.pool().Run("test exec", [&](storage::Connection& c) { return c.Execute(sql, args...); });
  }
  // The first column of the first row; -1 for NULL or no row.
  template <class... Args>
  int64_t Int(const std::string& sql, const Args&... args) {
    return db_.pool().Run("test query", [&](storage::Connection& c) { return c.QueryInt(sql, args...).value_or(-1); });
  }
  // The first column of the first row; "<null>" for NULL or no row.
  template <class... Args>
  std::string Str(const std::string& sql, const Args&... args) {
    return db_.pool()
        .Run("test query", [&](storage::Connection& c) { return c.QueryString(sql, args...); })
        .value_or("<null>");
  }

  // One column of an event row (by code) or a step row (by step code); "<null>" / -1 as above.
  std::string EventStr(const std::string& code, const std::string& column) {
    return Str("SELECT " + column + " FROM distribute_event WHERE code = ?", code);
  }
  int64_t EventInt(const std::string& code, const std::string& column) {
    return Int("SELECT " + column + " FROM distribute_event WHERE code = ?", code);
  }
  std::string StepStr(const std::string& step_code, const std::string& column) {
    return Str("SELECT " + column + " FROM distribute_event_step WHERE code = ?", step_code);
  }
  int64_t StepInt(const std::string& step_code, const std::string& column) {
    return Int("SELECT " + column + " FROM distribute_event_step WHERE code = ?", step_code);
  }
  // The demo step's side effects (demo_ledger): a step's applications (-1: no row), an event's rows.
  int64_t Ledger(const std::string& step_code) {
    return Int("SELECT applications FROM demo_ledger WHERE idempotency_key = ?", step_code);
  }
  int64_t LedgerRows(const std::string& event_code) {
    return Int("SELECT COUNT(*) FROM demo_ledger WHERE event_code = ?", event_code);
  }

  TestSchema db_;  // constructed before the derived fixture's members, which may use its pool
};

}  // namespace dsync::testing
