// The SQL fragment that appends one transition to distribute_event.process_log,
// shared by the saga engine's statements and the operator's retry (api/), so every
// writer of the log keeps the same entry format: {"at","node","from","to","why"}.
//
// A macro because it is spliced into constant statement texts at compile time.
#pragma once

// Appends one transition to process_log and keeps the last kProcessLogSize (20)
// entries. Must be the FIRST assignment of its UPDATE: MySQL and MariaDB evaluate
// single-table SET lists left to right, and `from` must read the old status.
// A NULL or non-JSON process_log starts a fresh array.
// Params: node, to, why.
#define DSYNC_APPEND_PROCESS_LOG                                                           \
  "process_log = JSON_ARRAY_APPEND("                                                       \
  "IF(JSON_VALID(process_log), IF(JSON_LENGTH(process_log) >= 20, "                        \
  "JSON_REMOVE(process_log, '$[0]'), process_log), '[]'), '$', "                           \
  "JSON_OBJECT('at', LEFT(DATE_FORMAT(NOW(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'node', ?, "   \
  "'from', status, 'to', ?, 'why', ?))"
