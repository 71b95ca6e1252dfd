#include "api/event_store.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "dispatcher/dispatch_cycle.h"
#include "dispatcher/lease_lock.h"
#include "registry/node_directory.h"
#include "saga/process_log_sql.h"

namespace dsync::api {
namespace {

constexpr size_t kMaxBatchEvents = 10000;
constexpr size_t kInsertChunk = 500;
constexpr int64_t kMaxDelayMs = 31LL * 24 * 3600 * 1000;
constexpr int kMaxPriority = 1000000;

const std::set<std::string>& EventStatuses() {
  static const std::set<std::string> kStatuses = {"PENDING", "ASSIGNED", "RUNNING", "SUCCESS",
                                                  "FAILED", "COMPENSATING", "COMPENSATED"};
  return kStatuses;
}

// Times are read as ISO-8601 UTC text ("2026-11-21T10:00:00.123Z"), NULL as "".
#define DSYNC_ISO(col) "IFNULL(CONCAT(LEFT(DATE_FORMAT(" col ", '%Y-%m-%dT%H:%i:%s.%f'), 23), 'Z'), '')"

// The event columns every read selects, in the order RowToEvent reads them.
#define DSYNC_EVENT_COLUMNS                                                                      \
  "id, code, topic, tenant_id, data_id, status, phase, IFNULL(node_address, ''), priority, "     \
  "version, attempt, retry_count, max_retry, progress, IFNULL(batch_code, ''), "                 \
  "IFNULL(trace_id, ''), IFNULL(payload, ''), IFNULL(result, ''), IFNULL(last_error, ''), "      \
  DSYNC_ISO("create_time") ", " DSYNC_ISO("next_run_time") ", " DSYNC_ISO("assigned_time") ", "  \
  DSYNC_ISO("started_time") ", " DSYNC_ISO("finished_time") ", " DSYNC_ISO("modifier_time")

// Params: code.
constexpr const char* kSelectEventByCode =
    "SELECT " DSYNC_EVENT_COLUMNS " FROM distribute_event WHERE code = ?";

// Params: tenant_id, code, data_id, topic, payload, priority, max_retry, delay (µs)
// twice, trace_id, batch_code.
constexpr const char* kInsertEvent = R"(
INSERT INTO distribute_event
  (tenant_id, code, data_id, topic, payload, priority, max_retry, next_run_time, trace_id, batch_code)
VALUES (?, ?, ?, ?, ?, ?, ?, IF(? > 0, NOW(3) + INTERVAL ? MICROSECOND, '1970-01-01 00:00:00.000'), ?, ?))";
constexpr const char* kInsertEventRow =
    "(?, ?, ?, ?, ?, ?, ?, IF(? > 0, NOW(3) + INTERVAL ? MICROSECOND, '1970-01-01 00:00:00.000'), ?, ?)";

// Params: batch_code.
constexpr const char* kBatchProgress =
    "SELECT status, COUNT(*) FROM distribute_event WHERE batch_code = ? GROUP BY status";

// Params: job_code. Plan order: position, then children after their parent.
constexpr const char* kSelectSteps = "SELECT id, code, step_name, step_type, status, IFNULL(node_address, ''), "
    "parent_step_id, sort, retry_count, max_retry, compensation_retry_count, attempt, "
    DSYNC_ISO("started_at") ", " DSYNC_ISO("executed_at") ", " DSYNC_ISO("compensated_at") ", "
    "IFNULL(error_details, ''), IFNULL(output, '') "
    "FROM distribute_event_step WHERE job_code = ? ORDER BY sort, LENGTH(code), code";

// Params: event_code.
constexpr const char* kSelectTimeline = "SELECT action, step_code, step_name, status, "
    DSYNC_ISO("started_at") ", " DSYNC_ISO("finished_at") ", IFNULL(node_address, ''), "
    "IFNULL(error_details, ''), failures, attempt FROM v_step_history WHERE event_code = ? ORDER BY seq";

// Params: code.
constexpr const char* kSelectProcessLog = "SELECT process_log FROM distribute_event WHERE code = ?";

// Params: code.
constexpr const char* kLockForRetry =
    "SELECT id, status, version FROM distribute_event WHERE code = ? FOR UPDATE";

// Re-drive steps. Compensated steps forget their compensation data (what they saved
// was restored; the next run saves afresh); others keep it (a step that failed
// midway keeps the before-image of its first run). Params: job_code.
#define DSYNC_RESET_STEPS                                                                  \
  "UPDATE distribute_event_step SET "                                                      \
  "compensation_data = IF(status = 'COMPENSATED', NULL, compensation_data), "              \
  "status = 'PENDING', retry_count = 0, compensation_retry_count = 0, started_at = NULL, " \
  "executed_at = NULL, compensated_at = NULL, error_details = NULL, output = NULL "        \
  "WHERE job_code = ?"
constexpr const char* kResetAllSteps = DSYNC_RESET_STEPS;
constexpr const char* kResetUnfinishedSteps = DSYNC_RESET_STEPS " AND status <> 'SUCCESS'";

// Params: node, 'PENDING', why (log); id, version.
constexpr const char* kRetryEvent = "UPDATE distribute_event SET " DSYNC_APPEND_PROCESS_LOG R"(,
  status = 'PENDING', phase = 'FORWARD', node_address = NULL, version = version + 1,
  retry_count = 0, next_run_time = '1970-01-01 00:00:00.000', result = NULL, last_error = NULL,
  progress = 0, assigned_time = NULL, started_time = NULL, finished_time = NULL,
  modifier_time = NOW(3)
WHERE id = ? AND version = ? AND status IN ('FAILED', 'COMPENSATED'))";

// Params: service, address, offline timeout (µs).
constexpr const char* kDrainNode = R"(
UPDATE distribute_node_registry SET status = 2
WHERE service_name = ? AND node_address = ? AND status IN (1, 2)
  AND last_heartbeat_time >= NOW(3) - INTERVAL ? MICROSECOND)";

// Params: lock name.
constexpr const char* kSelectLease = R"(
SELECT IFNULL(owner, ''), token, TIMESTAMPDIFF(MICROSECOND, NOW(3), expires_at)
FROM distribute_lease_lock WHERE lock_name = ?)";

constexpr const char* kSchemaVersion = "SELECT MAX(version) FROM dsync_schema_version";

// Events needing attention, by the rules of v_events_needing_attention, one reason per
// part so that each reads its own range of idx_due (status first). Params: limit three
// times.
#define DSYNC_ATTENTION_COLUMNS                                                              \
  "code, topic, status, phase, IFNULL(node_address, ''), attempt, retry_count, "             \
  DSYNC_ISO("modifier_time") ", TIMESTAMPDIFF(SECOND, modifier_time, NOW(3)), IFNULL(last_error, '')"
constexpr const char* kNeedingAttention =
    "(SELECT 'failed', " DSYNC_ATTENTION_COLUMNS " FROM distribute_event WHERE status = 'FAILED' "
    "ORDER BY id DESC LIMIT ?) "
    "UNION ALL (SELECT 'stuck', " DSYNC_ATTENTION_COLUMNS " FROM distribute_event "
    "WHERE status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING') AND modifier_time < NOW(3) - INTERVAL 5 MINUTE "
    "ORDER BY id LIMIT ?) "
    "UNION ALL (SELECT 'compensation_retrying', " DSYNC_ATTENTION_COLUMNS " FROM distribute_event e "
    "WHERE e.phase = 'COMPENSATE' AND e.status IN ('PENDING', 'ASSIGNED', 'COMPENSATING') "
    "AND NOT (e.status <> 'PENDING' AND e.modifier_time < NOW(3) - INTERVAL 5 MINUTE) "
    "AND EXISTS (SELECT 1 FROM distribute_event_step s WHERE s.job_code = e.code AND s.status = 'COMPENSATING' "
    "AND s.compensation_retry_count > 0) ORDER BY e.id LIMIT ?)";

constexpr const char* kCountByStatus = "SELECT status, COUNT(*) FROM distribute_event GROUP BY status";

constexpr const char* kCountByTopicStatus =
    "SELECT topic, status, COUNT(*) FROM distribute_event GROUP BY topic, status";

// A user-supplied value inside an error message: printable ASCII only, at most 40
// characters, so the message stays one safe line whatever was sent.
std::string Quote(const std::string& s) {
  std::string out = "'";
  size_t n = 0;
  for (unsigned char ch : s) {
    if (++n > 40) {
      out += "...";
      break;
    }
    out += (ch >= 0x20 && ch < 0x7f) ? static_cast<char>(ch) : '?';
  }
  return out + "'";
}

// Number of code points when `s` is valid UTF-8 without control characters;
// nullopt (with `why`) otherwise.
std::optional<size_t> CheckText(const std::string& s, std::string* why) {
  size_t chars = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > s.size()) {
      *why = "is not valid UTF-8";
      return std::nullopt;
    }
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = s[i + k];
      if ((cc & 0xc0) != 0x80) {
        *why = "is not valid UTF-8";
        return std::nullopt;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      *why = "is not valid UTF-8";
      return std::nullopt;
    }
    if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
      *why = "contains a control character";
      return std::nullopt;
    }
    ++chars;
    i += len;
  }
  return chars;
}

void RequireText(const std::string& field, const std::string& value, size_t min_chars, size_t max_chars) {
  std::string why;
  auto chars = CheckText(value, &why);
  if (!chars) throw UsageError(field + " " + why);
  if (*chars < min_chars || *chars > max_chars) {
    throw UsageError(field + " must be " + (min_chars ? std::to_string(min_chars) + " to " : "at most ") +
                     std::to_string(max_chars) + " characters (got " + std::to_string(*chars) + ")");
  }
}

std::string OptionalString(const nlohmann::json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return "";
  if (!it->is_string()) throw UsageError(std::string(field) + " must be a string");
  return it->get<std::string>();
}

std::optional<int64_t> OptionalInt(const nlohmann::json& body, const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) throw UsageError(std::string(field) + " must be an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    throw UsageError(std::string(field) + " is out of range");
  }
  return it->get<int64_t>();
}

EventRow RowToEvent(sql::ResultSet& rs) {
  EventRow e;
  e.id = rs.getInt64(1);
  e.code = rs.getString(2);
  e.topic = rs.getString(3);
  e.tenant_id = rs.getString(4);
  e.data_id = rs.getString(5);
  e.status = rs.getString(6);
  e.phase = rs.getString(7);
  e.node_address = rs.getString(8);
  e.priority = rs.getInt(9);
  e.version = rs.getInt(10);
  e.attempt = rs.getInt(11);
  e.retry_count = rs.getInt(12);
  e.max_retry = rs.getInt(13);
  if (!rs.isNull(14)) e.progress = rs.getInt(14);
  e.batch_code = rs.getString(15);
  e.trace_id = rs.getString(16);
  e.payload = rs.getString(17);
  e.result = rs.getString(18);
  e.last_error = rs.getString(19);
  e.create_time = rs.getString(20);
  e.next_run_time = rs.getString(21);
  e.assigned_time = rs.getString(22);
  e.started_time = rs.getString(23);
  e.finished_time = rs.getString(24);
  e.modifier_time = rs.getString(25);
  return e;
}

std::optional<EventRow> ReadEvent(storage::Connection& c, const std::string& code) {
  auto rs = c.Query(kSelectEventByCode, code);
  if (!rs->next()) return std::nullopt;
  return RowToEvent(*rs);
}

// JSON text as JSON when it parses, else as a string; empty text as null.
nlohmann::json JsonOrText(const std::string& text) {
  if (text.empty()) return nullptr;
  auto parsed = nlohmann::json::parse(text, nullptr, false);
  if (!parsed.is_discarded()) return parsed;
  return text;
}

nlohmann::json TextOrNull(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

std::vector<storage::Value> EventValues(const NewEvent& e, const TopicSettings& topic) {
  const int64_t delay_us = e.delay_ms * 1000;
  return {e.tenant_id, e.code, e.data_id, e.topic, e.payload.dump(),
          static_cast<int64_t>(e.priority.value_or(topic.priority)), static_cast<int64_t>(topic.max_retry),
          delay_us, delay_us,
          e.trace_id.empty() ? storage::Value{} : storage::Value{e.trace_id},
          e.batch_code.empty() ? storage::Value{} : storage::Value{e.batch_code}};
}

NodeView ToView(const registry::NodeInfo& n, int64_t in_flight) {
  NodeView v;
  v.node_address = n.node_address;
  v.status = registry::NodeStatusName(n.status);
  v.capacity = n.metadata.capacity;
  v.processing_count = n.metadata.processing_count;
  v.in_flight = in_flight;
  v.load = n.metadata.load;
  v.topics = n.metadata.topics;
  v.heartbeat_age_ms = n.heartbeat_age.count();
  v.metadata_valid = n.metadata_valid;
  v.version = n.metadata.version;
  v.incarnation = n.metadata.incarnation;
  v.datasources = n.metadata.datasources;
  v.datasource_errors = n.metadata.datasource_errors;
  v.bad_topics = n.metadata.bad_topics;
  return v;
}

}  // namespace

bool IsTerminal(const std::string& status) {
  return status == "SUCCESS" || status == "FAILED" || status == "COMPENSATED";
}

NewEvent ParseNewEvent(const nlohmann::json& body) {
  if (!body.is_object()) throw UsageError("the event must be a JSON object");
  static const std::set<std::string> kFields = {"code",    "topic",    "tenant_id", "data_id",
                                                "payload", "priority", "delay_ms",  "trace_id"};
  for (const auto& [key, _] : body.items()) {
    if (!kFields.count(key)) {
      throw UsageError("unknown field " + Quote(key) +
                       " (expected code, topic, tenant_id, data_id, payload, priority, delay_ms, trace_id)");
    }
  }
  NewEvent e;
  e.code = OptionalString(body, "code");
  e.topic = OptionalString(body, "topic");
  e.tenant_id = OptionalString(body, "tenant_id");
  e.data_id = OptionalString(body, "data_id");
  e.trace_id = OptionalString(body, "trace_id");
  if (auto it = body.find("payload"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) throw UsageError("payload must be a JSON object");
    e.payload = *it;
  }
  if (auto p = OptionalInt(body, "priority")) {
    if (*p < -kMaxPriority || *p > kMaxPriority) {
      throw UsageError("priority must be from -1000000 to 1000000");
    }
    e.priority = static_cast<int>(*p);
  }
  if (auto d = OptionalInt(body, "delay_ms")) e.delay_ms = *d;
  return e;
}

nlohmann::json ToJson(const EventRow& e) {
  return {{"id", e.id},
          {"code", e.code},
          {"topic", e.topic},
          {"tenant_id", e.tenant_id},
          {"data_id", e.data_id},
          {"status", e.status},
          {"phase", e.phase},
          {"node_address", TextOrNull(e.node_address)},
          {"priority", e.priority},
          {"version", e.version},
          {"attempt", e.attempt},
          {"retry_count", e.retry_count},
          {"max_retry", e.max_retry},
          {"progress", e.progress ? nlohmann::json(*e.progress) : nlohmann::json(nullptr)},
          {"batch_code", TextOrNull(e.batch_code)},
          {"trace_id", TextOrNull(e.trace_id)},
          {"payload", JsonOrText(e.payload)},
          {"result", JsonOrText(e.result)},
          {"last_error", TextOrNull(e.last_error)},
          {"create_time", TextOrNull(e.create_time)},
          {"next_run_time", TextOrNull(e.next_run_time)},
          {"assigned_time", TextOrNull(e.assigned_time)},
          {"started_time", TextOrNull(e.started_time)},
          {"finished_time", TextOrNull(e.finished_time)},
          {"modifier_time", TextOrNull(e.modifier_time)}};
}

nlohmann::json ToJson(const EventDetail& d) {
  nlohmann::json out = ToJson(d.event);
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : d.steps) {
    steps.push_back({{"id", s.id},
                     {"code", s.code},
                     {"name", s.name},
                     {"type", s.type},
                     {"status", s.status},
                     {"node_address", TextOrNull(s.node_address)},
                     {"parent_step_id", s.parent_step_id ? nlohmann::json(*s.parent_step_id) : nlohmann::json(nullptr)},
                     {"sort", s.sort},
                     {"retry_count", s.retry_count},
                     {"max_retry", s.max_retry},
                     {"compensation_retry_count", s.compensation_retry_count},
                     {"attempt", s.attempt},
                     {"started_at", TextOrNull(s.started_at)},
                     {"executed_at", TextOrNull(s.executed_at)},
                     {"compensated_at", TextOrNull(s.compensated_at)},
                     {"error", TextOrNull(s.error_details)},
                     {"output", JsonOrText(s.output)}});
  }
  nlohmann::json timeline = nlohmann::json::array();
  for (const auto& t : d.timeline) {
    timeline.push_back({{"action", t.action},
                        {"step_code", t.step_code},
                        {"step_name", t.step_name},
                        {"status", t.status},
                        {"started_at", TextOrNull(t.started_at)},
                        {"finished_at", TextOrNull(t.finished_at)},
                        {"node_address", TextOrNull(t.node_address)},
                        {"failures", t.failures},
                        {"attempt", t.attempt},
                        {"error", TextOrNull(t.error)}});
  }
  out["steps"] = std::move(steps);
  out["timeline"] = std::move(timeline);
  out["process_log"] = d.process_log;
  return out;
}

nlohmann::json ToJson(const BatchProgress& b) {
  return {{"batch_code", b.batch_code},
          {"total", b.total},
          {"by_status", b.by_status},
          {"terminal", b.terminal},
          {"percent_done", b.percent_done}};
}

nlohmann::json ToJson(const NodeView& n) {
  return {{"node_address", n.node_address},
          {"status", n.status},
          {"capacity", n.capacity},
          {"in_flight", n.in_flight},
          {"load", n.load},
          {"processing_count", n.processing_count},
          {"topics", n.topics},
          {"heartbeat_age_ms", n.heartbeat_age_ms},
          {"metadata_valid", n.metadata_valid},
          {"version", n.version},
          {"incarnation", n.incarnation},
          {"datasources", n.datasources ? nlohmann::json(*n.datasources) : nlohmann::json(nullptr)},
          {"datasource_errors", n.datasource_errors},
          {"bad_topics", n.bad_topics}};
}

nlohmann::json ToJson(const AttentionRow& a) {
  return {{"code", a.code},
          {"topic", a.topic},
          {"status", a.status},
          {"phase", a.phase},
          {"reason", a.reason},
          {"node_address", TextOrNull(a.node_address)},
          {"attempt", a.attempt},
          {"retry_count", a.retry_count},
          {"modifier_time", TextOrNull(a.modifier_time)},
          {"idle_s", a.idle_s},
          {"last_error", TextOrNull(a.last_error)}};
}

nlohmann::json ToJson(const Health& h) {
  return {{"status", h.database_ok ? "ok" : "unavailable"},
          {"database", {{"ok", h.database_ok}, {"error", TextOrNull(h.database_error)}}},
          {"schema_version", h.schema_version},
          {"lease",
           {{"held", h.lease.held},
            {"owner", TextOrNull(h.lease.owner)},
            {"token", h.lease.token},
            {"expires_in_ms", h.lease.expires_in_ms}}},
          {"live_nodes", h.live_nodes}};
}

EventStore::EventStore(storage::ConnectionPool& pool, const Settings& settings)
    : pool_(pool), settings_(settings) {}

void EventStore::Validate(const NewEvent& e) const {
  RequireText("code", e.code, 1, 64);
  RequireText("topic", e.topic, 1, 50);
  if (!settings_.topics.count(e.topic)) {
    std::string known;
    for (const auto& [name, _] : settings_.topics) known += (known.empty() ? "" : ", ") + name;
    throw UsageError("unknown topic " + Quote(e.topic) + " (configured: " + known + ")");
  }
  RequireText("tenant_id", e.tenant_id, 1, 30);
  RequireText("data_id", e.data_id, 1, 64);
  RequireText("trace_id", e.trace_id, 0, 64);
  RequireText("batch code", e.batch_code, 0, 64);
  if (!e.payload.is_object()) throw UsageError("payload must be a JSON object");
  const size_t payload_bytes = e.payload.dump().size();
  if (static_cast<int64_t>(payload_bytes) > settings_.api.max_body_bytes) {
    throw UsageError("payload is " + std::to_string(payload_bytes) + " bytes; the limit is " +
                     std::to_string(settings_.api.max_body_bytes) + " (api.max_body_bytes)");
  }
  if (e.priority && (*e.priority < -kMaxPriority || *e.priority > kMaxPriority)) {
    throw UsageError("priority must be from -1000000 to 1000000");
  }
  if (e.delay_ms < 0 || e.delay_ms > kMaxDelayMs) {
    throw UsageError("delay_ms must be from 0 to " + std::to_string(kMaxDelayMs) + " (31 days)");
  }
}

ProduceResult EventStore::Produce(const NewEvent& e) {
  Validate(e);
  const TopicSettings& topic = settings_.topics.at(e.topic);
  ProduceResult result = pool_.Run("produce event", [&](storage::Connection& c) {
    try {
      c.Execute(kInsertEvent, storage::Values(EventValues(e, topic)));
      auto row = ReadEvent(c, e.code);
      if (!row) throw DbError(DbError::Kind::kOther, 0, "event " + Quote(e.code) + " vanished after insert");
      return ProduceResult{std::move(*row), true};
    } catch (const sql::SQLException& err) {  // the pool translates it; here only 1062 is ours
      if (storage::TranslateSqlException(err, "produce").kind() != DbError::Kind::kDuplicateKey) throw;
    }
    auto row = ReadEvent(c, e.code);
    if (!row) throw DbError(DbError::Kind::kOther, 0, "event " + Quote(e.code) + " exists but cannot be read");
    return ProduceResult{std::move(*row), false};
  });
  if (result.created && on_produced_) on_produced_();  // wake-ups (issue 19)
  return result;
}

BatchResult EventStore::ProduceBatch(const std::string& batch_code, std::vector<NewEvent> events) {
  RequireText("batch code", batch_code, 1, 64);
  if (events.empty()) throw UsageError("the batch has no events");
  if (events.size() > kMaxBatchEvents) {
    throw UsageError("the batch has " + std::to_string(events.size()) + " events; at most " +
                     std::to_string(kMaxBatchEvents) + " per batch");
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < events.size(); ++i) {
    events[i].batch_code = batch_code;
    try {
      Validate(events[i]);
    } catch (const UsageError& err) {
      throw UsageError("events[" + std::to_string(i) + "]: " + err.what());
    }
    auto [it, fresh] = seen.emplace(events[i].code, i);
    if (!fresh) {
      throw UsageError("events[" + std::to_string(i) + "]: code " + Quote(events[i].code) +
                       " repeats events[" + std::to_string(it->second) + "]");
    }
  }
  BatchResult produced = pool_.Transact("produce batch", [&](storage::Connection& c) {
    BatchResult result{batch_code, 0, 0};
    for (size_t start = 0; start < events.size(); start += kInsertChunk) {
      const size_t n = std::min(kInsertChunk, events.size() - start);
      // Codes already there (a plain read: a producer racing on the same codes can
      // only make this count low; the event itself is never doubled).
      std::vector<storage::Value> codes;
      for (size_t i = 0; i < n; ++i) codes.emplace_back(events[start + i].code);
      auto rs = c.Query("SELECT COUNT(*) FROM distribute_event WHERE code IN (" + storage::Marks(n) + ")",
                        storage::Values(codes));
      const int existing = rs->next() ? rs->getInt(1) : 0;

      std::string sql =
          "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, priority, max_retry, "
          "next_run_time, trace_id, batch_code) VALUES ";
      std::vector<storage::Value> values;
      for (size_t i = 0; i < n; ++i) {
        const NewEvent& e = events[start + i];
        sql += i ? ", " : "";
        sql += kInsertEventRow;
        auto row = EventValues(e, settings_.topics.at(e.topic));
        values.insert(values.end(), row.begin(), row.end());
      }
      sql += " ON DUPLICATE KEY UPDATE id = id";
      c.Execute(sql, storage::Values(values));
      result.existing += existing;
      result.created += static_cast<int>(n) - existing;
    }
    return result;
  });
  if (produced.created > 0 && on_produced_) on_produced_();  // wake-ups (issue 19)
  return produced;
}

BatchProgress EventStore::GetBatch(const std::string& batch_code) {
  RequireText("batch code", batch_code, 1, 64);
  BatchProgress p;
  p.batch_code = batch_code;
  pool_.Run("batch progress", [&](storage::Connection& c) {
    p.by_status.clear();
    auto rs = c.Query(kBatchProgress, batch_code);
    while (rs->next()) p.by_status[rs->getString(1)] = rs->getInt64(2);
  });
  for (const auto& [status, n] : p.by_status) {
    p.total += n;
    if (IsTerminal(status)) p.terminal += n;
  }
  if (p.total == 0) throw NotFoundError("no batch " + Quote(batch_code));
  p.percent_done = 100.0 * static_cast<double>(p.terminal) / static_cast<double>(p.total);
  return p;
}

EventRow EventStore::GetEvent(const std::string& code) {
  auto row = pool_.Run("read event", [&](storage::Connection& c) { return ReadEvent(c, code); });
  if (!row) throw NotFoundError("no event " + Quote(code));
  return std::move(*row);
}

EventDetail EventStore::Get(const std::string& code) {
  EventDetail d;
  d.event = GetEvent(code);
  pool_.Run("read event steps", [&](storage::Connection& c) {
    d.steps.clear();
    d.timeline.clear();
    auto rs = c.Query(kSelectSteps, code);
    while (rs->next()) {
      StepRow s;
      s.id = rs->getInt64(1);
      s.code = rs->getString(2);
      s.name = rs->getString(3);
      s.type = rs->getString(4);
      s.status = rs->getString(5);
      s.node_address = rs->getString(6);
      if (!rs->isNull(7)) s.parent_step_id = rs->getInt64(7);
      s.sort = rs->getInt(8);
      s.retry_count = rs->getInt(9);
      s.max_retry = rs->getInt(10);
      s.compensation_retry_count = rs->getInt(11);
      s.attempt = rs->getInt(12);
      s.started_at = rs->getString(13);
      s.executed_at = rs->getString(14);
      s.compensated_at = rs->getString(15);
      s.error_details = rs->getString(16);
      s.output = rs->getString(17);
      d.steps.push_back(std::move(s));
    }
    auto ts = c.Query(kSelectTimeline, code);
    while (ts->next()) {
      TimelineEntry t;
      t.action = ts->getString(1);
      t.step_code = ts->getString(2);
      t.step_name = ts->getString(3);
      t.status = ts->getString(4);
      t.started_at = ts->getString(5);
      t.finished_at = ts->getString(6);
      t.node_address = ts->getString(7);
      t.error = ts->getString(8);
      t.failures = ts->getInt(9);
      t.attempt = ts->getInt(10);
      d.timeline.push_back(std::move(t));
    }
    auto log = c.QueryString(kSelectProcessLog, code);
    auto parsed = nlohmann::json::parse(log.value_or("[]"), nullptr, false);
    d.process_log = parsed.is_array() ? parsed : nlohmann::json::array();
  });
  return d;
}

EventPage EventStore::List(const EventFilter& f) {
  if (!f.status.empty() && !EventStatuses().count(f.status)) {
    throw UsageError("unknown status " + Quote(f.status) +
                     " (one of PENDING, ASSIGNED, RUNNING, SUCCESS, FAILED, COMPENSATING, COMPENSATED)");
  }
  if (!f.topic.empty()) RequireText("topic", f.topic, 1, 50);
  if (!f.batch_code.empty()) RequireText("batch", f.batch_code, 1, 64);
  if (!f.tenant_id.empty()) RequireText("tenant_id", f.tenant_id, 1, 30);
  if (!f.code_prefix.empty()) RequireText("code prefix", f.code_prefix, 1, 64);
  if (f.limit < 1 || f.limit > 1000) throw UsageError("limit must be from 1 to 1000");
  // Only fixed fragments go into the text; every value is bound.
  std::string sql = "SELECT " DSYNC_EVENT_COLUMNS " FROM distribute_event WHERE id < ?";
  std::vector<storage::Value> values{f.after.value_or(INT64_MAX)};
  if (!f.topic.empty()) {
    sql += " AND topic = ?";
    values.emplace_back(f.topic);
  }
  if (!f.status.empty()) {
    sql += " AND status = ?";
    values.emplace_back(f.status);
  }
  if (!f.batch_code.empty()) {
    sql += " AND batch_code = ?";
    values.emplace_back(f.batch_code);
  }
  if (!f.tenant_id.empty()) {
    sql += " AND tenant_id = ?";
    values.emplace_back(f.tenant_id);
  }
  if (!f.code_prefix.empty()) {
    std::string pattern;  // LIKE's wildcards and the escape character '!', taken literally
    for (char ch : f.code_prefix) {
      if (ch == '%' || ch == '_' || ch == '!') pattern += '!';
      pattern += ch;
    }
    sql += " AND code LIKE ? ESCAPE '!'";
    values.emplace_back(pattern + "%");
  }
  sql += " ORDER BY id DESC LIMIT ?";
  values.emplace_back(static_cast<int64_t>(f.limit) + 1);  // one more: is there a next page?
  EventPage page;
  pool_.Run("list events", [&](storage::Connection& c) {
    page.events.clear();
    auto rs = c.Query(sql, storage::Values(values));
    while (rs->next()) page.events.push_back(RowToEvent(*rs));
  });
  if (static_cast<int>(page.events.size()) > f.limit) {
    page.events.pop_back();
    page.next = page.events.back().id;
  }
  return page;
}

EventRow EventStore::Retry(const std::string& code, RetryFrom from) {
  RequireText("code", code, 1, 64);
  const char* why = from == RetryFrom::kStart ? "operator retry from the start" : "operator retry from the failed step";
  pool_.Transact("retry event", [&](storage::Connection& c) {
    auto rs = c.Query(kLockForRetry, code);
    if (!rs->next()) throw NotFoundError("no event " + Quote(code));
    const int64_t id = rs->getInt64(1);
    const std::string status = rs->getString(2);
    const int version = rs->getInt(3);
    if (status != "FAILED" && status != "COMPENSATED") {
      throw ConflictError("event " + Quote(code) + " is " + status +
                          "; only FAILED or COMPENSATED events can be retried");
    }
    c.Execute(from == RetryFrom::kStart ? kResetAllSteps : kResetUnfinishedSteps, code);
    if (c.Execute(kRetryEvent, "operator", "PENDING", why, id, version) != 1) {
      throw ConflictError("event " + Quote(code) + " changed while retrying it; try again");
    }
  });
  EventRow e = GetEvent(code);
  spdlog::info("EVENT_RETRIED event={} trace={} from={} version={}", e.code, e.trace_id.empty() ? e.code : e.trace_id,
               from == RetryFrom::kStart ? "start" : "failed_step", e.version);
  return e;
}

NodeView EventStore::Drain(const std::string& node_address) {
  RequireText("node address", node_address, 1, 128);
  const int64_t timeout_us = static_cast<int64_t>(settings_.registry.offline_timeout.count()) * 1000;
  auto rows = pool_.Run("drain node", [&](storage::Connection& c) {
    return c.Execute(kDrainNode, settings_.service, node_address, timeout_us);
  });
  if (rows == 0) {
    throw NotFoundError("no live node " + Quote(node_address) + " in service " + Quote(settings_.service));
  }
  spdlog::info("NODE_DRAIN_REQUESTED node={} service={}", node_address, settings_.service);
  for (auto& n : Nodes(false)) {
    if (n.node_address == node_address) return n;
  }
  throw NotFoundError("node " + Quote(node_address) + " went offline while draining");
}

std::vector<NodeView> EventStore::Nodes(bool all) {
  registry::NodeDirectory directory(pool_, settings_.service, settings_.registry.offline_timeout);
  auto nodes = all ? directory.AllNodes() : directory.LiveNodes();
  std::vector<std::string> addresses;
  for (const auto& n : nodes) addresses.push_back(n.node_address);
  // From the event table (the truth), not the nodes' own processing_count.
  std::map<std::string, int64_t> in_flight = pool_.Run(
      "count in-flight events", [&](storage::Connection& c) { return dispatcher::CountInFlight(c, addresses); });
  std::vector<NodeView> out;
  for (const auto& n : nodes) out.push_back(ToView(n, in_flight[n.node_address]));
  return out;
}

Health EventStore::CheckHealth() {
  Health h;
  try {
    pool_.Run("health", [&](storage::Connection& c) {
      h.schema_version = static_cast<int>(c.QueryInt(kSchemaVersion).value_or(0));
      auto rs = c.Query(kSelectLease, dispatcher::DispatcherLockName(settings_.service));
      if (rs->next()) {
        h.lease.owner = rs->getString(1);
        h.lease.token = rs->getInt64(2);
        const int64_t left_us = rs->getInt64(3);
        h.lease.held = !h.lease.owner.empty() && left_us > 0;
        h.lease.expires_in_ms = h.lease.held ? left_us / 1000 : 0;
        if (!h.lease.held) h.lease.owner.clear();
      }
    });
    // Only the count: no in-flight counting for a health probe.
    h.live_nodes = static_cast<int64_t>(
        registry::NodeDirectory(pool_, settings_.service, settings_.registry.offline_timeout).LiveNodes().size());
    h.database_ok = true;
  } catch (const Error& e) {
    h.database_ok = false;
    h.database_error = e.what();
  }
  return h;
}

std::vector<AttentionRow> EventStore::NeedingAttention(int limit_per_reason) {
  if (limit_per_reason < 1 || limit_per_reason > 1000) throw UsageError("limit must be from 1 to 1000");
  const int64_t n = limit_per_reason;
  std::vector<AttentionRow> out;
  pool_.Run("events needing attention", [&](storage::Connection& c) {
    out.clear();
    auto rs = c.Query(kNeedingAttention, n, n, n);
    while (rs->next()) {
      AttentionRow a;
      a.reason = rs->getString(1);
      a.code = rs->getString(2);
      a.topic = rs->getString(3);
      a.status = rs->getString(4);
      a.phase = rs->getString(5);
      a.node_address = rs->getString(6);
      a.attempt = rs->getInt(7);
      a.retry_count = rs->getInt(8);
      a.modifier_time = rs->getString(9);
      a.idle_s = rs->getInt64(10);
      a.last_error = rs->getString(11);
      out.push_back(std::move(a));
    }
  });
  return out;
}

std::map<std::string, int64_t> EventStore::CountByStatus() {
  std::map<std::string, int64_t> out;
  pool_.Run("count events by status", [&](storage::Connection& c) {
    out.clear();
    auto rs = c.Query(kCountByStatus);
    while (rs->next()) out[rs->getString(1)] = rs->getInt64(2);
  });
  return out;
}

std::vector<std::tuple<std::string, std::string, int64_t>> EventStore::CountByTopicStatus() {
  std::vector<std::tuple<std::string, std::string, int64_t>> out;
  pool_.Run("count events", [&](storage::Connection& c) {
    out.clear();
    auto rs = c.Query(kCountByTopicStatus);
    while (rs->next()) out.emplace_back(rs->getString(1), rs->getString(2), rs->getInt64(3));
  });
  return out;
}

}  // namespace dsync::api
