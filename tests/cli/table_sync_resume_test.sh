#!/usr/bin/env bash
# Issue 13 acceptance through real processes: a table_sync step of 200k rows into a
# target holding an older copy, committed chunk by chunk.
#  A. the node running it is kill -9ed mid-step: the next owner resumes after the
#     last committed chunk (chunks committed before are not copied again: every key
#     range is in exactly one chunk record, by the two attempts), the step row showed
#     progress while it ran, and the target ends equal to the source;
#  B. the owner is frozen (SIGSTOP) past the offline timeout: another node takes the
#     event over and finishes it; the frozen node, resumed, commits no chunk after
#     losing the event but the one it may have been inside when frozen (that chunk's
#     transaction holds the step's row 0, so the new claim raises the step's fencing
#     token after it; the token rolls back any later chunk of the old claim).
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT N2_PORT N3_PORT <<< "$(free_ports 3 | tr '\n' ' ')"

fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, node_address, last_error FROM distribute_event" >&2; sql "SELECT step_name, status, error_details, output FROM distribute_event_step" >&2; tail -n 15 "$WORK"/*.log >&2; exit 1; }
with_datasources

write_config tsync '{
  "BIG": {
    "max_retry": 5, "backoff_base_ms": 200, "backoff_max_ms": 1000, "ordered": false,
    "steps": [ { "name": "big", "type": "table_sync", "source": "env_a", "target": "env_b",
                 "table": "big", "where": "grp = :g", "chunk_size": 2000 } ]
  }
}' "$DATASOURCES" '{"consumer": {"drain_timeout_ms": 8000, "capacity": 2}}'
export DSYNC_LOG_LEVEL=info
node_of() { sql "SELECT node_address FROM distribute_event WHERE code = '$1'"; }
chunks() {  # chunks CODE [ATTEMPT]: chunk records of the event's step
  dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = '$1#1' AND chunk_no > 0 ${2:+AND attempt = $2}"
}
# Rows of the target differing from the source in any column, byte for byte, or missing.
differing() {
  dbq "$SRC" "SELECT COUNT(*) FROM big a LEFT JOIN \`$TGT\`.big b USING (id)
              WHERE NOT (BINARY a.name <=> BINARY b.name AND a.at <=> b.at AND a.grp <=> b.grp)"
}

big_tables 200000
start_dispatch n1 ${N1_PORT}

# --- A: kill -9 mid-step, the next owner resumes -----------------------------------
produce big-a '{"g": 1}' BIG
wait_for '[[ $(chunks big-a 2>/dev/null) -ge 5 ]]' 120 "five chunks committed by n1"
wait_for '[[ $(sql "SELECT output FROM distribute_event_step WHERE job_code = '"'big-a'"'") == *running* ]]' 60 \
  "progress in the step row while it runs"
progress=$(sql "SELECT output FROM distribute_event_step WHERE job_code = 'big-a'")
kill9 "$PID_n1"
sleep 0.5
done_by_n1=$(chunks big-a)
rows_by_n1=$(dbq "$TGT" "SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE step_code = 'big-a#1' AND chunk_no > 0")
echo "n1 committed $done_by_n1 chunks ($rows_by_n1 rows) before kill -9; progress was: $progress"
(( done_by_n1 >= 5 )) || fail "n1 committed $done_by_n1 chunks"
(( rows_by_n1 < 200000 )) || fail "n1 finished before it was killed; nothing to resume"
start_node n2 ${N2_PORT}
wait_for '[[ $(event_status big-a) == SUCCESS ]]' 180 "big-a SUCCESS on the next owner"
out=$(sql "SELECT output FROM distribute_event_step WHERE job_code = 'big-a'")
echo "step output: $out"
[[ $out == *"\"resumed_after_chunk\":$done_by_n1,"* ]] || fail "the next owner did not resume after chunk $done_by_n1: $out"
expect_eq "$(chunks big-a 1)" "$done_by_n1" "the first attempt's chunks are the ones committed before the kill"
expect_eq "$(dbq "$TGT" "SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE step_code = 'big-a#1' AND attempt = 2")" \
  "$((200000 - rows_by_n1))" "the next owner read only the rows after the checkpoint"
# Two lanes (key ranges split at row 0's hi_key) commit their chunks interleaved: every
# chunk starts where another ended (or at the table's start), and no two start alike.
expect_eq "$(dbq "$TGT" "SELECT JSON_LENGTH(hi_key) FROM dsync_sync_chunk WHERE step_code = 'big-a#1' AND chunk_no = 0")" \
  1 "the step ran in two lanes (one split key)"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk a WHERE a.step_code = 'big-a#1' AND a.chunk_no > 0
   AND a.lo_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM dsync_sync_chunk b WHERE b.step_code = a.step_code
   AND b.chunk_no > 0 AND b.hi_key = a.lo_key)")" 0 "chunk ranges follow each other without gap"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) - COUNT(DISTINCT COALESCE(lo_key, 'start')) FROM dsync_sync_chunk
   WHERE step_code = 'big-a#1' AND chunk_no > 0")" 0 "no two chunk ranges start at the same key"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk a JOIN dsync_sync_chunk z ON z.step_code = a.step_code
   AND z.chunk_no = 0 WHERE a.step_code = 'big-a#1' AND a.chunk_no > 0
   AND JSON_UNQUOTE(JSON_EXTRACT(a.lo_key, '\$[0]')) = JSON_UNQUOTE(JSON_EXTRACT(z.hi_key, '\$[0][0]'))")" 1 \
  "one chunk starts at the split key: the second lane's first"
expect_eq "$(differing)" 0 "target equals source after the resumed sync"

# --- B: the owner frozen past the offline timeout writes no chunk after losing ---------
dbq "$TGT" "UPDATE big SET name = CONCAT('older ', id)"
produce big-b '{"g": 1}' BIG
wait_for '[[ $(chunks big-b 2>/dev/null) -ge 3 ]]' 120 "three chunks of big-b committed by n2"
owner=$(node_of big-b)
expect_eq "$owner" "127.0.0.1:${N2_PORT}" "n2 runs big-b"
kill -STOP "$PID_n2"
start_node n3 ${N3_PORT}
wait_for '[[ $(node_of big-b) == 127.0.0.1:${N3_PORT} && $(event_status big-b) == RUNNING ]]' 30 "n3 took big-b over"
by_frozen=$(chunks big-b 1)
kill -CONT "$PID_n2"
wait_for '[[ $(event_status big-b) == SUCCESS ]]' 180 "big-b SUCCESS"
sleep 1
after_frozen=$(( $(chunks big-b 1) - by_frozen ))
echo "the frozen claim had $by_frozen chunks when n3 took over; $after_frozen committed after it resumed"
(( after_frozen == 0 || after_frozen == 1 )) ||
  fail "the frozen node committed $after_frozen chunks after losing the event (at most the one it was inside)"
# The target-side fencing token: the new claim raised it before its first chunk, so
# every chunk of the frozen claim precedes every chunk of the new one.
expect_eq "$(dbq "$TGT" "SELECT attempt FROM dsync_sync_chunk WHERE step_code = 'big-b#1' AND chunk_no = 0")" 2 \
  "the step's fencing token is the new claim's attempt"
expect_eq "$(dbq "$TGT" "SELECT MAX(chunk_no) < (SELECT MIN(chunk_no) FROM dsync_sync_chunk WHERE step_code = 'big-b#1'
   AND chunk_no > 0 AND attempt = 2) FROM dsync_sync_chunk WHERE step_code = 'big-b#1' AND chunk_no > 0 AND attempt = 1")" 1 \
  "every chunk of the frozen claim precedes every chunk of the new one"
expect_eq "$(dbq "$TGT" "SELECT SUM(rows_read) FROM dsync_sync_chunk WHERE step_code = 'big-b#1'")" 200000 \
  "each key range of big-b is in exactly one chunk record"
expect_eq "$(differing)" 0 "target equals source after the takeover"
expect_eq "$(saga_violations)" 0 "saga order holds"
echo "PASS table_sync_resume_test"
