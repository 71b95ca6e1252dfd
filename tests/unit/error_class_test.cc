// storage/error_class.h: which database errors a step's run treats as permanent (no
// retry can help) and which as the database's failure rather than the step's.
#include "storage/error_class.h"

#include <gtest/gtest.h>

namespace dsync::storage {
namespace {

DbError Err(DbError::Kind kind, int code) { return DbError(kind, code, "error " + std::to_string(code)); }

TEST(ErrorClassTest, SyntaxAndAccessErrorsArePermanent) {
  for (int code : {1064, 1149, 1142, 1143, 1227, 1370, 1054}) {
    EXPECT_TRUE(IsPermanentSqlError(Err(DbError::Kind::kOther, code))) << code;
  }
  EXPECT_TRUE(IsPermanentSqlError(Err(DbError::Kind::kAccessDenied, 1044)));
  EXPECT_TRUE(IsPermanentSqlError(Err(DbError::Kind::kAccessDenied, 1045)));
  EXPECT_TRUE(IsPermanentSqlError(Err(DbError::Kind::kNoSuchTable, 1146)));
  EXPECT_TRUE(IsPermanentSqlError(Err(DbError::Kind::kUnknownDatabase, 1049)));
}

TEST(ErrorClassTest, PassingErrorsAreNot) {
  EXPECT_FALSE(IsPermanentSqlError(Err(DbError::Kind::kDeadlock, 1213)));
  EXPECT_FALSE(IsPermanentSqlError(Err(DbError::Kind::kLockWaitTimeout, 1205)));
  EXPECT_FALSE(IsPermanentSqlError(Err(DbError::Kind::kConnectionLost, 2013)));
  EXPECT_FALSE(IsPermanentSqlError(Err(DbError::Kind::kOther, 1317)));  // query interrupted (KILL QUERY)
  EXPECT_FALSE(IsPermanentSqlError(Err(DbError::Kind::kDuplicateKey, 1062)));
}

TEST(ErrorClassTest, ConnectionFailuresAreTheDatabases) {
  EXPECT_TRUE(IsConnectionFailure(Err(DbError::Kind::kConnectionLost, 2006)));
  EXPECT_TRUE(IsConnectionFailure(Err(DbError::Kind::kCommitUnknown, 2013)));
  EXPECT_TRUE(IsConnectionFailure(Err(DbError::Kind::kUnreachable, 2003)));
  EXPECT_TRUE(IsConnectionFailure(Err(DbError::Kind::kPoolExhausted, 0)));
  EXPECT_FALSE(IsConnectionFailure(Err(DbError::Kind::kOther, 1064)));
  EXPECT_FALSE(IsConnectionFailure(Err(DbError::Kind::kDeadlock, 1213)));
}

}  // namespace
}  // namespace dsync::storage
