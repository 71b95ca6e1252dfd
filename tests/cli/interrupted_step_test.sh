#!/usr/bin/env bash
# Issue 16 item 2, as issue 34 changed it (a kill is a reset, never a retry): a
# table_sync step of 100k rows (chunks of 500) into a target holding an older copy;
# the node running it is kill -9ed after some chunks committed. The topic allows no
# reset (max_resets 0), so the next claim ends the event FAILED ("reset 1 times"),
# running and compensating nothing; the interrupted step counts as applied (its
# handler can undo an interrupted attempt: compensation data {}), so `dsync retry
# --from start` is refused naming it, and `dsync retry` resumes it from its last
# committed chunk: SUCCESS, the target equal to the source, retry_count 0.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT N2_PORT <<< "$(free_ports 2 | tr '\n' ' ')"

fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, retry_count, last_error FROM distribute_event" >&2; sql "SELECT step_name, status, error_details FROM distribute_event_step" >&2; tail -n 15 "$WORK"/*.log >&2; exit 1; }
with_datasources

write_config interrupted '{
  "BIG": {
    "max_retry": 1, "max_resets": 0, "backoff_base_ms": 100, "ordered": false,
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
start_dispatch n1 ${N1_PORT}

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

# The sweeper resets it (node offline): its one reset is over max_resets 0, so the next
# owner's claim fails it, running nothing.
start_node n2 ${N2_PORT}
wait_for '[[ $(event_status big-1) == FAILED ]]' 120 "big-1 FAILED (is \$(event_status big-1))"
expect_eq "$(sql "SELECT CONCAT(retry_count, ' ', reset_count) FROM distribute_event WHERE code = 'big-1'")" "0 1" \
  "the kill counted as a reset, not a retry"
[[ $(sql "SELECT last_error FROM distribute_event WHERE code = 'big-1'") == "reset 1 times (node crashes"*"max_resets 0)"* ]] \
  || fail "last_error: $(sql "SELECT last_error FROM distribute_event WHERE code = 'big-1'")"
pass "last_error names the resets"
expect_eq "$(sql "SELECT CONCAT(status, ' ', compensation_data) FROM distribute_event_step WHERE job_code = 'big-1'")" \
  "FAILED {}" "the interrupted step FAILED, counted as applied (compensation data {})"
expect_eq "$(sql "SELECT CONCAT(JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[2].node')), ' ',
                  JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[2].why'))) FROM distribute_event WHERE code = 'big-1'")" \
  "127.0.0.1:${N1_PORT} reset (not charged): node 127.0.0.1:${N1_PORT} offline" "process_log: the sweeper's reset after the kill, naming n1"

# The operator: --from start would apply the interrupted step's chunks again: refused.
set +e
"$DSYNC_BIN" retry big-1 --from start --config "$WORK/dsync.json" >"$WORK/retry.out" 2>"$WORK/retry.err"
rc=$?
set -e
[[ $rc != 0 && $(cat "$WORK/retry.err") == *"steps big (FAILED) are applied"* ]] \
  || fail "retry --from start: rc $rc, $(cat "$WORK/retry.err")"
pass "retry --from start refused, naming the applied step"
"$DSYNC_BIN" retry big-1 --config "$WORK/dsync.json" >/dev/null
wait_for '[[ $(event_status big-1) == SUCCESS ]]' 120 "big-1 SUCCESS after the retry (is \$(event_status big-1))"
expect_eq "$(dbq "$TGT" "SELECT CONCAT((SELECT COUNT(*) FROM big), ' ', (SELECT COUNT(*) FROM big t
                         LEFT JOIN \`$SRC\`.big s USING (id)
                         WHERE NOT (BINARY t.name <=> BINARY s.name AND t.at <=> s.at AND t.grp <=> s.grp)))")" \
  "100000 0" "the target equals the source (100000 rows, none different)"
grep -q "TABLE_SYNC_RESUME step=big code=big-1#1" "$WORK"/n2.log || fail "the retry did not resume the step"
pass "the retry resumed the step from its checkpoint"
expect_eq "$(sql "SELECT GROUP_CONCAT(CONCAT(j.f, '>', j.t) SEPARATOR ' ') FROM distribute_event e,
                    JSON_TABLE(e.process_log, '\$[*]' COLUMNS (f VARCHAR(20) PATH '\$.from', t VARCHAR(20) PATH '\$.to')) j
                  WHERE e.code = 'big-1'")" \
  "PENDING>ASSIGNED ASSIGNED>RUNNING RUNNING>PENDING PENDING>ASSIGNED ASSIGNED>RUNNING RUNNING>FAILED FAILED>PENDING PENDING>ASSIGNED ASSIGNED>RUNNING RUNNING>SUCCESS" \
  "process_log: the whole history, reset, failure and retry included"
expect_eq "$(process_log_gaps)" "" "process_log chains without gaps"
expect_eq "$(saga_violations)" 0 "saga order holds"
