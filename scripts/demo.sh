#!/usr/bin/env bash
# The README's first command: dsync syncing two isolated environments, end to end.
#
# Installs what is missing, builds, and starts two throwaway MariaDB servers, one per
# zone. Zone A's server holds `env_a` (a knowledge base: spaces, documents, tags,
# permissions; a few thousand rows) and `dsync` (the framework's tables); zone B's
# holds `env_b` (the same tables, empty but for stale copies of two spaces, and one
# column narrower: an older schema). No process of the run reaches both environments:
# each node's config names only its own zone's datasource, and every node reaches the
# framework database, as between two real clusters. So every sync is relayed
# (docs/relay.md): a zone-B node runs each step's target half, a zone-A node its
# source half, and they meet in the framework database. Processes: one dispatcher,
# two zone-B nodes (one joins once the run is under way, 15 % done, with no config
# change) and two zone-A nodes. One SPACE_ADD event per space is produced
# (`dsync produce --file`); each runs as a four-step saga of table_sync steps (space,
# docs, tags, permissions) from env_a to env_b. One space is poisoned: one of its
# permissions does not fit env_b's narrower column, so its last step fails permanently
# and the saga compensates the three steps before it. One zone-B node is kill -9ed (at
# 35 %) while it runs events; they finish elsewhere. A live progress line runs until
# every event is terminal; the summary shows events by status, work per node and the
# relay's figures, then verifies with checksums that env_b equals env_a for every
# synced space and that the poisoned space left env_b exactly as it was; it ends with
# `dsync verify` across the gap (zone B's config: env_a's side is computed by a zone-A
# node) for the synced spaces (exit 0) and for the poisoned one (exit 3).
#
# Exits non-zero if the verification fails; stops everything it started and removes
# the servers. Options (environment): DSYNC_BUILD_DIR (default build),
# DSYNC_DEMO_BIN (a prebuilt binary: no build), DSYNC_DEMO_SPACES (default 240, at
# most 1000), DSYNC_DEMO_KEEP=1 keeps the web console, the nodes and the servers
# running after the demo, until Ctrl-C.
#
# The web console (`dsync serve` on a free loopback port) is up from the start: the
# demo prints its URL; open it to watch the run live.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ports.sh
source scripts/mariadb_common.sh

spaces=${DSYNC_DEMO_SPACES:-240}
[[ $spaces =~ ^[0-9]+$ ]] && ((spaces >= 20 && spaces <= 1000)) ||
  { echo "demo: DSYNC_DEMO_SPACES must be 20..1000" >&2; exit 2; }
poisoned=13  # its permissions do not fit env_b: the saga compensates
stale=7      # env_b holds an outdated copy that the sync overwrites
build=${DSYNC_BUILD_DIR:-build}
offline_ms=3000  # a killed node is declared dead after this long without heartbeat

bash scripts/setup.sh --demo
work=$(mktemp -d "${TMPDIR:-/tmp}/dsync-demo.XXXXXX")
dir="" dir_b="" prepare_pid=""
declare -A pid_of=()
cleanup() {
  local rc=$? name f
  for name in "${!pid_of[@]}"; do kill -9 "${pid_of[$name]}" 2>/dev/null || true; done
  if ((rc != 0)) && compgen -G "$work/*.log" >/dev/null; then
    for log in "$work"/*.log; do
      echo "--- last lines of $(basename "$log")" >&2
      tail -n 5 "$log" >&2
    done
  fi
  # The servers may still be starting (a failed build): let that finish, then stop
  # both at once.
  [[ -n $prepare_pid ]] && { wait "$prepare_pid" 2>/dev/null || true; }
  local stops=()
  for f in "$work/dir_a" "$work/dir_b"; do
    [[ -s $f ]] && { bash scripts/mariadb.sh stop "$(<"$f")" & stops+=($!); }
  done
  ((${#stops[@]} == 0)) || wait "${stops[@]}"
  rm -rf "$work"
}
trap cleanup EXIT

# ---- the two environments, prepared while dsync builds -----------------------------
mysql_in() { bash scripts/mariadb.sh root "$dir" --default-character-set=utf8mb4 -N -B "$@"; }    # zone A's server
mysql_b() { bash scripts/mariadb.sh root "$dir_b" --default-character-set=utf8mb4 -N -B "$@"; }   # zone B's server
sql() { mysql_in dsync -e "$1"; }
env_db() { if [[ $1 == env_b ]]; then mysql_b "$@"; else mysql_in "$@"; fi; }  # env_db SCHEMA args...
checksums() { env_db "$1" <scripts/demo/checksums.sql; }  # checksums SCHEMA > file
mask() { sed -E 's#://([^:/@]+):[^@]*@#://\1:***@#g'; }
# The servers start, and the environments are filled, in the background while dsync
# builds (they need no dsync binary); their output is shown once the build is done.
# Each server's folder is in $work/dir_a and dir_b once it is up (cleanup stops them).
prepare_environments() {
  local b_pid
  bash scripts/mariadb.sh start >"$work/dir_b" &
  b_pid=$!
  bash scripts/mariadb.sh start >"$work/dir_a" || return 1
  wait "$b_pid" || return 1
  dir=$(<"$work/dir_a") dir_b=$(<"$work/dir_b")
  url=$(bash scripts/mariadb.sh url "$dir")
  echo "== two throwaway MariaDB servers, one per zone: A $(echo "$url" | mask) (env_a, and dsync's own tables)"
  echo "   and B 127.0.0.1:$(cat "$dir_b/port") (env_b); no process of the run reaches both environments"

  # The steps reach each environment as its own user, with no more rights than they
  # need: read env_a; read and write env_b, and create its dsync tables.
  pass_a=$(new_password) pass_b=$(new_password)
  mysql_in -e "CREATE DATABASE env_a CHARACTER SET utf8mb4;
    CREATE USER 'kb_sync'@'127.0.0.1' IDENTIFIED BY '$pass_a';
    GRANT SELECT ON env_a.* TO 'kb_sync'@'127.0.0.1'"
  mysql_b -e "CREATE DATABASE env_b CHARACTER SET utf8mb4;
    CREATE USER 'kb_sync'@'127.0.0.1' IDENTIFIED BY '$pass_b';
    GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON env_b.* TO 'kb_sync'@'127.0.0.1'"
  env_a_url="mysql://kb_sync:$pass_a@127.0.0.1:$(cat "$dir/port")/env_a"
  env_b_url="mysql://kb_sync:$pass_b@127.0.0.1:$(cat "$dir_b/port")/env_b"
  mysql_in env_a <scripts/demo/kb_schema.sql
  mysql_b env_b <scripts/demo/kb_schema.sql
  { echo "SET @spaces = $spaces, @poisoned = $poisoned;"; cat scripts/demo/env_a_data.sql; } | mysql_in env_a
  # env_b's stale copies are made from env_a's rows of two spaces, copied to zone B's
  # server first (env_a_seed, dropped after).
  for t in kb_space:id kb_doc:space_id kb_tag:space_id kb_permission:space_id; do
    mariadb-dump --socket="$dir/sock" -uroot --compact --skip-triggers env_a "${t%%:*}" \
      --where="${t#*:} IN ($stale, $poisoned)"
  done | { mysql_b -e "CREATE DATABASE env_a_seed"; mysql_b env_a_seed; }
  { echo "SET @poisoned = $poisoned, @stale = $stale;"; cat scripts/demo/env_b_setup.sql; } | mysql_b env_b
  mysql_b -e "DROP DATABASE env_a_seed"
  count_rows() {
    env_db "$1" -e "SELECT CONCAT((SELECT COUNT(*) FROM kb_space), ' spaces, ', (SELECT COUNT(*) FROM kb_doc),
      ' documents (', ROUND((SELECT SUM(LENGTH(body)) FROM kb_doc) / 1048576, 1), ' MB), ',
      (SELECT COUNT(*) FROM kb_tag), ' tags, ', (SELECT COUNT(*) FROM kb_permission), ' permissions')"
  }
  echo "   env_a: $(count_rows env_a)"
  echo "   env_b: $(count_rows env_b)  (stale copies of spaces $stale and $poisoned; principals of at most 64 characters: a CHECK only env_b has)"
  checksums env_a >"$work/a.sums"
  checksums env_b >"$work/b_before.sums"
  printf '%s\n' "$env_a_url" "$env_b_url" >"$work/env_urls"
}
# The servers' datadirs go in memory (/dev/shm) when it has room for them: they are
# thrown away at the end, and on a disk each of the run's commits waits for an fsync.
servers_in_memory 2
prepare_environments >"$work/prepare.out" 2>&1 &
prepare_pid=$!

if [[ -n ${DSYNC_DEMO_BIN:-} ]]; then  # a prebuilt binary (the test suite runs the demo this way)
  bin=$DSYNC_DEMO_BIN
  build_s=0
else
  echo "== building dsync in $build/ (from scratch: under 2 minutes on 2 cores; seconds once built)"
  build_start=$SECONDS
  if ! DSYNC_BUILD_DIR=$build bash scripts/build.sh dsync >"$work/build.out" 2>&1; then
    tail -n 30 "$work/build.out" >&2
    echo "demo: build failed" >&2
    exit 1
  fi
  build_s=$((SECONDS - build_start))
  echo "   built in $build_s s"
  bin=$(cd "$build" && pwd)/dsync
fi

if ! wait "$prepare_pid"; then
  prepare_pid=""
  cat "$work/prepare.out" >&2
  echo "demo: preparing the two environments failed" >&2
  exit 1
fi
prepare_pid=""
dir=$(<"$work/dir_a") dir_b=$(<"$work/dir_b")
url=$(bash scripts/mariadb.sh url "$dir")
{ read -r env_a_url; read -r env_b_url; } <"$work/env_urls"
cat "$work/prepare.out"

# ---- dsync: config, schema, processes ------------------------------------------------
# One config per zone: the same topics, each naming only the datasource its zone
# reaches; the dispatcher and the console name none. Every process reaches the
# framework database.
write_config() {  # write_config FILE DATASOURCES_JSON
  cat >"$1" <<JSON
{
  "database": "$url",
  "service": "kb-sync-demo",
  "datasources": $2,
  "registry":   { "heartbeat_interval_ms": 500, "offline_timeout_ms": $offline_ms, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": 50, "idle_interval_ms": 250, "lease_ttl_ms": 3000 },
  "consumer":   { "poll_interval_ms": 50, "capacity": 8 },
  "topics": {
    "SPACE_ADD": {
      "max_retry": 3, "backoff_base_ms": 200, "backoff_max_ms": 2000, "max_processing_time_ms": 60000,
      "ordered": true,
      "steps": [
        { "name": "space", "type": "table_sync", "source": "env_a", "target": "env_b",
          "table": "kb_space", "where": "id = :space_id" },
        { "name": "docs", "type": "table_sync", "source": "env_a", "target": "env_b",
          "table": "kb_doc", "where": "space_id = :space_id", "chunk_size": 200 },
        { "name": "tags", "type": "table_sync", "source": "env_a", "target": "env_b",
          "table": "kb_tag", "where": "space_id = :space_id" },
        { "name": "permissions", "type": "table_sync", "source": "env_a", "target": "env_b",
          "table": "kb_permission", "where": "space_id = :space_id" }
      ]
    }
  }
}
JSON
}
write_config "$work/dsync.json" '{}'
write_config "$work/zone_a.json" "{ \"env_a\": \"$env_a_url\" }"
write_config "$work/zone_b.json" "{ \"env_b\": \"$env_b_url\" }"
dsync() { "$bin" "$@" --config "$work/dsync.json"; }
start() {  # start NAME CONFIG dsync-args...
  local name=$1 config=$2; shift 2
  "$bin" "$@" --config "$work/$config.json" >"$work/$name.log" 2>&1 &
  pid_of[$name]=$!
  disown $!  # our own bookkeeping; no job notice when one is killed
}
node_addr() { echo "127.0.0.1:700${1#node}"; }
declare -A zone_of=([node1]=B [node2]=A [node3]=B [node4]=A)

dsync migrate --log-level warn | sed "s/^/   /"
start dispatcher dsync dispatcher
start node1 zone_b node --node-address "$(node_addr node1)"
start node2 zone_a node --node-address "$(node_addr node2)"
start node4 zone_a node --node-address "$(node_addr node4)"
# The web console and HTTP API on a free loopback port: try random ports until one
# binds (a port taken meanwhile makes `dsync serve` exit at once).
console=""
for _ in $(seq 1 10); do
  port=$(free_port)
  start api dsync serve --listen "127.0.0.1:$port"
  for _ in $(seq 1 100); do
    grep -q HTTP_LISTENING "$work/api.log" && { console="http://127.0.0.1:$port/"; break; }
    kill -0 "${pid_of[api]}" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $console ]] && break
  kill -9 "${pid_of[api]}" 2>/dev/null || true
  unset "pid_of[api]"
done
[[ -n $console ]] || { echo "demo: the console did not start" >&2; tail -n 5 "$work/api.log" >&2; exit 1; }
echo "== web console: $console   (live while the demo runs; DSYNC_DEMO_KEEP=1 keeps it after)"
for _ in $(seq 1 50); do
  (($(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 3)) && break
  sleep 0.1
done
echo "== one dispatcher and three nodes started: node1 in zone B (its config names env_b only), node2 and"
echo "   node4 in zone A (env_a only); they registered themselves, with the datasources each reaches:"
dsync nodes

# ---- produce: one SPACE_ADD event per space, written from env_a's rows ---------------
mysql_in env_a -r -e "SELECT JSON_OBJECT('code', CONCAT('SPACE_ADD-', id), 'topic', 'SPACE_ADD',
    'tenant_id', tenant_id, 'data_id', CONCAT('space-', id), 'payload', JSON_OBJECT('space_id', id))
  FROM kb_space ORDER BY id" >"$work/events.jsonl"
total=$(wc -l <"$work/events.jsonl")
batch="demo-$(date -u +%Y%m%dT%H%M%S)"
echo "== producing $total SPACE_ADD events (space $poisoned is poisoned): dsync produce --file events.jsonl --batch $batch"
echo "   e.g. $(sed -n "${poisoned}p" "$work/events.jsonl")"
dsync produce --file "$work/events.jsonl" --batch "$batch" | sed 's/^/   /'

# ---- live progress -----------------------------------------------------------------------
progress_sql="SELECT SUM(status IN ('SUCCESS','COMPENSATED','FAILED')), SUM(status = 'PENDING'),
  SUM(status = 'ASSIGNED'), SUM(status IN ('RUNNING','COMPENSATING')), SUM(status = 'SUCCESS'),
  SUM(status = 'COMPENSATED'), SUM(status = 'FAILED')
FROM distribute_event WHERE batch_code = '$batch'"
now() { echo "${EPOCHREALTIME/,/.}"; }
t0=$(now) joined=0 killed=0 last_print=0 done=0 victim=node1 held=()
victim_addr=$(node_addr $victim)
tty=0 nl=''; [[ -t 1 ]] && tty=1 nl=$'\n'
while :; do
  read -r done pending assigned running success compensated failed < <(sql "$progress_sql")
  elapsed=$(awk -v a="$(now)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }')
  rate=$(awk -v d="$done" -v e="$elapsed" 'BEGIN { printf "%.1f", (e > 0 ? d / e : 0) }')
  line=$(printf '%3d/%d done %5.1fs %5s ev/s | pending %d assigned %d running %d | success %d compensated %d failed %d' \
    "$done" "$total" "$elapsed" "$rate" "$pending" "$assigned" "$running" "$success" "$compensated" "$failed")
  if ((tty)); then
    printf '\r  %s ' "$line"
  elif awk -v e="$elapsed" -v l="$last_print" 'BEGIN { exit !(e - l >= 1) }'; then
    echo "  $line"; last_print=$elapsed
  fi
  ((done < total)) || { ((tty)) || echo "  $line"; break; }
  # The story is driven by progress, not by the clock, so it plays out the same on a
  # slow or a fast machine: node3 joins at 15 %, node1 dies at 35 % (once node3 has
  # had a second to get work) while it runs events.
  secs=${elapsed%.*}
  if ((joined == 0 && (done * 100 >= total * 15 || secs >= 3))); then
    start node3 zone_b node --node-address "$(node_addr node3)"
    joined=1 joined_at=$secs
    printf '%s== node3 (%s, zone B) joins after %s s: no config change anywhere, its first heartbeat registers it\n' \
      "$nl" "$(node_addr node3)" "$elapsed"
  fi
  if ((joined == 1 && killed == 0 && secs > joined_at && done * 100 >= total * 35)); then
    # Wait (briefly) for a moment when the victim is inside a saga, not between two.
    for _ in $(seq 1 25); do
      (($(sql "SELECT COUNT(*) FROM distribute_event WHERE node_address = '$victim_addr' AND status = 'RUNNING'") > 0)) &&
        { kill -9 "${pid_of[$victim]}"; killed=1; break; }
      sleep 0.02
    done
  fi
  if ((killed == 1 && ${#held[@]} == 0)); then
    unset "pid_of[$victim]"
    sleep 0.3  # the server rolls back what the dead process had open
    # What it held: code, status, the step it was executing, the steps it had finished.
    mapfile -t held < <(sql "SELECT e.code, e.status,
        COALESCE((SELECT step_name FROM distribute_event_step s WHERE s.job_code = e.code AND s.status = 'EXECUTING'), '-'),
        COALESCE((SELECT GROUP_CONCAT(code ORDER BY sort) FROM distribute_event_step s
                  WHERE s.job_code = e.code AND s.status = 'SUCCESS'), '')
      FROM distribute_event e WHERE e.node_address = '$victim_addr'
        AND e.status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING') ORDER BY e.id")
    printf '%s== kill -9 %s (%s) after %s s, while it holds %d events (%d running): they wait until it misses heartbeats for %d ms, then the sweeper hands them to the others\n' \
      "$nl" "$victim" "$victim_addr" "$elapsed" "${#held[@]}" \
      "$(printf '%s\n' "${held[@]}" | awk -F'\t' '$2 != "ASSIGNED"' | wc -l)" "$offline_ms"
    ((${#held[@]} > 0)) || held=("-")  # held nothing after all; the verification says so
  fi
  if ((secs > 150)); then echo; echo "demo: events did not finish in 150 s" >&2; exit 1; fi
  sleep 0.2
done
((tty)) && echo
run_s=$elapsed

# ---- summary -------------------------------------------------------------------------
echo "== events by status"
sql "SELECT status, COUNT(*) FROM distribute_event WHERE batch_code = '$batch' GROUP BY status" |
  awk -F'\t' '{ printf "   %-12s %s\n", $1, $2 }'
echo "== work per node: zone B runs the sagas (each step's target half writes env_b), zone A the source halves"
{
  printf 'node\tzone\taddress\tstate\tsagas finished\tsteps done\trows written\tsource halves\trows relayed\n'
  for name in node1 node2 node3 node4; do
    addr=$(node_addr $name)
    state=$([[ $name == "$victim" && $killed == 1 ]] && echo "killed -9" || echo "running")
    sql "SELECT '$name', '${zone_of[$name]}', '$addr', '$state',
           (SELECT COUNT(*) FROM distribute_event WHERE node_address = '$addr' AND batch_code = '$batch'
              AND status IN ('SUCCESS','COMPENSATED','FAILED')),
           (SELECT COUNT(*) FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
              WHERE s.node_address = '$addr' AND s.status = 'SUCCESS' AND e.batch_code = '$batch'),
           (SELECT COALESCE(SUM(JSON_EXTRACT(s.output, '$.inserted') + JSON_EXTRACT(s.output, '$.updated')), 0)
              FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
              WHERE s.node_address = '$addr' AND s.status = 'SUCCESS' AND e.batch_code = '$batch'),
           (SELECT COUNT(*) FROM distribute_event WHERE node_address = '$addr' AND topic = 'dsync.relay_source'
              AND status = 'SUCCESS'),
           (SELECT COALESCE(SUM(JSON_EXTRACT(s.output, '$.rows_relayed')), 0)
              FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
              WHERE s.node_address = '$addr' AND s.status = 'SUCCESS' AND e.topic = 'dsync.relay_source')"
  done
} | column -t -s $'\t' | sed 's/^/   /'
echo "== the relay: every step crossed the gap through the framework database (dsync_relay, one row per step)"
relay_figures=$(sql "SELECT CONCAT(COUNT(*), ' relayed steps, ', COALESCE(SUM(chunks_relayed), 0), ' chunks, ',
    COALESCE(SUM(rows_relayed), 0), ' rows, ', ROUND(COALESCE(SUM(bytes_relayed), 0) / 1048576, 1), ' MB relayed; ',
    'peak in flight per step ', ROUND(COALESCE(MAX(peak_bytes), 0) / 1024), ' KiB (window ',
    ROUND(MAX(window_bytes) / 1048576), ' MiB); ', (SELECT COUNT(*) FROM dsync_relay_chunk), ' chunks left')
  FROM dsync_relay")
echo "   $relay_figures"
echo "== the poisoned event SPACE_ADD-$poisoned: forward steps, then compensation in reverse"
sql "SELECT action, step_name, status, node_address, finished_at, SUBSTRING_INDEX(COALESCE(error_details, ''), ': ', -1)
     FROM v_step_history WHERE event_code = 'SPACE_ADD-$poisoned' ORDER BY seq" |
  awk -F'\t' '{ printf "   %-10s %-12s %-11s %-15s %-23s %s\n", $1, $2, $3, $4, $5, $6 }'

# ---- verification ----------------------------------------------------------------------
ok=1
check() {  # check WHAT ACTUAL EXPECTED
  if [[ $2 == "$3" ]]; then echo "   ok   $1"; else echo "   FAIL $1: expected $3, got $2"; ok=0; fi
}
checksums env_b >"$work/b_after.sums"
# The spaces (1..N) whose four tables have equal checksums in both files (a table a
# space has no rows in counts as equal only if it has none in the other file either).
equal_spaces() {  # equal_spaces FILE1 FILE2
  awk -F'\t' -v n="$spaces" '
    FNR == NR { a[$1 SUBSEP $2] = $3 "/" $4; next }
    { b[$1 SUBSEP $2] = $3 "/" $4 }
    END {
      split("kb_space kb_doc kb_tag kb_permission", t, " ")
      for (s = 1; s <= n; s++) {
        same = 1
        for (i = 1; i <= 4; i++) if (a[t[i] SUBSEP s] != b[t[i] SUBSEP s]) same = 0
        if (same) print s
      }
    }' "$1" "$2"
}
synced_equal=$(equal_spaces "$work/a.sums" "$work/b_after.sums" | grep -vx "$poisoned" | wc -l)
sums_of() { awk -F'\t' -v s="$2" '$2 == s { printf "%s %s/%s  ", $1, $3, substr($4, 1, 8) }' "$1"; }

echo "== verification"
check "every event terminal" "$done" "$total"
check "$((total - 1)) SUCCESS, SPACE_ADD-$poisoned COMPENSATED, none FAILED" \
  "$(sql "SELECT CONCAT(SUM(status = 'SUCCESS'), '/', SUM(status = 'COMPENSATED' AND code = 'SPACE_ADD-$poisoned'),
          '/', SUM(status = 'FAILED')) FROM distribute_event WHERE batch_code = '$batch'")" "$((total - 1))/1/0"
check "SPACE_ADD-$poisoned failed permanently at 'permissions' (env_b's CHECK principal_at_most_64)" \
  "$(sql "SELECT CONCAT(JSON_UNQUOTE(JSON_EXTRACT(result, '$.failed_step')), '/',
          JSON_UNQUOTE(JSON_EXTRACT(result, '$.kind')), '/', last_error LIKE '%principal_at_most_64%')
          FROM distribute_event WHERE code = 'SPACE_ADD-$poisoned'")" "permissions/permanent/1"
check "every saga in order: all steps SUCCESS, or a prefix compensated in reverse" \
  "$(sql "SELECT
   (SELECT COUNT(*) FROM distribute_event e JOIN distribute_event_step s ON s.job_code = e.code
     WHERE e.status = 'SUCCESS' AND s.status <> 'SUCCESS')
  +(SELECT COUNT(*) FROM distribute_event e JOIN distribute_event_step s ON s.job_code = e.code
     WHERE e.status = 'COMPENSATED' AND s.status IN ('SUCCESS', 'EXECUTING', 'COMPENSATING'))
  +(SELECT COUNT(*) FROM distribute_event_step c JOIN distribute_event_step p
       ON p.job_code = c.job_code AND p.sort < c.sort
     WHERE c.status = 'COMPENSATED' AND p.status IN ('PENDING', 'FAILED', 'EXECUTING'))
  +(SELECT COUNT(*) FROM distribute_event_step a JOIN distribute_event_step b
       ON b.job_code = a.job_code AND a.sort < b.sort
     WHERE a.status = 'COMPENSATED' AND b.status = 'COMPENSATED' AND a.compensated_at < b.compensated_at)")" 0
check "every sync crossed the gap: each SUCCESS step of the run ran relayed (its target half in zone B)" \
  "$(sql "SELECT CONCAT(SUM(JSON_EXTRACT(s.output, '$.relayed') = true), '/', COUNT(*),
            '/', SUM(s.node_address IN ('$(node_addr node1)', '$(node_addr node3)')))
          FROM distribute_event_step s JOIN distribute_event e ON e.code = s.job_code
          WHERE e.batch_code = '$batch' AND s.status = 'SUCCESS'")" \
  "$(sql "SELECT CONCAT(COUNT(*), '/', COUNT(*), '/', COUNT(*)) FROM distribute_event_step s
          JOIN distribute_event e ON e.code = s.job_code WHERE e.batch_code = '$batch' AND s.status = 'SUCCESS'")"
check "no source half failed, and the relay left no chunk behind" \
  "$(sql "SELECT CONCAT((SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.relay_source' AND status IN ('FAILED', 'COMPENSATED')),
          '/', (SELECT COUNT(*) FROM dsync_relay_chunk))")" "0/0"
check "env_b equals env_a for every synced space (4 tables each, checksums)" \
  "$synced_equal/$((spaces - 1))" "$((spaces - 1))/$((spaces - 1))"
check "space $stale: the stale copy in env_b was overwritten" \
  "$(equal_spaces "$work/a.sums" "$work/b_before.sums" | grep -cx "$stale")/$(equal_spaces "$work/a.sums" "$work/b_after.sums" | grep -cx "$stale")" "0/1"
check "space $poisoned: env_b exactly as before the run (compensated), and unlike env_a" \
  "$(equal_spaces "$work/b_before.sums" "$work/b_after.sums" | grep -cx "$poisoned")/$(equal_spaces "$work/a.sums" "$work/b_after.sums" | grep -cx "$poisoned")" "1/0"
echo "        before: $(sums_of "$work/b_before.sums" "$poisoned")"
echo "        after:  $(sums_of "$work/b_after.sums" "$poisoned")"
echo "        env_a:  $(sums_of "$work/a.sums" "$poisoned")"
if ((killed == 1)); then
  codes=$(printf '%s\n' "${held[@]}" | cut -f1 | sed "s/.*/'&'/" | paste -sd, -)
  done_steps=$(printf '%s\n' "${held[@]}" | cut -f4 -s | tr , '\n' | sed "/^$/d; s/.*/'&'/" | paste -sd, -)
  n_done_steps=$(printf '%s\n' "${held[@]}" | cut -f4 -s | tr , '\n' | sed '/^$/d' | wc -l)
  check "the killed node held events (${#held[@]}), and every one finished on another node" \
    "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code IN ($codes)
          AND status IN ('SUCCESS','COMPENSATED') AND node_address <> '$victim_addr'")" "$( [[ $codes == "'-'" ]] && echo "at least 1" || echo "${#held[@]}")"
  check "the steps it had finished ($n_done_steps) were not run again (their rows still name it)" \
    "$( ((n_done_steps == 0)) && echo 0 || sql "SELECT COUNT(*) FROM distribute_event_step WHERE code IN ($done_steps)
          AND status = 'SUCCESS' AND node_address = '$victim_addr'")" "$n_done_steps"
  for h in "${held[@]}"; do
    IFS=$'\t' read -r code status step finished <<<"$h"
    [[ $code == - ]] && continue
    what=$([[ $status == ASSIGNED ]] && echo "assigned, not started" || echo "$status, inside step '$step'")
    IFS=$'\t' read -r status node attempt < <(sql "SELECT status, node_address, attempt FROM distribute_event WHERE code = '$code'")
    echo "        $code (was $what): now $status on $node at attempt $attempt"
  done
else
  check "a node was killed while holding events" "$killed" 1
fi
check "the web console answers at $console with this run's counts" \
  "$(curl -fsS "$console" | grep -c '/assets/app.js')/$(curl -fsS "${console}v1/overview?topics=true" |
     jq -r '.counts.SPACE_ADD | [.SUCCESS, .COMPENSATED, ([.[]] | add)] | map(tostring) | join("/")')" \
  "1/$((total - 1))/1/$total"
check "node3, joined late, did work" \
  "$(sql "SELECT COUNT(*) > 0 FROM distribute_event WHERE node_address = '$(node_addr node3)' AND status = 'SUCCESS'")" 1
echo "== registry (the killed node is marked offline):"
dsync nodes --all

# dsync verify from zone B (its config names env_b only): across the gap, env_a's side
# is computed by a zone-A node; only the keys of differing rows cross.
verify_b() { "$bin" verify --config "$work/zone_b.json" "$@"; }
echo "== dsync verify --config zone_b.json: env_b against env_a for every synced space (each table, all spaces"
echo "   but $poisoned; exit 0 = equal), across the gap: env_a's checksums computed by a zone-A node"
verify_rc=0
for t in kb_space:id kb_doc:space_id kb_tag:space_id kb_permission:space_id; do
  verify_b --source env_a --target env_b --table "${t%%:*}" --where "${t#*:} <> :poisoned" \
    --params "{\"poisoned\": $poisoned}" | sed 's/^/   /' || verify_rc=$?
done
check "dsync verify: env_b equals env_a for every synced space (exit 0)" "$verify_rc" 0
echo "== dsync verify --config zone_b.json --topic SPACE_ADD --payload '{\"space_id\": $poisoned}': the poisoned space (compensated) differs"
set +e
verify_b --topic SPACE_ADD --payload "{\"space_id\": $poisoned}" --max-keys 3 | sed 's/^/   /'
poisoned_rc=${PIPESTATUS[0]}
set -e
check "dsync verify shows the poisoned space's difference (exit 3)" "$poisoned_rc" 3

cat <<SQL
== inspect the history yourself: DSYNC_DEMO_KEEP=1 bash scripts/demo.sh keeps the servers, then
   bash scripts/mariadb.sh root <dir of zone A> dsync
   SELECT * FROM v_event_progress WHERE code = 'SPACE_ADD-$poisoned';
   SELECT * FROM v_step_history WHERE event_code = 'SPACE_ADD-$poisoned' ORDER BY seq;
   SELECT * FROM v_events_needing_attention;
   SELECT * FROM v_node_load;
   SELECT status, COUNT(*) FROM distribute_event WHERE batch_code = '$batch' GROUP BY status;
   SELECT * FROM dsync_relay WHERE event_code = 'SPACE_ADD-$poisoned';
   -- and on zone B's server (bash scripts/mariadb.sh root <dir of zone B> env_b), the undo records:
   SELECT step_code, chunk_no, rows_written FROM dsync_sync_chunk WHERE step_code LIKE 'SPACE_ADD-$poisoned#%';
SQL
echo "== events ran in ${run_s} s; the whole demo took $SECONDS s (build $build_s s)"
((ok == 1)) || { echo "demo: verification FAILED" >&2; exit 1; }
echo "demo: verification passed"
if [[ ${DSYNC_DEMO_KEEP:-0} == 1 ]]; then
  echo "== kept running until Ctrl-C: the web console at $console"
  echo "   and the databases: bash scripts/mariadb.sh root $dir dsync; bash scripts/mariadb.sh root $dir_b env_b"
  trap 'echo; echo "== stopping"; exit 0' INT TERM
  while kill -0 "${pid_of[api]}" 2>/dev/null; do sleep 1; done
  echo "demo: the console stopped" >&2
fi
