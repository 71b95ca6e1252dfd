#include "api/event_store.h"

#include <algorithm>
#include <set>

#include <spdlog/spdlog.h>

#include "control/scheduler.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "dispatcher/lease_lock.h"
#include "events/assign.h"
#include "events/batches.h"
#include "events/cancel.h"
#include "events/produce.h"
#include "events/retry.h"
#include "events/status.h"
#include "registry/node_directory.h"

namespace dsync::api {
namespace {

constexpr size_t kMaxBatchEvents = 10000;
constexpr int64_t kMaxDelayMs = 31LL * 24 * 3600 * 1000;
constexpr int kMaxPriority = 1000000;

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

// Codes are keys compared byte for byte: nothing in them may hide (events/produce.h).
void RequireCode(const std::string& field, const std::string& value) {
  const std::string why = events::CodeProblem(value);
  if (!why.empty()) throw UsageError(field + " " + why);
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

std::optional<EventRow> ReadEvent(storage::Connection& c, const std::string& code) {
  return events::ReadEvent(c, code);
}

// Stored JSON larger than this is not rendered (a row written by plain SQL may hold up
// to max_allowed_packet; a page of such rows would be rendered several times over).
constexpr size_t kMaxRenderedJsonBytes = 1 << 20;
// Steps (and timeline entries) shown of one event; plans have a handful, child steps
// (one per chunk) a few thousand.
constexpr size_t kMaxShownSteps = 10000;

// Sets out[key] to stored JSON text: JSON when it parses, else the text as a string,
// empty text as null. Text nesting deeper than kMaxJsonDepth or larger than
// kMaxRenderedJsonBytes is not rendered: out[key] is null and out[key + "_error"] says
// why (a hostile producer's row is answered, not crashed on).
void PutStoredJson(nlohmann::json& out, const std::string& key, const std::string& text) {
  if (text.size() > kMaxRenderedJsonBytes) {
    out[key] = nullptr;
    out[key + "_error"] = key + " is " + std::to_string(text.size()) + " bytes (more than " +
                          std::to_string(kMaxRenderedJsonBytes) + "); not rendered";
    return;
  }
  StoredJson parsed = ParseStoredJson(text, key);
  switch (parsed.problem) {
    case StoredJson::kNone: out[key] = std::move(parsed.value); return;
    case StoredJson::kEmpty: out[key] = text.empty() ? nlohmann::json(nullptr) : nlohmann::json(text); return;
    case StoredJson::kInvalid: out[key] = text; return;
    case StoredJson::kTooDeep:
      out[key] = nullptr;
      out[key + "_error"] = parsed.message + "; not rendered";
      return;
  }
}

nlohmann::json TextOrNull(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

events::NewEventRow EventValues(const NewEvent& e, const TopicSettings& topic, const std::string& service) {
  events::NewEventRow r;
  r.service = service;
  r.tenant_id = e.tenant_id;
  r.code = e.code;
  r.data_id = e.data_id;
  r.topic = e.topic;
  r.payload = e.payload.dump();
  r.priority = e.priority.value_or(topic.priority);
  r.max_retry = topic.max_retry;
  r.delay_us = e.delay_ms * 1000;
  r.trace_id = e.trace_id;
  r.batch_code = e.batch_code;
  return r;
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
  v.not_claimed_count = n.not_claimed_count;
  v.last_not_claimed_time = n.last_not_claimed_time;
  return v;
}

}  // namespace

bool IsTerminal(const std::string& status) {
  const std::optional<events::EventStatus> s = events::ParseEventStatus(status);
  return s && events::IsTerminal(*s);
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
  nlohmann::json out = {{"id", e.id},
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
          {"reset_count", e.reset_count},
          {"route", TextOrNull(e.route)},
          {"max_retry", e.max_retry},
          {"progress", e.progress ? nlohmann::json(*e.progress) : nlohmann::json(nullptr)},
          {"batch_code", TextOrNull(e.batch_code)},
          {"service", e.service},
          {"trace_id", TextOrNull(e.trace_id)},
          {"last_error", TextOrNull(e.last_error)},
          {"create_time", TextOrNull(e.create_time)},
          {"next_run_time", TextOrNull(e.next_run_time)},
          {"assigned_time", TextOrNull(e.assigned_time)},
          {"started_time", TextOrNull(e.started_time)},
          {"finished_time", TextOrNull(e.finished_time)},
          {"modifier_time", TextOrNull(e.modifier_time)}};
  PutStoredJson(out, "payload", e.payload);
  PutStoredJson(out, "result", e.result);
  return out;
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
                     {"error", TextOrNull(s.error_details)}});
    PutStoredJson(steps.back(), "output", s.output);
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
  if (!d.process_log_error.empty()) out["process_log_error"] = d.process_log_error;
  if (d.steps_truncated) out["steps_truncated"] = "only the first 10000 steps and timeline entries are shown";
  return out;
}

nlohmann::json ToJson(const BatchProgress& b) {
  return {{"batch_code", b.batch_code},
          {"total", b.total},
          {"by_status", b.by_status},
          {"terminal", b.terminal},
          {"percent_done", b.percent_done},
          {"completion", b.completion ? nlohmann::json{{"status", b.completion->status},
                                                      {"code", TextOrNull(b.completion->completion_code)},
                                                      {"conflict", TextOrNull(b.completion->conflict)}}
                                      : nlohmann::json(nullptr)}};
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
          {"bad_topics", n.bad_topics},
          {"not_claimed", {{"count", n.not_claimed_count}, {"last", TextOrNull(n.last_not_claimed_time)}}}};
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
          {"last_error", TextOrNull(a.last_error)},
          {"detail", TextOrNull(a.detail)},
          {"blocker_code", TextOrNull(a.blocker_code)},
          {"service", a.service},
          {"tenant_id", a.tenant_id},
          {"data_id", a.data_id},
          {"next_run_time", TextOrNull(a.next_run_time)}};
}

std::string ParseCancelReason(const nlohmann::json& body) {
  if (!body.is_object()) throw UsageError("the cancel body must be a JSON object {\"reason\": ...}");
  for (const auto& [key, _] : body.items()) {
    if (key != "reason") throw UsageError("unknown field (expected reason)");
  }
  return OptionalString(body, "reason");
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

EventStore::EventStore(storage::ConnectionPool& pool, StoreOptions options)
    : pool_(pool), options_(std::move(options)) {}

void EventStore::Validate(const NewEvent& e) const {
  RequireCode("code", e.code);
  RequireText("code", e.code, 1, 64);
  if (events::IsReservedCode(e.code)) {
    throw UsageError("code " + Quote(e.code) + " starts with '" + std::string(events::kReservedCodePrefix) +
                     "', which is reserved for batch completion events");
  }
  // issue 37: a schedule's tick events (control/scheduler.h), so no producer can take a tick's code first.
  if (e.code.starts_with(control::kScheduleCodePrefix)) {
    throw UsageError("code " + Quote(e.code) + " starts with '" + std::string(control::kScheduleCodePrefix) +
                     "', which is reserved for scheduled events (config schedules)");
  }
  RequireText("topic", e.topic, 1, 50);
  if (!options_.topics.count(e.topic)) {
    std::string known;
    for (const auto& [name, _] : options_.topics) known += (known.empty() ? "" : ", ") + name;
    throw UsageError("unknown topic " + Quote(e.topic) + " (configured: " + known + ")");
  }
  RequireText("tenant_id", e.tenant_id, 1, 30);
  RequireText("data_id", e.data_id, 1, 64);
  RequireText("trace_id", e.trace_id, 0, 64);
  RequireCode("batch code", e.batch_code);
  RequireText("batch code", e.batch_code, 0, 64);
  if (!e.payload.is_object()) throw UsageError("payload must be a JSON object");
  const size_t payload_bytes = e.payload.dump().size();
  if (static_cast<int64_t>(payload_bytes) > options_.max_payload_bytes) {
    throw UsageError("payload is " + std::to_string(payload_bytes) + " bytes; the limit is " +
                     std::to_string(options_.max_payload_bytes) + " (api.max_body_bytes)");
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
  const TopicSettings& topic = options_.topics.at(e.topic);
  ProduceResult result = pool_.Run("produce event", [&](storage::Connection& c) {
    const bool created = events::InsertEvent(c, EventValues(e, topic, options_.service));
    auto row = ReadEvent(c, e.code);
    if (!row) {
      throw DbError(DbError::Kind::kOther, 0,
                    "event " + Quote(e.code) + (created ? " vanished after insert" : " exists but cannot be read"));
    }
    return ProduceResult{std::move(*row), created};
  });
  if (result.created && on_produced_) on_produced_();  // wake-ups (issue 19)
  return result;
}

OnComplete ParseOnComplete(const nlohmann::json& body) {
  if (!body.is_object()) throw UsageError("on_complete must be a JSON object {topic, payload?, tenant_id?}");
  OnComplete o;
  for (const auto& [key, value] : body.items()) {
    if (key == "topic") {
      if (!value.is_string()) throw UsageError("on_complete.topic must be a string");
      o.topic = value.get<std::string>();
    } else if (key == "payload") {
      if (!value.is_object()) throw UsageError("on_complete.payload must be a JSON object");
      o.payload = value;
    } else if (key == "tenant_id") {
      if (!value.is_string()) throw UsageError("on_complete.tenant_id must be a string");
      o.tenant_id = value.get<std::string>();
    } else {
      throw UsageError("on_complete: unknown field (expected topic, payload, tenant_id)");
    }
  }
  if (o.topic.empty()) throw UsageError("on_complete.topic is required");
  return o;
}

void EventStore::ValidateOnComplete(const std::string& batch_code, const OnComplete& on_complete) const {
  // Checked as the event it will become (topic configured, sizes, payload object),
  // with a stand-in code: the real one is derived, and reserved for the completer.
  NewEvent probe;
  probe.code = "on-complete";
  probe.topic = on_complete.topic;
  probe.tenant_id = on_complete.tenant_id;
  probe.data_id = batch_code;
  probe.payload = on_complete.payload;
  try {
    Validate(probe);
  } catch (const UsageError& err) {
    throw UsageError(std::string("on_complete: ") + err.what());
  }
}

BatchResult EventStore::ProduceBatch(const std::string& batch_code, std::vector<NewEvent> events,
                                     const std::optional<OnComplete>& on_complete) {
  RequireCode("batch code", batch_code);
  RequireText("batch code", batch_code, 1, 64);
  std::optional<events::BatchCompletionRow> completion;
  if (on_complete) {
    ValidateOnComplete(batch_code, *on_complete);
    completion = events::BatchCompletionRow{batch_code, on_complete->tenant_id, on_complete->topic,
                                            on_complete->payload.dump(), std::nullopt, options_.service};
  }
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
  std::vector<events::NewEventRow> rows;
  rows.reserve(events.size());
  for (const NewEvent& e : events) rows.push_back(EventValues(e, options_.topics.at(e.topic), options_.service));
  BatchResult produced = pool_.Transact("produce batch", [&](storage::Connection& c) {
    const int existing = events::InsertEvents(c, rows);
    if (completion) events::InsertBatchCompletion(c, *completion);
    return BatchResult{batch_code, static_cast<int>(rows.size()) - existing, existing};
  });
  if (produced.created > 0 && on_produced_) on_produced_();  // wake-ups (issue 19)
  return produced;
}

BatchProgress EventStore::GetBatch(const std::string& batch_code) {
  RequireText("batch code", batch_code, 1, 64);
  BatchProgress p;
  p.batch_code = batch_code;
  pool_.Run("batch progress", [&](storage::Connection& c) {
    p.by_status = events::CountBatchEvents(c, options_.service, batch_code);
    p.completion = events::ReadBatchState(c, options_.service, batch_code);
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
    // One more than shown: were there more? (Rows written by hand may be any number.)
    d.steps = events::LoadSteps(c, code, kMaxShownSteps + 1);
    d.timeline = events::ReadTimeline(c, code, kMaxShownSteps + 1);
    if (d.steps.size() > kMaxShownSteps || d.timeline.size() > kMaxShownSteps) {
      d.steps.resize(std::min(d.steps.size(), kMaxShownSteps));
      d.timeline.resize(std::min(d.timeline.size(), kMaxShownSteps));
      d.steps_truncated = true;
    }
    auto log = events::ReadProcessLog(c, code);
    const std::string text = log.value_or("[]");
    if (text.size() > kMaxRenderedJsonBytes) {
      d.process_log_error = "process_log is " + std::to_string(text.size()) + " bytes (more than " +
                            std::to_string(kMaxRenderedJsonBytes) + "); not rendered";
      return;
    }
    StoredJson parsed = ParseStoredJson(text, "process_log");
    if (parsed.problem == StoredJson::kTooDeep) {
      d.process_log_error = parsed.message + "; not rendered";
    } else if (parsed.value.is_array()) {
      d.process_log = std::move(parsed.value);
    }
  });
  return d;
}

EventPage EventStore::List(const EventFilter& f) {
  if (!f.status.empty() && !events::ParseEventStatus(f.status)) {
    throw UsageError("unknown status " + Quote(f.status) +
                     " (one of " + events::EventStatusList() + ")");
  }
  if (!f.topic.empty()) RequireText("topic", f.topic, 1, 50);
  if (!f.batch_code.empty()) RequireText("batch", f.batch_code, 1, 64);
  if (!f.tenant_id.empty()) RequireText("tenant_id", f.tenant_id, 1, 30);
  if (!f.code_prefix.empty()) RequireText("code prefix", f.code_prefix, 1, 64);
  if (f.limit < 1 || f.limit > 1000) throw UsageError("limit must be from 1 to 1000");
  EventPage page;
  // One more than asked: is there a next page?
  page.events = pool_.Run("list events", [&](storage::Connection& c) {
    return events::ListEvents(c, {f.after.value_or(INT64_MAX), f.topic, f.status, f.batch_code, f.tenant_id,
                                  f.code_prefix, f.limit + 1});
  });
  if (static_cast<int>(page.events.size()) > f.limit) {
    page.events.pop_back();
    page.next = page.events.back().id;
  }
  return page;
}

EventRow EventStore::Retry(const std::string& code, RetryFrom from) {
  RequireText("code", code, 1, 64);
  std::string why = from == RetryFrom::kStart ? "operator retry from the start" : "operator retry from the failed step";
  pool_.Transact("retry event", [&](storage::Connection& c) {
    std::optional<events::RetryTarget> target = events::LockForRetry(c, code);
    if (!target) throw NotFoundError("no event " + Quote(code));
    if (target->status != events::ToText(events::EventStatus::kFailed) && target->status != events::ToText(events::EventStatus::kCompensated)) {
      throw ConflictError("event " + Quote(code) + " is " + target->status +
                          "; only FAILED or COMPENSATED events can be retried");
    }
    // A step whose effect is still in place never runs forward again ("Retry
    // semantics"): a compensation that did not finish is finished first.
    const std::vector<events::AppliedStep> applied =
        target->status == events::ToText(events::EventStatus::kFailed) ? events::ReadAppliedSteps(c, code) : std::vector<events::AppliedStep>{};
    if (target->status == events::ToText(events::EventStatus::kFailed) && target->phase == "COMPENSATE") {
      if (from == RetryFrom::kStart) {
        throw ConflictError("event " + Quote(code) + " failed while compensating; steps still applied: " +
                            (applied.empty() ? std::string("none") : events::DescribeApplied(applied)) +
                            "; retry it without --from start to finish the compensation first");
      }
      why = "operator retry: finishing the compensation (still applied: " +
            (applied.empty() ? std::string("none") : events::DescribeApplied(applied)) + ")";
      if (!events::ResumeCompensation(c, target->id, target->version, code, why)) {
        throw ConflictError("event " + Quote(code) + " changed while retrying it; try again");
      }
      return;
    }
    if (from == RetryFrom::kStart && !applied.empty()) {
      throw ConflictError("event " + Quote(code) + ": steps " + events::DescribeApplied(applied) +
                          " are applied; --from start would apply them twice; retry it from the failed step");
    }
    events::ResetStepsForRetry(c, code, from == RetryFrom::kStart);
    if (!events::RetryEvent(c, target->id, target->version, why)) {
      throw ConflictError("event " + Quote(code) + " changed while retrying it; try again");
    }
  });
  EventRow e = GetEvent(code);
  spdlog::info("EVENT_RETRIED event={} trace={} from={} version={}", e.code, e.trace_id.empty() ? e.code : e.trace_id,
               e.phase == "COMPENSATE" ? "compensation" : from == RetryFrom::kStart ? "start" : "failed_step",
               e.version);
  return e;
}

NodeView EventStore::Drain(const std::string& node_address) {
  RequireText("node address", node_address, 1, 128);
  const int64_t timeout_us = static_cast<int64_t>(options_.offline_timeout.count()) * 1000;
  auto rows = pool_.Run("drain node", [&](storage::Connection& c) {
    return c.Execute(kDrainNode, options_.service, node_address, timeout_us);
  });
  if (rows == 0) {
    throw NotFoundError("no live node " + Quote(node_address) + " in service " + Quote(options_.service));
  }
  spdlog::info("NODE_DRAIN_REQUESTED node={} service={}", node_address, options_.service);
  for (auto& n : Nodes(false)) {
    if (n.node_address == node_address) return n;
  }
  throw NotFoundError("node " + Quote(node_address) + " went offline while draining");
}

std::vector<NodeView> EventStore::Nodes(bool all) {
  registry::NodeDirectory directory(pool_, options_.service, options_.offline_timeout);
  auto nodes = all ? directory.AllNodes() : directory.LiveNodes();
  std::vector<std::string> addresses;
  for (const auto& n : nodes) addresses.push_back(n.node_address);
  // From the event table (the truth), not the nodes' own processing_count.
  std::map<std::string, int64_t> in_flight = pool_.Run(
      "count in-flight events", [&](storage::Connection& c) { return events::CountInFlight(c, options_.service, addresses); });
  std::vector<NodeView> out;
  for (const auto& n : nodes) out.push_back(ToView(n, in_flight[n.node_address]));
  return out;
}

Health EventStore::CheckHealth() {
  Health h;
  try {
    pool_.Run("health", [&](storage::Connection& c) {
      h.schema_version = static_cast<int>(c.QueryInt(kSchemaVersion).value_or(0));
      auto rs = c.Query(kSelectLease, dispatcher::DispatcherLockName(options_.service));
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
        registry::NodeDirectory(pool_, options_.service, options_.offline_timeout).LiveNodes().size());
    h.database_ok = true;
  } catch (const Error& e) {
    h.database_ok = false;
    h.database_error = e.what();
  }
  return h;
}

std::vector<AttentionRow> EventStore::NeedingAttention(int limit_per_reason) {
  if (limit_per_reason < 1 || limit_per_reason > 1000) throw UsageError("limit must be from 1 to 1000");
  auto entries = pool_.Run("events needing attention", [&](storage::Connection& c) {
    return events::ReadNeedingAttention(c, limit_per_reason);
  });
  std::vector<AttentionRow> out;
  out.reserve(entries.size());
  for (auto& a : entries) {
    out.push_back(AttentionRow{std::move(a.code), std::move(a.topic), std::move(a.status), std::move(a.phase),
                               std::move(a.reason), std::move(a.node_address), std::move(a.modifier_time),
                               std::move(a.last_error), a.attempt, a.retry_count, a.idle_s,
                               std::move(a.detail), std::move(a.blocker_code), std::move(a.service),
                               std::move(a.tenant_id), std::move(a.data_id), std::move(a.next_run_time)});
  }
  return out;
}

std::map<std::string, int64_t> EventStore::CountNeedingAttention(int64_t cap) {
  return pool_.Run("count events needing attention",
                   [&](storage::Connection& c) { return events::CountNeedingAttention(c, cap); });
}

EventRow EventStore::Cancel(const std::string& code, const std::string& reason_given) {
  RequireText("code", code, 1, 64);
  const std::string reason = reason_given.empty() ? "no reason given" : reason_given;
  RequireText("reason", reason, 1, 500);
  std::string from;
  pool_.Transact("cancel event", [&](storage::Connection& c) {
    std::optional<events::CancelTarget> t = events::ReadCancelTarget(c, code, options_.offline_timeout);
    if (!t) throw NotFoundError("no event " + Quote(code));
    from = t->status;
    if (IsTerminal(t->status)) {
      throw ConflictError("event " + Quote(code) + " is already " + t->status + "; nothing to cancel");
    }
    if (t->status != events::ToText(events::EventStatus::kPending) && t->status != events::ToText(events::EventStatus::kAssigned)) {
      throw ConflictError("event " + Quote(code) + " is " + t->status +
                          (t->node_address.empty() ? "" : " on node " + t->node_address) +
                          "; only PENDING or ASSIGNED events that have not started can be cancelled "
                          "(drain or stop the node; the sweeper hands a dead node's events back)");
    }
    if (t->status == events::ToText(events::EventStatus::kAssigned) && t->held_by_live_node) {
      throw ConflictError("event " + Quote(code) + " is ASSIGNED to live node " + t->node_address +
                          ", which may be starting it; if the node does not claim it the sweeper hands it back "
                          "(claim_timeout_ms), then cancel it");
    }
    if (t->phase != "FORWARD") {
      throw ConflictError("event " + Quote(code) + " is compensating; cancelling would leave its done steps "
                          "applied: let the compensation finish");
    }
    if (!t->started_steps.empty()) {
      std::string steps;
      for (const auto& st : t->started_steps) steps += (steps.empty() ? "" : ", ") + st;
      throw ConflictError("event " + Quote(code) + " has steps that ran (" + steps +
                          "); cancelling could leave their effects: it finishes by running or compensating");
    }
    if (!events::CancelEvent(c, t->id, t->version, reason, options_.offline_timeout)) {
      throw ConflictError("event " + Quote(code) + " changed while cancelling it (a node may have claimed it); "
                          "look again: dsync events show " + code);
    }
  });
  EventRow e = GetEvent(code);
  spdlog::info("EVENT_CANCELLED event={} trace={} from={} version={} reason=\"{}\"", e.code,
               e.trace_id.empty() ? e.code : e.trace_id, from, e.version, reason);
  return e;
}

std::map<std::string, int64_t> EventStore::CountByStatus() {
  return pool_.Run("count events by status", [&](storage::Connection& c) { return events::CountByStatus(c); });
}

std::vector<std::tuple<std::string, std::string, int64_t>> EventStore::CountByTopicStatus() {
  return pool_.Run("count events", [&](storage::Connection& c) { return events::CountByTopicStatus(c); });
}

}  // namespace dsync::api
