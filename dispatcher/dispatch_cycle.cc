#include "dispatcher/dispatch_cycle.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

namespace dsync::dispatcher {
namespace {

// In-flight events of the live nodes just read, one `?` per node address. A covering
// range of idx_node_address (node_address, status) over the in-flight statuses: terminal
// rows are never read, however many there are. FORCE INDEX because, after a mass status
// change, MariaDB's estimates made it pick a full scan (1.1M rows, 1.3 s per cycle in
// bench/dispatch_bench.cc); forced, 12 ms with 50k events in flight.
std::string CountInFlightSql(size_t nodes) {
  const std::string marks = storage::Marks(nodes);
  return "SELECT e.node_address, COUNT(*) FROM distribute_event e FORCE INDEX (idx_node_address) "
         "WHERE e.node_address IN (" + marks + ") AND e.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING') "
         "GROUP BY e.node_address";
}

// Params: cursor priority, cursor priority, cursor id (keyset: after this event),
// any_topic (bool), served topics (comma list), exhausted topics (comma list),
// unordered topics (comma list), limit.
// idx_due (status, priority, id, next_run_time) gives the order and stops at LIMIT;
// next_run_time is checked in the index. It is forced: the optimizer rated the old
// idx_dispatch (status, priority, id) as equal and took it, and then every event
// waiting for its backoff cost a row lookup (measured with 50k such events ahead of the
// due ones and 150k terminal rows: 90 ms through idx_dispatch, 14 ms through idx_due).
// V006 dropped idx_dispatch; the hint stays so no other (status, ...) index is picked.
// FORCE INDEX reads the same on MySQL 8 and MariaDB; V003 creates the index. The ordering check
// is one probe per non-terminal status, each a ref on idx_entity_status (tenant_id,
// data_id, status): one `status IN (...)` probe is planned as a ref on (tenant_id,
// data_id) alone and reads the entity's whole terminal history (measured: 50k
// entries for a hot entity, 6.5 ms against 0.2 ms). The last column (how long the
// event has been due: since next_run_time, or since it last became PENDING) feeds the
// dispatch-latency metric; it reads the row the other columns read anyway.
constexpr const char* kSelectDueEvents = R"(
SELECT e.id, e.version, e.topic, e.tenant_id, e.data_id, e.priority,
       TIMESTAMPDIFF(MICROSECOND, GREATEST(e.next_run_time, e.modifier_time), NOW(3))
FROM distribute_event e FORCE INDEX (idx_due)
WHERE e.status = 'PENDING' AND e.next_run_time <= NOW(3)
  AND (e.priority > ? OR (e.priority = ? AND e.id > ?))
  AND (? OR FIND_IN_SET(e.topic, ?) > 0)
  AND FIND_IN_SET(e.topic, ?) = 0
  AND (FIND_IN_SET(e.topic, ?) > 0 OR (
    NOT EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = e.tenant_id
                AND p.data_id = e.data_id AND p.status = 'PENDING' AND p.id < e.id)
    AND NOT EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = e.tenant_id
                AND p.data_id = e.data_id AND p.status = 'ASSIGNED' AND p.id < e.id)
    AND NOT EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = e.tenant_id
                AND p.data_id = e.data_id AND p.status = 'RUNNING' AND p.id < e.id)
    AND NOT EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = e.tenant_id
                AND p.data_id = e.data_id AND p.status = 'COMPENSATING' AND p.id < e.id)))
ORDER BY e.priority, e.id
LIMIT ?)";

// The assignment, docs/event-lifecycle.md item 2, for kAssignChunk events at once:
//
//   UPDATE distribute_event
//   SET status = 'ASSIGNED', node_address = ELT(FIELD(id, <ids>), <nodes>),
//       version = version + 1, assigned_time = NOW(3)
//   WHERE id IN (<ids>) AND status = 'PENDING'
//     AND version = CAST(ELT(FIELD(id, <ids>), <versions>) AS SIGNED)
//
// Params, kAssignChunk of each group: ids, node addresses, ids, ids, versions.
// FIELD(id, ids) is the row's position in the chunk and ELT picks its node and
// expected version, so per row it is exactly `SET status='ASSIGNED',
// node_address=?, version=version+1, assigned_time=NOW(3) WHERE id=? AND version=?
// AND status='PENDING'`. A short chunk repeats its last event (a row matches once).
// One prepared statement whatever the batch size. Measured on 2,500 events in
// batches of 500: single-row UPDATEs in one transaction ~10-20k/s, this ~45k/s.
// (The parameters are grouped, not interleaved as CASE id WHEN ? THEN ? would need,
// so they bind as plain pack expansions: cheap to compile.)
constexpr size_t kAssignChunk = 64;

const std::string& AssignChunkSql() {
  static const std::string sql = [] {
    const std::string marks = storage::Marks(kAssignChunk);
    return "UPDATE distribute_event\nSET status = 'ASSIGNED', node_address = ELT(FIELD(id, " + marks +
           "), " + marks +
           "),\n    version = version + 1, assigned_time = NOW(3)\nWHERE id IN (" + marks +
           ") AND status = 'PENDING'\n  AND version = CAST(ELT(FIELD(id, " + marks + "), " + marks +
           ") AS SIGNED)";
  }();
  return sql;
}

struct ChunkRow {
  int64_t id = 0;
  int64_t version = 0;
  std::string node;
};

template <size_t... I>
uint64_t ExecuteChunk(storage::Connection& c, const std::array<ChunkRow, kAssignChunk>& rows,
                      std::index_sequence<I...>) {
  return c.Execute(AssignChunkSql(), rows[I].id..., rows[I].node..., rows[I].id..., rows[I].id...,
                   rows[I].version...);
}

// Params: id. Read back in the assigning transaction, only for a chunk that matched
// fewer rows than it named, to tell which events were lost races.
constexpr const char* kReadAssigned = R"(
SELECT version, status, node_address FROM distribute_event WHERE id = ?)";

// Unroutable topics (V009), rewritten by the leader. Params: service, then the
// topics still unroutable (one `?` each; none: every row of the service goes).
std::string DeleteRoutableSql(size_t keep) {
  return "DELETE FROM distribute_unroutable_topic WHERE service_name = ?" +
         (keep == 0 ? std::string() : " AND topic NOT IN (" + storage::Marks(keep) + ")");
}

// Params: topic, service, reason, pending. since_time is kept while the topic stays
// unroutable (the row exists); updated_time marks the row current.
constexpr const char* kUpsertUnroutable = R"(
INSERT INTO distribute_unroutable_topic
  (topic, service_name, reason, pending_events, since_time, updated_time)
VALUES (?, ?, ?, ?, NOW(3), NOW(3))
ON DUPLICATE KEY UPDATE
  service_name = VALUES(service_name), reason = VALUES(reason),
  pending_events = VALUES(pending_events), updated_time = NOW(3))";

// PENDING events of the given topics (one `?` each), by topic: a range of idx_due
// over the PENDING rows, run only while some topic is unroutable, at most every
// kUnroutableRefresh.
std::string CountPendingSql(size_t topics) {
  return "SELECT topic, COUNT(*) FROM distribute_event WHERE status = 'PENDING' AND topic IN (" +
         storage::Marks(topics) + ") GROUP BY topic";
}

// How often unchanged unroutable rows are refreshed (and their events recounted).
// v_events_needing_attention trusts rows updated within the last 60 s.
constexpr Millis kUnroutableRefresh{5000};
// distribute_unroutable_topic.topic is VARCHAR(50) (as distribute_event.topic) and
// reason VARCHAR(1024).
constexpr size_t kMaxTopic = 50;
constexpr size_t kMaxReason = 1024;

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

Millis NextDispatchDelay(const CycleResult& r, Millis previous, const DispatcherSettings& s) {
  if (r.fenced_out) return s.poll_interval;
  // Only batch_size stopped it and nodes have room: go on at once. (Nodes full: new
  // slots free up over the next moments; coming back at once would re-read every
  // in-flight count to assign a handful.)
  if (r.assigned > 0 && r.more_due && r.room_left) return Millis(0);
  // Validate() keeps busy_interval <= poll_interval; min() for settings built in code.
  if (r.assigned > 0 || r.backlog) return std::min(s.busy_interval, s.poll_interval);
  if (r.free_slots > 0 && r.due_read == 0) {
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

std::map<std::string, int64_t> CountInFlight(storage::Connection& c, const std::vector<std::string>& addresses) {
  std::map<std::string, int64_t> out;
  if (addresses.empty()) return out;
  std::vector<storage::Value> values(addresses.begin(), addresses.end());
  auto rs = c.Query(CountInFlightSql(values.size()), storage::Values(values));
  while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
  return out;
}

std::vector<NodeLoad> DispatchCycle::ReadNodes() {
  std::vector<registry::NodeInfo> live = directory_.LiveNodes();
  std::vector<std::string> addresses;
  for (const auto& n : live) addresses.push_back(n.node_address);
  std::map<std::string, int64_t> in_flight = pool_.Run(
      "count in-flight events", [&](storage::Connection& c) { return CountInFlight(c, addresses); });
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

std::vector<PendingEvent> DispatchCycle::ReadDue(const PageFilter& f, const Cursor& after) {
  const std::string served = CommaList(f.served_topics);
  // Topics at their batch_limit and topics no free node can run are kept out alike.
  std::vector<std::string> excluded = f.exhausted_topics;
  excluded.insert(excluded.end(), f.blocked_topics.begin(), f.blocked_topics.end());
  const std::string exhausted = CommaList(excluded);
  const std::string unordered = CommaList(f.unordered_topics);
  return pool_.Run("read due events", [&](storage::Connection& c) {
    std::vector<PendingEvent> out;
    auto rs = c.Query(kSelectDueEvents, after.priority, after.priority, after.id, f.any_topic, served,
                      exhausted, unordered, f.limit);
    while (rs->next()) {
      PendingEvent e;
      e.id = rs->getInt64(1);
      e.version = rs->getInt64(2);
      e.topic = rs->getString(3);
      e.tenant_id = rs->getString(4);
      e.data_id = rs->getString(5);
      e.priority = rs->getInt(6);
      e.due_age = std::chrono::microseconds(std::max<int64_t>(0, rs->getInt64(7)));
      out.push_back(std::move(e));
    }
    return out;
  });
}

DispatchCycle::WriteResult DispatchCycle::Write(const std::vector<Assignment>& assignments,
                                                const std::optional<LeaseFence>& fence) {
  // Row locks in id order, so two writers (a lease handover) cannot deadlock.
  std::vector<size_t> order(assignments.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return assignments[a].event_id < assignments[b].event_id; });
  struct FencedOut {};  // thrown to roll the transaction back
  try {
    return pool_.Transact("assign events", [&](storage::Connection& c) {
      WriteResult r;  // fresh on every (retried) attempt
      r.won.assign(assignments.size(), false);
      for (size_t begin = 0; begin < order.size(); begin += kAssignChunk) {
        const size_t end = std::min(order.size(), begin + kAssignChunk);
        std::array<ChunkRow, kAssignChunk> rows;
        for (size_t k = 0; k < kAssignChunk; ++k) {
          const Assignment& a = assignments[order[std::min(begin + k, end - 1)]];
          rows[k] = {a.event_id, a.version, a.node_address};
        }
        const uint64_t matched = ExecuteChunk(c, rows, std::make_index_sequence<kAssignChunk>());
        if (matched == end - begin) {
          for (size_t k = begin; k < end; ++k) r.won[order[k]] = true;
          continue;
        }
        for (size_t k = begin; k < end; ++k) {
          const Assignment& a = assignments[order[k]];
          auto rs = c.Query(kReadAssigned, a.event_id);
          r.won[order[k]] = rs->next() && rs->getInt64(1) == a.version + 1 &&
                            rs->getString(2) == "ASSIGNED" && !rs->isNull(3) &&
                            rs->getString(3) == a.node_address;
        }
      }
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
  const std::map<std::string, std::string>& now = planner_.Unroutable();
  const bool changed = !recorded_unroutable_ || *recorded_unroutable_ != now;
  const bool refresh = !now.empty() && clock_.Now() - recorded_at_ >= kUnroutableRefresh;
  if (!changed && !refresh) return;
  struct FencedOut {};
  std::map<std::string, UnroutableTopic> recorded;
  try {
    recorded = pool_.Transact("record unroutable topics", [&](storage::Connection& c) {
      std::map<std::string, UnroutableTopic> out;
      std::vector<storage::Value> keep{options_.service};
      for (const auto& [topic, reason] : now) {
        // A longer name (only a node's hand-edited metadata could say so) names no event.
        if (topic.size() > kMaxTopic) continue;
        keep.emplace_back(topic);
        out[topic].reason = Truncated(reason, kMaxReason);
      }
      c.Execute(DeleteRoutableSql(keep.size() - 1), storage::Values(keep));
      if (!out.empty()) {
        std::vector<storage::Value> topics(keep.begin() + 1, keep.end());
        auto rs = c.Query(CountPendingSql(topics.size()), storage::Values(topics));
        while (rs->next()) out[rs->getString(1)].pending = rs->getInt64(2);
        for (const auto& [topic, u] : out) {
          c.Execute(kUpsertUnroutable, topic, options_.service, u.reason, u.pending);
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
      spdlog::warn("TOPIC_UNROUTABLE topic={} pending={} reason=\"{}\"", topic, u.pending, u.reason);
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
      "fenced_out={} more_due={} ms={}",
      r.live_nodes, r.free_slots, r.pages, r.due_read, r.assigned, r.lost_races, r.skipped,
      r.fenced_out, r.more_due, r.duration.count());
  return r;
}

CycleResult DispatchCycle::RunPages(const std::optional<LeaseFence>& fence,
                                    const std::function<bool()>& leading) {
  CycleResult r;
  std::vector<NodeLoad> nodes = ReadNodes();
  r.live_nodes = static_cast<int>(nodes.size());
  const bool any_taker = std::any_of(nodes.begin(), nodes.end(), [](const NodeLoad& n) { return !n.draining; });
  planner_.BeginCycle(std::move(nodes));
  r.free_slots = planner_.free_slots();
  r.unroutable_topics = static_cast<int>(planner_.Unroutable().size());
  RecordUnroutable(fence);
  bool no_room = false;  // an event read found no eligible node with room left

  Cursor cursor{std::numeric_limits<int32_t>::min(), 0};
  for (int page = 0; page < options_.max_pages; ++page) {
    PageFilter filter = planner_.NextPageFilter();
    // The budget ran out; more_due tells whether the last page was full.
    if (filter.limit <= 0) break;
    if (!filter.any_topic && filter.served_topics.empty()) break;
    std::vector<PendingEvent> events = ReadDue(filter, cursor);
    const Clock::TimePoint read_at = clock_.Now();
    ++r.pages;
    r.due_read += static_cast<int>(events.size());
    if (events.empty()) break;
    cursor = {events.back().priority, events.back().id};
    const bool page_full = static_cast<int>(events.size()) >= filter.limit;

    PlanResult plan = planner_.Plan(events);
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
      for (const PendingEvent& e : events) due_age.emplace(e.id, e.due_age);
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
    if (!page_full) break;  // every due event the filter allows was read
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
