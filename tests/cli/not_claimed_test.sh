#!/usr/bin/env bash
# Issue 16 item 1: an event left ASSIGNED to a live node that does not claim it is
# handed back by the leader's sweeper after the topic's claim_timeout_ms
# (version-fenced, process_log entry with the reason, metrics counter) and done by
# another node; the node is noted in `dsync nodes` / GET /v1/nodes.
#  A: a node restarted under its address with other --topics while holding ASSIGNED
#     events (kill -9, restart). Its start hands them back ("reset (not charged): node restarted");
#     the dispatcher, still reading the old incarnation's metadata (serves DEMO, row
#     live), gives them straight back to the address, where the new process never
#     claims them: only the not-claimed hand-back frees them, and another node runs
#     them. The moment in which the dispatcher acts on the old metadata (before the
#     new process's first heartbeat replaces it) is widened deterministically by
#     holding the registry row's lock over the restart, which delays that heartbeat.
#  B: events assigned to a live node for a topic it does not serve (what a dispatcher
#     with the node's old metadata does in the moment after such a restart; here by
#     plain SQL, deterministically): the node leaves them, the sweeper hands them back.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N0_PORT N1_PORT N2_PORT <<< "$(free_ports 3 | tr '\n' ' ')"

write_config claims '{
  "DEMO":  { "max_retry": 3, "backoff_base_ms": 100, "ordered": false, "claim_timeout_ms": 1500,
             "steps": [ { "name": "s1", "type": "demo" } ] },
  "OTHER": { "max_retry": 3, "backoff_base_ms": 100, "ordered": false,
             "steps": [ { "name": "o1", "type": "demo" } ] }
}' '{"registry": {"offline_timeout_ms": 8000}}'
dsync() { "$DSYNC_BIN" "$@" --config "$WORK/dsync.json"; }
count() { sql "SELECT COUNT(*) FROM distribute_event WHERE $1"; }
dsync migrate >/dev/null

# The leader (and API) runs in `all`, whose own node serves OTHER only.
port=$(free_port)
start_bg all "$DSYNC_BIN" all --config "$WORK/dsync.json" --listen "127.0.0.1:$port" \
  --node-address 127.0.0.1:${N0_PORT} --topics OTHER --capacity 2
wait_for "curl -sf http://127.0.0.1:$port/healthz >/dev/null || ! kill -0 $PID_all" 30 "API up on $port"

# --- A: restart with other --topics while holding ASSIGNED events --------------
# n1 runs one slow DEMO event and holds 3 more ASSIGNED (capacity 1, prefetch 3).
start_bg n1 "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${N1_PORT} --topics DEMO \
  --capacity 1 --prefetch 3
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE node_address = '"'127.0.0.1:${N1_PORT}'"' AND status = 1") == 1 ]]' 10 "n1 online"
for i in 1 2 3 4; do produce "a$i" '{"demo": {"sleep_ms": 1500}}'; done
wait_for '[[ $(count "code LIKE '"'a%'"' AND node_address = '"'127.0.0.1:${N1_PORT}'"' AND status = '"'ASSIGNED'"'") -ge 2 ]]' 15 "n1 holds ASSIGNED events"
# n1's row says it is full (1 of 1 busy): the sweeper leaves events assigned to it alone.
wait_for '[[ $(sql "SELECT JSON_VALUE(metadata, '"'\$.processing_count'"') FROM distribute_node_registry WHERE node_address = '"'127.0.0.1:${N1_PORT}'"'") == 1 ]]' 10 "n1 reports 1 of 1 busy"
kill9 "$PID_n1"
# n1's registry row locked for 4 s: the new process's first heartbeat (its own
# thread) waits for it, so the row keeps n1's metadata (serves DEMO, full, live under
# the 8 s offline timeout) while the new process already polls. A named lock tells
# when the row lock is held.
start_bg rowlock sql "BEGIN; SELECT id FROM distribute_node_registry WHERE node_address = '127.0.0.1:${N1_PORT}' FOR UPDATE;
  SELECT GET_LOCK('$SCHEMA.rowlock', 10); SELECT SLEEP(4); COMMIT"
wait_for '[[ $(sql "SELECT IS_USED_LOCK('"'$SCHEMA.rowlock'"') IS NOT NULL") == 1 ]]' 10 "n1's registry row locked"
start_bg n1b "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${N1_PORT} --topics OTHER
# Its start hands the 4 back; the dispatcher, reading n1's metadata (and 0 events in
# flight there now), assigns them to n1's address again: the only DEMO node it knows.
wait_for '[[ $(count "code LIKE '"'a%'"' AND status = '"'ASSIGNED'"' AND node_address = '"'127.0.0.1:${N1_PORT}'"'
                      AND process_log LIKE '"'%reset (not charged): node restarted%'"'") == 4 ]]' 10 \
  "A: the 4 handed back at start and assigned to n1's address again"
wait "$PID_rowlock" || fail "A: the row-lock session failed"
start_bg n2 "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${N2_PORT} --topics DEMO
wait_for '[[ $(count "code LIKE '"'a%'"' AND status = '"'SUCCESS'"'") == 4 ]]' 40 "the 4 events SUCCESS"
expect_eq "$(count "code LIKE 'a%' AND status = 'SUCCESS' AND node_address = '127.0.0.1:${N2_PORT}'")" 4 "A: all done by n2"
# What freed them from n1's address was the not-claimed hand-back: each one's history has it,
# after the start hand-back.
expect_eq "$(count "code LIKE 'a%' AND LOCATE('reset (not charged): node restarted', process_log) > 0
  AND LOCATE('reset (not charged): node restarted', process_log) < LOCATE('reset: not claimed by node 127.0.0.1:${N1_PORT} for ', process_log)
  AND process_log LIKE '%(claim_timeout_ms 1500; it does not serve topic DEMO)%'")" 4 \
  "A: the 4 handed back as not claimed by the restarted node, after its start hand-back (process_log)"
grep -qE "EVENT_RESET event=a[1-4] node=127.0.0.1:${N1_PORT} reason=not_claimed" "$WORK/all.log" \
  || fail "A: no EVENT_RESET reason=not_claimed for an a% event"
pass "A: EVENT_RESET reason=not_claimed logged for the a% events"

# --- B: ASSIGNED to a live node that does not serve the topic -----------------
# Written ASSIGNED to n1b directly, as a dispatcher reading n1's previous metadata would.
for i in 1 2 3; do
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status, node_address, assigned_time)
       VALUES ('t1', 'b$i', 'b$i', 'DEMO', '{}', 'ASSIGNED', '127.0.0.1:${N1_PORT}', NOW(3))"
done
sleep 0.7  # several polls of n1b: it must not claim them
expect_eq "$(count "code LIKE 'b%' AND status = 'ASSIGNED' AND node_address = '127.0.0.1:${N1_PORT}'")" 3 "B: n1b leaves events of a topic it does not serve"
wait_for '[[ $(count "code LIKE '"'b%'"' AND status = '"'SUCCESS'"'") == 3 ]]' 30 "B: the 3 events SUCCESS after the hand-back"
expect_eq "$(count "code LIKE 'b%' AND node_address = '127.0.0.1:${N2_PORT}'")" 3 "B: done by n2"
# The hand-back's process_log entry: ASSIGNED -> PENDING by n1b with the reason.
why=$(sql "SELECT JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[0].why')) FROM distribute_event WHERE code = 'b1'")
[[ $why == "reset: not claimed by node 127.0.0.1:${N1_PORT} for "*"claim_timeout_ms 1500; it does not serve topic DEMO)" ]] \
  || fail "B: process_log reason: $why"
pass "B: process_log names the node and the reason"
expect_eq "$(sql "SELECT CONCAT(JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[0].from')), '>', JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[0].to')), '@', JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[0].node'))) FROM distribute_event WHERE code = 'b1'")" \
  "ASSIGNED>PENDING@127.0.0.1:${N1_PORT}" "B: process_log entry ASSIGNED -> PENDING at n1b"
expect_eq "$(sql "SELECT retry_count FROM distribute_event WHERE code = 'b1'")" 0 "B: a hand-back costs no retry"
grep -q "EVENT_RESET event=b1 node=127.0.0.1:${N1_PORT} reason=not_claimed" "$WORK/all.log" || fail "B: no EVENT_RESET log line"
pass "B: EVENT_RESET reason=not_claimed logged"

# The node is noted, and the leader counted the hand-backs: the 4 of A and the 3 of B
# (and any a% event the dispatcher gave n1's address once more in the moment after a hand-back).
noted=$(sql "SELECT not_claimed_count FROM distribute_node_registry WHERE node_address = '127.0.0.1:${N1_PORT}'")
(( noted >= 7 )) || fail "n1b noted $noted times, expected at least 7 (4 of A, 3 of B)"
pass "n1b noted $noted times in the registry"
dsync nodes >"$WORK/nodes"
grep -q "did not claim $noted event(s)" "$WORK/nodes" || fail "dsync nodes does not note n1b: $(cat "$WORK/nodes")"
pass "dsync nodes notes the node"
curl -sf "http://127.0.0.1:$port/v1/nodes" >"$WORK/body"
expect_eq "$(jq -r --arg a "127.0.0.1:${N1_PORT}" '.nodes[] | select(.node_address == $a) | .not_claimed.count' "$WORK/body")" "$noted" "GET /v1/nodes: not_claimed.count"
curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/metrics"
grep -qE "^dsync_event_resets_total\{reason=\"not_claimed\"\} $noted\$" "$WORK/metrics" \
  || fail "metrics: $(grep dsync_event_resets_total "$WORK/metrics")"
pass "metrics: dsync_event_resets_total{reason=\"not_claimed\"} $noted"
# n2 claims what it gets: never noted.
expect_eq "$(sql "SELECT not_claimed_count FROM distribute_node_registry WHERE node_address = '127.0.0.1:${N2_PORT}'")" 0 "n2 not noted"
