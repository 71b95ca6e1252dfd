#!/usr/bin/env bash
# Acceptance: `dsync migrate` (twice, and two at once), two `dsync node` processes
# registering with their capacity and topics, kill -9 of one, then a sweep after
# the offline timeout shows it offline; SIGTERM drains the other cleanly.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r A_PORT B_PORT C_PORT <<< "$(free_ports 3 | tr '\n' ' ')"

export DSYNC_REGISTRY_HEARTBEAT_INTERVAL_MS=300
export DSYNC_REGISTRY_OFFLINE_TIMEOUT_MS=1500

# migrate: creates the schema, then is a no-op; two concurrent runs both succeed.
out=$("$DSYNC_BIN" migrate --db "$DB_URL")
[[ $out == *"migrated from version 0 to"* ]] || fail "first migrate said: $out"
out=$("$DSYNC_BIN" migrate --db "$DB_URL")
[[ $out == "schema already at version"* ]] || fail "second migrate said: $out"
pass "migrate twice is a no-op"
"$DSYNC_BIN" migrate --db "$DB_URL" >"$WORK/m1" 2>&1 & m1=$!
"$DSYNC_BIN" migrate --db "$DB_URL" >"$WORK/m2" 2>&1 & m2=$!
wait $m1 || fail "concurrent migrate 1: $(cat "$WORK/m1")"
wait $m2 || fail "concurrent migrate 2: $(cat "$WORK/m2")"
pass "two concurrent migrates succeed"
# One row per migration file (numbers may have gaps: parallel branches reserve them).
expect_eq "$(sql "SELECT COUNT(*) FROM dsync_schema_version")" \
  "$(ls "$(dirname "$0")/../../sql/migrations"/V*.sql | wc -l)" "one version row per migration"

start_bg a "$DSYNC_BIN" node --db "$DB_URL" --node-address 127.0.0.1:${A_PORT} --capacity 3 --topics SPACE_ADD,DOC_UPDATE
start_bg b "$DSYNC_BIN" node --db "$DB_URL" --node-address 127.0.0.1:${B_PORT} --capacity 5 --topics '*'
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 2 ]]' 10 "two online rows"
pass "two nodes online"

expect_eq "$(sql "SELECT JSON_VALUE(metadata, '$.capacity') FROM distribute_node_registry WHERE node_address = '127.0.0.1:${A_PORT}'")" \
  3 "capacity of node a in metadata"
expect_eq "$(sql "SELECT JSON_EXTRACT(metadata, '$.topics') FROM distribute_node_registry WHERE node_address = '127.0.0.1:${A_PORT}'")" \
  '["SPACE_ADD", "DOC_UPDATE", "dsync.relay_source"]' "topics of node a in metadata (and dsync's own: relayed source halves)"
expect_eq "$(sql "SELECT JSON_VALUE(metadata, '$.capacity') FROM distribute_node_registry WHERE node_address = '127.0.0.1:${B_PORT}'")" \
  5 "capacity of node b in metadata"
expect_eq "$(sql "SELECT JSON_VALUE(metadata, '$.pid') FROM distribute_node_registry WHERE node_address = '127.0.0.1:${A_PORT}'")" \
  "$PID_a" "pid of node a in metadata"

listing=$("$DSYNC_BIN" nodes --db "$DB_URL")
[[ $listing == *"127.0.0.1:${A_PORT}"*online*3*SPACE_ADD,DOC_UPDATE* ]] || fail "dsync nodes: $listing"
[[ $listing == *"127.0.0.1:${B_PORT}"*online*5* ]] || fail "dsync nodes: $listing"
pass "dsync nodes lists both"

# kill -9 node a: no goodbye. A sweep before the timeout leaves it; after it, offline.
kill9 "$PID_a"
out=$("$DSYNC_BIN" sweep --db "$DB_URL")
expect_eq "$(sql "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:${A_PORT}'")" 1 \
  "killed node still online before the offline timeout ($out)"
sleep 1.8
out=$("$DSYNC_BIN" sweep --db "$DB_URL")
[[ $out == "marked_offline=1 purged=0" ]] || fail "sweep after timeout said: $out"
expect_eq "$(sql "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:${A_PORT}'")" 0 \
  "killed node offline after the timeout"
expect_eq "$(sql "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:${B_PORT}'")" 1 \
  "live node untouched by the sweep"
listing=$("$DSYNC_BIN" nodes --db "$DB_URL" --json)
[[ $listing != *"${A_PORT}"* && $listing == *"${B_PORT}"* ]] || fail "dsync nodes --json after sweep: $listing"
pass "dsync nodes shows only the live node"

# SIGTERM: draining, then offline, exit 0.
kill -TERM "$PID_b"
rc=0; wait "$PID_b" || rc=$?
expect_eq "$rc" 0 "node b exits 0 on SIGTERM"
expect_eq "$(sql "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:${B_PORT}'")" 0 \
  "node b offline after graceful stop"
grep -q "NODE_DRAINING" "$WORK/b.log" || fail "no NODE_DRAINING line in node b's log"
pass "graceful stop drains then goes offline"
if grep -q "$DB_PASS" "$WORK/a.log" "$WORK/b.log"; then fail "a password was logged"; fi
pass "no password in logs"

# An operator's drain (status 2 set with SQL) is seen at the node's next heartbeat:
# it drains, goes offline and exits 0 on its own.
start_bg c "$DSYNC_BIN" node --db "$DB_URL" --node-address 127.0.0.1:${C_PORT}
wait_for '[[ $(sql "SELECT status FROM distribute_node_registry WHERE node_address = '"'127.0.0.1:${C_PORT}'"'") == 1 ]]' 10 "node c online"
sql "UPDATE distribute_node_registry SET status = 2 WHERE node_address = '127.0.0.1:${C_PORT}'"
wait_for '! kill -0 '"$PID_c"' 2>/dev/null' 10 "node c to exit after the operator drain"
rc=0; wait "$PID_c" || rc=$?
expect_eq "$rc" 0 "node c exits 0 after an operator drain"
expect_eq "$(sql "SELECT status FROM distribute_node_registry WHERE node_address = '127.0.0.1:${C_PORT}'")" 0 "node c offline"
grep -q 'cause="operator drain"' "$WORK/c.log" || fail "node c did not log the operator drain"
pass "operator drain"
