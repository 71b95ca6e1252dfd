#!/usr/bin/env bash
# Issue 35: a table_sync relayed across the gap, through real processes and two MariaDB
# servers. env_a is a schema on the test server (which also holds the framework
# database); env_b lives on a second server this test starts. Nodes A and A2 name only
# env_a in their configs, B and B2 only env_b: no node reaches both, so every sync is
# relayed: its target half on a B node, its source half (an event of dsync's own topic
# dsync.relay_source) on an A node, meeting in the framework database.
#  - 200,000 rows into a different, older copy (every 10th row changed, every 7th
#    missing), then compensated by a failing later step: env_b restored byte for byte
#    (ordered dumps); then synced for good: env_b equals env_a;
#  - kill -9 of the source half's node mid-step, then of the target half's node:
#    each resumed on the other node of its side, env_b equal, and no key range written
#    twice (the target's chunk records of the step follow each other without overlap);
#  - a frozen target half (SIGSTOP past the offline timeout, thawed after the takeover)
#    commits no chunk after losing its part; frozen inside a chunk transaction, it holds
#    the step row in env_b, and the node taking over evicts it (KILL of its session,
#    storage/lock_eviction.h) instead of waiting for it to thaw; a frozen source half
#    relays none;
#  - the relay table's peak stays inside the window; nothing is left in it.
source "$(dirname "$0")/lib.sh"

ROWS=${RELAY_TEST_ROWS:-200000}

# The second server (env_b), stopped at exit with everything else.
SERVER_B=$(bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" start)
trap 'cleanup; bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" stop "$SERVER_B" >/dev/null 2>&1 || true;
      MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -e "DROP DATABASE IF EXISTS \`$SRC\`" 2>/dev/null || true' EXIT
URL_B=$(bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" url "$SERVER_B")
_b=${URL_B#mysql://}; B_USER=${_b%%:*}; _b=${_b#*:}; B_PASS=${_b%%@*}; _b=${_b#*@}; B_HOST=${_b%%:*}; _b=${_b#*:}; B_PORT=${_b%%/*}
SRC="${SCHEMA}_a"
MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -e "CREATE DATABASE \`$SRC\`"
MYSQL_PWD=$B_PASS mariadb -h "$B_HOST" -P "$B_PORT" -u "$B_USER" -e "CREATE DATABASE env_b"
qa() { MYSQL_PWD=$DB_PASS mariadb -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SRC" -e "$1"; }
qb() { MYSQL_PWD=$B_PASS mariadb -N -B -h "$B_HOST" -P "$B_PORT" -u "$B_USER" env_b -e "$1"; }

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; grep -v " debug " "$f" | tail -n 25 >&2; }; done
  exit 1
}

TABLE="CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3)) DEFAULT CHARSET=utf8mb4"
qa "$TABLE"
qb "$TABLE"
qa "INSERT INTO big SELECT seq, seq % 100, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND FROM seq_1_to_$ROWS"
# An older copy: every 10th row changed, every 7th missing, and the rest equal.
older_copy() {
  qb "DELETE FROM big"
  qb "INSERT INTO big SELECT seq, seq % 100, IF(seq % 10 = 0, CONCAT('old ', seq), CONCAT('name ', seq)),
      '2025-01-01' + INTERVAL seq SECOND FROM seq_1_to_$ROWS WHERE seq % 7 <> 0"
}
older_copy
dump_a() { qa "SELECT id, grp, name, at FROM big ORDER BY id" | md5sum; }
dump_b() { qb "SELECT id, grp, name, at FROM big ORDER BY id" | md5sum; }
WANT=$(dump_a)

TOPICS='{
  "SYNC": { "max_retry": 3, "backoff_base_ms": 100, "backoff_max_ms": 500,
            "steps": [ { "name": "copy", "type": "table_sync", "source": "env_a", "target": "env_b",
                         "table": "big", "where": "1 = 1" } ] },
  "SYNC_CHECKED": { "max_retry": 0,
            "steps": [ { "name": "copy", "type": "table_sync", "source": "env_a", "target": "env_b",
                         "table": "big", "where": "1 = 1" },
                       { "name": "check", "type": "demo" } ] }
}'
ONLY_A="{\"datasources\": {\"env_a\": \"mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/$SRC\"}}"
ONLY_B="{\"datasources\": {\"env_b\": \"$(dirname "$URL_B")/env_b\"}}"
RELAY='{"relay": {"window_bytes": 4194304}}'
CONFIG_FILE=$WORK/a.json write_config relay "$TOPICS" "$ONLY_A" "$RELAY"
CONFIG_FILE=$WORK/b.json write_config relay "$TOPICS" "$ONLY_B" "$RELAY"
CONFIG_FILE=$WORK/disp.json write_config relay "$TOPICS" "$RELAY"
export DSYNC_LOG_LEVEL=info

# Four distinct ports in one call: separate $(free_port) subshells can draw the same one.
read -r -d '' pa pa2 pb pb2 < <(free_ports 4) || true
A=127.0.0.1:$pa; A2=127.0.0.1:$pa2; B=127.0.0.1:$pb; B2=127.0.0.1:$pb2
online() {
  wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '$1'
    AND JSON_LENGTH(JSON_EXTRACT(metadata, '\$.datasources')) > 0\") == 1 ]]" 30 "node $1 online, its datasource reached"
}
wait_status() {  # wait_status CODE STATUS TIMEOUT
  wait_for "[[ \$(event_status $1) == $2 ]]" "$3" "$1 to become $2 (is \$(event_status $1))"
}
relay_of() { sql "SELECT CONCAT(state, '/', chunks_relayed, '/', peak_bytes) FROM dsync_relay WHERE step_code = '$1'"; }
# Chunk records of the step in the target whose key range starts before the previous
# one's end (a range written twice): 0 is good.
overlaps() {
  qb "SELECT COUNT(*) FROM (
        SELECT CAST(JSON_UNQUOTE(JSON_EXTRACT(lo_key, '\$[0]')) AS SIGNED) AS lo,
               LAG(CAST(JSON_UNQUOTE(JSON_EXTRACT(hi_key, '\$[0]')) AS SIGNED)) OVER (ORDER BY chunk_no) AS prev_hi
        FROM dsync_sync_chunk WHERE step_code = '$1' AND chunk_no > 0 AND rows_written > 0) r
      WHERE r.lo < r.prev_hi"
}

"$DSYNC_BIN" migrate --config "$WORK/disp.json" >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/disp.json"
start_bg a "$DSYNC_BIN" node --config "$WORK/a.json" --node-address "$A"
start_bg b "$DSYNC_BIN" node --config "$WORK/b.json" --node-address "$B"
online "$A"; online "$B"

# --- relayed, then compensated: env_b restored byte for byte ---------------------
BEFORE=$(dump_b)
produce fail-1 '{"demo": {"fail": {"check": "permanent"}}}' SYNC_CHECKED
wait_status fail-1 COMPENSATED 240
grep -q "TABLE_SYNC_RELAYED_DONE step=copy code=fail-1#1 " "$WORK/b.log" || fail "fail-1's copy step was not relayed on B"
expect_eq "$(dump_b)" "$BEFORE" "fail-1: relayed, then compensated: env_b restored byte for byte (ordered dump)"
expect_eq "$(sql "SELECT node_address FROM distribute_event_step WHERE job_code = 'fail-1' AND step_name = 'copy'")" "$B" \
  "fail-1: the copy (target half) ran and was compensated on B"

# --- relayed for good ---------------------------------------------------------------
produce sync-1 '{}' SYNC
wait_status sync-1 SUCCESS 240
expect_eq "$(dump_b)" "$WANT" "sync-1: env_b equals env_a after a relayed sync of $ROWS rows"
out=$(sql "SELECT output FROM distribute_event_step WHERE job_code = 'sync-1'")
echo "sync-1 output: $out"
relay=$(relay_of 'sync-1#1')
peak=${relay##*/}
(( peak > 0 && peak <= 4194304 + 2097152 )) || fail "sync-1: relay peak $peak bytes, window 4 MiB: $relay"
pass "sync-1: the relay's peak ($peak bytes) stays inside its window (4 MiB, plus one chunk)"
expect_eq "$(sql "SELECT COUNT(*) FROM dsync_relay_chunk")/$(sql "SELECT COUNT(*) FROM dsync_relay_range")" "0/0" \
  "nothing is left in the relay tables"
expect_eq "$(overlaps 'sync-1#1')" 0 "sync-1: no key range written twice"

# --- kill -9 of the source half's node mid-step ----------------------------------------
older_copy
start_bg a2 "$DSYNC_BIN" node --config "$WORK/a.json" --node-address "$A2"
online "$A2"
kill -STOP "$PID_a2"  # A takes the source half; A2 waits to take over
produce sync-2 '{}' SYNC
wait_for "[[ \$(sql \"SELECT COALESCE(MAX(chunks_relayed), 0) FROM dsync_relay WHERE step_code = 'sync-2#1'\") -ge 3 ]]" 120 \
  "sync-2 relaying (3 chunks)"
kill9 "$PID_a"
kill -CONT "$PID_a2"
wait_status sync-2 SUCCESS 240
expect_eq "$(dump_b)" "$WANT" "sync-2: the source half's node killed mid-step; A2 resumed it; env_b equals env_a"
expect_eq "$(overlaps 'sync-2#1')" 0 "sync-2: no key range written twice"
src_nodes=$(sql "SELECT GROUP_CONCAT(DISTINCT node_address) FROM distribute_event WHERE topic = 'dsync.relay_source' AND status = 'SUCCESS'
                 AND code IN (SELECT code FROM distribute_event WHERE payload LIKE '%sync-2#1%')")
[[ $src_nodes == *"$A2"* ]] || fail "sync-2's source half did not finish on A2: $src_nodes"
pass "sync-2: the source half finished on A2"

# --- kill -9 of the target half's node mid-step ------------------------------------------
older_copy
start_bg b2 "$DSYNC_BIN" node --config "$WORK/b.json" --node-address "$B2"
online "$B2"
kill -STOP "$PID_b2"
produce sync-3 '{}' SYNC
wait_for "[[ \$(qb \"SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = 'sync-3#1' AND rows_written > 0\") -ge 3 ]]" 120 \
  "sync-3: 3 chunks applied in env_b"
kill9 "$PID_b"
kill -CONT "$PID_b2"
wait_status sync-3 SUCCESS 240
expect_eq "$(dump_b)" "$WANT" "sync-3: the target half's node killed mid-step; B2 resumed it; env_b equals env_a"
expect_eq "$(overlaps 'sync-3#1')" 0 "sync-3: no key range written twice"
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'sync-3'")" "$B2" "sync-3 finished on B2"
expect_eq "$(sql "SELECT epoch > 1 FROM dsync_relay WHERE step_code = 'sync-3#1'")" 1 "sync-3: B2 started a new epoch"

# --- a frozen target half: it loses its part and writes nothing after ---------------------
# B2 (the only B node) is SIGSTOPped mid-step; B comes back under its address and takes
# the event over once B2 is offline (a new epoch); B2 is thawed after the event ended:
# its run must not commit one more chunk.
older_copy
produce sync-4 '{}' SYNC
wait_for "[[ \$(qb \"SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = 'sync-4#1' AND rows_written > 0\") -ge 3 ]]" 120 \
  "sync-4: 3 chunks applied in env_b"
kill -STOP "$PID_b2"
frozen_attempt=$(sql "SELECT attempt FROM distribute_event WHERE code = 'sync-4'")
frozen_chunks=$(qb "SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = 'sync-4#1' AND chunk_no > 0 AND attempt = $frozen_attempt")
start_bg b "$DSYNC_BIN" node --config "$WORK/b.json" --node-address "$B"
wait_status sync-4 SUCCESS 240
expect_eq "$(sql "SELECT node_address FROM distribute_event WHERE code = 'sync-4'")" "$B" "sync-4: taken over by B while B2 was frozen"
grep -h "DB_LOCK_HOLDER_EVICTED" "$WORK/b.log" || echo "  (B2 was frozen between chunk transactions: nothing to evict)"
kill -CONT "$PID_b2"
wait_for "grep -q 'sync-4' \"$WORK/b2.log\" && grep -E 'sync-4.*(taken over|lost|Interrupted|handed)|(taken over|lost).*sync-4' \"$WORK/b2.log\" >/dev/null" 30 \
  "the thawed B2 to notice it lost sync-4"
sleep 2
expect_eq "$(qb "SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = 'sync-4#1' AND chunk_no > 0 AND attempt = $frozen_attempt")" "$frozen_chunks" \
  "sync-4: the thawed target half committed no chunk after losing its part"
expect_eq "$(dump_b)" "$WANT" "sync-4: env_b equals env_a"
expect_eq "$(overlaps 'sync-4#1')" 0 "sync-4: no key range written twice"

# --- a frozen source half: it loses its part and relays nothing after -----------------------
older_copy
start_bg a "$DSYNC_BIN" node --config "$WORK/a.json" --node-address "$A"
online "$A"
kill -STOP "$PID_a"  # A2 takes the source half
produce sync-5 '{}' SYNC
wait_for "[[ \$(sql \"SELECT COALESCE(MAX(chunks_relayed), 0) FROM dsync_relay WHERE step_code = 'sync-5#1'\") -ge 3 ]]" 120 \
  "sync-5 relaying (3 chunks)"
kill -CONT "$PID_a"
kill -STOP "$PID_a2"
frozen_src=$(sql "SELECT source_attempt FROM dsync_relay WHERE step_code = 'sync-5#1'")
wait_status sync-5 SUCCESS 240
[[ $(sql "SELECT source_attempt > $frozen_src FROM dsync_relay WHERE step_code = 'sync-5#1'") == 1 ]] ||
  fail "sync-5: the source half was not taken over"
relayed_before=$(sql "SELECT chunks_relayed FROM dsync_relay WHERE step_code = 'sync-5#1'")
kill -CONT "$PID_a2"
sleep 3
expect_eq "$(sql "SELECT chunks_relayed FROM dsync_relay WHERE step_code = 'sync-5#1'")" "$relayed_before" \
  "sync-5: the thawed source half relayed nothing after losing its part"
expect_eq "$(dump_b)" "$WANT" "sync-5: the source half's node frozen mid-step, taken over; env_b equals env_a"
expect_eq "$(overlaps 'sync-5#1')" 0 "sync-5: no key range written twice"

expect_eq "$(saga_violations)" 0 "saga order holds for every event"
kill -TERM "$PID_a" "$PID_a2" "$PID_b" "$PID_b2" "$PID_disp"
wait "$PID_a" || fail "node A exit code $?"
wait "$PID_b" || fail "node B exit code $?"
wait "$PID_a2" || fail "node A2 exit code $?"
wait "$PID_b2" || fail "node B2 exit code $?"
wait "$PID_disp" || fail "dispatcher exit code $?"
pass "nodes and dispatcher drained and exited 0"
