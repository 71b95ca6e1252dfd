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
#include "saga/event_run.h"

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
    case Outcome::kHandedOn: return "handed_on";
  }
  return "unknown";
}
using run::ClaimRulesNeeded;
using run::ClaimWithPlanRows;
using run::Deps;
using run::EventRun;
using run::kForward;
using run::OneLine;

SagaEngine::SagaEngine(storage::ConnectionPool& pool, const Plans& plans, Datasources& datasources,
                       Clock& clock, std::string node_address)
    : pool_(pool), plans_(plans), datasources_(datasources), clock_(clock),
      node_address_(std::move(node_address)), timer_(std::make_unique<DeadlineTimer>(clock)),
      groups_(std::make_unique<CommitGroups>(pool, clock, node_address_)), rng_(std::random_device{}()) {}

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

Outcome SagaEngine::Run(const AssignedEvent& event, std::stop_token stop, int* last_version) {
  Deps deps{pool_, datasources_, clock_, node_address_, stats_, *timer_,
            [this](Millis base, Millis max, int retries) { return Backoff(base, max, retries); },
            *groups_, reach_};
  EventRun run(std::move(deps), plans_, event, std::move(stop));
  Outcome out = Guarded(event, [&] { return run.Go(); });
  if (last_version) *last_version = run.fence().version;
  return out;
}

bool SagaEngine::Batchable(const AssignedEvent& event) const {
  if (!event.claimed && !event.claim_deferred) return false;
  const Plans::Plan* plan = plans_.Find(event.topic);
  return plan != nullptr && plan->speed->fast();
}

std::vector<Outcome> SagaEngine::RunBatch(const std::vector<const AssignedEvent*>& events,
                                          std::stop_token stop, std::vector<int>* last_versions) {
  struct Slot {
    const AssignedEvent* event;
    std::unique_ptr<EventRun> run;
    std::optional<Outcome> outcome;  // set once the event is done
    int last_version = 0;            // the run's fence when it ended
  };
  const Deps deps{pool_, datasources_, clock_, node_address_, stats_, *timer_,
                  [this](Millis base, Millis max, int retries) { return Backoff(base, max, retries); },
                  *groups_, reach_};
  std::vector<Slot> slots;
  slots.reserve(events.size());
  for (const AssignedEvent* e : events) {
    slots.push_back(Slot{e, std::make_unique<EventRun>(deps, plans_, *e, stop), std::nullopt});
  }
  // Runs one half of a slot's next step; an outcome (or an exception, as in Run) ends it.
  auto advance = [&](Slot& s, auto&& half) {
    s.outcome = Guarded(*s.event, [&] { return half(*s.run); });
    s.last_version = s.run->fence().version;
    if (s.outcome) s.run.reset();  // done: whatever it still holds (a group's turn) goes back now
  };
  for (Slot& s : slots) advance(s, [](EventRun& r) { return r.StartClaimed(); });
  std::vector<Slot*> waiting;
  while (true) {
    waiting.clear();
    {
      // The batch's successes share one group and one COMMIT (CommitGroups::Hold):
      // unheld, the committer sealed a group after the first and split the batch.
      const std::unique_ptr<CommitGroups::Hold> hold = groups_->HoldOpen();
      for (Slot& s : slots) {
        if (s.outcome) continue;
        advance(s, [](EventRun& r) { return r.BeginStep(); });
        if (!s.outcome) waiting.push_back(&s);
      }
    }
    if (waiting.empty()) break;
    for (Slot* s : waiting) advance(*s, [](EventRun& r) { return r.EndStep(); });
  }
  std::vector<Outcome> outcomes;
  for (const Slot& s : slots) outcomes.push_back(*s.outcome);
  if (last_versions) {
    last_versions->clear();
    for (const Slot& s : slots) last_versions->push_back(s.last_version);
  }
  return outcomes;
}

CommitGroupStats& SagaEngine::group_stats() { return groups_->stats(); }

int SagaEngine::KillRunningStatements() {
  return pool_.KillLentStatements() + datasources_.KillLentStatements();
}

std::vector<AssignedEvent> SagaEngine::ClaimBatch(std::vector<AssignedEvent> events,
                                                  std::vector<AssignedEvent>& rest) {
  std::vector<AssignedEvent> batch;
  for (AssignedEvent& e : events) {
    const Plans::Plan* plan = plans_.Find(e.topic);
    const bool blank = e.payload.find_first_not_of(" \t\r\n") == std::string::npos;
    if (plan != nullptr && !plan->steps.empty() && e.attempt == 0 && e.phase == kForward &&
        e.reset_count <= plan->topic->max_resets && (blank || (JsonNestingDepth(e.payload) <= kMaxJsonDepth && nlohmann::json::accept(e.payload)))) {
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
