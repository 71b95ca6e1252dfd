// Produce (docs/event-lifecycle.md item 1): new events enter PENDING, phase FORWARD,
// version 1, through the same INSERT a producer in any language may write by hand
// (README.md "Using it": a plain INSERT). Idempotent by code (uk_code).
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "storage/connection.h"

namespace dsync::events {

// Event and batch codes are keys compared byte for byte (V015; docs/event-lifecycle.md
// "Codes"). Beyond their length, a code must be well-formed UTF-8 without hidden
// characters (core/visible_text.h: C0/C1 controls, bidi controls, zero-width
// characters), so that two codes that look alike are alike; and a code produced
// through the API or the CLI may not start with kReservedCodePrefix, the prefix of
// batch completion events (events/batches.h), so that no producer can take a batch's
// completion code first. Plain-SQL producers are not checked: the completer refuses
// an event it did not produce (events/batches.h, CONFLICT).
inline constexpr std::string_view kReservedCodePrefix = "done:";

// Why `code` cannot be a code ("contains U+202E (an invisible or bidi control
// character)", "is not valid UTF-8"), or "" when it can. Lengths are the caller's
// (the columns' sizes).
std::string CodeProblem(std::string_view code);

// True when `code` starts with kReservedCodePrefix.
bool IsReservedCode(std::string_view code);

// One event to insert. Optional columns are NULL when empty.
struct NewEventRow {
  std::string tenant_id, code, data_id, topic;
  std::string payload;  // JSON text
  int64_t priority = 0;
  int64_t max_retry = 0;
  int64_t delay_us = 0;  // next_run_time = NOW(3) + delay (0: due at once)
  std::string trace_id, batch_code;
  std::string service;  // config `service`; required (the column's default serves plain-SQL producers)
  std::string route;    // distribute_event.route (V018): what its first work needs; "" (NULL): the plan's
};

// The service a plain INSERT that names none gets (the column default of
// distribute_event.service, V014); "" when the schema has no such column. Throws DbError.
std::string DefaultService(storage::Connection& c);

// INSERT of one event. False when an event with that code exists (nothing written).
// Throws DbError otherwise.
bool InsertEvent(storage::Connection& c, const NewEventRow& e);

// Multi-row INSERTs of many events (500 per statement); codes that exist are left as
// they are. Returns how many existed (a plain read before each statement: a producer
// racing on the same codes can only make it low; an event is never doubled). After
// each statement every code of it must be stored as one row: a database that merged
// two codes the caller holds distinct (a key column not yet byte-for-byte, V015)
// throws DbError instead of answering more events than it stored.
// REQUIRES: inside the caller's transaction (all or none), codes distinct. Throws
// DbError.
int InsertEvents(storage::Connection& c, const std::vector<NewEventRow>& events);

}  // namespace dsync::events
