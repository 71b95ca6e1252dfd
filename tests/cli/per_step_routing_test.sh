#!/usr/bin/env bash
# Issue 35 item 2 through real processes: per-step routing. env_a is reached only by
# node A (its config names only env_a), env_b only by nodes B and B2 (theirs name only
# env_b); the topic GAP is [table_delete on env_a, table_delete on env_b, a demo step].
#  - gap-1 runs step 1 on A, is handed on (fenced, nothing charged), runs step 2 and 3
#    on B, ends SUCCESS with both sides' rows deleted;
#  - gap-2's demo step fails permanently: step 2 is compensated on B, the event is
#    handed on in phase COMPENSATE, step 1 is compensated on A; both tables are
#    restored exactly (ordered dumps);
#  - gap-3: node B is kill -9'd while it runs the handed-on event; the sweeper resets
#    it and node B2 (env_b too) finishes it from the step B was in (step 2 not re-run);
#  - the same topic config on node C, whose config names both: every step of gap-4
#    runs on C, no hand-on;
#  - a table_sync env_a -> env_b (a step needing both sides at once) runs relayed
#    while no node reaches both (target half on B, source half on A), and direct on C
#    with the same topic config.
source "$(dirname "$0")/lib.sh"

with_datasources
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}

on_both "CREATE TABLE t (id INT PRIMARY KEY, grp INT NOT NULL, v VARCHAR(40))"
on_both "INSERT INTO t SELECT seq, seq % 5, CONCAT('row ', seq) FROM seq_1_to_50"
dbq "$TGT" "UPDATE t SET v = CONCAT('b ', v)"  # the two sides differ: a restore must bring back each side's own

TOPICS='{
  "GAP": { "max_retry": 1, "backoff_base_ms": 100, "backoff_max_ms": 200,
           "steps": [ { "name": "del_a", "type": "table_delete", "target": "env_a", "table": "t", "where": "grp = :grp" },
                      { "name": "del_b", "type": "table_delete", "target": "env_b", "table": "t", "where": "grp = :grp" },
                      { "name": "note", "type": "demo" } ] },
  "SYNC": { "steps": [ { "name": "copy", "type": "table_sync", "source": "env_a", "target": "env_b", "table": "t",
                         "where": "id = :id" } ] }
}'
base="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT"
ONLY_A="{\"datasources\": {\"env_a\": \"$base/$SRC\"}}"
ONLY_B="{\"datasources\": {\"env_b\": \"$base/$TGT\"}}"
SHORT='{"registry": {"heartbeat_interval_ms": 300, "offline_timeout_ms": 1500}}'
CONFIG_FILE=$WORK/a.json write_config routing "$TOPICS" "$ONLY_A" "$SHORT"
CONFIG_FILE=$WORK/b.json write_config routing "$TOPICS" "$ONLY_B" "$SHORT"
CONFIG_FILE=$WORK/both.json write_config routing "$TOPICS" "$DATASOURCES" "$SHORT"
# The topic is the same in every file: only the datasources differ.
expect_eq "$(jq -c .topics "$WORK/a.json" | md5sum)" "$(jq -c .topics "$WORK/b.json" | md5sum)" "the same topic config on both sides"
export DSYNC_LOG_LEVEL=info

dump() { dbq "$1" "SELECT id, grp, v FROM t ORDER BY id"; }
steps_of() {  # steps_of CODE -> "name:status:node ..." in plan order
  sql "SELECT GROUP_CONCAT(CONCAT(step_name, ':', status, ':', IFNULL(node_address, '-')) ORDER BY sort SEPARATOR ' ')
       FROM distribute_event_step WHERE job_code = '$1' AND parent_step_id IS NULL"
}
counters() { sql "SELECT CONCAT(retry_count, '/', reset_count) FROM distribute_event WHERE code = '$1'"; }
wait_status() {  # wait_status CODE STATUS TIMEOUT
  wait_for "[[ \$(event_status $1) == $2 ]]" "$3" "$1 to become $2 (is \$(event_status $1))"
}
online() {
  wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '$1'
    AND JSON_LENGTH(JSON_EXTRACT(metadata, '\$.datasources')) > 0\") == 1 ]]" 20 "node $1 online, its datasource reached"
}
# Four distinct ports in one call: separate $(free_port) subshells can draw the same one.
read -r -d '' pa pb pb2 pc < <(free_ports 4) || true
A=127.0.0.1:$pa; B=127.0.0.1:$pb; B2=127.0.0.1:$pb2; C=127.0.0.1:$pc

# A node whose config names only env_a still loads a topic that names env_b.
"$DSYNC_BIN" migrate --config "$WORK/both.json" >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/both.json"
start_bg a "$DSYNC_BIN" node --config "$WORK/a.json" --node-address "$A"
start_bg b "$DSYNC_BIN" node --config "$WORK/b.json" --node-address "$B"
online "$A"; online "$B"
md=$(sql "SELECT metadata FROM distribute_node_registry WHERE node_address = '$A'")
[[ $md == *'"datasources":["env_a"]'* && $md != *bad_topics* ]] || fail "node A's metadata: $md"
pass "node A (config: env_a only) loads GAP, which names env_b too, and reports env_a"

# A step needing both sides at once, while no node reaches both, runs relayed
# (docs/relay.md): its target half on B (env_b), its source half, an event of dsync's
# own topic dsync.relay_source, on A (env_a); they meet in the framework database.
dbq "$TGT" "UPDATE t SET v = 'stale' WHERE id = 5"
produce sync-1 '{"id": 5}' SYNC
wait_status sync-1 SUCCESS 60
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'sync-1'")" "$B" "sync-1: the target half ran on B"
out=$(sql "SELECT output FROM distribute_event_step WHERE job_code = 'sync-1'")
[[ $out == *'"relayed": true'* || $out == *'"relayed":true'* ]] || fail "sync-1's output says nothing of a relay: $out"
wait_for "[[ \$(sql \"SELECT CONCAT(status, '/', node_address) FROM distribute_event WHERE topic = 'dsync.relay_source'\") == SUCCESS/$A ]]" \
  20 "sync-1's source half SUCCESS on A"
expect_eq "$(dbq "$TGT" "SELECT v FROM t WHERE id = 5")" "row 5" "sync-1: env_b's row now equals env_a's (relayed)"
pass "sync-1: relayed across the gap, the same topic config"

# --- gap-1: step 1 on A, handed on, steps 2 and 3 on B --------------------------
before_a=$(dump "$SRC"); before_b=$(dump "$TGT")
produce gap-1 '{"grp": 1}' GAP
wait_status gap-1 SUCCESS 30
expect_eq "$(steps_of gap-1)" "del_a:SUCCESS:$A del_b:SUCCESS:$B note:SUCCESS:$B" "gap-1: step 1 ran on A, steps 2 and 3 on B"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM t WHERE grp = 1")/$(dbq "$TGT" "SELECT COUNT(*) FROM t WHERE grp = 1")" "0/0" \
  "gap-1: the rows are deleted on both sides"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM t")/$(dbq "$TGT" "SELECT COUNT(*) FROM t")" "40/40" "gap-1: nothing else deleted"
expect_eq "$(counters gap-1)" "0/0" "gap-1: the hand-on counted neither as a retry nor as a reset"
expect_eq "$(sql "SELECT IFNULL(route, 'NULL') FROM distribute_event WHERE code = 'gap-1'")" env_b "gap-1: route env_b"
log=$(sql "SELECT JSON_EXTRACT(process_log, '\$[*].why') FROM distribute_event WHERE code = 'gap-1'")
[[ $log == *"handed on: step 'del_b' needs env_b, which node $A does not reach"* ]] || fail "process_log: $log"
grep -q "EVENT_HANDED_ON event=gap-1 node=$A .*step=del_b .*phase=FORWARD needs=env_b" "$WORK/a.log" \
  || fail "no EVENT_HANDED_ON line for gap-1 in A's log"
pass "gap-1: the hand-on is in the process_log and one log line"
show=$("$DSYNC_BIN" events show gap-1 --config "$WORK/both.json")
echo "$show" | grep -E "del_a .*$A" >/dev/null && echo "$show" | grep -E "del_b .*$B" >/dev/null \
  || fail "dsync events show lacks the node of each step: $show"
echo "$show" | grep -E "^route +env_b " >/dev/null || fail "dsync events show lacks the route: $show"
pass "dsync events show: the node of each step, and the route"

# --- gap-2: the demo step fails; compensation on B, handed on, then on A ---------
before_a=$(dump "$SRC"); before_b=$(dump "$TGT")
produce gap-2 '{"grp": 2, "demo": {"fail": {"note": "permanent"}}}' GAP
wait_status gap-2 COMPENSATED 30
expect_eq "$(steps_of gap-2)" "del_a:COMPENSATED:$A del_b:COMPENSATED:$B note:FAILED:$B" \
  "gap-2: step 2 compensated on B, step 1 on A"
[[ $(dump "$SRC") == "$before_a" ]] || fail "env_a not restored exactly"
[[ $(dump "$TGT") == "$before_b" ]] || fail "env_b not restored exactly"
pass "gap-2: both tables restored exactly (ordered dumps)"
expect_eq "$(counters gap-2)" "0/0" "gap-2: no retry, no reset"
grep -q "EVENT_HANDED_ON event=gap-2 node=$B .*step=del_a .*phase=COMPENSATE needs=env_a" "$WORK/b.log" \
  || fail "no compensation hand-on line for gap-2 in B's log"
expect_eq "$(sql "SELECT CONCAT(phase, '/', route) FROM distribute_event WHERE code = 'gap-2'")" "COMPENSATE/env_a" \
  "gap-2: handed on in phase COMPENSATE with route env_a"
order=$(sql "SELECT GROUP_CONCAT(step_name ORDER BY compensated_at) FROM distribute_event_step
             WHERE job_code = 'gap-2' AND status = 'COMPENSATED'")
expect_eq "$order" "del_b,del_a" "gap-2: compensations in reverse order"

# --- gap-3: kill -9 of B while it runs the handed-on event; B2 finishes it --------
start_bg b2 "$DSYNC_BIN" node --config "$WORK/b.json" --node-address "$B2"
online "$B2"
kill -STOP "$PID_b2"  # so that B takes gap-3 (B2 resumes once B is dead)
produce gap-3 '{"grp": 3, "demo": {"sleep_ms": 4000}}' GAP
wait_for "[[ \$(steps_of gap-3) == *'note:EXECUTING:$B'* ]]" 30 "B runs gap-3's demo step (after step 2)"
kill9 "$PID_b"
kill -CONT "$PID_b2"
wait_status gap-3 SUCCESS 40
expect_eq "$(steps_of gap-3)" "del_a:SUCCESS:$A del_b:SUCCESS:$B note:SUCCESS:$B2" \
  "gap-3: step 2 stays B's (not re-run), B2 finished the demo step"
expect_eq "$(counters gap-3)" "0/1" "gap-3: the kill cost one reset, no retry"
expect_eq "$(sql "SELECT applications FROM demo_ledger WHERE event_code = 'gap-3'")" 1 "gap-3: the demo step applied once"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM t WHERE grp = 3")/$(dbq "$TGT" "SELECT COUNT(*) FROM t WHERE grp = 3")" "0/0" \
  "gap-3: rows deleted on both sides"

expect_eq "$(saga_violations)" 0 "saga order holds for every event"
expect_eq "$(process_log_gaps)" "" "every process_log is a chain without gaps"

# --- gap-4: a node reaching both sides runs the same topic directly --------------
kill -TERM "$PID_a" "$PID_b2"
wait "$PID_a" || fail "node A exit code $?"
wait "$PID_b2" || fail "node B2 exit code $?"
start_bg c "$DSYNC_BIN" node --config "$WORK/both.json" --node-address "$C"
online "$C"
produce gap-4 '{"grp": 4}' GAP
wait_status gap-4 SUCCESS 30
expect_eq "$(steps_of gap-4)" "del_a:SUCCESS:$C del_b:SUCCESS:$C note:SUCCESS:$C" "gap-4: every step on C"
expect_eq "$(sql "SELECT IFNULL(route, 'NULL') FROM distribute_event WHERE code = 'gap-4'")" NULL "gap-4: never handed on"
! grep -q "EVENT_HANDED_ON" "$WORK/c.log" || fail "node C handed an event on"
[[ $(sql "SELECT process_log FROM distribute_event WHERE code = 'gap-4'") != *"handed on"* ]] || fail "gap-4 handed on"
pass "gap-4: direct on C, no hand-on, with the same topic config"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM t WHERE grp = 4")/$(dbq "$TGT" "SELECT COUNT(*) FROM t WHERE grp = 4")" "0/0" \
  "gap-4: rows deleted on both sides"

# The same SYNC topic on a node reaching both sides: direct, no relay.
dbq "$TGT" "UPDATE t SET v = 'stale' WHERE id = 10"
produce sync-2 '{"id": 10}' SYNC
wait_status sync-2 SUCCESS 30
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'sync-2'")" "$C" "sync-2 ran on C"
out=$(sql "SELECT output FROM distribute_event_step WHERE job_code = 'sync-2'")
[[ $out != *relayed* ]] || fail "sync-2 was relayed on a node reaching both sides: $out"
expect_eq "$(dbq "$TGT" "SELECT v FROM t WHERE id = 10")" "row 10" "sync-2: env_b's row now equals env_a's (direct)"

kill -TERM "$PID_c" "$PID_disp"
wait "$PID_c" || fail "node C exit code $?"
wait "$PID_disp" || fail "dispatcher exit code $?"
pass "node C and the dispatcher drained and exited 0"
