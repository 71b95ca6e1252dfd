// The built-in `demo` step (README.md "Built-in steps"): a no-op for
// tests, demos and benchmarks, driven by the event payload's optional "demo" object:
//
//   {"demo": {"sleep_ms": 300,
//             "fail": {"s2": 2, "s3": "permanent"},
//             "fail_compensation": {"s1": 1, "s2": "always"},
//             "audit": true}}
//
//   sleep_ms           every demo step sleeps this long before its effect, waking
//                      early (transient failure) when its stop token fires
//   compensation_sleep_ms  every demo compensation sleeps this long first, likewise
//                      (a compensation to kill its node in, or to time out)
//   fail               step name -> "permanent", or N: transient on the first N
//                      executions (counted by the step's retry_count)
//   fail_compensation  step name -> N (the first N compensations fail transiently,
//                      counted by compensation_retry_count) or "always"
//   audit              true: every application and undo also appends a row to
//                      demo_ledger_audit (V005) in the same fenced transaction,
//                      recording the writer's claim attempt and pid next to the
//                      event's attempt, status and node as the database has them at
//                      that instant (the chaos suite's "never two owners" check).
//                      Off by default: demos and benchmarks pay nothing.
//
// Effect: a demo_ledger row keyed by the step code (the idempotency key), written
// through ctx.tx() so it commits with the step's SUCCESS:
//   INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES (?, ?, ?)
//   ON DUPLICATE KEY UPDATE applications = applications + 1
// Compensation deletes that row through ctx.tx(). A "demo" object that does not
// parse is a permanent failure of the step (nothing was applied).
//
// Thread safety: the handler is stateless.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "config/settings.h"
#include "core/clock.h"
#include "saga/step_handler.h"

namespace dsync::saga {

// The effect's row (StepContext::InsertAtCommit: batched with other events' rows):
// kDemoLedgerHead, one (idempotency key = step code, event code, step name) tuple per
// row, kDemoLedgerTail. Shared with the benchmarks that write what a demo step writes.
inline constexpr const char* kDemoLedgerHead =
    "INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES";
inline constexpr const char* kDemoLedgerTail = "ON DUPLICATE KEY UPDATE applications = applications + 1";

// What the payload asks of one demo step.
struct DemoBehaviour {
  Millis sleep{0};
  Millis compensation_sleep{0};         // each compensation sleeps this long first
  bool fail_permanently = false;
  int fail_transient_times = 0;         // fail while retry_count < this
  bool fail_compensation_always = false;
  int fail_compensation_times = 0;      // fail while compensation_retry_count < this
  bool audit = false;                   // append demo_ledger_audit rows
};

// Reads payload["demo"] for `step_name`. A payload without "demo" (or not an object)
// asks for nothing. Throws PermanentStepError with the offending key for a malformed
// "demo" object.
DemoBehaviour ParseDemoBehaviour(const nlohmann::json& payload, const std::string& step_name);

// The factory registered as "demo". Accepts no params beyond name/type.
std::unique_ptr<StepHandler> MakeDemoStep(const StepSpec& spec);

}  // namespace dsync::saga
