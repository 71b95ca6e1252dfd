// Verify across the gap (docs/relay.md): `dsync verify` where no host reaches both the
// source and the target. The verifying process reaches the target and runs the target
// half of table/relay.h's exchange; a node that reaches the source runs the source half
// as an event of dsync.relay_source (as for a relayed table_sync). Each side's range
// checksums and row hashes are computed inside its own database and compared in the
// framework database; only the keys of differing rows travel (never a row's other
// columns), and nothing is written to either side.
//
//   table::RelayTable relay(framework_pool);
//   table::TableDiff d = table::RunRelayedVerify(ctx, check, relay, options, keep_keys,
//                                                [&](int epoch) { produce the source half's event });
//   // on a node of the source side, the source half's step:
//   nlohmann::json out = table::RunRelayedVerifySource(ctx, payload, relay, options);
//
// How the exchange classifies: a range whose checksums agree is equal; in a differing
// range the source half sends the keys of the source rows that are missing or differ,
// and the keys of target rows the source lacks (as delete_missing would); the target
// half counts a sent key it holds as different, one it lacks as missing, and the keys
// to delete as extra. source_rows = target_rows - extra + missing.
//
// Thread safety: one run per call.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "table/relay_sync.h"
#include "table/relay_table.h"
#include "table/run_context.h"
#include "table/verify.h"

namespace dsync::table {

// The source half's event payload for verifying `check` under the relay row `code`:
// {"verify": {"source", "target", "table", "where", "columns"?, "like_patterns"?,
// "chunk_size"}, "step_code", "epoch", "payload": values}.
nlohmann::json VerifySourcePayload(const TableCheck& check, const std::string& code, int epoch,
                                   const nlohmann::json& values);
bool IsVerifySourcePayload(const nlohmann::json& payload);

// The target half (ctx: the verifying process; its step_code names the relay row, its
// payload binds the filter). Returns the same TableDiff CompareTable returns, keeping
// `keep_keys` keys per list. Drops the relay row when it ends, however it ends. Throws
// VerifyInputError (a missing table or column, a filter that does not bind),
// PermanentError (the source half failed: its error), Interrupted (stopped), DbError.
TableDiff RunRelayedVerify(RunContext& ctx, const TableCheck& check, RelayTable& relay,
                           const RelayedSyncOptions& options, size_t keep_keys,
                           const std::function<void(int epoch)>& start_source);

// The source half of a verify (ctx: its own event's; `payload` as VerifySourcePayload
// wrote it). Returns its totals, or {"stopped": why}. Throws as RunRelayedSource.
nlohmann::json RunRelayedVerifySource(RunContext& ctx, const nlohmann::json& payload, RelayTable& relay,
                                      const RelayedSyncOptions& options);

// A RunContext for a run outside the saga engine (`dsync verify`, `dsync bundle`,
// tests): attempt 1, always the owner, progress dropped.
class StandaloneRunContext final : public RunContext {
 public:
  using Pools = std::function<storage::ConnectionPool&(const std::string&)>;
  StandaloneRunContext(std::string code, nlohmann::json payload, Pools pools, Clock& clock,
                       std::stop_token stop = {})
      : code_(std::move(code)), payload_(std::move(payload)), pools_(std::move(pools)), clock_(clock),
        stop_(std::move(stop)) {}
  const std::string& event_code() const override { return code_; }
  const std::string& step_code() const override { return code_; }
  const nlohmann::json& payload() const override { return payload_; }
  int attempt() const override { return 1; }
  const nlohmann::json& compensation_data() const override { return compensation_; }
  // What a compensation run of this context undoes (null by default).
  void set_compensation_data(nlohmann::json data) { compensation_ = std::move(data); }
  std::stop_token stop_token() const override { return stop_; }
  bool StillOwner() override { return true; }
  void ReportProgress(const nlohmann::json&) override {}
  storage::ConnectionPool& Pool(const std::string& datasource) override { return pools_(datasource); }
  Clock& clock() override { return clock_; }

 private:
  std::string code_;
  nlohmann::json payload_;
  nlohmann::json compensation_;
  Pools pools_;
  Clock& clock_;
  std::stop_token stop_;
};

}  // namespace dsync::table
