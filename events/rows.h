// The row readers: one for an event row (EventRow) and one for a step row (StepRow),
// used by everyone who reads them (the API and operator commands, the saga engine),
// and the read-only queries over the event table (lists, counts, the process log).
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "storage/connection.h"

namespace dsync::events {

// distribute_event as read for people (times as UTC text).
struct EventRow {
  int64_t id = 0;
  std::string code, topic, tenant_id, data_id, status, phase;
  std::string node_address;  // empty when unowned
  int priority = 0, version = 0, attempt = 0, retry_count = 0, max_retry = 0;
  std::optional<int> progress;
  std::string batch_code, trace_id;
  std::string payload;  // raw text as stored
  std::string result;   // raw JSON text, empty when none
  std::string last_error;
  std::string create_time, next_run_time, assigned_time, started_time, finished_time,
      modifier_time;  // "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC); empty when NULL
  std::string service;
  int reset_count = 0;  // resets not charged to retries (V016; max_resets bounds them)
  std::string route;    // what its next step needs, set by a hand-on (V018); empty when NULL
};

// The event with that code; nullopt when there is none. Throws DbError.
std::optional<EventRow> ReadEvent(storage::Connection& c, const std::string& code);

// Which events ListEvents returns; an empty text matches any.
struct EventListFilter {
  int64_t before = INT64_MAX;  // keyset cursor: ids below it
  std::string topic;
  std::string status;
  std::string batch_code;   // idx_batch_code
  std::string tenant_id;    // idx_entity_status
  std::string code_prefix;  // codes starting with it, taken literally (uk_code)
  int limit = 50;
};

// Events newest first (id descending) matching the filter, at most `limit`. Every value
// is bound. Throws DbError.
std::vector<EventRow> ListEvents(storage::Connection& c, const EventListFilter& f);

// An event needing attention by the rules of v_events_needing_attention (V017, V022):
// `failed`, `stuck` (in flight, idle 5 minutes), `compensation_retrying`, and for
// PENDING events `paused` (its topic is paused: dsync_topic_pause; detail says by whom,
// when and why), `unknown_topic`, `unroutable`, `no_dispatcher_for_service`,
// `held_behind` (blocker_code names the blocker, detail its reason) and `delayed`
// (due later while later events of its entity wait for it; detail gives the due time);
// and captures (V026): `capture_failed`, `capture_table_paused` (one per table),
// `capture_lagging` (lag above captures.<name>.lag_bound_s), with code 'capture:<name>'
// ('capture:<name>:<table>'), status the capture's state, data_id its name.
struct AttentionEntry {
  std::string reason, code, topic, status, phase, node_address;
  int attempt = 0, retry_count = 0;
  std::string modifier_time;
  int64_t idle_s = 0;
  std::string last_error;
  std::string detail;        // empty for failed, stuck, compensation_retrying
  std::string blocker_code;  // held_behind only
  std::string service, tenant_id, data_id;
  std::string next_run_time;  // UTC text
};

// At most `limit_per_reason` events of each reason, one statement per reason, each
// reading only the rows its reason can hold: FAILED rows (newest first), in-flight
// rows, the PENDING rows of recorded unroutable/unknown topics, PENDING rows due
// later, and the held events found from their blockers (at most 1,000 blockers are
// followed). `no_dispatcher_for_service` reads the PENDING range of idx_due with one
// lease probe per service. Throws DbError.
std::vector<AttentionEntry> ReadNeedingAttention(storage::Connection& c, int64_t limit_per_reason);

// Events needing attention by reason (every reason present, 0 when none), each
// counted up to `cap` (a count of `cap` means "at least"), by the same statements as
// ReadNeedingAttention. For /metrics. Throws DbError.
std::map<std::string, int64_t> CountNeedingAttention(storage::Connection& c, int64_t cap);

// The reasons, in the order ReadNeedingAttention lists them.
const std::vector<std::string>& AttentionReasons();

// The service a plain INSERT INTO distribute_event that names none belongs to: the
// column default of distribute_event.service (V014); nullopt before V014. Throws DbError.
std::optional<std::string> ReadDefaultService(storage::Connection& c);

// Events by status (a covering read of idx_due). Throws DbError.
std::map<std::string, int64_t> CountByStatus(storage::Connection& c);

// distribute_event_step, every column the engine and people need.
struct StepRow {
  int64_t id = 0;
  std::string code;
  std::optional<int64_t> parent_step_id;
  int sort = 0;
  std::string name;
  std::string type;
  std::string status;
  std::string node_address;  // empty when NULL
  int retry_count = 0;
  int compensation_retry_count = 0;
  int max_retry = 0;
  int attempt = 0;
  bool executed = false;  // executed_at IS NOT NULL
  std::string started_at, executed_at, compensated_at;  // UTC text; empty when NULL
  std::string error_details, output;                    // empty when NULL
  std::optional<std::string> compensation_data;
  std::optional<std::string> payload;
};

// Who holds the event as the database sees it now (demo step audits); every field
// empty when there is no such event (or the column is NULL).
struct EventOwner {
  std::optional<int> attempt;
  std::optional<std::string> status;
  std::optional<std::string> node_address;
};
EventOwner ReadOwner(storage::Connection& c, const std::string& code);

// Every step row of an event in plan order: position, then children after their
// parent; at most `limit` (readers for people pass one: rows written by hand may be
// any number). Throws DbError.
std::vector<StepRow> LoadSteps(storage::Connection& c, const std::string& event_code,
                               int64_t limit = INT64_MAX);

// One action of the timeline (v_step_history): EXECUTE or COMPENSATE, in run order.
struct TimelineEntry {
  std::string action, step_code, step_name, status, started_at, finished_at, node_address, error;
  int failures = 0, attempt = 0;
};
// The event's timeline: forward actions, then compensations as they ran.
// At most `limit` entries.
std::vector<TimelineEntry> ReadTimeline(storage::Connection& c, const std::string& event_code,
                                        int64_t limit = INT64_MAX);

// The event's process_log text; nullopt when there is no such event or it is NULL.
std::optional<std::string> ReadProcessLog(storage::Connection& c, const std::string& code);

// Events of a batch by status (only statuses present). Throws DbError.
std::map<std::string, int64_t> CountBatchByStatus(storage::Connection& c, const std::string& batch_code);

// Event counts by (topic, status): one index-only GROUP BY. Throws DbError.
std::vector<std::tuple<std::string, std::string, int64_t>> CountByTopicStatus(storage::Connection& c);

}  // namespace dsync::events
