#!/usr/bin/env bash
# Issue 36: continuous sync from the source's binlog, through real processes.
# The source is a MariaDB server with a binlog this test starts (scripts/mariadb.sh,
# DSYNC_MARIADB_BINLOG=1, schema src); the target and the framework database are
# schemas on the test server. A dispatcher and a node apply the captured changes.
#  1. preflight: each refusal is one line naming the fix, exit 1, nothing captured:
#     binlog off, binlog_format not ROW, binlog_row_image not FULL, a user without
#     REPLICATION CLIENT, then without REPLICATION SLAVE, a where with a :placeholder;
#  2. a new capture copies the tables first (rows written before it started arrive),
#     then inserts, updates (a key change), deletes, multi-row and multi-table
#     transactions, NULLs and binary values arrive exactly: dsync verify exit 0;
#  3. a DDL pauses its table (dsync captures, v_events_needing_attention, dsync events
#     --attention, GET /v1/captures and /metrics say so); the other table goes on;
#     after the operator aligns the target's schema, dsync capture resume copies the
#     table again (the rows changed while it was paused arrive) and captures it;
#  4. a steady writer while the reader is killed with kill -9 twice (a standby reader
#     takes over from the checkpoint), then frozen with SIGSTOP past its lease and woken
#     after the other took over: dsync verify exit 0, the counter column equal, and the
#     capture counted exactly the rows the writer changed (no binlog range committed
#     twice or skipped);
#  4b. kill -9 of the source server under a writer, and its restart: the readers
#     reconnect and the target converges (dsync verify exit 0);
#  5. a purged start position is refused.
source "$(dirname "$0")/lib.sh"

SERVER=$(DSYNC_MARIADB_BINLOG=1 bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" start)
TGT="${SCHEMA}_t"
trap 'cleanup; bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" stop "$SERVER" >/dev/null 2>&1 || true;
      MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -e "DROP DATABASE IF EXISTS \`$TGT\`" 2>/dev/null || true' EXIT
SRC_URL=$(bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" url "$SERVER")
SRC_BASE=${SRC_URL%/dsync}
_s=${SRC_URL#mysql://}; S_USER=${_s%%:*}; _s=${_s#*:}; S_PASS=${_s%%@*}; _s=${_s#*@}; S_HOST=${_s%%:*}; _s=${_s#*:}; S_PORT=${_s%%/*}
qs() { MYSQL_PWD=$S_PASS mariadb -N -B -h "$S_HOST" -P "$S_PORT" -u "$S_USER" src -e "$1"; }
qt() { MYSQL_PWD=$DB_PASS mariadb -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$TGT" -e "$1"; }
root() { bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" root "$SERVER" -N -B -e "$1"; }

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; grep -v " debug .*CAPTURE_COMMIT" "$f" | tail -n 25 >&2; }; done
  exit 1
}

root "CREATE DATABASE src"
MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -e "CREATE DATABASE \`$TGT\`"
T1="CREATE TABLE t1 (id INT PRIMARY KEY, name VARCHAR(40), code CHAR(4), data VARBINARY(16), kind ENUM('a','b'),
    counter INT NOT NULL DEFAULT 0, note TEXT NULL) DEFAULT CHARSET=utf8mb4"
# The key after columns of every width rule (decimal, fractional datetime, CHAR, SET, BIT).
T2="CREATE TABLE t2 (amount DECIMAL(12,3), at DATETIME(3), tag CHAR(3), flags SET('x','y'), bits BIT(10),
    k1 VARCHAR(20) NOT NULL, k2 BIGINT UNSIGNED NOT NULL, PRIMARY KEY (k1, k2)) DEFAULT CHARSET=utf8mb4"
qs "$T1"; qs "$T2"; qt "$T1"; qt "$T2"
qs "INSERT INTO t1 (id, name, code, data, kind) VALUES (1, 'before start', 'ab', 0x00ff00, 'a'), (2, NULL, NULL, NULL, NULL)"

TOPICS='{"NOOP": {"steps": [{"name": "n", "type": "demo"}]}}'
TGT_URL="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/$TGT"
capture_config() {  # capture_config FILE SOURCE_URL
  CONFIG_FILE=$1 write_config capture "$TOPICS" \
    "{\"datasources\": {\"src\": \"$2\", \"tgt\": \"$TGT_URL\"},
      \"captures\": {\"c1\": {\"source\": \"src\", \"target\": \"tgt\", \"tables\": [\"t1\", \"t2\"]}}}"
}
capture_config "$WORK/dsync.json" "$SRC_BASE/src"
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null

# --- 1. preflight refusals ----------------------------------------------------------
refused() {  # refused CONFIG PATTERN WHAT
  local out rc=0
  out=$(timeout 60 "$DSYNC_BIN" capture --config "$1" 2>&1) || rc=$?
  [[ $rc == 1 ]] || fail "$3: exit $rc, expected 1 ($out)"
  [[ $(printf '%s\n' "$out" | grep -c .) == 1 ]] || fail "$3: not one line: $out"
  [[ $out == *$2* ]] || fail "$3: '$out' does not name '$2'"
  pass "$3 refused: $out"
}
capture_config "$WORK/nobinlog.json" "mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/$SCHEMA"
refused "$WORK/nobinlog.json" "--log-bin" "binlog off"
root "SET GLOBAL binlog_format = 'MIXED'"
refused "$WORK/dsync.json" "binlog_format=ROW" "binlog_format MIXED"
root "SET GLOBAL binlog_format = 'ROW'; SET GLOBAL binlog_row_image = 'MINIMAL'"
refused "$WORK/dsync.json" "binlog_row_image=FULL" "binlog_row_image MINIMAL"
root "SET GLOBAL binlog_row_image = 'FULL'"
root "CREATE USER 'ro'@'127.0.0.1' IDENTIFIED BY 'ro'; GRANT SELECT ON src.* TO 'ro'@'127.0.0.1'"
capture_config "$WORK/ro.json" "mysql://ro:ro@$S_HOST:$S_PORT/src"
refused "$WORK/ro.json" "REPLICATION CLIENT" "no REPLICATION CLIENT"
root "GRANT REPLICATION CLIENT ON *.* TO 'ro'@'127.0.0.1'"
refused "$WORK/ro.json" "lacks REPLICATION SLAVE" "no REPLICATION SLAVE"
CONFIG_FILE=$WORK/where.json write_config capture "$TOPICS" \
  "{\"datasources\": {\"src\": \"$SRC_BASE/src\", \"tgt\": \"$TGT_URL\"},
    \"captures\": {\"c1\": {\"source\": \"src\", \"target\": \"tgt\", \"tables\": [\"t1\"], \"where\": {\"t1\": \"id > :low\"}}}}"
refused "$WORK/where.json" "uses :low" "a where with a placeholder"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event")" 0 "no event produced by a refused capture"

# --- 2. copy, then changes of every kind --------------------------------------------
read -r -d '' pnode pnode2 < <(free_ports 2) || true
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_node node "$pnode"
start_bg cap1 "$DSYNC_BIN" capture --config "$WORK/dsync.json"
state() { sql "SELECT state FROM dsync_capture WHERE name = 'c1'"; }
wait_for "[[ \$(state) == RUNNING ]]" 30 "the initial copy to finish (state \$(state))"
expect_eq "$(qt "SELECT name, HEX(data) FROM t1 WHERE id = 1")" "before start	00FF00" "a row written before the capture started is copied"

pending() { sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.capture' AND status <> 'SUCCESS'"; }
caught_up() {  # the reader is at the source's position, and every captured change applied
  wait_for "[[ \$(sql \"SELECT gtid FROM dsync_capture WHERE name = 'c1'\") == \$(root 'SELECT @@gtid_binlog_pos') ]]" 30 "the reader to reach the source's position"
  wait_for "[[ \$(pending) == 0 ]]" 60 "captured changes to be applied (\$(pending) left)"
}
verified() {  # verified WHAT: dsync verify of both tables, exit 0
  local t
  for t in t1 t2; do
    "$DSYNC_BIN" verify --config "$WORK/dsync.json" --source src --target tgt --table "$t" --where "1 = 1" \
      >"$WORK/verify.out" 2>&1 || fail "$1: dsync verify $t: $(cat "$WORK/verify.out")"
  done
  pass "$1: dsync verify exit 0 on t1 and t2"
}

qs "INSERT INTO t1 (id, name, code, data, kind, note) VALUES (3, 'three', 'x', 0x0001, 'b', REPEAT('n', 3000))"
qs "BEGIN;
    UPDATE t1 SET id = 30, name = 'key changed' WHERE id = 3;
    DELETE FROM t1 WHERE id = 2;
    INSERT INTO t1 (id, name, data) VALUES (4, 'multi', X''), (5, 'row', 0xffffffff), (6, 'insert', NULL);
    INSERT INTO t2 VALUES (1.5, '2026-01-02 03:04:05.678', 'abc', 'x,y', b'1010101010', 'a', 18446744073709551615),
                          (NULL, NULL, NULL, NULL, NULL, 'b', 0);
    UPDATE t1 SET counter = counter + 1, code = NULL, kind = NULL WHERE id IN (1, 4);
    COMMIT"
qs "UPDATE t2 SET k1 = 'c' WHERE k1 = 'a'; UPDATE t1 SET data = NULL, note = NULL WHERE id = 30"
caught_up
verified "inserts, key changes, deletes, multi-row and multi-table transactions, NULLs, binary"
expect_eq "$(qt "SELECT COUNT(*) FROM t1 WHERE id IN (2, 3)")" 0 "the deleted row and the old key are gone"
expect_eq "$(qt "SELECT k1, k2 FROM t2 ORDER BY k1")" "b	0
c	18446744073709551615" "a composite key change with an unsigned maximum"

# --- 3. a DDL pauses its table; resume continues ------------------------------------
qs "ALTER TABLE t1 ADD COLUMN extra INT NULL"
qs "INSERT INTO t2 (k1, k2, amount) VALUES ('after ddl', 1, 2)"
wait_for "[[ \$(sql \"SELECT JSON_EXTRACT(paused_tables, '\\\$.t1') IS NOT NULL FROM dsync_capture WHERE name = 'c1'\") == 1 ]]" 20 "t1 paused"
"$DSYNC_BIN" captures --config "$WORK/dsync.json" >"$WORK/captures.out"
grep -q "paused t1: DDL on t1" "$WORK/captures.out" || fail "dsync captures does not say why t1 paused: $(cat "$WORK/captures.out")"
pass "dsync captures names the paused table and its DDL"
# The paused table in the attention view and its readers; GET /v1/captures (token
# required like every /v1 route) and /metrics of `dsync serve` (issue 36 item 5).
expect_eq "$(sql "SELECT COUNT(*) FROM v_events_needing_attention WHERE reason = 'capture_table_paused' AND code = 'capture:c1:t1' AND detail LIKE 'table t1 of capture c1 paused: DDL on t1%'")" 1 \
  "v_events_needing_attention lists the paused table"
"$DSYNC_BIN" events --attention --config "$WORK/dsync.json" >"$WORK/attention.out"
grep -q "^capture_table_paused .*capture:c1:t1" "$WORK/attention.out" || fail "dsync events --attention: $(cat "$WORK/attention.out")"
pass "dsync events --attention lists the paused table"
token="capture-test-token-$$"
jq --arg t "$token" '. * {api: {token: $t}}' "$WORK/dsync.json" >"$WORK/api.json"
API_PORT=$(free_port)
start_bg api "$DSYNC_BIN" serve --config "$WORK/api.json" --listen "127.0.0.1:$API_PORT"
wait_for "curl -sf -H 'Authorization: Bearer $token' http://127.0.0.1:$API_PORT/healthz >/dev/null" 15 "API up"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$API_PORT/v1/captures")" 401 "GET /v1/captures needs the token"
curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$API_PORT/v1/captures" >"$WORK/captures.json" ||
  fail "GET /v1/captures failed"
jq -e '.captures | length == 1 and .[0].name == "c1" and .[0].state == "RUNNING" and (.[0].gtid | test("^0-[0-9]+-[0-9]+$"))
       and (.[0].paused_tables.t1 | startswith("DDL on t1")) and .[0].lag_bound_s == 10 and .[0].reader_starts >= 1
       and (.[0].applied.lag_p99_ms | type) == "number" and (.[0].applied | has("keys_per_s"))' "$WORK/captures.json" >/dev/null ||
  fail "GET /v1/captures: $(cat "$WORK/captures.json")"
pass "GET /v1/captures: state, position, lag p99, rows/s, the paused table"
curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$API_PORT/metrics" >"$WORK/metrics.txt"
grep -q '^dsync_events_needing_attention{reason="capture_table_paused"} 1$' "$WORK/metrics.txt" ||
  fail "/metrics: $(grep capture "$WORK/metrics.txt")"
pass "/metrics counts the paused table among the events needing attention"
kill -TERM "$PID_api"; wait "$PID_api" 2>/dev/null || true
wait_for "[[ \$(qt \"SELECT COUNT(*) FROM t2 WHERE k1 = 'after ddl'\") == 1 ]]" 20 "t2 to go on while t1 is paused"
pass "the other table goes on while t1 is paused"
qs "INSERT INTO t1 (id, name, extra) VALUES (7, 'while paused', 7)"
qt "ALTER TABLE t1 ADD COLUMN extra INT NULL"
"$DSYNC_BIN" capture resume c1 --config "$WORK/dsync.json" >/dev/null
qs "INSERT INTO t1 (id, name, extra) VALUES (9, 'after resume', 9)"
wait_for "[[ \$(qt 'SELECT SUM(extra) FROM t1') == 16 ]]" 30 "t1 copied and captured again after resume (\$(qt 'SELECT SUM(extra) FROM t1'))"
caught_up
verified "resume: the rows changed while t1 was paused and after"


# --- 4. kill -9 of the reader under a steady writer ---------------------------------
start_bg cap2 "$DSYNC_BIN" capture --config "$WORK/dsync.json" --log-level debug   # a standby reader
caught_up
before=$(sql "SELECT row_changes FROM dsync_capture WHERE name = 'c1'")
# The writer: N transactions, each an insert into t1, an update of the row before
# (counter + 1), a two-row insert into t2, and every 5th a delete of an older row.
N=${CAPTURE_TEST_TXNS:-900}
expected=0
{
  for ((i = 1000; i < 1000 + N; i++)); do
    echo "BEGIN; INSERT INTO t1 (id, name, data) VALUES ($i, 'w$i', UNHEX(HEX($i)));"
    expected=$((expected + 3))
    if ((i > 1000)); then echo "UPDATE t1 SET counter = counter + 1 WHERE id = $((i - 1));"; expected=$((expected + 1)); fi
    echo "INSERT INTO t2 (k1, k2, amount, at, tag) VALUES ('w', $i, $i.5, NOW(3), 'ab'), ('x', $i, NULL, NULL, NULL);"
    if ((i % 5 == 0 && i - 3 >= 1000)); then echo "DELETE FROM t1 WHERE id = $((i - 3));"; expected=$((expected + 1)); fi
    echo "COMMIT; DO SLEEP(0.02);"
  done
} >"$WORK/writer.sql"
MYSQL_PWD=$S_PASS mariadb -h "$S_HOST" -P "$S_PORT" -u "$S_USER" src <"$WORK/writer.sql" >"$WORK/writer.log" 2>&1 &
writer=$!
STARTED_PIDS+=("$writer")
holder_pid() { sql "SELECT SUBSTRING_INDEX(SUBSTRING_INDEX(holder, ':', 2), ':', -1) FROM dsync_capture WHERE name = 'c1' AND lease_until > NOW(3)"; }
victim=none
for round in 1 2; do
  sleep 2
  # The killed reader's lease runs out; a live one takes it (database clock).
  # Read once per try and kept: the lease can lapse between two reads under load.
  wait_for "holder=\$(holder_pid); [[ -n \$holder && \$holder != $victim ]]" 20 "a live reader to hold the lease"
  victim=$holder
  [[ $victim == "$PID_cap1" || $victim == "$PID_cap2" ]] || fail "the lease holder $victim is not one of the readers"
  kill9 "$victim"
  pass "kill -9 of the reader holding the lease (round $round)"
  if [[ $victim == "$PID_cap1" ]]; then start_bg cap1 "$DSYNC_BIN" capture --config "$WORK/dsync.json" --log-level debug
  else start_bg cap2 "$DSYNC_BIN" capture --config "$WORK/dsync.json" --log-level debug; fi
done
# Round 3: the holder freezes (SIGSTOP) past its lease; the other takes over; the frozen
# one wakes up holding a batch it read, and must commit none of it (fenced by the token).
sleep 2
wait_for "holder=\$(holder_pid); [[ -n \$holder && \$holder != $victim ]]" 20 "a live reader to hold the lease"
frozen=$holder
kill -STOP "$frozen"
wait_for "[[ -n \$(holder_pid) && \$(holder_pid) != $frozen ]]" 20 "the other reader to take over from the frozen one"
sleep 1
kill -CONT "$frozen"
pass "SIGSTOP of the reader holding the lease, taken over, then woken up"
kill -0 "$writer" 2>/dev/null || echo "note: the writer ended before round 3 was over" >&2
wait "$writer" || fail "the writer failed: $(cat "$WORK/writer.log")"
caught_up
verified "after two kill -9 and a SIGSTOP of the reader under a steady writer"
expect_eq "$(qt "SELECT SUM(counter) FROM t1")" "$(qs "SELECT SUM(counter) FROM t1")" "counter column equal (no change lost or applied twice)"
expect_eq "$(( $(sql "SELECT row_changes FROM dsync_capture WHERE name = 'c1'") - before ))" "$expected" \
  "the capture counted exactly the $expected rows the writer changed (no binlog range committed twice or skipped)"
expect_eq "$(sql "SELECT reader_starts >= 3 FROM dsync_capture WHERE name = 'c1'")" 1 "readers took over (reader_starts)"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.capture' AND status <> 'SUCCESS'")" 0 "every capture event succeeded"

# --- 4b. kill -9 and restart of the source server ------------------------------------
{
  for ((i = 5000; i < 5200; i++)); do
    echo "INSERT INTO t1 (id, name) VALUES ($i, 's$i'); UPDATE t1 SET counter = counter + 1 WHERE id = 1000; DO SLEEP(0.01);"
  done
} >"$WORK/writer2.sql"
MYSQL_PWD=$S_PASS mariadb -h "$S_HOST" -P "$S_PORT" -u "$S_USER" src <"$WORK/writer2.sql" >"$WORK/writer2.log" 2>&1 &
writer2=$!
STARTED_PIDS+=("$writer2")
sleep 1
bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" kill "$SERVER"
wait "$writer2" 2>/dev/null || true   # it lost its server
pass "kill -9 of the source server under a writer"
sleep 2
bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" restart "$SERVER" >/dev/null
qs "UPDATE t1 SET counter = counter + 10 WHERE id = 1000; INSERT INTO t1 (id, name) VALUES (5999, 'after restart')"
caught_up
verified "after kill -9 and restart of the source"
expect_eq "$(qt "SELECT counter FROM t1 WHERE id = 1000")" "$(qs "SELECT counter FROM t1 WHERE id = 1000")" "the counter row equal after the source's restart"

# --- 5. a purged start position -----------------------------------------------------
kill9 "$PID_cap1"; kill9 "$PID_cap2"
qs "INSERT INTO t1 (id, name) VALUES (8, 'not read yet')"
# The killed readers' dump threads may linger on the server, and the server keeps a
# binlog a dump thread reads: end them first.
for id in $(root "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'"); do
  root "KILL $id" 2>/dev/null || true
done
root "FLUSH BINARY LOGS"
last=$(root "SHOW BINARY LOGS" | tail -n 1 | cut -f1)
# (a binlog a dump thread still reads is kept: try again until the killed ones are gone)
wait_for "root \"PURGE BINARY LOGS TO '$last'\" >/dev/null 2>&1; [[ \$(root 'SHOW BINARY LOGS' | wc -l) == 1 ]]" 30 \
  "the binlogs before $last to be purged"
refused "$WORK/dsync.json" "purged" "purged start position"
"$DSYNC_BIN" capture resume c1 --restart --config "$WORK/dsync.json" >/dev/null
start_bg cap3 "$DSYNC_BIN" capture --config "$WORK/dsync.json"
wait_for "[[ \$(state) == RUNNING ]]" 30 "the restarted capture to copy again (state \$(state))"
caught_up
verified "resume --restart after a purged position: a full copy"
expect_eq "$(qt "SELECT name FROM t1 WHERE id = 8")" "not read yet" "the row after the purged position arrives by the copy"
