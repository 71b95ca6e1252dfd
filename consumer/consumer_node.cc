#include "consumer/consumer_node.h"

#include <signal.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/process.h"
#include "events/poll.h"
#include "events/reset.h"

namespace dsync::consumer {
namespace {

// The pause between polls while events keep arriving.
constexpr Millis kBusyPollGap{1};
// After a poll found work, polls for kBusyWindow come at most kBusyPollInterval apart
// (not the configured poll interval): at a steady trickle an assignment waits ~5 ms
// for its node, not half a poll interval. The cost is one indexed SELECT per 10 ms.
constexpr Millis kBusyPollInterval{10};
constexpr Millis kBusyWindow{1000};
// At most this many batch-claimed events of fast plans run together on one worker
// (SagaEngine::RunBatch).
constexpr size_t kMaxBatch = 64;
// At most one early beat per this, for a changed automatic prefetch.
constexpr Millis kPrefetchBeatGap{1000};

}  // namespace

ConsumerNode::ConsumerNode(storage::ConnectionPool& pool, saga::SagaEngine& engine, Clock& clock,
                           ConsumerOptions options)
    : pool_(pool),
      engine_(engine),
      clock_(clock),
      options_(std::move(options)),
      heartbeat_(pool, clock, options_.service, options_.node_address, options_.heartbeat_interval,
                 [this] { return Metadata(); }) {
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  std::time_t secs = static_cast<std::time_t>(now_ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char started[64];
  std::snprintf(started, sizeof started, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(now_ms % 1000));
  metadata_.version = DSYNC_VERSION;
  metadata_.capacity = options_.capacity;  // prefetch: Metadata() sets it (it changes)
  metadata_.topics = options_.topics;
  metadata_.host = Hostname();
  metadata_.pid = getpid();
  metadata_.started_at = started;
  metadata_.incarnation = metadata_.host + ":" + std::to_string(metadata_.pid) + ":" + std::to_string(now_ms);
  metadata_.bad_topics = options_.bad_topics;
  if (options_.datasources) {
    metadata_.datasources.emplace();  // reported, none reached until checked
    prober_ = std::make_unique<DatasourceProber>(
        *options_.datasources, options_.datasource_check_interval, clock_, ConnectProbe, [this] {
          if (started_) BeatNow();
        });
  }
}

ConsumerNode::~ConsumerNode() {
  started_ = false;
  if (prober_) prober_->Stop();
  poller_ = {};
  work_stop_.request_stop();
  for (auto& w : workers_) w.request_stop();
  work_cv_.notify_all();
  workers_.clear();
  heartbeat_.Stop();
}

int ConsumerNode::Prefetch() const {
  return options_.prefetch >= 0 ? options_.prefetch : AutoPrefetch(options_.capacity, engine_.StepsFast());
}

registry::NodeMetadata ConsumerNode::Metadata() const {
  registry::NodeMetadata m = metadata_;
  m.prefetch = Prefetch();
  published_prefetch_ = m.prefetch;
  m.processing_count = stats_.in_flight.load();
  m.load = static_cast<double>(m.processing_count) / std::max(1, m.capacity);
  if (prober_) {
    DatasourceSnapshot d = prober_->snapshot();
    m.datasources = std::move(d.reachable);
    m.datasource_errors = std::move(d.errors);
  }
  return m;
}

void ConsumerNode::Start() {
  int orphans = HandBack(HandBackScope::kEverythingHeld, "reset: node restarted");
  stats_.handed_back_at_start += static_cast<uint64_t>(orphans);
  heartbeat_.Start();
  started_ = true;
  if (prober_) prober_->Start();
  for (int i = 0; i < options_.capacity; ++i) {
    workers_.emplace_back([this](std::stop_token stop) { WorkerLoop(stop); });
  }
  // Wake-ups (consumer/node_wakeups.h): a datagram from the dispatcher polls at once.
  wakeups_ = std::make_unique<NodeWakeups>(
      pool_, clock_,
      NodeWakeupOptions{options_.wakeups, options_.wakeup_listen, options_.node_address, options_.service,
                        options_.poll_interval});
  wakeups_->Start([this] {
    {
      std::lock_guard lock(mu_);
      poll_now_ = true;
    }
    poll_cv_.notify_one();
  });
  poller_ = std::jthread([this](std::stop_token stop) { PollLoop(stop); });
  spdlog::info("NODE_STARTED node={} service={} capacity={} orphans_handed_back={}", options_.node_address,
               options_.service, options_.capacity, orphans);
}

int ConsumerNode::HandBack(HandBackScope scope, const char* reason, const std::set<int64_t>& running) {
  std::vector<events::HeldEvent> held = pool_.Run("read held events", [&](storage::Connection& c) {
    return scope == HandBackScope::kEverythingHeld ? events::ReadHeld(c, Key(), running)
                                                   : events::ReadUnclaimed(c, Key(), running);
  });
  int reset = 0;
  for (const auto& h : held) {
    // A transaction: a COMPENSATING event's reset also counts on its step (events/reset.h).
    bool applied = pool_.Transact("hand back event",
                                  [&](storage::Connection& c) { return events::ResetEvent(c, h, reason); });
    if (applied) {
      ++reset;
      spdlog::info("EVENT_RESET event={} node={} from={} reason=\"{}\"", h.code, options_.node_address, h.status,
                   reason);
    }
  }
  return reset;
}

// The topics this node claims, as PollAssigned's comma list: "" when it serves every
// topic ("*"). Events of other topics assigned here stay ASSIGNED until the sweeper
// hands them back (a node restarted with other --topics, an assignment by hand).
static std::string ServedTopicList(const std::vector<std::string>& topics) {
  std::string list;
  for (const std::string& t : topics) {
    if (t == "*") return "";
    list += (list.empty() ? "" : ",") + t;
  }
  return list;
}

int ConsumerNode::PollOnce() {
  int limit;
  int free;
  std::set<int64_t> known;
  {
    std::lock_guard lock(mu_);
    if (!accepting_) return 0;
    free = options_.capacity - static_cast<int>(known_.size());
    if (free <= 0) return 0;
    // Ask for as many more as this node holds (queued ones are still ASSIGNED, and so
    // are runs whose claim is deferred), so they don't crowd new ones out of the LIMIT.
    limit = free + static_cast<int>(known_.size());
    known = known_;
  }
  std::vector<saga::AssignedEvent> events = pool_.Run("poll assigned events", [&](storage::Connection& c) {
    std::vector<saga::AssignedEvent> out =
        events::PollAssigned(c, Key(), limit, known, ServedTopicList(options_.topics));
    const Clock::TimePoint polled_at = clock_.Now();
    for (auto& e : out) e.polled_at = polled_at;
    return out;
  });
  stats_.polls++;
  if (static_cast<int>(events.size()) > free) events.resize(static_cast<size_t>(free));
  // First attempts are claimed here, all in one transaction; the rest are claimed
  // one by one by their worker (SagaEngine::Run).
  std::vector<int64_t> candidates;
  for (const auto& e : events) candidates.push_back(e.id);
  std::vector<saga::AssignedEvent> rest;
  std::vector<saga::AssignedEvent> claimed;
  try {
    claimed = engine_.ClaimBatch(std::move(events), rest);
  } catch (const DbError& e) {
    if (e.kind() == DbError::Kind::kCommitUnknown) {
      // The claim may have applied: whatever is RUNNING here is handed back.
      std::lock_guard lock(mu_);
      abandoned_.insert(abandoned_.end(), candidates.begin(), candidates.end());
    }
    throw;
  }
  int added = 0;
  int batchable = 0;
  {
    std::lock_guard lock(mu_);
    for (auto& e : claimed) {
      if (!accepting_ || !known_.insert(e.id).second) {
        abandoned_.push_back(e.id);  // draining began meanwhile: hand it back
        continue;
      }
      const bool fast = engine_.Batchable(e);
      batchable += fast;
      queue_.push_back(Queued{std::move(e), fast});
      ++added;
    }
    for (auto& e : rest) {
      if (!accepting_ || static_cast<int>(known_.size()) >= options_.capacity) break;
      if (!known_.insert(e.id).second) continue;
      queue_.push_back(Queued{std::move(e), false});  // claimed by its worker: runs alone
      ++added;
    }
    stats_.in_flight = static_cast<int>(known_.size());
  }
  stats_.polled_events += static_cast<uint64_t>(added);
  // One worker per event, or per batch of up to kMaxBatch (WorkerLoop): not a stampede.
  int wake = added;
  if (batchable > 0) wake = added - batchable + (batchable + kMaxBatch - 1) / kMaxBatch;
  for (int i = 0; i < wake; ++i) work_cv_.notify_one();
  return added;
}

void ConsumerNode::HandBackAbandoned() {
  std::vector<int64_t> ids;
  {
    std::lock_guard lock(mu_);
    ids.swap(abandoned_);
  }
  std::vector<int64_t> failed;
  for (int64_t id : ids) {
    try {
      std::optional<events::HeldEvent> held = pool_.Run("read abandoned event", [&](storage::Connection& c) {
        return events::ReadHeldById(c, id, Key());
      });
      if (!held) continue;  // it settled after all (the commit did apply), or was reset
      bool applied = pool_.Transact("hand back abandoned event", [&](storage::Connection& c) {
        return events::ResetEvent(c, *held, "reset: run abandoned on node " + options_.node_address);
      });
      if (applied) {
        stats_.handed_back_abandoned++;
        spdlog::info("EVENT_RESET event={} node={} from={} reason=\"run abandoned\"", held->code,
                     options_.node_address, held->status);
      }
    } catch (const std::exception& e) {
      failed.push_back(id);  // the database is still away: next poll
    }
  }
  if (!failed.empty()) {
    std::lock_guard lock(mu_);
    abandoned_.insert(abandoned_.end(), failed.begin(), failed.end());
  }
}

void ConsumerNode::PublishPrefetchChange() {
  if (options_.prefetch >= 0 || Prefetch() == published_prefetch_.load()) return;
  const Clock::TimePoint now = clock_.Now();
  if (prefetch_beat_at_ != Clock::TimePoint{} && now - prefetch_beat_at_ < kPrefetchBeatGap) return;
  prefetch_beat_at_ = now;
  BeatNow();
}

void ConsumerNode::BeatNow() {
  try {
    heartbeat_.Beat();  // the dispatcher learns of the change now, not at the next beat
  } catch (const std::exception& e) {
    spdlog::warn("HEARTBEAT_FAILED node={} service={} err={}", options_.node_address, options_.service, e.what());
  }
}

void ConsumerNode::PollLoop(std::stop_token stop) {
  Millis pause = options_.poll_interval;
  const int claim_threshold = std::max(1, options_.capacity / 4);
  while (!stop.stop_requested()) {
    int added = 0;
    try {
      HandBackAbandoned();
      added = PollOnce();
    } catch (const std::exception& e) {
      spdlog::warn("POLL_FAILED node={} err={}", options_.node_address, e.what());
    }
    {  // wake-ups: feed the rate limit; wake the dispatcher when freed slots stay empty
      bool slots_free;
      {
        std::lock_guard lock(mu_);
        slots_free = accepting_ && static_cast<int>(known_.size()) < options_.capacity;
      }
      wakeups_->Polled(added > 0, slots_free);
    }
    PublishPrefetchChange();
    if (added > 0) {
      pause = options_.poll_interval;
      last_work_ = clock_.Now();
      // Work is arriving: look again soon, once enough slots are free that one claim
      // transaction takes several events (a quarter of the capacity; group commits end
      // many runs together), or after kBusyPollInterval; never sooner than
      // kBusyPollGap.
      if (!clock_.SleepFor(kBusyPollGap, stop)) break;
      std::unique_lock lock(mu_);
      clock_.WaitFor(poll_cv_, lock, stop, kBusyPollInterval, [&] {
        return options_.capacity - static_cast<int>(known_.size()) >= claim_threshold;
      });
      poll_now_ = false;
      continue;
    }
    // While work came in the last second, new assignments are likely any moment:
    // look every kBusyPollInterval rather than waiting out the poll interval.
    const bool busy = clock_.Now() - last_work_ < kBusyWindow;
    std::unique_lock lock(mu_);
    clock_.WaitFor(poll_cv_, lock, stop, busy ? std::min(pause, kBusyPollInterval) : pause, [&] { return poll_now_; });
    bool woken = poll_now_;
    poll_now_ = false;
    pause = woken ? options_.poll_interval : std::min(pause * 2, std::max(options_.idle_interval, options_.poll_interval));
  }
}

void ConsumerNode::WorkerLoop(std::stop_token stop) {
  std::vector<saga::AssignedEvent> batch;
  while (true) {
    batch.clear();
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, stop, [&] { return !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested
      // Events of fast plans, claimed by the poll, run together on this thread
      // (SagaEngine::RunBatch); anything else runs alone.
      if (queue_.front().batchable) {
        for (auto it = queue_.begin(); it != queue_.end() && batch.size() < kMaxBatch;) {
          if (it->batchable) {
            batch.push_back(std::move(it->event));
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
      } else {
        batch.push_back(std::move(queue_.front().event));
        queue_.pop_front();
      }
    }
    std::vector<saga::Outcome> outcomes(batch.size(), saga::Outcome::kAbandoned);
    try {
      if (batch.size() == 1) {
        outcomes[0] = engine_.Run(batch[0], work_stop_.get_token());
      } else {
        std::vector<const saga::AssignedEvent*> events;
        for (const auto& e : batch) events.push_back(&e);
        stats_.batches++;
        stats_.batched_events += events.size();
        outcomes = engine_.RunBatch(events, work_stop_.get_token());
      }
    } catch (const std::exception& e) {
      spdlog::error("EVENT_RUN_CRASHED event={} node={} events={} err={}", batch[0].code, options_.node_address,
                    batch.size(), e.what());
    }
    {
      std::lock_guard lock(mu_);
      for (size_t i = 0; i < batch.size(); ++i) {
        spdlog::debug("EVENT_RUN_DONE event={} node={} outcome={}", batch[i].code, options_.node_address,
                      saga::OutcomeName(outcomes[i]));
        if (outcomes[i] == saga::Outcome::kAbandoned) abandoned_.push_back(batch[i].id);
        known_.erase(batch[i].id);
      }
      stats_.in_flight = static_cast<int>(known_.size());
      poll_now_ = true;  // slots are free: refill them without waiting for the pause
      wakeups_->SlotsFreed();
    }
    poll_cv_.notify_one();
  }
}

std::string ConsumerNode::WaitForDrainRequest(const sigset_t& signals) {
  while (true) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM) return "SIGTERM";
    if (sig == SIGINT) return "SIGINT";
    if (heartbeat_.draining()) return "operator drain";
  }
}

bool ConsumerNode::Drain() {
  spdlog::info("NODE_DRAINING node={} in_flight={}", options_.node_address, stats_.in_flight.load());
  // No beat of the prober's may follow MarkOffline() (it would bring the row back online).
  started_ = false;
  if (prober_) prober_->Stop();
  {
    std::lock_guard lock(mu_);
    accepting_ = false;
    for (const auto& q : queue_) {
      known_.erase(q.event.id);
      if (q.event.claimed) abandoned_.push_back(q.event.id);  // RUNNING here, never started: hand back
    }
    queue_.clear();
    stats_.in_flight = static_cast<int>(known_.size());
  }
  poller_ = {};  // request_stop + join
  if (wakeups_) wakeups_->Stop();
  bool clean = true;
  try {
    heartbeat_.MarkDraining();
  } catch (const std::exception& e) {
    spdlog::warn("NODE_DRAIN_MARK_FAILED node={} err={}", options_.node_address, e.what());
  }
  try {
    // Not the runs in flight: a deferred claim (AssignedEvent::claim_deferred) is
    // ASSIGNED while its first step runs.
    std::set<int64_t> running;
    {
      std::lock_guard lock(mu_);
      running = known_;
    }
    int handed = HandBack(HandBackScope::kUnclaimed, "reset: node draining, unclaimed", running);
    stats_.handed_back_at_drain += static_cast<uint64_t>(handed);
  } catch (const std::exception& e) {
    spdlog::warn("NODE_DRAIN_HANDBACK_FAILED node={} err={}", options_.node_address, e.what());
  }

  auto deadline = clock_.Now() + options_.drain_timeout;
  while (stats_.in_flight.load() > 0 && clock_.Now() < deadline) clock_.SleepFor(Millis(20), {});
  if (stats_.in_flight.load() > 0) {
    clean = false;
    spdlog::warn("NODE_DRAIN_TIMEOUT node={} cancelling={} (left for the sweeper)", options_.node_address,
                 stats_.in_flight.load());
    work_stop_.request_stop();
    auto grace = clock_.Now() + Millis(5000);
    while (stats_.in_flight.load() > 0 && clock_.Now() < grace) clock_.SleepFor(Millis(20), {});
  }
  for (auto& w : workers_) w.request_stop();
  work_cv_.notify_all();
  workers_.clear();  // joins
  HandBackAbandoned();  // cancelled runs: hand them back now rather than via the sweeper
  try {
    heartbeat_.MarkOffline();
  } catch (const std::exception& e) {
    spdlog::warn("NODE_OFFLINE_MARK_FAILED node={} err={}", options_.node_address, e.what());
  }
  return clean;
}

}  // namespace dsync::consumer
