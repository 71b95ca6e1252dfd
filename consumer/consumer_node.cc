#include "consumer/consumer_node.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/process.h"
#include "events/poll.h"
#include "events/reset.h"
#include "registry/node_directory.h"

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
// After a drain's timeout: how long cancelled runs get to end, and how often their
// statements are killed meanwhile.
constexpr Millis kDrainGrace{3000};
constexpr Millis kDrainKillInterval{500};

}  // namespace

ConsumerNode::ConsumerNode(storage::ConnectionPool& pool, saga::SagaEngine& engine, Clock& clock,
                           ConsumerOptions options)
    : pool_(pool),
      engine_(engine),
      clock_(clock),
      options_(std::move(options)),
      heartbeat_(pool, clock, options_.service, options_.node_address, options_.heartbeat_interval,
                 [this] { return Metadata(); }) {
  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.WallNow().time_since_epoch()).count();
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
    // Per-step routing: a step this node does not reach (not in its datasources, or
    // not reached at the prober's last check, as the heartbeat says) is handed on.
    engine_.SetDatasourceReach([this](const std::vector<std::string>& names) {
      for (const auto& name : names) {
        if (options_.datasources->count(name) == 0) return false;
      }
      const std::vector<std::string> reachable = prober_->snapshot().reachable;  // sorted
      for (const auto& name : names) {
        if (!std::binary_search(reachable.begin(), reachable.end(), name)) return false;
      }
      return true;
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

// The program name (argv[0] without its directory) of process `pid` ("self": this
// one), from /proc; "" when it cannot be read.
static std::string ProgramName(const std::string& pid) {
  std::ifstream cmdline("/proc/" + pid + "/cmdline");
  std::string argv0;
  if (!cmdline || !std::getline(cmdline, argv0, '\0')) return "";
  return argv0.substr(argv0.rfind('/') == std::string::npos ? 0 : argv0.rfind('/') + 1);
}

// Whether process `pid` of this host may be the previous incarnation: it is running
// (signal 0: EPERM means it exists) and, when /proc tells, runs the program this one
// runs (a pid reused by another program since is not it).
static bool SameProgramRunning(int64_t pid) {
  if (pid <= 0) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  const std::string theirs = ProgramName(std::to_string(pid));
  const std::string ours = ProgramName("self");
  return theirs.empty() || ours.empty() || theirs == ours;  // cannot tell: take it as running
}

void ConsumerNode::RefuseIfAddressInUse() {
  std::optional<registry::LiveHolder> holder = pool_.Run("read node address holder", [&](storage::Connection& c) {
    return registry::ReadLiveHolder(c, options_.service, options_.node_address, options_.offline_timeout);
  });
  if (!holder) return;  // nobody holds it, or its holder is dead by the offline timeout
  const registry::NodeMetadata& m = holder->metadata;
  // The same host: its previous process (systemd, a container restart) may be dead
  // although its heartbeat is still fresh. This process itself may even have its pid
  // (a container's pid 1). A process still running there holds the address.
  if (!m.host.empty() && m.host == metadata_.host && (m.pid == metadata_.pid || !SameProgramRunning(m.pid))) {
    spdlog::info("NODE_PREVIOUS_INCARNATION_GONE node={} service={} incarnation={} heartbeat_age_ms={} "
                 "action=\"handing back what it held\"",
                 options_.node_address, options_.service, m.incarnation, holder->heartbeat_age.count());
    return;
  }
  const bool same_host = !m.host.empty() && m.host == metadata_.host;
  throw ConflictError(
      "node address " + options_.node_address + " (service " + options_.service + ") is in use by a live node (" +
      (m.host.empty() ? std::string("host unknown") : "host " + m.host) + ", pid " + std::to_string(m.pid) +
      ", last heartbeat " + std::to_string(holder->heartbeat_age.count()) + " ms ago); stop it or give this node "
      "another --node-address" +
      (same_host ? std::string()
                 : "; if that process is gone, start again once its heartbeat is older than offline_timeout_ms (" +
                       std::to_string(options_.offline_timeout.count()) + " ms)"));
}

void ConsumerNode::Start() {
  // A second process under a live node's address would hand back (reset) the events
  // that node is running and take them over: refuse it (docs/event-lifecycle.md,
  // "Node addresses").
  RefuseIfAddressInUse();
  int orphans = HandBack(HandBackScope::kEverythingHeld,
                         "reset (not charged): node restarted");
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

int ConsumerNode::HandBack(HandBackScope scope, const std::string& reason, const std::set<int64_t>& running) {
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
      spdlog::info("EVENT_RESET event={} node={} from={} reason=\"{}\"", h.code, options_.node_address, events::ToText(h.status),
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
  std::vector<std::pair<int64_t, int>> candidates;  // (id, version as polled)
  for (const auto& e : events) candidates.push_back({e.id, e.version});
  std::vector<saga::AssignedEvent> rest;
  std::vector<saga::AssignedEvent> claimed;
  try {
    claimed = engine_.ClaimBatch(std::move(events), rest);
  } catch (const DbError& e) {
    if (e.kind() == DbError::Kind::kCommitUnknown) {
      // The claim may have applied: whatever is RUNNING here is handed back.
      std::lock_guard lock(mu_);
      for (const auto& [id, version] : candidates) abandoned_.push_back({id, version});
    }
    throw;
  }
  int added = 0;
  int batchable = 0;
  {
    std::lock_guard lock(mu_);
    for (auto& e : claimed) {
      if (!accepting_ || !known_.insert(e.id).second) {
        abandoned_.push_back({e.id, e.version + 1});  // draining began meanwhile: hand it back (claimed: + 1)
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
  std::vector<AbandonedRun> runs;
  {
    std::lock_guard lock(mu_);
    runs.swap(abandoned_);
  }
  // A drain that timed out stopped these runs itself: not counted against the events
  // at all. Otherwise (the database went away mid-run, a commit of unknown outcome)
  // the reset counts in reset_count, never in retry_count (events/reset.h).
  const bool drain = drain_timed_out_.load();
  const std::string why = drain ? "reset (not charged): drain timed out on node " + options_.node_address
                                : "reset (not charged): run abandoned on node " + options_.node_address +
                                      " (database unreachable or commit outcome unknown)";
  std::vector<AbandonedRun> failed;
  for (const AbandonedRun& run : runs) {
    try {
      // At the run's own version (or the one its unknown commit left): a later claim of
      // the event, here or elsewhere, is never reset by this.
      std::optional<events::HeldEvent> held = pool_.Run("read abandoned event", [&](storage::Connection& c) {
        return events::ReadAbandoned(c, run.id, run.version, Key());
      });
      if (!held) continue;  // it settled after all (the commit did apply), or was reset
      bool applied = pool_.Transact("hand back abandoned event", [&](storage::Connection& c) {
        return events::ResetEvent(c, *held, why, std::nullopt,
                                  drain ? events::ResetCharge::kFree : events::ResetCharge::kCountReset);
      });
      if (applied) {
        stats_.handed_back_abandoned++;
        spdlog::info("EVENT_RESET event={} node={} from={} version={} reason=\"{}\"", held->code,
                     options_.node_address, events::ToText(held->status), held->version, drain ? "drain timed out" : "run abandoned");
      }
    } catch (const std::exception& e) {
      failed.push_back(run);  // the database is still away: next poll
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
    std::vector<int> versions;  // each run's last version (its hand-back's fence)
    for (const auto& e : batch) versions.push_back(e.claimed ? e.version + 1 : e.version);
    try {
      if (batch.size() == 1) {
        outcomes[0] = engine_.Run(batch[0], work_stop_.get_token(), &versions[0]);
      } else {
        std::vector<const saga::AssignedEvent*> events;
        for (const auto& e : batch) events.push_back(&e);
        stats_.batches++;
        stats_.batched_events += events.size();
        outcomes = engine_.RunBatch(events, work_stop_.get_token(), &versions);
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
        if (outcomes[i] == saga::Outcome::kAbandoned) abandoned_.push_back({batch[i].id, versions[i]});
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
      // RUNNING here (claimed by the poll: version + 1), never started: hand back.
      if (q.event.claimed) abandoned_.push_back({q.event.id, q.event.version + 1});
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
    spdlog::warn("NODE_DRAIN_TIMEOUT node={} cancelling={} (handed back, not charged)", options_.node_address,
                 stats_.in_flight.load());
    drain_timed_out_ = true;
    work_stop_.request_stop();
    // A step blocked in a statement (a row lock, a long query) does not see the stop
    // request: its statement is killed, again every kDrainKillInterval while runs
    // remain (a step between two statements is not in one yet).
    auto grace = clock_.Now() + kDrainGrace;
    auto next_kill = clock_.Now();
    while (stats_.in_flight.load() > 0 && clock_.Now() < grace) {
      if (clock_.Now() >= next_kill) {
        int killed = engine_.KillRunningStatements();
        if (killed > 0) {
          spdlog::info("NODE_DRAIN_KILLED_STATEMENTS node={} sessions={}", options_.node_address, killed);
        }
        next_kill = clock_.Now() + kDrainKillInterval;
      }
      clock_.SleepFor(Millis(20), {});
    }
    if (stats_.in_flight.load() > 0) {
      // A step that ignores its stop token outside any statement: waited for below.
      spdlog::error("NODE_DRAIN_STUCK node={} running={} after_ms={} (waiting for its step to return)",
                    options_.node_address, stats_.in_flight.load(), (options_.drain_timeout + kDrainGrace).count());
    }
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
