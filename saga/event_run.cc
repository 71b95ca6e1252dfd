#include "saga/event_run.h"

#include "config/step_datasources.h"
#include "events/step_progress.h"
#include "storage/error_class.h"

#include <spdlog/spdlog.h>

namespace dsync::saga::run {
namespace {

// Most step rows the engine loads for one event: far above any plan (a plan's steps
// and their children), and what the API shows of one event (api/event_store.cc). An
// event with more (rows written by hand) fails at its claim instead of being read into
// memory whole.
constexpr int64_t kMaxStepRows = 10000;

// A step row's status; a text no version of the engine writes (a row written by hand)
// is logged and taken as PENDING, as the engine always treated an unknown status: the
// step is neither done nor undone, so it runs.
events::StepStatus StatusOf(const events::StepRow& r) {
  if (std::optional<events::StepStatus> s = events::ParseStepStatus(r.status)) return *s;
  spdlog::warn("STEP_STATUS_UNKNOWN step={} status={} (taken as {})", r.code, r.status,
               events::ToText(events::StepStatus::kPending));
  return events::StepStatus::kPending;
}

}  // namespace

EngineContext::EngineContext(EventRun& run, const StepState& step, bool compensating,
                             Clock::TimePoint deadline, std::stop_token stop, int progress)
    : run_(run), step_(step), compensating_(compensating), deadline_(deadline),
      stop_(std::move(stop)), progress_(progress) {}

const std::string& EngineContext::event_code() const { return run_.event().code; }
const nlohmann::json& EngineContext::payload() const { return run_.payload(); }
int EngineContext::attempt() const { return run_.attempt(); }
Datasources& EngineContext::datasources() { return run_.deps().datasources; }
Clock& EngineContext::clock() { return run_.deps().clock; }

const std::string& EngineContext::tenant_id() const { return run_.event().tenant_id; }
const std::string& EngineContext::data_id() const { return run_.event().data_id; }

nlohmann::json EngineContext::PreviousOutputs() const {
  nlohmann::json out = nlohmann::json::object();
  for (const StepState& s : run_.steps()) {
    if (s.key.size() != 1 || step_.key.empty() || s.key[0] >= step_.key[0]) continue;  // plan steps before this one
    if (s.status != events::StepStatus::kSuccess || !s.output || s.output->empty()) continue;
    out[s.name] = ParseOrString(s.output);
  }
  return out;
}

StepTx& EngineContext::OpenTx() {
  tx_.emplace(run_.deps().pool);
  tx_->Begin();
  return *tx_;
}

bool EngineContext::grouped() const { return !compensating_; }

void EngineContext::JoinGroup() {
  member_ = run_.deps().groups.Join();
  if (!run_.claim_deferred()) return;
  // The step writes before its claim committed: the claim and the plan's rows go
  // first, into the group's transaction (EventRun::ClaimInGroup).
  bool claimed = false;
  try {
    claimed = run_.ClaimInGroup(member_->conn());
  } catch (const storage::StatementError& e) {
    if (e.kind() == DbError::Kind::kConnectionLost) member_->conn().mark_broken();
    LeaveGroup();
    throw e.WithContext("claim in group");
  } catch (...) {
    LeaveGroup();  // the claim was written: the group rolls back
    throw;
  }
  if (!claimed) {  // nothing was written
    run_.deps().groups.Leave(std::move(member_));
    lost_ = true;
    throw OwnershipLostError("event " + run_.event().code + " was taken away from this node (claim)");
  }
}

void EngineContext::InsertAtCommit(std::string_view head, std::string_view tail,
                                   std::vector<storage::Value> row) {
  if (lost_) throw OwnershipLostError("event " + run_.event().code + " was taken away from this node");
  if (!grouped()) return StepContext::InsertAtCommit(head, tail, std::move(row));
  rows_.push_back(events::DeferredRow{std::string(head), std::string(tail), std::move(row)});
}

void EngineContext::LeaveGroup() noexcept {
  if (member_) run_.deps().groups.Abandon(std::move(member_));
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
      return events::TouchEvent(c, run_.fence(), progress_);
    });
    if (!owner) {
      lost_ = true;
      tx_.reset();
      throw OwnershipLostError("event " + run_.event().code + " was taken away from this node");
    }
  }
  return tx_->conn();
}

void EngineContext::ReportProgress(const nlohmann::json& progress) {
  if (lost_) return;
  const events::Fence fence = run_.fence();
  try {
    if (!events::WriteStepProgress(run_.deps().pool, step_.code, fence.id, fence.version, progress)) {
      spdlog::debug("STEP_PROGRESS_FENCED event={} step={}", run_.event().code, step_.code);
    }
  } catch (const DbError& e) {
    spdlog::debug("STEP_PROGRESS_FAILED event={} step={} err={}", run_.event().code, step_.code, e.what());
  }
}

bool EngineContext::StillOwner() {
  if (lost_) return false;
  const events::Fence fence = run_.fence();
  if (member_) {
    try {
      if (!events::OwnsEvent(member_->conn(), fence)) lost_ = true;
    } catch (const storage::StatementError& e) {
      throw e.WithContext("ownership check");
    }
    return !lost_;
  }
  bool owner = tx_ ? tx_->Do("ownership check",
                             [&](storage::Connection& c) { return events::OwnsEvent(c, fence); })
                   : run_.deps().pool.Run("ownership check", [&](storage::Connection& c) {
                       return events::OwnsEvent(c, fence);
                     });
  if (!owner) lost_ = true;
  return owner;
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
      payload_ = ParseJsonBounded(ev_.payload, "payload");
    } catch (const JsonTooDeepError& e) {
      reject = std::string(e.what()) + "; the event cannot run";  // never retried: FAILED at once
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
  const bool deferred = !ev_.claimed && ev_.claim_deferred;
  if (!(ev_.claimed || deferred) || plan_ == nullptr || !reject.empty()) {
    return Abandon("batch-claimed event cannot run: " + (ev_.claimed || deferred ? reject : "not claimed"));
  }
  retry_count_ = ev_.retry_count;
  reset_count_ = ev_.reset_count;
  for (size_t i = 0; i < plan_->steps.size(); ++i) {
    steps_.push_back(PlanState(*plan_, PlanRow(*plan_, ev_, i, i == 0), i));
  }
  const events::Fence assigned{ev_.id, ev_.version};
  if (deferred) {
    fence_ = assigned;
    claim_ = ClaimState::kDeferred;
  } else {
    fence_ = assigned.Next();  // ClaimBatch's claim (ClaimFirstAttempts) committed
    d_.stats.claimed++;
  }
  return std::nullopt;  // next_ is 0: a fresh plan starts at its first step
}

bool EventRun::ClaimInGroup(storage::Connection& c) {
  if (ClaimWithPlanRows(c, plans_, {&ev_}, d_.node).empty()) return false;
  fence_ = events::Fence{ev_.id, ev_.version}.Next();  // claimed, in the group's transaction
  claim_ = ClaimState::kInGroup;
  return true;
}

std::optional<Outcome> EventRun::ClaimAndRerun(const std::string& why) {
  spdlog::debug("EVENT_CLAIM_ALONE event={} node={} trace={} why=\"{}\"", ev_.code, d_.node, trace_, OneLine(why));
  pending_.ctx.reset();
  staged_.reset();
  claim_ = ClaimState::kClaimed;  // from here on, the usual rules
  Claim claim = d_.pool.Transact("claim event", [&](storage::Connection& c) { return ClaimTx(c, ""); });
  if (std::optional<Outcome> done = Claimed(claim)) return done;
  if (phase_ == kCompensate) return RunCompensation();
  BeginForward();
  return std::nullopt;
}

Outcome EventRun::Go() {
  if (ev_.claimed || ev_.claim_deferred) {
    if (std::optional<Outcome> done = StartClaimed()) return *done;
    return RunForward();
  }
  const std::string reject = Prepare();
  Claim claim = d_.pool.Transact("claim event", [&](storage::Connection& c) {
    return ClaimTx(c, reject);
  });
  if (std::optional<Outcome> done = Claimed(claim)) return *done;
  return phase_ == kForward ? RunForward() : RunCompensation();
}

std::optional<Outcome> EventRun::Claimed(Claim claim) {
  if (claim != Claim::kNotClaimed) {
    if (ev_.assigned_age.count() >= 0) {
      d_.stats.claim_latency.Observe(ev_.assigned_age + (d_.clock.Now() - ev_.polled_at));
    }
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
                   d_.node, trace_, ElapsedMs(), failed_at_claim_);
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
  const events::Fence assigned{ev_.id, ev_.version};
  fence_ = assigned;
  steps_.clear();
  failed_at_claim_.clear();
  // phase and retry_count cannot change without a version bump, so the polled values
  // hold at this version; a caller that did not poll them gets them read here.
  std::string phase = ev_.phase;
  retry_count_ = ev_.retry_count;
  reset_count_ = ev_.reset_count;
  if (phase.empty()) {
    auto state = events::ReadClaimState(c, assigned);
    if (!state) return Claim::kNotClaimed;
    phase = state->phase;
    retry_count_ = state->retry_count;
    reset_count_ = state->reset_count;
  }
  phase_ = phase == kCompensate ? kCompensate : kForward;
  // The claim-time poison guard (docs/event-lifecycle.md, "Retry arithmetic"): an event
  // whose runs were reset more than max_resets times (its node died, froze or lost the
  // database each time) ends FAILED here instead of running again. retry_count is no
  // guard: it counts the steps' own failures, which ForwardFailure bounds when they
  // happen, so an event with retries left always runs (max_retry 0 included).
  const bool poison = reject.empty() && reset_count_ > topic().max_resets;

  const std::string& to = events::ToText(phase_ == kCompensate ? events::EventStatus::kCompensating : events::EventStatus::kRunning);
  std::optional<events::Fence> claimed =
      events::ClaimEvent(c, assigned, d_.node, phase_, to, "claimed, attempt " + std::to_string(attempt_));
  if (!claimed) return Claim::kNotClaimed;
  fence_ = *claimed;
  // Fails the event inside the claim: a payload the plan rejects, or too many step rows.
  auto fail_at_claim = [&](std::string why) {
    failed_at_claim_ = std::move(why);
    fence_ = Held(events::FailEvent(c, fence_, d_.node, nlohmann::json{{"error", failed_at_claim_}}.dump(),
                                    failed_at_claim_),
                  "reject event");
    return Claim::kRejected;
  };
  if (!reject.empty()) return fail_at_claim(reject);
  bool first_marked = false;
  if (!LoadOrInsertSteps(c, phase_ == kForward && !poison, first_marked)) {
    return fail_at_claim("more than " + std::to_string(kMaxStepRows) + " step rows; the event cannot run");
  }

  if (poison) return FailResetTooOften(c);

  if (phase_ == kForward) {
    size_t next = NextNotSucceeded(0);
    if (next == steps_.size()) {  // every step already SUCCESS (e.g. a plan that shrank)
      fence_ = Held(events::SucceedEvent(c, fence_, d_.node, nlohmann::json{{"steps", steps_.size()}}.dump()),
                    "succeed event");
      return Claim::kSettled;
    }
    if (!first_marked) events::MarkStepExecuting(c, steps_[next].code, d_.node, attempt_);
    steps_[next].status = events::StepStatus::kExecuting;
    return Claim::kRun;
  }

  std::vector<size_t> order = CompensationOrder(steps_);
  if (order.empty()) {
    fence_ = Held(events::CompleteCompensation(c, fence_, d_.node, Progress(Succeeded(), steps_.size())),
                  "complete compensation");
    return Claim::kSettled;
  }
  events::MarkStepCompensating(c, steps_[order.front()].code, d_.node, attempt_);
  steps_[order.front()].status = events::StepStatus::kCompensating;
  return Claim::kRun;
}

std::string EventRun::ResetsExhausted() const {
  return "reset " + std::to_string(reset_count_) + " times (node crashes, freezes or lost database connections; " +
         "max_resets " + std::to_string(topic().max_resets) + "), never by a step's own failure";
}

EventRun::Claim EventRun::FailResetTooOften(storage::Connection& c) {
  const std::string why = ResetsExhausted();
  if (phase_ == kCompensate) {
    // A compensation that kills its node (or outlives max_processing_time) every time.
    std::vector<size_t> order = CompensationOrder(steps_);
    const std::string step = order.empty() ? std::string("(none)") : steps_[order.front()].name;
    failed_at_claim_ = "compensation of '" + step + "' failed: " + why;  // as last_error reads
    fence_ = Held(events::FailCompensation(c, fence_, d_.node, step, why), "fail compensation");
    return Claim::kRejected;
  }
  // Forward: FAILED, not compensated. The steps done stay done (a retry goes on from the
  // failed step; nothing applies twice), and no handler code runs again on an event
  // that took its nodes down max_resets + 1 times, compensation code included.
  const size_t failing = NextNotSucceeded(0);
  for (StepState& s : steps_) {
    if (s.status != events::StepStatus::kExecuting) continue;
    const std::string note = "interrupted (its node died, froze or lost the database): " + why;
    if (s.plan_step != nullptr && s.plan_step->handler->CompensatesInterrupted()) {
      // It may have applied part of its change (table_sync commits chunk by chunk): it
      // counts as applied (a retry from the start is refused, a compensation undoes it).
      events::MarkStepInterruptedUndoable(c, s.code, note);
      s.compensation_data = nlohmann::json::object();
    } else {
      events::MarkStepInterrupted(c, s.code, note);
    }
    s.status = events::StepStatus::kFailed;
  }
  failed_at_claim_ = why;
  nlohmann::json result = {{"failed_step", failing < steps_.size() ? nlohmann::json(steps_[failing].name)
                                                                   : nlohmann::json(nullptr)},
                           {"step_code", failing < steps_.size() ? nlohmann::json(steps_[failing].code)
                                                                 : nlohmann::json(nullptr)},
                           {"error", why},
                           {"kind", "resets_exhausted"}};
  fence_ = Held(events::FailEvent(c, fence_, d_.node, result.dump(), why), "fail event");
  return Claim::kRejected;
}

bool EventRun::LoadOrInsertSteps(storage::Connection& c, bool mark_first_executing,
                                 bool& first_marked) {
  const auto& plan_steps = plan_->steps;
  auto new_row = [&](size_t i, bool executing) { return PlanRow(*plan_, ev_, i, executing); };
  auto state_of = [&](const events::NewStep& row, size_t i) { return PlanState(*plan_, row, i); };

  if (ev_.attempt == 0) {
    // First claim: the whole plan, the first step already EXECUTING.
    std::vector<events::NewStep> rows;
    for (size_t i = 0; i < plan_steps.size(); ++i) rows.push_back(new_row(i, mark_first_executing && i == 0));
    if (events::InsertSteps(c, rows, d_.node, attempt_) == rows.size()) {
      for (size_t i = 0; i < rows.size(); ++i) steps_.push_back(state_of(rows[i], i));
      first_marked = mark_first_executing;
      return true;
    }
    // Rows of this code existed already (e.g. an event re-produced under an old
    // code): their recorded state wins.
  }
  std::vector<events::StepRow> rows = events::LoadSteps(c, ev_.code, kMaxStepRows + 1);
  if (static_cast<int64_t>(rows.size()) > kMaxStepRows) return false;
  steps_ = FromRows(rows);
  // Plan positions without a row (the plan grew since): add them PENDING.
  std::vector<bool> present(plan_steps.size(), false);
  for (const StepState& s : steps_) {
    if (s.key.size() == 1 && s.key[0] <= static_cast<int>(plan_steps.size())) present[s.key[0] - 1] = true;
  }
  std::vector<events::NewStep> missing;
  std::vector<size_t> missing_index;
  for (size_t i = 0; i < plan_steps.size(); ++i) {
    if (!present[i]) {
      missing.push_back(new_row(i, false));
      missing_index.push_back(i);
    }
  }
  if (!missing.empty()) {
    events::InsertSteps(c, missing, d_.node, attempt_);
    for (size_t j = 0; j < missing.size(); ++j) steps_.push_back(state_of(missing[j], missing_index[j]));
    std::sort(steps_.begin(), steps_.end(),
              [](const StepState& a, const StepState& b) { return a.key < b.key; });
  }
  return true;
}

std::vector<StepState> EventRun::FromRows(const std::vector<events::StepRow>& rows) const {
  std::vector<StepState> steps;
  for (const events::StepRow& r : rows) {
    std::vector<int> key = TreeKey(r.code);
    if (key.empty()) continue;  // not a code this engine writes
    const bool child = key.size() > 1;
    StepState s{.code = r.code, .key = std::move(key), .name = r.name, .type = r.type, .status = StatusOf(r),
                .sort = r.sort, .retry_count = r.retry_count,
                .compensation_retry_count = r.compensation_retry_count, .max_retry = r.max_retry,
                .compensation_data = ParseOrString(r.compensation_data),
                .child_params = child ? ParseOrString(r.payload) : nlohmann::json(),
                .output = r.output.empty() ? std::nullopt : std::optional<std::string>(r.output)};
    if (s.key[0] <= static_cast<int>(plan_->steps.size())) s.plan_step = &plan_->steps[s.key[0] - 1];
    steps.push_back(std::move(s));
  }
  std::sort(steps.begin(), steps.end(),
            [](const StepState& a, const StepState& b) { return a.key < b.key; });
  return steps;
}

bool EventRun::StartCompensationIn(storage::Connection& c, events::Fence& fence, std::vector<StepState>& steps,
                                   const nlohmann::json& result, const std::string& error) {
  fence = Held(events::StartCompensation(c, fence, d_.node, result.dump(), error), "start compensation");
  for (StepState& s : steps) {
    if (s.status == events::StepStatus::kExecuting && s.compensation_data.is_null()) {
      if (s.plan_step != nullptr && s.plan_step->handler->CompensatesInterrupted()) {
        // It may have applied part of its change (table_sync commits chunk by chunk);
        // its handler knows what from its own records: compensate it with the others.
        events::MarkStepInterruptedUndoable(c, s.code,
                                            "interrupted (its node lost the event) and not re-run: the event "
                                            "turned to compensation; what it applied is compensated");
        s.compensation_data = nlohmann::json::object();
      } else {
        events::MarkStepInterrupted(c, s.code,
                                   "interrupted (its node lost the event) and not re-run: the event "
                                   "turned to compensation; never reached SUCCESS, not compensated");
      }
      s.status = events::StepStatus::kFailed;
    }
  }
  std::vector<size_t> order = CompensationOrder(steps);
  if (order.empty()) {
    fence = Held(events::CompleteCompensation(c, fence, d_.node, 0), "complete compensation");
    phase_ = kCompensate;
    return true;
  }
  events::MarkStepCompensating(c, steps[order.front()].code, d_.node, attempt_);
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
  const Millis timeout = spec.timeout.count() > 0 ? spec.timeout : topic().StepTimeout();
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
  } catch (const storage::StatementError& e) {
    std::string message;
    a.ctx->OnSqlError(e, message);
    a.result = storage::IsPermanentSqlError(e) ? StepResult::Permanent(message) : StepResult::Transient(message);
    a.not_step_fault = storage::IsConnectionFailure(e);
    a.unreachable = e.kind() == DbError::Kind::kUnreachable;
  } catch (const DbError& e) {
    a.result = storage::IsPermanentSqlError(e) ? StepResult::Permanent(OneLine(e.what()))
                                               : StepResult::Transient(OneLine(e.what()));
    a.not_step_fault = storage::IsConnectionFailure(e);
    a.unreachable = e.kind() == DbError::Kind::kUnreachable;
  } catch (const std::exception& e) {
    a.result = StepResult::Transient(OneLine(e.what()));
  } catch (...) {
    a.result = StepResult::Transient("step threw a non-standard exception");
  }
  const auto took = d_.clock.Now() - invoked;
  (compensate ? d_.stats.compensation_duration : d_.stats.step_duration).Observe(took);
  if (!compensate) plan_->speed->Observe(std::chrono::duration_cast<std::chrono::microseconds>(took));
  if (a.result.kind != StepResult::Kind::kOk && d_.clock.Now() >= deadline) {
    a.not_step_fault = false;
    a.unreachable = false;
    a.result = StepResult{StepResult::Kind::kTransient, nullptr, a.result.compensation_data,
                          "timed out after " + std::to_string(timeout.count()) + " ms: " +
                              a.result.error};
  }
  if (!compensate) d_.stats.steps_executed++;
  const bool timed_out = a.result.kind != StepResult::Kind::kOk && d_.clock.Now() >= deadline;
  d_.stats.by_type.Observe(spec.type, compensate ? "compensate" : "execute",
                           a.result.kind == StepResult::Kind::kOk          ? "ok"
                           : timed_out                                     ? "timeout"
                           : a.result.kind == StepResult::Kind::kPermanent ? "permanent"
                                                                           : "transient",
                           took);
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
  if (!Reached(steps_[i], /*compensate=*/false)) {
    // A hand-on is a status change: under a claim (a deferred one is claimed first).
    if (claim_ != ClaimState::kClaimed) return RerunClaimed("step " + steps_[i].code + " needs a datasource not reached here");
    if (std::optional<Outcome> handed = HandOnIfUnreached(i, /*compensate=*/false)) return handed;
  }
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
    return ForwardFailure(i, pending_.result, ChargeOf(pending_));
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
    if (staged_->ticket) d_.groups.Wait(*staged_->ticket);  // GroupRolledBack, DbError, lost
  } catch (const GroupRolledBack& e) {
    // Another member's failure (or a statement error) rolled the whole group back:
    // nothing of this step was written, so it runs again.
    pending_.ctx.reset();
    staged_.reset();
    // A drain that timed out killed the group's statement: stop, record nothing.
    if (stop_.stop_requested()) return Abandon("stopped while recording step " + steps_[i].code);
    if (claim_ != ClaimState::kClaimed) return ClaimAndRerun(e.what());
    if (++reruns_ <= kMaxGroupReruns) {
      spdlog::debug("STEP_RERUN event={} node={} trace={} step={} why=\"{}\"", ev_.code, d_.node, trace_,
                    steps_[i].code, e.what());
      return std::nullopt;
    }
    return ForwardFailure(i, StepResult::Transient(std::string("could not record success: ") + e.what()),
                          Charge::kReset);
  } catch (const DbError& e) {
    return RecordFailed(i, e);
  }
  if (claim_ != ClaimState::kClaimed) {
    // Committed with this step (StagedSuccess::fence_after holds the claim's bump).
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
  if (stop_.stop_requested()) return Abandon("stopped while recording step " + steps_[i].code + ": " + e.what());
  if (claim_ != ClaimState::kClaimed) return ClaimAndRerun(e.what());
  // The step succeeded; recording it did not: not the step's fault.
  return ForwardFailure(i, StepResult::Transient(std::string("could not record success: ") + e.what()),
                        Charge::kReset);
}

EventRun::StagedSuccess EventRun::StageStepSuccess(size_t i, EngineContext& ctx, const StepResult& result) {
  StepState& step = steps_[i];
  StagedSuccess staged;
  std::vector<StepState>& children = staged.children;
  std::vector<events::NewStep> child_rows;
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
    child_rows.push_back(events::NewStep{.code = child.code, .job_code = ev_.code,
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

  // Forward steps always commit through the node's commit group, which fences every
  // member at its COMMIT (commit_group.h).
  if (has_children && !ctx.has_tx()) ctx.JoinGroup();
  std::unique_ptr<CommitGroups::Member> member = ctx.TakeMember();  // null: wrote nothing
  if (has_children) {
    try {
      events::InsertChildSteps(member->conn(), step.code, child_rows);
    } catch (const storage::StatementError& e) {
      if (e.kind() == DbError::Kind::kConnectionLost) member->conn().mark_broken();
      d_.groups.Abandon(std::move(member));
      throw e.WithContext("record child steps");
    }
  }
  events::StepSuccess success;
  success.event_id = ev_.id;
  success.version = fence_.version;
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
      events::NewStep row = PlanRow(*plan_, ev_, j, !last && j == staged.next_existing);
      if (j == i) {
        row.succeeded = true;
        row.output = output;
        row.compensation = compensation;
      }
      success.plan.push_back(std::move(row));
    }
  }
  staged.fence_after = last || claim_ == ClaimState::kDeferred ? fence_.Next() : fence_;
  staged.ticket = d_.groups.Submit(std::move(member), std::move(success));  // EndStep waits
  return staged;
}

size_t EventRun::ApplyStepSuccess(size_t i, StagedSuccess& staged, const StepResult& result) {
  StepState& step = steps_[i];
  if (staged.touch) last_touch_ = staged.now;
  step.status = events::StepStatus::kSuccess;
  step.compensation_data = result.compensation_data.value_or(nullptr);
  if (!result.output.is_null()) step.output = result.output.dump();
  fence_ = staged.fence_after;
  if (staged.last) return steps_.size();
  if (!staged.children.empty()) {
    steps_.insert(steps_.begin() + static_cast<std::ptrdiff_t>(i + 1),
                  std::make_move_iterator(staged.children.begin()),
                  std::make_move_iterator(staged.children.end()));
    steps_[i + 1].status = events::StepStatus::kExecuting;
    return i + 1;
  }
  steps_[staged.next_existing].status = events::StepStatus::kExecuting;
  return staged.next_existing;
}

Outcome EventRun::ForwardFailure(size_t i, const StepResult& result, Charge charge) {
  StepState& step = steps_[i];
  const bool permanent = result.kind == StepResult::Kind::kPermanent;
  // max_retry: N retries after the first attempt (docs/event-lifecycle.md, "Retry
  // arithmetic"): the step's own count (its failures so far) and the event's (the
  // retries its steps used so far) must each be below their bound for one more.
  const bool step_retries_left = step.retry_count < step.max_retry;
  const bool event_retries_left = retry_count_ < topic().max_retry;
  std::optional<std::string> compensation =
      result.compensation_data ? std::optional<std::string>(result.compensation_data->dump())
                               : std::nullopt;
  spdlog::warn("STEP_FAILED event={} node={} trace={} step={} code={} kind={} retry_count={} err=\"{}\"",
               ev_.code, d_.node, trace_, step.name, step.code,
               permanent ? "permanent" : charge == Charge::kRetry ? "transient" : "not_charged",
               step.retry_count, result.error);

  if (!permanent && (charge == Charge::kReset || charge == Charge::kWait)) {
    // The database connection was lost, or the step's success could not be recorded:
    // not the step's fault. Run it again without using a retry; the reset bound
    // (max_resets, checked at the next claim) ends an event that keeps doing this.
    // kWait: no server answered at all (nothing ran): again later, counting nothing, so
    // a datasource being restarted does not use up the event's resets.
    const bool wait = charge == Charge::kWait;
    const Millis backoff = d_.backoff(topic().backoff_base, topic().backoff_max, reset_count_ + (wait ? 1 : 0));
    const std::string why =
        (wait ? std::string("waiting for a database (not charged): step '")
              : "reset (not charged; reset " + std::to_string(reset_count_ + 1) + " of " +
                    std::to_string(topic().max_resets) + " allowed): step '") +
        step.name + "': " + result.error;
    fence_ = d_.pool.Transact("schedule retry", [&, held = fence_](storage::Connection& c) {
      events::Fence after = Held(events::ScheduleEventRetry(c, held, d_.node, 0, backoff, why, why, wait ? 0 : 1),
                                 "schedule retry");
      events::RecordStepInterruption(c, step.code, result.error, compensation);
      return after;
    });
    d_.stats.retries++;
    spdlog::info("EVENT_RETRY_SCHEDULED event={} node={} trace={} phase=FORWARD step={} charged=false "
                 "reset_count={} backoff_ms={}{}",
                 ev_.code, d_.node, trace_, step.name, reset_count_ + (wait ? 0 : 1), backoff.count(),
                 wait ? " waiting=database_unreachable" : "");
    return Outcome::kRetryScheduled;
  }

  if (!permanent && step_retries_left && event_retries_left) {
    const Millis backoff = RetryDelay(d_.backoff(topic().backoff_base, topic().backoff_max, step.retry_count), result);
    const int retries = std::min(step.max_retry, topic().max_retry);
    const std::string why = "retry " + std::to_string(retry_count_ + 1) + " of " + std::to_string(retries) +
                            ": step '" + step.name + "' failed: " + result.error;
    fence_ = d_.pool.Transact("schedule retry", [&, held = fence_](storage::Connection& c) {
      events::Fence after =
          Held(events::ScheduleEventRetry(c, held, d_.node, 1, backoff, why, why), "schedule retry");
      events::RecordStepFailure(c, step.code, result.error, compensation);
      return after;
    });
    d_.stats.retries++;
    spdlog::info("EVENT_RETRY_SCHEDULED event={} node={} trace={} phase=FORWARD step={} "
                 "retry_count={} backoff_ms={}",
                 ev_.code, d_.node, trace_, step.name, retry_count_ + 1, backoff.count());
    return Outcome::kRetryScheduled;
  }

  const std::string error =
      permanent ? result.error
                : "retries exhausted (step '" + step.name + "' failed " + std::to_string(step.retry_count + 1) +
                      " times, max_retry " + std::to_string(step.max_retry) + "; event retries used " +
                      std::to_string(retry_count_) + " of " + std::to_string(topic().max_retry) +
                      "): " + result.error;
  nlohmann::json original = {{"failed_step", step.name}, {"step_code", step.code},
                             {"error", result.error},
                             {"kind", permanent ? "permanent" : "retries_exhausted"}};
  std::vector<StepState> after = steps_;
  after[i].status = events::StepStatus::kFailed;
  after[i].retry_count++;
  if (result.compensation_data) after[i].compensation_data = *result.compensation_data;

  spdlog::warn("EVENT_COMPENSATING event={} node={} trace={} failed_step={} reason=\"{}\"", ev_.code,
               d_.node, trace_, step.name, error);
  std::vector<StepState> staged;
  events::Fence fence_after;
  bool done = d_.pool.Transact("start compensation", [&](storage::Connection& c) {
    // Transact may run this again from BEGIN: from copies of what this run holds.
    fence_after = fence_;
    staged = after;
    bool completed = StartCompensationIn(c, fence_after, staged, original, error);
    events::RecordStepFailure(c, step.code, result.error, compensation);
    return completed;
  });
  fence_ = fence_after;
  steps_ = std::move(staged);
  d_.stats.compensations_started++;
  std::vector<size_t> order = CompensationOrder(steps_);
  if (done) {
    d_.stats.compensated++;
    spdlog::info("EVENT_COMPENSATED event={} node={} trace={} steps=0 ms={}", ev_.code, d_.node,
                 trace_, ElapsedMs());
    return Outcome::kCompensated;
  }
  steps_[order.front()].status = events::StepStatus::kCompensating;
  return RunCompensation();
}

// ---- compensation --------------------------------------------------------------

Outcome EventRun::RunCompensation() {
  const std::vector<size_t> order = CompensationOrder(steps_);
  for (size_t k = 0; k < order.size(); ++k) {
    StepState& step = steps_[order[k]];
    if (stop_.stop_requested()) return Abandon("stopped before compensating " + step.code);
    if (std::optional<Outcome> handed = HandOnIfUnreached(order[k], /*compensate=*/true)) return *handed;
    Attempt a = Invoke(step, /*compensate=*/true);
    if (a.ctx && a.ctx->lost()) ThrowLost("compensation of " + step.code);
    if (a.result.kind != StepResult::Kind::kOk) {
      a.ctx.reset();
      if (stop_.stop_requested()) return Abandon("stopped while compensating " + step.code);
      return CompensationFailure(order[k], a.result, ChargeOf(a));
    }
    try {
      CommitCompensated(order, k, *a.ctx);
    } catch (const DbError& e) {
      if (e.kind() == DbError::Kind::kCommitUnknown) return Abandon(e.what());
      a.ctx.reset();
      // The compensation succeeded; recording it did not: not the step's fault.
      return CompensationFailure(order[k], StepResult::Transient(std::string("could not record compensation: ") + e.what()),
                                 Charge::kReset);
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
  const int progress = Progress(Succeeded() - (step.status == events::StepStatus::kSuccess ? 1 : 0), steps_.size());
  const bool handler_fenced = ctx.has_tx();
  StepTx& tx = handler_fenced ? ctx.open_tx() : ctx.OpenTx();
  events::Fence fence_after = fence_;
  tx.Do("record step compensated", [&](storage::Connection& c) {
    if (last) {
      fence_after = Held(events::CompleteCompensation(c, fence_, d_.node, progress), "complete compensation");
    } else if (!handler_fenced) {
      Require(events::TouchEvent(c, fence_, progress), "step compensated");
    }
    events::MarkStepCompensated(c, step.code);
    if (!last) events::MarkStepCompensating(c, steps_[order[k + 1]].code, d_.node, attempt_);
  });
  tx.Commit("commit step compensated");
  ctx.ReleaseTx();
  fence_ = fence_after;
  step.status = events::StepStatus::kCompensated;
  d_.stats.steps_compensated++;
  if (!last) steps_[order[k + 1]].status = events::StepStatus::kCompensating;
}

Outcome EventRun::CompensationFailure(size_t i, const StepResult& result, Charge charge) {
  StepState& step = steps_[i];
  const bool permanent = result.kind == StepResult::Kind::kPermanent;
  if (!permanent && (charge == Charge::kReset || charge == Charge::kWait)) {
    // As ForwardFailure's: the database failed, not the compensation. Again later,
    // without using one of its retries; max_resets bounds it (kWait: nothing counted).
    const bool wait = charge == Charge::kWait;
    const Millis backoff = d_.backoff(topic().backoff_base, topic().backoff_max, reset_count_ + (wait ? 1 : 0));
    const std::string why =
        (wait ? std::string("waiting for a database (not charged): compensation of '")
              : "reset (not charged; reset " + std::to_string(reset_count_ + 1) + " of " +
                    std::to_string(topic().max_resets) + " allowed): compensation of '") +
        step.name + "': " + result.error;
    spdlog::warn("STEP_FAILED event={} node={} trace={} step={} code={} phase=COMPENSATE kind=not_charged err=\"{}\"",
                 ev_.code, d_.node, trace_, step.name, step.code, result.error);
    fence_ = d_.pool.Transact("schedule compensation retry", [&, held = fence_](storage::Connection& c) {
      events::Fence after = Held(events::ScheduleEventRetry(c, held, d_.node, 0, backoff, why, why, wait ? 0 : 1),
                                 "schedule compensation retry");
      events::NoteCompensationInterruption(c, step.code, result.error);
      return after;
    });
    d_.stats.retries++;
    return Outcome::kRetryScheduled;
  }
  spdlog::warn("STEP_FAILED event={} node={} trace={} step={} code={} phase=COMPENSATE kind={} "
               "compensation_retry_count={} err=\"{}\"",
               ev_.code, d_.node, trace_, step.name, step.code, permanent ? "permanent" : "transient",
               step.compensation_retry_count, result.error);

  if (!permanent && step.compensation_retry_count < topic().max_retry) {
    const Millis backoff =
        RetryDelay(d_.backoff(topic().backoff_base, topic().backoff_max, step.compensation_retry_count), result);
    const std::string why = "compensation of '" + step.name + "' failed (retry " +
                            std::to_string(step.compensation_retry_count + 1) + " of " +
                            std::to_string(topic().max_retry) + "): " + result.error;
    fence_ = d_.pool.Transact("schedule compensation retry", [&, held = fence_](storage::Connection& c) {
      events::Fence after = Held(events::ScheduleEventRetry(c, held, d_.node, 0, backoff, why, why),
                                 "schedule compensation retry");
      events::RecordCompensationFailure(c, step.code, result.error);
      return after;
    });
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
  fence_ = d_.pool.Transact("fail compensation", [&, held = fence_](storage::Connection& c) {
    events::Fence after = Held(events::FailCompensation(c, held, d_.node, step.name, error), "fail compensation");
    events::RecordCompensationFailure(c, step.code, result.error);
    return after;
  });
  d_.stats.failed++;
  spdlog::error("EVENT_FAILED event={} node={} trace={} step={} ms={} reason=\"compensation of '{}' "
                "failed: {}\"",
                ev_.code, d_.node, trace_, step.name, ElapsedMs(), step.name, error);
  return Outcome::kFailed;
}

std::vector<std::string> EventRun::Needs(const StepState& step, bool compensate) const {
  if (step.plan_step == nullptr) return {};  // fails as "no longer in the plan" wherever it runs
  const StepSpec& spec = step.plan_step->spec;
  return compensate ? CompensationDatasources(spec) : StepDatasources(spec);
}

bool EventRun::Reached(const StepState& step, bool compensate) const {
  if (!d_.reach) return true;
  const std::vector<std::string> needs = Needs(step, compensate);
  if (needs.empty() || d_.reach(needs)) return true;
  // A relayable step (table_sync) runs here relayed when this node reaches its target
  // (docs/relay.md): the source half runs on a node reaching the source.
  if (compensate || step.plan_step == nullptr) return false;
  const std::vector<std::string> relayed = RelayedDatasources(step.plan_step->spec);
  return !relayed.empty() && d_.reach(relayed);
}

std::optional<Outcome> EventRun::HandOnIfUnreached(size_t i, bool compensate) {
  const StepState& step = steps_[i];
  if (Reached(step, compensate)) return std::nullopt;
  const std::vector<std::string> needs = Needs(step, compensate);
  const std::string route = RouteKey(needs);
  const std::string what = (compensate ? "compensation of '" : "step '") + step.name + "'";
  const std::string why = "handed on: " + what + " needs " + SpokenList(needs) + ", which node " + d_.node +
                          " does not reach";
  // One fenced transition: the event's UPDATE first (it takes the row lock and is the
  // fence), then the step's node cleared. Nothing counted: no retry, no reset.
  fence_ = d_.pool.Transact("hand on event", [&, held = fence_](storage::Connection& c) {
    events::Fence after = Held(events::HandOnEvent(c, held, d_.node, route, why), "hand on");
    events::ReleaseStep(c, step.code);
    return after;
  });
  d_.stats.handed_on++;
  spdlog::info("EVENT_HANDED_ON event={} node={} trace={} step={} code={} phase={} needs={} version={}", ev_.code,
               d_.node, trace_, step.name, step.code, compensate ? kCompensate : kForward, route, fence_.version);
  return Outcome::kHandedOn;
}

Outcome EventRun::Abandon(const std::string& why) {
  spdlog::warn("EVENT_ABANDONED event={} node={} trace={} version={} reason=\"{}\"", ev_.code, d_.node,
               trace_, fence_.version, OneLine(why));
  return Outcome::kAbandoned;
}

}  // namespace dsync::saga::run
