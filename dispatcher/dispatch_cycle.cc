#include "dispatcher/dispatch_cycle.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "events/assign.h"

namespace dsync::dispatcher {
namespace {

// Unroutable topics (V009), rewritten by the leader. Params: service, then the
// topics still unroutable (one `?` each; none: every row of the service goes).
std::string DeleteRoutableSql(size_t keep) {
  return "DELETE FROM distribute_unroutable_topic WHERE service_name = ?" +
         (keep == 0 ? std::string() : " AND topic NOT IN (" + storage::Marks(keep) + ")");
}

// Params: topic, service, reason, pending, kind. since_time is kept while the topic
// stays unroutable (the row exists); updated_time marks the row current.
constexpr const char* kUpsertUnroutable = R"(
INSERT INTO distribute_unroutable_topic
  (topic, service_name, reason, pending_events, kind, since_time, updated_time)
VALUES (?, ?, ?, ?, ?, NOW(3), NOW(3))
ON DUPLICATE KEY UPDATE
  since_time = IF(kind = VALUES(kind), since_time, NOW(3)), reason = VALUES(reason),
  pending_events = VALUES(pending_events), kind = VALUES(kind), updated_time = NOW(3))";

// The config's unordered topics (V017). Params: service; then service, topic.
constexpr const char* kDeleteUnordered = "DELETE FROM distribute_unordered_topic WHERE service_name = ?";
constexpr const char* kInsertUnordered =
    "INSERT INTO distribute_unordered_topic (service_name, topic, updated_time) VALUES (?, ?, NOW(3))";

// How often unchanged unroutable rows are refreshed (and their events recounted).
// v_events_needing_attention trusts rows updated within the last 60 s.
constexpr Millis kUnroutableRefresh{5000};
// How often the leader looks for unknown topics (one GROUP BY over the service's
// PENDING rows of idx_due: 0.1-0.3 s on a backlog of 100k events on this machine, so
// at most 3 % of the database's time; nothing else finds such events).
constexpr Millis kUnknownTopicScan{10000};
// distribute_unroutable_topic.topic is VARCHAR(50) (as distribute_event.topic) and
// reason VARCHAR(1024).
constexpr size_t kMaxTopic = 50;
constexpr size_t kMaxReason = 1024;
// Most (priority, tenant) pairs a fair cycle reads (issue 37); a cluster with more
// tenants waiting at once serves the first ones by name until these drain.
constexpr int kMaxDueHeads = 10000;
// How often a fair cycle reads every pair; in between, only those of new rows.
constexpr Millis kHeadsRefresh{2000};
// How many rows each way RepairFairPending sets at most per pass (kFairRepairInterval).
constexpr int kFairRepairMax = 10000;

// At most `max` bytes of `text`, cut at a UTF-8 character boundary.
std::string Truncated(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::string CommaList(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ',';
    out += s;
  }
  return out;
}

// The nodes of the assignments that won, each once, in first-assignment order.
std::vector<std::string> WonNodes(const std::vector<Assignment>& assignments, const std::vector<bool>& won) {
  std::vector<std::string> nodes;
  for (size_t i = 0; i < won.size(); ++i) {
    const std::string& n = assignments[i].node_address;
    if (won[i] && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  return nodes;
}

Millis Elapsed(Clock::TimePoint from, Clock::TimePoint to) {
  return std::chrono::duration_cast<Millis>(to - from);
}

}  // namespace

Millis NextDispatchDelay(const CycleResult& r, Millis previous, const DispatcherSettings& s, bool busy) {
  if (r.fenced_out) return s.poll_interval;
  // Only batch_size stopped it and nodes have room: go on at once. (Nodes full: new
  // slots free up over the next moments; coming back at once would re-read every
  // in-flight count to assign a handful.)
  if (r.assigned > 0 && r.more_due && r.room_left) return Millis(0);
  // Validate() keeps busy_interval <= poll_interval; min() for settings built in code.
  if (r.assigned > 0 || r.backlog) return std::min(s.busy_interval, s.poll_interval);
  if (r.free_slots > 0 && r.due_read == 0) {
    // Nothing due now, but the last cycles assigned events: more are likely any moment.
    if (busy) return std::min(s.busy_interval, s.poll_interval);
    // Nothing due at all: back off, doubling, to the idle interval.
    Millis next = std::max(s.poll_interval, previous * 2);
    return std::min(next, s.idle_interval);
  }
  return s.poll_interval;
}

DispatchCycle::DispatchCycle(storage::ConnectionPool& pool, Clock& clock, PlannerConfig planner,
                             CycleOptions options)
    : pool_(pool),
      clock_(clock),
      options_(std::move(options)),
      directory_(pool, options_.service, options_.offline_timeout),
      planner_(std::move(planner)) {}

std::vector<NodeLoad> DispatchCycle::ReadNodes() {
  std::vector<registry::NodeInfo> live = directory_.LiveNodes();
  std::vector<std::string> addresses;
  for (const auto& n : live) addresses.push_back(n.node_address);
  std::map<std::string, int64_t> in_flight = pool_.Run(
      "count in-flight events", [&](storage::Connection& c) { return events::CountInFlight(c, options_.service, addresses); });
  std::vector<NodeLoad> nodes;
  nodes.reserve(live.size());
  for (auto& n : live) {
    NodeLoad l;
    l.address = n.node_address;
    l.draining = n.status == registry::NodeStatus::kDraining;
    l.capacity = std::max(1, n.metadata.capacity);
    l.prefetch = std::max(0, n.metadata.prefetch);
    auto it = in_flight.find(n.node_address);
    l.in_flight = it == in_flight.end() ? 0 : static_cast<int>(it->second);
    l.processing_count = n.metadata.processing_count;
    l.load = n.metadata.load;
    l.weight = n.metadata.weight;
    l.topics = std::move(n.metadata.topics);
    l.datasources = std::move(n.metadata.datasources);
    l.bad_topics = std::move(n.metadata.bad_topics);
    nodes.push_back(std::move(l));
  }
  return nodes;
}

events::DueFilter DispatchCycle::DueFilterOf(const PageFilter& f, const Cursor& after) const {
  const std::string served = CommaList(f.served_topics);
  // Topics at their batch_limit, topics no free node can run and topics with a
  // datasource at its concurrency limit are kept out alike.
  std::vector<std::string> excluded = f.exhausted_topics;
  excluded.insert(excluded.end(), f.blocked_topics.begin(), f.blocked_topics.end());
  excluded.insert(excluded.end(), paused_.begin(), paused_.end());  // paused topics (V022)
  excluded.insert(excluded.end(), f.limited_topics.begin(), f.limited_topics.end());
  const std::string exhausted = CommaList(excluded);
  const std::string unordered = CommaList(f.unordered_topics);
  return events::DueFilter{options_.service, after.priority, after.id, f.any_topic, served, exhausted, unordered, f.limit};
}

std::vector<events::DueEvent> DispatchCycle::ReadDue(const PageFilter& f, const Cursor& after) {
  const events::DueFilter filter = DueFilterOf(f, after);
  return pool_.Run("read due events", [&](storage::Connection& c) { return events::ReadDue(c, filter); });
}

// ---- issue 37: fair windows and concurrency limits ----

std::vector<events::DueEvent> DispatchCycle::ReadWindows(const PageFilter& f, const std::vector<TenantWindow>& windows) {
  const events::DueFilter filter = DueFilterOf(f, Cursor{0, 0});
  return pool_.Run("read due windows", [&](storage::Connection& c) { return events::ReadDueWindows(c, filter, windows); });
}

LimitUsage DispatchCycle::ReadLimitUsage() {
  LimitUsage usage;
  if (!planner_.HasLimits()) return usage;
  const std::map<std::string, std::string>& keyed = planner_.KeyedTopics();
  pool_.Run("count limited slots", [&](storage::Connection& c) {
    usage = LimitUsage{};  // fresh on a retry
    for (const auto& [topic, n] : events::CountInFlightByTopic(c, options_.service)) {
      for (const auto& ds : planner_.PolicyFor(topic).datasources) usage.per_datasource[ds] += n;
    }
    for (const auto& [topic, key] : keyed) {
      usage.per_key[topic] = events::CountInFlightByKey(c, options_.service, topic, key);
    }
  });
  return usage;
}

void DispatchCycle::FillLimitKeys(std::vector<events::DueEvent>& events) {
  const std::map<std::string, std::string>& keyed = planner_.KeyedTopics();
  if (keyed.empty()) return;
  std::map<std::string, std::vector<int64_t>> payload_ids;  // key -> events needing it read
  for (events::DueEvent& e : events) {
    auto it = keyed.find(e.topic);
    if (it == keyed.end()) continue;
    if (it->second == "tenant_id") {
      e.limit_key = e.tenant_id;
    } else if (it->second == "data_id") {
      e.limit_key = e.data_id;
    } else {
      payload_ids[it->second].push_back(e.id);
    }
  }
  for (const auto& [key, ids] : payload_ids) {
    const std::map<int64_t, std::string> values =
        pool_.Run("read concurrency keys", [&](storage::Connection& c) { return events::ReadPayloadKeys(c, key, ids); });
    for (events::DueEvent& e : events) {
      auto it = keyed.find(e.topic);
      if (it == keyed.end() || it->second != key) continue;
      auto v = values.find(e.id);
      if (v != values.end()) e.limit_key = v->second;
    }
  }
}

bool DispatchCycle::ReadHeads() {
  // Every pair, every kHeadsRefresh (the GROUP BY: a loose index scan when the
  // statistics know the pairs are few, else a scan of idx_fair); in between, the pairs
  // of the events inserted since (a primary-key range), so a tenant that just produced
  // is seen at once: read here when the cycle shares, else with its first page. A pair
  // gone since reads an empty window; a pair whose events became PENDING again (retry,
  // reset, hand-on) and that had none is seen at the next refresh.
  const Clock::TimePoint now = clock_.Now();
  const bool refresh = !heads_at_ || now - *heads_at_ >= kHeadsRefresh;
  // One tenant per priority and no refresh due: nothing to read here.
  if (!refresh && !SharedHeads(heads_)) return false;
  bool shared = false;
  pool_.Run("read due tenants", [&](storage::Connection& c) {
    if (refresh) {
      heads_after_id_ = events::MaxEventId(c);
      heads_ = events::ReadDueHeads(c, options_.service, kMaxDueHeads);
      heads_at_ = now;
    }
    shared = SharedHeads(heads_);
    if (shared) MergeHeads(events::ReadNewDueHeads(c, options_.service, heads_after_id_));
  });
  if (shared) planner_.BeginFairCycle(heads_);
  return shared;
}

void DispatchCycle::RepairFairPending() {
  const Clock::TimePoint now = clock_.Now();
  if (repaired_at_ && now - *repaired_at_ < kFairRepairInterval) return;
  repaired_at_ = now;
  try {
    const int64_t n = pool_.Run("repair fair_pending", [&](storage::Connection& c) {
      return events::RepairFairPending(c, options_.service, kFairRepairMax);
    });
    if (n > 0) {
      spdlog::warn("FAIR_PENDING_REPAIRED service={} events={} (a status changed without fair_pending, V029)",
                   options_.service, n);
      heads_at_.reset();  // the pairs as they are now, at this cycle
    }
  } catch (const DbError& e) {
    spdlog::warn("FAIR_PENDING_REPAIR_FAILED service={} err={}", options_.service, e.what());
  }
}

void DispatchCycle::MergeHeads(std::vector<events::DueHead> found) {
  for (auto& h : found) {
    if (std::find(heads_.begin(), heads_.end(), h) == heads_.end()) heads_.push_back(std::move(h));
  }
}

bool DispatchCycle::SharedHeads(const std::vector<events::DueHead>& heads) {
  std::map<int, std::string> tenant_of;  // priority -> its first tenant seen
  for (const auto& h : heads) {
    auto [it, first] = tenant_of.emplace(h.priority, h.tenant_id);
    if (!first && it->second != h.tenant_id) return true;
  }
  return false;
}

std::vector<events::DueEvent> DispatchCycle::ReadDueWithNewHeads(const PageFilter& f, const Cursor& after) {
  const events::DueFilter filter = DueFilterOf(f, after);
  std::vector<events::DueHead> found;
  std::vector<events::DueEvent> events = pool_.Run("read due events", [&](storage::Connection& c) {
    found.clear();  // fresh on a retry (after_id moves only on success)
    int64_t after_id = heads_after_id_;
    std::vector<events::DueEvent> out = events::ReadDueWithNewHeads(c, filter, after_id, found);
    heads_after_id_ = after_id;
    return out;
  });
  MergeHeads(std::move(found));  // a second tenant: the next cycle shares
  return events;
}

// ---- end of issue 37 ----

DispatchCycle::WriteResult DispatchCycle::Write(const std::vector<Assignment>& assignments,
                                                const std::optional<LeaseFence>& fence) {
  // Row locks in id order, so two writers (a lease handover) cannot deadlock.
  std::vector<size_t> order(assignments.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return assignments[a].event_id < assignments[b].event_id; });
  std::vector<events::AssignRow> rows;
  rows.reserve(order.size());
  for (size_t i : order) {
    const Assignment& a = assignments[i];
    rows.push_back({a.event_id, a.version, a.node_address});
  }
  struct FencedOut {};  // thrown to roll the transaction back
  try {
    return pool_.Transact("assign events", [&](storage::Connection& c) {
      WriteResult r;  // fresh on every (retried) attempt
      r.won.assign(assignments.size(), false);
      const std::vector<bool> won = events::AssignEvents(c, rows);
      for (size_t k = 0; k < order.size(); ++k) r.won[order[k]] = won[k];
      // The fence, last before COMMIT (lease_lock.h: no lock, so a takeover never waits).
      if (fence && !HoldsLease(c, *fence)) throw FencedOut{};
      return r;
    });
  } catch (const FencedOut&) {
    WriteResult r;
    r.fenced_out = true;
    return r;
  }
}

void DispatchCycle::RecordUnroutable(const std::optional<LeaseFence>& fence) {
  // topic -> kind '\n' reason: the planner's findings, then the unknown topics.
  std::map<std::string, std::string> now;
  for (const auto& [topic, reason] : planner_.Unroutable()) now[topic] = "unroutable\n" + reason;
  const bool due = !recorded_unroutable_ || clock_.Now() - recorded_at_ >= kUnroutableRefresh;
  std::optional<std::map<std::string, int64_t>> pending;  // every topic's PENDING events, when counted
  if (!counted_at_ || clock_.Now() - *counted_at_ >= kUnknownTopicScan) {
    counted_at_ = clock_.Now();
    try {
      pending = pool_.Run("count pending topics",
                          [&](storage::Connection& c) { return events::CountPendingTopics(c, options_.service); });
    } catch (const DbError& e) {
      spdlog::warn("UNROUTABLE_RECORD_FAILED topics={} err={}", now.size(), e.what());
      return;
    }
    unknown_.clear();
    for (const auto& [topic, n] : *pending) {
      if (now.count(topic) || planner_.Known(topic)) continue;
      unknown_[topic] = "unknown_topic\nno config of the leading dispatcher defines topic " + topic +
                        " and no live node serves it";
    }
  }
  for (const auto& [topic, finding] : unknown_) {
    if (!planner_.Known(topic)) now.emplace(topic, finding);  // a node serving it may have joined since
  }
  const bool changed = !recorded_unroutable_ || *recorded_unroutable_ != now;
  if (!changed && !(due && !now.empty())) return;
  struct FencedOut {};
  std::map<std::string, UnroutableTopic> recorded;
  try {
    recorded = pool_.Transact("record unroutable topics", [&](storage::Connection& c) {
      std::map<std::string, UnroutableTopic> out;
      std::vector<storage::Value> keep{options_.service};
      for (const auto& [topic, finding] : now) {
        // A longer name (only a node's hand-edited metadata could say so) names no event.
        if (topic.size() > kMaxTopic) continue;
        keep.emplace_back(topic);
        const size_t nl = finding.find('\n');
        out[topic].kind = finding.substr(0, nl);
        out[topic].reason = Truncated(finding.substr(nl + 1), kMaxReason);
      }
      c.Execute(DeleteRoutableSql(keep.size() - 1), storage::Values(keep));
      if (!out.empty()) {
        std::vector<storage::Value> topics(keep.begin() + 1, keep.end());
        const std::map<std::string, int64_t> counts =
            pending ? *pending : events::CountPendingByTopic(c, options_.service, topics);
        for (auto& [topic, u] : out) {
          auto it = counts.find(topic);
          u.pending = it == counts.end() ? 0 : it->second;
          c.Execute(kUpsertUnroutable, topic, options_.service, u.reason, u.pending, u.kind);
        }
      }
      if (fence && !HoldsLease(c, *fence)) throw FencedOut{};
      return out;
    });
  } catch (const FencedOut&) {
    return;
  } catch (const DbError& e) {
    // A record is for the operator; failing it must not stop the assignments.
    spdlog::warn("UNROUTABLE_RECORD_FAILED topics={} err={}", now.size(), e.what());
    return;
  }
  const std::map<std::string, std::string> before = recorded_unroutable_.value_or(std::map<std::string, std::string>{});
  for (const auto& [topic, u] : recorded) {
    auto it = before.find(topic);
    if (it == before.end() || it->second != now.at(topic)) {
      if (u.kind == "unknown_topic") {
        spdlog::warn("TOPIC_UNKNOWN topic={} pending={} reason=\"{}\"", topic, u.pending, u.reason);
      } else {
        spdlog::warn("TOPIC_UNROUTABLE topic={} pending={} reason=\"{}\"", topic, u.pending, u.reason);
      }
    }
  }
  for (const auto& [topic, _] : before) {
    if (!now.count(topic)) spdlog::info("TOPIC_ROUTABLE topic={}", topic);
  }
  recorded_unroutable_ = now;
  recorded_at_ = clock_.Now();
  std::lock_guard lock(mu_);
  stats_.unroutable = std::move(recorded);
}

void DispatchCycle::RecordUnordered(const std::optional<LeaseFence>& fence) {
  const int64_t token = fence ? fence->token : -1;
  if (unordered_token_ == token) return;
  const std::vector<std::string> topics = planner_.UnorderedTopics();
  struct FencedOut {};
  try {
    pool_.Transact("record unordered topics", [&](storage::Connection& c) {
      c.Execute(kDeleteUnordered, options_.service);
      for (const auto& topic : topics) {
        if (topic.size() <= kMaxTopic) c.Execute(kInsertUnordered, options_.service, topic);
      }
      if (fence && !HoldsLease(c, *fence)) throw FencedOut{};
    });
  } catch (const FencedOut&) {
    return;
  } catch (const DbError& e) {
    spdlog::warn("UNORDERED_RECORD_FAILED topics={} err={}", topics.size(), e.what());
    return;
  }
  unordered_token_ = token;
}

CycleResult DispatchCycle::RunOnce(const std::optional<LeaseFence>& fence,
                                   const std::function<bool()>& leading) {
  const Clock::TimePoint start = clock_.Now();
  CycleResult r;
  try {
    r = RunPages(fence, leading);
  } catch (...) {
    std::lock_guard lock(mu_);
    ++stats_.cycles;
    ++stats_.failures;
    throw;
  }
  r.duration = Elapsed(start, clock_.Now());
  {
    std::lock_guard lock(mu_);
    ++stats_.cycles;
    stats_.assigned += r.assigned;
    stats_.lost_races += r.lost_races;
    if (r.fenced_out) ++stats_.fenced_out;
    stats_.last_duration = r.duration;
    stats_.max_duration = std::max(stats_.max_duration, r.duration);
  }
  cycle_duration_.Observe(r.duration);
  spdlog::debug(
      "DISPATCH_CYCLE nodes={} free={} pages={} due={} assigned={} lost_races={} skipped={} "
      "shared={} fenced_out={} more_due={} ms={}",
      r.live_nodes, r.free_slots, r.pages, r.due_read, r.assigned, r.lost_races, r.skipped,
      r.shared, r.fenced_out, r.more_due, r.duration.count());
  return r;
}

CycleResult DispatchCycle::RunPages(const std::optional<LeaseFence>& fence,
                                    const std::function<bool()>& leading) {
  CycleResult r;
  paused_ = paused_reader_.Read(pool_, clock_.Now());  // at most every control::kPauseRefresh
  std::vector<NodeLoad> nodes = ReadNodes();
  r.live_nodes = static_cast<int>(nodes.size());
  const bool any_taker = std::any_of(nodes.begin(), nodes.end(), [](const NodeLoad& n) { return !n.draining; });
  planner_.BeginCycle(std::move(nodes), ReadLimitUsage());
  r.free_slots = planner_.free_slots();
  r.unroutable_topics = static_cast<int>(planner_.Unroutable().size());
  RecordUnroutable(fence);
  RecordUnordered(fence);
  bool no_room = false;  // an event read found no eligible node with room left

  Cursor cursor{std::numeric_limits<int32_t>::min(), 0};
  // Fair cycles (issue 37) share by deficit round robin only while some priority has
  // two tenants or more with PENDING events (`shared`); with one tenant per priority
  // the fair order is ReadDue's (priority, id) order, and the cycle reads as an unfair
  // one, the pairs of new rows riding along with its first page (ReadDueWithNewHeads).
  const bool fair = planner_.fair();
  if (fair) RepairFairPending();
  bool shared = false;
  bool heads_read = false;
  bool new_heads_read = false;  // this cycle's new pairs were read (unshared: with the first page)
  for (int page = 0; page < options_.max_pages; ++page) {
    PageFilter filter = planner_.NextPageFilter();
    // The budget ran out; more_due tells whether the last page was full.
    if (filter.limit <= 0) break;
    if (!filter.any_topic && filter.served_topics.empty()) break;
    std::vector<events::DueEvent> events;
    std::vector<TenantWindow> windows;
    bool page_full = false;
    if (fair && !heads_read) {
      // The pairs once a cycle, only when some node can take work.
      heads_read = true;
      shared = ReadHeads();
      new_heads_read = shared;
      r.shared = shared;
    }
    if (shared) {
      windows = planner_.NextWindows();
      if (windows.empty()) break;
      events = ReadWindows(filter, windows);
    } else if (fair && !new_heads_read) {
      new_heads_read = true;
      events = ReadDueWithNewHeads(filter, cursor);
    } else {
      events = ReadDue(filter, cursor);
    }
    const Clock::TimePoint read_at = clock_.Now();
    ++r.pages;
    r.due_read += static_cast<int>(events.size());
    FillLimitKeys(events);
    PlanResult plan;
    if (shared) {
      plan = planner_.PlanWindows(windows, events);  // marks short windows' pairs done
      page_full = plan.window_full;
      if (events.empty()) continue;                  // the next priority's pairs, if any
    } else {
      if (events.empty()) break;
      cursor = {events.back().priority, events.back().id};
      page_full = static_cast<int>(events.size()) >= filter.limit;
      plan = planner_.Plan(events);
    }
    r.skipped += static_cast<int>(events.size() - plan.assignments.size());
    if (plan.skipped_no_node > 0) no_room = true;
    if (!plan.assignments.empty()) {
      if (leading && !leading()) break;
      WriteResult w = Write(plan.assignments, fence);
      if (w.fenced_out) {
        r.fenced_out = true;
        spdlog::warn("DISPATCH_FENCED_OUT lock={} token={} planned={}", fence->lock_name,
                     fence->token, plan.assignments.size());
        break;
      }
      std::unordered_map<int64_t, std::chrono::microseconds> due_age;
      for (const events::DueEvent& e : events) due_age.emplace(e.id, e.due_age);
      const auto since_read = clock_.Now() - read_at;
      for (size_t i = 0; i < w.won.size(); ++i) {
        if (w.won[i]) {
          ++r.assigned;
          dispatch_latency_.Observe(due_age[plan.assignments[i].event_id] + since_read);
        } else {
          ++r.lost_races;
          spdlog::info("DISPATCH_LOST_RACE event_id={} version={} node={}",
                       plan.assignments[i].event_id, plan.assignments[i].version,
                       plan.assignments[i].node_address);
        }
      }
      if (on_assigned_ && r.assigned > 0) on_assigned_(WonNodes(plan.assignments, w.won));  // wake-ups
    }
    r.more_due = page_full;
    if (!page_full && !shared) break;  // every due event the filter allows was read
  }
  // Whether due events wait for a slot. A cycle that read knows; one that could not
  // read because every node was full keeps what the last reading cycle saw (the
  // events it left are still due unless something else took them).
  if (r.pages > 0) {
    backlog_ = r.more_due || no_room;
  } else if (r.free_slots > 0 || !any_taker) {
    backlog_ = false;  // no node to wait for (none live and not draining), or none read
  }
  r.backlog = backlog_;
  r.room_left = planner_.free_slots() > 0;
  return r;
}

CycleStats DispatchCycle::stats() {
  std::lock_guard lock(mu_);
  CycleStats s = stats_;
  s.dispatch_latency = dispatch_latency_.snapshot();
  s.cycle_duration = cycle_duration_.snapshot();
  return s;
}

}  // namespace dsync::dispatcher
