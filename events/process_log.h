// The SQL fragment that appends one transition to distribute_event.process_log,
// shared by every statement of events/ that changes an event's status (assign, claim,
// the owner's status changes, reset and hand back, the operator's retry), so every
// writer of the log keeps the same entry format: {"at","node","from","to","why"}.
//
// Macros because they are spliced into constant statement texts at compile time.
#pragma once

namespace dsync::events {
inline constexpr int kProcessLogSize = 20;  // entries kept; the fragment hard-codes it
}  // namespace dsync::events

// Appends one transition to process_log and keeps the last kProcessLogSize (20)
// entries; `node`, `to` and `why` are SQL expressions ("?" for a parameter, or a
// column). `from` is the row's `status` as this assignment sees it: MySQL and MariaDB
// evaluate single-table SET lists left to right, so the fragment must come BEFORE the
// assignment of `status`. A NULL or non-JSON process_log starts a fresh array.
#define DSYNC_PROCESS_LOG_ENTRY(node, to, why)                                             \
  "process_log = JSON_ARRAY_APPEND("                                                       \
  "IF(JSON_VALID(process_log), IF(JSON_LENGTH(process_log) >= 20, "                        \
  "JSON_REMOVE(process_log, '$[0]'), process_log), '[]'), '$', "                           \
  "JSON_OBJECT('at', LEFT(DATE_FORMAT(NOW(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'node', " node \
  ", 'from', status, 'to', " to ", 'why', " why "))"

// The usual form, FIRST assignment of its UPDATE. Params: node, to, why.
#define DSYNC_APPEND_PROCESS_LOG DSYNC_PROCESS_LOG_ENTRY("?", "?", "?")
