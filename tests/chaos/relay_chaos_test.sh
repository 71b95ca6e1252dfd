#!/usr/bin/env bash
# The chaos suite's relayed variant (issue 35): every sync crosses the gap while nodes of
# both sides are kill -9ed and each of the three databases is crashed and restarted.
#
# Setup: three MariaDB servers of its own: F (the framework database), A (env_a) and
# B (env_b). One dispatcher (F only), nodes a1, a2 whose configs name env_a only and
# b1, b2 naming env_b only: no node reaches both, so every table_sync runs relayed
# (target half on a b node, source half on an a node, meeting in F). env_a holds
# RELAY_CHAOS_GROUPS groups of RELAY_CHAOS_ROWS rows; env_b an older copy of each (a
# fifth of the rows missing, a seventh changed, three extra rows per group). One event
# per group syncs it (where grp = :g, delete_missing, chunks of 100 rows); every fourth
# group's topic has a later step that fails permanently, so its sync is compensated.
# While the events run: every 2-4 s a random node (either side) is kill -9'd and
# restarted 0.5-1.5 s later; A, then B, then F is kill -9'd and restarted.
# Checks, per group (ordered dumps, md5): a SUCCESS event's group in env_b equals
# env_a's; a COMPENSATED event's group equals env_b's before the run, byte for byte;
# no event lost (all terminal) or FAILED; every SUCCESS sync ran relayed; no key range
# of a step written twice (its chunk records in env_b); the saga order; nothing left
# in flight in the relay tables. One summary line.
SRC=$(cd "$(dirname "$0")/../.." && pwd)
: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest)}"

GROUPS_N=${RELAY_CHAOS_GROUPS:-40}
ROWS=${RELAY_CHAOS_ROWS:-1500}
CHAOS_S=${RELAY_CHAOS_S:-35}
QUIESCE_S=${RELAY_CHAOS_QUIESCE_S:-240}

F_DB=$(bash "$SRC/scripts/mariadb.sh" start)
A_DB=$(bash "$SRC/scripts/mariadb.sh" start)
B_DB=$(bash "$SRC/scripts/mariadb.sh" start)
DSYNC_TEST_DB_URL=$(bash "$SRC/scripts/mariadb.sh" url "$F_DB")
export DSYNC_TEST_DB_URL
source "$SRC/tests/cli/lib.sh"
keep_logs() {
  if [[ -n ${RELAY_CHAOS_KEEP_DIR:-} ]]; then
    mkdir -p "$RELAY_CHAOS_KEEP_DIR" && cp "$WORK"/*.log "$WORK"/*.earlier "$RELAY_CHAOS_KEEP_DIR"/ 2>/dev/null || true
  fi
}
trap 'keep_logs; cleanup; for d in "$F_DB" "$A_DB" "$B_DB"; do bash "$SRC/scripts/mariadb.sh" stop "$d" >/dev/null 2>&1 || true; done' EXIT

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; grep -v " debug " "$f" | tail -n 15 >&2; }; done
  exit 1
}
qa() { bash "$SRC/scripts/mariadb.sh" root "$A_DB" -N -B env_a -e "$1"; }
qb() { bash "$SRC/scripts/mariadb.sh" root "$B_DB" -N -B env_b -e "$1"; }
bash "$SRC/scripts/mariadb.sh" root "$A_DB" -e "CREATE DATABASE env_a"
bash "$SRC/scripts/mariadb.sh" root "$B_DB" -e "CREATE DATABASE env_b"
URL_A="$(dirname "$(bash "$SRC/scripts/mariadb.sh" url "$A_DB")")/env_a"
URL_B="$(dirname "$(bash "$SRC/scripts/mariadb.sh" url "$B_DB")")/env_b"

TABLE="CREATE TABLE item (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), note VARCHAR(200), n INT,
       KEY (grp)) DEFAULT CHARSET=utf8mb4"
qa "$TABLE"
qb "$TABLE"
qa "INSERT INTO item SELECT g.seq * 100000 + r.seq, g.seq, CONCAT('name ', r.seq), REPEAT('x', r.seq % 150), r.seq
    FROM seq_1_to_${GROUPS_N} g, seq_1_to_${ROWS} r"
qb "INSERT INTO item SELECT g.seq * 100000 + r.seq, g.seq, IF(r.seq % 7 = 0, CONCAT('old ', r.seq), CONCAT('name ', r.seq)),
      REPEAT('x', r.seq % 150), r.seq FROM seq_1_to_${GROUPS_N} g, seq_1_to_${ROWS} r WHERE r.seq % 5 <> 0;
    INSERT INTO item SELECT g.seq * 100000 + ${ROWS} + r.seq, g.seq, 'extra', NULL, 0 FROM seq_1_to_${GROUPS_N} g, seq_1_to_3 r"
group_md5() { "$1" "SELECT id, grp, name, note, n FROM item WHERE grp = $2 ORDER BY id" | md5sum | cut -c1-32; }
declare -A want_a before_b
for g in $(seq 1 "$GROUPS_N"); do
  want_a[$g]=$(group_md5 qa "$g")
  before_b[$g]=$(group_md5 qb "$g")
done

STEP='{ "name": "copy", "type": "table_sync", "source": "env_a", "target": "env_b", "table": "item",
        "where": "grp = :g", "chunk_size": 100, "delete_missing": true }'
TOPICS="{
  \"SYNC\": { \"max_retry\": 3, \"backoff_base_ms\": 200, \"backoff_max_ms\": 1000, \"max_processing_time_ms\": 60000,
              \"steps\": [ $STEP ] },
  \"SYNC_FAIL\": { \"max_retry\": 0, \"max_processing_time_ms\": 60000,
              \"steps\": [ $STEP, { \"name\": \"check\", \"type\": \"demo\" } ] }
}"
CONFIG_FILE=$WORK/a.json write_config relay "$TOPICS" "{\"datasources\": {\"env_a\": \"$URL_A\"}}" '{"consumer": {"capacity": 4}}'
CONFIG_FILE=$WORK/b.json write_config relay "$TOPICS" "{\"datasources\": {\"env_b\": \"$URL_B\"}}" '{"consumer": {"capacity": 4}}'
CONFIG_FILE=$WORK/disp.json write_config relay "$TOPICS"
export DSYNC_LOG_LEVEL=info
"$DSYNC_BIN" migrate --config "$WORK/disp.json" >/dev/null

read -r -d '' p1 p2 p3 p4 < <(free_ports 4) || true
declare -A addr_of=([a1]=127.0.0.1:$p1 [a2]=127.0.0.1:$p2 [b1]=127.0.0.1:$p3 [b2]=127.0.0.1:$p4)
start_node_of() {  # start_node_of NAME: a node of its side's config at its address
  local name=$1
  cat "$WORK/$name.log" >>"$WORK/$name.earlier" 2>/dev/null || true  # start_bg starts a new log
  start_bg "$name" "$DSYNC_BIN" node --config "$WORK/${name:0:1}.json" --node-address "${addr_of[$name]}"
}
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/disp.json"
for n in a1 a2 b1 b2; do start_node_of "$n"; done

# The producer: one event per group, about 3 a second.
(
  for g in $(seq 1 "$GROUPS_N"); do
    topic=SYNC; ((g % 4 == 3)) && topic=SYNC_FAIL
    payload="{\"g\": $g}"; [[ $topic == SYNC_FAIL ]] && payload="{\"g\": $g, \"demo\": {\"fail\": {\"check\": \"permanent\"}}}"
    until sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
               VALUES ('t1', 'g-$g', 'g-$g', '$topic', '$payload')" 2>/dev/null; do sleep 0.5; done  # F may be down
    sleep 0.3
  done
) &
PRODUCER=$!
STARTED_PIDS+=("$PRODUCER")

# The chaos.
kills=0 restarts=0
t0=$SECONDS
declare -A crashed=()
while ((SECONDS - t0 < CHAOS_S)); do
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 2 + (r % 200) / 100 }')"
  names=(a1 a2 b1 b2)
  victim=${names[RANDOM % 4]}
  kill9 "$(eval echo "\$PID_$victim")"
  kills=$((kills + 1))
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 0.5 + (r % 100) / 100 }')"
  start_node_of "$victim"
  elapsed=$((SECONDS - t0))
  for db in A:8 B:16 F:24; do
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
wait "$PRODUCER" || fail "the producer failed"

# Quiescence.
wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'g-%' AND status IN ('SUCCESS','COMPENSATED','FAILED')\") == $GROUPS_N ]]" \
  "$QUIESCE_S" "every group's event terminal ($(sql "SELECT GROUP_CONCAT(CONCAT(code, ':', status)) FROM distribute_event WHERE code LIKE 'g-%' AND status NOT IN ('SUCCESS','COMPENSATED','FAILED')" 2>/dev/null))"

success=0 compensated=0 failed=0 mismatches=0
for g in $(seq 1 "$GROUPS_N"); do
  status=$(event_status "g-$g")
  now_b=$(group_md5 qb "$g")
  case $status in
    SUCCESS) success=$((success + 1)); [[ $now_b == "${want_a[$g]}" ]] || { echo "group $g: SUCCESS but env_b differs from env_a"; mismatches=$((mismatches + 1)); } ;;
    COMPENSATED) compensated=$((compensated + 1)); [[ $now_b == "${before_b[$g]}" ]] || { echo "group $g: COMPENSATED but env_b is not as before"; mismatches=$((mismatches + 1)); } ;;
    *) failed=$((failed + 1)); echo "group $g: $status: $(sql "SELECT last_error FROM distribute_event WHERE code = 'g-$g'")" ;;
  esac
done
not_relayed=$(sql "SELECT COUNT(*) FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
                   WHERE e.code LIKE 'g-%' AND e.status = 'SUCCESS' AND s.step_name = 'copy'
                     AND COALESCE(JSON_EXTRACT(s.output, '\$.relayed') = true, 0) = 0")
overlaps=$(qb "SELECT COUNT(*) FROM (
    SELECT step_code, CAST(JSON_UNQUOTE(JSON_EXTRACT(lo_key, '\$[0]')) AS SIGNED) AS lo,
           LAG(CAST(JSON_UNQUOTE(JSON_EXTRACT(hi_key, '\$[0]')) AS SIGNED)) OVER (PARTITION BY step_code ORDER BY chunk_no) AS prev_hi
    FROM dsync_sync_chunk WHERE chunk_no > 0 AND rows_written > 0) r WHERE r.lo < r.prev_hi")
in_flight=$(sql "SELECT COUNT(*) FROM dsync_relay_chunk c JOIN dsync_relay r ON r.step_code = c.step_code
                 JOIN distribute_event e ON e.code = r.event_code WHERE e.status IN ('SUCCESS','COMPENSATED')")
violations=$(saga_violations)
takeovers=$(sql "SELECT COUNT(*) FROM dsync_relay WHERE epoch > 1")
sql "SELECT code, status, reset_count, retry_count FROM distribute_event WHERE reset_count > 2 ORDER BY id" | head -20
echo "groups=$GROUPS_N rows=$ROWS kills=$kills db_restarts=$restarts success=$success compensated=$compensated failed=$failed" \
  "mismatches=$mismatches not_relayed=$not_relayed overlaps=$overlaps relay_left=$in_flight saga_violations=$violations" \
  "relay_takeovers=$takeovers"
expect_eq "$((success + compensated + failed))" "$GROUPS_N" "no event lost"
expect_eq "$failed" 0 "no event FAILED"
expect_eq "$mismatches" 0 "env_b equals env_a for every SUCCESS group, and is restored exactly for every COMPENSATED one"
((compensated > 0)) || fail "no event was compensated: the compensation path was not exercised"
expect_eq "$not_relayed" 0 "every successful sync ran relayed"
expect_eq "$overlaps" 0 "no key range of a step written twice"
expect_eq "$in_flight" 0 "nothing of a finished event left in the relay tables"
expect_eq "$violations" 0 "saga order holds for every event"
expect_eq "${#crashed[@]}" 3 "each of the three servers was crashed and restarted"
