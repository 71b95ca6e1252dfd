#include "dispatcher/event_sweeper.h"

#include "events/reset.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "registry/node_directory.h"
#include "registry/node_metadata.h"

namespace dsync::dispatcher {

const char* ResetReasonName(ResetReason r) {
  switch (r) {
    case ResetReason::kTimedOut: return "timed_out";
    case ResetReason::kNotClaimed: return "not_claimed";
    case ResetReason::kNodeOffline: break;
  }
  return "node_offline";
}

Millis SweeperIdleBound(Millis max_processing_time) {
  return max_processing_time + std::max<Millis>(Millis(2000), max_processing_time / 10);
}

EventSweeper::EventSweeper(storage::ConnectionPool& pool, SweeperOptions options)
    : pool_(pool),
      options_(std::move(options)),
      offline_(pool, options_.service, options_.offline_timeout, options_.purge_after) {
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
  std::map<Millis, std::string> by_claim_timeout;
  by_claim_timeout[options_.default_claim_timeout];
  for (const auto& [topic, timeout] : options_.topic_claim_timeouts) {
    std::string& list = by_claim_timeout[timeout];
    if (!list.empty()) list += ',';
    list += topic;
  }
  for (const auto& [timeout, topics] : by_claim_timeout) {
    claim_groups_.push_back({timeout, topics, timeout == options_.default_claim_timeout});
  }
}

namespace {

std::vector<ResetCandidate> Candidates(std::vector<events::InFlightEvent> rows, ResetReason reason,
                                       Millis timeout) {
  std::vector<ResetCandidate> out;
  out.reserve(rows.size());
  for (auto& row : rows) {
    ResetCandidate c;
    static_cast<events::InFlightEvent&>(c) = std::move(row);
    c.reason = reason;
    c.timeout = timeout;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::vector<ResetCandidate> EventSweeper::FindOrphaned(int limit) {
  return pool_.Run("find orphaned events", [&](storage::Connection& c) {
    return Candidates(events::ReadOrphaned(c, options_.service, options_.offline_timeout, limit), ResetReason::kNodeOffline,
                      Millis(0));
  });
}

std::vector<ResetCandidate> EventSweeper::FindTimedOut(int limit) {
  std::vector<ResetCandidate> out;
  for (const TimeoutGroup& g : groups_) {
    const Millis bound = SweeperIdleBound(g.timeout);
    auto part = pool_.Run("find timed-out events", [&](storage::Connection& c) {
      return Candidates(events::ReadTimedOut(c, options_.service, bound, g.topics, g.unconfigured, configured_topics_, limit),
                        ResetReason::kTimedOut, bound);
    });
    for (ResetCandidate& c : part) c.grace = bound - g.timeout;
    out.insert(out.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return out;
}

std::vector<ResetCandidate> EventSweeper::FindNotClaimed(int limit) {
  std::vector<ResetCandidate> out;
  std::set<int64_t> seen;  // one row per registry row of the address: keep the first
  for (const TimeoutGroup& g : claim_groups_) {
    auto rows = pool_.Run("find events not claimed", [&](storage::Connection& c) {
      return events::ReadNotClaimed(c, options_.service, options_.offline_timeout, g.timeout, g.topics, g.unconfigured,
                                    configured_topics_, limit);
    });
    for (auto& row : rows) {
      if (!seen.insert(row.id).second) continue;
      // The directory's rule for unreadable metadata: capacity 1, every topic.
      const registry::NodeMetadata m = registry::ParseNodeMetadata(row.node_metadata).metadata;
      const bool serves = m.ServesTopic(row.topic);
      const bool room = m.processing_count < m.capacity;
      if (serves && !room) continue;  // full: a prefetched event waits for a free worker
      ResetCandidate c;
      c.detail = !serves ? "it does not serve topic " + row.topic
                         : "it reported room (" + std::to_string(m.processing_count) + " of " +
                               std::to_string(m.capacity) + " busy)";
      static_cast<events::InFlightEvent&>(c) = std::move(row);
      c.reason = ResetReason::kNotClaimed;
      c.timeout = g.timeout;
      out.push_back(std::move(c));
    }
  }
  return out;
}

bool EventSweeper::Reset(const ResetCandidate& c) {
  const std::string node = c.node_address.empty() ? "(none)" : c.node_address;
  std::string error;
  switch (c.reason) {
    case ResetReason::kTimedOut:
      error = "reset (not charged): no activity for " + std::to_string(c.idle.count()) + " ms on node " + node +
              " (max_processing_time_ms " + std::to_string((c.timeout - c.grace).count()) + " + grace " +
              std::to_string(c.grace.count()) + " ms)";
      break;
    case ResetReason::kNotClaimed:
      error = "reset: not claimed by node " + node + " for " + std::to_string(c.idle.count()) +
              " ms (claim_timeout_ms " + std::to_string(c.timeout.count()) + "; " + c.detail + ")";
      break;
    case ResetReason::kNodeOffline: error = "reset (not charged): node " + node + " offline"; break;
  }
  // A row lock on the event means a session of its owner is open mid-transaction (a
  // node paused by SIGSTOP or a frozen VM, a partition that kept its TCP session).
  // Waiting for it would pin the whole sweep, every node and event, for as long as
  // that lasts (innodb_lock_wait_timeout, again each sweep): skip it this time
  // (found by tests/chaos).
  bool locked = false;
  bool applied = pool_.Transact("reset event", [&](storage::Connection& conn) {
    locked = !events::LockEventIfFree(conn, c.id);
    if (locked) return false;
    events::HeldEvent held{c.id, c.version, c.status, c.code};
    // Not claimed: the re-check of the idle time is on modifier_time, which the
    // assignment set and nothing but a claim (a version change) touches since.
    const bool idle_check = c.reason == ResetReason::kTimedOut || c.reason == ResetReason::kNotClaimed;
    if (!events::ResetEvent(conn, held, error, idle_check ? std::optional<Millis>(c.timeout) : std::nullopt)) {
      return false;
    }
    if (c.reason == ResetReason::kNotClaimed) registry::NoteNotClaimed(conn, c.node_address);
    return true;
  });
  {
    std::lock_guard lock(mu_);
    if (!applied) ++stats_.reset_races;
    else if (c.reason == ResetReason::kTimedOut) ++stats_.resets_timed_out;
    else if (c.reason == ResetReason::kNotClaimed) ++stats_.resets_not_claimed;
    else ++stats_.resets_node_offline;
  }
  const std::string& trace = c.trace_id.empty() ? c.code : c.trace_id;
  if (applied) {
    spdlog::warn("EVENT_RESET event={} node={} reason={} trace={} from={} version={} idle_ms={}",
                 c.code, node, ResetReasonName(c.reason), trace, events::ToText(c.status), c.version,
                 c.idle.count());
  } else {
    spdlog::info("EVENT_RESET_SKIPPED event={} node={} reason={} trace={} from={} version={} "
                 "why={}",
                 c.code, node, ResetReasonName(c.reason), trace, events::ToText(c.status), c.version,
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
    for (int kind = 0; kind < 3; ++kind) {
      for (int round = 0; round < options_.max_rounds; ++round) {
        std::vector<ResetCandidate> found =
            kind == 0 ? FindOrphaned(batch) : kind == 1 ? FindTimedOut(batch) : FindNotClaimed(batch);
        uint64_t applied = 0;
        for (const ResetCandidate& c : found) {
          if (Reset(c)) {
            ++applied;
            if (c.reason == ResetReason::kTimedOut) ++report.reset_timed_out;
            else if (c.reason == ResetReason::kNotClaimed) ++report.reset_not_claimed;
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
