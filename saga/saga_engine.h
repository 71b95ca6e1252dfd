// Runs claimed events as sagas. See docs/event-lifecycle.md for the state machine
// and the fencing rules every write here follows.
//
//   saga::SagaEngine engine(pool, plans, datasources, clock, "10.0.0.5:7001");
//   saga::Outcome out = engine.Run(assigned_event, stop);   // claims, runs, settles
//
// Run() claims the event (ASSIGNED -> RUNNING or COMPENSATING, fenced), writes the
// plan's step rows at the first claim, runs forward steps not yet SUCCESS (or
// continues compensation), and leaves the event at its next resting point:
// SUCCESS, COMPENSATED, FAILED, or PENDING with a backoff (transient failure). Every
// write after the claim is fenced by (id, version); if the fence fails the engine
// stops at once and returns kLostOwnership without writing anything further.
//
// Transactions (round trips in brackets count BEGIN and COMMIT):
//   claim       first attempts: batched by the consumer (ClaimBatch, one transaction
//               for a whole poll: claim UPDATE + plan rows INSERT [4] for N events);
//               others: claim UPDATE + plan rows (first claim: one INSERT IGNORE;
//               later claims: one SELECT of the rows) + the next step marked
//               EXECUTING/COMPENSATING                                         [4-5]
//   step        forward success: through the node's commit group (commit_group.h):
//               the handler's statements in the shared transaction, then per group
//               one fence for all members + <= 4 multi-row writes + COMMIT: a 1-step
//               demo event costs its ledger INSERT plus its share of the group's
//               statements. Failures, retries and compensation: one transaction per
//               change, fenced by its first statement (TouchEvent or the status
//               change)                                                         [4-6]
//   Compensation: each COMPENSATED commits with the next COMPENSATING, the last with
//   the event's COMPENSATED; failures are one transaction each.
//
// Policies:
//   - Step codes "<event code>#<position>" (1-based), children "<parent code>.<n>".
//     A step's output goes to its `output` column (V004), its input params to
//     `payload`, its compensation data to `compensation_data`.
//   - Retry arithmetic (docs/event-lifecycle.md, "Retry arithmetic"): `max_retry: N`
//     is N retries after the first attempt, N + 1 attempts; 0 is one attempt, and an
//     event is never compensated before its step ran.
//   - Transient failure (Transient, an exception, or the deadline passed): retried
//     with backoff while the step has retries left (its retry_count < its max_retry)
//     and the event has (its retry_count < topic max_retry); the step is left FAILED
//     with error_details and retry_count + 1, the event PENDING with retry_count + 1
//     and next_run_time = NOW(3) + RetryBackoff(topic backoff, step retry_count), or
//     the step's StepResult::retry_after when that is longer (an HTTP Retry-After),
//     capped at the topic's backoff_max;
//     process_log "retry 1 of 2: step 's' failed: <error>". Otherwise, and on
//     Permanent (also SQL syntax and access errors, storage/error_class.h), the event
//     turns COMPENSATING with result {"failed_step", "step_code", "error", "kind":
//     "permanent" | "retries_exhausted"}.
//   - A failure that is not the step's fault (its database connection was lost, its
//     success could not be recorded; forward or compensating) uses no retry (nor a
//     compensation retry): the event goes PENDING with
//     reset_count + 1 ("reset (not charged to retries; reset 1 of 5): ..."), the step
//     FAILED with retry_count unchanged.
//   - A claim that finds reset_count > topic max_resets (its runs were reset that
//     often: node crashes, freezes, lost connections) ends the event FAILED with
//     "reset N times (...)" (kind "resets_exhausted"), forward steps left EXECUTING
//     settled FAILED ("interrupted"); in phase COMPENSATE, FAILED with the step whose
//     compensation never completed. Nothing is compensated or re-run: an operator
//     retries it (api/event_store.h).
//   - Compensation undoes every SUCCESS step (and a failed one that saved
//     compensation data) in exact reverse plan order, children before their parent.
//     A failed compensation is retried with backoff while the step's
//     compensation_retry_count < topic max_retry (max_retry + 1 attempts; the step stays COMPENSATING, the
//     event PENDING with phase COMPENSATE, retry_count unchanged); then, or on
//     Permanent, the event is FAILED and result gains "compensation_failed_step" and
//     "compensation_error". The original failure stays in `result`.
//   - Unknown topic or a payload that is not JSON: the event is FAILED at the claim
//     (result {"error": ...}, last_error the same text), no step rows. An empty or
//     NULL payload is the empty object.
//   - `stop` (shutdown): the running handler's stop_token fires; a step that still
//     succeeds is committed, anything else ends the run with kAbandoned and nothing
//     written (the event stays RUNNING for the sweeper / the node's restart).
//   - Database errors end the run with kAbandoned (a connection lost during COMMIT
//     included); a database error while recording a step's result before COMMIT is
//     treated as a transient failure of the step.
//   - process_log: every status change appends {"at","node","from","to","why"} in
//     the same statement, keeping the last 20.
//   - Per-step routing (SetDatasourceReach): a step (or compensation) needing a
//     datasource this node does not reach is not run here: the event is handed on
//     (PENDING, node NULL, version + 1, route = what the step needs, phase unchanged,
//     retries and resets unchanged) for the dispatcher to give to a node that
//     reaches it, which resumes at that step (steps already SUCCESS never run again).
//     Batched runs (RunBatch) hand on the same way: the check comes before each step.
//
// Thread safety: Run may be called from many threads at once (one event each).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <vector>

#include "config/settings.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "events/poll.h"
#include "saga/step_handler.h"
#include "saga/step_type_stats.h"
#include "storage/connection_pool.h"

namespace dsync::saga {

// An event as the consumer polled it (ASSIGNED to this node): events/poll.h.
using AssignedEvent = events::AssignedEvent;

enum class Outcome {
  kNotClaimed,      // the claim lost (reassigned or reset meanwhile)
  kSucceeded,
  kRetryScheduled,  // back to PENDING with a backoff (forward or compensation)
  kCompensated,
  kFailed,
  kLostOwnership,   // fenced out mid-run; nothing more was written
  kAbandoned,       // stopped (shutdown, database unreachable): left for the sweeper
  kHandedOn,        // this node does not reach the next step's datasources: PENDING for one that does
};
const char* OutcomeName(Outcome o);

// The widths of distribute_event_step.step_name / step_type.
inline constexpr size_t kMaxStepNameLength = 50;

// A topic's plan: handlers built once from the config at start.
class Plans {
 public:
  // Throws ConfigError for an unknown step type or bad step params (the message
  // names the step: "topics.T.steps[1] (docs): unknown step type 'x' (known: ...)").
  // Keeps its own copy of the topics.
  Plans(const std::map<std::string, TopicSettings>& topics, const StepRegistry& registry);
  struct Step {
    StepSpec spec;
    std::unique_ptr<StepHandler> handler;
  };
  // How long a plan's forward steps take, as the engine observes them (it decides
  // whether the plan's events run in batches: SagaEngine::Batchable).
  class StepSpeed {
   public:
    void Observe(std::chrono::microseconds took);
    // A moving average (1/8 weight per step) under kFastStep; false until observed.
    bool fast() const;
    bool observed() const;  // at least one step observed
    static constexpr std::chrono::microseconds kFastStep{500};

   private:
    std::atomic<int64_t> average_us_{-1};  // -1: nothing observed yet
  };
  struct Plan {
    const TopicSettings* topic;
    std::vector<Step> steps;
    std::shared_ptr<StepSpeed> speed = std::make_shared<StepSpeed>();
  };
  const Plan* Find(const std::string& topic) const;  // null: unknown topic
  // Whether this node's steps are fast so far: some plan has run a step, and every
  // plan that has is fast (StepSpeed).
  bool AllObservedFast() const;

 private:
  std::map<std::string, TopicSettings> topics_;  // Plan::topic points in here
  std::map<std::string, Plan> plans_;
};

// Whether this node reaches every one of the named datasources now (its config names
// them and its prober last reached them: consumer/consumer_node.h). Empty: reaches all.
using DatasourceReach = std::function<bool(const std::vector<std::string>& names)>;

struct SagaStats {
  std::atomic<uint64_t> claimed{0}, not_claimed{0}, succeeded{0}, retries{0}, compensated{0},
      failed{0}, lost_ownership{0}, steps_executed{0}, steps_compensated{0};
  std::atomic<uint64_t> handed_on{0};  // runs that ended in a hand-on (a step needing what this node lacks)
  std::atomic<uint64_t> compensations_started{0};  // events this engine turned COMPENSATING
  std::atomic<uint64_t> claimed_at_commit{0};  // of `claimed`: deferred claims (AssignedEvent::claim_deferred)
  metrics::Histogram claim_latency;          // ASSIGNED -> claimed (see AssignedEvent::assigned_age)
  metrics::Histogram step_duration;          // StepHandler::Execute, seconds
  metrics::Histogram compensation_duration;  // StepHandler::Compensate, seconds
  StepTypeStats by_type;                     // the same calls by step type, with their outcome
};

// The engine's families of /metrics (claims, runs, steps, latencies);
// saga/saga_metrics.cc.
void WriteMetrics(const SagaStats& stats, metrics::TextWriter& w);

class DeadlineTimer;
class CommitGroups;
struct CommitGroupStats;

class SagaEngine {
 public:
  SagaEngine(storage::ConnectionPool& pool, const Plans& plans, Datasources& datasources, Clock& clock,
             std::string node_address);
  ~SagaEngine();
  SagaEngine(const SagaEngine&) = delete;
  SagaEngine& operator=(const SagaEngine&) = delete;

  // Never throws for handler failures (they become the event's state). Database
  // failures end the run with kAbandoned (the sweeper or a restart resets it).
  // `last_version`, when given, receives the version the run last held the event at:
  // the node hands an abandoned run back at that version, never at a later claim's
  // (events::ReadAbandoned).
  Outcome Run(const AssignedEvent& event, std::stop_token stop, int* last_version = nullptr);

  // Runs several batch-claimed events (AssignedEvent::claimed or claim_deferred) on the calling thread,
  // in rounds: each event's next step runs and its success is queued in the node's
  // commit group, then the thread waits for those COMMITs (mostly one), and so on until
  // every event is done. Same rules, fences and outcomes as Run() for each (outcomes in
  // the order given); what it saves is a thread hand-off per step. For events whose
  // plan is fast (Batchable): a slow step would hold up the others of the batch.
  // `last_versions`: as Run's `last_version`, in the order given.
  std::vector<Outcome> RunBatch(const std::vector<const AssignedEvent*>& events, std::stop_token stop,
                                std::vector<int>* last_versions = nullptr);
  // The event was batch-claimed (or its claim deferred) and its plan's steps take under
  // Plans::StepSpeed::kFastStep on average here (so far).
  bool Batchable(const AssignedEvent& event) const;
  // Plans::AllObservedFast: the steps run here so far are all fast (the consumer's
  // automatic prefetch, consumer/consumer_node.h).
  bool StepsFast() const { return plans_.AllObservedFast(); }

  // The consumer's batched claim: claims every first attempt among `events` (attempt
  // 0, phase FORWARD, a known topic with steps, a JSON payload, resets within bounds) in one
  // transaction of two statements (one multi-row UPDATE fenced per event by
  // (id, version), one multi-row INSERT of all their plan rows, first steps
  // EXECUTING) and returns those claimed, marked `claimed`. The others, whose claim
  // needs the full rules (retries, compensation, rejection, existing rows), go to
  // `rest` for Run() to claim one by one. Events lost since the poll are dropped.
  // First attempts of fast plans (Plans::StepSpeed) are not claimed here but returned
  // marked `claim_deferred`: their first step's commit claims them.
  // Throws DbError (kCommitUnknown: the claim may have applied).
  std::vector<AssignedEvent> ClaimBatch(std::vector<AssignedEvent> events,
                                        std::vector<AssignedEvent>& rest);
  CommitGroupStats& group_stats();
  // Interrupts the statements the running steps are executing, on the framework
  // database and every datasource (storage::ConnectionPool::KillLentStatements): a
  // step blocked on a row lock or a long query then fails at once. For a drain that
  // timed out, after its stop request (the runs then end kAbandoned, nothing
  // recorded). Returns the sessions signalled.
  int KillRunningStatements();

  SagaStats& stats() { return stats_; }

  // Per-step routing: before each forward step and each compensation the run checks
  // `reach` for what that step needs (config/step_datasources.h) and, when it is not
  // reached, hands the event on (events::HandOnEvent: PENDING, node NULL, route = the
  // step's needs; nothing charged) and ends with kHandedOn. Without it (the default)
  // the node reaches everything. REQUIRES: called before the first Run / RunBatch.
  void SetDatasourceReach(DatasourceReach reach) { reach_ = std::move(reach); }

 private:
  Millis Backoff(Millis base, Millis max, int retries);  // jittered, thread-safe
  // Run()'s error handling around `run` (returning Outcome or optional<Outcome>): a
  // lost fence is kLostOwnership, any other exception kAbandoned.
  template <class F>
  auto Guarded(const AssignedEvent& event, F&& run) -> decltype(run());

  storage::ConnectionPool& pool_;
  const Plans& plans_;
  Datasources& datasources_;
  Clock& clock_;
  const std::string node_address_;
  DatasourceReach reach_;
  SagaStats stats_;
  std::unique_ptr<DeadlineTimer> timer_;  // step deadlines -> stop requests
  std::unique_ptr<CommitGroups> groups_;  // forward steps' group commit
  std::mutex rng_mu_;
  std::mt19937_64 rng_;
};

}  // namespace dsync::saga
