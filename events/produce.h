// Produce (docs/event-lifecycle.md item 1): new events enter PENDING, phase FORWARD,
// version 1, through the same INSERT a producer in any language may write by hand
// (README.md "Using it": a plain INSERT). Idempotent by code (uk_code).
//
// Thread safety: stateless functions; a Connection is used by one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "storage/connection.h"

namespace dsync::events {

// One event to insert. Optional columns are NULL when empty.
struct NewEventRow {
  std::string tenant_id, code, data_id, topic;
  std::string payload;  // JSON text
  int64_t priority = 0;
  int64_t max_retry = 0;
  int64_t delay_us = 0;  // next_run_time = NOW(3) + delay (0: due at once)
  std::string trace_id, batch_code;
  std::string service;  // config `service`; required (the column's default serves plain-SQL producers)
};

// The service a plain INSERT that names none gets (the column default of
// distribute_event.service, V014); "" when the schema has no such column. Throws DbError.
std::string DefaultService(storage::Connection& c);

// INSERT of one event. False when an event with that code exists (nothing written).
// Throws DbError otherwise.
bool InsertEvent(storage::Connection& c, const NewEventRow& e);

// Multi-row INSERTs of many events (500 per statement); codes that exist are left as
// they are. Returns how many existed (a plain read before each statement: a producer
// racing on the same codes can only make it low; an event is never doubled).
// REQUIRES: inside the caller's transaction (all or none). Throws DbError.
int InsertEvents(storage::Connection& c, const std::vector<NewEventRow>& events);

}  // namespace dsync::events
