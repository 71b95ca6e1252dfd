#include "storage/transaction.h"

namespace dsync::storage {

void Transaction::Begin() {
  try {
    c_.Begin();
    open_ = true;
  } catch (const StatementError& e) {
    throw Fail(e);
  }
}

void Transaction::Commit(std::string_view what) {
  try {
    c_.Commit();
    open_ = false;
  } catch (const StatementError& e) {
    DbError err = Fail(e, what);
    if (err.kind() == DbError::Kind::kConnectionLost) {
      throw DbError(DbError::Kind::kCommitUnknown, err.code(),
                    std::string(what) + ": connection lost during COMMIT; outcome unknown");
    }
    throw err;
  }
}

void Transaction::Rollback() noexcept {
  if (open_) c_.Rollback();
  open_ = false;
}

DbError Transaction::Fail(const StatementError& e, std::string_view what) {
  if (e.kind() == DbError::Kind::kConnectionLost) {
    c_.mark_broken();
    open_ = false;  // the server rolled it back
  }
  return e.WithContext(what);
}

}  // namespace dsync::storage
