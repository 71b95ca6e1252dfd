// A table_sync step run relayed (docs/relay.md): the step's owner, on a node that
// reaches the target but not the source, runs the target half (RunRelayedTarget); a
// node that reaches the source runs the source half (RunRelayedSource) as an event of
// its own, which the target half starts. The halves meet in the relay tables of the
// framework database (table/relay_table.h) and follow table/relay.h's exchange.
//
//   // the step adapter, target half (saga/steps/table_steps.cc):
//   table::SyncResult r = table::RunRelayedTarget(run, spec, chunks, relay, options,
//                                                 [&](int epoch) { produce the source half's event });
//   // the source half's step (saga/steps/relay_steps.cc):
//   nlohmann::json out = table::RunRelayedSource(run, spec, source_args, relay, options);
//
// What a relayed run keeps from direct mode: the same schema checks (each half builds
// the Plan from its own table and the other's published description), the same
// statements on each database, and on the target the same chunk transactions
// (table/target_writer.h: before-image, undo record, checkpoint and fence with every
// chunk), so compensation, resume and conflict checks are the same, and a relayed and
// a direct run of the same step may follow each other (a resumed run goes on from the
// other's checkpoint). Not kept: the read-ahead and the adaptive chunk sizes (chunks
// are cut by the source half, at most chunk_size rows and 2 MiB), and the pinned
// integer column's exclusion from row hashes.
//
// Output: the direct mode's keys, plus "relayed": true and "relay": {"ranges",
// "ranges_equal", "chunks", "rows_relayed", "bytes_relayed", "peak_bytes",
// "window_bytes", "epoch"}.
//
// Thread safety: one run per call; a run's two halves are separate calls on separate
// nodes.
#pragma once

#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "table/chunk_table.h"
#include "table/relay.h"
#include "table/relay_schema.h"
#include "table/relay_table.h"
#include "table/run_context.h"
#include "table/spec.h"
#include "table/sync.h"

namespace dsync::table {

struct RelayedSyncOptions {
  RelayOptions relay;                 // compare_rows / chunk_rows are set from the spec
  int64_t window_bytes = 64 << 20;    // relayed bytes in flight per step
  std::string node;                   // this node's address, recorded in the relay row
  Millis schema_wait_poll{50};        // while waiting for the other half's description
  // The longest wait for the other half to describe its table (0: no bound; a step's
  // own deadline bounds it). A verify sets one: no node of the other side may be live.
  Millis other_half_timeout{0};
};

// What the source half's event carries (its payload): which step of which event.
struct SourceHalfArgs {
  std::string step_code;
  int epoch = 0;
  nlohmann::json payload;  // the relayed event's payload (binds the filter's :names)
  nlohmann::json ToJson() const;
  // Throws PermanentError naming the missing field.
  static SourceHalfArgs FromJson(const nlohmann::json& j);
};

// The target half. `start_source(epoch)` makes sure the source half's event of that
// epoch exists (idempotent). Throws as RunSync; Interrupted when the relay was taken
// over by a later claim of the step.
SyncResult RunRelayedTarget(RunContext& ctx, const Spec& spec, ChunkTable& chunks, RelayTable& relay,
                            const RelayedSyncOptions& options, const std::function<void(int epoch)>& start_source);

// The source half (ctx: its own event's). Returns its totals, or {"stopped": why} when
// the relay no longer needs it (its epoch ended, the target half finished or failed).
// Throws Interrupted (stopped, or a later claim of this half took over), PermanentError,
// DbError.
// `keys_only` (a verify's source half): the chunks carry the key columns of the rows
// that differ, never their other columns.
nlohmann::json RunRelayedSource(RunContext& ctx, const Spec& spec, const SourceHalfArgs& args, RelayTable& relay,
                                const RelayedSyncOptions& options, bool keys_only = false);

// Building blocks the relayed runs share (relay_sync.cc, relay_verify.cc).
// `full`'s columns named in `names`, in that order (a name it lacks is left out).
TableShape RelayShapeOf(const TableShape& full, const std::vector<std::string>& names);
// The shape of every column of `t` as `pool` stores it.
TableShape RelayFullShape(storage::ConnectionPool& pool, const Spec& spec, const TableSchema& t, const char* what);
// The relay's options for `spec` (its chunk size, delete_missing) over `o`.
RelayOptions RelayOptionsFor(const Spec& spec, const RelayedSyncOptions& o);
// Waits until the other half has described its table. Throws RelayLost when the relay
// moved on without this half, RelayFailed, Interrupted (stopped), PermanentError (also
// when `timeout` passed first).
RelaySchema AwaitOtherHalf(RunContext& ctx, RelayTable& relay, const RelayHalf& half, Millis poll,
                           Millis timeout = Millis{0});
// Inside a target half's `catch (...)`: what both target halves (sync, verify) make of
// a failure. RelayFailed and RelayFormatError become PermanentError; a PermanentError
// or a permanent DbError marks the relay FAILED (the source half stops) and goes on;
// RelayLost and RelayStopped become Interrupted; anything else is rethrown as is.
[[noreturn]] void RethrowTargetHalfFailure(RelayTable& relay, const RelayHalf& half, const Spec& spec);
// The step's filter bound on the target (ctx's payload), or none when the target lacks
// a column or table it reads (then every target row of the range counts).
BoundFilter RelayTargetFilter(RunContext& ctx, const Spec& spec, storage::ConnectionPool& tgt, const TableSchema& t);

}  // namespace dsync::table
