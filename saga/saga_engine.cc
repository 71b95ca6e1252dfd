#include "saga/saga_engine.h"

#include <algorithm>
#include <set>
#include <charconv>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "saga/backoff.h"
#include "saga/commit_group.h"
#include "saga/deadline_timer.h"
#include "events/step_progress.h"
#include "saga/step_store.h"

namespace dsync::saga {

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kNotClaimed: return "not_claimed";
    case Outcome::kSucceeded: return "succeeded";
    case Outcome::kRetryScheduled: return "retry_scheduled";
    case Outcome::kCompensated: return "compensated";
    case Outcome::kFailed: return "failed";
    case Outcome::kLostOwnership: return "lost_ownership";
    case Outcome::kAbandoned: return "abandoned";
  }
  return "unknown";
}

// ---- Plans -----------------------------------------------------------------------

namespace {
// The widths of distribute_event_step.step_name / step_type.
constexpr size_t kMaxStepNameLength = 50;
}  // namespace

Plans::Plans(const std::map<std::string, TopicSettings>& topics, const StepRegistry& registry)
    : topics_(topics) {
  for (const auto& [name, topic] : topics_) {
    Plan plan;
    plan.topic = &topic;
    for (size_t i = 0; i < topic.steps.size(); ++i) {
      const StepSpec& spec = topic.steps[i];
      // Same shape as the settings loader's errors: "config: <path>: <reason>".
      std::string where = "config: topics." + name + ".steps[" + std::to_string(i) + "] (" + spec.name + ")";
      if (spec.name.empty() || spec.name.size() > kMaxStepNameLength) {
        throw ConfigError(where + ": step name must be 1 to 50 characters");
      }
      if (spec.type.size() > kMaxStepNameLength) {
        throw ConfigError(where + ": step type must be at most 50 characters");
      }
      try {
        plan.steps.push_back(Step{spec, registry.Create(spec)});
      } catch (const ConfigError& e) {
        std::string_view reason = e.what();
        if (reason.starts_with("config: ")) reason.remove_prefix(8);
        throw ConfigError(where + ": " + std::string(reason));
      }
    }
    plans_.emplace(name, std::move(plan));
  }
}

void Plans::StepSpeed::Observe(std::chrono::microseconds took) {
  const int64_t us = std::max<int64_t>(0, took.count());
  int64_t avg = average_us_.load(std::memory_order_relaxed);
  // Lost updates between threads only blur an average.
  average_us_.store(avg < 0 ? us : avg + (us - avg) / 8, std::memory_order_relaxed);
}

bool Plans::StepSpeed::fast() const {
  const int64_t avg = average_us_.load(std::memory_order_relaxed);
  return avg >= 0 && avg < kFastStep.count();
}

const Plans::Plan* Plans::Find(const std::string& topic) const {
  auto it = plans_.find(topic);
  return it == plans_.end() ? nullptr : &it->second;
}

// ---- one run of one event ----------------------------------------------------------

namespace {

constexpr const char* kForward = "FORWARD";
constexpr const char* kCompensate = "COMPENSATE";
// A step whose commit group rolled back (another member failed) runs again up to
// this many times in a row before it counts as a transient failure.
constexpr int kMaxGroupReruns = 5;

// Position of a step in the plan tree, from its code: "<event>#2" -> {2},
// "<event>#2.3" -> {2, 3}. Forward order is ascending; compensation descending.
std::vector<int> TreeKey(const std::string& code) {
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

nlohmann::json ParseOrString(const std::optional<std::string>& text) {
  if (!text) return nullptr;
  auto parsed = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  return parsed.is_discarded() ? nlohmann::json(*text) : parsed;
}

std::string OneLine(std::string s) {
  for (char& c : s) if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// One step as the engine tracks it (mirrors its row).
struct StepState {
  std::string code;
  std::vector<int> key;
  std::string name;
  std::string type;
  std::string status = "PENDING";
  int sort = 0;
  int retry_count = 0;
  int compensation_retry_count = 0;
  int max_retry = 0;
  nlohmann::json compensation_data;  // null: none saved
  nlohmann::json child_params;       // null for the plan's own steps
  const Plans::Step* plan_step = nullptr;  // its handler; null if the plan lost it
};

// Steps that compensation undoes: every SUCCESS one, one whose compensation was
// interrupted or failed (COMPENSATING), and a failed one that saved compensation data.
bool NeedsCompensation(const StepState& s) {
  if (s.status == "SUCCESS" || s.status == "COMPENSATING") return true;
  return (s.status == "FAILED" || s.status == "EXECUTING") && !s.compensation_data.is_null();
}

// Exact reverse of forward order (children before their parent).
std::vector<size_t> CompensationOrder(const std::vector<StepState>& steps) {
  std::vector<size_t> order;
  for (size_t i = steps.size(); i-- > 0;) {
    if (NeedsCompensation(steps[i])) order.push_back(i);
  }
  return order;
}

// A transaction on one leased connection whose statements run partly inside a step
// handler (StepContext::tx()). Translates sql::SQLException into DbError here, the
// way ConnectionPool::Transact does; rolls back unless committed.
class StepTx {
 public:
  explicit StepTx(storage::ConnectionPool& pool) : lease_(pool.Borrow()) {}
  ~StepTx() { Rollback(); }
  StepTx(const StepTx&) = delete;
  StepTx& operator=(const StepTx&) = delete;

  storage::Connection& conn() { return *lease_; }

  template <class F>
  auto Do(std::string_view what, F&& fn) -> decltype(fn(std::declval<storage::Connection&>())) {
    try {
      return fn(*lease_);
    } catch (const sql::SQLException& e) {
      throw Translate(e, what);
    }
  }

  void Begin() {
    Do("begin step transaction", [](storage::Connection& c) { c.Begin(); });
    open_ = true;
  }

  // kCommitUnknown when the connection died during COMMIT (it may have applied).
  void Commit(std::string_view what) {
    try {
      lease_->Commit();
      open_ = false;
    } catch (const sql::SQLException& e) {
      DbError err = Translate(e, what);
      if (err.kind() == DbError::Kind::kConnectionLost) {
        open_ = false;
        throw DbError(DbError::Kind::kCommitUnknown, err.code(),
                      std::string(what) + ": connection lost during COMMIT; outcome unknown");
      }
      throw err;
    }
  }

  void Rollback() noexcept {
    if (open_) lease_->Rollback();
    open_ = false;
  }

  DbError Translate(const sql::SQLException& e, std::string_view what) {
    DbError err = storage::TranslateSqlException(e, what);
    if (err.kind() == DbError::Kind::kConnectionLost) {
      lease_->mark_broken();
      open_ = false;  // the server rolled it back
    }
    return err;
  }

 private:
  storage::ConnectionPool::Lease lease_;
  bool open_ = false;
};

[[noreturn]] void ThrowLost(const std::string& at) { throw OwnershipLostError(at); }

// A deferred claim found step rows of its event's code (an event re-produced under an
// old code): it needs the full claim rules (EventRun::ClaimTx).
class ClaimRulesNeeded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
void Fence(bool matched, const char* at) {
  if (!matched) ThrowLost(at);
}

struct Deps {
  storage::ConnectionPool& pool;
  Datasources& datasources;
  Clock& clock;
  const std::string& node;
  SagaStats& stats;
  DeadlineTimer& timer;
  std::function<Millis(Millis, Millis, int)> backoff;
  CommitGroups* groups;  // null: every step commits on its own
};

// The plan's step rows for an event's first claim (codes "<event code>#<n>").
store::NewStep PlanRow(const Plans::Plan& plan, const AssignedEvent& ev, size_t i, bool executing) {
  const StepSpec& spec = plan.steps[i].spec;
  return store::NewStep{
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

StepState PlanState(const Plans::Plan& plan, const store::NewStep& row, size_t i) {
  StepState s;
  s.code = row.code;
  s.key = {static_cast<int>(i + 1)};
  s.name = row.name;
  s.type = row.type;
  s.status = row.executing ? "EXECUTING" : "PENDING";
  s.sort = row.sort;
  s.max_retry = row.max_retry;
  s.plan_step = &plan.steps[i];
  return s;
}

// First claims (attempt 0 -> 1) with their plans' rows, first steps EXECUTING, in the
// caller's transaction: SagaEngine::ClaimBatch's for a poll, EventRun::ClaimInGroup's
// for one event. Returns the ids claimed; throws ClaimRulesNeeded when rows of a
// claimed event's code exist (the claim was written: the caller rolls back).
std::set<int64_t> ClaimWithPlanRows(storage::Connection& c, const Plans& plans,
                                    const std::vector<const AssignedEvent*>& events, const std::string& node) {
  std::vector<store::ClaimRow> claims;
  for (const AssignedEvent* e : events) claims.push_back({e->id, e->version});
  std::vector<int64_t> ids = store::ClaimFirstAttempts(c, claims, node);
  std::set<int64_t> claimed(ids.begin(), ids.end());
  std::vector<store::NewStep> rows;
  for (const AssignedEvent* e : events) {
    if (!claimed.count(e->id)) continue;
    const Plans::Plan& plan = *plans.Find(e->topic);
    for (size_t i = 0; i < plan.steps.size(); ++i) rows.push_back(PlanRow(plan, *e, i, i == 0));
  }
  if (store::InsertSteps(c, rows, node, 1) != rows.size()) throw ClaimRulesNeeded("step rows exist already");
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
  int step_retry_count() const override {
    return compensating_ ? step_.compensation_retry_count : step_.retry_count;
  }
  const nlohmann::json& compensation_data() const override { return step_.compensation_data; }
  std::chrono::steady_clock::time_point deadline() const override { return deadline_; }
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
  std::vector<store::DeferredRow> TakeRows() { return std::move(rows_); }
  void OnSqlError(const sql::SQLException& e, std::string& message) {
    if (tx_) {
      message = tx_->Translate(e, "step statement").what();
      return;
    }
    DbError err = storage::TranslateSqlException(e, "step statement");
    if (member_ && err.kind() == DbError::Kind::kConnectionLost) member_->conn().mark_broken();
    message = err.what();
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
  std::vector<store::DeferredRow> rows_;  // InsertAtCommit, grouped steps
};

class EventRun {
 public:
  EventRun(Deps deps, const Plans& plans, const AssignedEvent& ev, std::stop_token stop)
      : d_(std::move(deps)), plans_(plans), ev_(ev), stop_(std::move(stop)),
        trace_(ev.trace_id.empty() ? ev.code : ev.trace_id), version_(ev.version),
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
  bool ClaimInGroup(storage::Connection& c);
  Deps& deps() { return d_; }
  const AssignedEvent& event() const { return ev_; }
  const nlohmann::json& payload() const { return payload_; }
  int version() const { return version_; }
  int attempt() const { return attempt_; }

 private:
  enum class Claim { kNotClaimed, kRejected, kSettled, kRun };
  // kClaimed: committed (by Go's claim, ClaimBatch or an earlier step's commit).
  // kDeferred: still ASSIGNED; the first step's success claims it (StepSuccess::claim).
  // kInGroup: claimed in the open commit group's transaction (ClaimInGroup).
  enum class ClaimState { kClaimed, kDeferred, kInGroup };
  struct Attempt {
    StepResult result;
    std::unique_ptr<EngineContext> ctx;
  };

  // Start of a run: the plan and the parsed payload; returns why the event must be
  // rejected (unknown topic, payload not JSON), empty when it can run.
  std::string Prepare();
  Claim ClaimTx(storage::Connection& c, const std::string& reject);
  // After the claim transaction: the outcome when it left nothing to run (stats and
  // log as Go reports them), else nullopt (claimed; steps_ and phase_ are set).
  std::optional<Outcome> Claimed(Claim claim, const std::string& reject);
  // A deferred claim that cannot wait (its first step failed, or its group rolled
  // back): the event is claimed on its own with the full rules (ClaimTx), and the run
  // goes on from its first step not yet SUCCESS, which runs again under the claim.
  std::optional<Outcome> ClaimAndRerun(const std::string& why);
  // BeginStep's ClaimAndRerun: also begins the step again (BeginStep returns
  // nullopt only with a success staged for EndStep).
  std::optional<Outcome> RerunClaimed(const std::string& why);
  void LoadOrInsertSteps(storage::Connection& c, bool mark_first_executing, bool& first_marked);
  std::vector<StepState> FromRows(const std::vector<store::StepRow>& rows) const;
  // In the caller's transaction, after a fenced write: RUNNING -> COMPENSATING with
  // the original failure, a step left EXECUTING by a lost owner settled FAILED, then
  // the first compensation marked, or COMPENSATED at once when nothing needs undoing.
  // `steps` is the state after the failure, updated here. Returns true when the event
  // is COMPENSATED already.
  bool StartCompensationIn(storage::Connection& c, std::vector<StepState>& steps,
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
  };
  StagedSuccess StageStepSuccess(size_t i, EngineContext& ctx, const StepResult& result);
  // After the commit: the step SUCCESS here too; returns the next step's index.
  size_t ApplyStepSuccess(size_t i, StagedSuccess& staged, const StepResult& result);
  // Recording step `i`'s success failed (not a group rollback).
  std::optional<Outcome> RecordFailed(size_t i, const DbError& e);
  Outcome ForwardFailure(size_t i, const StepResult& result);
  void CommitCompensated(const std::vector<size_t>& order, size_t k, EngineContext& ctx);
  Outcome CompensationFailure(size_t i, const StepResult& result);
  Outcome Abandon(const std::string& why);

  size_t NextNotSucceeded(size_t from) const {
    while (from < steps_.size() && steps_[from].status == "SUCCESS") ++from;
    return from;
  }
  int Progress(int succeeded, size_t total) const {
    return total == 0 ? 100 : static_cast<int>(succeeded * 100 / static_cast<int>(total));
  }
  int Succeeded() const {
    return static_cast<int>(std::count_if(steps_.begin(), steps_.end(),
                                          [](const StepState& s) { return s.status == "SUCCESS"; }));
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
  int version_;        // the fence: the event's version while this run owns it
  ClaimState claim_ = ClaimState::kClaimed;
  const int attempt_;  // this claim's attempt
  Clock::TimePoint started_{};
  Clock::TimePoint last_touch_{};  // the claim or the last write of modifier_time
  const Plans::Plan* plan_ = nullptr;
  nlohmann::json payload_;
  std::string phase_ = kForward;
  int retry_count_ = 0;  // the event's forward retries at the claim
  bool compensation_started_at_claim_ = false;  // the poison guard turned it COMPENSATING
  std::vector<StepState> steps_;  // in forward (tree) order
  // RunForward / BeginStep / EndStep.
  size_t next_ = 0;           // the step to run next
  int reruns_ = 0;            // of this step after its commit group rolled back
  Attempt pending_;           // the step whose success is being recorded
  std::optional<StagedSuccess> staged_;
};

EngineContext::EngineContext(EventRun& run, const StepState& step, bool compensating,
                             Clock::TimePoint deadline, std::stop_token stop, int progress)
    : run_(run), step_(step), compensating_(compensating), deadline_(deadline),
      stop_(std::move(stop)), progress_(progress) {}

const std::string& EngineContext::event_code() const { return run_.event().code; }
const nlohmann::json& EngineContext::payload() const { return run_.payload(); }
int EngineContext::attempt() const { return run_.attempt(); }
Datasources& EngineContext::datasources() { return run_.deps().datasources; }

StepTx& EngineContext::OpenTx() {
  tx_.emplace(run_.deps().pool);
  tx_->Begin();
  return *tx_;
}

bool EngineContext::grouped() const { return !compensating_ && run_.deps().groups != nullptr; }

void EngineContext::JoinGroup() {
  member_ = run_.deps().groups->Join();
  if (!run_.claim_deferred()) return;
  // The step writes before its claim committed: the claim and the plan's rows go
  // first, into the group's transaction (EventRun::ClaimInGroup).
  bool claimed = false;
  try {
    claimed = run_.ClaimInGroup(member_->conn());
  } catch (const sql::SQLException& e) {
    DbError err = storage::TranslateSqlException(e, "claim in group");
    if (err.kind() == DbError::Kind::kConnectionLost) member_->conn().mark_broken();
    LeaveGroup();
    throw err;
  } catch (...) {
    LeaveGroup();  // the claim was written: the group rolls back
    throw;
  }
  if (!claimed) {  // nothing was written
    run_.deps().groups->Leave(std::move(member_));
    lost_ = true;
    throw OwnershipLostError("event " + run_.event().code + " was taken away from this node (claim)");
  }
}

void EngineContext::InsertAtCommit(std::string_view head, std::string_view tail,
                                   std::vector<storage::Value> row) {
  if (lost_) throw OwnershipLostError("event " + run_.event().code + " was taken away from this node");
  if (!grouped()) return StepContext::InsertAtCommit(head, tail, std::move(row));
  rows_.push_back(store::DeferredRow{std::string(head), std::string(tail), std::move(row)});
}

void EngineContext::LeaveGroup() noexcept {
  if (member_) run_.deps().groups->Abandon(std::move(member_));
}

storage::Connection& EngineContext::tx() {
  if (lost_) throw OwnershipLostError("event " + run_.event().code + " was taken away from this node");
  if (grouped()) {
    if (!member_) JoinGroup();
    return member_->conn();
  }
  if (!tx_) {
    OpenTx();
    bool owner = tx_->Do("step fence", [&](storage::Connection& c) {
      return store::TouchEvent(c, run_.event().id, run_.version(), progress_);
    });
    if (!owner) {
      lost_ = true;
      tx_.reset();
      throw OwnershipLostError("event " + run_.event().code + " was taken away from this node");
    }
  }
  return tx_->conn();
}

bool EngineContext::StillOwner() {
  if (lost_) return false;
  const int64_t id = run_.event().id;
  const int version = run_.version();
  if (member_) {
    try {
      if (!store::OwnsEvent(member_->conn(), id, version)) lost_ = true;
    } catch (const sql::SQLException& e) {
      throw storage::TranslateSqlException(e, "ownership check");
    }
    return !lost_;
  }
  bool owner = tx_ ? tx_->Do("ownership check",
                             [&](storage::Connection& c) { return store::OwnsEvent(c, id, version); })
                   : run_.deps().pool.Run("ownership check", [&](storage::Connection& c) {
                       return store::OwnsEvent(c, id, version);
                     });
  if (!owner) lost_ = true;
  return owner;
}

void EngineContext::ReportProgress(const nlohmann::json& progress) {
  if (lost_) return;
  try {
    if (!events::WriteStepProgress(run_.deps().pool, step_.code, run_.event().id, run_.version(), progress)) {
      spdlog::debug("STEP_PROGRESS_FENCED event={} step={}", run_.event().code, step_.code);
    }
  } catch (const DbError& e) {
    spdlog::debug("STEP_PROGRESS_FAILED event={} step={} err={}", run_.event().code, step_.code, e.what());
  }
}

// ---- claim ---------------------------------------------------------------------

std::string EventRun::Prepare() {
  started_ = d_.clock.Now();
  last_touch_ = started_;
  plan_ = plans_.Find(ev_.topic);
  std::string reject;
  if (plan_ == nullptr) {
    reject = "unknown topic '" + ev_.topic + "'";
  } else if (ev_.payload.find_first_not_of(" \t\r\n") == std::string::npos) {
    payload_ = nlohmann::json::object();  // a NULL/empty payload is an empty object
  } else {
    try {
      payload_ = nlohmann::json::parse(ev_.payload);
    } catch (const nlohmann::json::parse_error& e) {
      std::string what = e.what();
      auto bracket = what.find("] ");  // drop "[json.exception.parse_error.101] "
      reject = "payload is not valid JSON: " +
               OneLine(bracket == std::string::npos ? what : what.substr(bracket + 2));
    }
  }
  return reject;
}

std::optional<Outcome> EventRun::StartClaimed() {
  // Claimed already by SagaEngine::ClaimBatch: RUNNING at attempt 1, version + 1,
  // the plan's rows written with the first step EXECUTING. Or its claim is deferred:
  // ASSIGNED at its version, no rows; the first step's commit claims it.
  const std::string reject = Prepare();
  const bool deferred = !ev_.claimed && ev_.claim_deferred && d_.groups != nullptr;
  if (!(ev_.claimed || deferred) || plan_ == nullptr || !reject.empty()) {
    return Abandon("batch-claimed event cannot run: " + (ev_.claimed || deferred ? reject : "not claimed"));
  }
  retry_count_ = ev_.retry_count;
  for (size_t i = 0; i < plan_->steps.size(); ++i) {
    steps_.push_back(PlanState(*plan_, PlanRow(*plan_, ev_, i, i == 0), i));
  }
  if (deferred) {
    version_ = ev_.version;
    claim_ = ClaimState::kDeferred;
  } else {
    version_ = ev_.version + 1;
    d_.stats.claimed++;
  }
  return std::nullopt;  // next_ is 0: a fresh plan starts at its first step
}

bool EventRun::ClaimInGroup(storage::Connection& c) {
  if (ClaimWithPlanRows(c, plans_, {&ev_}, d_.node).empty()) return false;
  version_ = ev_.version + 1;
  claim_ = ClaimState::kInGroup;
  return true;
}

std::optional<Outcome> EventRun::ClaimAndRerun(const std::string& why) {
  spdlog::debug("EVENT_CLAIM_ALONE event={} node={} trace={} why=\"{}\"", ev_.code, d_.node, trace_, OneLine(why));
  pending_.ctx.reset();
  staged_.reset();
  claim_ = ClaimState::kClaimed;  // from here on, the usual rules
  Claim claim = d_.pool.Transact("claim event", [&](storage::Connection& c) { return ClaimTx(c, ""); });
  if (std::optional<Outcome> done = Claimed(claim, "")) return done;
  if (phase_ == kCompensate) return RunCompensation();
  BeginForward();
  return std::nullopt;
}

Outcome EventRun::Go() {
  if (ev_.claimed || (ev_.claim_deferred && d_.groups != nullptr)) {
    if (std::optional<Outcome> done = StartClaimed()) return *done;
    return RunForward();
  }
  const std::string reject = Prepare();
  Claim claim = d_.pool.Transact("claim event", [&](storage::Connection& c) {
    return ClaimTx(c, reject);
  });
  if (std::optional<Outcome> done = Claimed(claim, reject)) return *done;
  return phase_ == kForward ? RunForward() : RunCompensation();
}

std::optional<Outcome> EventRun::Claimed(Claim claim, const std::string& reject) {
  if (claim != Claim::kNotClaimed) {
    if (ev_.assigned_age.count() >= 0) {
      d_.stats.claim_latency.Observe(ev_.assigned_age + (d_.clock.Now() - ev_.polled_at));
    }
    if (compensation_started_at_claim_) d_.stats.compensations_started++;
  }
  switch (claim) {
    case Claim::kNotClaimed:
      d_.stats.not_claimed++;
      spdlog::debug("EVENT_NOT_CLAIMED event={} node={} trace={} version={}", ev_.code, d_.node,
                    trace_, ev_.version);
      return Outcome::kNotClaimed;
    case Claim::kRejected:
      d_.stats.claimed++;
      d_.stats.failed++;
      spdlog::warn("EVENT_FAILED event={} node={} trace={} steps=0 ms={} reason=\"{}\"", ev_.code,
                   d_.node, trace_, ElapsedMs(), reject);
      return Outcome::kFailed;
    case Claim::kSettled:  // nothing was left to run: settled inside the claim
      d_.stats.claimed++;
      if (phase_ == kCompensate) {
        d_.stats.compensated++;
        spdlog::info("EVENT_COMPENSATED event={} node={} trace={} steps=0 ms={}", ev_.code, d_.node,
                     trace_, ElapsedMs());
        return Outcome::kCompensated;
      }
      d_.stats.succeeded++;
      spdlog::info("EVENT_SUCCEEDED event={} node={} trace={} steps={} ms={}", ev_.code, d_.node,
                   trace_, steps_.size(), ElapsedMs());
      return Outcome::kSucceeded;
    case Claim::kRun:
      break;
  }
  d_.stats.claimed++;
  return std::nullopt;
}

EventRun::Claim EventRun::ClaimTx(storage::Connection& c, const std::string& reject) {
  // Transact may run this again from BEGIN (deadlock): start from the polled state.
  version_ = ev_.version;
  steps_.clear();
  compensation_started_at_claim_ = false;
  // phase and retry_count cannot change without a version bump, so the polled values
  // hold at this version; a caller that did not poll them gets them read here.
  std::string phase = ev_.phase;
  retry_count_ = ev_.retry_count;
  if (phase.empty()) {
    auto state = store::ReadClaimState(c, ev_.id, version_);
    if (!state) return Claim::kNotClaimed;
    phase = state->phase;
    retry_count_ = state->retry_count;
  }
  phase_ = phase == kCompensate ? kCompensate : kForward;
  const bool poison = reject.empty() && phase_ == kForward && retry_count_ >= topic().max_retry;

  const std::string to = phase_ == kCompensate ? "COMPENSATING" : "RUNNING";
  if (!store::ClaimEvent(c, ev_.id, version_, d_.node, phase_, to,
                         "claimed, attempt " + std::to_string(attempt_))) {
    return Claim::kNotClaimed;
  }
  ++version_;
  if (!reject.empty()) {
    Fence(store::FailEvent(c, ev_.id, version_, d_.node,
                           nlohmann::json{{"error", reject}}.dump(), reject),
          "reject event");
    ++version_;
    return Claim::kRejected;
  }
  bool first_marked = false;
  LoadOrInsertSteps(c, phase_ == kForward && !poison, first_marked);

  if (poison) {
    size_t failing = NextNotSucceeded(0);
    std::string error = "retries exhausted (retry_count " + std::to_string(retry_count_) +
                        " >= max_retry " + std::to_string(topic().max_retry) + ")";
    nlohmann::json result = {{"failed_step", failing < steps_.size()
                                                 ? nlohmann::json(steps_[failing].name)
                                                 : nlohmann::json(nullptr)},
                             {"error", error}};
    spdlog::warn("EVENT_COMPENSATING event={} node={} trace={} reason=\"{}\"", ev_.code, d_.node,
                 trace_, error);
    bool done = StartCompensationIn(c, steps_, result, error);
    compensation_started_at_claim_ = true;
    return done ? Claim::kSettled : Claim::kRun;
  }

  if (phase_ == kForward) {
    size_t next = NextNotSucceeded(0);
    if (next == steps_.size()) {  // every step already SUCCESS (e.g. a plan that shrank)
      Fence(store::SucceedEvent(c, ev_.id, version_, d_.node,
                                nlohmann::json{{"steps", steps_.size()}}.dump()),
            "succeed event");
      ++version_;
      return Claim::kSettled;
    }
    if (!first_marked) store::MarkStepExecuting(c, steps_[next].code, d_.node, attempt_);
    steps_[next].status = "EXECUTING";
    return Claim::kRun;
  }

  std::vector<size_t> order = CompensationOrder(steps_);
  if (order.empty()) {
    Fence(store::CompleteCompensation(c, ev_.id, version_, d_.node, Progress(Succeeded(), steps_.size())),
          "complete compensation");
    ++version_;
    return Claim::kSettled;
  }
  store::MarkStepCompensating(c, steps_[order.front()].code, d_.node, attempt_);
  steps_[order.front()].status = "COMPENSATING";
  return Claim::kRun;
}

void EventRun::LoadOrInsertSteps(storage::Connection& c, bool mark_first_executing,
                                 bool& first_marked) {
  const auto& plan_steps = plan_->steps;
  auto new_row = [&](size_t i, bool executing) { return PlanRow(*plan_, ev_, i, executing); };
  auto state_of = [&](const store::NewStep& row, size_t i) { return PlanState(*plan_, row, i); };

  if (ev_.attempt == 0) {
    // First claim: the whole plan, the first step already EXECUTING.
    std::vector<store::NewStep> rows;
    for (size_t i = 0; i < plan_steps.size(); ++i) rows.push_back(new_row(i, mark_first_executing && i == 0));
    if (store::InsertSteps(c, rows, d_.node, attempt_) == rows.size()) {
      for (size_t i = 0; i < rows.size(); ++i) steps_.push_back(state_of(rows[i], i));
      first_marked = mark_first_executing;
      return;
    }
    // Rows of this code existed already (e.g. an event re-produced under an old
    // code): their recorded state wins.
  }
  steps_ = FromRows(store::LoadSteps(c, ev_.code));
  // Plan positions without a row (the plan grew since): add them PENDING.
  std::vector<bool> present(plan_steps.size(), false);
  for (const StepState& s : steps_) {
    if (s.key.size() == 1 && s.key[0] <= static_cast<int>(plan_steps.size())) present[s.key[0] - 1] = true;
  }
  std::vector<store::NewStep> missing;
  std::vector<size_t> missing_index;
  for (size_t i = 0; i < plan_steps.size(); ++i) {
    if (!present[i]) {
      missing.push_back(new_row(i, false));
      missing_index.push_back(i);
    }
  }
  if (!missing.empty()) {
    store::InsertSteps(c, missing, d_.node, attempt_);
    for (size_t j = 0; j < missing.size(); ++j) steps_.push_back(state_of(missing[j], missing_index[j]));
    std::sort(steps_.begin(), steps_.end(),
              [](const StepState& a, const StepState& b) { return a.key < b.key; });
  }
}

std::vector<StepState> EventRun::FromRows(const std::vector<store::StepRow>& rows) const {
  std::vector<StepState> steps;
  for (const store::StepRow& r : rows) {
    StepState s;
    s.code = r.code;
    s.key = TreeKey(r.code);
    if (s.key.empty()) continue;  // not a code this engine writes
    s.name = r.name;
    s.type = r.type;
    s.status = r.status;
    s.sort = r.sort;
    s.retry_count = r.retry_count;
    s.compensation_retry_count = r.compensation_retry_count;
    s.max_retry = r.max_retry;
    s.compensation_data = ParseOrString(r.compensation_data);
    if (s.key.size() > 1) s.child_params = ParseOrString(r.payload);
    if (s.key[0] <= static_cast<int>(plan_->steps.size())) s.plan_step = &plan_->steps[s.key[0] - 1];
    steps.push_back(std::move(s));
  }
  std::sort(steps.begin(), steps.end(),
            [](const StepState& a, const StepState& b) { return a.key < b.key; });
  return steps;
}

bool EventRun::StartCompensationIn(storage::Connection& c, std::vector<StepState>& steps,
                                   const nlohmann::json& result, const std::string& error) {
  Fence(store::StartCompensation(c, ev_.id, version_, d_.node, result.dump(), error),
        "start compensation");
  for (StepState& s : steps) {
    if (s.status == "EXECUTING" && s.compensation_data.is_null()) {
      store::MarkStepInterrupted(c, s.code,
                                 "interrupted (its node lost the event) and not re-run: the event "
                                 "turned to compensation; never reached SUCCESS, not compensated");
      s.status = "FAILED";
    }
  }
  std::vector<size_t> order = CompensationOrder(steps);
  if (order.empty()) {
    Fence(store::CompleteCompensation(c, ev_.id, version_ + 1, d_.node, 0), "complete compensation");
    version_ += 2;
    phase_ = kCompensate;
    return true;
  }
  store::MarkStepCompensating(c, steps[order.front()].code, d_.node, attempt_);
  ++version_;
  phase_ = kCompensate;
  return false;
}

// ---- forward -------------------------------------------------------------------

EventRun::Attempt EventRun::Invoke(StepState& step, bool compensate) {
  Attempt a;
  if (step.plan_step == nullptr) {
    a.result = StepResult::Permanent("step '" + step.name + "' (" + step.code +
                                     ") is no longer in the plan of topic '" + ev_.topic + "'");
    return a;
  }
  const StepSpec& spec = step.plan_step->spec;
  const Millis timeout = spec.timeout.count() > 0 ? spec.timeout : topic().max_processing_time;
  const Clock::TimePoint deadline = d_.clock.Now() + timeout;
  std::stop_source source;
  std::stop_callback on_shutdown(stop_, [&source] { source.request_stop(); });
  auto ticket = d_.timer.Arm(deadline, source);

  // The progress the step's fence writes: what it will be once this step commits.
  const int succeeded_after = Succeeded() + (compensate ? -1 : 1);
  a.ctx = std::make_unique<EngineContext>(*this, step, compensate, deadline, source.get_token(),
                                          Progress(std::max(0, succeeded_after), steps_.size()));
  StepHandler& handler = *step.plan_step->handler;
  const Clock::TimePoint invoked = d_.clock.Now();
  try {
    a.result = compensate ? handler.Compensate(*a.ctx) : handler.Execute(*a.ctx);
    if (a.result.kind != StepResult::Kind::kOk && a.result.error.empty()) {
      a.result.error = "step reported failure without a reason";
    }
  } catch (const OwnershipLostError& e) {
    a.result = StepResult::Transient(e.what());
  } catch (const PermanentStepError& e) {
    a.result = StepResult::Permanent(OneLine(e.what()));
  } catch (const sql::SQLException& e) {
    std::string message;
    a.ctx->OnSqlError(e, message);
    a.result = StepResult::Transient(message);
  } catch (const std::exception& e) {
    a.result = StepResult::Transient(OneLine(e.what()));
  } catch (...) {
    a.result = StepResult::Transient("step threw a non-standard exception");
  }
  const auto took = d_.clock.Now() - invoked;
  (compensate ? d_.stats.compensation_duration : d_.stats.step_duration).Observe(took);
  if (!compensate) plan_->speed->Observe(std::chrono::duration_cast<std::chrono::microseconds>(took));
  if (a.result.kind != StepResult::Kind::kOk && d_.clock.Now() >= deadline) {
    a.result = StepResult{StepResult::Kind::kTransient, nullptr, a.result.compensation_data,
                          "timed out after " + std::to_string(timeout.count()) + " ms: " +
                              a.result.error};
  }
  if (!compensate) d_.stats.steps_executed++;
  return a;
}

Outcome EventRun::RunForward() {
  BeginForward();
  while (true) {
    if (std::optional<Outcome> done = BeginStep()) return *done;
    if (std::optional<Outcome> done = EndStep()) return *done;
  }
}

void EventRun::BeginForward() {
  next_ = NextNotSucceeded(0);
  reruns_ = 0;
}

std::optional<Outcome> EventRun::BeginStep() {
  const size_t i = next_;
  if (i >= steps_.size()) {
    d_.stats.succeeded++;
    spdlog::info("EVENT_SUCCEEDED event={} node={} trace={} steps={} ms={}", ev_.code, d_.node, trace_,
                 steps_.size(), ElapsedMs());
    return Outcome::kSucceeded;
  }
  if (stop_.stop_requested()) return Abandon("stopped before step " + steps_[i].code);
  pending_ = Invoke(steps_[i], /*compensate=*/false);
  if (pending_.ctx && pending_.ctx->lost()) {
    pending_.ctx.reset();  // gives back the group's turn its tx() took (RunBatch keeps this run)
    ThrowLost("step " + steps_[i].code);
  }
  if (pending_.result.kind != StepResult::Kind::kOk) {
    pending_.ctx.reset();  // rolls back whatever the handler wrote through tx()
    if (stop_.stop_requested()) return Abandon("stopped during step " + steps_[i].code);
    // Failures are recorded under a claim: this run is not recorded, the step runs
    // again claimed (its effects through tx() were rolled back).
    if (claim_ != ClaimState::kClaimed) return RerunClaimed(pending_.result.error);
    return ForwardFailure(i, pending_.result);
  }
  try {
    staged_ = StageStepSuccess(i, *pending_.ctx, pending_.result);
  } catch (const ClaimRulesNeeded& e) {
    return RerunClaimed(e.what());
  } catch (const DbError& e) {
    if (claim_ != ClaimState::kClaimed && e.kind() != DbError::Kind::kCommitUnknown) return RerunClaimed(e.what());
    return RecordFailed(i, e);
  }
  return std::nullopt;
}

std::optional<Outcome> EventRun::RerunClaimed(const std::string& why) {
  if (std::optional<Outcome> done = ClaimAndRerun(why)) return done;
  return BeginStep();  // claimed now: the usual rules, no second deferral
}

std::optional<Outcome> EventRun::EndStep() {
  const size_t i = next_;
  try {
    if (staged_->ticket) d_.groups->Wait(*staged_->ticket);  // GroupRolledBack, DbError, lost
  } catch (const GroupRolledBack& e) {
    // Another member's failure (or a statement error) rolled the whole group back:
    // nothing of this step was written, so it runs again.
    pending_.ctx.reset();
    staged_.reset();
    if (claim_ != ClaimState::kClaimed) return ClaimAndRerun(e.what());
    if (++reruns_ <= kMaxGroupReruns) {
      spdlog::debug("STEP_RERUN event={} node={} trace={} step={} why=\"{}\"", ev_.code, d_.node, trace_,
                    steps_[i].code, e.what());
      return std::nullopt;
    }
    return ForwardFailure(i, StepResult::Transient(std::string("could not record success: ") + e.what()));
  } catch (const DbError& e) {
    return RecordFailed(i, e);
  }
  if (claim_ != ClaimState::kClaimed) {
    // Committed with this step: ASSIGNED -> RUNNING (version + 1), or -> SUCCESS
    // (ApplyStepSuccess counts that one bump); kInGroup counted its claim already.
    if (claim_ == ClaimState::kDeferred && !staged_->last) ++version_;
    claim_ = ClaimState::kClaimed;
    d_.stats.claimed++;
    d_.stats.claimed_at_commit++;
    if (ev_.assigned_age.count() >= 0) {
      d_.stats.claim_latency.Observe(ev_.assigned_age + (d_.clock.Now() - ev_.polled_at));
    }
  }
  next_ = ApplyStepSuccess(i, *staged_, pending_.result);
  reruns_ = 0;
  pending_.ctx.reset();
  staged_.reset();
  return std::nullopt;
}

std::optional<Outcome> EventRun::RecordFailed(size_t i, const DbError& e) {
  if (e.kind() == DbError::Kind::kCommitUnknown) return Abandon(e.what());
  pending_.ctx.reset();
  staged_.reset();
  if (claim_ != ClaimState::kClaimed) return ClaimAndRerun(e.what());
  return ForwardFailure(i, StepResult::Transient(std::string("could not record success: ") + e.what()));
}

EventRun::StagedSuccess EventRun::StageStepSuccess(size_t i, EngineContext& ctx, const StepResult& result) {
  StepState& step = steps_[i];
  StagedSuccess staged;
  std::vector<StepState>& children = staged.children;
  std::vector<store::NewStep> child_rows;
  for (size_t n = 0; n < ctx.children().size(); ++n) {
    StepState child;
    child.code = step.code + "." + std::to_string(n + 1);
    child.key = step.key;
    child.key.push_back(static_cast<int>(n + 1));
    child.name = (step.name + "." + std::to_string(n + 1)).substr(0, kMaxStepNameLength);
    child.type = step.type;
    child.sort = step.sort;
    child.max_retry = step.max_retry;
    child.child_params = ctx.children()[n];
    child.plan_step = step.plan_step;
    child_rows.push_back(store::NewStep{.code = child.code, .job_code = ev_.code,
                                        .tenant_id = ev_.tenant_id, .sort = child.sort,
                                        .type = child.type, .name = child.name,
                                        .max_retry = child.max_retry,
                                        .payload = child.child_params.dump(), .executing = false});
    children.push_back(std::move(child));
  }
  // The next step: this one's first child, else the next not yet SUCCESS.
  const bool has_children = !children.empty();
  staged.next_existing = NextNotSucceeded(i + 1);
  staged.last = !has_children && staged.next_existing == steps_.size();
  const bool last = staged.last;
  const std::string& next_code = has_children ? children.front().code
                                 : last       ? step.code
                                              : steps_[staged.next_existing].code;
  const size_t total = steps_.size() + children.size();
  std::optional<std::string> output =
      result.output.is_null() ? std::nullopt : std::optional<std::string>(result.output.dump());
  std::optional<std::string> compensation =
      result.compensation_data ? std::optional<std::string>(result.compensation_data->dump())
                               : std::nullopt;

  if (ctx.grouped()) {
    // The group fences every member at its COMMIT (commit_group.h).
    if (has_children && !ctx.has_tx()) ctx.JoinGroup();
    std::unique_ptr<CommitGroups::Member> member = ctx.TakeMember();  // null: wrote nothing
    if (has_children) {
      try {
        store::InsertChildSteps(member->conn(), step.code, child_rows);
      } catch (const sql::SQLException& e) {
        DbError err = storage::TranslateSqlException(e, "record child steps");
        if (err.kind() == DbError::Kind::kConnectionLost) member->conn().mark_broken();
        d_.groups->Abandon(std::move(member));
        throw err;
      }
    }
    store::StepSuccess success;
    success.event_id = ev_.id;
    success.version = version_;
    success.step_code = step.code;
    success.output = output;
    success.compensation = compensation;
    success.next_code = last ? "" : next_code;
    success.attempt = attempt_;
    success.finish = last;
    success.result_json = last ? nlohmann::json{{"steps", steps_.size()}}.dump() : "";
    success.progress = Progress(Succeeded() + 1, total);
    // Progress and modifier_time (the sweeper's activity clock) are written at most
    // every TouchInterval: a fast event's intermediate steps skip that row write.
    staged.now = d_.clock.Now();
    staged.touch = staged.now - last_touch_ >= TouchInterval();
    success.touch = staged.touch;
    success.rows = ctx.TakeRows();
    if (claim_ == ClaimState::kDeferred) {  // nothing written yet: the claim comes with it
      success.claim = true;
      for (size_t j = 0; j < steps_.size(); ++j) {
        store::NewStep row = PlanRow(*plan_, ev_, j, !last && j == staged.next_existing);
        if (j == i) {
          row.succeeded = true;
          row.output = output;
          row.compensation = compensation;
        }
        success.plan.push_back(std::move(row));
      }
    }
    staged.ticket = d_.groups->Submit(std::move(member), std::move(success));  // EndStep waits
    return staged;
  }
  // The transaction's first statement is the fence: the handler's (tx() touched the
  // event), else the event's status change (last step) or a touch.
  const bool handler_fenced = ctx.has_tx();
  StepTx& tx = handler_fenced ? ctx.open_tx() : ctx.OpenTx();
  tx.Do("record step success", [&](storage::Connection& c) {
    if (last) {
      Fence(store::SucceedEvent(c, ev_.id, version_, d_.node,
                                nlohmann::json{{"steps", steps_.size()}}.dump()),
            "succeed event");
    } else if (!handler_fenced) {
      Fence(store::TouchEvent(c, ev_.id, version_, Progress(Succeeded() + 1, total)), "step success");
    }
    store::MarkStepSucceeded(c, step.code, output, compensation);
    if (has_children) store::InsertChildSteps(c, step.code, child_rows);
    if (!last) store::MarkStepExecuting(c, next_code, d_.node, attempt_);
  });
  tx.Commit("commit step success");
  ctx.ReleaseTx();
  return staged;
}

size_t EventRun::ApplyStepSuccess(size_t i, StagedSuccess& staged, const StepResult& result) {
  StepState& step = steps_[i];
  if (staged.touch) last_touch_ = staged.now;
  step.status = "SUCCESS";
  step.compensation_data = result.compensation_data.value_or(nullptr);
  if (staged.last) {
    ++version_;
    return steps_.size();
  }
  if (!staged.children.empty()) {
    steps_.insert(steps_.begin() + static_cast<std::ptrdiff_t>(i + 1),
                  std::make_move_iterator(staged.children.begin()),
                  std::make_move_iterator(staged.children.end()));
    steps_[i + 1].status = "EXECUTING";
    return i + 1;
  }
  steps_[staged.next_existing].status = "EXECUTING";
  return staged.next_existing;
}

Outcome EventRun::ForwardFailure(size_t i, const StepResult& result) {
  StepState& step = steps_[i];
  const bool permanent = result.kind == StepResult::Kind::kPermanent;
  const bool step_retries_left = step.retry_count < step.max_retry;
  // The claim that finds retry_count >= max_retry compensates (lifecycle, poison
  // guard), so a retry that would reach it is not scheduled: compensate now.
  const bool event_retries_left = retry_count_ + 1 < topic().max_retry;
  std::optional<std::string> compensation =
      result.compensation_data ? std::optional<std::string>(result.compensation_data->dump())
                               : std::nullopt;
  spdlog::warn("STEP_FAILED event={} node={} trace={} step={} code={} kind={} retry_count={} err=\"{}\"",
               ev_.code, d_.node, trace_, step.name, step.code,
               permanent ? "permanent" : "transient", step.retry_count, result.error);

  if (!permanent && step_retries_left && event_retries_left) {
    const Millis backoff = d_.backoff(topic().backoff_base, topic().backoff_max, step.retry_count);
    const std::string why = "step '" + step.name + "' failed (retry " +
                            std::to_string(step.retry_count + 1) + " of " +
                            std::to_string(step.max_retry) + "): " + result.error;
    d_.pool.Transact("schedule retry", [&](storage::Connection& c) {
      Fence(store::ScheduleEventRetry(c, ev_.id, version_, d_.node, 1, backoff, why, why),
            "schedule retry");
      store::RecordStepFailure(c, step.code, result.error, compensation);
    });
    ++version_;
    d_.stats.retries++;
    spdlog::info("EVENT_RETRY_SCHEDULED event={} node={} trace={} phase=FORWARD step={} "
                 "retry_count={} backoff_ms={}",
                 ev_.code, d_.node, trace_, step.name, retry_count_ + 1, backoff.count());
    return Outcome::kRetryScheduled;
  }

  const std::string error =
      permanent ? result.error
                : "retries exhausted (step retries " + std::to_string(step.retry_count + 1) + "/" +
                      std::to_string(step.max_retry) + ", event retries " +
                      std::to_string(retry_count_) + "/" + std::to_string(topic().max_retry) +
                      "): " + result.error;
  nlohmann::json original = {{"failed_step", step.name}, {"step_code", step.code},
                             {"error", result.error},
                             {"kind", permanent ? "permanent" : "retries_exhausted"}};
  std::vector<StepState> after = steps_;
  after[i].status = "FAILED";
  after[i].retry_count++;
  if (result.compensation_data) after[i].compensation_data = *result.compensation_data;

  spdlog::warn("EVENT_COMPENSATING event={} node={} trace={} failed_step={} reason=\"{}\"", ev_.code,
               d_.node, trace_, step.name, error);
  const int version_before = version_;
  std::vector<StepState> staged;
  bool done = d_.pool.Transact("start compensation", [&](storage::Connection& c) {
    version_ = version_before;  // Transact may run this again from BEGIN
    staged = after;
    bool completed = StartCompensationIn(c, staged, original, error);
    store::RecordStepFailure(c, step.code, result.error, compensation);
    return completed;
  });
  steps_ = std::move(staged);
  d_.stats.compensations_started++;
  std::vector<size_t> order = CompensationOrder(steps_);
  if (done) {
    d_.stats.compensated++;
    spdlog::info("EVENT_COMPENSATED event={} node={} trace={} steps=0 ms={}", ev_.code, d_.node,
                 trace_, ElapsedMs());
    return Outcome::kCompensated;
  }
  steps_[order.front()].status = "COMPENSATING";
  return RunCompensation();
}

// ---- compensation --------------------------------------------------------------

Outcome EventRun::RunCompensation() {
  const std::vector<size_t> order = CompensationOrder(steps_);
  for (size_t k = 0; k < order.size(); ++k) {
    StepState& step = steps_[order[k]];
    if (stop_.stop_requested()) return Abandon("stopped before compensating " + step.code);
    Attempt a = Invoke(step, /*compensate=*/true);
    if (a.ctx && a.ctx->lost()) ThrowLost("compensation of " + step.code);
    if (a.result.kind != StepResult::Kind::kOk) {
      a.ctx.reset();
      if (stop_.stop_requested()) return Abandon("stopped while compensating " + step.code);
      return CompensationFailure(order[k], a.result);
    }
    try {
      CommitCompensated(order, k, *a.ctx);
    } catch (const DbError& e) {
      if (e.kind() == DbError::Kind::kCommitUnknown) return Abandon(e.what());
      a.ctx.reset();
      return CompensationFailure(order[k], StepResult::Transient(std::string("could not record compensation: ") + e.what()));
    }
  }
  d_.stats.compensated++;
  spdlog::info("EVENT_COMPENSATED event={} node={} trace={} steps={} ms={}", ev_.code, d_.node,
               trace_, order.size(), ElapsedMs());
  return Outcome::kCompensated;
}

void EventRun::CommitCompensated(const std::vector<size_t>& order, size_t k, EngineContext& ctx) {
  StepState& step = steps_[order[k]];
  const bool last = k + 1 == order.size();
  const int progress = Progress(Succeeded() - (step.status == "SUCCESS" ? 1 : 0), steps_.size());
  const bool handler_fenced = ctx.has_tx();
  StepTx& tx = handler_fenced ? ctx.open_tx() : ctx.OpenTx();
  tx.Do("record step compensated", [&](storage::Connection& c) {
    if (last) {
      Fence(store::CompleteCompensation(c, ev_.id, version_, d_.node, progress), "complete compensation");
    } else if (!handler_fenced) {
      Fence(store::TouchEvent(c, ev_.id, version_, progress), "step compensated");
    }
    store::MarkStepCompensated(c, step.code);
    if (!last) store::MarkStepCompensating(c, steps_[order[k + 1]].code, d_.node, attempt_);
  });
  tx.Commit("commit step compensated");
  ctx.ReleaseTx();
  step.status = "COMPENSATED";
  d_.stats.steps_compensated++;
  if (last) {
    ++version_;
  } else {
    steps_[order[k + 1]].status = "COMPENSATING";
  }
}

Outcome EventRun::CompensationFailure(size_t i, const StepResult& result) {
  StepState& step = steps_[i];
  const bool permanent = result.kind == StepResult::Kind::kPermanent;
  spdlog::warn("STEP_FAILED event={} node={} trace={} step={} code={} phase=COMPENSATE kind={} "
               "compensation_retry_count={} err=\"{}\"",
               ev_.code, d_.node, trace_, step.name, step.code, permanent ? "permanent" : "transient",
               step.compensation_retry_count, result.error);

  if (!permanent && step.compensation_retry_count < topic().max_retry) {
    const Millis backoff =
        d_.backoff(topic().backoff_base, topic().backoff_max, step.compensation_retry_count);
    const std::string why = "compensation of '" + step.name + "' failed (retry " +
                            std::to_string(step.compensation_retry_count + 1) + " of " +
                            std::to_string(topic().max_retry) + "): " + result.error;
    d_.pool.Transact("schedule compensation retry", [&](storage::Connection& c) {
      Fence(store::ScheduleEventRetry(c, ev_.id, version_, d_.node, 0, backoff, why, why),
            "schedule compensation retry");
      store::RecordCompensationFailure(c, step.code, result.error);
    });
    ++version_;
    d_.stats.retries++;
    spdlog::info("EVENT_RETRY_SCHEDULED event={} node={} trace={} phase=COMPENSATE step={} "
                 "compensation_retry_count={} backoff_ms={}",
                 ev_.code, d_.node, trace_, step.name, step.compensation_retry_count + 1,
                 backoff.count());
    return Outcome::kRetryScheduled;
  }

  const std::string error =
      permanent ? result.error
                : "compensation retries exhausted (" +
                      std::to_string(step.compensation_retry_count + 1) + " failures): " +
                      result.error;
  d_.pool.Transact("fail compensation", [&](storage::Connection& c) {
    Fence(store::FailCompensation(c, ev_.id, version_, d_.node, step.name, error),
          "fail compensation");
    store::RecordCompensationFailure(c, step.code, result.error);
  });
  ++version_;
  d_.stats.failed++;
  spdlog::error("EVENT_FAILED event={} node={} trace={} step={} ms={} reason=\"compensation of '{}' "
                "failed: {}\"",
                ev_.code, d_.node, trace_, step.name, ElapsedMs(), step.name, error);
  return Outcome::kFailed;
}

Outcome EventRun::Abandon(const std::string& why) {
  spdlog::warn("EVENT_ABANDONED event={} node={} trace={} version={} reason=\"{}\"", ev_.code, d_.node,
               trace_, version_, OneLine(why));
  return Outcome::kAbandoned;
}

}  // namespace

// ---- SagaEngine ----------------------------------------------------------------

SagaEngine::SagaEngine(storage::ConnectionPool& pool, const Plans& plans, Datasources& datasources,
                       Clock& clock, std::string node_address)
    : pool_(pool), plans_(plans), datasources_(datasources), clock_(clock),
      node_address_(std::move(node_address)), timer_(std::make_unique<DeadlineTimer>(clock)),
      groups_(std::make_unique<CommitGroups>(pool, node_address_)), rng_(std::random_device{}()) {}

SagaEngine::~SagaEngine() = default;

Millis SagaEngine::Backoff(Millis base, Millis max, int retries) {
  std::lock_guard lock(rng_mu_);
  return RetryBackoff({base, max}, retries, [this] {
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng_);
  });
}

template <class F>
auto SagaEngine::Guarded(const AssignedEvent& event, F&& run) -> decltype(run()) {
  const std::string& trace = event.trace_id.empty() ? event.code : event.trace_id;
  try {
    return run();
  } catch (const OwnershipLostError& e) {
    stats_.lost_ownership++;
    spdlog::warn("EVENT_LOST_OWNERSHIP event={} node={} trace={} at=\"{}\"", event.code,
                 node_address_, trace, OneLine(e.what()));
    return Outcome::kLostOwnership;
  } catch (const std::exception& e) {
    // Database unreachable, commit outcome unknown, or a bug: leave the event to the
    // sweeper (or this node's restart hand-back), which resets it by version.
    spdlog::warn("EVENT_ABANDONED event={} node={} trace={} reason=\"{}\"", event.code,
                 node_address_, trace, OneLine(e.what()));
    return Outcome::kAbandoned;
  }
}

Outcome SagaEngine::Run(const AssignedEvent& event, std::stop_token stop) {
  Deps deps{pool_, datasources_, clock_, node_address_, stats_, *timer_,
            [this](Millis base, Millis max, int retries) { return Backoff(base, max, retries); },
            groups_.get()};
  EventRun run(std::move(deps), plans_, event, std::move(stop));
  return Guarded(event, [&] { return run.Go(); });
}

bool SagaEngine::Batchable(const AssignedEvent& event) const {
  if (!event.claimed && !event.claim_deferred) return false;
  const Plans::Plan* plan = plans_.Find(event.topic);
  return plan != nullptr && plan->speed->fast();
}

std::vector<Outcome> SagaEngine::RunBatch(const std::vector<const AssignedEvent*>& events,
                                          std::stop_token stop) {
  struct Slot {
    const AssignedEvent* event;
    std::unique_ptr<EventRun> run;
    std::optional<Outcome> outcome;  // set once the event is done
  };
  const Deps deps{pool_, datasources_, clock_, node_address_, stats_, *timer_,
                  [this](Millis base, Millis max, int retries) { return Backoff(base, max, retries); },
                  groups_.get()};
  std::vector<Slot> slots;
  slots.reserve(events.size());
  for (const AssignedEvent* e : events) {
    slots.push_back(Slot{e, std::make_unique<EventRun>(deps, plans_, *e, stop), std::nullopt});
  }
  // Runs one half of a slot's next step; an outcome (or an exception, as in Run) ends it.
  auto advance = [&](Slot& s, auto&& half) {
    s.outcome = Guarded(*s.event, [&] { return half(*s.run); });
    if (s.outcome) s.run.reset();  // done: whatever it still holds (a group's turn) goes back now
  };
  for (Slot& s : slots) advance(s, [](EventRun& r) { return r.StartClaimed(); });
  std::vector<Slot*> waiting;
  while (true) {
    waiting.clear();
    for (Slot& s : slots) {
      if (s.outcome) continue;
      advance(s, [](EventRun& r) { return r.BeginStep(); });
      if (!s.outcome) waiting.push_back(&s);
    }
    if (waiting.empty()) break;
    for (Slot* s : waiting) advance(*s, [](EventRun& r) { return r.EndStep(); });
  }
  std::vector<Outcome> outcomes;
  for (const Slot& s : slots) outcomes.push_back(*s.outcome);
  return outcomes;
}

CommitGroupStats& SagaEngine::group_stats() { return groups_->stats(); }

std::vector<AssignedEvent> SagaEngine::ClaimBatch(std::vector<AssignedEvent> events,
                                                  std::vector<AssignedEvent>& rest) {
  std::vector<AssignedEvent> batch;
  for (AssignedEvent& e : events) {
    const Plans::Plan* plan = plans_.Find(e.topic);
    const bool blank = e.payload.find_first_not_of(" \t\r\n") == std::string::npos;
    if (plan != nullptr && !plan->steps.empty() && e.attempt == 0 && e.phase == kForward &&
        e.retry_count < plan->topic->max_retry && (blank || nlohmann::json::accept(e.payload))) {
      batch.push_back(std::move(e));
    } else {
      rest.push_back(std::move(e));
    }
  }
  std::vector<AssignedEvent> out;
  // Fast plans: the claim waits for the first step's commit (one row write and one
  // transaction less per event; AssignedEvent::claim_deferred).
  std::vector<AssignedEvent> claim_now;
  for (AssignedEvent& e : batch) {
    e.claim_deferred = plans_.Find(e.topic)->speed->fast();
    (e.claim_deferred ? out : claim_now).push_back(std::move(e));
  }
  batch = std::move(claim_now);
  if (batch.empty()) return out;
  std::vector<const AssignedEvent*> to_claim;
  for (const AssignedEvent& e : batch) to_claim.push_back(&e);
  std::set<int64_t> claimed;
  try {
    claimed = pool_.Transact("claim events", [&](storage::Connection& c) {
      return ClaimWithPlanRows(c, plans_, to_claim, node_address_);
    });
  } catch (const ClaimRulesNeeded&) {  // some were re-produced under an old code: one by one
    for (AssignedEvent& e : batch) rest.push_back(std::move(e));
    return out;
  }
  const Clock::TimePoint now = clock_.Now();
  for (AssignedEvent& e : batch) {
    if (!claimed.count(e.id)) {
      stats_.not_claimed++;
      continue;
    }
    if (e.assigned_age.count() >= 0) stats_.claim_latency.Observe(e.assigned_age + (now - e.polled_at));
    e.claimed = true;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace dsync::saga
