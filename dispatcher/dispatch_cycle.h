// One dispatch cycle of the leader: read the live nodes and their in-flight counts,
// read due PENDING events page by page, plan them (dispatcher/assignment_planner.h),
// and write each assignment as the lifecycle's fenced transition
// (docs/event-lifecycle.md, item 2; the statements are events/assign.h's):
//
// A page's writes are one transaction: the assign UPDATE for 64 events per statement (one
// cached prepared statement; each row's node and expected version picked by
// ELT(FIELD(id, ...)); ids ascending), then HoldsLease() (lease_lock.h: a dispatcher
// whose lease ended, or ends within the fence's margin, rolls back and writes
// nothing), then one COMMIT: 500 assignments are 10 round trips. When a statement matches fewer rows than it
// names, its events are read back to tell which lost the race (the event changed
// since it was read): those are counted and skipped.
//
// Reads, each one statement served by an index that never visits terminal rows:
//   - live nodes: registry::NodeDirectory (status 1/2, fresh heartbeat, this service);
//   - in-flight per node: ASSIGNED/RUNNING/COMPENSATING rows joined to the service's
//     registry rows, grouped by node (a range over the in-flight statuses);
//   - due events: idx_due (status, priority, id, next_run_time), in (priority, id)
//     order from a keyset cursor, LIMIT = what the planner can still place, and
//     restricted in SQL to topics some node with a free slot serves, to topics below
//     their batch_limit and not paused (dsync_topic_pause, reread at most every
//     control::kPauseRefresh, 200 ms), to topics none of whose datasources is at its
//     concurrency limit, and (ordered topics) to events with no earlier non-terminal
//     event of the same (tenant_id, data_id) (idx_entity_status). So events that must
//     wait never fill a page and block the ones behind them.
//   - fair dispatch (issue 37, the default; docs/fairness-and-limits.md): the
//     (priority, tenant) pairs with PENDING events (events::ReadDueHeads, a loose index
//     scan of V029's idx_fair, every 2 s; in between only the pairs of rows inserted
//     since, a primary-key range). While each priority has one tenant at most, the
//     cycle reads the page above (the fair order is its order), the new pairs riding
//     along in its first page's statement (events::ReadDueWithNewHeads: no round trip
//     of their own). With two tenants or more in a priority (CycleResult::shared),
//     instead of that page: per page one UNION ALL of per-pair windows
//     (events::ReadDueWindows, the same filters) that the planner shares by deficit
//     round robin, the new pairs read before (events::ReadNewDueHeads). idx_fair leads
//     with V029's fair_pending (1 exactly while PENDING), so its entry moves only when an
//     event becomes PENDING or stops being so; where a status changed by hand left the
//     column wrong, the leader sets it right every kFairRepairInterval (60 s);
//   - concurrency limits (only when configured; without any, no read and no
//     bookkeeping): in-flight events per topic, and per key value of keyed topics, of
//     the service on any node (a range of idx_due over the in-flight statuses), and
//     the payload keys of a page's keyed events.
//
// Unroutable topics (AssignmentPlanner::Unroutable: no live node serves the topic or
// could build its plan, or neither routing tier finds takers: no node reaches every
// datasource of its plan, and some step has no node reaching all it needs; kind
// 'unroutable')
// and unknown topics (PENDING events of a topic that neither the config defines nor
// any live node serves, AssignmentPlanner::Known; kind 'unknown_topic', found by
// one GROUP BY over the service's PENDING rows of idx_due every 10 s) are recorded in
// distribute_unroutable_topic (V009, V017) with the reason and their PENDING events
// counted, in one transaction fenced like the assignments: when the set or a reason
// changes, and every 5 s while it is not empty (the rows' updated_time tells the
// inspection view v_events_needing_attention they are current). While every topic is
// routable and known, nothing is written, and the only read is that GROUP BY.
// The config's unordered topics go to distribute_unordered_topic (V017) once per
// tenure of the lease (and when unfenced, once), so that the view knows which events
// the ordering rule holds.
//
// Thread safety: RunOnce from one thread at a time; stats() from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include "config/settings.h"
#include "control/topic_pause.h"
#include "core/clock.h"
#include "core/metrics.h"
#include "core/service.h"
#include "dispatcher/assignment_planner.h"
#include "dispatcher/lease_lock.h"
#include "registry/node_directory.h"
#include "storage/connection_pool.h"

namespace dsync::dispatcher {

struct CycleOptions {
  std::string service = kDefaultService;
  Millis offline_timeout{30000};  // registry.offline_timeout_ms: liveness of nodes
  int max_pages = 8;              // pages read per cycle at most
};

// A topic no live node can run, as the last cycle saw it.
struct UnroutableTopic {
  std::string kind = "unroutable";  // or "unknown_topic"
  std::string reason;
  int64_t pending = 0;  // its PENDING events, counted at the last record
};

struct CycleResult {
  int live_nodes = 0;
  int free_slots = 0;        // over non-draining nodes at cycle start (batch_size aside)
  int pages = 0;
  int due_read = 0;          // events read
  int assigned = 0;          // assignments written (UPDATE matched)
  int lost_races = 0;        // assignments whose UPDATE matched nothing
  int skipped = 0;           // read but not planned (ordering, limits, no node)
  int unroutable_topics = 0; // topics no live node can run (AssignmentPlanner::Unroutable)
  // Fair dispatch (issue 37) shared this cycle's slots between tenants by deficit round
  // robin: some priority had two tenants or more with PENDING events (else the cycle
  // read as an unfair one: with one tenant per priority the orders are the same).
  bool shared = false;
  bool fenced_out = false;   // the lease was not ours at write time: nothing written
  bool more_due = false;     // stopped while more events may be due (page or budget full)
  bool room_left = false;    // nodes still had free slots at the end (batch_size cut it short)
  // Due events were left waiting for a free slot: a page came back full, an event
  // found no node with room, or (nothing read because every node was full) the last
  // cycle that did read left some waiting. Work exists; slots free within moments.
  bool backlog = false;
  Millis duration{0};
};

// The cycle's counters since construction.
struct CycleStats {
  uint64_t cycles = 0;
  uint64_t failures = 0;     // cycles that threw (database errors)
  uint64_t assigned = 0;
  uint64_t lost_races = 0;
  uint64_t fenced_out = 0;
  Millis last_duration{0};
  Millis max_duration{0};
  metrics::HistogramSnapshot dispatch_latency;  // event due -> assignment committed, seconds
  metrics::HistogramSnapshot cycle_duration;    // successful cycles, seconds
  // Topics no live node could run at the last record, with their pending events
  // (dsync_events_unroutable). Empty when every topic is routable.
  std::map<std::string, UnroutableTopic> unroutable;
};

// When to run the next cycle after `r`:
//   - at once when it assigned events and stopped with more possibly due;
//   - busy_interval when work exists: it assigned something, or due events were left
//     waiting because the nodes were full (r.backlog). Under load nodes free slots
//     within milliseconds; a whole poll_interval would leave them idle;
//   - while nothing at all is due: busy_interval for the first kBusyEmptyCycles
//     cycles after one that assigned events (`busy`: a producer that writes batches
//     every few milliseconds has more any moment, and plain SQL cannot wake the
//     dispatcher), else doubling from poll_interval up to idle_interval;
//   - poll_interval otherwise (fenced out, no live node, events held back by ordering
//     or batch limits).
// `previous` is the delay chosen after the previous cycle.
Millis NextDispatchDelay(const CycleResult& r, Millis previous, const DispatcherSettings& s, bool busy = false);
// Cycles that find nothing due, after one that assigned events, still paced at
// busy_interval (NextDispatchDelay's `busy`): 20 ms at the default 2 ms. A lone
// event costs at most this many extra cycles (3 index-only SELECTs each).
inline constexpr int kBusyEmptyCycles = 10;
// How often a fair leader sets V029's fair_pending right where a status changed by hand
// (without the column) left it wrong (events::RepairFairPending: two reads of the
// PENDING backlog, row by row: ~0.3 s per 100k PENDING events here), the first time at
// its first cycle.
inline constexpr Millis kFairRepairInterval{60000};

class DispatchCycle {
 public:
  // `pool` and `clock` must outlive the cycle.
  DispatchCycle(storage::ConnectionPool& pool, Clock& clock, PlannerConfig planner,
                CycleOptions options);

  // One cycle. Writes are fenced by `fence` (nullopt: unfenced, for tests and
  // tools). `leading` is asked before each page's writes; false ends the cycle.
  // Throws DbError (then nothing of the failing page was committed, or, for
  // kCommitUnknown, maybe all of it).
  CycleResult RunOnce(const std::optional<LeaseFence>& fence,
                      const std::function<bool()>& leading = {});

  // The pieces, public for tests and `dsync nodes`-like tools.
  // Live nodes of the service with their in-flight counts. Throws DbError.
  std::vector<NodeLoad> ReadNodes();
  struct WriteResult {
    bool fenced_out = false;
    std::vector<bool> won;  // per assignment, in the order given
  };
  // One transaction (see the file comment). Throws DbError.
  WriteResult Write(const std::vector<Assignment>& assignments,
                    const std::optional<LeaseFence>& fence);

  CycleStats stats();

  // Wake-ups (issue 19): called after each page's assignments committed, with the
  // addresses of the nodes that got events (each once). Set before the first cycle.
  void OnAssigned(std::function<void(const std::vector<std::string>& nodes)> hook) {
    on_assigned_ = std::move(hook);
  }

 private:
  struct Cursor {
    int64_t priority;
    int64_t id;
  };
  events::DueFilter DueFilterOf(const PageFilter& filter, const Cursor& after) const;
  std::vector<events::DueEvent> ReadDue(const PageFilter& filter, const Cursor& after);
  // issue 37: a fair page's windows; the limited slots held now (empty without limits);
  // each event's concurrency key value (one read of payload keys per key, if any).
  std::vector<events::DueEvent> ReadWindows(const PageFilter& filter, const std::vector<TenantWindow>& windows);
  // The cycle's (priority, tenant) pairs (see RunPages); true when some priority has
  // two tenants or more (the cycle shares: BeginFairCycle done, windows follow).
  bool ReadHeads();
  void MergeHeads(std::vector<events::DueHead> found);
  static bool SharedHeads(const std::vector<events::DueHead>& heads);
  // ReadDue's page, with the pairs of rows inserted since heads_after_id_ merged into heads_.
  std::vector<events::DueEvent> ReadDueWithNewHeads(const PageFilter& filter, const Cursor& after);
  // V029's fair_pending set right where a hand-written status change left it wrong
  // (events::RepairFairPending), at most every kFairRepairInterval; failures are logged.
  void RepairFairPending();
  LimitUsage ReadLimitUsage();
  void FillLimitKeys(std::vector<events::DueEvent>& events);
  // Records planner_.Unroutable() and the unknown topics (see the file comment).
  // Failures are logged, never thrown: the record is for the operator.
  void RecordUnroutable(const std::optional<LeaseFence>& fence);
  // Records the config's unordered topics once per lease tenure (see the file comment).
  void RecordUnordered(const std::optional<LeaseFence>& fence);
  CycleResult RunPages(const std::optional<LeaseFence>& fence, const std::function<bool()>& leading);

  storage::ConnectionPool& pool_;
  Clock& clock_;
  const CycleOptions options_;
  registry::NodeDirectory directory_;
  AssignmentPlanner planner_;
  bool backlog_ = false;  // CycleResult::backlog of the last cycle; RunOnce's thread only
  std::function<void(const std::vector<std::string>&)> on_assigned_;
  // What RecordUnroutable last wrote (topic -> kind + '\n' + reason), and when; the
  // unknown topics the last count found (RunOnce's thread only).
  std::optional<std::map<std::string, std::string>> recorded_unroutable_;
  Clock::TimePoint recorded_at_{};
  std::map<std::string, std::string> unknown_;
  std::optional<Clock::TimePoint> counted_at_;  // the last look for unknown topics
  // Fair cycles (issue 37): the (priority, tenant) pairs last read, and when.
  std::vector<events::DueHead> heads_;
  std::optional<Clock::TimePoint> heads_at_;
  int64_t heads_after_id_ = 0;  // the newest event id the pairs were read up to
  std::optional<Clock::TimePoint> repaired_at_;  // the last RepairFairPending
  // The lease token RecordUnordered last wrote under (-1: unfenced; nullopt: never).
  std::optional<int64_t> unordered_token_;
  // Paused topics (V022, control/topic_pause.h), reread at most every kPauseRefresh
  // and kept out of the pages like topics at their batch_limit (RunOnce's thread only).
  control::PausedTopicReader paused_reader_{options_.service};
  std::vector<std::string> paused_;

  std::mutex mu_;
  CycleStats stats_;
  metrics::Histogram dispatch_latency_;
  metrics::Histogram cycle_duration_;
};

}  // namespace dsync::dispatcher
