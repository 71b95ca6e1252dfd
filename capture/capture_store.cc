// Statements on dsync_capture (capture/capture_store.h). One named statement each,
// its parameters listed beside it.
//
// Thread safety: see the header.
#include "capture/capture_store.h"

#include <algorithm>
#include <chrono>

#include "capture/capture_events.h"
#include "events/status.h"

namespace dsync::capture {
namespace {

using nlohmann::json;

int64_t Micros(Millis m) { return std::chrono::duration_cast<std::chrono::microseconds>(m).count(); }

json ParsedOr(const std::string& text, json fallback) {
  if (text.empty()) return fallback;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? fallback : j;
}

// Params: service, name, source, target.
constexpr const char* kEnsureSql = R"sql(
INSERT INTO dsync_capture (service, name, source_ds, target_ds, lag_bound_s) VALUES (?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE source_ds = VALUES(source_ds), target_ds = VALUES(target_ds),
                        lag_bound_s = VALUES(lag_bound_s))sql";

// The token rises when the holder changes (assignments run left to right: `token`
// and `reader_starts` see the old holder). Params: holder, holder, holder, ttl (µs),
// service, name, holder.
constexpr const char* kAcquireSql = R"sql(
UPDATE dsync_capture
   SET token = IF(holder <=> ?, token, token + 1),
       reader_starts = reader_starts + IF(holder <=> ?, 0, 1),
       holder = ?,
       lease_until = NOW(3) + INTERVAL ? MICROSECOND
 WHERE service = ? AND name = ? AND (holder <=> ? OR holder IS NULL OR lease_until < NOW(3)))sql";

// Params: service, name, holder.
constexpr const char* kHeldTokenSql = R"sql(
SELECT token FROM dsync_capture WHERE service = ? AND name = ? AND holder = ?)sql";

// Params: ttl (µs), service, name, holder, token.
constexpr const char* kRenewSql = R"sql(
UPDATE dsync_capture SET lease_until = NOW(3) + INTERVAL ? MICROSECOND
 WHERE service = ? AND name = ? AND holder = ? AND token = ? AND lease_until > NOW(3))sql";

// Params: service, name, holder.
constexpr const char* kReleaseSql = R"sql(
UPDATE dsync_capture SET holder = NULL, lease_until = '1970-01-01 00:00:00.000'
 WHERE service = ? AND name = ? AND holder = ?)sql";

constexpr const char* kSelectColumns = R"sql(
SELECT name, source_ds, target_ds, state, gtid, binlog_file, binlog_pos, holder, token,
       lease_until > NOW(3), paused_tables, copy_events, last_error,
       UNIX_TIMESTAMP(last_commit_at), TIMESTAMPDIFF(MICROSECOND, last_commit_at, updated_at) / 1000000,
       transactions, row_changes, events_produced, reader_starts,
       DATE_FORMAT(updated_at, '%Y-%m-%d %H:%i:%s.%f'), lag_bound_s
  FROM dsync_capture)sql";

// The fenced checkpoint; it renews the lease too. Params: gtid, file, pos, state,
// copy_events (NULL: keep), last commit (s, 0: keep), last commit again, transactions,
// row changes, events, ttl (µs), service, name, holder, token, margin (µs).
constexpr const char* kCheckpointSql = R"sql(
UPDATE dsync_capture
   SET gtid = ?, binlog_file = ?, binlog_pos = ?, state = ?,
       copy_events = COALESCE(?, copy_events),
       last_commit_at = IF(? = 0, last_commit_at, FROM_UNIXTIME(?)),
       transactions = transactions + ?, row_changes = row_changes + ?, events_produced = events_produced + ?,
       last_error = NULL, updated_at = NOW(3), lease_until = NOW(3) + INTERVAL ? MICROSECOND
 WHERE service = ? AND name = ? AND holder = ? AND token = ? AND lease_until > NOW(3) + INTERVAL ? MICROSECOND)sql";

// One more paused table, beside the others (an operator's resume may have cleared
// some meanwhile: they stay cleared). Params: table, reason, service, name.
constexpr const char* kPauseSql = R"sql(
UPDATE dsync_capture SET paused_tables = JSON_SET(COALESCE(paused_tables, '{}'), CONCAT('$."', ?, '"'), ?)
 WHERE service = ? AND name = ?)sql";

// Params: state (NULL: keep), error, service, name, holder, token.
constexpr const char* kErrorSql = R"sql(
UPDATE dsync_capture SET state = COALESCE(?, state), last_error = ?, updated_at = NOW(3)
 WHERE service = ? AND name = ? AND holder = ? AND token = ? AND lease_until > NOW(3))sql";

// A paused table's reader copies it again, then reads on (capture_runner.cc); a
// FAILED capture, or any with `restart`, starts afresh (NEW: a full copy from the
// source's position then). Params: restart (0/1), service, name.
constexpr const char* kResumeSql = R"sql(
UPDATE dsync_capture
   SET paused_tables = NULL, last_error = NULL,
       state = IF(state = 'FAILED' OR ? = 1, 'NEW', state),
       updated_at = NOW(3)
 WHERE service = ? AND name = ?)sql";

CaptureRow FromRow(storage::ResultSet& rs) {
  CaptureRow r;
  r.name = rs.getString(1);
  r.source = rs.getString(2);
  r.target = rs.getString(3);
  r.state = rs.getString(4);
  r.gtid = rs.getString(5);
  r.file = rs.getString(6);
  r.pos = rs.getInt64(7);
  r.holder = rs.getString(8);
  r.token = rs.getInt64(9);
  r.lease_live = rs.getInt(10) != 0;
  r.paused = ParsedOr(rs.getString(11), json::object());
  r.copy_events = ParsedOr(rs.getString(12), json::array());
  r.last_error = rs.getString(13);
  if (!rs.isNull(14)) r.last_commit_at_s = rs.getInt64(14);
  if (!rs.isNull(15)) r.lag_s = static_cast<int64_t>(rs.getDouble(15));
  r.transactions = rs.getInt64(16);
  r.row_changes = rs.getInt64(17);
  r.events_produced = rs.getInt64(18);
  r.reader_starts = rs.getInt64(19);
  r.updated_at = rs.getString(20);
  r.lag_bound_s = rs.getInt(21);
  return r;
}

// Params: service, data_id prefix pattern (LIKE, escaped). The keyed-sync events of
// one capture (not its copies), newest first.
constexpr const char* kAppliedSql = R"sql(
SELECT TIMESTAMPDIFF(MICROSECOND, FROM_UNIXTIME(JSON_VALUE(payload, '$.committed_at')), finished_time) DIV 1000,
       TIMESTAMPDIFF(MICROSECOND, create_time, finished_time) DIV 1000,
       COALESCE(JSON_LENGTH(payload, '$.keys'), 0), finished_time > NOW(3) - INTERVAL 60 SECOND
  FROM distribute_event
 WHERE tenant_id = 'dsync.capture' AND service = ? AND data_id LIKE ? AND data_id NOT LIKE '%#copy#%'
   AND status = )sql" DSYNC_SQL_STATUS(SUCCESS) R"sql( AND finished_time > NOW(3) - INTERVAL 10 MINUTE
 ORDER BY id DESC LIMIT 2000)sql";

std::optional<int64_t> Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

CaptureStore::ApplyStats CaptureStore::Applied(const std::string& name) {
  std::string pattern;
  for (char c : name) {
    if (c == '_' || c == '%' || c == '\\') pattern += '\\';
    pattern += c;
  }
  pattern += "#%";
  return pool_.Run("capture: apply statistics", [&](storage::Connection& c) {
    ApplyStats st;
    std::vector<int64_t> lag, apply;
    int64_t keys_last_minute = 0;
    auto rs = c.Query(kAppliedSql, service_, pattern);
    while (rs->next()) {
      ++st.events;
      if (!rs->isNull(1)) lag.push_back(rs->getInt64(1));
      apply.push_back(rs->getInt64(2));
      if (rs->getInt(4) != 0) keys_last_minute += rs->getInt64(3);
    }
    st.lag_p50_ms = Percentile(lag, 0.50);
    st.lag_p99_ms = Percentile(lag, 0.99);
    st.apply_p50_ms = Percentile(apply, 0.50);
    st.apply_p99_ms = Percentile(apply, 0.99);
    st.keys_per_s = static_cast<double>(keys_last_minute) / 60.0;
    return st;
  });
}

std::map<std::string, CaptureStore::Backlog> CaptureStore::Backlogs() {
  return pool_.Run("capture: backlog", [&](storage::Connection& c) {
    std::map<std::string, Backlog> out;
    auto rs = c.Query(
        "SELECT SUBSTRING_INDEX(data_id, '#', 1), SUM(status NOT IN " DSYNC_SQL_TERMINAL "), "
        "SUM(status IN (" DSYNC_SQL_STATUS(FAILED) ", " DSYNC_SQL_STATUS(COMPENSATED) ")) FROM distribute_event "
        "WHERE tenant_id = ? AND topic = ? "
        "AND service = ? GROUP BY 1",
        std::string(kCaptureTenant), std::string(kCaptureTopic), service_);
    while (rs->next()) out[rs->getString(1)] = {rs->getInt64(2), rs->getInt64(3)};
    return out;
  });
}

json CaptureStore::ListJson() {
  auto optional = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(); };
  std::map<std::string, Backlog> backlog = Backlogs();
  json out = json::array();
  for (const CaptureRow& r : List()) {
    const ApplyStats a = Applied(r.name);
    out.push_back({{"name", r.name}, {"source", r.source}, {"target", r.target}, {"state", r.state},
                   {"gtid", r.gtid}, {"binlog_file", r.file}, {"binlog_pos", r.pos},
                   {"holder", r.lease_live ? json(r.holder) : json()}, {"reader_lag_s", optional(r.lag_s)},
                   {"last_commit_at", optional(r.last_commit_at_s)},
                   {"transactions", r.transactions}, {"row_changes", r.row_changes},
                   {"events_produced", r.events_produced}, {"events_pending", backlog[r.name].pending},
                   {"events_failed", backlog[r.name].failed}, {"reader_starts", r.reader_starts},
                   {"paused_tables", r.paused}, {"last_error", r.last_error.empty() ? json() : json(r.last_error)},
                   {"lag_bound_s", r.lag_bound_s}, {"updated_at", r.updated_at},
                   {"applied", {{"events_10m", a.events}, {"lag_p50_ms", optional(a.lag_p50_ms)},
                                {"lag_p99_ms", optional(a.lag_p99_ms)}, {"apply_p50_ms", optional(a.apply_p50_ms)},
                                {"apply_p99_ms", optional(a.apply_p99_ms)}, {"keys_per_s", a.keys_per_s}}}});
  }
  return out;
}

CaptureStore::CaptureStore(storage::ConnectionPool& framework, std::string service)
    : pool_(framework), service_(std::move(service)) {}

void CaptureStore::Ensure(const std::string& name, const std::string& source, const std::string& target,
                          int lag_bound_s) {
  pool_.Run("capture: ensure its row",
            [&](storage::Connection& c) { c.Execute(kEnsureSql, service_, name, source, target, lag_bound_s); });
}

std::optional<int64_t> CaptureStore::TryAcquire(const std::string& name, const std::string& holder, Millis ttl) {
  return pool_.Transact("capture: acquire the lease", [&](storage::Connection& c) -> std::optional<int64_t> {
    if (c.Execute(kAcquireSql, holder, holder, holder, Micros(ttl), service_, name, holder) == 0) return std::nullopt;
    return c.QueryInt(kHeldTokenSql, service_, name, holder);
  });
}

bool CaptureStore::Renew(const std::string& name, const std::string& holder, int64_t token, Millis ttl) {
  return pool_.Run("capture: renew the lease", [&](storage::Connection& c) {
    return c.Execute(kRenewSql, Micros(ttl), service_, name, holder, token) == 1;
  });
}

void CaptureStore::Release(const std::string& name, const std::string& holder) {
  pool_.Run("capture: release the lease", [&](storage::Connection& c) { c.Execute(kReleaseSql, service_, name, holder); });
}

std::optional<CaptureRow> CaptureStore::Read(const std::string& name) {
  return pool_.Run("capture: read", [&](storage::Connection& c) -> std::optional<CaptureRow> {
    auto rs = c.Query(std::string(kSelectColumns) + " WHERE service = ? AND name = ?", service_, name);
    if (!rs->next()) return std::nullopt;
    return FromRow(*rs);
  });
}

std::vector<CaptureRow> CaptureStore::List() {
  return pool_.Run("capture: list", [&](storage::Connection& c) {
    std::vector<CaptureRow> out;
    auto rs = c.Query(std::string(kSelectColumns) + " WHERE service = ? ORDER BY name", service_);
    while (rs->next()) out.push_back(FromRow(*rs));
    return out;
  });
}

void CaptureStore::Commit(const std::string& name, const std::string& holder, int64_t token, Millis ttl, Millis margin,
                          const Checkpoint& cp, const std::vector<events::NewEventRow>& events) {
  pool_.Transact("capture: commit events and checkpoint", [&](storage::Connection& c) {
    const storage::Value copy = cp.copy_events ? storage::Value(cp.copy_events->dump()) : storage::Value();
    const int64_t last = cp.last_commit_at_s;
    const uint64_t matched =
        c.Execute(kCheckpointSql, cp.gtid, cp.file, cp.pos, cp.state, copy, last, last,
                  cp.transactions, cp.row_changes, static_cast<int64_t>(events.size()), Micros(ttl), service_, name,
                  holder, token, Micros(margin));
    if (matched != 1) throw LeaseLost("capture " + name + ": the lease is no longer held (token " + std::to_string(token) + ")");
    for (const auto& [table, reason] : cp.pause) c.Execute(kPauseSql, table, reason.substr(0, 500), service_, name);
    if (!events.empty()) events::InsertEvents(c, events);
  });
}

void CaptureStore::RecordError(const std::string& name, const std::string& holder, int64_t token, const std::string& state,
                               const std::string& error) {
  pool_.Run("capture: record an error", [&](storage::Connection& c) {
    const storage::Value s = state.empty() ? storage::Value() : storage::Value(state);
    if (c.Execute(kErrorSql, s, error.substr(0, 1000), service_, name, holder, token) != 1) {
      throw LeaseLost("capture " + name + ": the lease is no longer held");
    }
  });
}

json CaptureStore::Resume(const std::string& name, bool restart) {
  return pool_.Transact("capture: resume", [&](storage::Connection& c) {
    auto rs = c.Query("SELECT paused_tables FROM dsync_capture WHERE service = ? AND name = ? FOR UPDATE", service_, name);
    if (!rs->next()) throw NotFoundError("no capture '" + name + "' in service '" + service_ + "' (it has never run)");
    json paused = ParsedOr(rs->getString(1), json::object());
    c.Execute(kResumeSql, restart ? 1 : 0, service_, name);
    return paused;
  });
}

std::vector<std::pair<std::string, std::pair<std::string, std::string>>> CaptureStore::EventStatuses(
    const std::vector<std::string>& codes) {
  return pool_.Run("capture: copy event statuses", [&](storage::Connection& c) {
    std::vector<std::pair<std::string, std::pair<std::string, std::string>>> out;
    for (const std::string& code : codes) {
      auto rs = c.Query("SELECT status, COALESCE(last_error, '') FROM distribute_event WHERE code = ?", code);
      if (rs->next()) out.push_back({code, {rs->getString(1), rs->getString(2)}});
    }
    return out;
  });
}

}  // namespace dsync::capture
