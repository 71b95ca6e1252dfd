#!/usr/bin/env bash
# The README's first command: dsync end to end on a throwaway MariaDB.
#
# Installs what is missing, builds, starts MariaDB in a temp folder, then one
# dispatcher and two consumer nodes as separate processes; produces 600 three-step
# DEMO events with plain SQL (a few fail transiently and recover, one is poisoned so
# that its last step fails permanently and the saga compensates); a third node joins
# a few seconds later with no config change; one node is kill -9ed midway. A live
# progress line runs until every event is terminal, then a summary verifies with SQL
# that nothing was lost or applied twice and that every saga ran in order.
# Exits non-zero if the verification fails; cleans up everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
build=${DSYNC_BUILD_DIR:-build}
echo "== building (first time: a few minutes)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target dsync >/dev/null
bin=$PWD/$build/dsync

dir=$(bash scripts/mariadb.sh start)
work=$(mktemp -d "${TMPDIR:-/tmp}/dsync-demo.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  bash scripts/mariadb.sh stop "$dir"
  rm -rf "$work"
}
trap cleanup EXIT
url=$(bash scripts/mariadb.sh url "$dir")
sql() { bash scripts/mariadb.sh root "$dir" -N -B dsync -e "$1"; }

cat > "$work/dsync.json" <<JSON
{
  "database": "$url",
  "service": "demo",
  "registry":   { "heartbeat_interval_ms": 500, "offline_timeout_ms": 3000, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": 50, "idle_interval_ms": 250, "lease_ttl_ms": 3000 },
  "consumer":   { "poll_interval_ms": 50, "capacity": 4 },
  "topics": {
    "DEMO": { "max_retry": 3, "backoff_base_ms": 200, "backoff_max_ms": 1000, "ordered": false,
              "steps": [ { "name": "extract", "type": "demo" }, { "name": "load", "type": "demo" },
                         { "name": "verify", "type": "demo" } ] }
  }
}
JSON
dsync() { "$bin" "$@" --config "$work/dsync.json"; }
start() {  # start NAME args...
  local name=$1; shift
  "$bin" "$@" --config "$work/dsync.json" >"$work/$name.log" 2>&1 &
  pids+=($!)
  disown $!  # our own bookkeeping; no job notices when one is killed
}

echo "== throwaway MariaDB: $(echo "$url" | sed -E 's#://([^:]+):[^@]*@#://\1:***@#')"
dsync migrate
start dispatcher dispatcher
start node1 node --node-address 127.0.0.1:7001
start node2 node --node-address 127.0.0.1:7002
sleep 1
echo "== two nodes registered themselves:"
dsync nodes

total=600
echo "== producing $total three-step events with plain SQL (1 poisoned, 20 with transient failures)"
sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
     SELECT 'demo', CONCAT('ev-', seq), CONCAT('doc-', seq), 'DEMO',
            CASE WHEN seq = 300 THEN '{\"demo\": {\"sleep_ms\": 40, \"fail\": {\"verify\": \"permanent\"}}}'
                 WHEN seq % 30 = 0 THEN '{\"demo\": {\"sleep_ms\": 40, \"fail\": {\"load\": 1}}}'
                 ELSE '{\"demo\": {\"sleep_ms\": 40}}' END
     FROM seq_1_to_$total"

progress() {
  sql "SELECT CONCAT(SUM(status IN ('SUCCESS','COMPENSATED','FAILED')), '/', COUNT(*), ' done  | ',
         'pending ', SUM(status = 'PENDING'), '  assigned ', SUM(status = 'ASSIGNED'),
         '  running ', SUM(status IN ('RUNNING','COMPENSATING')), '  success ', SUM(status = 'SUCCESS'),
         '  compensated ', SUM(status = 'COMPENSATED'), '  failed ', SUM(status = 'FAILED'))
       FROM distribute_event"
}
terminal() { sql "SELECT COUNT(*) FROM distribute_event WHERE status IN ('SUCCESS','COMPENSATED','FAILED')"; }

joined=0 killed=0 start_s=$SECONDS
while (( $(terminal) < total )); do
  printf '\r  %s   ' "$(progress)"
  elapsed=$((SECONDS - start_s))
  if ((joined == 0 && elapsed >= 2)); then
    start node3 node --node-address 127.0.0.1:7003
    joined=1
    printf '\n== node 127.0.0.1:7003 joins (no config change anywhere)\n'
  fi
  if ((killed == 0 && elapsed >= 4)); then
    kill -9 "${pids[1]}"
    killed=1
    printf '\n== kill -9 node 127.0.0.1:7001 (pid %s) with events in flight\n' "${pids[1]}"
  fi
  if ((elapsed > 180)); then echo; echo "demo: events did not finish in 180 s" >&2; exit 1; fi
  sleep 0.5
done
printf '\r  %s   \n' "$(progress)"

echo "== events by status"
sql "SELECT status, COUNT(*) FROM distribute_event GROUP BY status" | column -t
echo "== work per node (who finished each event)"
sql "SELECT node_address, COUNT(*) FROM distribute_event GROUP BY node_address" | column -t
echo "== the poisoned event: its steps, compensated in reverse order"
sql "SELECT step_name, status, executed_at, compensated_at FROM distribute_event_step
     WHERE job_code = 'ev-300' ORDER BY sort" | column -t

ok=1
check() {  # check WHAT ACTUAL EXPECTED
  if [[ $2 == "$3" ]]; then echo "  ok   $1"; else echo "  FAIL $1: expected $3, got $2"; ok=0; fi
}
echo "== verification"
check "every event terminal" "$(terminal)" "$total"
check "599 SUCCESS, the poisoned one COMPENSATED" \
  "$(sql "SELECT CONCAT(SUM(status = 'SUCCESS'), '/', SUM(status = 'COMPENSATED' AND code = 'ev-300'))
          FROM distribute_event")" "599/1"
check "each SUCCESS step's effect applied exactly once (demo_ledger)" \
  "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE applications = 1")/$(sql "SELECT COUNT(*) FROM demo_ledger")" "1797/1797"
check "the compensated event left no effect behind" \
  "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'ev-300'")" 0
check "the killed node's events finished elsewhere" \
  "$(sql "SELECT COUNT(*) FROM distribute_event WHERE node_address = '127.0.0.1:7001' AND status NOT IN ('SUCCESS','COMPENSATED','FAILED')")" 0
dsync nodes --all

cat <<'SQL'
== inspect the history yourself (mariadb client on the demo database):
   SELECT * FROM v_event_progress ORDER BY id DESC LIMIT 10;
   SELECT * FROM v_step_history WHERE event_code = 'ev-300' ORDER BY seq;
   SELECT * FROM v_events_needing_attention;
   SELECT * FROM v_node_load;
SQL
((ok == 1)) || { echo "demo: verification FAILED" >&2; exit 1; }
echo "demo: verification passed"
