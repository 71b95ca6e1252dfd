#!/usr/bin/env bash
# Issue 16 item 3 (issue 34: resets are counted apart from retries): a compensation
# that never completes ends FAILED, with the reason, listed in
# v_events_needing_attention.
#  A: the compensation kills its node every time: s2 fails permanently, the
#     compensation of s1 sleeps, and its node is kill -9ed each time it runs it (and
#     restarted under its address at once). Each interruption is a reset, counted in
#     the event's reset_count (not in the step's compensation retries: a crash is not
#     the step failing); the claim after more than max_resets (2) resets fails the
#     event instead of looping forever.
#  B: the compensation times out every time (the step's timeout_ms): FAILED after
#     max_retry retries, with the reason.
#  C: the compensation outlives the topic's max_processing_time_ms every time (no step
#     timeout_ms, no step_timeout_ms): that bound is each attempt's deadline on the node,
#     and the sweeper waits that bound plus its grace, so the node always times the
#     attempt out first: FAILED after max_retry retries, the bound named, never reset.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT <<< "$(free_ports 1 | tr '\n' ' ')"

write_config poison '{
  "DEMO": { "max_retry": 2, "max_resets": 2, "backoff_base_ms": 100, "backoff_max_ms": 200, "ordered": false,
            "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" } ] },
  "SLOW": { "max_retry": 2, "backoff_base_ms": 100, "backoff_max_ms": 200, "ordered": false,
            "steps": [ { "name": "s1", "type": "demo", "timeout_ms": 300 }, { "name": "s2", "type": "demo" } ] },
  "IDLE": { "max_retry": 2, "backoff_base_ms": 100, "backoff_max_ms": 200, "ordered": false,
            "max_processing_time_ms": 500,
            "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" } ] }
}' '{"consumer": {"drain_timeout_ms": 2000, "capacity": 2}}'
node_of() { sql "SELECT IFNULL(node_address, '') FROM distribute_event WHERE code = '$1'"; }
start_dispatch n1 ${N1_PORT}

# --- A: the compensation kills its node each time --------------------------------
produce crash '{"demo": {"fail": {"s2": "permanent"}, "compensation_sleep_ms": 60000}}'
for round in 1 2 3; do
  # The restarted node's own claim, not the state the killed process left (same status,
  # same address): the reset_count says how many hand-backs came before.
  wait_for '[[ $(event_status crash) == COMPENSATING && $(node_of crash) == 127.0.0.1:${N1_PORT} &&
               $(sql "SELECT reset_count FROM distribute_event WHERE code = '"'crash'"'") == $((round - 1)) ]]' 30 \
    "round $round: the compensation of s1 running on n1 after $((round - 1)) reset(s)"
  sleep 0.2
  kill9 "$PID_n1"
  start_node n1 ${N1_PORT}  # same address: its start hands back what the killed process held
  pass "round $round: n1 killed during the compensation and restarted"
done
wait_for '[[ $(event_status crash) == FAILED ]]' 30 "crash FAILED (is \$(event_status crash))"
expect_eq "$(sql "SELECT CONCAT(reset_count, ' ', retry_count) FROM distribute_event WHERE code = 'crash'")" "3 0" \
  "the three interrupted compensations counted as resets, none as a retry"
expect_eq "$(sql "SELECT compensation_retry_count FROM distribute_event_step WHERE job_code = 'crash' AND step_name = 's1'")" 0 \
  "no failed compensation counted on s1 (it never failed; its node died)"
expect_eq "$(sql "SELECT last_error FROM distribute_event WHERE code = 'crash'")" \
  "compensation of 's1' failed: reset 3 times (node crashes, freezes or lost database connections; max_resets 2), never by a step's own failure" \
  "last_error gives the reason"
expect_eq "$(sql "SELECT JSON_UNQUOTE(JSON_EXTRACT(result, '\$.compensation_failed_step')) FROM distribute_event WHERE code = 'crash'")" s1 \
  "result names the step whose compensation failed"
expect_eq "$(sql "SELECT reason FROM v_events_needing_attention WHERE code = 'crash'")" failed "listed in v_events_needing_attention"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'crash'")" 1 "s1 left applied (its compensation never ran to the end)"
expect_eq "$(sql "SELECT GROUP_CONCAT(CONCAT(j.f, '>', j.t) SEPARATOR ' ') FROM distribute_event e,
                    JSON_TABLE(e.process_log, '\$[*]' COLUMNS (f VARCHAR(20) PATH '\$.from', t VARCHAR(20) PATH '\$.to')) j
                  WHERE e.code = 'crash'")" \
  "PENDING>ASSIGNED ASSIGNED>RUNNING RUNNING>COMPENSATING COMPENSATING>PENDING PENDING>ASSIGNED ASSIGNED>COMPENSATING COMPENSATING>PENDING PENDING>ASSIGNED ASSIGNED>COMPENSATING COMPENSATING>PENDING PENDING>ASSIGNED ASSIGNED>COMPENSATING COMPENSATING>FAILED" \
  "process_log: the three interruptions, each hand-back and the end"
sleep 1
expect_eq "$(event_status crash)" FAILED "it stays FAILED (no retry loop)"
kill -0 "$PID_n1" 2>/dev/null || fail "n1 died without being killed"
pass "n1 is up"

# --- B: the compensation times out each time --------------------------------------
produce slow '{"demo": {"fail": {"s2": "permanent"}, "compensation_sleep_ms": 5000}}' SLOW
wait_for '[[ $(event_status slow) == FAILED ]]' 30 "slow FAILED (is \$(event_status slow))"
[[ $(sql "SELECT last_error FROM distribute_event WHERE code = 'slow'") == "compensation of 's1' failed: compensation retries exhausted (3 failures): timed out after 300 ms"* ]] \
  || fail "slow: last_error $(sql "SELECT last_error FROM distribute_event WHERE code = 'slow'")"
pass "slow: FAILED after max_retry, the timeout named"
expect_eq "$(sql "SELECT reason FROM v_events_needing_attention WHERE code = 'slow'")" failed "slow: listed in v_events_needing_attention"

# --- C: the compensation outlives max_processing_time each time (no step timeout) ---
# The topic's max_processing_time_ms (500 ms) is each attempt's deadline on the node
# (step_timeout_ms's default; the step has no timeout_ms), so the node times the
# compensation out itself: FAILED after max_retry retries, the topic's bound named.
# The sweeper's idle bound is 500 ms plus its grace (at least 2 s), so it never resets
# an attempt first (issue 39 item 5: when both were 500 ms, a loaded machine saw
# either outcome): each of the attempts is a failure charged to the compensation, none
# a reset.
produce idle '{"demo": {"fail": {"s2": "permanent"}, "compensation_sleep_ms": 1500}}' IDLE
wait_for '[[ $(event_status idle) == FAILED ]]' 40 "idle FAILED (is \$(event_status idle))"
expect_eq "$(sql "SELECT compensation_retry_count FROM distribute_event_step WHERE job_code = 'idle' AND step_name = 's1'")" 3 \
  "idle: the three timed-out compensations counted on s1 (max_retry + 1)"
expect_eq "$(sql "SELECT reset_count FROM distribute_event WHERE code = 'idle'")" 0 \
  "idle: never reset by the sweeper (its bound is above the attempt's deadline)"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code = 'idle' AND process_log LIKE '%no activity for%'")" 0 \
  "idle: no timed-out reset in the process_log"
idle_error=$(sql "SELECT last_error FROM distribute_event WHERE code = 'idle'")
[[ $idle_error == "compensation of 's1' failed: compensation retries exhausted (3 failures): timed out after 500 ms"* ]] \
  || fail "idle: last_error $idle_error"
pass "idle: FAILED after max_retry, the reason named ($idle_error)"
expect_eq "$(sql "SELECT reason FROM v_events_needing_attention WHERE code = 'idle'")" failed "idle: listed in v_events_needing_attention"
sleep 1
expect_eq "$(event_status idle)" FAILED "idle: it stays FAILED (no retry loop)"

expect_eq "$(process_log_gaps)" "" "process_log chains without gaps"
expect_eq "$(saga_violations)" 0 "saga order holds"
