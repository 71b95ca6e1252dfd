#!/usr/bin/env bash
# Issues 3+4 acceptance through real processes: one dispatcher, two (then three)
# consumer nodes, 3-step `demo` events with scripted fates; kill -9 of a node
# mid-step, the same node restarted at once under its address, a node frozen with
# SIGSTOP past the offline timeout, SIGTERM drain. Checked with SQL: statuses,
# step history, demo_ledger (each effect applied exactly once), saga order.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT N2_PORT N3_PORT <<< "$(free_ports 3 | tr '\n' ' ')"

write_config e2e '{
  "DEMO": {
    "max_retry": 3, "backoff_base_ms": 100, "backoff_max_ms": 400, "ordered": false,
    "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" }, { "name": "s3", "type": "demo" } ]
  }
}' '{"consumer": {"drain_timeout_ms": 8000, "capacity": 4}}'
export DSYNC_LOG_LEVEL=info
dsync() { "$DSYNC_BIN" "$@" --config "$WORK/dsync.json"; }
node_of() { sql "SELECT node_address FROM distribute_event WHERE code = '$1'"; }
wait_status() {  # wait_status CODE STATUS TIMEOUT
  wait_for "[[ \$(event_status $1) == $2 ]]" "$3" "$1 to become $2 (is \$(event_status $1))"
}
ledger_ok() {  # every ledger row of the event applied exactly once, N rows
  local rows once
  rows=$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = '$1'")
  once=$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = '$1' AND applications = 1")
  expect_eq "$rows/$once" "$2/$2" "$1: demo_ledger has $2 rows, each applied once"
}

dsync migrate >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_node n1 ${N1_PORT}
start_node n2 ${N2_PORT}
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 2 ]]' 10 "two nodes online"

# --- A: plain 3-step events all succeed, spread over both nodes ----------------
for i in $(seq 1 30); do produce "ok-$i" '{}'; done
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE '"'ok-%'"' AND status = '"'SUCCESS'"'") == 30 ]]' 30 "30 events SUCCESS"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step WHERE job_code LIKE 'ok-%' AND status = 'SUCCESS'")" 90 "90 steps SUCCESS"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code LIKE 'ok-%' AND applications = 1")" 90 "ledger: 90 rows applied once"
expect_eq "$(sql "SELECT COUNT(DISTINCT node_address) FROM distribute_event WHERE code LIKE 'ok-%'")" 2 "work spread over both nodes"

# --- B: step 2 fails transiently twice, then succeeds -------------------------
produce transient '{"demo": {"fail": {"s2": 2}}}'
wait_status transient SUCCESS 20
expect_eq "$(sql "SELECT retry_count FROM distribute_event_step WHERE job_code = 'transient' AND step_name = 's2'")" 2 "s2 retried twice"
expect_eq "$(sql "SELECT retry_count FROM distribute_event WHERE code = 'transient'")" 2 "event retry_count 2"
ledger_ok transient 3

# --- C: step 3 fails permanently: s2 then s1 compensated -----------------------
produce permanent '{"demo": {"fail": {"s3": "permanent"}}}'
wait_status permanent COMPENSATED 20
expect_eq "$(sql "SELECT GROUP_CONCAT(step_name, ':', status ORDER BY sort) FROM distribute_event_step WHERE job_code = 'permanent'")" \
  "s1:COMPENSATED,s2:COMPENSATED,s3:FAILED" "permanent: step statuses"
expect_eq "$(sql "SELECT GROUP_CONCAT(step_name ORDER BY compensated_at, sort DESC) FROM distribute_event_step WHERE job_code = 'permanent' AND status = 'COMPENSATED'")" \
  "s2,s1" "permanent: compensated in reverse order"
[[ $(sql "SELECT result FROM distribute_event WHERE code = 'permanent'") == *s3* ]] || fail "result does not name the failed step"
ledger_ok permanent 0

# --- D: a compensation that fails once, then succeeds --------------------------
produce comp-once '{"demo": {"fail": {"s3": "permanent"}, "fail_compensation": {"s1": 1}}}'
wait_status comp-once COMPENSATED 20
expect_eq "$(sql "SELECT compensation_retry_count FROM distribute_event_step WHERE job_code = 'comp-once' AND step_name = 's1'")" 1 "s1 compensation retried once"
ledger_ok comp-once 0

# --- E: a compensation that never succeeds: FAILED, needing attention ---------
produce comp-never '{"demo": {"fail": {"s3": "permanent"}, "fail_compensation": {"s2": "always"}}}'
wait_status comp-never FAILED 30
expect_eq "$(sql "SELECT COUNT(*) FROM v_events_needing_attention WHERE code = 'comp-never'")" 1 "FAILED event listed in v_events_needing_attention"

# --- F: kill -9 a node mid-step: resumes elsewhere, SUCCESS steps not rerun -----
produce killed '{"demo": {"sleep_ms": 700}}'
wait_for '[[ $(sql "SELECT status FROM distribute_event_step WHERE job_code = '"'killed'"' AND step_name = '"'s2'"'") == EXECUTING ]]' 20 "killed: s2 executing"
victim=$(node_of killed)
[[ $victim == 127.0.0.1:${N1_PORT} ]] && victim_name=n1 || victim_name=n2
first_attempt=$(sql "SELECT attempt FROM distribute_event WHERE code = 'killed'")
eval "kill9 \$PID_$victim_name"
wait_status killed SUCCESS 30
[[ $(node_of killed) != "$victim" ]] || fail "killed: finished on the killed node"
expect_eq "$(sql "SELECT attempt FROM distribute_event_step WHERE job_code = 'killed' AND step_name = 's1'")" "$first_attempt" \
  "killed: s1 not executed again after the crash"
[[ $(sql "SELECT attempt FROM distribute_event_step WHERE job_code = 'killed' AND step_name = 's2'") -gt $first_attempt ]] \
  || fail "killed: s2 was not re-executed by the new owner"
ledger_ok killed 3

# --- G: the same node restarted at once takes its orphans back, no timeout -----
start_node "$victim_name" "${victim##*:}"
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 2 ]]' 10 "killed node back online"
produce restarted '{"demo": {"sleep_ms": 600}}'
wait_for '[[ $(sql "SELECT status FROM distribute_event_step WHERE job_code = '"'restarted'"' AND step_name = '"'s1'"'") == EXECUTING ]]' 20 "restarted: s1 executing"
owner=$(node_of restarted)
[[ $owner == 127.0.0.1:${N1_PORT} ]] && owner_name=n1 || owner_name=n2
eval "kill9 \$PID_$owner_name"
start_node "$owner_name" "${owner##*:}"
# Handed back at the restart, long before the 1.5 s offline timeout could expire.
wait_for '[[ $(sql "SELECT last_error FROM distribute_event WHERE code = '"'restarted'"'") == *"node restarted"* ]]' 1.2 \
  "restarted: orphan handed back by the restarted node"
wait_status restarted SUCCESS 30
ledger_ok restarted 3

# --- H: a node frozen past the offline timeout writes nothing after it thaws ----
start_node n3 ${N3_PORT}
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 3 ]]' 10 "three nodes online"
produce frozen '{"demo": {"sleep_ms": 800}}'
wait_for '[[ $(sql "SELECT status FROM distribute_event_step WHERE job_code = '"'frozen'"' AND step_name = '"'s2'"'") == EXECUTING ]]' 20 "frozen: s2 executing"
fowner=$(node_of frozen)
case $fowner in *${N1_PORT}) fname=n1 ;; *${N2_PORT}) fname=n2 ;; *) fname=n3 ;; esac
eval "fpid=\$PID_$fname"
kill -STOP "$fpid"
wait_status frozen SUCCESS 30
[[ $(node_of frozen) != "$fowner" ]] || fail "frozen: finished by the frozen node"
kill -CONT "$fpid"
sleep 1.5   # let the thawed node finish its sleep and try to write
ledger_ok frozen 3
expect_eq "$(event_status frozen)" SUCCESS "frozen: still SUCCESS after the frozen node woke up"
grep -q "EVENT_LOST_OWNERSHIP event=frozen" "$WORK/$fname.log" || fail "frozen node did not report lost ownership"
pass "frozen node discarded its late result"

# --- I: SIGTERM drains cleanly --------------------------------------------------
for i in $(seq 1 6); do produce "drain-$i" '{"demo": {"sleep_ms": 200}}'; done
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE '"'drain-%'"' AND status = '"'RUNNING'"' AND node_address = '"'127.0.0.1:${N3_PORT}'"'") -ge 1 ]]' 20 "n3 running a drain event"
kill -TERM "$PID_n3"
rc=0; wait "$PID_n3" || rc=$?
expect_eq "$rc" 0 "n3 exits 0 after SIGTERM"
expect_eq "$(sql "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:${N3_PORT}'")" 0 "n3 offline after the drain"
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE '"'drain-%'"' AND status = '"'SUCCESS'"'") == 6 ]]' 30 "all drain events SUCCESS"

# --- everything terminal, saga order holds, nothing applied twice ---------------
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE status NOT IN ('SUCCESS', 'COMPENSATED', 'FAILED')")" 0 "every event terminal"
expect_eq "$(saga_violations)" 0 "saga-order invariant holds for every event"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE applications <> 1")" 0 "no ledger effect applied twice"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger l JOIN distribute_event e ON e.code = l.event_code WHERE e.status <> 'SUCCESS' AND e.status <> 'FAILED'")" 0 \
  "compensated events left no ledger rows"
if grep -q "$DB_PASS" "$WORK"/*.log; then fail "a password was logged"; fi
pass "no password in logs"
