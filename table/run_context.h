// What a run of a table step (table/sync.h, table/delete.h) needs from whoever runs
// it, and the failures it reports. table/ sits below saga/: the saga engine's
// StepContext is adapted to RunContext by the step adapters (saga/steps/table_steps.cc),
// so the table machinery can be driven by other callers too (a relay of a sync through
// the framework database, tests).
//
//   class Ctx : public table::RunContext { ... };      // forwards to the caller's state
//   table::TableSync sync(spec);
//   table::SyncResult r = sync.Run(ctx);                // throws PermanentError, Interrupted, DbError
//
// Failures: PermanentError (bad input, a refused compensation: retrying will not help),
// Interrupted (stopped before committing: cancelled, lost ownership, taken over by a
// later claim; run again), DbError (IsPermanent tells which are permanent; the others,
// deadlocks, lock waits and lost connections, are transient).
//
// Thread safety: a sync's lanes call a RunContext from several threads, one at a time
// (they hold a lock around StillOwner and ReportProgress); Pool, stop_token, clock and
// the accessors may be called concurrently.
#pragma once

#include <stdexcept>
#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "storage/connection_pool.h"

namespace dsync::table {

class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual const std::string& event_code() const = 0;
  virtual const std::string& step_code() const = 0;  // the idempotency key: names the step's records
  virtual const nlohmann::json& payload() const = 0;  // binds the filter's :names
  virtual int attempt() const = 0;                    // the claim attempt: the fencing token
  // Compensation: what the forward run returned as compensation data (null if none).
  virtual const nlohmann::json& compensation_data() const = 0;
  virtual std::stop_token stop_token() const = 0;  // requested at the deadline and at shutdown
  // True while the caller still owns the work (checked right before each commit).
  virtual bool StillOwner() = 0;
  // Progress of a long run, or the outcome of a compensation (best effort, about once
  // a second).
  virtual void ReportProgress(const nlohmann::json& progress) = 0;
  // The pool of a configured datasource. Throws UsageError for an unknown name.
  virtual storage::ConnectionPool& Pool(const std::string& datasource) = 0;
  virtual Clock& clock() = 0;
};

// Retrying will not help: bad input, a missing table or column, a refused compensation.
class PermanentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run stopped before committing (cancelled, lost ownership, taken over): transient.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Database errors that retrying will not help: syntax, access, a missing table or
// column, a duplicate value of a secondary unique key, a value the column refuses.
bool IsPermanent(const DbError& e);

// Throws Interrupted when ctx's stop was requested (its deadline, shutdown).
void CheckStop(RunContext& ctx);
// Throws Interrupted unless ctx.StillOwner().
void CheckStillOwner(RunContext& ctx);

}  // namespace dsync::table
