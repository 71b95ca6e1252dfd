// The operations users and operators perform on events, nodes and batches, shared by
// the `dsync` operator commands (produce, events, retry, drain) and the HTTP API.
// Every operation is a few prepared statements on the framework database; nothing
// here keeps state between calls.
//
//   api::EventStore store(pool, app::StoreOptionsFrom(settings));   // app/options.h
//   api::NewEvent e = api::ParseNewEvent(json);         // throws UsageError: bad input
//   auto [event, created] = store.Produce(e);           // idempotent by code
//   api::EventDetail d = store.Get("sync-42");          // throws NotFoundError
//   store.Retry("sync-42", api::RetryFrom::kFailedStep); // throws ConflictError
//
// Input rules (ValidateNewEvent; each violation is a UsageError with one line naming
// the field): code 1..64 characters, not starting with "done:" (batch completion
// codes), without bidi controls or zero-width characters (events/produce.h
// CodeProblem; the same for batch codes), topic one of the config's topics, tenant_id
// 1..30, data_id 1..64, trace_id 0..64, batch code 1..64; every string valid UTF-8
// without control characters (stored byte for byte: SQL only ever sees them as bound
// parameters); payload a JSON object (or absent: {}) of at most max_payload_bytes
// serialised; priority -1000000..1000000 (smaller runs first); delay_ms 0..31 days.
// A rejected event writes nothing; a rejected batch writes none of its events.
//
// Retry semantics (FAILED or COMPENSATED events only; anything else is a
// ConflictError naming the status). A step whose effect is still in place (SUCCESS,
// COMPENSATING, or failed with compensation data) never runs forward again:
//   FAILED while compensating (phase COMPENSATE: a compensation failed for good, or
//                its node kept dying): the compensation is finished, not the forward
//                run redone: PENDING in phase COMPENSATE, the unfinished
//                compensations' retries afresh, reset_count 0, the original failure
//                kept in result. The event ends COMPENSATED (retry it again to run it
//                forward from a clean state) or FAILED again. kStart is refused
//                (ConflictError naming the steps still applied).
//   kStart       every step row goes back to PENDING: the whole plan runs again, each
//                step with its old code as idempotency key. Refused (ConflictError
//                naming them) for a FAILED event with steps still applied.
//   kFailedStep  steps still SUCCESS stay SUCCESS (not run again); the others go back
//                to PENDING. A COMPENSATED event has no SUCCESS step left, so this is
//                the same as kStart for it.
// Otherwise the event becomes PENDING / phase FORWARD with retry_count and reset_count
// 0, version + 1, result and last_error cleared, and a process_log entry {"why":
// "operator retry ..."}; its attempt keeps counting (it fences the next claim). One
// transaction, conditional on the status and version read, so two concurrent retries
// re-drive it once.
//
// Thread safety: thread-safe (the pool is).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/store_options.h"
#include "config/settings.h"
#include "core/metrics.h"
#include "events/batches.h"
#include "events/rows.h"
#include "storage/connection_pool.h"

namespace dsync::api {

struct NewEvent {
  std::string code;
  std::string topic;
  std::string tenant_id;
  std::string data_id;
  nlohmann::json payload = nlohmann::json::object();
  std::optional<int> priority;  // empty: the topic's priority
  int64_t delay_ms = 0;
  std::string trace_id;    // empty: none
  std::string batch_code;  // set by ProduceBatch
};

// Reads one event from JSON ({code, topic, tenant_id, data_id, payload, priority?,
// delay_ms?, trace_id?}); unknown fields are rejected. Throws UsageError.
NewEvent ParseNewEvent(const nlohmann::json& body);

// An event row and a step row as read for people (events/rows.h).
using EventRow = events::EventRow;
using StepRow = events::StepRow;

using TimelineEntry = events::TimelineEntry;

struct EventDetail {
  EventRow event;
  std::vector<StepRow> steps;          // plan order
  std::vector<TimelineEntry> timeline; // forward actions, then compensations as they ran
  nlohmann::json process_log = nlohmann::json::array();
  std::string process_log_error;       // why process_log is not shown (too deep, too big)
  bool steps_truncated = false;        // more than 10000 steps or timeline entries: the first shown
};

bool IsTerminal(const std::string& status);  // SUCCESS, FAILED, COMPENSATED

// Payload and result as JSON when they parse (else as text). Stored JSON nesting deeper
// than kMaxJsonDepth (core/json_limits.h) or above 1 MiB is answered as null with a
// "<field>_error" marker beside it ("payload_error", "result_error", a step's
// "output_error", "process_log_error"), never parsed or rendered in full.
nlohmann::json ToJson(const EventRow& e);
nlohmann::json ToJson(const EventDetail& d);

struct ProduceResult {
  EventRow event;
  bool created = false;  // false: the code existed; `event` is the existing one
};

// A batch's completion event (events/batches.h): produced by the dispatcher leader
// once every event of the batch is terminal, with the batch's counts by status added
// to `payload` under "batch".
struct OnComplete {
  std::string topic;  // a configured topic
  nlohmann::json payload = nlohmann::json::object();
  std::string tenant_id = "0";
};

// Reads {topic, payload?, tenant_id?}; unknown fields are rejected. Throws UsageError.
OnComplete ParseOnComplete(const nlohmann::json& body);

struct BatchResult {
  std::string batch_code;
  int created = 0;
  int existing = 0;  // codes that were already there (left as they were)
};

struct BatchProgress {
  std::string batch_code;
  int64_t total = 0;
  std::map<std::string, int64_t> by_status;  // only statuses present
  int64_t terminal = 0;                      // SUCCESS + FAILED + COMPENSATED
  double percent_done = 0;                   // terminal / total * 100
  // The batch's completion row (events/batches.h), when it asked for a completion
  // event: OPEN, COMPLETED or CONFLICT (with why). JSON: "completion": null or
  // {"status", "code", "conflict"}.
  std::optional<events::BatchState> completion;
};
nlohmann::json ToJson(const BatchProgress& b);

struct EventFilter {
  std::string topic;   // empty: any
  std::string status;  // empty: any; else one of the 7 statuses (UsageError otherwise)
  std::string batch_code;   // empty: any (idx_batch_code)
  std::string tenant_id;    // empty: any (idx_entity_status)
  std::string code_prefix;  // empty: any; codes starting with it, matched literally (uk_code)
  int limit = 50;      // 1..1000
  std::optional<int64_t> after;  // keyset cursor: only ids below it (newest first)
};

struct EventPage {
  std::vector<EventRow> events;     // newest first (id descending)
  std::optional<int64_t> next;      // cursor for the next page; empty at the end
};

enum class RetryFrom { kStart, kFailedStep };

// An event that needs an operator's look (the rules of v_events_needing_attention,
// events/rows.h): reason "failed" (FAILED), "stuck" (ASSIGNED/RUNNING/COMPENSATING, no
// activity for 5 minutes), "compensation_retrying" (a compensation failed and is
// retried), and for PENDING events that cannot make progress "paused" (its topic is
// paused), "unknown_topic",
// "unroutable", "no_dispatcher_for_service", "held_behind" (blocker_code names the
// blocker, detail its reason) and "delayed" (holds later events back until its due
// time). JSON: detail, blocker_code and next_run_time are null when empty.
struct AttentionRow {
  std::string code, topic, status, phase, reason, node_address, modifier_time, last_error;
  int attempt = 0, retry_count = 0;
  int64_t idle_s = 0;
  std::string detail, blocker_code, service, tenant_id, data_id, next_run_time;
};
nlohmann::json ToJson(const AttentionRow& a);

// The reason of POST /v1/events/{code}/cancel: {"reason": "..."} or {} (empty: none
// given); unknown fields are rejected. Throws UsageError.
std::string ParseCancelReason(const nlohmann::json& body);

struct NodeView {
  std::string node_address, status;  // online | draining | offline
  int capacity = 0, processing_count = 0;
  int64_t in_flight = 0;             // counted from distribute_event
  double load = 0;
  std::vector<std::string> topics;
  int64_t heartbeat_age_ms = 0;
  bool metadata_valid = true;
  std::string version, incarnation;
  // Datasources the node reached at its last check; nullopt: it does not report them
  // (an older node, taken as reaching all). JSON: null then.
  std::optional<std::vector<std::string>> datasources;
  std::map<std::string, std::string> datasource_errors;  // name -> why not reached
  std::map<std::string, std::string> bad_topics;         // topic -> why its plan failed there
  // Events the sweeper handed back because this node did not claim them, and when it
  // last did (empty: never). JSON: not_claimed {count, last} (last null when never).
  int64_t not_claimed_count = 0;
  std::string last_not_claimed_time;
};
nlohmann::json ToJson(const NodeView& n);

struct LeaseView {
  bool held = false;       // an owner holds an unexpired lease
  std::string owner;       // empty when free
  int64_t token = 0;
  int64_t expires_in_ms = 0;
};

struct Health {
  bool database_ok = false;
  std::string database_error;  // one line when not ok
  int schema_version = 0;
  LeaseView lease;
  int64_t live_nodes = 0;
};
nlohmann::json ToJson(const Health& h);

class EventStore {
 public:
  // `options` gives the topics (for validation), the service, the payload limit and
  // the offline timeout.
  EventStore(storage::ConnectionPool& pool, StoreOptions options);

  // What the store was built with (the HTTP server's control and verify use both).
  const StoreOptions& options() const { return options_; }
  storage::ConnectionPool& pool() { return pool_; }

  // Throws UsageError for bad input (see the rules above), DbError.
  void Validate(const NewEvent& e) const;

  // Checks a batch's completion event as the event it will become (topic configured,
  // tenant, payload). Throws UsageError ("on_complete: ...").
  void ValidateOnComplete(const std::string& batch_code, const OnComplete& on_complete) const;

  // One event. Idempotent by code: a second call returns the stored event and
  // created=false whatever else it carries.
  ProduceResult Produce(const NewEvent& e);

  // Many events under one batch code, in one transaction (all validated first; any
  // invalid event rejects the whole batch with its index in the message). Codes that
  // exist already are left untouched and counted as existing. At most 10,000 events.
  // With `on_complete`, the batch's completion event is recorded in the same
  // transaction (distribute_batch; a batch already recorded keeps its first one):
  // call it with the batch's last events, when earlier ones were produced by earlier
  // calls.
  BatchResult ProduceBatch(const std::string& batch_code, std::vector<NewEvent> events,
                           const std::optional<OnComplete>& on_complete = std::nullopt);

  // Called after Produce/ProduceBatch committed new events (the dispatcher's wake-up,
  // dispatcher/dispatcher_waker.h). Set once, before use.
  void OnProduced(std::function<void()> hook) { on_produced_ = std::move(hook); }

  // Progress of the service's batch by one GROUP BY, and its completion row. Throws
  // NotFoundError when no event of the service has it.
  BatchProgress GetBatch(const std::string& batch_code);

  // Throws NotFoundError.
  EventRow GetEvent(const std::string& code);
  EventDetail Get(const std::string& code);

  EventPage List(const EventFilter& filter);

  // See "Retry semantics" above. Returns the event as it now is. Throws
  // NotFoundError, ConflictError.
  EventRow Retry(const std::string& code, RetryFrom from);

  // Marks a live node of the service draining (status 2): it takes no new events,
  // finishes what it holds and exits. Idempotent. Throws NotFoundError when the
  // service has no online or draining node at that address.
  NodeView Drain(const std::string& node_address);

  // Nodes of the service (all rows with `all`, else live only), with in-flight counts.
  std::vector<NodeView> Nodes(bool all);

  // Events needing attention, at most `limit_per_reason` of each reason, failed first
  // (newest first), then stuck, then compensations retrying. Three index range reads
  // (idx_due by status), never a scan of finished events. Throws DbError.
  std::vector<AttentionRow> NeedingAttention(int limit_per_reason);

  // Events needing attention by reason, each counted up to `cap` (events/rows.h
  // CountNeedingAttention), every reason present. Throws DbError.
  std::map<std::string, int64_t> CountNeedingAttention(int64_t cap);

  // Ends an event that will never run (events/cancel.h): PENDING, or ASSIGNED to a node
  // that is not live, not started, -> FAILED with last_error "cancelled: <reason>". `reason` 1..500
  // characters of clean text (empty: "no reason given"). Returns the event as it now
  // is. Throws UsageError, NotFoundError, ConflictError (it started, is finished or
  // compensating, or changed meanwhile: the message says which).
  EventRow Cancel(const std::string& code, const std::string& reason);

  // Never throws: a database failure is reported in the result.
  Health CheckHealth();

  // Event counts by status: one index-only GROUP BY that streams along idx_due (no
  // temporary table), about 3x cheaper than adding the topic on a big table.
  std::map<std::string, int64_t> CountByStatus();

  // Event counts by (topic, status), for /metrics. One index-only GROUP BY.
  std::vector<std::tuple<std::string, std::string, int64_t>> CountByTopicStatus();

 private:
  storage::ConnectionPool& pool_;
  const StoreOptions options_;
  std::function<void()> on_produced_;
};

// The families /metrics reads from the framework database on each scrape
// (dsync_database_up, schema version, lease, events by topic and status, nodes);
// api/store_metrics.cc. A database failure leaves out what it could not read.
void WriteDatabaseMetrics(EventStore& store, metrics::TextWriter& w);

}  // namespace dsync::api
