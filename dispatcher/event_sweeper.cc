#include "dispatcher/event_sweeper.h"

#include "dispatcher/event_reset.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace dsync::dispatcher {
namespace {

// Params: offline timeout in microseconds, limit.
// The in-flight statuses are a range of idx_due (status, ...): terminal rows are never
// visited, and in-flight rows are bounded by the nodes' capacity + prefetch; then a
// sort of the few candidates. Forced: with ORDER BY id LIMIT, MariaDB otherwise walks
// the primary key, reading every terminal row (1.19 s per sweep with 1M of them,
// bench/dispatch_bench.cc); the liveness probe uses idx_node_liveness (node_address,
// status, last_heartbeat_time) of the registry. Liveness in any service: an event is
// never taken from a node alive under another service name.
constexpr const char* kSelectOrphaned = R"(
SELECT e.id, e.version, e.status, e.node_address, e.code, e.trace_id, e.topic,
       TIMESTAMPDIFF(MICROSECOND, e.modifier_time, NOW(3))
FROM distribute_event e FORCE INDEX (idx_due)
WHERE e.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING')
  AND NOT EXISTS (
    SELECT 1 FROM distribute_node_registry r
    WHERE r.node_address = e.node_address AND r.status IN (1, 2)
      AND r.last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND)
ORDER BY e.id
LIMIT ?)";

// Params: timeout in microseconds, topics with that timeout (comma list),
// include unconfigured topics (bool), every configured topic (comma list), limit.
// The running range of idx_due, as above (V007 dropped idx_status_modifier_time:
// rewritten on every write of an event, it cost more than these reads of the
// in-flight rows do).
constexpr const char* kSelectTimedOut = R"(
SELECT id, version, status, node_address, code, trace_id, topic,
       TIMESTAMPDIFF(MICROSECOND, modifier_time, NOW(3))
FROM distribute_event FORCE INDEX (idx_due)
WHERE status IN ('RUNNING', 'COMPENSATING')
  AND modifier_time < NOW(3) - INTERVAL ? MICROSECOND
  AND (FIND_IN_SET(topic, ?) > 0 OR (? AND FIND_IN_SET(topic, ?) = 0))
ORDER BY modifier_time
LIMIT ?)";

// Params: id. Takes the event's row lock, or returns no row at once when another
// session holds it (MariaDB >= 10.6, MySQL >= 8.0).
constexpr const char* kLockEventIfFree = "SELECT id FROM distribute_event WHERE id = ? FOR UPDATE SKIP LOCKED";

int64_t Micros(Millis d) { return static_cast<int64_t>(d.count()) * 1000; }

}  // namespace

const char* ResetReasonName(ResetReason r) {
  return r == ResetReason::kTimedOut ? "timed_out" : "node_offline";
}

SweeperOptions SweeperOptionsFromSettings(const Settings& settings) {
  SweeperOptions o;
  o.offline_timeout = settings.registry.offline_timeout;
  o.purge_after = settings.registry.purge_after;
  for (const auto& [name, topic] : settings.topics) o.topic_timeouts[name] = topic.max_processing_time;
  o.default_timeout = TopicSettings{}.max_processing_time;
  return o;
}

EventSweeper::EventSweeper(storage::ConnectionPool& pool, SweeperOptions options)
    : pool_(pool),
      options_(std::move(options)),
      offline_(pool, options_.offline_timeout, options_.purge_after) {
  std::map<Millis, std::string> by_timeout;
  by_timeout[options_.default_timeout];  // unconfigured topics, even with no topic of its own
  for (const auto& [topic, timeout] : options_.topic_timeouts) {
    std::string& list = by_timeout[timeout];
    if (!list.empty()) list += ',';
    list += topic;
    if (!configured_topics_.empty()) configured_topics_ += ',';
    configured_topics_ += topic;
  }
  for (const auto& [timeout, topics] : by_timeout) {
    groups_.push_back({timeout, topics, timeout == options_.default_timeout});
  }
}

namespace {

template <class Rs>
std::vector<ResetCandidate> Candidates(Rs& rs, ResetReason reason, Millis timeout) {
  std::vector<ResetCandidate> out;
  while (rs->next()) {
    ResetCandidate c;
    c.id = rs->getInt64(1);
    c.version = rs->getInt64(2);
    c.status = rs->getString(3);
    if (!rs->isNull(4)) c.node_address = rs->getString(4);
    c.code = rs->getString(5);
    if (!rs->isNull(6)) c.trace_id = rs->getString(6);
    c.topic = rs->getString(7);
    c.idle = Millis(rs->isNull(8) ? 0 : rs->getInt64(8) / 1000);
    c.reason = reason;
    c.timeout = timeout;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::vector<ResetCandidate> EventSweeper::FindOrphaned(int limit) {
  return pool_.Run("find orphaned events", [&](storage::Connection& c) {
    auto rs = c.Query(kSelectOrphaned, Micros(options_.offline_timeout), limit);
    return Candidates(rs, ResetReason::kNodeOffline, Millis(0));
  });
}

std::vector<ResetCandidate> EventSweeper::FindTimedOut(int limit) {
  std::vector<ResetCandidate> out;
  for (const TimeoutGroup& g : groups_) {
    auto part = pool_.Run("find timed-out events", [&](storage::Connection& c) {
      auto rs = c.Query(kSelectTimedOut, Micros(g.timeout), g.topics, g.unconfigured,
                        configured_topics_, limit);
      return Candidates(rs, ResetReason::kTimedOut, g.timeout);
    });
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}

bool EventSweeper::Reset(const ResetCandidate& c) {
  const std::string node = c.node_address.empty() ? "(none)" : c.node_address;
  const std::string error =
      c.reason == ResetReason::kTimedOut
          ? "reset: no activity for " + std::to_string(c.idle.count()) + " ms on node " + node +
                " (max_processing_time_ms " + std::to_string(c.timeout.count()) + ")"
          : "reset: node " + node + " offline";
  // A row lock on the event means a session of its owner is open mid-transaction (a
  // node paused by SIGSTOP or a frozen VM, a partition that kept its TCP session).
  // Waiting for it would pin the whole sweep, every node and event, for as long as
  // that lasts (innodb_lock_wait_timeout, again each sweep): skip it this time
  // (found by tests/chaos).
  bool locked = false;
  bool applied = pool_.Transact("reset event", [&](storage::Connection& conn) {
    locked = !conn.QueryInt(kLockEventIfFree, c.id).has_value();
    if (locked) return false;
    HeldEvent held{c.id, c.version, c.status, c.code};
    return ResetEvent(conn, held, error,
                      c.reason == ResetReason::kTimedOut ? std::optional<Millis>(c.timeout) : std::nullopt);
  });
  {
    std::lock_guard lock(mu_);
    if (!applied) ++stats_.reset_races;
    else if (c.reason == ResetReason::kTimedOut) ++stats_.resets_timed_out;
    else ++stats_.resets_node_offline;
  }
  const std::string& trace = c.trace_id.empty() ? c.code : c.trace_id;
  if (applied) {
    spdlog::warn("EVENT_RESET event={} node={} reason={} trace={} from={} version={} idle_ms={}",
                 c.code, node, ResetReasonName(c.reason), trace, c.status, c.version,
                 c.idle.count());
  } else {
    spdlog::info("EVENT_RESET_SKIPPED event={} node={} reason={} trace={} from={} version={} "
                 "why={}",
                 c.code, node, ResetReasonName(c.reason), trace, c.status, c.version,
                 locked ? "row_locked_by_owner" : "changed_since_read");
  }
  return applied;
}

SweepReport EventSweeper::SweepOnce() {
  SweepReport report;
  try {
    registry::SweepResult registry = offline_.Sweep();
    report.marked_offline = registry.marked_offline;
    report.purged = registry.purged;
    const int batch = std::max(1, options_.batch);
    for (int kind = 0; kind < 2; ++kind) {
      for (int round = 0; round < options_.max_rounds; ++round) {
        std::vector<ResetCandidate> found = kind == 0 ? FindOrphaned(batch) : FindTimedOut(batch);
        uint64_t applied = 0;
        for (const ResetCandidate& c : found) {
          if (Reset(c)) {
            ++applied;
            if (c.reason == ResetReason::kTimedOut) ++report.reset_timed_out;
            else ++report.reset_node_offline;
          } else {
            ++report.reset_races;
          }
        }
        // Another round only while full batches keep yielding resets.
        if (static_cast<int>(found.size()) < batch || applied == 0) break;
      }
    }
  } catch (...) {
    std::lock_guard lock(mu_);
    ++stats_.sweeps;
    ++stats_.failures;
    stats_.marked_offline += report.marked_offline;
    stats_.purged += report.purged;
    throw;
  }
  std::lock_guard lock(mu_);
  ++stats_.sweeps;
  stats_.marked_offline += report.marked_offline;
  stats_.purged += report.purged;
  return report;
}

SweeperStats EventSweeper::stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace dsync::dispatcher
