#include "events/assign.h"

#include <algorithm>
#include <array>
#include <utility>

#include "events/columns.h"
#include "events/process_log.h"
#include "events/status.h"

namespace dsync::events {
namespace {

// A due event's row as the dispatch cycle reads it (events::DueEvent), and the filters
// every due read shares: the topics served, the exhausted ones skipped, and the ordering
// rule (an ordered topic's event waits while an earlier one of its (tenant_id, data_id)
// is PENDING, ASSIGNED, RUNNING or COMPENSATING). Params of the filters: any_topic,
// served, exhausted, unordered.
#define DSYNC_DUE_COLUMNS \
  "SELECT e.id, e.version, e.topic, e.tenant_id, e.data_id, e.priority,\n" \
  "       TIMESTAMPDIFF(MICROSECOND, GREATEST(e.next_run_time, e.modifier_time), NOW(3)), e.route\n"
#define DSYNC_DUE_EARLIER_IN(status)                                                       \
  "NOT EXISTS (SELECT 1 FROM distribute_event p WHERE p.tenant_id = e.tenant_id\n"         \
  "                AND p.data_id = e.data_id AND p.status = " DSYNC_SQL_STATUS(status) " AND p.id < e.id\n" \
  "                AND p.service = e.service)"
#define DSYNC_DUE_FILTERS                                                           \
  "  AND (? OR FIND_IN_SET(e.topic, ?) > 0)\n"                                      \
  "  AND FIND_IN_SET(e.topic, ?) = 0\n"                                             \
  "  AND (FIND_IN_SET(e.topic, ?) > 0 OR (\n"                                       \
  "    " DSYNC_DUE_EARLIER_IN(PENDING) "\n"                                           \
  "    AND " DSYNC_DUE_EARLIER_IN(ASSIGNED) "\n"                                      \
  "    AND " DSYNC_DUE_EARLIER_IN(RUNNING) "\n"                                       \
  "    AND " DSYNC_DUE_EARLIER_IN(COMPENSATING) "))\n"

// Params: service, cursor priority, cursor priority, cursor id (keyset: after this event),
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
// dispatch-latency metric; it reads the row the other columns read anyway, as does the
// last (route, V018: what a handed-on event's next step needs).
constexpr const char* kSelectDueEvents = R"(
)" DSYNC_DUE_COLUMNS R"(FROM distribute_event e FORCE INDEX (idx_due)
WHERE e.status = )" DSYNC_SQL_STATUS(PENDING) R"( AND e.service = ? AND e.next_run_time <= NOW(3)
  AND (e.priority > ? OR (e.priority = ? AND e.id > ?))
)" DSYNC_DUE_FILTERS R"(ORDER BY e.priority, e.id
LIMIT ?)";

// The assignment, docs/event-lifecycle.md item 2, for kAssignChunk events at once:
//
//   UPDATE distribute_event
//   SET node_address = ELT(FIELD(id, <ids>), <nodes>),
//       process_log = <append {node_address, status -> 'ASSIGNED'}>,
//       status = 'ASSIGNED', version = version + 1, assigned_time = NOW(3)
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
// so they bind as plain pack expansions: cheap to compile.) node_address is set
// first so that the process_log entry names the new holder without more parameters
// (SET lists run left to right), and before `status`, which it reads as `from`.
constexpr size_t kAssignChunk = kAssignChunkSize;

template <size_t... I>
uint64_t ExecuteChunk(storage::Connection& c, const std::array<const AssignRow*, kAssignChunk>& rows,
                      std::index_sequence<I...>) {
  return c.Execute(AssignChunkSql(), rows[I]->id..., rows[I]->node..., rows[I]->id..., rows[I]->id...,
                   rows[I]->version...);
}

// Params: id. Read back in the assigning transaction, only for a chunk that matched
// fewer rows than it named, to tell which events were lost races.
constexpr const char* kReadAssigned = R"(
SELECT version, status, node_address FROM distribute_event WHERE id = ?)";

}  // namespace

// In-flight events of the live nodes just read, one `?` per node address. A covering
// range of idx_node_address (node_address, status) over the in-flight statuses: terminal
// rows are never read, however many there are. FORCE INDEX because, after a mass status
// change, MariaDB's estimates made it pick a full scan (1.1M rows, 1.3 s per cycle in
// bench/dispatch_bench.cc); forced, 12 ms with 50k events in flight.
std::string CountInFlightSql(size_t nodes) {
  const std::string marks = storage::Marks(nodes);
  return "SELECT e.node_address, COUNT(*) FROM distribute_event e FORCE INDEX (idx_node_address) "
         "WHERE e.node_address IN (" + marks + ") AND e.status IN " DSYNC_SQL_IN_FLIGHT " "
         "AND e.service = ? GROUP BY e.node_address";
}

const char* DueEventsSql() { return kSelectDueEvents; }

const char* ReadAssignedSql() { return kReadAssigned; }

const std::string& AssignChunkSql() {
  static const std::string sql = [] {
    const std::string marks = storage::Marks(kAssignChunk);
    return "UPDATE distribute_event\nSET node_address = ELT(FIELD(id, " + marks + "), " + marks +
           "),\n    " DSYNC_PROCESS_LOG_ENTRY("node_address", DSYNC_SQL_STATUS(ASSIGNED), "'assigned by the dispatcher'") +
           std::string(",\n    status = " DSYNC_SQL_STATUS(ASSIGNED) ", fair_pending = 0, version = version + 1, assigned_time = NOW(3)\nWHERE id IN (") +
           marks + ") AND status = " DSYNC_SQL_STATUS(PENDING) "\n  AND version = CAST(ELT(FIELD(id, " + marks + "), " + marks +
           ") AS SIGNED)";
  }();
  return sql;
}

std::map<std::string, int64_t> CountInFlight(storage::Connection& c, const std::string& service,
                                             const std::vector<std::string>& addresses) {
  if (addresses.empty()) return {};
  std::vector<storage::Value> values(addresses.begin(), addresses.end());
  values.emplace_back(service);
  return ReadCounts(*c.Query(CountInFlightSql(addresses.size()), storage::Values(values)));
}

// Params: service, the topics, one `?` each.
std::string CountPendingSql(size_t topics) {
  return "SELECT topic, COUNT(*) FROM distribute_event WHERE status = " DSYNC_SQL_STATUS(PENDING) " AND service = ? AND topic IN (" +
         storage::Marks(topics) + ") GROUP BY topic";
}

std::map<std::string, int64_t> CountPendingByTopic(storage::Connection& c, const std::string& service,
                                                   const std::vector<storage::Value>& topics) {
  if (topics.empty()) return {};
  std::vector<storage::Value> values{storage::Value{service}};
  values.insert(values.end(), topics.begin(), topics.end());
  return ReadCounts(*c.Query(CountPendingSql(topics.size()), storage::Values(values)));
}

// Params: service.
constexpr const char* kCountPendingTopics =
    "SELECT topic, COUNT(*) FROM distribute_event FORCE INDEX (idx_due) "
    "WHERE status = " DSYNC_SQL_STATUS(PENDING) " AND service = ? GROUP BY topic";

std::map<std::string, int64_t> CountPendingTopics(storage::Connection& c, const std::string& service) {
  return ReadCounts(*c.Query(kCountPendingTopics, service));
}

std::vector<DueEvent> ReadDue(storage::Connection& c, const DueFilter& f) {
  std::vector<DueEvent> out;
  auto rs = c.Query(kSelectDueEvents, f.service, f.after_priority, f.after_priority, f.after_id, f.any_topic, f.served,
                    f.exhausted, f.unordered, f.limit);
  while (rs->next()) {
    Columns col(*rs);
    out.push_back({.id = col.Int64(), .version = col.Int64(), .topic = col.String(), .tenant_id = col.String(),
                   .data_id = col.String(), .priority = col.Int(),
                   .due_age = std::chrono::microseconds(std::max<int64_t>(0, col.Int64())),
                   .route = col.String()});
  }
  return out;
}

// ---- issue 37: fair windows and concurrency limits ----

// Params: service, max. A loose index scan of idx_fair (V029: fair_pending, priority,
// tenant_id, service, id, next_run_time): GROUP BY its first three columns, the first and
// the fourth equal to constants, reads one index entry per (priority, tenant_id) of the
// PENDING events ("Using index for group-by"), not the events. fair_pending stands for
// `status = 'PENDING'` (V029), which the index does not hold: so its entry moves only
// when an event becomes PENDING or stops being so, never at claim or completion.
// FORCE INDEX: the same on MariaDB and MySQL 8.
constexpr const char* kSelectDueHeads = R"(
SELECT priority, tenant_id, MIN(id) FROM distribute_event FORCE INDEX (idx_fair)
WHERE fair_pending = 1 AND service = ?
GROUP BY fair_pending, priority, tenant_id
ORDER BY priority, tenant_id
LIMIT ?)";

const char* DueHeadsSql() { return kSelectDueHeads; }

// Params: service, after id. The pairs of PENDING events newer than `after id`: a range
// of the primary key over the rows inserted since (plus older ids: none), whatever the
// table holds. Also the newest id, for the next call.
constexpr const char* kSelectNewHeads = R"(
SELECT priority, tenant_id, MAX(id) FROM distribute_event FORCE INDEX (PRIMARY)
WHERE id > ? AND status = )" DSYNC_SQL_STATUS(PENDING) R"( AND service = ?
GROUP BY priority, tenant_id)";

std::vector<DueHead> ReadNewDueHeads(storage::Connection& c, const std::string& service, int64_t& after_id) {
  std::vector<DueHead> out;
  auto rs = c.Query(kSelectNewHeads, after_id, service);
  int64_t newest = after_id;
  while (rs->next()) {
    out.push_back({rs->getInt(1), rs->getString(2)});
    newest = std::max<int64_t>(newest, rs->getInt64(3));
  }
  after_id = newest;
  return out;
}

namespace {

DueEvent ReadDueRow(storage::ResultSet& rs) {
  Columns col(rs);
  return {.id = col.Int64(), .version = col.Int64(), .topic = col.String(), .tenant_id = col.String(),
          .data_id = col.String(), .priority = col.Int(),
          .due_age = std::chrono::microseconds(std::max<int64_t>(0, col.Int64())), .route = col.String()};
}

// A pair's row in DueWithNewHeadsSql: version -1 (an event's version is never below 0),
// id = the pair's newest PENDING id, priority and tenant_id in their columns.
constexpr int64_t kHeadRowVersion = -1;

}  // namespace

// Params: kSelectDueEvents's, then after id, service. Each part keeps its own plan
// (idx_due in (priority, id) order up to LIMIT; a primary-key range over the rows
// inserted since `after id`).
const std::string& DueWithNewHeadsSql() {
  static const std::string sql = std::string("(") + kSelectDueEvents +
                                 ")\nUNION ALL\n(SELECT MAX(id), -1, '', tenant_id, '', priority, 0, '' "
                                 "FROM distribute_event FORCE INDEX (PRIMARY)\n"
                                 "WHERE id > ? AND status = " DSYNC_SQL_STATUS(PENDING) " AND service = ? GROUP BY priority, tenant_id)";
  return sql;
}

std::vector<DueEvent> ReadDueWithNewHeads(storage::Connection& c, const DueFilter& f, int64_t& after_id,
                                          std::vector<DueHead>& heads) {
  std::vector<DueEvent> out;
  auto rs = c.Query(DueWithNewHeadsSql(), f.service, f.after_priority, f.after_priority, f.after_id, f.any_topic,
                    f.served, f.exhausted, f.unordered, f.limit, after_id, f.service);
  int64_t newest = after_id;
  while (rs->next()) {
    DueEvent e = ReadDueRow(*rs);
    if (e.version == kHeadRowVersion) {
      newest = std::max(newest, e.id);
      heads.push_back({e.priority, std::move(e.tenant_id)});
    } else {
      out.push_back(std::move(e));
    }
  }
  after_id = newest;
  // UNION ALL returns each part's rows in its own order; the page's order is kept
  // explicitly rather than relied on.
  std::stable_sort(out.begin(), out.end(), [](const DueEvent& a, const DueEvent& b) {
    return a.priority != b.priority ? a.priority < b.priority : a.id < b.id;
  });
  return out;
}

int64_t MaxEventId(storage::Connection& c) {
  return c.QueryInt("SELECT COALESCE(MAX(id), 0) FROM distribute_event").value_or(0);
}

std::vector<DueHead> ReadDueHeads(storage::Connection& c, const std::string& service, int max) {
  std::vector<DueHead> out;
  auto rs = c.Query(kSelectDueHeads, service, max);
  while (rs->next()) out.push_back({rs->getInt(1), rs->getString(2)});
  return out;
}

namespace {

// One window: kSelectDueEvents's row and filters for one (priority, tenant_id), a ref
// range on idx_fair (fair_pending = 1, priority, tenant_id, service) in id order,
// next_run_time checked in the index; `status` is checked on the row the columns read
// anyway (a row whose status was changed by hand without fair_pending: V029).
// Params: priority, tenant_id, service, after id, any_topic, served, exhausted,
// unordered, limit.
constexpr const char* kWindowSql = R"((
)" DSYNC_DUE_COLUMNS R"(FROM distribute_event e FORCE INDEX (idx_fair)
WHERE e.fair_pending = 1 AND e.priority = ? AND e.tenant_id = ? AND e.service = ? AND e.id > ?
  AND e.next_run_time <= NOW(3) AND e.status = )" DSYNC_SQL_STATUS(PENDING) R"(
)" DSYNC_DUE_FILTERS R"(ORDER BY e.id
LIMIT ?))";

// Statement sizes: a page's windows are padded (LIMIT 0) to the next of these, so a
// handful of prepared statements serve every page.
constexpr size_t kWindowSizes[] = {1, 2, 4, 8, 16, 32};

}  // namespace

std::string DueWindowsSql(size_t windows) {
  std::string sql;
  for (size_t i = 0; i < windows; ++i) {
    if (i > 0) sql += "\nUNION ALL\n";
    sql += kWindowSql;
  }
  return sql;
}

std::vector<DueEvent> ReadDueWindows(storage::Connection& c, const DueFilter& f, const std::vector<DueWindow>& windows) {
  std::vector<DueEvent> out;
  if (windows.empty()) return out;
  size_t size = windows.size();
  for (size_t s : kWindowSizes) {
    if (s >= windows.size()) {
      size = s;
      break;
    }
  }
  std::vector<storage::Value> params;
  params.reserve(size * 9);
  for (size_t i = 0; i < size; ++i) {
    const DueWindow& w = windows[std::min(i, windows.size() - 1)];
    const int64_t limit = i < windows.size() ? std::max(0, w.limit) : 0;  // padding reads nothing
    params.insert(params.end(), {storage::Value{int64_t{w.priority}}, storage::Value{w.tenant_id},
                                 storage::Value{f.service}, storage::Value{w.after_id}, storage::Value{f.any_topic},
                                 storage::Value{f.served}, storage::Value{f.exhausted}, storage::Value{f.unordered},
                                 storage::Value{limit}});
  }
  auto rs = c.Query(DueWindowsSql(size), storage::Values(params));
  while (rs->next()) {
    Columns col(*rs);
    out.push_back({.id = col.Int64(), .version = col.Int64(), .topic = col.String(), .tenant_id = col.String(),
                   .data_id = col.String(), .priority = col.Int(),
                   .due_age = std::chrono::microseconds(std::max<int64_t>(0, col.Int64())),
                   .route = col.String()});
  }
  return out;
}

// In-flight rows by topic: a range of idx_due (status, priority, id, next_run_time,
// topic) over the three in-flight statuses; service is read from the row. Params: service.
constexpr const char* kCountInFlightByTopic =
    "SELECT e.topic, COUNT(*) FROM distribute_event e FORCE INDEX (idx_due) "
    "WHERE e.status IN " DSYNC_SQL_IN_FLIGHT " AND e.service = ? GROUP BY e.topic";

std::map<std::string, int64_t> CountInFlightByTopic(storage::Connection& c, const std::string& service) {
  return ReadCounts(*c.Query(kCountInFlightByTopic, service));
}

namespace {
// "payload.a.b" -> "$.a.b" (settings validated the key: word characters and dots).
std::string JsonPath(const std::string& key) { return "$" + key.substr(std::string("payload").size()); }
}  // namespace

std::map<std::string, int64_t> CountInFlightByKey(storage::Connection& c, const std::string& service,
                                                  const std::string& topic, const std::string& key) {
  // The key's expression over the row; the same range as kCountInFlightByTopic with the topic.
  // Params: [json path,] service, topic.
  const char* range =
      " FROM distribute_event e FORCE INDEX (idx_due) "
      "WHERE e.status IN " DSYNC_SQL_IN_FLIGHT " AND e.service = ? AND e.topic = ? ";
  std::map<std::string, int64_t> out;
  if (key == "tenant_id" || key == "data_id") {
    out = ReadCounts(*c.Query("SELECT e." + key + ", COUNT(*)" + range + "GROUP BY e." + key, service, topic));
  } else {
    auto rs = c.Query(std::string("SELECT JSON_UNQUOTE(JSON_EXTRACT(e.payload, ?)) k, COUNT(*)") + range +
                          "AND JSON_VALID(e.payload) GROUP BY k",
                      JsonPath(key), service, topic);
    while (rs->next()) {
      if (!rs->isNull(1)) out[rs->getString(1)] = rs->getInt64(2);
    }
  }
  return out;
}

std::map<int64_t, std::string> ReadPayloadKeys(storage::Connection& c, const std::string& key,
                                               const std::vector<int64_t>& ids) {
  std::map<int64_t, std::string> out;
  if (ids.empty()) return out;
  std::vector<storage::Value> params{storage::Value{JsonPath(key)}};
  for (int64_t id : ids) params.emplace_back(id);
  // Params: json path, ids. Primary-key lookups.
  auto rs = c.Query("SELECT e.id, IF(JSON_VALID(e.payload), JSON_UNQUOTE(JSON_EXTRACT(e.payload, ?)), NULL) "
                    "FROM distribute_event e WHERE e.id IN (" + storage::Marks(ids.size()) + ")",
                    storage::Values(params));
  while (rs->next()) {
    if (!rs->isNull(2)) out[rs->getInt64(1)] = rs->getString(2);
  }
  return out;
}

namespace {
// Params: service, max. Non-locking reads (the repair UPDATE rechecks each row).
constexpr const char* kSelectStrandedPending =
    "SELECT id FROM distribute_event FORCE INDEX (idx_due) "
    "WHERE status = " DSYNC_SQL_STATUS(PENDING) " AND service = ? AND fair_pending <> 1 LIMIT ?";
constexpr const char* kSelectStaleFairPending =
    "SELECT id FROM distribute_event FORCE INDEX (idx_fair) "
    "WHERE fair_pending = 1 AND service = ? AND status <> " DSYNC_SQL_STATUS(PENDING) " LIMIT ?";
}  // namespace

int64_t RepairFairPending(storage::Connection& c, const std::string& service, int max) {
  std::vector<storage::Value> ids;
  for (const char* sql : {kSelectStrandedPending, kSelectStaleFairPending}) {
    auto rs = c.Query(sql, service, int64_t{max});
    while (rs->next()) ids.emplace_back(rs->getInt64(1));
  }
  if (ids.empty()) return 0;
  // Per row under its lock: whatever its status is by then.
  return static_cast<int64_t>(c.Execute(
      "UPDATE distribute_event SET fair_pending = (status = " DSYNC_SQL_STATUS(PENDING) ") WHERE id IN (" +
          storage::Marks(ids.size()) + ") AND fair_pending <> (status = " DSYNC_SQL_STATUS(PENDING) ")",
      storage::Values(ids)));
}

// ---- end of issue 37 ----

std::vector<bool> AssignEvents(storage::Connection& c, const std::vector<AssignRow>& rows) {
  std::vector<bool> won(rows.size(), false);
  for (size_t begin = 0; begin < rows.size(); begin += kAssignChunk) {
    const size_t end = std::min(rows.size(), begin + kAssignChunk);
    std::array<const AssignRow*, kAssignChunk> chunk;
    for (size_t k = 0; k < kAssignChunk; ++k) chunk[k] = &rows[std::min(begin + k, end - 1)];
    const uint64_t matched = ExecuteChunk(c, chunk, std::make_index_sequence<kAssignChunk>());
    if (matched == end - begin) {
      for (size_t k = begin; k < end; ++k) won[k] = true;
      continue;
    }
    for (size_t k = begin; k < end; ++k) {
      const AssignRow& a = rows[k];
      auto rs = c.Query(kReadAssigned, a.id);
      won[k] = rs->next() && rs->getInt64(1) == a.version + 1 && rs->getString(2) == ToText(EventStatus::kAssigned) &&
               !rs->isNull(3) && rs->getString(3) == a.node;
    }
  }
  return won;
}

}  // namespace dsync::events
