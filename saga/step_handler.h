// The C++ API for step types: built-in (table_sync, table_delete, demo, http, exec) and
// custom. (http and exec run steps written in any language: saga/steps/http_step.h,
// saga/steps/exec_step.h.)
//
//   class NotifyStep : public saga::StepHandler {
//    public:
//     saga::StepResult Execute(saga::StepContext& ctx) override {
//       if (!ctx.StillOwner()) return saga::StepResult::Transient("lost ownership");
//       http_post(url, ctx.payload(), /*idempotency key*/ ctx.idempotency_key());
//       return saga::StepResult::Ok({{"posted", true}});
//     }
//     saga::StepResult Compensate(saga::StepContext& ctx) override { ... }
//   };
//   registry.Register("notify", [](const StepSpec& spec) { return std::make_unique<NotifyStep>(spec); });
//
// Delivery guarantees (documented in the README):
//   - Effects written through ctx.tx() — the fenced transaction on the framework
//     database in which the engine also records the step's new state — commit
//     exactly once: if the node lost the event, the transaction rolls back.
//   - Effects elsewhere (another database, an HTTP call) are at-least-once: a step
//     interrupted by a crash runs again on the next owner with the same
//     idempotency_key(). Call ctx.StillOwner() just before committing them.
//
// Failures: return Transient/Permanent, or throw. An exception is transient unless
// it is a PermanentStepError. Passing the deadline is transient. A failed
// compensation is retried with backoff (up to the topic's max_retry) unless it is
// Permanent, which fails the event at once.
//
// Child steps: Execute() may call ctx.AddChildStep(params) (e.g. one per chunk). The
// children are written with the step's SUCCESS (codes "<step code>.<n>",
// parent_step_id set), run right after it with the same handler and
// ctx.child_params() = their params, and are compensated before it.
//
// Thread safety: a handler instance may run on several workers at once (one per
// event), and one worker may run it for several events in turn (batched runs of fast
// topics, SagaEngine::RunBatch); keep per-run state in the context, not in members
// or thread-locals.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "core/clock.h"
#include "storage/connection.h"
#include "storage/connection_pool.h"

namespace dsync::saga {

struct RelayEnvironment;  // saga/steps/table_steps.h

class PermanentStepError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by StepContext::tx() when the event was taken away from this node: nothing
// the step did through tx() can commit. Handlers may let it propagate (or catch it;
// the engine discards the run either way).
class OwnershipLostError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct StepResult {
  enum class Kind { kOk, kTransient, kPermanent };
  Kind kind = Kind::kOk;
  nlohmann::json output;             // kOk: stored in the step's `output` column (V004); null: NULL
  std::optional<nlohmann::json> compensation_data;  // kOk (or a failure that half-applied)
  std::string error;                 // failures: one line
  // kTransient: the earliest the step should run again (an HTTP peer's Retry-After).
  // The retry's delay is the larger of the topic's backoff and this, capped at the
  // topic's backoff_max_ms. nullopt: the backoff alone.
  std::optional<std::chrono::milliseconds> retry_after = std::nullopt;

  static StepResult Ok(nlohmann::json output = nullptr,
                       std::optional<nlohmann::json> compensation = std::nullopt) {
    return {Kind::kOk, std::move(output), std::move(compensation), ""};
  }
  static StepResult Transient(std::string why) { return {Kind::kTransient, nullptr, std::nullopt, std::move(why)}; }
  static StepResult TransientAfter(std::string why, std::chrono::milliseconds retry_after) {
    return {Kind::kTransient, nullptr, std::nullopt, std::move(why), retry_after};
  }
  static StepResult Permanent(std::string why) { return {Kind::kPermanent, nullptr, std::nullopt, std::move(why)}; }
};

// Named pools for the config's datasources, opened on first use.
class Datasources {
 public:
  explicit Datasources(std::map<std::string, std::string> urls);
  // Throws UsageError for an unknown name (with the known names), DbError.
  storage::ConnectionPool& Get(const std::string& name);
  bool Has(const std::string& name) const { return urls_.count(name) > 0; }
  // storage::ConnectionPool::KillLentStatements on every datasource's pool opened so
  // far (a drain that timed out stops steps blocked in a datasource).
  int KillLentStatements();

 private:
  std::map<std::string, std::string> urls_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<storage::ConnectionPool>> pools_;
};

class StepContext {
 public:
  virtual ~StepContext() = default;
  virtual const std::string& event_code() const = 0;
  virtual const std::string& step_name() const = 0;
  // The event's tenant_id and data_id columns ("" where a context has none).
  virtual const std::string& tenant_id() const {
    static const std::string kNone;
    return kNone;
  }
  virtual const std::string& data_id() const {
    static const std::string kNone;
    return kNone;
  }
  virtual const std::string& idempotency_key() const = 0;   // the step code
  virtual const nlohmann::json& payload() const = 0;        // the event payload (parsed)
  virtual int attempt() const = 0;                          // the event's claim attempt
  // Execute(): failed executions of this step so far (its retry_count).
  // Compensate(): failed compensations of this step so far (compensation_retry_count).
  virtual int step_retry_count() const = 0;
  // Compensate(): what Execute returned as compensation_data (null if none).
  virtual const nlohmann::json& compensation_data() const = 0;
  // The attempt's deadline on clock() (a time point of that clock, never of another).
  virtual Clock::TimePoint deadline() const = 0;
  virtual std::stop_token stop_token() const = 0;           // cancellation (deadline, shutdown)
  // The engine's clock: what a step reads to wait, time out or measure (a test's fake
  // clock drives them). Waits that core/ bounds in real time (HttpClient::Send,
  // RunChild) take RealDeadline(ctx.clock(), ctx.deadline()).
  virtual Clock& clock() = 0;
  // The framework database connection inside the step's fenced transaction; the
  // engine commits it together with the step's new state, or rolls it back if the
  // step fails. Execute(): the transaction is the node's commit group
  // (saga/commit_group.h), shared with other events' steps and READ COMMITTED; the
  // fence is checked for all of them just before COMMIT, so nothing commits for an
  // event this node lost. Compensate(): the first call begins a transaction of its own
  // with the fence (throws OwnershipLostError if the event was taken away). Either
  // way keep work after the first tx() call short: the connection (and, for
  // compensation, the event's row lock) is held until the handler returns; do slow
  // work (sleeps, remote calls) before it. Statements throw DbError (storage::StatementError).
  virtual storage::Connection& tx() = 0;
  // A fenced read: true while this node still owns the event at its claimed version.
  virtual bool StillOwner() = 0;
  virtual Datasources& datasources() = 0;

  // A row for the framework database, written exactly once with the step's success
  // (like a statement through tx()), as one row of a multi-row
  // `<head> (?, ...), (?, ...) <tail>`: the rows of many events' steps that share
  // head and tail go in one statement at their commit group's COMMIT, and the handler
  // never waits for a turn on the group's connection. `head` is the INSERT up to and
  // including VALUES, `tail` what follows the rows ("" or e.g. "ON DUPLICATE KEY
  // UPDATE n = n + 1"); both constant texts (never user input); `row` one row's values,
  // bound as parameters. Nothing is written if the step fails. Where there is no
  // commit group (Compensate()), it is executed at once through tx().
  //   ctx.InsertAtCommit("INSERT INTO audit (k, v) VALUES", "", {ctx.idempotency_key(), std::string("x")});
  virtual void InsertAtCommit(std::string_view head, std::string_view tail,
                              std::vector<storage::Value> row);

  // The outputs of this event's plan steps before this one that reached SUCCESS
  // (their `output` column), by step name: {"sync": {...}, "notify": {...}}. A step
  // whose output is not JSON appears as its text; one without output is left out.
  virtual nlohmann::json PreviousOutputs() const { return nlohmann::json::object(); }

  // Progress of a long step (e.g. {"chunks": 12, "rows": 120000}), shown as the step
  // row's output while it runs (events/step_progress.h: fenced, best effort; the
  // step's result replaces it). Cheap enough for about once a second.
  virtual void ReportProgress(const nlohmann::json& progress) { (void)progress; }

  // Child steps (see the file comment). Null for the plan's own steps.
  virtual const nlohmann::json& child_params() const {
    static const nlohmann::json kNone;
    return kNone;
  }
  // Execute() only, and only when it returns Ok; throws std::logic_error elsewhere.
  virtual void AddChildStep(nlohmann::json params) {
    (void)params;
    throw std::logic_error("child steps are not supported by this context");
  }
};

class StepHandler {
 public:
  virtual ~StepHandler() = default;
  virtual StepResult Execute(StepContext& ctx) = 0;
  virtual StepResult Compensate(StepContext& ctx) = 0;

  // True when Compensate() can undo an attempt interrupted mid-flight (its node died
  // or lost the event while Execute() ran) from what the handler recorded itself as it
  // went, although the step row holds no compensation data: table_sync and
  // table_delete keep their before-images in the target (chunk and undo records).
  // When the event's retries then run out, the engine compensates such a step (its
  // Compensate() gets compensation_data {}) instead of leaving what it applied; for
  // other handlers the interrupted step is marked FAILED and not compensated.
  virtual bool CompensatesInterrupted() const { return false; }
};

// Step type name -> factory, given the step's spec (its params carry type-specific
// keys). A factory throws ConfigError for bad params, so bad plans fail at start.
class StepRegistry {
 public:
  using Factory = std::function<std::unique_ptr<StepHandler>(const StepSpec&)>;
  void Register(const std::string& type, Factory factory);
  bool Has(const std::string& type) const { return factories_.count(type) > 0; }
  std::unique_ptr<StepHandler> Create(const StepSpec& spec) const;  // throws ConfigError

  // A registry with the built-in step types (table_sync, table_delete, demo). Defined
  // in saga/steps/builtin_steps.cc, beside the steps: the engine does not know them.
  static StepRegistry WithBuiltins();
  // The same, with the topics whose table_sync steps table_repair events may name
  // (the node's plans); without them every repair is refused.
  static StepRegistry WithBuiltins(const std::map<std::string, TopicSettings>& topics);
  // The same on a node that can relay table_sync steps (saga/steps/table_steps.h
  // RelayEnvironment; null: no relaying), with the relay_source step type.
  static StepRegistry WithBuiltins(const std::map<std::string, TopicSettings>& topics,
                                   std::shared_ptr<const RelayEnvironment> relay);

 private:
  std::map<std::string, Factory> factories_;
};

}  // namespace dsync::saga
