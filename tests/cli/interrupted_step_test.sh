#!/usr/bin/env bash
# Issue 16 item 2: a step interrupted mid-flight whose retries then run out is
# compensated when its handler can undo an interrupted attempt (table_sync: its chunks
# commit one by one, each with its before-image in the target). A table_sync step of
# 100k rows (chunks of 500) into a target holding an older copy, topic max_retry 1: the
# node running it is kill -9ed after some chunks committed; the next claim finds the
# retries spent and compensates: the target is restored byte for byte, the event
# COMPENSATED, its history whole.
source "$(dirname "$0")/lib.sh"

fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, retry_count, last_error FROM distribute_event" >&2; sql "SELECT step_name, status, error_details FROM distribute_event_step" >&2; tail -n 15 "$WORK"/*.log >&2; exit 1; }
with_datasources

write_config interrupted '{
  "BIG": {
    "max_retry": 1, "backoff_base_ms": 100, "ordered": false,
    "steps": [ { "name": "big", "type": "table_sync", "source": "env_a", "target": "env_b",
                 "table": "big", "where": "grp = :g", "chunk_size": 500 } ]
  }
}' "$DATASOURCES" '{"consumer": {"capacity": 2}}'
chunks() { dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = '$1#1' AND chunk_no > 0"; }
# Rows of the target that differ from the snapshot taken before the sync (or are extra/missing).
changed() {
  dbq "$TGT" "SELECT (SELECT COUNT(*) FROM big a LEFT JOIN before_sync b USING (id)
                      WHERE NOT (BINARY a.name <=> BINARY b.name AND a.at <=> b.at AND a.grp <=> b.grp))
                   + (SELECT COUNT(*) FROM before_sync b LEFT JOIN big a USING (id) WHERE a.id IS NULL)"
}

big_tables 100000  # the target: an older copy, 10 % of the rows missing (the sync inserts them)
dbq "$TGT" "CREATE TABLE before_sync LIKE big; INSERT INTO before_sync SELECT * FROM big"
start_dispatch n1 7601

produce big-1 '{"g": 1}' BIG
wait_for '[[ $(chunks big-1 2>/dev/null) -ge 3 ]]' 120 "three chunks committed by n1"
kill9 "$PID_n1"
sleep 0.3
by_n1=$(chunks big-1)
rows_by_n1=$(dbq "$TGT" "SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE step_code = 'big-1#1' AND chunk_no > 0")
echo "n1 committed $by_n1 chunks ($rows_by_n1 rows) before kill -9"
(( rows_by_n1 < 100000 )) || fail "n1 finished before it was killed; nothing was interrupted"
(( $(changed) > 0 )) || fail "the interrupted step changed nothing in the target"
pass "the interrupted step left $(changed) target rows changed"
expect_eq "$(sql "SELECT status FROM distribute_event_step WHERE job_code = 'big-1'")" EXECUTING "the step is left EXECUTING"

# Its last retry is spent (max_retry 1): the next owner compensates, including the
# interrupted step.
start_node n2 7602
wait_for '[[ $(event_status big-1) == COMPENSATED ]]' 120 "big-1 COMPENSATED (is \$(event_status big-1))"
expect_eq "$(changed)" 0 "the target is restored exactly as it was before the sync"
expect_eq "$(sql "SELECT CONCAT(status, ' ', compensated_at IS NOT NULL) FROM distribute_event_step WHERE job_code = 'big-1'")" \
  "COMPENSATED 1" "the interrupted step is COMPENSATED"
[[ $(sql "SELECT error_details FROM distribute_event_step WHERE job_code = 'big-1'") == *"what it applied is compensated"* ]] \
  || fail "the step's error_details do not say it was interrupted and compensated"
pass "the step says it was interrupted and compensated"
[[ $(sql "SELECT last_error FROM distribute_event WHERE code = 'big-1'") == *"retries exhausted"* ]] \
  || fail "last_error: $(sql "SELECT last_error FROM distribute_event WHERE code = 'big-1'")"
pass "last_error names the spent retries"
expect_eq "$(sql "SELECT CONCAT(JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[2].node')), ' ',
                  JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[2].why'))) FROM distribute_event WHERE code = 'big-1'")" \
  "127.0.0.1:7601 reset (not charged): node 127.0.0.1:7601 offline" "process_log: the sweeper's reset after the kill, naming n1"
expect_eq "$(sql "SELECT GROUP_CONCAT(CONCAT(j.f, '>', j.t) SEPARATOR ' ') FROM distribute_event e,
                    JSON_TABLE(e.process_log, '\$[*]' COLUMNS (f VARCHAR(20) PATH '\$.from', t VARCHAR(20) PATH '\$.to')) j
                  WHERE e.code = 'big-1'")" \
  "PENDING>ASSIGNED ASSIGNED>RUNNING RUNNING>PENDING PENDING>ASSIGNED ASSIGNED>RUNNING RUNNING>COMPENSATING COMPENSATING>COMPENSATED" \
  "process_log: the whole history, reset and compensation included"
expect_eq "$(process_log_gaps)" "" "process_log chains without gaps"
expect_eq "$(saga_violations)" 0 "saga order holds"
