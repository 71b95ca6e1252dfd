#!/usr/bin/env bash
# Issue 34 item 4, no silent waits, with real processes (a dispatcher, a node, `dsync
# serve`): `dsync migrate` names the service a plain INSERT belongs to; a dispatcher
# and a node of another service say so at start (SERVICE_NOT_DEFAULT); events held
# behind a blocker of their (tenant_id, data_id) (a topic no node serves, a topic no
# config knows, inserted by plain SQL), and a plain INSERT of a service no dispatcher
# serves, are listed with why by `dsync events --attention` within a cycle (the
# unknown topic within the leader's 10 s look) and counted on /metrics; `dsync cancel`
# (and POST /v1/events/{code}/cancel, behind the API token) ends the blockers, and the
# events they held reach SUCCESS.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r NODE_PORT <<< "$(free_ports 1 | tr '\n' ' ')"

token=s3cret-token
write_config app '{
  "DEMO":    { "max_retry": 1, "backoff_base_ms": 100, "steps": [ { "name": "s1", "type": "demo" } ] },
  "NOSERVE": { "max_retry": 1, "backoff_base_ms": 100, "steps": [ { "name": "s1", "type": "demo" } ] }
}' "{\"api\": {\"token\": \"$token\"}}"

# --- the service of a plain INSERT ---------------------------------------------
out=$("$DSYNC_BIN" migrate --db "$DB_URL")
[[ $out == *"a plain INSERT INTO distribute_event that names no service belongs to service 'kbs-sync' (the column default)"* ]] \
  || fail "migrate without --service names the default service: $out"
pass "migrate says which service a plain INSERT belongs to"
out=$("$DSYNC_BIN" migrate --config "$WORK/dsync.json")
[[ $out == *"belongs to service 'kbs-sync' (the column default); this config's service is 'app', whose dispatchers never run them"* ]] \
  || fail "migrate of another service says the default differs: $out"
pass "migrate of service app says a plain INSERT is not app's"

start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
port=$(free_port)
start_node node ${NODE_PORT} --topics DEMO  # NOSERVE: no node serves it
start_bg api "$DSYNC_BIN" serve --config "$WORK/dsync.json" --listen "127.0.0.1:$port"
wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1\") == 1 ]]" 15 "node online"
wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_lease_lock WHERE lock_name = 'dispatcher:app' AND expires_at > UTC_TIMESTAMP(3)\") == 1 ]]" 15 "a leader"
wait_for "curl -sf -H 'Authorization: Bearer $token' http://127.0.0.1:$port/healthz >/dev/null" 15 "API up"
for who in disp node; do
  n=$(grep -c "SERVICE_NOT_DEFAULT role=$([[ $who == disp ]] && echo dispatcher || echo node) service=app column_default=kbs-sync" "$WORK/$who.log" || true)
  expect_eq "$n" 1 "the $who warns once that its service is not the column default"
done

# --- blockers and the events they hold -------------------------------------------
ins() {  # ins CODE TOPIC DATA_ID: a plain INSERT of service app
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, service)
       VALUES ('t1', '$1', '$3', '$2', '{}', 'app')"
}
ins blk NOSERVE e1
ins later DEMO e1
ins ghost GHOST e2
ins ghost-later DEMO e2
ins free DEMO e3
sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('t1', 'plain-1', 'e9', 'DEMO', '{}')"
wait_for '[[ $(event_status free) == SUCCESS ]]' 15 "an event with nothing in its way runs"

attention() { "$DSYNC_BIN" events --attention --config "$WORK/dsync.json" --json >"$WORK/att.json" && cat "$WORK/att.json"; }
reason_of() { jq -r --arg c "$1" '.attention[] | select(.code == $c) | .reason' "$WORK/att.json"; }
# Within a cycle for the unroutable topic and the plain INSERT; the unknown topic once
# the leader looked (every 10 s).
wait_for 'attention >/dev/null; [[ $(reason_of ghost-later) == held_behind && $(reason_of later) == held_behind ]]' 15 \
  "held events listed"
expect_eq "$(reason_of blk)" unroutable "the blocker of a topic no node serves"
expect_eq "$(reason_of ghost)" unknown_topic "the blocker of a topic no config knows"
expect_eq "$(reason_of plain-1)" no_dispatcher_for_service "a plain INSERT of a service no dispatcher serves"
expect_eq "$(jq -r '.attention[] | select(.code == "later") | .blocker_code' "$WORK/att.json")" blk "later names its blocker"
expect_eq "$(jq -r '.attention[] | select(.code == "later") | .detail' "$WORK/att.json")" \
  "held behind blk (unroutable: no live node serves topic NOSERVE)" "later says why its blocker cannot run"
table=$("$DSYNC_BIN" events --attention --config "$WORK/dsync.json")
[[ $(grep -E '^held_behind +ghost-later ' <<<"$table") == *"held behind ghost (unknown_topic: no config of the leading dispatcher defines topic GHOST"* ]] \
  || fail "the table lists ghost-later with its blocker: $table"
pass "the table lists the held event with its blocker and the blocker's reason"
expect_eq "$(event_status later)$(event_status ghost-later)" PENDINGPENDING "held events wait"

# /metrics, behind the token.
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/metrics")" 401 "/metrics needs the token"
metrics=$(curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$port/metrics")
for want in 'held_behind"} 2' 'unroutable"} 1' 'unknown_topic"} 1' 'no_dispatcher_for_service"} 1'; do
  grep -qF "dsync_events_needing_attention{reason=\"$want" <<<"$metrics" || fail "metrics lack $want"
done
pass "metrics count the events needing attention by reason"
overview=$(curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/overview")
expect_eq "$(jq -r '.attention[] | select(.code == "ghost-later") | .blocker_code' <<<"$overview")" ghost \
  "the API overview lists the held event with its blocker"

# --- cancel -------------------------------------------------------------------------
out=$("$DSYNC_BIN" cancel blk --reason "no node will serve NOSERVE" --config "$WORK/dsync.json")
[[ $out == "event blk cancelled: FAILED"*"cancelled: no node will serve NOSERVE"* ]] || fail "cancel output: $out"
pass "dsync cancel ends the blocker"
[[ $(sql "SELECT process_log FROM distribute_event WHERE code = 'blk'") == *'"why": "cancelled by an operator: no node will serve NOSERVE"'* ]] \
  || fail "the reason is in the process log"
pass "the reason is in the process log"
wait_for '[[ $(event_status later) == SUCCESS ]]' 15 "the event blk held reaches SUCCESS"
pass "the held event ran"

# The API's cancel: refused without the token, done with it.
code=$(curl -s -o "$WORK/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -d '{"reason": "retired"}' "http://127.0.0.1:$port/v1/events/ghost/cancel")
expect_eq "$code" 401 "the API's cancel needs the token"
expect_eq "$(event_status ghost)" PENDING "a refused cancel changes nothing"
code=$(curl -s -o "$WORK/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $token" -d '{"reason": "topic GHOST retired"}' "http://127.0.0.1:$port/v1/events/ghost/cancel")
expect_eq "$code" 200 "POST /v1/events/ghost/cancel"
expect_eq "$(jq -r '.status + " " + .last_error' "$WORK/body")" "FAILED cancelled: topic GHOST retired" "the API answers the cancelled event"
wait_for '[[ $(event_status ghost-later) == SUCCESS ]]' 15 "the event ghost held reaches SUCCESS"
pass "the event held behind the unknown topic ran"

# What started or ended cannot be cancelled; bad input is one line, exit 2 or 1.
set +e
out=$("$DSYNC_BIN" cancel later --config "$WORK/dsync.json" 2>&1); rc=$?
set -e
[[ $rc -ne 0 && $out == *"is already SUCCESS; nothing to cancel"* ]] || fail "cancel of a finished event: rc=$rc $out"
pass "a finished event is not cancelled"
code=$(curl -s -o "$WORK/body" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  -H "Authorization: Bearer $token" -d '{"why": "x"}' "http://127.0.0.1:$port/v1/events/plain-1/cancel")
expect_eq "$code" 400 "an unknown field is refused"
"$DSYNC_BIN" cancel plain-1 --config "$WORK/dsync.json" >/dev/null
attention >/dev/null
expect_eq "$(jq '[.attention[] | select(.status == "PENDING")] | length' "$WORK/att.json")" 0 "nothing waits silently any more"
expect_eq "$(jq '[.attention[] | select(.reason == "failed")] | length' "$WORK/att.json")" 3 "the cancelled events are listed failed"
