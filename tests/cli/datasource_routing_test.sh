#!/usr/bin/env bash
# Issue 13 item 4 through real processes: datasource-aware routing and bad topics.
#  - `dsync all --datasources env_a` (dispatcher + API + node A) reaches env_a only,
#    and its config holds a topic whose plan cannot build: the node starts anyway,
#    serves the good topics and reports the bad one (log, heartbeat, `dsync nodes`);
#  - a table_sync env_a -> env_b event stays PENDING, is listed as unroutable with
#    the reason in v_events_needing_attention and in /metrics; an event of the bad
#    topic likewise;
#  - node B, which reaches env_b, joins: the event runs to SUCCESS there and the
#    target row equals the source row; the listing and the gauge clear.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r A_PORT B_PORT <<< "$(free_ports 2 | tr '\n' ' ')"

with_datasources
# On failure, show what the processes said.
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}

on_both "CREATE TABLE item (id INT PRIMARY KEY, name VARCHAR(50))"
dbq "$SRC" "INSERT INTO item VALUES (1, 'from env_a'), (2, 'other')"

write_config routing '{
  "SYNC":   { "steps": [ { "name": "items", "type": "table_sync", "source": "env_a", "target": "env_b",
                           "table": "item", "where": "id = :id" } ] },
  "DEMO":   { "steps": [ { "name": "s1", "type": "demo" } ] },
  "BROKEN": { "steps": [ { "name": "odd", "type": "no_such_type" } ] }
}' "$DATASOURCES" '{"consumer": {"drain_timeout_ms": 5000, "capacity": 2}}'
export DSYNC_LOG_LEVEL=info
dsync() { "$DSYNC_BIN" "$@" --config "$WORK/dsync.json"; }
wait_status() {  # wait_status CODE STATUS TIMEOUT
  wait_for "[[ \$(event_status $1) == $2 ]]" "$3" "$1 to become $2 (is \$(event_status $1))"
}
metadata_of() { sql "SELECT metadata FROM distribute_node_registry WHERE node_address = '$1'"; }

# Bad input: an unknown datasource name is one line, exit 2, nothing started.
rc=0
dsync node --datasources env_a,env_z >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
expect_eq "$rc/$(wc -l < "$WORK/err")" "2/1" "--datasources with an unknown name: exit 2, one line"
grep -qF "unknown datasource 'env_z' (the config has: env_a, env_b)" "$WORK/err" || fail "got: $(cat "$WORK/err")"

dsync migrate >/dev/null
port=$(free_port)
start_bg all "$DSYNC_BIN" all --config "$WORK/dsync.json" --listen "127.0.0.1:$port" \
  --node-address 127.0.0.1:${A_PORT} --datasources env_a
# 30 s: under a loaded machine (other suites in parallel) a start may take a while.
wait_for "curl -sf http://127.0.0.1:$port/healthz >/dev/null || ! kill -0 $PID_all" 30 "API up on $port"
kill -0 "$PID_all" || fail "dsync all exited at start: $(tail -5 "$WORK/all.log")"

# --- node A: reaches env_a only, reports the bad topic, serves the others ---------
wait_for '[[ $(metadata_of 127.0.0.1:${A_PORT}) == *"\"datasources\":[\"env_a\"]"* ]]' 10 "node A reports datasources [env_a]"
md=$(metadata_of 127.0.0.1:${A_PORT})
[[ $md == *'"bad_topics":{"BROKEN":'*"unknown step type 'no_such_type'"* ]] || fail "bad_topics not in metadata: $md"
pass "node A reports bad topic BROKEN in its heartbeat"
grep -q "TOPIC_PLAN_INVALID .*topic=BROKEN .*steps\[0\] (odd): unknown step type 'no_such_type'" "$WORK/all.log" \
  || fail "no TOPIC_PLAN_INVALID line naming the step: $(grep -i error "$WORK/all.log" | head -3)"
pass "node A logs the bad topic with its step and reason"
errors=$(grep -E ' error +all\[' "$WORK/all.log" || true)
[[ $(echo "$errors" | grep -c .) == 1 ]] || fail "expected exactly one ERROR line, got: $errors"
md_topics=$(sql "SELECT JSON_EXTRACT(metadata, '$.topics') FROM distribute_node_registry WHERE node_address = '127.0.0.1:${A_PORT}'")
[[ $md_topics != *BROKEN* ]] || fail "node A still lists BROKEN among its topics: $md_topics"

nodes=$(dsync nodes)
echo "$nodes" | grep -E "^127\\.0\\.0\\.1:${A_PORT} .* env_a\$" >/dev/null || fail "dsync nodes row lacks env_a: $nodes"
echo "$nodes" | grep -qF "    bad topic BROKEN: config: topics.BROKEN.steps[0] (odd): unknown step type" || fail "dsync nodes: $nodes"
json=$(dsync nodes --json)
[[ $(echo "$json" | grep -c '"BROKEN"') == 1 && $json == *'"datasources": ['*'"env_a"'*']'* ]] || fail "dsync nodes --json: $json"
pass "dsync nodes shows reachable datasources and the bad topic (table and --json)"

produce demo-1 '{}' DEMO
wait_status demo-1 SUCCESS 15
pass "node A serves its good topic despite the bad one"

# --- an event whose target no live node reaches --------------------------------
produce sync-1 '{"id": 1}' SYNC
produce broken-1 '{}' BROKEN
attention() {  # attention CODE -> "reason|detail"
  sql "SELECT CONCAT(reason, '|', COALESCE(detail, '')) FROM v_events_needing_attention WHERE code = '$1'"
}
wait_for '[[ $(attention sync-1) == unroutable* ]]' 10 "sync-1 listed as unroutable"
row=$(attention sync-1)
[[ $row == *"reaches every datasource it needs (env_a,env_b)"*"127.0.0.1:${A_PORT} lacks env_b"* ]] || fail "reason: $row"
pass "v_events_needing_attention: sync-1 unroutable, 127.0.0.1:${A_PORT} lacks env_b"
wait_for '[[ $(attention broken-1) == unroutable* ]]' 10 "broken-1 listed as unroutable"
[[ $(attention broken-1) == *"plan failed to build on every live node serving it"*"unknown step type"* ]] \
  || fail "reason: $(attention broken-1)"
pass "v_events_needing_attention: broken-1 unroutable, its plan failed on node A"
# metrics_line PATTERN: /metrics has a line matching the extended regex exactly.
metrics_line() { curl -sf "http://127.0.0.1:$port/metrics" >"$WORK/metrics" && grep -qxE "$1" "$WORK/metrics"; }
wait_for "metrics_line 'dsync_events_unroutable\{topic=\"SYNC\"\} 1'" 15 "gauge for SYNC in /metrics"
wait_for "metrics_line 'dsync_events_unroutable\{topic=\"BROKEN\"\} 1'" 15 "gauge for BROKEN in /metrics"
pass "/metrics: dsync_events_unroutable 1 for SYNC and BROKEN"
sleep 1  # several dispatch cycles (50 ms apart)
expect_eq "$(event_status sync-1)/$(event_status broken-1)" "PENDING/PENDING" "both stay PENDING, never assigned to node A"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step WHERE job_code IN ('sync-1', 'broken-1')")" 0 "no step ran"

# --- node B reaches env_b: the event runs there ---------------------------------
start_bg b "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${B_PORT} --topics SYNC
wait_status sync-1 SUCCESS 15
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'sync-1'")" 127.0.0.1:${B_PORT} "sync-1 ran on node B"
expect_eq "$(dbq "$TGT" "SELECT CONCAT(id, ':', name) FROM item ORDER BY id")" "1:from env_a" "target row synced"
wait_for '[[ -z $(attention sync-1) ]]' 10 "sync-1 no longer listed"
wait_for "! metrics_line 'dsync_events_unroutable\{topic=\"SYNC\"\} .*'" 15 "SYNC gauge gone"
expect_eq "$(attention broken-1 | cut -d'|' -f1)" unroutable "broken-1 still unroutable (no node can build it)"
expect_eq "$(event_status broken-1)" PENDING "broken-1 still PENDING"
grep -q "TOPIC_UNROUTABLE topic=SYNC" "$WORK/all.log" || fail "no TOPIC_UNROUTABLE log line"
grep -q "TOPIC_ROUTABLE topic=SYNC" "$WORK/all.log" || fail "no TOPIC_ROUTABLE log line"
pass "the dispatcher logged SYNC unroutable, then routable"

# A config where every topic the node would serve is bad: exit 2 before connecting.
rc=0
dsync node --topics BROKEN >"$WORK/out" 2>"$WORK/err" </dev/null || rc=$?
expect_eq "$rc/$(wc -l < "$WORK/err")" "2/1" "a node left with no buildable topic: exit 2, one line"
grep -qF "no topic this node serves has a plan that builds" "$WORK/err" || fail "got: $(cat "$WORK/err")"

kill -TERM "$PID_b" "$PID_all"
wait "$PID_b" || fail "node B exit code $?"
wait "$PID_all" || fail "dsync all exit code $?"
pass "both drained and exited 0"
