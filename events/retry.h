// The operator's retry: a FAILED or COMPENSATED event back to PENDING / phase FORWARD
// (api/event_store.h "Retry semantics"), its steps re-driven, with a process_log entry.
// The saga's own retry with backoff is ScheduleEventRetry (events/transitions.h).
//
// REQUIRES: the three functions run in that order inside one caller's transaction
// (LockForRetry's row lock holds the event until COMMIT).
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "storage/connection.h"

namespace dsync::events {

struct RetryTarget {
  int64_t id = 0;
  std::string status;
  int version = 0;
};

// The event by code, its row locked (FOR UPDATE); nullopt when there is none.
std::optional<RetryTarget> LockForRetry(storage::Connection& c, const std::string& code);

// Steps back to PENDING with their counters cleared: all of them, or (`all` false)
// only those not SUCCESS. Compensated steps forget their compensation data (what they
// saved was restored; the next run saves afresh); others keep it (a step that failed
// midway keeps the before-image of its first run).
void ResetStepsForRetry(storage::Connection& c, const std::string& code, bool all);

// FAILED or COMPENSATED at `version` -> PENDING, phase FORWARD, retry_count 0,
// version+1, due at once, result / last_error / times cleared; process_log gains
// {"node": "operator", "why": why}. False when it matched nothing.
bool RetryEvent(storage::Connection& c, int64_t id, int version, const std::string& why);

}  // namespace dsync::events
