#!/usr/bin/env bash
# Issue 16 item 4: two services in one database, each with its own dispatcher and
# nodes (real processes). Each service's dispatcher assigns only its own events to its
# own nodes; with one service's dispatcher and nodes killed (kill -9) while its events
# are in flight, the other service's leader neither resets those events, nor assigns
# its new ones, nor marks its nodes offline; the killed service recovers its events
# when it comes back. `dsync purge` of one service leaves the other's events alone.
# Events name their service in the `service` column; a plain INSERT that names none
# belongs to the service whose `dsync migrate` created the schema.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r ALPHA1_PORT ALPHA2_PORT BETA1_PORT BETA2_PORT <<< "$(free_ports 4 | tr '\n' ' ')"

config() {  # config SERVICE -> $WORK/SERVICE.json, a config file for that service
  CONFIG_FILE="$WORK/$1.json" write_config "$1" '{
    "DEMO": { "max_retry": 5, "backoff_base_ms": 100, "ordered": false, "max_processing_time_ms": 60000,
              "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" } ] }
  }' '{"dispatcher": {"lease_ttl_ms": 2000}}'
}
config alpha
config beta
count() { sql "SELECT COUNT(*) FROM distribute_event WHERE $1"; }
# The addresses of each service's nodes, as SQL lists.
alpha_nodes="'127.0.0.1:${ALPHA1_PORT}','127.0.0.1:${ALPHA2_PORT}'"
beta_nodes="'127.0.0.1:${BETA1_PORT}','127.0.0.1:${BETA2_PORT}'"

"$DSYNC_BIN" migrate --config "$WORK/alpha.json" >/dev/null
expect_eq "$(sql "SELECT COLUMN_DEFAULT FROM information_schema.columns WHERE table_schema = DATABASE()
                  AND table_name = 'distribute_event' AND column_name = 'service'")" "'alpha'" \
  "the column default is the migrating config's service"
"$DSYNC_BIN" migrate --config "$WORK/beta.json" >/dev/null  # a second service: nothing to change

start_alpha() {
  start_bg alpha_d "$DSYNC_BIN" dispatcher --config "$WORK/alpha.json"
  start_bg alpha_n1 "$DSYNC_BIN" node --config "$WORK/alpha.json" --node-address 127.0.0.1:${ALPHA1_PORT} --capacity 4
  start_bg alpha_n2 "$DSYNC_BIN" node --config "$WORK/alpha.json" --node-address 127.0.0.1:${ALPHA2_PORT} --capacity 4
}
start_alpha
start_bg beta_d "$DSYNC_BIN" dispatcher --config "$WORK/beta.json"
start_bg beta_n1 "$DSYNC_BIN" node --config "$WORK/beta.json" --node-address 127.0.0.1:${BETA1_PORT} --capacity 4
start_bg beta_n2 "$DSYNC_BIN" node --config "$WORK/beta.json" --node-address 127.0.0.1:${BETA2_PORT} --capacity 4
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 4 ]]' 15 "4 nodes online"

# --- both services side by side -------------------------------------------------
# alpha: the seed's plain INSERT (no service named); beta: dsync produce with beta's
# config, and a plain INSERT that names the service.
for i in $(seq 1 30); do produce "a$i" '{"demo": {"sleep_ms": 20}}'; done
for i in $(seq 1 25); do
  "$DSYNC_BIN" produce --config "$WORK/beta.json" --topic DEMO --code "b$i" --tenant t1 --data-id "b$i" --payload '{"demo": {"sleep_ms": 20}}' >/dev/null
done
for i in $(seq 26 30); do
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, service)
       VALUES ('t1', 'b$i', 'b$i', 'DEMO', '{\"demo\": {\"sleep_ms\": 20}}', 'beta')"
done
expect_eq "$(count "code LIKE 'a%' AND service = 'alpha'")" 30 "plain INSERTs belong to alpha"
expect_eq "$(count "code LIKE 'b%' AND service = 'beta'")" 30 "beta's events carry beta"
wait_for '[[ $(count "status = '"'SUCCESS'"'") == 60 ]]' 60 "all 60 events SUCCESS"
expect_eq "$(count "service = 'alpha' AND node_address NOT IN ($alpha_nodes)")" 0 "alpha's events ran on alpha's nodes only"
expect_eq "$(count "service = 'beta' AND node_address NOT IN ($beta_nodes)")" 0 "beta's events ran on beta's nodes only"
# No step of either service was ever executed by the other's nodes.
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
                  WHERE (e.service = 'alpha' AND s.node_address NOT IN ($alpha_nodes))
                     OR (e.service = 'beta' AND s.node_address NOT IN ($beta_nodes))")" 0 "steps ran in their own service"

# beta's dispatcher says once that plain INSERTs naming no service are not its own.
grep -q "DISPATCHER_SERVICE_NOT_DEFAULT service=beta default=alpha" "$WORK/beta_d.log" \
  || fail "beta's dispatcher did not warn that the default service is alpha"
grep -q DISPATCHER_SERVICE_NOT_DEFAULT "$WORK/alpha_d.log" && fail "alpha's dispatcher warned about its own default"
pass "beta's dispatcher warns that plain INSERTs belong to alpha; alpha's does not"

# --- alpha killed with events in flight: beta leaves them alone -------------------
for i in $(seq 1 8); do produce "slow$i" '{"demo": {"sleep_ms": 4000}}'; done
wait_for '[[ $(count "code LIKE '"'slow%'"' AND status IN ('"'ASSIGNED'"', '"'RUNNING'"')") == 8 ]]' 15 "alpha's slow events in flight"
kill9 "$PID_alpha_d"; kill9 "$PID_alpha_n1"; kill9 "$PID_alpha_n2"
held_before=$(sql "SELECT GROUP_CONCAT(CONCAT(code, ':', status, ':', version, ':', node_address) ORDER BY code)
                   FROM distribute_event WHERE code LIKE 'slow%'")
# New alpha events while alpha has no dispatcher and no node: beta must not take them.
for i in $(seq 1 5); do produce "late$i" '{}'; done
# beta keeps working meanwhile, well past alpha's offline timeout (1.5 s) and several
# of beta's sweeps (every 250 ms).
for i in $(seq 31 40); do
  "$DSYNC_BIN" produce --config "$WORK/beta.json" --topic DEMO --code "b$i" --tenant t1 --data-id "b$i" --payload '{"demo": {"sleep_ms": 300}}' >/dev/null
done
wait_for '[[ $(count "code LIKE '"'b%'"' AND status = '"'SUCCESS'"'") == 40 ]]' 30 "beta's new events SUCCESS while alpha is down"
sleep 2
expect_eq "$(sql "SELECT GROUP_CONCAT(CONCAT(code, ':', status, ':', version, ':', node_address) ORDER BY code)
                  FROM distribute_event WHERE code LIKE 'slow%'")" "$held_before" \
  "beta's sweeper did not reset alpha's in-flight events (status, version and node unchanged)"
expect_eq "$(count "code LIKE 'late%' AND status = 'PENDING' AND node_address IS NULL")" 5 \
  "beta's dispatcher did not assign alpha's new events"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE service_name = 'alpha' AND status = 1")" 2 \
  "beta's sweeper did not mark alpha's dead nodes offline"
grep -q 'EVENT_RESET' "$WORK/beta_d.log" && fail "beta's dispatcher reset an event: $(grep EVENT_RESET "$WORK/beta_d.log" | head -3)"
pass "beta's dispatcher logged no reset"

# --- alpha comes back: its own leader recovers its events -------------------------
start_alpha
wait_for '[[ $(count "service = '"'alpha'"' AND status = '"'SUCCESS'"'") == 43 ]]' 60 "alpha's 43 events SUCCESS after its restart"
expect_eq "$(count "service = 'alpha' AND node_address NOT IN ($alpha_nodes)")" 0 "recovered events ran on alpha's nodes"
# Handed back by alpha alone (its restarted nodes, or its leader's sweeper): each slow
# event went back to PENDING once, after the kill.
expect_eq "$(count "code LIKE 'slow%' AND JSON_SEARCH(process_log, 'one', 'PENDING', NULL, '\$[*].to') IS NOT NULL")" 8 \
  "alpha's in-flight events were handed back after alpha's restart"
handed=$(cat "$WORK"/alpha_n*.log | sed -n 's/.*NODE_STARTED.*orphans_handed_back=\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')
resets=$(grep -c 'EVENT_RESET event=slow' "$WORK/alpha_d.log" || true)
(( handed + resets >= 8 )) || fail "alpha handed back $handed and reset $resets of its 8 events"
pass "alpha's nodes handed back $handed and its leader reset $resets of the 8"
expect_eq "$(saga_violations)" 0 "saga order holds in both services"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE applications <> 1")" 0 "every demo step applied exactly once"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event e JOIN distribute_event_step s ON s.job_code = e.code
                  LEFT JOIN demo_ledger l ON l.idempotency_key = s.code WHERE l.idempotency_key IS NULL")" 0 \
  "a ledger row for every step of every event"
expect_eq "$(process_log_gaps | wc -l)" 0 "every event's history is whole"

# --- purge per service -----------------------------------------------------------
"$DSYNC_BIN" purge --config "$WORK/beta.json" --older-than 0s --dry-run --json >"$WORK/dry"
expect_eq "$(jq -r '.events' "$WORK/dry")" 40 "purge --dry-run of beta counts beta's 40 events"
"$DSYNC_BIN" purge --config "$WORK/beta.json" --older-than 0s --json >"$WORK/purged"
expect_eq "$(jq -r '.events' "$WORK/purged")" 40 "purge of beta removes beta's 40 events"
expect_eq "$(count "service = 'beta'")" 0 "no beta event left"
expect_eq "$(count "service = 'alpha'")" 43 "alpha's 43 events untouched"
