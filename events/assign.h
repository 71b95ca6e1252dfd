// Assign (docs/event-lifecycle.md item 2), the dispatcher leader's transition, and the
// reads that plan it: in-flight counts per node and the due PENDING events.
//
//   UPDATE distribute_event
//   SET node_address=?, process_log=<append {node, PENDING -> ASSIGNED}>,
//       status='ASSIGNED', fair_pending=0, version=version+1, assigned_time=NOW(3)
//   WHERE id=? AND version=? AND status='PENDING'
//
// (fair_pending, V029: 1 exactly while PENDING, written by every statement that moves
// an event to or from PENDING; it leads idx_fair, the fair reads' index.)
//
// written for 64 events per statement (AssignEvents). Reads, each one statement served
// by an index that never visits terminal rows (see each function).
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "storage/connection.h"

namespace dsync::events {

// In-flight events (ASSIGNED, RUNNING, COMPENSATING) per node, for the given node
// addresses; an address holding none is absent from the map. Reads only in-flight rows
// (a covering range of idx_node_address), however many finished events the table holds.
// Throws DbError (run it inside ConnectionPool::Run).
// Only events of `service` (a node address may serve two services).
std::map<std::string, int64_t> CountInFlight(storage::Connection& c, const std::string& service,
                                             const std::vector<std::string>& addresses);

// PENDING events of the given topics, by topic (a topic with none is absent): a range
// of idx_due over the PENDING rows. The dispatcher runs it only while some topic is
// unroutable, at most every 5 s. Throws DbError.
std::map<std::string, int64_t> CountPendingByTopic(storage::Connection& c, const std::string& service,
                                                   const std::vector<storage::Value>& topics);

// PENDING events of the service by topic, every topic (a covering range of idx_due over
// the PENDING rows: its cost grows with the backlog, never with finished events). The
// dispatcher leader runs it every 10 s to find topics nobody knows (unknown_topic).
// Throws DbError.
std::map<std::string, int64_t> CountPendingTopics(storage::Connection& c, const std::string& service);

// A due PENDING event as the dispatcher reads it.
struct DueEvent {
  int64_t id = 0;
  int64_t version = 0;
  std::string topic;
  std::string tenant_id;
  std::string data_id;
  int priority = 0;
  // How long it had been due when read (NOW(3) - max(next_run_time, modifier_time)).
  std::chrono::microseconds due_age{0};
  // What its next step needs (V018 `route`: sorted, comma-separated datasources, set
  // by a hand-on); "" for NULL: a fresh event, its first step's datasources apply.
  std::string route;
  // issue 37: the value of its topic's concurrency_key (set by the dispatch cycle);
  // nullopt: the topic has none, or the event's value is missing.
  std::optional<std::string> limit_key{};
};

// What a page of due events may hold (the planner's PageFilter, as statement params).
struct DueFilter {
  std::string service;         // only this service's events
  int64_t after_priority = 0;  // keyset cursor: events after (priority, id)
  int64_t after_id = 0;
  bool any_topic = false;      // else only `served` topics
  std::string served;          // comma lists of topics
  std::string exhausted;       // topics at their batch_limit: none of theirs
  std::string unordered;       // topics without the ordering rule
  int limit = 0;
};

// Due PENDING events of the filter's service in (priority, id) order after the cursor,
// restricted in SQL to the filter's topics and (ordered topics) to events with no
// earlier non-terminal event of the same (tenant_id, data_id) in that service. Throws DbError.
std::vector<DueEvent> ReadDue(storage::Connection& c, const DueFilter& filter);

// ---- issue 37: fair windows and concurrency limits (docs/fairness-and-limits.md) ----

// A (priority, tenant_id) that has PENDING events of the service.
struct DueHead {
  int priority = 0;
  std::string tenant_id;
  bool operator<(const DueHead& o) const {
    return priority != o.priority ? priority < o.priority : tenant_id < o.tenant_id;
  }
  bool operator==(const DueHead& o) const { return priority == o.priority && tenant_id == o.tenant_id; }
};

// Every (priority, tenant_id) with PENDING events of `service`, sorted, at most `max`:
// a loose index scan of idx_fair (V029: fair_pending, priority, tenant_id, service, id, ...),
// one index dive per (priority, tenant_id) the table holds, whatever the number of
// events. The optimizer picks it by cost: with index statistics that badly overstate
// the pairs (a fresh bulk load before InnoDB's automatic recalculation, which follows a
// change of a tenth of the table) it may scan idx_fair instead, correct but slower
// until the statistics catch up. Throws DbError.
std::vector<DueHead> ReadDueHeads(storage::Connection& c, const std::string& service, int max);

// The pairs of PENDING events of `service` with ids above `after_id` (the rows inserted
// since: a range of the primary key), and `after_id` moved to the newest id seen. Finds a
// tenant that just produced without the whole GROUP BY. Throws DbError.
std::vector<DueHead> ReadNewDueHeads(storage::Connection& c, const std::string& service, int64_t& after_id);
// The table's highest event id (0 when empty): where ReadNewDueHeads starts.
int64_t MaxEventId(storage::Connection& c);

// ReadDue's page and ReadNewDueHeads's pairs in one statement (one round trip; a
// UNION ALL of the two): the dispatch cycle's first page while at most one tenant per
// priority has PENDING events (then ReadDue's order is the fair order), so a second
// tenant appearing is seen at the next cycle without a read of its own. `heads` gets
// the pairs, `after_id` moves as ReadNewDueHeads's. Throws DbError.
std::vector<DueEvent> ReadDueWithNewHeads(storage::Connection& c, const DueFilter& filter, int64_t& after_id,
                                          std::vector<DueHead>& heads);

// What a fair page reads of one pair: its due events after `after_id`, at most `limit`.
struct DueWindow {
  int priority = 0;
  std::string tenant_id;
  int64_t after_id = 0;
  int limit = 0;
};

// ReadDue's rows (same filters: topics, ordering rule; `filter`'s cursor and limit are
// unused) for each window, in one UNION ALL statement of ref ranges on idx_fair: at
// most the windows' limits in rows. Windows of one priority and at most 32. Throws DbError.
std::vector<DueEvent> ReadDueWindows(storage::Connection& c, const DueFilter& filter,
                                     const std::vector<DueWindow>& windows);

// In-flight events (ASSIGNED, RUNNING, COMPENSATING) of the service per topic, on any
// node, live or not: a range of idx_due over the in-flight statuses. Throws DbError.
std::map<std::string, int64_t> CountInFlightByTopic(storage::Connection& c, const std::string& service);

// In-flight events of the topic per value of `key` ("tenant_id", "data_id" or
// "payload.a.b"); events whose value is missing are not counted. Throws DbError.
std::map<std::string, int64_t> CountInFlightByKey(storage::Connection& c, const std::string& service,
                                                  const std::string& topic, const std::string& key);

// The value of `key` ("payload.a.b") in each event's payload, by id; absent when
// missing or the payload is not JSON. Throws DbError.
std::map<int64_t, std::string> ReadPayloadKeys(storage::Connection& c, const std::string& key,
                                               const std::vector<int64_t>& ids);

// V029's fair_pending set right where a hand-written status change left it wrong (the
// framework's statements write it with every change to or from PENDING): PENDING rows
// with 0, which the fair reads would never see (a range of idx_due over the service's
// PENDING rows, the column read on each row), and rows no longer PENDING with 1, which
// would keep their pair among the heads (the fair_pending = 1 range of idx_fair, the
// status read on each row). Both reads cost the PENDING backlog in row lookups, so the
// leader runs this at most every kFairRepairInterval; at most `max` rows each way per
// call. Returns the rows set. Throws DbError.
int64_t RepairFairPending(storage::Connection& c, const std::string& service, int max);

// The statements, for the bench's EXPLAINs.
const char* DueHeadsSql();
const std::string& DueWithNewHeadsSql();
std::string DueWindowsSql(size_t windows);
// ---- end of issue 37 ----

// One assignment to write: the event at the version read, to `node`.
struct AssignRow {
  int64_t id = 0;
  int64_t version = 0;
  std::string node;
};

// The assignment of every row, in the order given (the caller orders rows by id, so
// that two writers cannot deadlock); per row true when it won (the event was still
// PENDING at that version), false for a lost race. One statement per 64 rows, plus a
// read-back of each row of a chunk that matched fewer rows than it named.
// REQUIRES: inside the caller's transaction (the dispatcher's page transaction, which
// checks its lease before COMMIT). Throws DbError.
std::vector<bool> AssignEvents(storage::Connection& c, const std::vector<AssignRow>& rows);

// The statements, for bench/dispatch_bench.cc's EXPLAINs.
std::string CountInFlightSql(size_t nodes);
const char* DueEventsSql();
const std::string& AssignChunkSql();  // kAssignChunkSize rows: ids, nodes, ids, ids, versions
const char* ReadAssignedSql();          // the read-back after a lost race. Params: id
inline constexpr size_t kAssignChunkSize = 64;

}  // namespace dsync::events
