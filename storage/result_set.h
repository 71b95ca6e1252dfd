// What a statement returns, and how it fails, in the project's own types: the storage
// boundary (STYLE.md habit 4). Nothing outside storage/ sees the driver's types.
//
//   auto rs = c.Query("SELECT id, code FROM t WHERE k = ?", k);   // unique_ptr<ResultSet>
//   while (rs->next()) use(rs->getInt64(1), rs->getString(2));    // columns from 1
//
// Errors: the driver's exceptions become StatementError (a DbError with its Kind and
// code, worded "<driver message> (<code>)"); ConnectionPool and Transaction add the
// name of the unit of work in front ("assign events: ...").
//
// Thread safety: a ResultSet belongs to its connection's thread and is read before the
// next statement on that connection.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <cppconn/exception.h>
#include <cppconn/resultset.h>

#include "core/error.h"

namespace dsync::storage {

// A statement's failure as the driver reported it, classified but without the
// caller's context. WithContext() is the DbError the caller throws on.
class StatementError : public DbError {
 public:
  using DbError::DbError;
  DbError WithContext(std::string_view what) const;
};

// sql::SQLException -> StatementError (Kind from the error code; one line, passwords
// masked). The one translation of the driver's errors.
StatementError Translate(const sql::SQLException& e);

// sql::SQLException -> DbError with its Kind. `context` names the operation.
DbError TranslateSqlException(const sql::SQLException& e, std::string_view context);

// Rows of a query, read forward once. Getters take 1-based column numbers; a NULL
// reads as 0 or "" (check isNull first where NULL means something). Throws
// StatementError.
class ResultSet {
 public:
  explicit ResultSet(std::unique_ptr<sql::ResultSet> rs) : rs_(std::move(rs)) {}

  bool next() { return Guard([&] { return rs_->next(); }); }
  bool isNull(int col) const { return Guard([&] { return rs_->isNull(col); }); }
  std::string getString(int col) const { return Guard([&] { return std::string(rs_->getString(col)); }); }
  int32_t getInt(int col) const { return Guard([&] { return rs_->getInt(col); }); }
  int64_t getInt64(int col) const { return Guard([&] { return static_cast<int64_t>(rs_->getInt64(col)); }); }
  uint64_t getUInt64(int col) const { return Guard([&] { return static_cast<uint64_t>(rs_->getUInt64(col)); }); }
  double getDouble(int col) const { return Guard([&] { return static_cast<double>(rs_->getDouble(col)); }); }
  bool getBoolean(int col) const { return Guard([&] { return rs_->getBoolean(col); }); }
  // The number of columns, and a column's label (its alias, or its expression).
  int columnCount() const;
  std::string columnLabel(int col) const;

 private:
  template <class F>
  static auto Guard(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const sql::SQLException& e) {
      throw Translate(e);
    }
  }

  std::unique_ptr<sql::ResultSet> rs_;
};

}  // namespace dsync::storage
