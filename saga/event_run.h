// One run of one event (internal to saga/): EventRun drives an event through its
// claim, its forward steps and its compensation, following docs/event-lifecycle.md,
// and hands it on before a step (or compensation) this node does not reach (per-step
// routing, item 7: Deps::reach);
// EngineContext is the StepContext a handler sees; StepTx a step's own transaction.
// SagaEngine (saga_engine.h) builds one EventRun per event (Run) or per batch slot
// (RunBatch). EventRun and EngineContext call each other (a context asks its run for
// the fence and the group; the run creates the contexts), so they stay in one file.
//
// Thread safety: an EventRun and its contexts belong to one thread at a time.
#pragma once

#include <algorithm>
#include <charconv>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_limits.h"
#include "events/fence.h"
#include "events/status.h"
#include "events/transitions.h"
#include "saga/commit_group.h"
#include "saga/deadline_timer.h"
#include "saga/saga_engine.h"
#include "storage/transaction.h"

namespace dsync::saga::run {


inline constexpr const char* kForward = "FORWARD";
inline constexpr const char* kCompensate = "COMPENSATE";
// A step whose commit group rolled back (another member failed) runs again up to
// this many times in a row before it counts as a transient failure.
inline constexpr int kMaxGroupReruns = 5;

// Position of a step in the plan tree, from its code: "<event>#2" -> {2},
// "<event>#2.3" -> {2, 3}. Forward order is ascending; compensation descending.
inline std::vector<int> TreeKey(const std::string& code) {
  std::vector<int> key;
  auto hash = code.rfind('#');
  if (hash == std::string::npos) return key;
  const char* p = code.data() + hash + 1;
  const char* end = code.data() + code.size();
  while (p < end) {
    int v = 0;
    auto [next, ec] = std::from_chars(p, end, v);
    if (ec != std::errc() || v < 1) return {};
    key.push_back(v);
    if (next == end) break;
    if (*next != '.') return {};
    p = next + 1;
  }
  return key;
}

// Stored JSON as JSON; text that does not parse, or nests deeper than kMaxJsonDepth, is
// handed on as a string (handlers then reject it as not what they saved).
inline nlohmann::json ParseOrString(const std::optional<std::string>& text) {
  if (!text) return nullptr;
  StoredJson parsed = ParseStoredJson(*text);
  return parsed.problem == StoredJson::kNone ? std::move(parsed.value) : nlohmann::json(*text);
}

inline std::string OneLine(std::string s) {
  for (char& c : s) if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// One step as the engine tracks it (mirrors its row).
struct StepState {
  std::string code;
  std::vector<int> key;
  std::string name;
  std::string type;
  events::StepStatus status = events::StepStatus::kPending;
  int sort = 0;
  int retry_count = 0;
  int compensation_retry_count = 0;
  int max_retry = 0;
  nlohmann::json compensation_data;  // null: none saved
  nlohmann::json child_params;       // null for the plan's own steps
  std::optional<std::string> output;  // its output column once SUCCESS (StepContext::PreviousOutputs)
  const Plans::Step* plan_step = nullptr;  // its handler; null if the plan lost it
};

// Steps that compensation undoes: every SUCCESS one, one whose compensation was
// interrupted or failed (COMPENSATING), and a failed one that saved compensation data.
inline bool NeedsCompensation(const StepState& s) {
  using events::StepStatus;
  if (s.status == StepStatus::kSuccess || s.status == StepStatus::kCompensating) return true;
  return (s.status == StepStatus::kFailed || s.status == StepStatus::kExecuting) && !s.compensation_data.is_null();
}

// Exact reverse of forward order (children before their parent).
inline std::vector<size_t> CompensationOrder(const std::vector<StepState>& steps) {
  std::vector<size_t> order;
  for (size_t i = steps.size(); i-- > 0;) {
    if (NeedsCompensation(steps[i])) order.push_back(i);
  }
  return order;
}

// A storage::Transaction on one leased connection whose statements run partly inside
// a step handler (StepContext::tx()); rolls back unless committed.
class StepTx {
 public:
  explicit StepTx(storage::ConnectionPool& pool) : lease_(pool.Borrow()), tx_(*lease_, "step transaction") {}
  StepTx(const StepTx&) = delete;
  StepTx& operator=(const StepTx&) = delete;

  storage::Connection& conn() { return *lease_; }

  // `fn`'s statement errors as DbError named `what` (a lost connection closes it).
  template <class F>
  auto Do(std::string_view what, F&& fn) -> decltype(fn(std::declval<storage::Connection&>())) {
    try {
      return fn(*lease_);
    } catch (const storage::StatementError& e) {
      throw Translate(e, what);
    }
  }

  void Begin() { tx_.Begin(); }

  // kCommitUnknown when the connection died during COMMIT (it may have applied).
  void Commit(std::string_view what) { tx_.Commit(what); }

  void Rollback() noexcept { tx_.Rollback(); }

  DbError Translate(const storage::StatementError& e, std::string_view what) { return tx_.Fail(e, what); }

 private:
  storage::ConnectionPool::Lease lease_;
  storage::Transaction tx_;
};

[[noreturn]] inline void ThrowLost(const std::string& at) { throw OwnershipLostError(at); }

// A deferred claim found step rows of its event's code (an event re-produced under an
// old code): it needs the full claim rules (EventRun::ClaimTx).
class ClaimRulesNeeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
inline void Require(bool matched, const char* at) {
  if (!matched) ThrowLost(at);
}

// A fenced transition's result: the fence it left the event at, or lost ownership.
inline events::Fence Held(std::optional<events::Fence> after, const char* at) {
  if (!after) ThrowLost(at);
  return *after;
}

struct Deps {
  storage::ConnectionPool& pool;
  Datasources& datasources;
  Clock& clock;
  const std::string& node;
  SagaStats& stats;
  DeadlineTimer& timer;
  std::function<Millis(Millis, Millis, int)> backoff;
  CommitGroups& groups;  // forward steps commit through it
  const DatasourceReach& reach;  // empty: this node reaches every datasource
};

// The plan's step rows for an event's first claim (codes "<event code>#<n>").
inline events::NewStep PlanRow(const Plans::Plan& plan, const AssignedEvent& ev, size_t i, bool executing) {
  const StepSpec& spec = plan.steps[i].spec;
  return events::NewStep{
      .code = ev.code + "#" + std::to_string(i + 1),
      .job_code = ev.code,
      .tenant_id = ev.tenant_id,
      .sort = static_cast<int>(i + 1),
      .type = spec.type,
      .name = spec.name,
      .max_retry = spec.max_retry >= 0 ? spec.max_retry : plan.topic->max_retry,
      .payload = spec.params.dump(),
      .executing = executing,
  };
}

inline StepState PlanState(const Plans::Plan& plan, const events::NewStep& row, size_t i) {
  StepState s;
  s.code = row.code;
  s.key = {static_cast<int>(i + 1)};
  s.name = row.name;
  s.type = row.type;
  s.status = row.executing ? events::StepStatus::kExecuting : events::StepStatus::kPending;
  s.sort = row.sort;
  s.max_retry = row.max_retry;
  s.plan_step = &plan.steps[i];
  return s;
}

// First claims (attempt 0 -> 1) with their plans' rows, first steps EXECUTING, in the
// caller's transaction: SagaEngine::ClaimBatch's for a poll, EventRun::ClaimInGroup's
// for one event. Returns the ids claimed; throws ClaimRulesNeeded when rows of a
// claimed event's code exist (the claim was written: the caller rolls back).
// REQUIRES: inside the caller's transaction (`c` is its connection).
inline std::set<int64_t> ClaimWithPlanRows(storage::Connection& c, const Plans& plans,
                                    const std::vector<const AssignedEvent*>& events, const std::string& node) {
  std::vector<events::ClaimRow> claims;
  for (const AssignedEvent* e : events) claims.push_back({e->id, e->version});
  std::vector<int64_t> ids = events::ClaimFirstAttempts(c, claims, node);
  std::set<int64_t> claimed(ids.begin(), ids.end());
  std::vector<events::NewStep> rows;
  for (const AssignedEvent* e : events) {
    if (!claimed.count(e->id)) continue;
    const Plans::Plan& plan = *plans.Find(e->topic);
    for (size_t i = 0; i < plan.steps.size(); ++i) rows.push_back(PlanRow(plan, *e, i, i == 0));
  }
  if (events::InsertSteps(c, rows, node, 1) != rows.size()) throw ClaimRulesNeeded("step rows exist already");
  return claimed;
}

class EventRun;

// StepContext for one handler call. Execute(): the first tx() takes a turn on the
// node's commit group (commit_group.h), InsertAtCommit queues rows for it, and the
// engine commits the step's new state through the group. Compensate(): the first tx()
// begins the step's own fenced transaction; the engine finishes and commits it.
class EngineContext final : public StepContext {
 public:
  EngineContext(EventRun& run, const StepState& step, bool compensating,
                Clock::TimePoint deadline, std::stop_token stop, int progress);

  const std::string& event_code() const override;
  const std::string& step_name() const override { return step_.name; }
  const std::string& idempotency_key() const override { return step_.code; }
  const nlohmann::json& payload() const override;
  int attempt() const override;
  nlohmann::json PreviousOutputs() const override;
  const std::string& tenant_id() const override;
  const std::string& data_id() const override;
  int step_retry_count() const override {
    return compensating_ ? step_.compensation_retry_count : step_.retry_count;
  }
  const nlohmann::json& compensation_data() const override { return step_.compensation_data; }
  Clock::TimePoint deadline() const override { return deadline_; }
  Clock& clock() override;
  std::stop_token stop_token() const override { return stop_; }
  storage::Connection& tx() override;
  bool StillOwner() override;
  void ReportProgress(const nlohmann::json& progress) override;
  Datasources& datasources() override;
  const nlohmann::json& child_params() const override { return step_.child_params; }
  void InsertAtCommit(std::string_view head, std::string_view tail, std::vector<storage::Value> row) override;
  void AddChildStep(nlohmann::json params) override {
    if (compensating_) throw std::logic_error("AddChildStep is for Execute() only");
    children_.push_back(std::move(params));
  }

  ~EngineContext() override { LeaveGroup(); }

  // Engine side.
  bool lost() const { return lost_; }
  bool has_tx() const { return tx_.has_value() || member_ != nullptr; }
  // Forward steps commit through the node's commit groups (commit_group.h).
  bool grouped() const;
  // The turn on the commit group's connection that tx() or JoinGroup took; null
  // until then (a step that wrote nothing itself commits without one).
  std::unique_ptr<CommitGroups::Member> TakeMember() { return std::move(member_); }
  // Takes a turn on the open group's connection (tx(), or the engine's own writes).
  void JoinGroup();
  void LeaveGroup() noexcept;
  StepTx& OpenTx();  // BEGIN without the fence: the caller's first statement fences
  StepTx& open_tx() { return *tx_; }
  void ReleaseTx() { tx_.reset(); }
  const std::vector<nlohmann::json>& children() const { return children_; }
  std::vector<events::DeferredRow> TakeRows() { return std::move(rows_); }
  void OnSqlError(const storage::StatementError& e, std::string& message) {
    if (tx_) {
      message = tx_->Translate(e, "step statement").what();
      return;
    }
    if (member_ && e.kind() == DbError::Kind::kConnectionLost) member_->conn().mark_broken();
    message = e.WithContext("step statement").what();
  }

 private:
  EventRun& run_;
  const StepState& step_;
  const bool compensating_;
  const Clock::TimePoint deadline_;
  const std::stop_token stop_;
  const int progress_;  // written by the fence: the event's progress if this step commits
  std::optional<StepTx> tx_;
  std::unique_ptr<CommitGroups::Member> member_;
  bool lost_ = false;
  std::vector<nlohmann::json> children_;
  std::vector<events::DeferredRow> rows_;  // InsertAtCommit, grouped steps
};

class EventRun {
 public:
  EventRun(Deps deps, const Plans& plans, const AssignedEvent& ev, std::stop_token stop)
      : d_(std::move(deps)), plans_(plans), ev_(ev), stop_(std::move(stop)),
        trace_(ev.trace_id.empty() ? ev.code : ev.trace_id), fence_{ev.id, ev.version},
        attempt_(ev.attempt + 1) {}

  Outcome Go();

  // Forward steps one at a time, in two halves, so that one thread can drive several
  // events (SagaEngine::RunBatch): BeginStep runs the next step's handler and queues
  // its success in the commit group; EndStep waits for that COMMIT. Each returns the
  // outcome once the event is done (BeginStep: all steps done, a failure handled, a
  // stop), else nullopt. Throw OwnershipLostError like Go(). Start with StartClaimed()
  // (or Go() runs them itself).
  std::optional<Outcome> StartClaimed();
  std::optional<Outcome> BeginStep();
  std::optional<Outcome> EndStep();

  // For EngineContext. A batch-claimed event whose claim waits for its first step's
  // commit (AssignedEvent::claim_deferred): ClaimInGroup writes the claim and the
  // plan's rows now, in the group's transaction `c`, for a step that writes through
  // tx(); false when the event is no longer assigned here (nothing written). Throws
  // ClaimRulesNeeded when rows of its code exist (the claim was written: roll back).
  bool claim_deferred() const { return claim_ == ClaimState::kDeferred; }
  // REQUIRES: inside the commit group's transaction (`c`).
  bool ClaimInGroup(storage::Connection& c);
  Deps& deps() { return d_; }
  const AssignedEvent& event() const { return ev_; }
  const nlohmann::json& payload() const { return payload_; }
  const events::Fence& fence() const { return fence_; }
  int attempt() const { return attempt_; }
  const std::vector<StepState>& steps() const { return steps_; }
  // The delay of a transient failure's retry: `backoff`, or the step's retry_after
  // when longer, at most the topic's backoff_max.
  Millis RetryDelay(Millis backoff, const StepResult& result) const {
    if (!result.retry_after) return backoff;
    return std::max(backoff, std::min(*result.retry_after, topic().backoff_max));
  }

 private:
  enum class Claim { kNotClaimed, kRejected, kSettled, kRun };
  // kClaimed: committed (by Go's claim, ClaimBatch or an earlier step's commit).
  // kDeferred: still ASSIGNED; the first step's success claims it (StepSuccess::claim).
  // kInGroup: claimed in the open commit group's transaction (ClaimInGroup).
  enum class ClaimState { kClaimed, kDeferred, kInGroup };
  struct Attempt {
    StepResult result;
    std::unique_ptr<EngineContext> ctx;
    // The failure was the database's, not the step's: a lost connection, a server that
    // does not answer (docs/event-lifecycle.md, "Retry arithmetic").
    bool not_step_fault = false;
    // Among those: no server answered at a datasource's address (DbError::kUnreachable:
    // nothing ran there). The step waits for it; nothing is counted.
    bool unreachable = false;
  };
  // What a forward failure uses up: one of the event's retries (the step failed), one
  // of its resets (not the step's fault), or nothing (kWait: a database the step needs
  // could not be reached at all; again after a backoff, for as long as it takes).
  enum class Charge { kRetry, kReset, kWait };
  static Charge ChargeOf(const Attempt& a) {
    return a.unreachable ? Charge::kWait : a.not_step_fault ? Charge::kReset : Charge::kRetry;
  }

  // Start of a run: the plan and the parsed payload; returns why the event must be
  // rejected (unknown topic, payload not JSON), empty when it can run.
  std::string Prepare();
  // REQUIRES: inside the caller's claim transaction (`c`).
  Claim ClaimTx(storage::Connection& c, const std::string& reject);
  // After the claim transaction: the outcome when it left nothing to run (stats and
  // log as Go reports them), else nullopt (claimed; steps_ and phase_ are set).
  std::optional<Outcome> Claimed(Claim claim);
  // A deferred claim that cannot wait (its first step failed, or its group rolled
  // back): the event is claimed on its own with the full rules (ClaimTx), and the run
  // goes on from its first step not yet SUCCESS, which runs again under the claim.
  std::optional<Outcome> ClaimAndRerun(const std::string& why);
  // BeginStep's ClaimAndRerun: also begins the step again (BeginStep returns
  // nullopt only with a success staged for EndStep).
  std::optional<Outcome> RerunClaimed(const std::string& why);
  // REQUIRES: inside the claim's transaction (`c`), after the claim's fenced UPDATE.
  // Returns false, steps_ left empty, when the event has more than kMaxStepRows step
  // rows (only rows written by hand can be so many): the claim then fails the event.
  bool LoadOrInsertSteps(storage::Connection& c, bool mark_first_executing, bool& first_marked);
  std::vector<StepState> FromRows(const std::vector<events::StepRow>& rows) const;
  // In the caller's transaction, after a fenced write: RUNNING -> COMPENSATING with
  // the original failure, a step left EXECUTING by a lost owner settled FAILED, then
  // the first compensation marked, or COMPENSATED at once when nothing needs undoing.
  // `steps` is the state after the failure, updated here. Returns true when the event
  // is COMPENSATED already.
  bool StartCompensationIn(storage::Connection& c, events::Fence& fence, std::vector<StepState>& steps,
                           const nlohmann::json& result, const std::string& error);

  Outcome RunForward();
  void BeginForward();  // from the first step not yet SUCCESS
  Outcome RunCompensation();
  Attempt Invoke(StepState& step, bool compensate);
  // A forward step's success on its way to the database: queued in the node's commit
  // group (ticket), or committed already (steps that do not group).
  struct StagedSuccess {
    std::vector<StepState> children;  // added by the step (AddChildStep)
    size_t next_existing = 0;
    bool last = false;
    bool touch = false;  // the event's progress and modifier_time written too
    Clock::TimePoint now{};
    std::optional<CommitGroups::Ticket> ticket;
    // The fence once committed: the group's statements change the status of a last
    // step's event (-> SUCCESS) and of a deferred claim (ASSIGNED -> RUNNING, or
    // SUCCESS with its last step), one version each (events::ApplyStepSuccesses).
    events::Fence fence_after;
  };
  StagedSuccess StageStepSuccess(size_t i, EngineContext& ctx, const StepResult& result);
  // After the commit: the step SUCCESS here too; returns the next step's index.
  size_t ApplyStepSuccess(size_t i, StagedSuccess& staged, const StepResult& result);
  // Recording step `i`'s success failed (not a group rollback).
  std::optional<Outcome> RecordFailed(size_t i, const DbError& e);
  Outcome ForwardFailure(size_t i, const StepResult& result, Charge charge = Charge::kRetry);
  // The claim-time poison guard: reset_count > max_resets. In the claim's transaction
  // (`c`): FAILED with the reason; forward steps left EXECUTING marked interrupted, a
  // compensation's step named as the one whose compensation failed.
  Claim FailResetTooOften(storage::Connection& c);
  std::string ResetsExhausted() const;
  void CommitCompensated(const std::vector<size_t>& order, size_t k, EngineContext& ctx);
  Outcome CompensationFailure(size_t i, const StepResult& result, Charge charge = Charge::kRetry);
  Outcome Abandon(const std::string& why);
  // Per-step routing: when this node does not reach what step `i` needs (its forward
  // run, or its compensation), hands the event on (events::HandOnEvent and
  // events::ReleaseStep in one transaction) and returns kHandedOn; nullopt when it
  // reaches it. REQUIRES: the event is claimed (claim_ == kClaimed). Throws
  // OwnershipLostError when the fence no longer holds (nothing written).
  std::optional<Outcome> HandOnIfUnreached(size_t i, bool compensate);
  // What the step needs (empty: nothing, or a step the plan lost), and whether this
  // node reaches it (Deps::reach; always without one).
  std::vector<std::string> Needs(const StepState& step, bool compensate) const;
  bool Reached(const StepState& step, bool compensate) const;

  size_t NextNotSucceeded(size_t from) const {
    while (from < steps_.size() && steps_[from].status == events::StepStatus::kSuccess) ++from;
    return from;
  }
  int Progress(int succeeded, size_t total) const {
    return total == 0 ? 100 : static_cast<int>(succeeded * 100 / static_cast<int>(total));
  }
  int Succeeded() const {
    return static_cast<int>(std::count_if(steps_.begin(), steps_.end(),
                                          [](const StepState& s) { return s.status == events::StepStatus::kSuccess; }));
  }
  Millis TouchInterval() const { return std::min(Millis(1000), topic().max_processing_time / 4); }
  int64_t ElapsedMs() const {
    return std::chrono::duration_cast<Millis>(d_.clock.Now() - started_).count();
  }
  const TopicSettings& topic() const { return *plan_->topic; }

  Deps d_;
  const Plans& plans_;
  const AssignedEvent& ev_;
  const std::stop_token stop_;
  const std::string trace_;
  events::Fence fence_;  // while this run owns the event; replaced by what each transition returns
  ClaimState claim_ = ClaimState::kClaimed;
  const int attempt_;  // this claim's attempt
  Clock::TimePoint started_{};
  Clock::TimePoint last_touch_{};  // the claim or the last write of modifier_time
  const Plans::Plan* plan_ = nullptr;
  nlohmann::json payload_;
  std::string phase_ = kForward;
  int retry_count_ = 0;  // the event's forward retries at the claim
  int reset_count_ = 0;  // the event's resets at the claim (max_resets)
  std::string failed_at_claim_;  // why the claim failed the event (rejected, too many steps, reset too often)
  std::vector<StepState> steps_;  // in forward (tree) order
  // RunForward / BeginStep / EndStep.
  size_t next_ = 0;           // the step to run next
  int reruns_ = 0;            // of this step after its commit group rolled back
  Attempt pending_;           // the step whose success is being recorded
  std::optional<StagedSuccess> staged_;
};

}  // namespace dsync::saga::run
