// The built-in data-moving step types (README.md "Built-in steps").
//
// table_sync: copy the rows of one table that match a filter from a source datasource
// to a target datasource, upserting by primary key, chunk by chunk, each chunk
// committed on its own; only chunks whose checksums differ are read and written;
// compensation restores the target exactly (removes the rows it created, puts back the
// rows it changed or deleted).
//
//   { "name": "docs", "type": "table_sync", "source": "env_a", "target": "env_b",
//     "table": "kb_doc", "where": "space_id = :space_id AND kind = :kind",
//     "chunk_size": 10000, "columns": ["id", "space_id", "title"], "delete_missing": false }
//
// table_delete: delete the target rows matching the filter; compensation re-inserts
// them exactly (one target transaction, as before: it is bounded by the target's
// transaction and packet limits).
//
//   { "name": "purge", "type": "table_delete", "target": "env_b", "table": "kb_doc",
//     "where": "space_id = :space_id" }
//
// Keys (anything else is rejected at start with a ConfigError naming the step):
//   source      table_sync only, required: datasource name to read from
//   target      required: datasource name to write
//   table       required: table name, the same in both ([A-Za-z0-9_$], at most 64)
//   where       required: filter, the grammar of table/where.h; each :name is
//               bound from the payload's top-level field `name` as a statement
//               parameter, never spliced. "1 = 1" matches every row. One level of
//               `column [NOT] IN (SELECT column FROM table [WHERE ...])` selects a child
//               table through its parent; on the target it reads the target's tables.
//   chunk_size  optional, 1..100000: table_sync: the most rows a chunk holds and
//               writes (default 10000; chunks start at min(1000, chunk_size) and
//               adapt, below; a chunk that compares covers up to 4x as many);
//               table_delete: rows per read and write statement (default 500)
//   columns     table_sync only, optional: the columns to copy (must include the
//               primary key); default: every column present in both tables
//               (generated columns of the target excluded; the source's others are
//               named in the output, "source_columns_not_in_target")
//   delete_missing  table_sync only, optional, default false: also delete the target
//               rows that match the filter but whose key no longer matches it in the
//               source (a mirror instead of a merge); they are in the before-image too
//   on_conflict table_sync only, optional: "fail" (default), "skip" or "overwrite":
//               see "Conflict-safe compensation"
//   undo_retention_days  optional, 1..3650, default 7: see "Undo records"
//   lanes       table_sync only, optional, 1..16, default 2: key ranges of the table
//               worked at once, each on its own target connection; see "Lanes"
//   like_patterns  optional, default false: a payload value bound as the pattern of
//               a LIKE (`title LIKE :q`) matches literally ("%" matches a "%"); true:
//               it is a LIKE pattern (table_where.h)
//   max_rows    table_delete only, optional, 1..10000000, default 10000: a filter
//               matching more rows fails permanently and deletes none ("12000 rows of
//               env_b.kb_doc match, more than max_rows 10000; nothing deleted")
//
// Run time:
//   - A payload field a placeholder needs is missing, or is an object or array:
//     permanent failure ("payload has no field 'space_id' needed by step 'docs'").
//     Strings, numbers, booleans and null bind as such; a string compared with an
//     integer column (of the step's table or of a subquery's) must be a canonical
//     integer ("42"), else permanent failure (MySQL would compare "1 OR 1=1" as 1).
//   - The primary key (composite included) is read from the target's
//     information_schema; it must exist in the source with the same column type. A
//     table without one, a missing table or column: permanent failure.
//   - Database errors: deadlocks, lock waits and lost connections propagate (the
//     engine retries the step); a missing table, unknown column, duplicate value of a
//     secondary unique key or a value the target column refuses is permanent.
//   - Keys the chunk's locked read finds absent are inserted, not upserted: a source
//     row that collides with another target row over a secondary unique key fails the
//     step permanently (naming the key) and writes nothing of the chunk; a primary-key
//     collision (a row inserted meanwhile) rolls the chunk back and the step runs
//     again. Compensation restores the same way (table/target_writer.h).
//
// How table_sync works (table/): the planner (table/planner.h: columns, schema
// preflight, resume point, lanes), the lane loop (table/sync.h: chunks in key order,
// copy or compare mode, range checksums and row hashes, chunk sizing), the source
// reader and target writer (table/source_reader.h, table/target_writer.h: one target
// transaction per chunk with its before-image, undo record, checkpoint and fence),
// compensation (table/sync_compensate.cc). Schema preflight: source and target must
// agree on each synced column's type, nullability and collation and on the primary
// key, else a permanent failure naming the column ("schema preflight of step 'docs':
// column `title` is varchar(200) ... in env_a.kb_doc but varchar(100) ... in
// env_b.kb_doc"). Lanes: a table whose key is one integer column is split at the
// step's first run into up to `lanes` key ranges worked at once, each with its own
// target connection and checkpoint; the step's error is the first failing lane's.
//
// Output (table_sync):
//   {"rows", "inserted", "updated", "unchanged", ["deleted",] "chunks",
//   "chunks_equal", "chunks_written", "rows_fetched", "chunk_records" [, "lanes"]
//   [, "resumed_after_chunk", "resumed_rows_written"], "schema_fingerprint"
//   [, "source_columns_not_in_target": the source's columns the target lacks, not
//   synced (without `columns`)]}; while it runs, the same with
//   "running": true is the step row's output (ctx.ReportProgress, about once a second).
//   A re-run of the step (the next owner after a crash, with the same idempotency key)
//   resumes after the last committed chunk (of each lane); a range already committed
//   is never read or written again, so the first before-image of every row is the one
//   kept.
//
// Conflict-safe compensation (table_sync): each chunk record also holds, for every
// row of its before-image, the hash (ColumnSet::RowHashExpr over the image's columns)
// of the target row as the chunk left it, or null where it deleted it ("after" in the
// record's JSON). Compensation reads the same hashes now; a row whose hash differs was
// changed by someone else since: a conflict. on_conflict:
//   fail       a read-only pass over all chunks first; any conflict: nothing is
//              restored, the compensation fails permanently with the keys (the first
//              20 in the message, up to 100 in the step's output as "conflict_keys")
//              and, when the table's shape changed since the sync, how; the event
//              ends FAILED (v_events_needing_attention). Each chunk checks again under
//              its locks (a write after the first pass refuses there; the chunks
//              restored before it stay restored and marked).
//   skip       conflicting rows are left as they are, the rest restored; the output
//              has "conflicts" and "skipped_keys" (up to 100).
//   overwrite  no check: every row is restored (the behaviour before conflicts).
// Chunks recorded without after-hashes (older versions) have no conflicts. The
// compensation's output ({"removed", "restored", "chunks", "on_conflict",
// "conflicts"[, "skipped_keys"]}) is also written as the step row's output
// (ctx.ReportProgress), where it stays: the step's history.
//
// Fencing (table_sync): row 0's `attempt` in dsync_sync_chunk is the step's fencing
// token: every run raises it to its claim attempt (ctx.attempt()) under the step lock
// before its first write, and every chunk and compensation transaction, holding the
// step lock, stops ("taken over by a later claim") when the token is above its own
// attempt. A node frozen past the offline timeout and resumed thus commits no chunk
// once the new owner has taken the step over; a chunk it was committing at that
// instant (inside its transaction, after the ownership check) commits before the
// takeover, which waits for the step lock, and the new owner resumes after it. Every
// chunk transaction also holds the run row (-1) shared from its start, which a
// takeover takes exclusively: a node frozen anywhere inside a chunk transaction is
// waited for at most kEvictStaleRunAfter (3 s), then its session is killed
// (storage/lock_eviction.h) and its chunk rolls back.
//
// Heartbeat: ctx.ReportProgress (about once a second while chunks run, and after each
// compensated chunk) also refreshes the event's modifier_time, fenced by the claimed
// version (events/step_progress.h), so the sweeper does not reset a sync that runs
// longer than max_processing_time_ms; the step's own deadline is its timeout_ms.
//
// Undo records (why the before-image lives in the target): effects outside the
// framework database are at-least-once (a node may commit a chunk and die before the
// engine records anything), so each chunk's before-image is committed in the TARGET
// with the chunk, in
//
//   dsync_sync_chunk(step_code, chunk_no, step_name, table_name, attempt, lo_key,
//                    hi_key, before_image LONGTEXT, rows_read, rows_written,
//                    created_at, compensated_at)   PRIMARY KEY (step_code, chunk_no)
//
// created on first use (CREATE TABLE IF NOT EXISTS; the datasource user needs the
// CREATE privilege). chunk_no 0 is the step's row: every chunk transaction (before
// its record) and compensation (first) locks it, so commits of one step serialise; its
// compensated_at marks the step compensated and its hi_key holds the lanes' split keys. The compensation_data the engine keeps is only a
// reference ({"format": 2, "undo": "dsync_sync_chunk", "target", "table",
// "step_code", "chunks"}), never the image, so no step approaches max_allowed_packet
// of the framework database. Compensate walks the chunks in reverse and restores each
// (deletes the rows it created, upserts its before-rows) in one target transaction
// with that chunk's compensated mark, so an interrupted compensation resumes where it
// stopped and a repeated one does nothing. If the records are gone (purged after
// undo_retention_days, or deleted by hand) while compensation_data says chunks were
// committed, compensation fails permanently, naming the table: there is nothing exact
// to restore from, and the event waits for an operator (needs attention). A forward
// run after a complete compensation starts a new record.
//
// Entity graphs: with a subquery filter ("order_id IN (SELECT id FROM orders WHERE
// customer_id = :cid)") each side evaluates it against its own tables when the step
// runs. On the target that means the parent rows as they are then: if an earlier step
// of the same saga synced the parents, the target's filter already sees the synced
// parents. The before-image is unaffected by this: it covers exactly the target rows
// the step wrote or deleted (keys from the source's filter, plus, with
// delete_missing, target rows matching the target's filter), each as it was just
// before its chunk; compensation of the saga restores the children first (reverse
// order), then the parents.
//
// table_delete keeps one undo row per step in dsync_step_undo(step_code PK, step_name,
// table_name, before_image LONGTEXT, created_at, compensated_at) (as table_sync did
// before chunks; a table_sync compensation with such format 1 data still restores from
// it). Records older than undo_retention_days are purged by later runs on the same
// target (best effort).
//
// Thread safety: a handler is shared by all workers; per-run state lives on the stack.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/settings.h"
#include "core/clock.h"
#include "saga/step_handler.h"
#include "storage/connection_pool.h"
#include "table/relay_sync.h"
#include "table/spec.h"

namespace dsync::saga {

// What a node gives its table_sync steps so that they can run relayed (docs/relay.md):
// when the node's config names the step's target but not its source, the step runs as
// the target half and starts its source half as an event of the internal topic
// kRelaySourceTopic (config/step_datasources.h), routed to a node reaching the source.
struct RelayEnvironment {
  storage::ConnectionPool* framework = nullptr;  // the framework database
  std::string node;                              // this node's address
  std::string service;                           // the source halves' events' service
  table::RelayedSyncOptions options;             // window, polls
  std::map<std::string, TopicSettings> topics;   // the node's topics: where a source half finds its step
  std::function<void()> wake_dispatcher;         // after producing a source half (may be empty)
};

// The saga engine's StepContext as the table machinery's RunContext (its clock the
// engine's: checkpoint and progress intervals, chunk sizing).
class StepRunContext final : public table::RunContext {
 public:
  explicit StepRunContext(StepContext& ctx) : ctx_(ctx) {}
  const std::string& event_code() const override { return ctx_.event_code(); }
  const std::string& step_code() const override { return ctx_.idempotency_key(); }
  const nlohmann::json& payload() const override { return ctx_.payload(); }
  int attempt() const override { return ctx_.attempt(); }
  const nlohmann::json& compensation_data() const override { return ctx_.compensation_data(); }
  std::stop_token stop_token() const override { return ctx_.stop_token(); }
  bool StillOwner() override { return ctx_.StillOwner(); }
  void ReportProgress(const nlohmann::json& progress) override { ctx_.ReportProgress(progress); }
  storage::ConnectionPool& Pool(const std::string& datasource) override { return ctx_.datasources().Get(datasource); }
  Clock& clock() override { return ctx_.clock(); }

 private:
  StepContext& ctx_;
};

// The internal topic of source halves as a node's plans hold it: one step of type
// relay_source, unordered, 10 retries, an hour without progress before it is stuck.
TopicSettings RelaySourceTopic();
// The source half's event code for a step's relay epoch: "relay:<16 hex of the step
// code's hash>:<epoch>" (event codes are at most 64 characters).
std::string RelaySourceCode(const std::string& step_code, int epoch);
// Makes sure the source half's event of `step_code`'s relay epoch exists (idempotent by
// its code), routed to a node reaching `source`. Returns its code. Throws
// table::PermanentError when the code is taken by another topic's event, DbError.
std::string ProduceRelaySourceHalf(storage::ConnectionPool& framework, const std::string& service,
                                   const std::string& step_code, int epoch, const nlohmann::json& payload,
                                   const std::string& source);

// Throw ConfigError ("config: step 'docs' (table_sync): <reason>") for bad params.
std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec);
// The same, relayed when the node lacks the step's source (`relay` null: never).
std::unique_ptr<StepHandler> MakeTableSyncStep(const StepSpec& spec, std::shared_ptr<const RelayEnvironment> relay);
// The relay_source step: the source half of a relayed table_sync, its payload
// table::SourceHalfArgs plus "topic" and "step" naming the step in relay->topics.
std::unique_ptr<StepHandler> MakeRelaySourceStep(const StepSpec& spec, std::shared_ptr<const RelayEnvironment> relay);
std::unique_ptr<StepHandler> MakeTableDeleteStep(const StepSpec& spec);

// table_repair's sync (saga/steps/table_verify.h): the table_sync step `spec`, exactly
// as configured, restricted to `keys` keys of its table's primary key `key_columns`:
// its filter becomes "(where) AND (key IN (k0, k1, ...))"; for a composite key a row
// IN list, "(a, b) IN ((a0, b0), (a1, b1), ...)", or "a = a0 AND b = b0" for one key
// (table::NarrowToKeys, the forms of table::ColumnSet::MatchKeys). The i-th key's j-th
// value is bound from the payload field RepairKeyField(i, j), beside the where's own
// fields. Built from the compiled filter, not from text: no text or placeholder limit
// of the where grammar applies to the keys. Throws ConfigError.
std::unique_ptr<StepHandler> MakeKeyedTableSyncStep(const StepSpec& spec, const std::vector<std::string>& key_columns,
                                                    size_t keys);
using table::RepairKeyField;  // "dsync_k<key>_<column>" (table/spec.h)

}  // namespace dsync::saga
