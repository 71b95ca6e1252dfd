#!/usr/bin/env bash
# Issue 38's figures for the `http` step type (bench/RESULTS.md, section 9):
#   1. http steps per second: EVENTS events of one http step each, against a local
#      receiver that answers at once (Node.js, stdlib), one dispatcher and one node of
#      capacity CAPACITY; from the first produce to the last SUCCESS.
#   2. node memory with 1,000 calls in flight: a node of capacity 1000 whose receiver
#      holds every answer; its VmRSS (/proc) once the receiver holds 1,000 open calls,
#      next to the same node idle.
# Runs on its own throwaway MariaDB (scripts/mariadb.sh) and prints RESULT lines.
#   bash bench/http_step_bench.sh            # EVENTS=5000 CAPACITY=64 INFLIGHT=1000
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-5000}
CAPACITY=${CAPACITY:-64}
INFLIGHT=${INFLIGHT:-1000}
BIN=${DSYNC_BIN:-build/dsync}
[[ -x $BIN ]] || { echo "build dsync first (bash scripts/build.sh dsync)" >&2; exit 2; }
NODE=$(command -v node || command -v nodejs) || { echo "node is not installed" >&2; exit 2; }
source scripts/ports.sh
WORK=$(mktemp -d /tmp/dsync-http-bench.XXXXXX)
dir=$(bash scripts/mariadb.sh start)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  bash scripts/mariadb.sh stop "$dir" >/dev/null 2>&1 || true
  [[ -n ${KEEP_LOG:-} ]] && cp "$WORK/procs.log" "$KEEP_LOG"
  rm -rf "$WORK"
}
trap cleanup EXIT
URL=$(bash scripts/mariadb.sh url "$dir")
read -r RX_PORT N1_PORT N2_PORT <<< "$(free_ports 3 | tr '\n' ' ')"
_u=${URL#mysql://}; DB_USER=${_u%%:*}; _u=${_u#*:}; DB_PASS=${_u%%@*}; _u=${_u#*@}; DB_HOST=${_u%%:*}; _u=${_u#*:}; DB_PORT=${_u%%/*}
sql() { MYSQL_PWD=$DB_PASS mariadb -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" dsync -e "$1"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# The receiver: answers at once, or holds the answer for HOLD_MS; GET /open = calls held now.
cat > "$WORK/rx.js" <<'JS'
const http = require('http');
let open = 0;
const hold = Number(process.env.HOLD_MS || 0);
http.createServer((req, res) => {
  if (req.method === 'GET') { res.end(String(open)); return; }
  req.resume();
  req.on('end', () => {
    const answer = () => { open--; res.writeHead(200, {'Content-Type': 'application/json'}); res.end('{"ok":true}'); };
    open++;
    if (hold > 0) setTimeout(answer, hold); else answer();
  });
}).listen(Number(process.argv[2]), '127.0.0.1');
JS
config() {  # config CAPACITY TIMEOUT_MS
  jq -n --arg db "$URL" --arg url "http://127.0.0.1:$RX_PORT/hook" --argjson cap "$1" --argjson t "$2" '{
    database: $db, service: "httpbench",
    registry: {heartbeat_interval_ms: 500, offline_timeout_ms: 3000},
    dispatcher: {poll_interval_ms: 20, idle_interval_ms: 100},
    consumer: {poll_interval_ms: 20, capacity: $cap, drain_timeout_ms: 2000},
    topics: {HOOK: {ordered: false, max_retry: 3, max_processing_time_ms: 120000,
                    steps: [{name: "hook", type: "http", url: $url, timeout_ms: $t}]}}}' > "$WORK/dsync.json"
}
start() { "$@" >>"$WORK/procs.log" 2>&1 & PIDS+=($!); }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
threads() { awk '/Threads/ {print $2}' "/proc/$1/status"; }

config "$CAPACITY" 10000
"$BIN" migrate --config "$WORK/dsync.json" >/dev/null
HOLD_MS=0 start "$NODE" "$WORK/rx.js" "$RX_PORT"; RX=${PIDS[-1]}
start "$BIN" dispatcher --config "$WORK/dsync.json"
start "$BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$N1_PORT" --log-level "${NODE_LOG_LEVEL:-info}"; N1=${PIDS[-1]}
until [[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 1 ]]; do sleep 0.1; done
sleep 0.5
t0=$(now_ms)
sql "SET SESSION max_recursive_iterations = 1000000;
     INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
     WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < $EVENTS)
     SELECT 't1', CONCAT('h-', n), CONCAT('d-', n), 'HOOK', '{}' FROM s"
until [[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS'") == "$EVENTS" ]]; do
  sleep 0.05
  (( $(now_ms) - t0 < 600000 )) || { echo "not done after 10 min" >&2; exit 1; }
done
ms=$(( $(now_ms) - t0 ))
failed=$(sql "SELECT COUNT(*) FROM distribute_event_step WHERE retry_count > 0")
sql "SELECT CONCAT('step_ms avg=', ROUND(AVG(TIMESTAMPDIFF(MICROSECOND, started_at, executed_at))/1000, 1), ' max=', MAX(TIMESTAMPDIFF(MICROSECOND, started_at, executed_at))/1000) FROM distribute_event_step" >&2
echo "RESULT http_steps events=$EVENTS capacity=$CAPACITY ms=$ms steps_per_s=$(( EVENTS * 1000 / ms )) retried_steps=$failed node_rss_kb=$(rss_kb "$N1")"
kill -TERM "$N1"; wait "$N1" || true
kill -9 "$RX"; wait "$RX" 2>/dev/null || true

# 2. RSS with INFLIGHT calls in flight (the receiver holds every answer 60 s).
config "$INFLIGHT" 90000
HOLD_MS=60000 start "$NODE" "$WORK/rx.js" "$RX_PORT"; RX=${PIDS[-1]}
until curl -sf "http://127.0.0.1:$RX_PORT/" >/dev/null; do sleep 0.1; done
start "$BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$N2_PORT"; N2=${PIDS[-1]}
until [[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '127.0.0.1:$N2_PORT'") == 1 ]]; do sleep 0.1; done
sleep 1
idle_rss=$(rss_kb "$N2")
t0=$(now_ms)
sql "SET SESSION max_recursive_iterations = 1000000;
     INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
     WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < $INFLIGHT)
     SELECT 't1', CONCAT('f-', n), CONCAT('d-', n), 'HOOK', '{}' FROM s"
until [[ $(curl -sf "http://127.0.0.1:$RX_PORT/") -ge $INFLIGHT ]]; do
  sleep 0.1
  (( $(now_ms) - t0 < 55000 )) || { echo "only $(curl -sf "http://127.0.0.1:$RX_PORT/") calls in flight after 55 s" >&2; exit 1; }
done
echo "RESULT http_inflight calls=$(curl -sf "http://127.0.0.1:$RX_PORT/") ramp_ms=$(( $(now_ms) - t0 )) node_rss_kb=$(rss_kb "$N2") idle_rss_kb=$idle_rss node_threads=$(threads "$N2")"
