#include "events/purge.h"

#include "events/status.h"

#include <algorithm>

namespace dsync::events {
namespace {

using storage::Marks;
using storage::Value;

// Step rows per DELETE / INSERT ... SELECT: an event may have many steps.
constexpr size_t kStepChunk = 1000;

// Times as text with microseconds, the form they compare against.
#define DSYNC_TIME_TEXT(col) "DATE_FORMAT(" col ", '%Y-%m-%d %H:%i:%s.%f')"

// The finish of a terminal event: finished_time, set by every finishing transition;
// modifier_time for a row finished by hand without it.
#define DSYNC_FINISH "COALESCE(finished_time, modifier_time)"

// Params: older_than (µs). The bound a pass compares finishes against.
constexpr const char* kSelectBound = "SELECT " DSYNC_TIME_TEXT("NOW(3) - INTERVAL ? MICROSECOND");

// Params: bound, cursor time twice, cursor id, service, statuses..., bound, limit. The next
// candidates after the cursor, oldest first, through idx_create_time: create_time <
// bound is implied by the finish bound and bounds the range scan.
std::string ScanCandidatesSql(size_t statuses) {
  return "SELECT id, " DSYNC_TIME_TEXT("create_time") " FROM distribute_event FORCE INDEX (idx_create_time)\n"
         "WHERE create_time < ? AND (create_time > ? OR (create_time = ? AND id > ?))\n"
         "  AND service = ? AND status IN (" + Marks(statuses) + ") AND " DSYNC_FINISH " < ?\n"
         "ORDER BY create_time, id LIMIT ?";
}

// Params: ids..., service, statuses..., bound. The candidates still terminal and old, locked by
// primary key; rows another session holds (a retry) are skipped, not waited for.
std::string LockCandidatesSql(size_t ids, size_t statuses) {
  return "SELECT id, code, status FROM distribute_event\n"
         "WHERE id IN (" + Marks(ids) + ") AND service = ? AND status IN (" + Marks(statuses) +
         ") AND " DSYNC_FINISH " < ?\nFOR UPDATE SKIP LOCKED";
}

// Params: job codes. The steps of locked events (no other session writes them: their
// event row is locked and terminal).
std::string SelectStepIdsSql(size_t codes) {
  return "SELECT id FROM distribute_event_step WHERE job_code IN (" + Marks(codes) + ")";
}

// Params: ids. Copy to the archive (columns both tables have).
std::string ArchiveRowsSql(const std::string& table, const std::string& columns, size_t ids) {
  return "INSERT INTO " + table + "_archive (" + columns + ")\nSELECT " + columns + " FROM " + table +
         " WHERE id IN (" + Marks(ids) + ")";
}

// Params: ids.
std::string DeleteRowsSql(const std::string& table, size_t ids) {
  return "DELETE FROM " + table + " WHERE id IN (" + Marks(ids) + ")";
}

// Params: table (distribute_event or distribute_event_step). Column names of the live
// table that its archive also has, in the live table's order.
constexpr const char* kSharedColumns = R"(
SELECT l.column_name FROM information_schema.columns l
JOIN information_schema.columns a
  ON a.table_schema = l.table_schema AND a.table_name = CONCAT(l.table_name, '_archive')
 AND a.column_name = l.column_name
WHERE l.table_schema = DATABASE() AND l.table_name = ?
ORDER BY l.ordinal_position)";

// Params: bound, service, statuses..., bound. Events a purge would remove, by status.
std::string CountEventsSql(size_t statuses) {
  return "SELECT status, COUNT(*) FROM distribute_event FORCE INDEX (idx_create_time)\n"
         "WHERE create_time < ? AND service = ? AND status IN (" + Marks(statuses) + ") AND " DSYNC_FINISH " < ?\n"
         "GROUP BY status";
}

// Params: bound, service, statuses..., bound. Their steps.
std::string CountStepsSql(size_t statuses) {
  return "SELECT COUNT(*) FROM distribute_event e FORCE INDEX (idx_create_time)\n"
         "JOIN distribute_event_step s ON s.job_code = e.code\n"
         "WHERE e.create_time < ? AND e.service = ? AND e.status IN (" + Marks(statuses) +
         ") AND COALESCE(e.finished_time, e.modifier_time) < ?";
}

// Lists padded to a power of two by repeating the last entry, so a connection caches
// one statement text per size class (as events/transitions.cc does).
std::vector<Value> PaddedIds(const std::vector<int64_t>& ids) {
  size_t n = 1;
  while (n < ids.size()) n *= 2;
  std::vector<Value> out(ids.begin(), ids.end());
  while (out.size() < n) out.push_back(out.back());
  return out;
}

std::vector<Value> StatusValues(const PurgeSelector& s) { return {s.statuses.begin(), s.statuses.end()}; }

std::string ReadBound(storage::Connection& c, const PurgeSelector& selector) {
  return c.QueryString(kSelectBound, Micros(selector.older_than)).value_or("");
}

}  // namespace

const std::vector<std::string>& TerminalStatuses() {
  static const std::vector<std::string> kTerminal = [] {
    std::vector<std::string> t;
    for (EventStatus s : kEventStatuses) {
      if (IsTerminal(s)) t.push_back(ToText(s));
    }
    return t;
  }();
  return kTerminal;
}

bool IsTerminalStatus(const std::string& status) {
  const std::optional<EventStatus> s = ParseEventStatus(status);
  return s && IsTerminal(*s);
}

PurgeCounts& PurgeCounts::operator+=(const PurgeCounts& o) {
  events += o.events;
  steps += o.steps;
  batches += o.batches;
  for (const auto& [status, n] : o.by_status) by_status[status] += n;
  return *this;
}

PurgeCounts CountPurgeable(storage::Connection& c, const PurgeSelector& selector) {
  PurgeCounts out;
  if (selector.statuses.empty()) return out;
  const std::string bound = ReadBound(c, selector);
  const auto statuses = StatusValues(selector);
  auto rs = c.Query(CountEventsSql(statuses.size()), bound, selector.service, storage::Values(statuses), bound);
  while (rs->next()) {
    out.by_status[rs->getString(1)] = rs->getInt64(2);
    out.events += rs->getInt64(2);
  }
  out.steps = c.QueryInt(CountStepsSql(statuses.size()), bound, selector.service, storage::Values(statuses), bound)
                  .value_or(0);
  return out;
}

Purger::Purger(bool archive, int batch) : archive_(archive), batch_(std::max(1, batch)) {}

PurgeCursor Purger::Begin(storage::Connection& c, const PurgeSelector& selector) {
  PurgeCursor cursor;
  cursor.bound = ReadBound(c, selector);
  cursor.done = selector.statuses.empty();
  return cursor;
}

std::vector<int64_t> Purger::NextCandidates(storage::Connection& c, const PurgeSelector& selector,
                                            PurgeCursor& cursor) {
  std::vector<int64_t> ids;
  if (cursor.done) return ids;
  const auto statuses = StatusValues(selector);
  auto rs = c.Query(ScanCandidatesSql(statuses.size()), cursor.bound, cursor.create_time, cursor.create_time,
                    cursor.id, selector.service, storage::Values(statuses), cursor.bound, batch_);
  while (rs->next()) {
    ids.push_back(rs->getInt64(1));
    cursor.id = rs->getInt64(1);
    cursor.create_time = rs->getString(2);
  }
  cursor.done = static_cast<int>(ids.size()) < batch_;
  return ids;
}

const std::string& Purger::SharedColumns(storage::Connection& c, const std::string& table) {
  auto found = columns_.find(table);
  if (found != columns_.end()) return found->second;
  std::string list;
  auto rs = c.Query(kSharedColumns, table);
  while (rs->next()) list += (list.empty() ? "`" : ", `") + rs->getString(1) + "`";
  if (list.empty()) {
    throw DbError(DbError::Kind::kOther, 0,
                  "retention archive: table " + table + "_archive is missing (run dsync migrate)");
  }
  return columns_[table] = list;
}

PurgeCounts Purger::RemoveBatch(storage::Connection& c, const PurgeSelector& selector, const PurgeCursor& cursor,
                                const std::vector<int64_t>& ids) {
  PurgeCounts out;
  if (ids.empty()) return out;
  const auto statuses = StatusValues(selector);
  const auto padded = PaddedIds(ids);
  std::vector<int64_t> locked;
  std::vector<Value> codes;
  {
    auto rs = c.Query(LockCandidatesSql(padded.size(), statuses.size()), storage::Values(padded), selector.service,
                      storage::Values(statuses), cursor.bound);
    while (rs->next()) {
      locked.push_back(rs->getInt64(1));
      codes.emplace_back(rs->getString(2));
      ++out.by_status[rs->getString(3)];
    }
  }
  if (locked.empty()) return out;

  std::vector<int64_t> step_ids;
  for (size_t start = 0; start < codes.size(); start += kStepChunk) {
    std::vector<Value> chunk(codes.begin() + start, codes.begin() + std::min(codes.size(), start + kStepChunk));
    auto rs = c.Query(SelectStepIdsSql(chunk.size()), storage::Values(chunk));
    while (rs->next()) step_ids.push_back(rs->getInt64(1));
  }
  auto remove = [&](const std::string& table, const std::vector<int64_t>& rows) {
    for (size_t start = 0; start < rows.size(); start += kStepChunk) {
      const auto chunk = PaddedIds({rows.begin() + start, rows.begin() + std::min(rows.size(), start + kStepChunk)});
      if (archive_) c.Execute(ArchiveRowsSql(table, SharedColumns(c, table), chunk.size()), storage::Values(chunk));
      c.Execute(DeleteRowsSql(table, chunk.size()), storage::Values(chunk));
    }
  };
  remove("distribute_event_step", step_ids);
  remove("distribute_event", locked);
  out.events = static_cast<int64_t>(locked.size());
  out.steps = static_cast<int64_t>(step_ids.size());
  out.batches = 1;
  return out;
}

}  // namespace dsync::events
