// The project's error types. Every expected failure a caller may handle is one of
// these; each carries a one-line, user-facing message (no newlines, no secrets).
//
// Thread safety: plain value types.
#pragma once

#include <stdexcept>
#include <string>

namespace dsync {

// Base of every dsync error. what() is one line suitable for a CLI or a log.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad command line, bad config file, bad URL: the user must fix their input.
class UsageError : public Error {
 public:
  using Error::Error;
};

class ConfigError : public UsageError {
 public:
  using UsageError::UsageError;
};

// The thing asked for does not exist (an event code, a batch, a node address).
// The CLI exits 1 with the message; the HTTP API answers 404.
class NotFoundError : public Error {
 public:
  using Error::Error;
};

// The request is valid but the thing is not in a state that allows it (retrying an
// event that is still running). The CLI exits 1; the HTTP API answers 409.
class ConflictError : public Error {
 public:
  using Error::Error;
};

// A database failure, translated once at the storage boundary from the driver's
// exception (see storage/result_set.h). kind() classifies the
// server/client error code so callers never compare raw numbers.
class DbError : public Error {
 public:
  enum class Kind {
    kDeadlock,        // 1213: the transaction was rolled back; safe to retry
    kLockWaitTimeout, // 1205: the statement timed out waiting for a row lock
    kConnectionLost,  // 2006/2013/2055 and friends: the connection is unusable
    kCommitUnknown,   // connection lost during COMMIT: it may or may not have applied
    kDuplicateKey,    // 1062
    kNoSuchTable,     // 1146
    kAccessDenied,    // 1044/1045
    kUnreachable,     // 2002/2003/2005: no server at that address
    kUnknownDatabase, // 1049
    kPoolExhausted,   // no connection became free within the borrow timeout
    kOther,
  };

  DbError(Kind kind, int code, const std::string& message)
      : Error(message), kind_(kind), code_(code) {}

  Kind kind() const { return kind_; }
  int code() const { return code_; }  // server/client error number, 0 if none
  bool retryable_in_transaction() const {
    return kind_ == Kind::kDeadlock || kind_ == Kind::kLockWaitTimeout;
  }

 private:
  Kind kind_;
  int code_;
};

// The schema is missing, older than this binary (run `dsync migrate`), or newer
// (upgrade dsync).
class SchemaError : public Error {
 public:
  using Error::Error;
};

}  // namespace dsync
