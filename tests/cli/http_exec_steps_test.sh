#!/usr/bin/env bash
# Issue 38 through real processes: `http` and `exec` steps on `dsync node`s.
#  1. A node is kill -9ed while its http step's call is in flight (the receiver holds the
#     answer for 4 s): the next owner calls again with the same Idempotency-Key, and the
#     receiver (examples/receivers/receiver.py, idempotent by the key) applies it once.
#  2. A node is drained (SIGTERM) during a long exec step: the child is killed when the
#     drain times out, the node exits 0, and the event is handed back, not charged.
#  3. A node is kill -9ed during an exec step: the child dies with it (PR_SET_PDEATHSIG).
#  0. First, bad step configs: `dsync node` refuses them at start, exit 2, one line.
source "$(dirname "$0")/lib.sh"
read -r N1_PORT N2_PORT N3_PORT RX_PORT <<< "$(free_ports 4 | tr '\n' ' ')"

fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, retry_count, reset_count, last_error FROM distribute_event" >&2; sql "SELECT code, status, error_details FROM distribute_event_step" >&2; tail -n 20 "$WORK"/*.log >&2; exit 1; }
PYTHON=$(command -v python3) || fail "python3 is not installed (scripts/setup.sh installs it)"
alive() { [[ -e /proc/$1 ]] && [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) != Z ]]; }

# --- 0. bad configs ------------------------------------------------------------------
refused() {  # refused STEP_JSON EXPECTED_LINE
  jq -n --arg db "$DB_URL" --argjson step "$1" '{database: $db, topics: {T: {steps: [$step]}}}' >"$WORK/bad.json"
  local out rc=0
  out=$("$DSYNC_BIN" node --config "$WORK/bad.json" --node-address "127.0.0.1:$N1_PORT" 2>&1) || rc=$?
  expect_eq "$rc $(wc -l <<<"$out")" "2 1" "refused at start with one line: $2"
  [[ $out == *"$2"* ]] || fail "expected '$2' in: $out"
}
refused '{"name": "x", "type": "exec", "command": ["reindex", "--all"]}' \
  "exec step 'x' command[0] must be an absolute path (no shell, no PATH search), got \"reindex\""
refused '{"name": "x", "type": "http", "url": "file:///etc/passwd"}' \
  "http step 'x' url has scheme 'file': only http and https are allowed"
refused '{"name": "x", "type": "http", "url": "http://{{payload.host}}/x"}' \
  "http step 'x' url has a placeholder outside the path and query"
refused '{"name": "x", "type": "http", "url": "http://h/x", "headers": {"X-Id": "{{payload.id}}"}}' \
  "http step 'x' header X-Id has a placeholder"

cat > "$WORK/long.sh" <<'SH'
#!/bin/sh
echo $$ > "$PID_FILE"
exec sleep 120
SH
chmod +x "$WORK/long.sh"

write_config httpexec "{
  \"NOTIFY\": { \"max_retry\": 2, \"backoff_base_ms\": 100, \"ordered\": false,
    \"steps\": [ { \"name\": \"refresh\", \"type\": \"http\", \"timeout_ms\": 20000,
                   \"url\": \"http://127.0.0.1:$RX_PORT/refresh\",
                   \"compensate\": { \"url\": \"http://127.0.0.1:$RX_PORT/refresh/undo\" } } ] },
  \"LONG\": { \"max_retry\": 2, \"backoff_base_ms\": 100, \"ordered\": false,
    \"steps\": [ { \"name\": \"long\", \"type\": \"exec\", \"timeout_ms\": 60000,
                   \"command\": [\"$WORK/long.sh\"], \"env\": { \"PID_FILE\": \"\${LONG_PID_FILE}\" } } ] }
}" '{"consumer": {"drain_timeout_ms": 1000}}'

# --- 1. kill -9 mid-call -----------------------------------------------------------
DELAY_FIRST_MS=4000 start_bg rx "$PYTHON" "$(dirname "$0")/../../examples/receivers/receiver.py" "$RX_PORT" "$WORK/journal"
wait_for "curl -sf http://127.0.0.1:$RX_PORT/ >/dev/null" 10 "the receiver answers"
LONG_PID_FILE="$WORK/unused.pid" start_dispatch n1 "$N1_PORT"
produce ev-1 '{"space_id": 1}' NOTIFY
wait_for "grep -q 'START /refresh ev-1#1' '$WORK/journal' 2>/dev/null" 20 "n1's call reached the receiver"
kill9 "$PID_n1"
pass "n1 kill -9ed while its call was in flight"
LONG_PID_FILE="$WORK/unused.pid" start_node n2 "$N2_PORT"
wait_for '[[ $(event_status ev-1) == SUCCESS ]]' 60 "ev-1 SUCCESS on the next owner (is \$(event_status ev-1))"
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'ev-1'")" "127.0.0.1:$N2_PORT" "n2 finished ev-1"
expect_eq "$(grep -c '^START /refresh ev-1#1$' "$WORK/journal")" 2 "the receiver was called twice"
expect_eq "$(grep -c '^POST /refresh ev-1#1 200$' "$WORK/journal")" 2 "both calls carried the same Idempotency-Key (the step code)"
expect_eq "$(curl -sf "http://127.0.0.1:$RX_PORT/" | jq -c .applied)" '{"ev-1":1}' "the receiver applied it once"
expect_eq "$(sql "SELECT JSON_EXTRACT(output, '\$.applied') FROM distribute_event_step WHERE code = 'ev-1#1'")" 1 \
  "the step's output is the receiver's answer"
expect_eq "$(sql "SELECT CONCAT(retry_count, ' ', reset_count) FROM distribute_event WHERE code = 'ev-1'")" "0 1" \
  "the kill counted as a reset, not a retry"

# --- 2. drain during a long exec -----------------------------------------------------
LONG_PID_FILE="$WORK/long-2.pid" start_node n3 "$N3_PORT"
wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '127.0.0.1:$N3_PORT'\") == 1 ]]" 15 "n3 online"
kill -TERM "$PID_n2"; wait "$PID_n2" || true  # only n3 runs LONG events from here
produce ev-2 '{}' LONG
wait_for "[[ -s '$WORK/long-2.pid' ]]" 20 "the exec step's child started"
child=$(cat "$WORK/long-2.pid")
alive "$child" || fail "the child $child is not running"
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'ev-2'")" "127.0.0.1:$N3_PORT" "n3 runs ev-2"
t0=$(now_ms)
kill -TERM "$PID_n3"
rc=0; wait "$PID_n3" || rc=$?
took=$(( $(now_ms) - t0 ))
expect_eq "$rc" 0 "n3 exits 0 after its drain"
(( took < 6000 )) || fail "the drain took $took ms (drain_timeout 1 s, TERM grace 1 s)"
pass "the drain ended in $took ms"
alive "$child" && fail "the exec child $child outlived the drain"
pass "the exec child was killed"
wait_for '[[ $(event_status ev-2) == PENDING ]]' 10 "ev-2 handed back (is \$(event_status ev-2))"
expect_eq "$(sql "SELECT CONCAT(retry_count, ' ', IFNULL(node_address, 'none')) FROM distribute_event WHERE code = 'ev-2'")" \
  "0 none" "ev-2 handed back, not charged"
grep -q "EXEC_KILLED event=ev-2" "$WORK/n3.log" || fail "no EXEC_KILLED line in n3's log"
pass "n3 logged EXEC_KILLED"

# --- 3. kill -9 during an exec: the child dies with the node -------------------------
LONG_PID_FILE="$WORK/long-3.pid" start_node n4 "$N1_PORT"
wait_for "[[ -s '$WORK/long-3.pid' ]]" 30 "ev-2's exec child started again on n4"
child=$(cat "$WORK/long-3.pid")
alive "$child" || fail "the child $child is not running"
kill9 "$PID_n4"
wait_for "! alive $child" 3 "the exec child dies with its node"
pass "the exec child did not outlive its kill -9ed node"
expect_eq "$(saga_violations)" 0 "saga order holds"
