// The operator's retry (api/event_store.h "Retry semantics"): a COMPENSATED event, or a
// FAILED one whose compensation never started, back to PENDING / phase FORWARD, its
// steps re-driven; a FAILED one whose compensation did not finish back to PENDING in
// phase COMPENSATE, so that the compensation finishes (ResumeCompensation) and no step
// whose effect is still in place runs forward again. Each with a process_log entry.
// The saga's own retry with backoff is ScheduleEventRetry (events/transitions.h).
//
// REQUIRES: LockForRetry first, then the others, inside one caller's transaction
// (LockForRetry's row lock holds the event until COMMIT).
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "storage/connection.h"

namespace dsync::events {

struct RetryTarget {
  int64_t id = 0;
  std::string status;
  int version = 0;
  std::string phase;  // FORWARD or COMPENSATE
};

// A step whose effect is in place: SUCCESS, COMPENSATING (its compensation did not
// finish), or FAILED / EXECUTING with compensation data (it applied part of its change).
struct AppliedStep {
  std::string name;
  std::string status;
};
std::vector<AppliedStep> ReadAppliedSteps(storage::Connection& c, const std::string& code);
// "s1 (SUCCESS), s2 (COMPENSATING)".
std::string DescribeApplied(const std::vector<AppliedStep>& steps);

// FAILED in phase COMPENSATE at `version` -> PENDING, phase unchanged, version+1, due at
// once, reset_count 0, last_error cleared, result without compensation_failed_step /
// compensation_error (the original failure stays); its COMPENSATING steps get their
// compensation retries afresh (compensation_retry_count 0); nothing else of the steps
// changes. process_log gains {"node": "operator", "why": why}. False when it matched
// nothing.
bool ResumeCompensation(storage::Connection& c, int64_t id, int version, const std::string& code,
                        const std::string& why);

// The event by code, its row locked (FOR UPDATE); nullopt when there is none.
std::optional<RetryTarget> LockForRetry(storage::Connection& c, const std::string& code);

// Steps back to PENDING with their counters cleared: all of them, or (`all` false)
// only those not SUCCESS. Compensated steps forget their compensation data (what they
// saved was restored; the next run saves afresh); others keep it (a step that failed
// midway keeps the before-image of its first run).
void ResetStepsForRetry(storage::Connection& c, const std::string& code, bool all);

// FAILED or COMPENSATED at `version` -> PENDING, phase FORWARD, retry_count and reset_count 0,
// version+1, due at once, result / last_error / times cleared; process_log gains
// {"node": "operator", "why": why}. False when it matched nothing.
bool RetryEvent(storage::Connection& c, int64_t id, int version, const std::string& why);

}  // namespace dsync::events
