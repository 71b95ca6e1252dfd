// What a database error means for the work that met it, beyond DbError::Kind: whether
// trying again can ever help (IsPermanentSqlError), and whether the failure was the
// database's rather than the statement's (IsConnectionFailure). The saga engine uses
// both for a step's errors (docs/event-lifecycle.md, "Retry arithmetic"): a permanent
// one compensates at once instead of using the retries; a connection failure is retried
// without using them.
//
// Thread safety: pure functions.
#pragma once

#include "core/error.h"

namespace dsync::storage {

// The statement itself is wrong for this database, or this user may not run it: the
// same statement fails the same way until someone changes the SQL, the schema or the
// grants.
//   1064 syntax error (a step's `where`), 1149 syntax error (older form)
//   1044 / 1045 / 1698 access denied (database / user), 1142 table, 1143 column,
//   1227 missing privilege, 1370 routine
//   1146 no such table, 1054 unknown column, 1049 unknown database
// 1146 and 1054 are permanent too: a table or column that is missing now is a config
// or schema error that an operator fixes (then `dsync retry`), not a passing state.
inline bool IsPermanentSqlError(const DbError& e) {
  switch (e.kind()) {
    case DbError::Kind::kNoSuchTable:
    case DbError::Kind::kAccessDenied:
    case DbError::Kind::kUnknownDatabase:
      return true;
    case DbError::Kind::kOther:
      switch (e.code()) {
        case 1064: case 1149:
        case 1142: case 1143: case 1227: case 1370:
        case 1054:
          return true;
        default:
          return false;
      }
    default:
      return false;
  }
}

// The connection or the server failed, not the statement: lost connections, a server
// that does not answer, no free connection.
inline bool IsConnectionFailure(const DbError& e) {
  switch (e.kind()) {
    case DbError::Kind::kConnectionLost:
    case DbError::Kind::kCommitUnknown:
    case DbError::Kind::kUnreachable:
    case DbError::Kind::kPoolExhausted:
      return true;
    default:
      return false;
  }
}

}  // namespace dsync::storage
