#!/usr/bin/env bash
# The README's first command. Until the full environment-sync demo lands (issue 5),
# it shows the foundation working end to end on a fresh machine:
#   installs what is missing, builds, starts a throwaway MariaDB, migrates the schema,
#   starts two consumer nodes as separate processes and a third a moment later (no
#   config change), lists them, kill -9s one, and shows the sweeper marking it
#   offline by the database clock. Cleans up everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
build=${DSYNC_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
bin=$PWD/$build/dsync

dir=$(bash scripts/mariadb.sh start)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  bash scripts/mariadb.sh stop "$dir"
}
trap cleanup EXIT
export DSYNC_DB_URL
DSYNC_DB_URL=$(bash scripts/mariadb.sh url "$dir")
export DSYNC_REGISTRY_HEARTBEAT_INTERVAL_MS=500 DSYNC_REGISTRY_OFFLINE_TIMEOUT_MS=2000
logs=$(mktemp -d "${TMPDIR:-/tmp}/dsync-demo.XXXXXX")

echo "== throwaway MariaDB at $(echo "$DSYNC_DB_URL" | sed -E 's#://([^:]+):[^@]*@#://\1:***@#')"
"$bin" migrate
echo "== starting two nodes"
"$bin" node --node-address 127.0.0.1:7001 --capacity 4 --topics SPACE_ADD,DOC_UPDATE >"$logs/n1.log" 2>&1 & pids+=($!)
"$bin" node --node-address 127.0.0.1:7002 --capacity 8 >"$logs/n2.log" 2>&1 & pids+=($!)
sleep 1.5
"$bin" nodes
echo "== a third node joins, with no config change anywhere"
"$bin" node --node-address 127.0.0.1:7003 --capacity 2 --topics SPACE_ADD >"$logs/n3.log" 2>&1 & pids+=($!)
sleep 1
"$bin" nodes
echo "== kill -9 node 127.0.0.1:7001 (pid ${pids[0]}); waiting past the 2 s offline timeout"
kill -9 "${pids[0]}"
sleep 2.5
"$bin" sweep
"$bin" nodes --all
echo "== SIGTERM the others: they drain and go offline"
for pid in "${pids[@]:1}"; do kill -TERM "$pid"; done
for pid in "${pids[@]:1}"; do wait "$pid"; done
"$bin" nodes --all
echo "== inspect with SQL:"
echo "   SELECT node_address, status, last_heartbeat_time, metadata FROM distribute_node_registry;"
rm -rf "$logs"
