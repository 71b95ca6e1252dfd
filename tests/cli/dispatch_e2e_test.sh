#!/usr/bin/env bash
# Issue 3 acceptance through real processes, on a MariaDB of its own (it restarts
# it): three dispatchers on 5,000 events over nodes of capacity 1:2:4 -> each event
# assigned once per attempt and work within +-10% of proportional; a draining node
# and a node without the topic get nothing; an ordered topic keeps per-entity order;
# the leader frozen past its lease -> another takes over, no double assignment; a
# MariaDB restart mid-dispatch -> everything continues without manual action.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r A_PORT B_PORT C_PORT X_PORT DRAINING_PORT <<< "$(free_ports 5 | tr '\n' ' ')"

# A server of our own: this test restarts it, and others run in parallel.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
OWN_DB=$(bash "$SRC/scripts/mariadb.sh" start)
own_url=$(bash "$SRC/scripts/mariadb.sh" url "$OWN_DB")
_u=${own_url#mysql://}; DB_USER=${_u%%:*}; _u=${_u#*:}; DB_PASS=${_u%%@*}; _u=${_u#*@}
DB_HOST=${_u%%:*}; _u=${_u#*:}; DB_PORT=${_u%%/*}
DB_URL="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/$SCHEMA"
trap 'cleanup; bash "$SRC/scripts/mariadb.sh" stop "$OWN_DB"' EXIT

write_config dispatch-e2e '{
  "W":     { "ordered": false, "max_processing_time_ms": 20000, "steps": [ { "name": "w", "type": "demo" } ] },
  "O":     { "ordered": true,  "steps": [ { "name": "o", "type": "demo" } ] },
  "OTHER": { "steps": [ { "name": "x", "type": "demo" } ] }
}' '{"registry":   {"heartbeat_interval_ms": 400, "offline_timeout_ms": 4000, "sweep_interval_ms": 500},
     "dispatcher": {"lease_ttl_ms": 2000},
     "consumer":   {"poll_interval_ms": 20, "drain_timeout_ms": 5000}}'
node() {  # node NAME PORT CAPACITY TOPICS
  start_bg "$1" "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$2" --capacity "$3" --topics "$4"
}
produce_many() {  # produce_many PREFIX COUNT TOPIC PAYLOAD [DATA_ID_MOD]
  local mod=${5:-0}
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
       SELECT 't1', CONCAT('$1-', seq), IF($mod > 0, CONCAT('e', seq % GREATEST($mod, 1)), CONCAT('$1-', seq)),
              '$3', '$4'
       FROM seq_1_to_$2"
}
count() { sql "SELECT COUNT(*) FROM distribute_event WHERE $1" 2>/dev/null; }

"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
for d in 1 2 3; do start_bg "d$d" "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"; done
node a ${A_PORT} 1 W,O
node b ${B_PORT} 2 W,O
node c ${C_PORT} 4 W,O
node x ${X_PORT} 4 OTHER
# A draining node serving everything, kept alive by SQL heartbeats (an operator
# drained it; it must get nothing new).
sql "INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time, metadata)
     VALUES ('dispatch-e2e', '127.0.0.1:${DRAINING_PORT}', 2, NOW(3), '{\"capacity\": 100, \"topics\": [\"*\"]}')"
( while sleep 0.3; do
    sql "UPDATE distribute_node_registry SET last_heartbeat_time = NOW(3) WHERE node_address = '127.0.0.1:${DRAINING_PORT}'" 2>/dev/null || true
  done ) &
STARTED_PIDS+=($!)
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 4 ]]' 10 "four nodes online"

# --- 5,000 events, three dispatchers, capacities 1:2:4 ---------------------------
produce_many w 5000 W '{"demo": {"sleep_ms": 8}}'
wait_for '[[ $(count "topic = '"'W'"' AND status = '"'SUCCESS'"'") == 5000 ]]' 120 "5000 W events SUCCESS"
expect_eq "$(count "topic = 'W' AND NOT (version = 4 AND attempt = 1)")" 0 \
  "every event assigned once and claimed once (version 4, attempt 1)"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code LIKE 'w-%' AND applications = 1")" 5000 \
  "each event's effect applied exactly once"
expect_eq "$(count "node_address IN ('127.0.0.1:${X_PORT}', '127.0.0.1:${DRAINING_PORT}')")" 0 \
  "the node without the topic and the draining node got nothing"
share() { sql "SELECT ROUND(100 * COUNT(*) / 5000) FROM distribute_event WHERE topic = 'W' AND node_address = '127.0.0.1:$1'"; }
sa=$(share ${A_PORT}); sb=$(share ${B_PORT}); sc=$(share ${C_PORT})
echo "shares (% of 5000) for capacity 1:2:4 -> $sa:$sb:$sc (proportional: 14.3:28.6:57.1)"
within() {  # within ACTUAL EXPECTED: |actual - expected| <= 10% of expected
  awk -v a="$1" -v e="$2" 'BEGIN { d = a - e; if (d < 0) d = -d; exit !(d <= 0.1 * e + 0.5) }'
}
within "$sa" 14.3 && within "$sb" 28.6 && within "$sc" 57.1 || fail "work not within 10% of proportional: $sa:$sb:$sc"
pass "work within 10% of proportional to capacity"
[[ $(sql "SELECT COUNT(DISTINCT owner) FROM distribute_lease_lock") == 1 ]] || fail "no lease holder"

# --- an ordered topic keeps per-entity order -------------------------------------
produce_many o 120 O '{"demo": {"sleep_ms": 15}}' 6
wait_for '[[ $(count "topic = '"'O'"' AND status = '"'SUCCESS'"'") == 120 ]]' 60 "120 ordered events SUCCESS"
expect_eq "$(sql "SELECT COUNT(*) FROM (SELECT started_time,
                  LAG(finished_time) OVER (PARTITION BY data_id ORDER BY id) AS previous_finished
                  FROM distribute_event WHERE topic = 'O') t WHERE started_time < previous_finished")" 0 \
  "per entity, each event started after the previous one finished (6 entities x 20)"

# --- the leader frozen past its lease: another takes over, nothing assigned twice --
leader_pid=$(sql "SELECT SUBSTRING_INDEX(SUBSTRING_INDEX(owner, ':', 2), ':', -1) FROM distribute_lease_lock")
token_before=$(sql "SELECT token FROM distribute_lease_lock")
produce_many f 1500 W '{"demo": {"sleep_ms": 8}}'
sleep 0.3
kill -STOP "$leader_pid"
wait_for '[[ $(sql "SELECT token FROM distribute_lease_lock") -gt '"$token_before"' ]]' 10 "a new lease holder"
sleep 1
kill -CONT "$leader_pid"   # wakes up mid-cycle with an expired lease
wait_for '[[ $(count "code LIKE '"'f-%'"' AND status = '"'SUCCESS'"'") == 1500 ]]' 90 "1500 events SUCCESS after the takeover"
expect_eq "$(count "code LIKE 'f-%' AND NOT (version = 4 AND attempt = 1)")" 0 "no event assigned twice across the takeover"
kill -0 "$leader_pid" || fail "the frozen dispatcher died"
pass "the thawed ex-leader kept running as a follower"

# --- a MariaDB restart mid-dispatch ------------------------------------------------
produce_many r 1500 W '{"demo": {"sleep_ms": 8}}'
wait_for '[[ $(count "code LIKE '"'r-%'"' AND status = '"'SUCCESS'"'") -ge 100 ]]' 30 "restart batch under way"
bash "$SRC/scripts/mariadb.sh" restart "$OWN_DB"
wait_for '[[ $(count "code LIKE '"'r-%'"' AND status = '"'SUCCESS'"'") == 1500 ]]' 120 "1500 events SUCCESS after the restart"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code LIKE 'r-%' AND applications = 1")" 1500 \
  "after the restart each effect applied exactly once"
for d in 1 2 3; do eval "kill -0 \$PID_d$d" || fail "dispatcher d$d died in the restart"; done
for n in a b c x; do eval "kill -0 \$PID_$n" || fail "node $n died in the restart"; done
pass "every process survived the database restart without manual action"

expect_eq "$(count "status NOT IN ('SUCCESS', 'COMPENSATED', 'FAILED')")" 0 "every event terminal"
expect_eq "$(saga_violations)" 0 "saga-order invariant holds"
grep -h "LEASE_ACQUIRED\|LEASE_LOST" "$WORK"/d*.log | sed -E 's/^[^ ]+ //' | head -8
