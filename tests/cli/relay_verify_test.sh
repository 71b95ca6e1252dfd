#!/usr/bin/env bash
# Issue 35 item 4: `dsync verify` across the gap, through real processes and two MariaDB
# servers. env_a is a schema on the test server (which also holds the framework
# database); env_b lives on a second server this test starts. The verifying command's
# config names only env_b; node A's only env_a: no process reaches both, so each side's
# checksums and row hashes are computed by a process of that side (the command for
# env_b, node A for env_a, as an event of dsync.relay_source) and compared in the
# framework database.
#  - equal tables: exit 0, the same counts as a direct verify (this test's own config,
#    which reaches both, is the reference);
#  - each difference kind planted (rows missing in env_b, extra in env_b, different),
#    in a table with an integer key and one with a text key: exit 3, and the totals and
#    listed keys equal the direct verify's; --topic mode too;
#  - only keys travel: the source half relayed a few bytes per differing row;
#  - no node of env_a live: one line naming the wait, exit 1; nothing left behind;
#  - the verifying process killed with kill -9: its source half ends within seconds;
#  - --repair across the gap: the repair event's sync runs relayed and the re-verify
#    says equal (exit 0).
source "$(dirname "$0")/lib.sh"

ROWS=${RELAY_VERIFY_ROWS:-30000}

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

for q in qa qb; do
  $q "CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3)) DEFAULT CHARSET=utf8mb4;
      CREATE TABLE tagged (name VARCHAR(40) PRIMARY KEY, v INT, note TEXT) DEFAULT CHARSET=utf8mb4;
      INSERT INTO big SELECT seq, seq % 100, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND FROM seq_1_to_$ROWS;
      INSERT INTO tagged SELECT CONCAT('tag-', seq), seq, REPEAT('n', seq % 50) FROM seq_1_to_3000"
done

TOPICS='{
  "SYNC": { "max_retry": 3, "backoff_base_ms": 100, "backoff_max_ms": 500,
            "steps": [ { "name": "big", "type": "table_sync", "source": "env_a", "target": "env_b",
                         "table": "big", "where": "1 = 1", "delete_missing": true },
                       { "name": "tagged", "type": "table_sync", "source": "env_a", "target": "env_b",
                         "table": "tagged", "where": "1 = 1", "delete_missing": true } ] },
  "CHECK": { "max_retry": 0,
            "steps": [ { "name": "big", "type": "table_verify", "source": "env_a", "target": "env_b",
                         "table": "big", "where": "1 = 1" } ] }
}'
URL_A="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/$SRC"
URL_ENV_B="$(dirname "$URL_B")/env_b"
CONFIG_FILE=$WORK/a.json write_config relay "$TOPICS" "{\"datasources\": {\"env_a\": \"$URL_A\"}}"
CONFIG_FILE=$WORK/b.json write_config relay "$TOPICS" "{\"datasources\": {\"env_b\": \"$URL_ENV_B\"}}"
CONFIG_FILE=$WORK/both.json write_config relay "$TOPICS" \
  "{\"datasources\": {\"env_a\": \"$URL_A\", \"env_b\": \"$URL_ENV_B\"}}"
CONFIG_FILE=$WORK/short.json write_config relay "$TOPICS" "{\"datasources\": {\"env_b\": \"$URL_ENV_B\"}}" \
  '{"relay": {"verify_wait_ms": 2000}}'
CONFIG_FILE=$WORK/disp.json write_config relay "$TOPICS"
export DSYNC_LOG_LEVEL=info

read -r -d '' pa pb < <(free_ports 2) || true
A=127.0.0.1:$pa; B=127.0.0.1:$pb
online() {
  wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '$1'
    AND JSON_LENGTH(JSON_EXTRACT(metadata, '\$.datasources')) > 0\") == 1 ]]" 30 "node $1 online, its datasource reached"
}
# verify CONFIG ARGS... -> its --json output in $WORK/out.json, its exit code in $rc.
verify() {
  local config=$1; shift
  set +e
  "$DSYNC_BIN" verify --config "$WORK/$config.json" --json --log-level info "$@" >"$WORK/out.json" 2>"$WORK/verify.err"
  rc=$?
  set -e
}
# What must agree between a relayed and a direct verify: per table, the counts and the
# keys listed (the chunk counts differ: the relay cuts its ranges by the target's keys).
digest() {
  jq -c '[.tables[] | {table, source_rows, target_rows, missing_in_target_total, extra_in_target_total,
          different_total, missing_in_target, extra_in_target, different}]' "$WORK/out.json"
}
relay_left() { sql "SELECT (SELECT COUNT(*) FROM dsync_relay) + (SELECT COUNT(*) FROM dsync_relay_range) + (SELECT COUNT(*) FROM dsync_relay_chunk)"; }

"$DSYNC_BIN" migrate --config "$WORK/disp.json" >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/disp.json"
start_bg a "$DSYNC_BIN" node --config "$WORK/a.json" --node-address "$A"
online "$A"

# --- equal --------------------------------------------------------------------------------
verify b --source env_a --target env_b --table big --where "1 = 1"
expect_eq "$rc" 0 "equal tables: a verify from env_b's side exits 0 (stderr: $(head -c 300 "$WORK/verify.err"))"
expect_eq "$(jq -c '.tables[0] | [.source_rows, .target_rows, .equal]' "$WORK/out.json")" "[$ROWS,$ROWS,true]" \
  "equal tables: both sides' row counts"
grep -q "VERIFY_RELAYED_DONE" "$WORK/verify.err" || fail "the verify did not run across the gap: $(tail -n 3 "$WORK/verify.err")"
# The source halves' step outputs (their totals), newest first.
halves() { sql "SELECT $1 FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
                WHERE e.topic = 'dsync.relay_source' AND e.status = 'SUCCESS' AND JSON_EXTRACT(s.output, '\$.verify') = true
                $2"; }
expect_eq "$(halves "COUNT(*)" "AND e.node_address = '$A'")" 1 \
  "env_a's side was computed by node A (a source half event, SUCCESS)"
expect_eq "$(relay_left)" 0 "nothing is left in the relay tables"

# --- each difference kind -----------------------------------------------------------------------
qb "DELETE FROM big WHERE id BETWEEN 1000 AND 1049;                                  -- 50 missing
    UPDATE big SET name = 'changed' WHERE id % 997 = 0;                               -- different
    INSERT INTO big VALUES ($ROWS + 1, 1, 'extra', NULL), ($ROWS + 2, 1, 'extra', NULL), (0, 0, 'extra', NULL);
    DELETE FROM tagged WHERE name IN ('tag-5', 'tag-500', 'tag-2999');
    UPDATE tagged SET note = 'x' WHERE name IN ('tag-7', 'tag-1700');
    INSERT INTO tagged VALUES ('tag-0', 0, NULL), ('zzz', 1, 'extra')"
verify both --topic SYNC --payload '{}' --max-keys 100
expect_eq "$rc" 3 "direct verify (reference): differences, exit 3"
WANT=$(digest)
echo "direct: $WANT" | head -c 600; echo
verify b --topic SYNC --payload '{}' --max-keys 100
expect_eq "$rc" 3 "across the gap: differences, exit 3 (stderr: $(head -c 300 "$WORK/verify.err"))"
expect_eq "$(digest)" "$WANT" "across the gap: the same counts and keys as the direct verify, both tables"
expect_eq "$(jq -c '[.tables[] | [.missing_in_target_total, .extra_in_target_total, .different_total]]' "$WORK/out.json")" \
  "[[50,3,$((ROWS / 997))],[3,2,2]]" "each planted difference found, by kind"
# Only keys travelled: the source half relayed a few bytes per key, not whole rows.
read -r keys bytes < <(halves "SUM(JSON_EXTRACT(s.output, '\$.rows_relayed')), SUM(JSON_EXTRACT(s.output, '\$.bytes_relayed'))" \
  "AND e.id > (SELECT MAX(id) - 2 FROM distribute_event)")
echo "source halves: $keys keys in $bytes bytes"
(( keys > 0 && bytes <= keys * 24 )) || fail "the source halves relayed $bytes bytes for $keys keys: more than keys"
pass "only keys crossed the gap ($bytes bytes for $keys keys)"
expect_eq "$(relay_left)" 0 "nothing is left in the relay tables"
verify b --source env_a --target env_b --table tagged --where "v > :min" --params '{"min": 100}'
expect_eq "$(jq -c '.tables[0] | [.missing_in_target_total, .extra_in_target_total, .different_total]' "$WORK/out.json")" \
  "[2,0,1]" "one table with a bound filter: only the differences inside it"

# --- no node of env_a's side ---------------------------------------------------------------------
kill -STOP "$PID_a"
start=$(now_ms)
verify short --source env_a --target env_b --table big --where "1 = 1"
kill -CONT "$PID_a"
expect_eq "$rc" 1 "no live node of env_a: exit 1"
[[ $(wc -l <"$WORK/out.json") == 0 ]] || fail "no live node of env_a: it printed a report"
grep -q "no source half described its table within 2 s" "$WORK/verify.err" ||
  fail "no live node of env_a: the error does not name the wait: $(tail -n 2 "$WORK/verify.err")"
pass "no live node of env_a: one line naming the wait ($(( $(now_ms) - start )) ms)"
expect_eq "$(relay_left)" 0 "nothing is left in the relay tables after the refusal"

# --- a verifying process killed with kill -9: its source half ends ------------------------------------
# Node A is frozen so that the source half waits; the verifying process dies after it
# published its side; A is thawed: its source half finds the verify's presence lock
# released (RelayPresence) and ends within seconds, instead of waiting for its event's
# deadline (an hour).
kill -STOP "$PID_a"
last_half=$(sql "SELECT COALESCE(MAX(id), 0) FROM distribute_event WHERE topic = 'dsync.relay_source'")
"$DSYNC_BIN" verify --config "$WORK/b.json" --source env_a --target env_b --table big --where "1 = 1" \
  >"$WORK/killed.out" 2>"$WORK/killed.err" &
vpid=$!
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE topic = '"'"'dsync.relay_source'"'"' AND id > '"$last_half"'") == 1
            && $(sql "SELECT COUNT(*) FROM dsync_relay WHERE target_schema IS NOT NULL AND source_schema IS NULL") -ge 1 ]]' 30 \
  "the verify to publish its side and produce its source half"
kill -9 "$vpid"; wait "$vpid" 2>/dev/null || true
kill -CONT "$PID_a"
half=$(sql "SELECT code FROM distribute_event WHERE topic = 'dsync.relay_source' AND id > $last_half")
start=$(now_ms)
wait_for "[[ \$(event_status '$half') == SUCCESS ]]" 60 "the killed verify's source half $half to end (is \$(event_status '$half'))"
out=$(sql "SELECT s.output FROM distribute_event_step s WHERE s.job_code = '$half'")
[[ $out == *"process is gone"* ]] || fail "the source half ended without naming the gone verify: $out"
pass "a verify killed with kill -9: its source half ended $(( $(now_ms) - start )) ms after node A was thawed ($out)"

# --- repair across the gap ----------------------------------------------------------------------------
start_bg b "$DSYNC_BIN" node --config "$WORK/b.json" --node-address "$B"
online "$B"
# The table_verify step across the gap: run on B (env_b's side), env_a's side on A.
produce check-0 '{}' CHECK
wait_for "[[ \$(event_status check-0) == FAILED || \$(event_status check-0) == COMPENSATED ]]" 60 "check-0 to end"
expect_eq "$(sql "SELECT CONCAT(node_address, ' ', last_error LIKE '%differ: 50 missing in target, 3 extra in target, $((ROWS / 997)) different%')
                  FROM distribute_event WHERE code = 'check-0'")" "$B 1" \
  "the table_verify step ran across the gap on B and failed naming the differences"
grep -q "VERIFY_RELAYED_DONE code=check-0#1 " "$WORK/b.log" || fail "check-0 was not verified across the gap"
verify b --topic SYNC --payload '{}' --repair --timeout-ms 120000
expect_eq "$rc" 0 "--repair across the gap: re-verified equal, exit 0 (stderr: $(grep -v ' info ' "$WORK/verify.err" | tail -n 3))"
expect_eq "$(qa "SELECT id, grp, name, at FROM big ORDER BY id" | md5sum)/$(qa "SELECT * FROM tagged ORDER BY name" | md5sum)" \
  "$(qb "SELECT id, grp, name, at FROM big ORDER BY id" | md5sum)/$(qb "SELECT * FROM tagged ORDER BY name" | md5sum)" \
  "--repair across the gap: env_b equals env_a (ordered dumps)"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
                  WHERE e.topic = 'SYNC' AND e.code LIKE 'repair-%' AND s.status = 'SUCCESS' AND s.node_address = '$B'
                  AND JSON_EXTRACT(s.output, '\$.relayed') = true")" 2 \
  "--repair across the gap: the repair event's two syncs ran relayed on B"
produce check-1 '{}' CHECK
wait_for "[[ \$(event_status check-1) == SUCCESS ]]" 60 "check-1 to succeed (is \$(event_status check-1))"
pass "the table_verify step across the gap: equal after the repair"
expect_eq "$(saga_violations)" 0 "saga order holds for every event"
kill -TERM "$PID_a" "$PID_b" "$PID_disp"
wait "$PID_a" || fail "node A exit code $?"
wait "$PID_b" || fail "node B exit code $?"
wait "$PID_disp" || fail "dispatcher exit code $?"
pass "nodes and dispatcher drained and exited 0"
