// Every statement on dsync_capture (V025): a capture's row in the framework database
// holds its reader's lease, its checkpoint and its state (docs/capture.md).
//
// The lease: holder, a fencing token and an expiry on the DATABASE clock, as the
// dispatcher's (dispatcher/lease_lock.h), but in the capture's own row, so that the
// checkpoint commit is fenced by the same row it writes. TryAcquire takes the row
// when it is free, expired or already this holder's (the token rises whenever the
// holder changes); Renew extends it under the token.
//
// Exactly once: Commit writes the events produced from a range of the binlog and the
// position after that range in ONE transaction whose first statement is the fenced
// UPDATE of the checkpoint (`WHERE holder = ? AND token = ? AND lease_until > NOW(3) +
// margin`): a reader that lost its lease (taken over after it froze or lost the
// database) writes nothing, and the new holder, whose TryAcquire waited for that row
// lock, reads the position that matches the events it finds. Event codes come from
// the position (capture/capture_events.h), and producing is idempotent by code.
//
// Thread safety: stateless besides its pool; every method is one short transaction.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "events/produce.h"
#include "storage/connection_pool.h"

namespace dsync::capture {

// The lease was no longer held when a fenced write was tried; nothing was written.
class LeaseLost : public Error {
 public:
  using Error::Error;
};

struct CaptureRow {
  std::string name, source, target, state;
  std::string gtid, file;
  int64_t pos = 0;
  std::string holder;
  int64_t token = 0;
  bool lease_live = false;              // lease_until > NOW(3)
  nlohmann::json paused = nlohmann::json::object();  // table -> reason
  nlohmann::json copy_events = nlohmann::json::array();
  std::string last_error;
  std::optional<int64_t> last_commit_at_s;  // source commit time of the last captured transaction
  std::optional<int64_t> lag_s;             // seconds from that commit to the checkpoint's update (database clock)
  int64_t transactions = 0, row_changes = 0, events_produced = 0, reader_starts = 0;
  std::string updated_at;
  int lag_bound_s = 10;  // captures.<name>.lag_bound_s as its reader last recorded it (V026)
};

// What one fenced commit records.
struct Checkpoint {
  std::string gtid, file;
  int64_t pos = 0;
  std::string state;                          // RUNNING, COPYING
  std::map<std::string, std::string> pause;   // tables to add to paused_tables, with why
  std::optional<nlohmann::json> copy_events;  // set: replaces the list
  uint32_t last_commit_at_s = 0;              // 0: unchanged
  int64_t transactions = 0, row_changes = 0;  // added to the counters
};

class CaptureStore {
 public:
  CaptureStore(storage::ConnectionPool& framework, std::string service);

  // Creates the capture's row (state NEW) if missing; an existing row keeps its
  // position, and its source and target are updated.
  // Also records the config's lag bound (captures.<name>.lag_bound_s), which
  // v_events_needing_attention compares the capture's lag with (V026).
  void Ensure(const std::string& name, const std::string& source, const std::string& target, int lag_bound_s = 10);
  // The token now held, or nullopt when another holder's lease is live.
  std::optional<int64_t> TryAcquire(const std::string& name, const std::string& holder, Millis ttl);
  // False when the lease is no longer this holder's under `token`.
  bool Renew(const std::string& name, const std::string& holder, int64_t token, Millis ttl);
  void Release(const std::string& name, const std::string& holder);

  std::optional<CaptureRow> Read(const std::string& name);
  std::vector<CaptureRow> List();

  // The events and the checkpoint, in one transaction fenced by the lease (above);
  // the lease then runs `ttl` more. Throws LeaseLost (nothing written), DbError.
  void Commit(const std::string& name, const std::string& holder, int64_t token, Millis ttl, Millis margin,
              const Checkpoint& cp, const std::vector<events::NewEventRow>& events);
  // last_error (and state, unless empty), fenced like Commit. Throws LeaseLost, DbError.
  void RecordError(const std::string& name, const std::string& holder, int64_t token, const std::string& state,
                   const std::string& error);

  // The operator's resume: clears paused tables (their reader copies them again, then
  // reads on) and the last error; a FAILED capture, or any with `restart`, starts
  // afresh (NEW: a full copy, then the binlog from the source's position then).
  // Returns the tables that were paused. Throws NotFoundError.
  nlohmann::json Resume(const std::string& name, bool restart);

  // How fast a capture's changes are applied, from its keyed-sync events that
  // succeeded in the last 10 minutes (the newest 2,000): lag from the source's commit
  // (second precision: the binlog's) and from the event's production to its end, as
  // p50/p99 in ms, and the keys applied per second over the last minute.
  struct ApplyStats {
    int64_t events = 0;
    std::optional<int64_t> lag_p50_ms, lag_p99_ms, apply_p50_ms, apply_p99_ms;
    double keys_per_s = 0;
  };
  ApplyStats Applied(const std::string& name);

  // Per capture: its events not yet ended (pending) and those that FAILED or were
  // COMPENSATED (failed).
  struct Backlog {
    int64_t pending = 0, failed = 0;
  };
  std::map<std::string, Backlog> Backlogs();

  // Every capture of the service as `dsync captures --json` and GET /v1/captures show
  // it: a JSON array of {name, source, target, state, gtid, binlog_file, binlog_pos,
  // holder (null without a live lease), reader_lag_s, last_commit_at, transactions,
  // row_changes, events_produced, events_pending, events_failed, reader_starts,
  // paused_tables, last_error, lag_bound_s, updated_at, applied: {events_10m,
  // lag_p50_ms, lag_p99_ms, apply_p50_ms, apply_p99_ms, keys_per_s}}.
  nlohmann::json ListJson();

  // The statuses of the events of `codes`: code -> (status, last_error).
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> EventStatuses(
      const std::vector<std::string>& codes);

 private:
  storage::ConnectionPool& pool_;
  const std::string service_;
};

}  // namespace dsync::capture
