#!/usr/bin/env bash
# The chaos suite's capture run (issue 36): a steady writer on the source while the
# capture's readers and the nodes applying its events are kill -9ed at random points,
# and the source and the framework database are each crashed (kill -9) and restarted.
#
# Setup: two MariaDB servers of its own: S, the source (binlog on; schema src), and F,
# the framework database (this test's schema) with the target schema beside it (so F's
# crash is the target's too). One dispatcher, nodes n1 and n2, readers r1 and r2 (`dsync
# capture`: one holds the lease, the other stands by). Tables t1 (integer key) and t2
# (composite key), empty when the capture starts (its copy is empty), each with a
# counter column.
# The writer: transactions of a multi-row INSERT into each table, an UPDATE counter =
# counter + 1 of rows written earlier, and a DELETE, one `mariadb` client per
# transaction (a transaction refused while S is down is simply not written).
# The chaos, CAPTURE_CHAOS_S (30) s: every 2-4 s a random one of r1, r2, n1, n2 (every
# third time the reader holding the lease) is kill -9ed and restarted 0.5-1.5 s later; at 8 s S, at 18 s F is kill -9ed and
# restarted 2 s later.
# Checks once the writer stopped and the capture caught up (its checkpoint at the
# source's GTID position, no capture event left to run): `dsync verify` exit 0 on both
# tables; SUM(counter) equal on both sides; no capture event FAILED; no event code
# twice; and the capture's row-change count equals the row changes of t1 and t2 in the
# source's binlog (mariadb-binlog, every row event since the start): no binlog range
# was committed twice (its changes would be counted twice) or skipped. One summary line.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest)}"

CHAOS_S=${CAPTURE_CHAOS_S:-30}

S_DB=$(DSYNC_MARIADB_BINLOG=1 bash "$SRC/scripts/mariadb.sh" start)
F_DB=$(bash "$SRC/scripts/mariadb.sh" start)
DSYNC_TEST_DB_URL=$(bash "$SRC/scripts/mariadb.sh" url "$F_DB")
export DSYNC_TEST_DB_URL
source "$SRC/tests/cli/lib.sh"
trap 'cleanup; for d in "$S_DB" "$F_DB"; do bash "$SRC/scripts/mariadb.sh" stop "$d" >/dev/null 2>&1 || true; done' EXIT

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; grep -v " debug " "$f" | tail -n 15 >&2; }; done
  exit 1
}
qs() { bash "$SRC/scripts/mariadb.sh" root "$S_DB" -N -B src -e "$1"; }
TGT="${SCHEMA}_t"
qt() { bash "$SRC/scripts/mariadb.sh" root "$F_DB" -N -B "$TGT" -e "$1"; }
bash "$SRC/scripts/mariadb.sh" root "$S_DB" -e "CREATE DATABASE src"
bash "$SRC/scripts/mariadb.sh" root "$F_DB" -e "CREATE DATABASE \`$TGT\`"
TABLES="CREATE TABLE t1 (id INT PRIMARY KEY, name VARCHAR(40), counter INT NOT NULL DEFAULT 0, data VARBINARY(32));
        CREATE TABLE t2 (g INT NOT NULL, id INT NOT NULL, counter INT NOT NULL DEFAULT 0, note VARCHAR(100),
                         PRIMARY KEY (g, id));"
qs "$TABLES"
qt "$TABLES"
S_URL=$(bash "$SRC/scripts/mariadb.sh" url "$S_DB")
T_URL="$(dirname "$DSYNC_TEST_DB_URL")/$TGT"

TOPICS='{"NOOP": {"steps": [{"name": "n", "type": "demo"}]}}'
write_config capture "$TOPICS" \
  "{\"datasources\": {\"src\": \"$(dirname "$S_URL")/src\", \"tgt\": \"$T_URL\"},
    \"captures\": {\"c1\": {\"source\": \"src\", \"target\": \"tgt\", \"tables\": [\"t1\", \"t2\"]}}}" \
  '{"consumer": {"capacity": 8}}'
export DSYNC_LOG_LEVEL=info
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null

read -r -d '' p1 p2 < <(free_ports 2) || true
declare -A addr_of=([n1]=127.0.0.1:$p1 [n2]=127.0.0.1:$p2)
start_one() {  # start_one NAME: a node (n*) or a reader (r*), its earlier log kept
  local name=$1
  cat "$WORK/$name.log" >>"$WORK/$name.earlier" 2>/dev/null || true
  if [[ $name == n* ]]; then start_node "$name" "${addr_of[$name]#*:}"
  else start_bg "$name" "$DSYNC_BIN" capture --config "$WORK/dsync.json"; fi
}
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
for n in n1 n2 r1 r2; do start_one "$n"; done
wait_for "[[ \$(sql \"SELECT state FROM dsync_capture WHERE name = 'c1'\" 2>/dev/null) == RUNNING ]]" 60 "the (empty) initial copy"

# The writer: transaction i inserts ids 10i..10i+4 into both tables, adds 1 to the
# counters of transaction i-3's rows, deletes one row of transaction i-6.
(
  i=1
  while [[ ! -e $WORK/stop ]]; do
    b=$((i * 10))
    ins1="" ins2=""
    for j in 0 1 2 3 4; do
      ins1+="${ins1:+, }($((b + j)), 'w$i', UNHEX('$(printf '%02x' $((j * 50)))00ff'))"
      ins2+="${ins2:+, }($((j % 3)), $((b + j)), 'note $i')"
    done
    txn="BEGIN; INSERT INTO t1 (id, name, data) VALUES $ins1; INSERT INTO t2 (g, id, note) VALUES $ins2;"
    ((i > 3)) && txn+=" UPDATE t1 SET counter = counter + 1 WHERE id BETWEEN $(((i - 3) * 10)) AND $(((i - 3) * 10 + 4));
                         UPDATE t2 SET counter = counter + 1 WHERE (g, id) IN ((0, $(((i - 3) * 10))), (1, $(((i - 3) * 10 + 1))));"
    ((i > 6)) && txn+=" DELETE FROM t1 WHERE id = $(((i - 6) * 10 + 2)); DELETE FROM t2 WHERE g = 2 AND id = $(((i - 6) * 10 + 2));"
    txn+=" COMMIT;"
    bash "$SRC/scripts/mariadb.sh" root "$S_DB" src -e "$txn" 2>/dev/null || sleep 0.2  # S may be down
    i=$((i + 1))
    sleep 0.02
  done
) &
WRITER=$!
STARTED_PIDS+=("$WRITER")

# The chaos.
kills=0 restarts=0
t0=$SECONDS
declare -A crashed=()
while ((SECONDS - t0 < CHAOS_S)); do
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 2 + (r % 200) / 100 }')"
  names=(r1 r2 n1 n2)
  victim=${names[RANDOM % 4]}
  if ((kills % 3 == 0)); then  # every third kill is the reader holding the lease
    holder=$(sql "SELECT SUBSTRING_INDEX(SUBSTRING_INDEX(holder, ':', 2), ':', -1) FROM dsync_capture
                  WHERE name = 'c1' AND lease_until > NOW(3)" 2>/dev/null || true)
    [[ $holder == "$PID_r1" ]] && victim=r1
    [[ $holder == "$PID_r2" ]] && victim=r2
  fi
  kill9 "$(eval echo "\$PID_$victim")"
  kills=$((kills + 1))
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + (r % 100) / 100 }')"
  start_one "$victim"
  elapsed=$((SECONDS - t0))
  for db in S:8 F:18; do
    name=${db%%:*} at=${db#*:}
    if ((elapsed >= at)) && [[ -z ${crashed[$name]:-} ]]; then
      dir_var="${name}_DB"
      echo "chaos: kill -9 of server $name at ${elapsed} s"
      bash "$SRC/scripts/mariadb.sh" kill "${!dir_var}"
      sleep 2
      bash "$SRC/scripts/mariadb.sh" restart "${!dir_var}" >/dev/null
      crashed[$name]=1 restarts=$((restarts + 1))
    fi
  done
done
touch "$WORK/stop"
wait "$WRITER" || true

# Quiescence: the reader at the source's position, every capture event ended.
pos=$(qs "SELECT @@gtid_binlog_pos")
wait_for "[[ \$(sql \"SELECT gtid FROM dsync_capture WHERE name = 'c1'\") == '$pos' ]]" 90 \
  "the reader to reach the source's position $pos ($(sql "SELECT gtid, holder FROM dsync_capture" 2>/dev/null))"
wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.capture' AND status NOT IN ('SUCCESS', 'FAILED', 'COMPENSATED')\") == 0 ]]" 120 \
  "every capture event to end"

verify_rc=0
for t in t1 t2; do
  "$DSYNC_BIN" verify --config "$WORK/dsync.json" --source src --target tgt --table "$t" --where "1 = 1" \
    >"$WORK/verify-$t.out" 2>&1 || { verify_rc=$?; echo "verify $t: $(cat "$WORK/verify-$t.out")"; }
done
failed=$(sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.capture' AND status <> 'SUCCESS'")
dup_codes=$(sql "SELECT COUNT(*) - COUNT(DISTINCT code) FROM distribute_event WHERE topic = 'dsync.capture'")
captured=$(sql "SELECT row_changes FROM dsync_capture WHERE name = 'c1'")
# Row changes of committed transactions only (a transaction torn by the crash has no COMMIT).
in_binlog=$(for f in $(qs "SHOW BINARY LOGS" | cut -f1); do
              mariadb-binlog --base64-output=decode-rows -v "$S_DB/data/$f" 2>/dev/null || true
            done | awk '/^BEGIN/ { n = 0 } /^### (INSERT INTO|UPDATE|DELETE FROM) `src`\.`t[12]`/ { n++ }
                        /^COMMIT/ { total += n; n = 0 } END { print total + 0 }')
rows=$(qs "SELECT COUNT(*) FROM t1")
readers=$(sql "SELECT reader_starts FROM dsync_capture WHERE name = 'c1'")
echo "seconds=$CHAOS_S kills=$kills db_restarts=$restarts source_rows_t1=$rows row_changes_in_binlog=$in_binlog" \
  "captured_row_changes=$captured reader_starts=$readers failed_events=$failed duplicate_codes=$dup_codes verify_rc=$verify_rc"
expect_eq "$verify_rc" 0 "dsync verify exit 0 on t1 and t2"
expect_eq "$(qt "SELECT SUM(counter) FROM t1"),$(qt "SELECT SUM(counter) FROM t2")" \
  "$(qs "SELECT SUM(counter) FROM t1"),$(qs "SELECT SUM(counter) FROM t2")" "the counter columns are equal (no change lost or applied twice)"
expect_eq "$failed" 0 "no capture event failed"
expect_eq "$dup_codes" 0 "no event code twice"
((in_binlog > 0)) || fail "the writer wrote nothing"
expect_eq "$captured" "$in_binlog" "the capture counted exactly the binlog's row changes (no range committed twice or skipped)"
((readers >= 2)) || fail "no reader took over (reader_starts=$readers)"
expect_eq "${#crashed[@]}" 2 "the source and the framework database were each crashed and restarted"
