#include "table/run_context.h"

#include "storage/error_class.h"

namespace dsync::table {

bool IsPermanent(const DbError& e) {
  if (storage::IsPermanentSqlError(e)) return true;  // syntax, access, missing table or column
  switch (e.kind()) {
    case DbError::Kind::kNoSuchTable:
    case DbError::Kind::kDuplicateKey:  // a secondary unique key: retrying will not help
    case DbError::Kind::kUnknownDatabase:
      return true;
    case DbError::Kind::kOther:
      switch (e.code()) {
        case 1048:  // column cannot be null
        case 1054:  // unknown column
        case 1216: case 1217: case 1451: case 1452:  // foreign key
        case 1264:  // out of range
        case 1265:  // data truncated
        case 1292:  // incorrect date/time value
        case 1364:  // no default value
        case 1366:  // incorrect value (charset)
        case 1406:  // data too long
        case 1690:  // value out of range
        case 3819: case 4025:  // CHECK constraint
          return true;
        default:
          return false;
      }
    default:
      return false;
  }
}

void CheckStop(RunContext& ctx) {
  // The engine requests a stop at the step's deadline (with its own clock) and at shutdown.
  if (ctx.stop_token().stop_requested()) throw Interrupted("cancelled; target changes rolled back");
}

void CheckStillOwner(RunContext& ctx) {
  if (!ctx.StillOwner()) throw Interrupted("lost ownership of the event; target changes rolled back");
}

}  // namespace dsync::table
