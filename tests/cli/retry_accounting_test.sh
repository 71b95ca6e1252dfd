#!/usr/bin/env bash
# Issue 34 items 2, 4 and 7 (drain) with real processes:
#  A: kill -9 is not a retry. A topic with max_retry 0 (a charged crash would
#     compensate the event, and before this fix even max_retry 0 alone did, at the
#     first claim): its node is kill -9ed twice while the step runs and restarted under
#     its address at once (its previous process is dead, its heartbeat still fresh: the
#     same host, that pid gone). The event ends SUCCESS, retry_count 0, reset_count 2;
#     the process log and `dsync events show` say "not charged".
#  B: a second node started with the address of a live node is refused at start (exit
#     1, one line naming the holder) and does not touch the first node's running event.
#  C: a drain whose timeout fires while a step is blocked on a row lock (another
#     session holds the demo ledger row the step writes) ends within its timeout plus a
#     few seconds: the blocked statement is killed, the event handed back uncharged.
#  D: the same for a table_delete step blocked on a row of its target datasource.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT N2_PORT N3_PORT <<< "$(free_ports 3 | tr '\n' ' ')"
with_datasources

write_config retry_accounting '{
  "ONCE": { "max_retry": 0, "backoff_base_ms": 100, "backoff_max_ms": 200, "ordered": false,
            "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" } ] },
  "ONE":  { "max_retry": 0, "backoff_base_ms": 100, "backoff_max_ms": 200, "ordered": false,
            "steps": [ { "name": "s1", "type": "demo" } ] },
  "DEL":  { "max_retry": 0, "backoff_base_ms": 100, "backoff_max_ms": 200, "ordered": false,
            "steps": [ { "name": "del", "type": "table_delete", "target": "env_b", "table": "t", "where": "id = :id" } ] }
}' "$DATASOURCES" '{"consumer": {"drain_timeout_ms": 1000, "capacity": 2}}'
node_of() { sql "SELECT IFNULL(node_address, '') FROM distribute_event WHERE code = '$1'"; }
event_col() { sql "SELECT $2 FROM distribute_event WHERE code = '$1'"; }
start_dispatch n1 ${N1_PORT}

# --- A: two kill -9s of the node running it use no retry ---------------------------
produce crash '{"demo": {"sleep_ms": 1500}}' ONCE
for round in 1 2; do
  wait_for '[[ $(event_status crash) == RUNNING && $(node_of crash) == 127.0.0.1:${N1_PORT} ]]' 30 \
    "round $round: crash running on n1"
  sleep 0.3
  kill9 "$PID_n1"
  start_node n1 ${N1_PORT}  # same address, previous process dead: hands back and takes over
  pass "round $round: n1 killed mid-step and restarted under its address"
done
wait_for '[[ $(event_status crash) == SUCCESS ]]' 30 "crash SUCCESS (is \$(event_status crash))"
expect_eq "$(event_col crash retry_count)" 0 "crash: no retry charged for the two kills"
expect_eq "$(event_col crash reset_count)" 2 "crash: the two resets counted apart (max_resets)"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event e,
                    JSON_TABLE(e.process_log, '\$[*]' COLUMNS (why VARCHAR(200) PATH '\$.why')) j
                  WHERE e.code = 'crash' AND j.why = 'reset (not charged): node restarted'")" 2 \
  "crash: the process log says each reset was not charged"
expect_eq "$(sql "SELECT GROUP_CONCAT(applications) FROM demo_ledger WHERE event_code = 'crash'")" "1,1" \
  "crash: each step applied once"
"$DSYNC_BIN" events show crash --config "$WORK/dsync.json" > "$WORK/show.txt"
grep -q "retries 0 of .*, resets not charged 2," "$WORK/show.txt" || { cat "$WORK/show.txt" >&2; fail "events show: resets"; }
pass "dsync events show tells retries and resets apart"

# --- B: a second node under a live node's address is refused ---------------------
produce busy '{"demo": {"sleep_ms": 3000}}' ONE
wait_for '[[ $(event_status busy) == RUNNING && $(node_of busy) == 127.0.0.1:${N1_PORT} ]]' 30 "busy running on n1"
version=$(event_col busy version)
set +e
timeout 20 "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${N1_PORT} >"$WORK/dup.out" 2>"$WORK/dup.err"
rc=$?
set -e
[[ $rc == 1 ]] || { cat "$WORK/dup.err" >&2; fail "the duplicate node exited $rc, not 1"; }
expect_eq "$(wc -l < "$WORK/dup.err")" 1 "the refusal is one line"
grep -q "^dsync: node address 127.0.0.1:${N1_PORT} (service retry_accounting) is in use by a live node (host .*, pid $PID_n1, last heartbeat [0-9]* ms ago)" "$WORK/dup.err" \
  || { cat "$WORK/dup.err" >&2; fail "the refusal names the live holder"; }
pass "a second node under a live address is refused: $(cat "$WORK/dup.err")"
expect_eq "$(event_status busy) $(node_of busy) $(event_col busy version)" "RUNNING 127.0.0.1:${N1_PORT} $version" \
  "busy untouched on n1 (same version)"
kill -0 "$PID_n1" || fail "n1 died"
wait_for '[[ $(event_status busy) == SUCCESS ]]' 30 "busy SUCCESS"
expect_eq "$(event_col busy 'retry_count + reset_count')" 0 "busy: neither retried nor reset"

# --- C: a drain timeout with a step blocked on a lock ------------------------------
# Another session holds the ledger row the step of 'blk' inserts (blk#1), uncommitted.
MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SCHEMA" -e "
  BEGIN; INSERT INTO demo_ledger (idempotency_key, event_code, step_name) VALUES ('blk#1', 'blk', 's1');
  SELECT SLEEP(60); ROLLBACK" >/dev/null 2>&1 &
LOCKER=$!
STARTED_PIDS+=("$LOCKER")
# Sessions and lock waits of this test's schemas only (the server is shared).
session_of() { sql "SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '$1%' AND DB = '$2'"; }
# Sessions of schema $1 waiting for a row lock: in LOCK WAIT (INNODB_TRX), or in a
# statement for a second or more that is not the locker's sleep (INNODB_TRX does not
# always list a waiting INSERT's transaction).
lock_waits() {
  sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST p
       LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID
       WHERE p.DB = '$1' AND p.ID <> CONNECTION_ID() AND p.COMMAND IN ('Query', 'Execute')
         AND p.INFO NOT LIKE 'SELECT SLEEP%' AND (x.trx_state = 'LOCK WAIT' OR p.TIME >= 1)"
}
wait_for '[[ -n $(session_of "SELECT SLEEP(60)" "$SCHEMA") ]]' 10 \
  "the locking session holds blk#1"
produce blk '{}' ONE
# wait_lock SCHEMA WHAT EVENT: until a session of SCHEMA waits for a row lock (30 s).
wait_lock() {
  local _
  for _ in $(seq 1 600); do (( $(lock_waits "$1") >= 1 )) && { pass "$2"; return; }; sleep 0.05; done
  sql "SELECT code, status, node_address, last_error FROM distribute_event WHERE code = '$3'" >&2
  sql "SELECT p.ID, p.DB, p.STATE, LEFT(p.INFO, 80), x.trx_state FROM information_schema.PROCESSLIST p
       LEFT JOIN information_schema.INNODB_TRX x ON x.trx_mysql_thread_id = p.ID WHERE p.COMMAND <> 'Sleep'" >&2
  tail -n 12 "$WORK"/n*.log >&2
  fail "$2: no session of $1 waits for a lock"
}
wait_lock "$SCHEMA" "the step of blk waits for the lock" blk
t0=$(now_ms)
kill -TERM "$PID_n1"
set +e
wait "$PID_n1"
rc=$?
set -e
took=$(( $(now_ms) - t0 ))
expect_eq "$rc" 0 "n1 exits 0 after its drain"
(( took < 5000 )) || fail "the drain took $took ms (drain_timeout_ms 1000): the blocked step was not stopped"
pass "the drain ended in $took ms (timeout 1000 ms) although the step was blocked"
grep -q NODE_DRAIN_KILLED_STATEMENTS "$WORK/n1.log" || fail "no NODE_DRAIN_KILLED_STATEMENTS in n1's log"
expect_eq "$(event_status blk) $(node_of blk)" "PENDING " "blk handed back"
expect_eq "$(event_col blk 'retry_count + reset_count')" 0 "blk: the drain charged nothing"
[[ $(event_col blk last_error) == "reset (not charged): drain timed out on node 127.0.0.1:${N1_PORT}" ]] \
  || fail "blk last_error: $(event_col blk last_error)"
pass "blk: last_error says the drain charged nothing"
# The lock goes away; a node runs blk to the end, once.
sql "KILL $(session_of "SELECT SLEEP(60)" "$SCHEMA")" || true
start_node n2 ${N2_PORT}
wait_for '[[ $(event_status blk) == SUCCESS ]]' 30 "blk SUCCESS on n2"
expect_eq "$(sql "SELECT applications FROM demo_ledger WHERE idempotency_key = 'blk#1'")" 1 "blk applied once"

# --- D: a drain timeout with a table_delete step blocked in its target -------------
on_both "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10)); INSERT INTO t VALUES (1, 'a'), (2, 'b')"
MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$TGT" -e "
  BEGIN; SELECT * FROM t WHERE id = 1 FOR UPDATE; SELECT SLEEP(61); ROLLBACK" >/dev/null 2>&1 &
STARTED_PIDS+=("$!")
wait_for '[[ -n $(session_of "SELECT SLEEP(61)" "$TGT") ]]' 10 \
  "the locking session holds row 1 of the target"
produce del-1 '{"id": 1}' DEL
wait_lock "$TGT" "the table_delete step waits for the lock" del-1
t0=$(now_ms)
kill -TERM "$PID_n2"
set +e
wait "$PID_n2"
rc=$?
set -e
took=$(( $(now_ms) - t0 ))
expect_eq "$rc" 0 "n2 exits 0 after its drain"
(( took < 5000 )) || fail "the drain took $took ms (drain_timeout_ms 1000): the step blocked in the target was not stopped"
pass "the drain ended in $took ms although the step was blocked in its target datasource"
expect_eq "$(event_status del-1) $(event_col del-1 'retry_count + reset_count')" "PENDING 0" "del-1 handed back, nothing charged"
sql "KILL $(session_of "SELECT SLEEP(61)" "$TGT")" || true
start_node n3 ${N3_PORT}
wait_for '[[ $(event_status del-1) == SUCCESS ]]' 30 "del-1 SUCCESS on n3"
expect_eq "$(dbq "$TGT" "SELECT GROUP_CONCAT(id) FROM t")" 2 "row 1 deleted once, row 2 kept"

expect_eq "$(process_log_gaps)" "" "process_log chains without gaps"
expect_eq "$(saga_violations)" 0 "saga order holds"
