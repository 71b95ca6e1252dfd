#!/usr/bin/env bash
# The benchmark command (benchmarks are not tests: nothing here is run by ctest).
# Installs what is missing, builds the bench programs and runs the selected sections one
# after another, each on its own throwaway MariaDB (scripts/mariadb.sh: same settings for
# all, innodb_flush_log_at_trx_commit=1), then prints their figures with the setup they
# were measured on and the ratios of issue 6. Every process and server it started is
# stopped, by PID, even on failure.
#
#   bash scripts/bench.sh                      # every section (about 13 minutes + build)
#   bash scripts/bench.sh e2e pgboss sysbench  # only the named sections, in that order
#   DSYNC_BENCH_RUNS=1 DSYNC_BENCH_EVENTS=2000 bash scripts/bench.sh e2e   # a quick look
#   DSYNC_BENCH_DISPATCH_ARGS="--runs 1 --terminal 200000" bash scripts/bench.sh dispatch
#
# Sections (each a function section_<name> below, listed in `sections`); each prints its
# figures as `RESULT <section> key=value ...` lines, repeated in the summary. Figures are
# medians of DSYNC_BENCH_RUNS runs (default 3); the runs are listed too.
#   dispatch  dispatcher assignments/s and cycle latency, 100k pending over 8 nodes, with
#             0 and 1M terminal rows, plus the EXPLAIN of every dispatch and sweeper query
#             (bench/dispatch_bench.cc)
#   produce   producer rows/s with plain SQL: single-row INSERTs on 1 and 4 connections,
#             multi-row INSERTs of 100 and 1,000 rows; the API batch (`dsync serve`,
#             POST /v1/batches of 100 and 1,000 events); and the server's round-trip and
#             commit costs (dsync_load_bench probe)
#   e2e       1 dispatcher + 4 nodes (separate `dsync` processes), 20,000 no-op `demo`
#             events of 1 and of 3 steps produced by one multi-row INSERT: events/s from
#             the first create_time to the last finished_time; row writes, commits and
#             statements per event from the server's status counters
#   profile   where a 1-step event's database time goes: one e2e run of
#             DSYNC_BENCH_PROFILE_EVENTS (2000) events with the slow log at
#             long_query_time=0 (every statement, with its server time); statements per
#             event by kind, server µs per statement and per event (the logging itself
#             slows the run: only the counts and the split matter here); before that,
#             when `perf` works, CPU samples of the machine during a plain 1-step run
#             of 5x as many events, by command, library and symbol
#   latency   pending->running (started_time - create_time) p50/p99 with events produced
#             at a steady half of the 1-step e2e rate for DSYNC_BENCH_LATENCY_S (20) s
#   capacity  the capacity sweep of issue 19: for node capacities DSYNC_BENCH_CAPACITIES
#             ("8 16 64 256"; 1 dispatcher + 4 nodes as in e2e), with wake-ups on and off:
#             1-step e2e events/s (DSYNC_BENCH_EVENTS, median of DSYNC_BENCH_RUNS), then
#             pending->running p50/p99 for DSYNC_BENCH_LATENCY_S at half the wake-ups-on
#             rate of that capacity (one run); and the database's queries/s of an idle
#             cluster (Questions, Com_select over DSYNC_BENCH_IDLE_S, 10 s) both ways.
#             Run it with pgboss for the ratios: `bash scripts/bench.sh capacity pgboss`
#   failover  a node holding 50 RUNNING events is kill -9ed; seconds until all 50 are
#             RUNNING on the two other nodes (database clock), with a 3 s offline timeout
#   rss       peak RSS (VmHWM) of a node with capacity 1,000 holding 1,000 events in flight
#   ceiling   the database's own limit for an event's row writes, no dsync code at all
#             (dsync_load_bench ceiling): 1-step and 3-step events through exactly the
#             row writes of a `demo` event, each stage one multi-row statement for a
#             batch of DSYNC_BENCH_CEILING_BATCH (100) events, DSYNC_BENCH_CEILING_THREADS
#             (4) threads, DSYNC_BENCH_EVENTS events; each stage autocommitted
#             (tx=per_stage) and the last four in one transaction (tx=per_batch, as
#             group completion would) (shape=minimal); and the engine's exact write set
#             through the events layer's own functions (--exact --tx-per-batch,
#             shape=exact: the dispatcher's assign, then per step one READ COMMITTED
#             commit group, the first claiming at commit; 4K+1 row writes, no reads
#             of polls or dispatch cycles); plus mariadbd's CPU per event. The
#             summary's ceiling ratios use shape=exact (dsync's own write set); the
#             minimal shape's best is printed as "minimal ceiling" for reference
#   sysbench  `sysbench oltp_update_non_index` at 1, 4 and 8 threads, DSYNC_BENCH_SYSBENCH_S
#             (20) s each: the database's single-row write limit on this machine
#   galera    the same e2e runs (1 and 3 steps, DSYNC_BENCH_GALERA_EVENTS (5000) events,
#             1 dispatcher + 4 nodes) on a single server and on a 3-member Galera cluster
#             (scripts/galera.sh) in the same invocation: every process through member 1
#             (order=failover), and each process from a random member (order=random:
#             they certify against each other); then the failover time: 1 dispatcher +
#             2 nodes writing through member 2 while 1-step events are produced at
#             DSYNC_BENCH_GALERA_RATE (100) /s; member 2 is kill -9'd: seconds from the
#             kill to the next event finished (database clock), and to 100 more; then
#             how long member 2 takes to rejoin by IST
#   sync      issue 13: one table_sync step (one node, one event) on a ~100 MB table of
#             DSYNC_BENCH_SYNC_ROWS (100,000) rows of ~1 KB, and a narrow variant of
#             DSYNC_BENCH_SYNC_BIG_ROWS (1,000,000) rows, both schemas on one MariaDB:
#             full copy into an empty target vs `mariadb-dump | mariadb` and vs
#             INSERT ... SELECT across schemas; into a target holding an older copy of
#             every row; re-sync unchanged; re-sync with 1 % of rows changed; the
#             step's time (step row started_at -> executed_at, database clock), the
#             server's Bytes_sent during it, and the node's peak RSS (VmHWM, a fresh
#             node per case); pt-table-sync (percona-toolkit) as the peer for the
#             unchanged and 1 % cases of the 100k table (DSYNC_BENCH_SYNC_LANES: the
#             step's `lanes`, default its own); and (issue 14) `dsync verify`
#             of two equal copies of the 100k table vs CHECKSUM TABLE of both.
#             DSYNC_BENCH_SYNC_BIN_B (a second dsync binary, e.g. a build of main):
#             parity instead: each dsync case (full, older, unchanged, 1 %) of both
#             tables and the verify run with this build (a) and with that binary (b),
#             alternated ABBA (odd runs a first), each case's medians and b/a ratio
#             (above 1: this build is faster); no dump, INSERT ... SELECT or
#             pt-table-sync then
#   relay     issue 35: a table_sync step run direct (one node reaching both datasources)
#             and relayed (a node per side, each naming only its own datasource; the
#             halves meet in the framework database) on three servers (framework, env_a,
#             env_b), paired ABBA over the runs from the same target state: full copy,
#             re-sync unchanged, 1 % changed, of the sync section's ~1 KB-row table
#             (DSYNC_BENCH_RELAY_ROWS, 100,000) and narrow one (DSYNC_BENCH_RELAY_BIG_ROWS,
#             1,000,000); step time (database clock), the bytes the framework server
#             received during the step, the relay row's peak bytes in flight (window:
#             the default 64 MiB), each node's VmHWM (a fresh node per case)
#   purge     issue 16 retention: DSYNC_BENCH_PURGE_ROWS (1,000,000) finished events of
#             10 days ago, one step each, built by INSERT ... SELECT from a seq table;
#             then a 1-step burn-down of DSYNC_BENCH_PURGE_EVENTS (100,000) events (1
#             dispatcher + 4 nodes, as e2e) without retention, and again with the
#             leader's retention pass deleting those rows in batches (retention.batch_size
#             500, busy_pause_ms DSYNC_BENCH_PURGE_BUSY_PAUSE_MS (2000)) during the whole
#             burn-down: both events/s, their ratio (target >= 0.90), and the rows the
#             purge removed meanwhile (count and per second)
#   slowclients  issue 34: `dsync serve` alone, with no other client, then with
#             DSYNC_BENCH_SLOW_IDLE (200) idle connections and DSYNC_BENCH_SLOW_SLOWLORIS
#             (50) slowloris ones (a request head, one byte a second) held open:
#             GET /healthz latency p50/p99/max over DSYNC_BENCH_SLOW_REQUESTS (200)
#             sequential requests (a fresh connection each; one that gets no answer in
#             DSYNC_BENCH_SLOW_TIMEOUT_S (120) counts as failed) and single-event POST
#             /v1/events throughput (4 keep-alive clients, 5 s), median of
#             DSYNC_BENCH_RUNS; then the probe of the single defects (POST without
#             Content-Length, a 1 GiB Content-Length, a foreign Host).
#             bench/slow_clients.py is the client. DSYNC_BENCH_SLOW_BIN runs another
#             binary (an older build) for the before figures
#   capture   issue 36: binlog capture (dsync capture) of a writer's mixed INSERT/UPDATE/DELETE
#             transactions on two tables at 1,000 and 5,000 changed rows/s and as fast as
#             it goes, source, target and framework database each its own server: applied
#             rows/s, lag p50/p99 (source write -> target apply, per row, by triggers on
#             the target), node and reader VmHWM, framework-database row writes per
#             captured row; then a kill -9 of the reader under load (takeover and lag
#             recovery); see section_capture
#   pgboss    the peer: pg-boss (bench/pgboss, pinned) on a throwaway PostgreSQL with
#             fsync and synchronous_commit on, 20,000 no-op jobs, 4 workers, batch fetch +
#             batch complete, batch sizes DSYNC_BENCH_PGBOSS_BATCHES ("100 500")
#   paired    dsync against pg-boss in alternated runs, for ratios this VM's drift between
#             sections does not move: for node capacities DSYNC_BENCH_PAIRED_CAPACITIES
#             ("16 256"), DSYNC_BENCH_PAIRS (5) pairs of one 1-step e2e run (wake-ups on,
#             as in capacity) and one pg-boss run at its best batch size
#             (DSYNC_BENCH_PAIRED_BATCH, 500), in ABBA order (odd pairs dsync first); each
#             pair's ratio and their median. Same work on both sides (issue 37): dsync
#             `noop` vs pg-boss's no-op job, dsync `demo` vs pg-boss jobs inserting one
#             row (DSYNC_BENCH_PAIRED_WORKS, "noop demo", picks them and their order;
#             DSYNC_BENCH_PAIRS_NOOP, the noop work's pairs if not DSYNC_BENCH_PAIRS);
#             DSYNC_BENCH_PAIRED_BIN_B (an older dsync) adds that binary's demo
#             burn-down to each pair (before/after in one invocation: the ratio of the
#             rates, and of the burn-down alone after the INSERT; MariaDB's CPU and row
#             writes per event of each binary, medians); DSYNC_BENCH_PAIRED_DEFAULTS (1)
#             adds a demo run with the shipped poll intervals (see section_paired).
#             Medians of an even count are the mean of the two middle values
#   fairness  issue 37: tenant B's 100 events alone, then beside tenant A's backlog of
#             DSYNC_BENCH_FAIR_BACKLOG (100,000) due events, fairness on and off
#
# Knobs (environment): DSYNC_MARIADB_BUFFER_POOL (256M, the throwaway server's
# innodb_buffer_pool_size), DSYNC_BENCH_RUNS (3), DSYNC_BENCH_EVENTS (20000, e2e and pgboss),
# DSYNC_BENCH_NODE_CAPACITY (256, e2e/profile/latency; prefetch automatic), DSYNC_BENCH_DISPATCHER_POLL_MS (20),
# DSYNC_BENCH_DISPATCHER_IDLE_MS (20) and DSYNC_BENCH_CONSUMER_POLL_MS (20) (the dsync config's poll
# intervals: an idle cluster looks for work every 20 ms, as the pg-boss workers poll every 5 ms),
# DSYNC_BENCH_PROFILE_EVENTS (2000), DSYNC_BENCH_LATENCY_RATE (events/s; default
# half the e2e 1-step rate of this invocation, else measured), DSYNC_BENCH_LATENCY_S (20),
# DSYNC_BENCH_SYSBENCH_S (20), DSYNC_BENCH_PGBOSS_BATCHES ("100 500"),
# DSYNC_BENCH_CEILING_THREADS (4), DSYNC_BENCH_CEILING_BATCH (100), DSYNC_BENCH_CEILING_STEPS
# ("1 3"), DSYNC_BENCH_CEILING_VARIANTS ("per_stage per_batch exact"),
# DSYNC_BENCH_BUILD_DIR (build-bench), DSYNC_BENCH_BIN (the dsync binary run; default the
# build's), DSYNC_BENCH_SETTLE_S (90), DSYNC_BENCH_WAKEUPS (true),
# DSYNC_BENCH_BUSY_MS (2, the dispatcher's busy_interval_ms),
# DSYNC_BENCH_CAPACITIES ("8 16 64 256"), DSYNC_BENCH_IDLE_S (10), DSYNC_BENCH_PURGE_ROWS (1000000).
#
# Output: everything on stdout, and a copy in $build/bench-logs/<section>-<time>.log.
# Don't edit this file while it runs: bash reads it as it goes.
# Process logs of a section stay in its work dir when the section fails (path printed).
# The machine's load matters (2 cores here): a warning is printed when other work runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ports.sh

sections=(dispatch produce e2e profile latency capacity failover rss ceiling sysbench pgboss paired fairness galera sync relay purge slowclients capture)

die() { echo "bench.sh: $*" >&2; exit 2; }

selected=("$@")
((${#selected[@]} > 0)) || selected=("${sections[@]}")
for s in "${selected[@]}"; do
  [[ " ${sections[*]} " == *" $s "* ]] || die "unknown section '$s' (known: ${sections[*]})"
done
wants() { [[ " ${selected[*]} " == *" $1 "* ]]; }

grep -Eq '^[[:space:]]*add_subdirectory\(bench[[:space:])]' CMakeLists.txt ||
  die "CMakeLists.txt does not add_subdirectory(bench) yet: add that line, then run again"

runs=${DSYNC_BENCH_RUNS:-3}
events=${DSYNC_BENCH_EVENTS:-20000}
capacity=${DSYNC_BENCH_NODE_CAPACITY:-256}
dispatcher_poll_ms=${DSYNC_BENCH_DISPATCHER_POLL_MS:-20}
dispatcher_idle_ms=${DSYNC_BENCH_DISPATCHER_IDLE_MS:-20}
consumer_poll_ms=${DSYNC_BENCH_CONSUMER_POLL_MS:-20}
wakeups=${DSYNC_BENCH_WAKEUPS:-true}  # dispatcher.wakeups and consumer.wakeups (the capacity section sets both ways)

# ---- packages and build -----------------------------------------------------------
extra=()
wants sysbench && extra+=(sysbench)
{ wants pgboss || wants paired; } && extra+=(postgresql)
# (pt-table-sync is the sync section's peer, not run in its parity mode)
wants sync && [[ -z ${DSYNC_BENCH_SYNC_BIN_B:-} ]] && extra+=(percona-toolkit)
# pg-boss 10 needs Node >= 20. Debian's `nodejs` (+ `npm`) is installed only when there
# is no node at all: a NodeSource nodejs (which bundles npm) conflicts with Debian's npm.
if { wants pgboss || wants paired; } && ! command -v node >/dev/null; then extra+=(nodejs npm); fi
bash scripts/setup.sh "${extra[@]}"

build=${DSYNC_BENCH_BUILD_DIR:-build-bench}
[[ $build == /* ]] || build=$PWD/$build
targets=(dsync dsync_load_bench)
wants dispatch && targets+=(dsync_dispatch_bench)
echo "== building (${targets[*]} in $build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null
bin=${DSYNC_BENCH_BIN:-$build/dsync}  # another dsync binary for every section (e.g. `profile` of an older build)
[[ -x $bin ]] || die "DSYNC_BENCH_BIN=$bin is not an executable"
load=$build/bench/dsync_load_bench
logs=$build/bench-logs
mkdir -p "$logs"

# ---- cleanup of everything started here ---------------------------------------------
servers=()   # scripts/mariadb.sh dirs
galeras=()   # scripts/galera.sh dirs
pids=()      # dsync processes
work_dirs=()
pg_dir=""
cleanup() {
  local pid d
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  [[ -n $pg_dir ]] && pg_stop
  for d in "${servers[@]}"; do bash scripts/mariadb.sh stop "$d" 2>/dev/null || true; done
  for d in "${galeras[@]}"; do bash scripts/galera.sh stop "$d" 2>/dev/null || true; done
  for d in "${work_dirs[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

# ---- helpers ----------------------------------------------------------------------------
# median: of the numbers on stdin (spaces, commas or lines); for an even count the mean of
# the two middle values. lower_median: the lower middle value itself (always one of the
# inputs: the run that supplies a median's other figures is found by it).
sorted() { tr ',' ' ' | xargs -n1 | sort -g; }
median() {
  sorted | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else if (NR) print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
lower_median() { sorted | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
# field KEY LINE: the value of KEY=... in a `key=value ...` line
field() { sed -nE "s/.*(^| )$1=([^ ]*).*/\2/p" <<<"$2"; }
busy() { awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; }
now_s() { date +%s.%N; }

results=()
result() {  # result SECTION key=value...: print and keep a RESULT line
  local line="RESULT $*"
  echo "$line"
  results+=("$line")
}

# A fresh throwaway MariaDB for one section: sets $dir and $url.
start_server() {
  dir=$(bash scripts/mariadb.sh start)
  servers+=("$dir")
  url=$(bash scripts/mariadb.sh url "$dir")
}
stop_server() {
  bash scripts/mariadb.sh stop "$dir"
  local keep=() d
  for d in "${servers[@]}"; do [[ $d == "$dir" ]] || keep+=("$d"); done
  servers=("${keep[@]}")
}
root_sql() { bash scripts/mariadb.sh root "$dir" -N -B -e "$1"; }
# Sessions in UTC like dsync's own, so create_time defaults and NOW(6) compare with its times.
sql() { bash scripts/mariadb.sh root "$dir" -N -B "$schema" -e "SET time_zone = '+00:00'; $1"; }

# new_schema NAME: creates it, migrates it, sets $schema and $schema_url.
new_schema() {
  schema=$1
  root_sql "DROP DATABASE IF EXISTS \`$schema\`; CREATE DATABASE \`$schema\`"
  schema_url=${url%/*}/$schema
  "$bin" migrate --db "$schema_url" --service bench --log-level warn >/dev/null
}
drop_schema() { root_sql "DROP DATABASE IF EXISTS \`$schema\`"; }

# write_config FILE: topics E2E_1 (one demo step) and E2E_3 (three), unordered (each
# event has its own data_id anyway); short poll intervals as in scripts/demo.sh.
write_config() {
  cat > "$1" <<JSON
{
  "database": "$schema_url",
  "service": "bench",
  "log_level": "info",
  "registry":   { "heartbeat_interval_ms": 1000, "offline_timeout_ms": 3000, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": $dispatcher_poll_ms, "idle_interval_ms": $dispatcher_idle_ms, "lease_ttl_ms": 3000, "batch_size": 500, "busy_interval_ms": ${DSYNC_BENCH_BUSY_MS:-2}, "wakeups": $wakeups },
  "consumer":   { "poll_interval_ms": $consumer_poll_ms, "capacity": $capacity, "wakeups": $wakeups },
  "topics": {
    "E2E_1": { "ordered": false, "max_retry": 3, "backoff_base_ms": 200, "backoff_max_ms": 1000,
               "steps": [ { "name": "s1", "type": "demo" } ] },
    "E2E_3": { "ordered": false, "max_retry": 3, "backoff_base_ms": 200, "backoff_max_ms": 1000,
               "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" },
                          { "name": "s3", "type": "demo" } ] },
    "E2E_noop": { "ordered": false, "max_retry": 3, "backoff_base_ms": 200, "backoff_max_ms": 1000,
               "steps": [ { "name": "s1", "type": "noop" } ] }
  }
}
JSON
}

# start_proc NAME ARGS...: a dsync process in the background, its PID in $last_pid.
start_proc() {
  local name=$1
  shift
  "$bin" "$@" --config "$work/dsync.json" >"$work/$name.log" 2>&1 &
  last_pid=$!
  disown "$last_pid"
  pids+=("$last_pid")
}
# stop_procs: SIGTERM every dsync process of the section, kill -9 what is left after 10 s.
stop_procs() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive == 0)) && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  pids=()
}
kill_procs() {
  local pid
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  pids=()
}

# wait_sql QUERY EXPECTED TIMEOUT_S [POLL_S]: until QUERY returns EXPECTED.
wait_sql() {
  local deadline=$((SECONDS + $3)) got
  while true; do
    got=$(sql "$1" || true)
    [[ $got == "$2" ]] && return 0
    if ((SECONDS > deadline)); then
      echo "bench.sh: timed out after $3 s waiting for [$1] = $2 (last: $got); logs in $work" >&2
      work_dirs=("${work_dirs[@]/$work/}")  # keep the logs
      return 1
    fi
    sleep "${4:-0.2}"
  done
}
live_nodes() { echo "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1"; }

# new_work: a temp dir for one run's config and process logs.
new_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/dsync-bench.XXXXXX")
  work_dirs+=("$work")
}

# new_cluster NAME NODES: a new schema NAME, a work dir and config, and a dispatcher
# with NODES nodes running on them.
new_cluster() {
  new_schema "$1"
  new_work
  write_config "$work/dsync.json"
  start_cluster "$2"
}

# start_cluster NODES: dispatcher + NODES nodes at 127.0.0.1:7001.., waits until live.
start_cluster() {
  local n
  start_proc dispatcher dispatcher
  dispatcher_pid=$last_pid
  node_pids=()
  for n in $(seq 1 "$1"); do
    start_proc "node$n" node --node-address "127.0.0.1:$((7000 + n))"
    node_pids+=("$last_pid")
  done
  wait_sql "$(live_nodes)" "$1" 30
  wait_sql "SELECT COUNT(*) FROM distribute_lease_lock WHERE owner IS NOT NULL AND expires_at > NOW(3)" 1 30
}

# cpu_ms PID...: user + system CPU time of the processes so far, in ms.
cpu_ms() {
  local pid total=0 t
  for pid in "$@"; do
    t=$(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)
    total=$((total + t))
  done
  echo $((total * 1000 / $(getconf CLK_TCK)))
}

# Global status counters, for per-event statement and row-write counts.
# Row writes are Handler_write/update/delete (MariaDB 10.11 has no Innodb_rows_*; temp
# tables count apart, in Handler_tmp_*); Com_commit counts explicit COMMITs only (an
# autocommitted statement commits too, uncounted); Innodb_data_fsyncs, the fsyncs
# after group commit.
status_names="'Handler_write','Handler_update','Handler_delete','Com_commit','Com_rollback','Com_begin','Com_select','Com_insert','Com_update','Com_delete','Com_insert_select','Questions','Innodb_data_fsyncs'"
snapshot() {  # snapshot ARRAY_NAME
  local -n into=$1
  into=()
  local k v
  # shellcheck disable=SC2034,SC2004  # into is a nameref to an associative array
  while read -r k v; do into[$k]=$v; done < <(root_sql "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN (${status_names^^})")
}

# ---- setup ------------------------------------------------------------------------
# Let the load of the build settle first (on 2 cores a compile in the last minute
# drags the first runs down): wait while the 1-minute load exceeds half the cpus, for
# at most DSYNC_BENCH_SETTLE_S seconds (default 90).
for _ in $(seq 1 "${DSYNC_BENCH_SETTLE_S:-90}"); do busy || break; sleep 1; done
start_server
read -r server_version flush_commit buffer_pool_mb < <(
  root_sql "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size DIV 1048576")
stop_server
cpu_model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -z $(git status --porcelain 2>/dev/null) ]] || commit="$commit (working tree has changes)"
setup=(
  "date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)   commit $commit"
  "cpus:     $(nproc) (${cpu_model:-unknown})"
  "memory:   $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  "mariadb:  $server_version   innodb_flush_log_at_trx_commit=$flush_commit   innodb_buffer_pool_size=${buffer_pool_mb}M   (a fresh server per section)"
  "runs:     $runs per figure (medians)   e2e events $events   node capacity $capacity"
  "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
)
echo "== setup"
printf '%s\n' "${setup[@]}"
if busy; then
  echo "WARNING: load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cpus: other work is running;" \
    "figures will be low and noisy"
fi

# ---- sections -----------------------------------------------------------------------

section_dispatch() {
  local out line
  out=$(mktemp "${TMPDIR:-/tmp}/dsync-bench-dispatch.XXXXXX")
  work_dirs+=("$out")
  # shellcheck disable=SC2086  # word splitting of the extra arguments is intended
  "$build/bench/dsync_dispatch_bench" --db "$url" --source-dir "$PWD" ${DSYNC_BENCH_DISPATCH_ARGS:-} |
    tee "$out"
  while read -r line; do results+=("$line"); done < <(grep '^RESULT ' "$out")
}

# -- produce: rows/s of the producer's plain SQL and of the API (nothing consumes) --
section_produce() {
  local label count rows conns r line rates api_port
  # label count rows-per-statement connections (api*: POST /v1/batches of `rows` events)
  local cases=("single_1conn 5000 1 1" "single_4conn 20000 1 4" "multi100 100000 100 1"
    "multi1000 100000 1000 1" "api_batch100 20000 100 1" "api_batch1000 100000 1000 1")
  for c in "${cases[@]}"; do
    read -r label count rows conns <<<"$c"
    rates=()
    for r in $(seq 1 "$runs"); do
      new_schema "produce_${label}_$r"
      if [[ $label == api* ]]; then
        new_work
        write_config "$work/dsync.json"
        api_port=$(free_port)
        start_proc serve serve --listen "127.0.0.1:$api_port" --log-level warn
        for _ in $(seq 1 100); do
          (exec 3<>"/dev/tcp/127.0.0.1/$api_port") 2>/dev/null && break
          sleep 0.1
        done
        line=$("$load" produce-api --api "http://127.0.0.1:$api_port" --count "$count" \
          --rows-per-statement "$rows" --connections "$conns" --prefix "p$r" --topic E2E_1)
        stop_procs
      else
        line=$("$load" produce --db "$schema_url" --count "$count" --rows-per-statement "$rows" \
          --connections "$conns" --prefix "p$r")
      fi
      echo "  $label run $r: $line"
      [[ $(sql "SELECT COUNT(*) FROM distribute_event") == "$count" ]] || die "produce $label: row count mismatch"
      rates+=("$(field rate "$line")")
      drop_schema
    done
    result produce "case=$label rows=$count rows_per_statement=$rows connections=$conns" \
      "rows_per_s=$(echo "${rates[*]}" | median) runs=$(IFS=,; echo "${rates[*]}")"
  done
  new_schema produce_probe
  while read -r _ line; do
    result produce "probe $line"
  done < <("$load" probe --db "$schema_url" --count 2000)
  drop_schema
}

# e2e_run KIND RUN: one run of `events` no-op events of topic E2E_<KIND> through
# 1 dispatcher + 4 nodes; sets e2e_line to "rate=... seconds=... <per event counts>".
# (Not called in a $(...) subshell: the processes it starts must stay in `pids`.)
e2e_line=""
e2e_run() {
  local kind=$1 r=$2 t0 t1 line
  new_cluster "e2e_${kind}_$r" 4
  sleep 1  # first heartbeats and lease settle
  declare -A before after
  snapshot before
  local db_pid cpu_db cpu_disp cpu_nodes
  db_pid=$(cat "$dir/pid")
  cpu_db=$(cpu_ms "$db_pid")
  cpu_disp=$(cpu_ms "$dispatcher_pid")
  cpu_nodes=$(cpu_ms "${node_pids[@]}")
  IFS=$'\t' read -r t0 t1 < <(sql "SELECT NOW(6) INTO @t0;
    INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
      SELECT 'bench', CONCAT('e', $r, '-', seq), CONCAT('d-', seq), 'E2E_$kind', '{}' FROM seq_1_to_$events;
    SELECT @t0, NOW(6);")
  wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status IN ('SUCCESS','FAILED','COMPENSATED')" "$events" 900 0.5
  cpu_db=$(($(cpu_ms "$db_pid") - cpu_db))
  cpu_disp=$(($(cpu_ms "$dispatcher_pid") - cpu_disp))
  cpu_nodes=$(($(cpu_ms "${node_pids[@]}") - cpu_nodes))
  snapshot after
  local ok
  ok=$(sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS'")
  [[ $ok == "$events" ]] || die "e2e: only $ok of $events events SUCCESS (logs: $work)"
  line=$(sql "SELECT
      TIMESTAMPDIFF(MICROSECOND, MIN(create_time), MAX(finished_time)) / 1e6,
      TIMESTAMPDIFF(MICROSECOND, '$t1', MAX(finished_time)) / 1e6,
      TIMESTAMPDIFF(MICROSECOND, '$t0', '$t1') / 1e6
    FROM distribute_event")
  local secs proc ins
  read -r secs proc ins <<<"$line"
  local k d writes
  declare -A delta
  for k in "${!after[@]}"; do delta[$k]=$((after[$k] - ${before[$k]:-0})); done
  writes=$((delta[HANDLER_WRITE] + delta[HANDLER_UPDATE] + delta[HANDLER_DELETE]))
  per() { awk -v a="$1" -v n="$events" 'BEGIN { printf "%.2f", a / n }'; }
  e2e_line="rate=$(awk -v n="$events" -v s="$secs" 'BEGIN { printf "%.0f", n / s }') seconds=$secs \
process_seconds=$proc insert_seconds=$ins \
row_writes_per_s=$(awk -v w="$writes" -v s="$secs" 'BEGIN { printf "%.0f", w / s }') \
commits_per_s=$(awk -v w="${delta[COM_COMMIT]}" -v s="$secs" 'BEGIN { printf "%.0f", w / s }') \
row_writes_per_event=$(per "$writes") commits_per_event=$(per "${delta[COM_COMMIT]}") \
statements_per_event=$(per "${delta[QUESTIONS]}") selects_per_event=$(per "${delta[COM_SELECT]}") \
updates_per_event=$(per "${delta[COM_UPDATE]}") inserts_per_event=$(per "$((delta[COM_INSERT] + delta[COM_INSERT_SELECT]))") \
deletes_per_event=$(per "${delta[COM_DELETE]}") begins_per_event=$(per "${delta[COM_BEGIN]}") \
rollbacks_per_event=$(per "${delta[COM_ROLLBACK]}") fsyncs_per_event=$(per "${delta[INNODB_DATA_FSYNCS]}") \
cpu_us_per_event_mariadb=$(per "$((cpu_db * 1000))") cpu_us_per_event_dispatcher=$(per "$((cpu_disp * 1000))") \
cpu_us_per_event_nodes=$(per "$((cpu_nodes * 1000))") \
cpu_cores_busy=$(awk -v c="$((cpu_db + cpu_disp + cpu_nodes))" -v s="$secs" 'BEGIN { printf "%.2f", c / 1000 / s }')"
  # Where an event's time went (backlog: mostly queueing), in ms, mean over events.
  sql "SELECT CONCAT('    stages (mean ms): create_to_assigned=', ROUND(AVG(TIMESTAMPDIFF(MICROSECOND, create_time, assigned_time)) / 1000, 1),
                     ' assigned_to_started=', ROUND(AVG(TIMESTAMPDIFF(MICROSECOND, assigned_time, started_time)) / 1000, 1),
                     ' started_to_finished=', ROUND(AVG(TIMESTAMPDIFF(MICROSECOND, started_time, finished_time)) / 1000, 1))
       FROM distribute_event"
  stop_procs
  drop_schema
}

e2e_rate_1=""
section_e2e() {
  local kind r line all=()
  for kind in 1 3; do
    local rates=() lines=()
    for r in $(seq 1 "$runs"); do
      e2e_run "$kind" "$r"
      line=$e2e_line
      echo "  $kind-step run $r: $line"
      lines+=("$line")
      rates+=("$(field rate "$line")")
    done
    local med mid
    med=$(echo "${rates[*]}" | median)
    # The run whose rate is the median (the lower middle one of an even count) supplies
    # the other figures.
    mid=$(echo "${rates[*]}" | lower_median)
    for line in "${lines[@]}"; do [[ $(field rate "$line") == "$mid" ]] && break; done
    ((kind == 1)) && e2e_rate_1=$med
    result e2e "steps=$kind events=$events nodes=4 capacity=$capacity events_per_s=$med" \
      "runs=$(IFS=,; echo "${rates[*]}") $(cut -d' ' -f2- <<<"$line")"
  done
}

# -- profile: every statement of a 1-step run, from the slow log --
section_profile() {
  local n=${DSYNC_BENCH_PROFILE_EVENTS:-2000}
  if command -v perf >/dev/null && perf record -q -a -F 99 -o /dev/null -- true >/dev/null 2>&1; then
    # CPU samples of the whole machine during one plain 1-step run (no slow log).
    local pn=$((n * 5))
    new_schema profile_perf
    new_work
    write_config "$work/dsync.json"
    start_cluster 4
    sleep 1
    perf record -q -a -F 999 -o "$work/perf.data" >/dev/null 2>&1 &
    local perf_pid=$!
    sleep 0.5
    sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
         SELECT 'bench', CONCAT('pp-', seq), CONCAT('d-', seq), 'E2E_1', '{}' FROM seq_1_to_$pn"
    wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS'" "$pn" 600 0.2
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    stop_procs
    drop_schema
    # top N ARGS...: the first N sample lines of a perf report (no SIGPIPE under pipefail)
    top() {
      local n=$1
      shift
      perf report -i "$work/perf.data" --stdio "$@" 2>/dev/null | awk -v n="$n" '/^ +[0-9]/ && c++ < n { print "  " $0 }'
    }
    echo "  perf: CPU samples of the machine during a 1-step run of $pn events, by command"
    echo "  (the bench's own polling is the mariadb/bash share):"
    top 8 --sort comm
    echo "  perf: mariadbd by library (% of all samples; the Debian binary has no symbols):"
    top 8 --comms mariadbd --sort dso
    echo "  perf: dsync processes by library, then their top symbols (% of all samples):"
    top 8 --comms dsync --sort dso
    top 25 --comms dsync --sort sym
  else
    echo "  perf: not available here (install linux-perf to see CPU samples); statement profile only"
  fi
  new_schema profile
  new_work
  write_config "$work/dsync.json"
  # long_query_time applies to sessions opened after it is set: before the processes start.
  root_sql "SET GLOBAL log_output = 'TABLE', long_query_time = 0, log_slow_verbosity = '', slow_query_log = 1"
  start_cluster 4
  sleep 1
  root_sql "TRUNCATE mysql.slow_log"
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
       SELECT 'bench', CONCAT('pr-', seq), CONCAT('d-', seq), 'E2E_1', '{}' FROM seq_1_to_$n"
  wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS'" "$n" 600 0.2
  root_sql "SET GLOBAL slow_query_log = 0"
  stop_procs
  echo "  statements of one 1-step event's life (all processes; $n events; slow log, long_query_time=0):"
  echo "  per_event  server_us_each  rows_examined_each  statement (numbers and strings masked)"
  # The bench's own polling (SELECT COUNT(*) ... status) is left out by its text.
  root_sql "SELECT ROUND(COUNT(*) / $n, 2), ROUND(AVG(TIME_TO_SEC(query_time)) * 1e6), ROUND(AVG(rows_examined), 1),
                   LEFT(REGEXP_REPLACE(REGEXP_REPLACE(REGEXP_REPLACE(CONVERT(sql_text USING utf8mb4),
                        '[[:space:]]+', ' '), '\'[^\']*\'', '?'), '[0-9]+', 'N'), 150) AS stmt
            FROM mysql.slow_log
            WHERE db = '$schema' AND sql_text NOT LIKE '%SET time_zone%' AND sql_text NOT LIKE 'SET GLOBAL%'
            GROUP BY stmt ORDER BY COUNT(*) DESC, stmt" |
    awk -F'\t' '{ printf "  %8s  %14s  %18s  %s\n", $1, $2, $3, $4 }'
  local line
  line=$(root_sql "SELECT ROUND(COUNT(*) / $n, 2), ROUND(SUM(TIME_TO_SEC(query_time)) * 1e6 / $n)
                   FROM mysql.slow_log WHERE db = '$schema' AND sql_text NOT LIKE '%SET time_zone%'
                     AND sql_text NOT LIKE 'SET GLOBAL%'")
  local per us
  read -r per us <<<"$line"
  result profile "events=$n statements_per_event=$per server_us_per_event=$us"
  root_sql "TRUNCATE mysql.slow_log"
  drop_schema
}

# -- latency: pending -> running at half the 1-step rate --
section_latency() {
  local rate=${DSYNC_BENCH_LATENCY_RATE:-}
  if [[ -z $rate ]]; then
    if [[ -z $e2e_rate_1 ]]; then
      echo "  measuring the 1-step e2e rate first (one run; set DSYNC_BENCH_LATENCY_RATE to skip)"
      e2e_run 1 0
      e2e_rate_1=$(field rate "$e2e_line")
    fi
    rate=$((e2e_rate_1 / 2))
  fi
  local secs=${DSYNC_BENCH_LATENCY_S:-20} r p50s=() p99s=() stage_lines=()
  for r in $(seq 1 "$runs"); do
    latency_run "$rate" "$secs" "$r"
    p50s+=("$(field p50_ms "$latency_stats")")
    p99s+=("$(field p99_ms "$latency_stats")")
    stage_lines+=("$latency_stats")
  done
  local med50 med99 line
  med50=$(echo "${p50s[*]}" | median)
  med99=$(echo "${p99s[*]}" | median)
  local mid50
  mid50=$(echo "${p50s[*]}" | lower_median)
  for line in "${stage_lines[@]}"; do [[ $(field p50_ms "$line") == "$mid50" ]] && break; done
  result latency "rate=$rate/s seconds=$secs p50_ms=$med50 p99_ms=$med99" \
    "runs_p50_ms=$(IFS=,; echo "${p50s[*]}") runs_p99_ms=$(IFS=,; echo "${p99s[*]}")" \
    "median_run: $(cut -d' ' -f3- <<<"$line")"
}

# latency_run RATE SECS R: one cluster, events produced at RATE/s for SECS s; sets
# $latency_stats (p50_ms=... p99_ms=... of pending->running and its two stages).
# latency_run RATE SECONDS RUN [wake]: sets $latency_stats. `wake`: the producer wakes the
# dispatcher after each tick's INSERT, as `dsync produce` and the API do; without it the
# plain-SQL producer, whose events wait for the dispatcher's next cycle.
latency_run() {
  local rate=$1 secs=$2 r=$3 wake_flag=() count line
  [[ ${4:-} == wake ]] && wake_flag=(--wake-dispatcher bench)
  count=$((rate * secs))
  new_cluster "latency_$r" 4
  sleep 1
  line=$("$load" produce --db "$schema_url" --count "$count" --rate "$rate" --tick-ms 10 \
    --rows-per-statement 1000 "${wake_flag[@]}" --topic E2E_1 --prefix "l$r")
  wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'SUCCESS'" "$count" 300 0.2
  # Percentiles over the events created after the first 2 s (warm-up).
  sql "SELECT TIMESTAMPDIFF(MICROSECOND, create_time, started_time) / 1000,
              TIMESTAMPDIFF(MICROSECOND, create_time, assigned_time) / 1000,
              TIMESTAMPDIFF(MICROSECOND, assigned_time, started_time) / 1000
       FROM distribute_event
       WHERE create_time >= (SELECT MIN(create_time) FROM distribute_event) + INTERVAL 2 SECOND" > "$work/lat"
  # pcts COLUMN: "p50 p99 max n" of one column
  pcts() { cut -f"$1" "$work/lat" | sort -g | awk '{ v[NR] = $1 } END {
    i50 = int(0.50 * NR); i99 = int(0.99 * NR); if (i50 < 1) i50 = 1; if (i99 < 1) i99 = 1
    printf "%.1f %.1f %.1f %d", v[i50], v[i99], v[NR], NR }'; }
  local a b c
  read -r -a a <<<"$(pcts 1)"
  read -r -a b <<<"$(pcts 2)"
  read -r -a c <<<"$(pcts 3)"
  latency_stats="p50_ms=${a[0]} p99_ms=${a[1]} max_ms=${a[2]} to_assigned_p50_ms=${b[0]} to_assigned_p99_ms=${b[1]}"
  latency_stats+=" assigned_to_running_p50_ms=${c[0]} assigned_to_running_p99_ms=${c[1]} samples=${a[3]}"
  echo "  run $r: produced $(field rate "$line")/s (max lag $(field max_lag_rows "$line") rows): $latency_stats"
  stop_procs
  drop_schema
}

# -- capacity: issue 19's sweep, wake-ups on and off --
# idle_qps: an idle cluster (no events) for DSYNC_BENCH_IDLE_S; sets $idle_line.
idle_qps() {
  local secs=${DSYNC_BENCH_IDLE_S:-10}
  new_schema idle
  new_work
  write_config "$work/dsync.json"
  start_cluster 4
  sleep 3  # first heartbeats, lease, pauses grown to the idle interval
  declare -A before after
  snapshot before
  sleep "$secs"
  snapshot after
  idle_line="idle_questions_per_s=$(awk -v a="${after[QUESTIONS]}" -v b="${before[QUESTIONS]}" -v s="$secs" 'BEGIN { printf "%.1f", (a - b) / s }')"
  idle_line+=" idle_selects_per_s=$(awk -v a="${after[COM_SELECT]}" -v b="${before[COM_SELECT]}" -v s="$secs" 'BEGIN { printf "%.1f", (a - b) / s }')"
  stop_procs
  drop_schema
}
section_capacity() {
  local saved_capacity=$capacity saved_wakeups=$wakeups cap mode r line med half
  for mode in on off; do
    [[ $mode == on ]] && wakeups=true || wakeups=false
    idle_qps
    echo "  idle cluster, wake-ups $mode: $idle_line"
    result capacity "idle=1 wakeups=$mode nodes=4 seconds=${DSYNC_BENCH_IDLE_S:-10} $idle_line"
  done
  for cap in ${DSYNC_BENCH_CAPACITIES:-8 16 64 256}; do
    capacity=$cap
    half=""
    for mode in on off; do
      [[ $mode == on ]] && wakeups=true || wakeups=false
      local rates=() lines=()
      for r in $(seq 1 "$runs"); do
        e2e_run 1 "$r"
        echo "  capacity $cap wake-ups $mode run $r: $e2e_line"
        lines+=("$e2e_line")
        rates+=("$(field rate "$e2e_line")")
      done
      med=$(echo "${rates[*]}" | median)
      local mid
      mid=$(echo "${rates[*]}" | lower_median)
      for line in "${lines[@]}"; do [[ $(field rate "$line") == "$mid" ]] && break; done
      [[ -n $half ]] || half=$(awk -v m="$med" 'BEGIN { printf "%d", m / 2 }')  # both modes at half the wake-ups-on rate
      local woken=""
      if [[ $mode == on ]]; then  # first with a producer that wakes the dispatcher
        latency_run "$half" "${DSYNC_BENCH_LATENCY_S:-20}" 1 wake
        woken=$(sed -E 's/(^| )([a-z])/\1producer_woken_\2/g' <<<"$latency_stats")
      fi
      latency_run "$half" "${DSYNC_BENCH_LATENCY_S:-20}" 1
      result capacity "capacity=$cap wakeups=$mode steps=1 events=$events nodes=4 events_per_s=$med" \
        "runs=$(IFS=,; echo "${rates[*]}") latency_rate=$half $latency_stats $woken" \
        "cpu_cores_busy=$(field cpu_cores_busy "$line") statements_per_event=$(field statements_per_event "$line")"
    done
  done
  capacity=$saved_capacity
  wakeups=$saved_wakeups
}

# -- purge: burn-down speed with and without the leader's retention pass running --
# purge_burndown MODE RUN: one 1-step burn-down on the current schema; MODE on/off sets
# retention.enabled. Sets $purge_rate (events/s) and $purge_removed (finished rows of
# the seed removed between the first burn-down event created and the last finished).
purge_burndown() {
  local mode=$1 r=$2 enabled=false left0 left1 secs
  [[ $mode == on ]] && enabled=true
  new_work
  write_config "$work/dsync.json"
  # The retention keys, and a pass every second (each pass runs until no old row is left).
  sed -i "s|\"topics\": {|\"retention\": { \"enabled\": $enabled, \"finished_after_ms\": 86400000, \"interval_ms\": 1000, \"busy_pause_ms\": $purge_busy_pause_ms },\n  \"topics\": {|" "$work/dsync.json"
  start_cluster 4
  sleep 1
  if [[ $mode == on ]]; then
    # The purge is under way before the burn-down starts.
    wait_sql "SELECT COUNT(*) < $purge_rows FROM distribute_event WHERE code LIKE 'old-%'" 1 60 0.2
  fi
  left0=$(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'old-%'")
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
       SELECT 'bench', CONCAT('p$mode$r-', seq), CONCAT('d-', seq), 'E2E_1', '{}' FROM seq_1_to_$purge_events"
  wait_sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'p$mode$r-%' AND status = 'SUCCESS'" "$purge_events" 900 0.5
  left1=$(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'old-%'")
  secs=$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, MIN(create_time), MAX(finished_time)) / 1e6
              FROM distribute_event WHERE code LIKE 'p$mode$r-%'")
  purge_rate=$(awk -v n="$purge_events" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')
  purge_removed=$((left0 - left1))
  purge_removed_per_s=$(awk -v n="$purge_removed" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')
  if [[ $mode == on ]]; then
    ((left1 > 0)) || echo "bench.sh: purge: the purge finished before the burn-down did (raise DSYNC_BENCH_PURGE_ROWS)" >&2
    grep -h RETENTION_PASS "$work"/dispatcher.log | tail -1 || true
  fi
  stop_procs
}

purge_rows=${DSYNC_BENCH_PURGE_ROWS:-1000000}
# A burn-down long enough for the busy purge to run many batches (one per
# busy_pause_ms while the dispatcher assigns).
purge_events=${DSYNC_BENCH_PURGE_EVENTS:-100000}
purge_busy_pause_ms=${DSYNC_BENCH_PURGE_BUSY_PAUSE_MS:-2000}
section_purge() {
  echo "== purge: $purge_rows finished events (1 step each) purged in batches during a 1-step burn-down of $purge_events events (retention.busy_pause_ms $purge_busy_pause_ms)"
  echo "   machine load before: $(uptime)"
  local r t0 t1 offs=() ons=() removed=() removed_rates=() ratio_runs=() mode
  root_sql "SET GLOBAL max_allowed_packet = 268435456"
  for r in $(seq 1 "$runs"); do
    new_schema "purge_$r"
    t0=$(now_s)
    sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status, create_time, finished_time,
                                       started_time, assigned_time, node_address, attempt, version)
         SELECT 'bench', CONCAT('old-', seq), CONCAT('d-', seq), 'E2E_1', '{}', 'SUCCESS',
                NOW(3) - INTERVAL 10 DAY, NOW(3) - INTERVAL 10 DAY, NOW(3) - INTERVAL 10 DAY,
                NOW(3) - INTERVAL 10 DAY, '127.0.0.1:7001', 1, 4
         FROM seq_1_to_$purge_rows;
         INSERT INTO distribute_event_step (tenant_id, code, job_code, sort, step_type, step_name, status, attempt,
                                            started_at, executed_at)
         SELECT 'bench', CONCAT('old-', seq, '#0'), CONCAT('old-', seq), 0, 'demo', 's1', 'SUCCESS', 1,
                NOW(3) - INTERVAL 10 DAY, NOW(3) - INTERVAL 10 DAY
         FROM seq_1_to_$purge_rows"
    t1=$(now_s)
    echo "   run $r: seeded $purge_rows events + $purge_rows steps in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
    # Alternate which goes first, so a drift of the machine's load favours neither.
    for mode in $( ((r % 2)) && echo "off on" || echo "on off"); do
      purge_burndown "$mode" "$r"
      if [[ $mode == off ]]; then
        offs+=("$purge_rate")
        echo "   run $r: without purge $purge_rate events/s"
      else
        ons+=("$purge_rate")
        removed+=("$purge_removed")
        removed_rates+=("$purge_removed_per_s")
        echo "   run $r: with purge $purge_rate events/s; the purge removed $purge_removed events meanwhile ($purge_removed_per_s/s)" \
             "(left: $(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'old-%'"))"
      fi
    done
    ratio_runs+=("$(awk -v a="${ons[-1]}" -v b="${offs[-1]}" 'BEGIN { printf "%.2f", a / b }')")
    drop_schema
  done
  local off on
  off=$(printf '%s\n' "${offs[@]}" | median)
  on=$(printf '%s\n' "${ons[@]}" | median)
  result purge "rows=$purge_rows events=$purge_events busy_pause_ms=$purge_busy_pause_ms without_purge_events_per_s=$off with_purge_events_per_s=$on" \
    "ratio=$(awk -v a="$on" -v b="$off" 'BEGIN { printf "%.2f", a / b }') ratio_runs=$(IFS=,; echo "${ratio_runs[*]}")" \
    "purged_during_burndown=$(IFS=,; echo "${removed[*]}") purged_per_s=$(IFS=,; echo "${removed_rates[*]}") runs=$runs load=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
}

# -- failover: kill -9 of a node holding 50 RUNNING events --
section_failover() {
  local held=50 r secs=() detects=()
  local save_capacity=$capacity
  capacity=$held
  for r in $(seq 1 "$runs"); do
    new_cluster "failover_$r" 1
    local victim=${node_pids[0]}
    sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
         SELECT 'bench', CONCAT('f-', seq), CONCAT('d-', seq), 'E2E_1', '{\"demo\": {\"sleep_ms\": 600000}}'
         FROM seq_1_to_$held"
    wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'RUNNING' AND node_address = '127.0.0.1:7001'" "$held" 60
    start_proc node2 node --node-address 127.0.0.1:7002
    start_proc node3 node --node-address 127.0.0.1:7003
    wait_sql "$(live_nodes)" 3 30
    sleep 1
    local t_kill
    t_kill=$(sql "SELECT NOW(6)")
    kill -9 "$victim"
    wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'RUNNING' AND node_address <> '127.0.0.1:7001'" "$held" 60 0.01
    local line
    line=$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, '$t_kill', MAX(e.started_time)) / 1e6,
                       TIMESTAMPDIFF(MICROSECOND, '$t_kill', MAX(n.modifier_time)) / 1e6
                FROM distribute_event e, distribute_node_registry n
                WHERE n.node_address = '127.0.0.1:7001'")
    local s d
    read -r s d <<<"$line"
    echo "  run $r: all $held RUNNING elsewhere ${s} s after kill -9 (node marked offline after ${d} s)"
    secs+=("$s")
    detects+=("$d")
    kill_procs
    drop_schema
  done
  capacity=$save_capacity
  result failover "held=$held offline_timeout_ms=3000 heartbeat_ms=1000 sweep_ms=500" \
    "seconds=$(echo "${secs[*]}" | median) marked_offline_s=$(echo "${detects[*]}" | median)" \
    "runs_s=$(IFS=,; echo "${secs[*]}") target_s=5.0"
}

# -- rss: a node with capacity 1,000 holding 1,000 sleeping events --
section_rss() {
  local inflight=1000 r hwm=() idle=() conns_runs=() line
  local save_capacity=$capacity
  capacity=$inflight
  # Each in-flight event may hold a pooled connection: room for 1,000 + the others.
  root_sql "SET GLOBAL max_connections = 2000"
  for r in $(seq 1 "$runs"); do
    new_cluster "rss_$r" 1
    local pid=${node_pids[0]}
    sleep 1
    local idle_kb
    idle_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
    sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
         SELECT 'bench', CONCAT('r-', seq), CONCAT('d-', seq), 'E2E_1', '{\"demo\": {\"sleep_ms\": 600000}}'
         FROM seq_1_to_$inflight"
    wait_sql "SELECT COUNT(*) FROM distribute_event WHERE status = 'RUNNING'" "$inflight" 120
    sleep 2
    line=$(awk '/^(VmHWM|VmRSS|Threads)/ { printf "%s=%s ", $1, $2 }' "/proc/$pid/status" | tr -d ':')
    local conns
    conns=$(root_sql "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = '$schema'")
    echo "  run $r: idle VmRSS=${idle_kb} kB; with $inflight in flight: $line(kB) db_connections=$conns"
    conns_runs+=("$conns")
    hwm+=("$(awk -v k="$(field VmHWM "$line")" 'BEGIN { printf "%.1f", k / 1024 }')")
    idle+=("$(awk -v k="$idle_kb" 'BEGIN { printf "%.1f", k / 1024 }')")
    kill_procs
    drop_schema
  done
  capacity=$save_capacity
  result rss "in_flight=$inflight capacity=$inflight vmhwm_mib=$(echo "${hwm[*]}" | median)" \
    "idle_vmrss_mib=$(echo "${idle[*]}" | median) runs_vmhwm_mib=$(IFS=,; echo "${hwm[*]}")" \
    "threads=$(field Threads "$line") runs_db_connections=$(IFS=,; echo "${conns_runs[*]}") target_mib=64"
}

# -- ceiling: the database's own limit for an event's row writes (no dsync code) --
section_ceiling() {
  local threads=${DSYNC_BENCH_CEILING_THREADS:-4} batch=${DSYNC_BENCH_CEILING_BATCH:-100}
  local db_pid k variant tx shape r line cpu
  db_pid=$(cat "$dir/pid")
  for k in ${DSYNC_BENCH_CEILING_STEPS:-1 3}; do
    for variant in ${DSYNC_BENCH_CEILING_VARIANTS:-per_stage per_batch exact}; do
      case $variant in per_stage | per_batch | exact) ;; *) die "DSYNC_BENCH_CEILING_VARIANTS: unknown variant '$variant'" ;; esac
      local rates=() lines=() flags=(--steps "$k" --threads "$threads" --batch "$batch" --events "$events")
      tx=per_batch shape=minimal
      case $variant in
        per_stage) tx=per_stage ;;
        per_batch) flags+=(--tx-per-batch) ;;
        exact) flags+=(--exact --tx-per-batch) shape=exact ;;
      esac
      for r in $(seq 1 "$runs"); do
        new_schema "ceiling_${k}_${variant}_$r"
        cpu=$(cpu_ms "$db_pid")
        line=$("$load" ceiling --db "$schema_url" "${flags[@]}")
        cpu=$(($(cpu_ms "$db_pid") - cpu))
        line="${line#RESULT ceiling } cpu_us_per_event_mariadb=$(awk -v c="$cpu" -v n="$events" 'BEGIN { printf "%.1f", c * 1000 / n }')"
        line+=" mariadb_cores_busy=$(awk -v c="$cpu" -v s="$(field seconds "$line")" 'BEGIN { printf "%.2f", c / 1000 / s }')"
        echo "  $k-step $variant run $r: $line"
        [[ $(field tx "$line") == "$tx" ]] || die "ceiling: expected tx=$tx in: $line"
        [[ $(field shape "$line") == "$shape" ]] || die "ceiling: expected shape=$shape in: $line"
        lines+=("$line")
        rates+=("$(field events_per_s "$line")")
        drop_schema
      done
      local mid
      # The run whose rate is the median (the lower middle one of an even count) supplies
      # the figures; its events/s is replaced by the median.
      mid=$(echo "${rates[*]}" | lower_median)
      for line in "${lines[@]}"; do [[ $(field events_per_s "$line") == "$mid" ]] && break; done
      line=$(sed -E "s/(^| )events_per_s=[^ ]*/\1events_per_s=$(echo "${rates[*]}" | median)/" <<<"$line")
      result ceiling "$line runs=$(IFS=,; echo "${rates[*]}")"
    done
  done
}

# -- sysbench: the server's single-row write limit --
section_sysbench() {
  local sb_secs=${DSYNC_BENCH_SYSBENCH_S:-20} t r line tps
  local user pass port
  user=$(sed -E 's#mysql://([^:]+):.*#\1#' <<<"$url")
  pass=$(sed -E 's#mysql://[^:]+:([^@]*)@.*#\1#' <<<"$url")
  port=$(sed -E 's#.*@[^:]+:([0-9]+)/.*#\1#' <<<"$url")
  root_sql "CREATE DATABASE IF NOT EXISTS sbtest"
  local sb=(sysbench oltp_update_non_index --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$port"
    --mysql-user="$user" --mysql-password="$pass" --mysql-db=sbtest --tables=1 --table-size=100000)
  "${sb[@]}" prepare >/dev/null
  for t in 1 4 8; do
    local all=()
    for r in $(seq 1 "$runs"); do
      line=$("${sb[@]}" --threads="$t" --time="$sb_secs" --report-interval=0 run)
      tps=$(sed -nE 's/.*transactions: *[0-9]+ *\(([0-9.]+) per sec.*/\1/p' <<<"$line" | cut -d. -f1)
      local lat
      lat=$(sed -nE 's/^ *95th percentile: *([0-9.]+).*/\1/p' <<<"$line")
      echo "  threads=$t run $r: $tps TPS (p95 ${lat} ms)"
      all+=("$tps")
    done
    result sysbench "test=oltp_update_non_index threads=$t seconds=$sb_secs table_size=100000" \
      "tps=$(echo "${all[*]}" | median) runs=$(IFS=,; echo "${all[*]}")"
  done
  "${sb[@]}" cleanup >/dev/null
}

# -- pgboss: the peer, on a throwaway PostgreSQL --
pg_bin=""
pg_start() {
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [[ -x $pg_bin/postgres ]] || die "PostgreSQL binaries not found under /usr/lib/postgresql"
  pg_dir=$(mktemp -d "${TMPDIR:-/tmp}/dsync-pg.XXXXXX")
  local as=()
  if ((EUID == 0)); then  # postgres refuses to run as root
    chown postgres "$pg_dir"
    as=(runuser -u postgres --)
  fi
  "${as[@]}" "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U bench --no-instructions >"$pg_dir/initdb.log" 2>&1 ||
    { cat "$pg_dir/initdb.log" >&2; die "initdb failed"; }
  for _ in $(seq 1 10); do
    pg_port=$(free_port)
    # Same durability class as innodb_flush_log_at_trx_commit=1: fsync on, synchronous
    # commit on; shared_buffers as MariaDB's buffer pool.
    "${as[@]}" "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 30 -o \
      "-p $pg_port -k $pg_dir -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on -c full_page_writes=on -c shared_buffers=256MB -c max_connections=100" \
      start >/dev/null && return 0
  done
  tail -20 "$pg_dir/server.log" >&2
  die "PostgreSQL did not start"
}
pg_stop() {
  local pid
  pid=$(head -1 "$pg_dir/data/postmaster.pid" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" 2>/dev/null || true  # fast shutdown
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -rf "$pg_dir"
  pg_dir=""
}

# pgboss_start: pg-boss installed as pinned (npm ci into $build/pgboss, once) and a
# throwaway PostgreSQL started; sets pgboss_version and pg_version.
pgboss_cache=""
pgboss_version=""
pgboss_start() {
  pgboss_cache=$build/pgboss
  mkdir -p "$pgboss_cache"
  if ! cmp -s bench/pgboss/package.json "$pgboss_cache/package.json" ||
     ! cmp -s bench/pgboss/package-lock.json "$pgboss_cache/package-lock.json" ||
     [[ ! -d $pgboss_cache/node_modules/pg-boss ]]; then
    echo "  npm ci (pg-boss as pinned in bench/pgboss/package-lock.json) into $pgboss_cache"
    cp bench/pgboss/package.json bench/pgboss/package-lock.json "$pgboss_cache/"
    (cd "$pgboss_cache" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  fi
  pgboss_version=$(node -p "require('$pgboss_cache/node_modules/pg-boss/package.json').version")
  pg_start
  pg_version=$("$pg_bin/postgres" --version | awk '{ print $3 }')
  echo "  pg-boss $pgboss_version on PostgreSQL $pg_version (port $pg_port, fsync=on, synchronous_commit=on), node $(node --version)"
}
# pgboss_run BATCH [WORK]: one run of `events` jobs, 4 workers, WORK noop (default) or
# insert (a row per job); prints bench.js's line.
pgboss_run() {
  NODE_PATH=$pgboss_cache/node_modules node bench/pgboss/bench.js --host 127.0.0.1 --port "$pg_port" \
    --user bench --database postgres --jobs "$events" --workers 4 --batch-size "$1" --mode loop --work "${2:-noop}"
}

section_pgboss() {
  pgboss_start
  local b r line version=$pgboss_version
  for b in ${DSYNC_BENCH_PGBOSS_BATCHES:-100 500}; do
    local rates=() procs=()
    for r in $(seq 1 "$runs"); do
      line=$(pgboss_run "$b")
      echo "  batch $b run $r: $line"
      rates+=("$(field jobs_per_s "$line")")
      procs+=("$(field process_jobs_per_s "$line")")
    done
    result pgboss "version=$version postgresql=$pg_version jobs=$events workers=4 batch_size=$b mode=fetch+complete" \
      "jobs_per_s=$(echo "${rates[*]}" | median) process_jobs_per_s=$(echo "${procs[*]}" | median)" \
      "runs=$(IFS=,; echo "${rates[*]}")"
  done
  pg_stop
}

# -- paired: dsync and pg-boss alternated, so that both sides of a ratio share the hour --
# Same work on both sides (issue 37): work=noop is dsync's `noop` step against pg-boss's
# no-op job; work=demo is dsync's `demo` step (one demo_ledger row in the step's
# transaction) against pg-boss jobs inserting one row each (bench.js --work insert).
# With DSYNC_BENCH_PAIRED_BIN_B (an older dsync binary, e.g. a build of main), every
# demo pair also runs that binary's burn-down (b) beside this build's (a), for the
# before/after ratio of a change (a/b; below 1: this build is slower). The B binary
# gets the same config; it cannot build the `noop` topic (an older binary does not know
# the step), which its nodes report and skip. With DSYNC_BENCH_PAIRED_DEFAULTS=1 (the
# default), one more demo run per capacity with the shipped poll intervals
# (dispatcher 200 ms / idle 1 s, consumer 200 ms) instead of the bench's 20 ms.
section_paired() {
  local saved_capacity=$capacity saved_wakeups=$wakeups cap i b=${DSYNC_BENCH_PAIRED_BATCH:-500}
  local pairs=${DSYNC_BENCH_PAIRS:-5} d p db line pwork kind pg_work la lb
  local bin_b=${DSYNC_BENCH_PAIRED_BIN_B:-} bin_a=$bin
  [[ -z $bin_b || -x $bin_b ]] || die "DSYNC_BENCH_PAIRED_BIN_B=$bin_b is not an executable"
  pgboss_start
  wakeups=true
  for cap in ${DSYNC_BENCH_PAIRED_CAPACITIES:-16 256}; do
    capacity=$cap
    for pwork in ${DSYNC_BENCH_PAIRED_WORKS:-noop demo}; do
      [[ $pwork == noop || $pwork == demo ]] || die "DSYNC_BENCH_PAIRED_WORKS: unknown work '$pwork' (noop, demo)"
      kind=1 pg_work=insert
      [[ $pwork == noop ]] && kind=noop pg_work=noop
      # DSYNC_BENCH_PAIRS_NOOP: fewer (or more) pairs for the noop work than for demo.
      local npairs=$pairs
      [[ $pwork == noop ]] && npairs=${DSYNC_BENCH_PAIRS_NOOP:-$pairs}
      local drates=() prates=() ratios=() brates=() bratios=() pbratios=() acpu=() bcpu=() awr=() bwr=()
      for i in $(seq 1 "$npairs"); do
        # ABBA: odd pairs dsync first, even pairs pg-boss first (a trend falls on both);
        # the B binary's run between them.
        if ((i % 2 == 1)); then
          e2e_run "$kind" "$i"; d=$(field rate "$e2e_line"); la=$e2e_line
          if [[ -n $bin_b && $pwork == demo ]]; then bin=$bin_b; e2e_run "$kind" "$((100 + i))"; bin=$bin_a; db=$(field rate "$e2e_line"); lb=$e2e_line; fi
          line=$(pgboss_run "$b" "$pg_work")
        else
          line=$(pgboss_run "$b" "$pg_work")
          if [[ -n $bin_b && $pwork == demo ]]; then bin=$bin_b; e2e_run "$kind" "$((100 + i))"; bin=$bin_a; db=$(field rate "$e2e_line"); lb=$e2e_line; fi
          e2e_run "$kind" "$i"; d=$(field rate "$e2e_line"); la=$e2e_line
        fi
        p=$(field jobs_per_s "$line")
        drates+=("$d")
        prates+=("$p")
        ratios+=("$(awk -v a="$d" -v b="$p" 'BEGIN { printf "%.3f", a / b }')")
        echo "  capacity $cap work $pwork pair $i: dsync $d events/s, pg-boss $p jobs/s, ratio ${ratios[-1]}"
        echo "    this build: $la"  # statements and CPU per event (e2e_run)
        acpu+=("$(field cpu_us_per_event_mariadb "$la")")
        awr+=("$(field row_writes_per_event "$la")")
        if [[ -n $bin_b && $pwork == demo ]]; then
          brates+=("$db")
          bratios+=("$(awk -v a="$d" -v b="$db" 'BEGIN { printf "%.3f", a / b }')")
          # The same ratio over the burn-down alone (from the INSERT's commit to the last
          # finish: the producer's one INSERT, whose cost differs by schema, left out).
          pbratios+=("$(awk -v a="$(field process_seconds "$la")" -v b="$(field process_seconds "$lb")" 'BEGIN { printf "%.3f", b / a }')")
          bcpu+=("$(field cpu_us_per_event_mariadb "$lb")")
          bwr+=("$(field row_writes_per_event "$lb")")
          echo "  capacity $cap work $pwork pair $i: B binary $db events/s; this build / B = ${bratios[-1]} (burn-down alone ${pbratios[-1]})"
          echo "    B binary: $lb"
        fi
      done
      local extra=""
      if ((${#brates[@]} > 0)); then
        extra="b_events_per_s=$(echo "${brates[*]}" | median) a_over_b_median=$(echo "${bratios[*]}" | median)"
        extra+=" a_over_b=$(IFS=,; echo "${bratios[*]}") b_runs=$(IFS=,; echo "${brates[*]}")"
        extra+=" a_over_b_process_median=$(echo "${pbratios[*]}" | median) a_over_b_process=$(IFS=,; echo "${pbratios[*]}")"
        extra+=" b_cpu_us_per_event_mariadb=$(echo "${bcpu[*]}" | median) b_row_writes_per_event=$(echo "${bwr[*]}" | median)"
      fi
      extra+=" cpu_us_per_event_mariadb=$(echo "${acpu[*]}" | median) row_writes_per_event=$(echo "${awr[*]}" | median)"
      if [[ $pwork == demo && ${DSYNC_BENCH_PAIRED_DEFAULTS:-1} == 1 ]]; then
        local sp=$dispatcher_poll_ms si=$dispatcher_idle_ms sc=$consumer_poll_ms
        dispatcher_poll_ms=200 dispatcher_idle_ms=1000 consumer_poll_ms=200
        e2e_run "$kind" 999
        dispatcher_poll_ms=$sp dispatcher_idle_ms=$si consumer_poll_ms=$sc
        extra+=" shipped_defaults_events_per_s=$(field rate "$e2e_line")"
        echo "  capacity $cap work $pwork, shipped poll intervals: dsync $(field rate "$e2e_line") events/s"
      fi
      result paired "capacity=$cap work=$pwork pairs=$npairs steps=1 events=$events nodes=4 wakeups=on pgboss_batch_size=$b" \
        "pgboss_work=$pg_work pgboss_version=$pgboss_version ratio_median=$(echo "${ratios[*]}" | median)" \
        "dsync_events_per_s=$(echo "${drates[*]}" | median) pgboss_jobs_per_s=$(echo "${prates[*]}" | median)" \
        "ratios=$(IFS=,; echo "${ratios[*]}") dsync_runs=$(IFS=,; echo "${drates[*]}") pgboss_runs=$(IFS=,; echo "${prates[*]}") $extra"
    done
  done
  pg_stop
  capacity=$saved_capacity
  wakeups=$saved_wakeups
}

# -- fairness (issue 37): tenant B's 100 events beside tenant A's backlog --
# 1 dispatcher + 4 nodes of capacity 16 (as e2e), 1-step `demo` events. B's 100 alone on
# the idle cluster (median of 3), then with A's DSYNC_BENCH_FAIR_BACKLOG (100,000) due
# events inserted first (one statement; B's once 1,000 of A's have finished), with
# fairness on (the default) and off: B's time from its first create_time to its last
# finished_time (database clock), and A's drain time.
section_fairness() {
  local backlog=${DSYNC_BENCH_FAIR_BACKLOG:-100000} saved_capacity=$capacity mode i idles=() idle b a line
  capacity=16
  fair_b_ms() { sql "SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, MIN(create_time), MAX(finished_time)) / 1000) FROM distribute_event WHERE tenant_id = '$1'"; }
  produce_tenant() {  # TENANT COUNT
    sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
         SELECT '$1', CONCAT('$1-', seq), CONCAT('d-', seq), 'E2E_1', '{}' FROM seq_1_to_$2"
  }
  done_of() { echo "SELECT COUNT(*) FROM distribute_event WHERE tenant_id = '$1' AND status = 'SUCCESS'"; }
  new_cluster fair_idle 4
  sleep 1
  for i in 1 2 3; do
    produce_tenant "B$i" 100
    wait_sql "$(done_of "B$i")" 100 60 0.05
    idles+=("$(fair_b_ms "B$i")")
  done
  idle=$(echo "${idles[*]}" | median)
  stop_procs
  drop_schema
  echo "  B's 100 alone: $idle ms (runs ${idles[*]})"
  for mode in true false; do
    new_schema "fair_$mode"
    new_work
    write_config "$work/dsync.json"
    jq --argjson on "$mode" '. + {fairness: {enabled: $on}}' "$work/dsync.json" > "$work/f.json" && mv "$work/f.json" "$work/dsync.json"
    start_cluster 4
    sleep 1
    produce_tenant A "$backlog"
    wait_sql "SELECT ($(done_of A)) >= 1000" 1 300 0.1
    produce_tenant B 100
    wait_sql "$(done_of B)" 100 900 0.05
    b=$(fair_b_ms B)
    wait_sql "$(done_of A)" "$backlog" 900 0.5
    a=$(fair_b_ms A)
    echo "  fairness=$mode: B's 100 beside A's $backlog: $b ms (alone $idle ms: x$(awk -v a="$b" -v b="$idle" 'BEGIN { printf "%.2f", a / b }')); A drained in $a ms"
    result fairness "enabled=$mode backlog=$backlog b_events=100 nodes=4 capacity=16 b_ms=$b b_alone_ms=$idle" \
      "b_over_alone=$(awk -v a="$b" -v b="$idle" 'BEGIN { printf "%.2f", a / b }') a_drain_ms=$a"
    stop_procs
    drop_schema
  done
  capacity=$saved_capacity
}

# -- galera: e2e on a single server vs a 3-member cluster, and the failover time --
section_galera() {
  local save_events=$events save_dir=$dir save_url=$url gdir kind order line rates
  events=${DSYNC_BENCH_GALERA_EVENTS:-5000}
  # e2e_runs LABEL: 1- and 3-step runs on whatever $dir/$url point at now.
  e2e_runs() {
    for kind in 1 3; do
      rates=()
      for r in $(seq 1 "$runs"); do
        e2e_run "$kind" "$r"
        echo "  $1 $kind-step run $r: $e2e_line"
        rates+=("$(field rate "$e2e_line")")
      done
      result galera "target=$1 steps=$kind events=$events nodes=4 events_per_s=$(echo "${rates[*]}" | median)" \
        "runs=$(IFS=,; echo "${rates[*]}") load=$(cut -d' ' -f1 /proc/loadavg)"
    done
  }
  e2e_runs single
  gdir=$(bash scripts/galera.sh start)
  galeras+=("$gdir")
  # Member 1's folder looks like a scripts/mariadb.sh dir (my.cnf, sock, pid): sql,
  # root_sql and snapshot read member 1; its counters count member 1's own work.
  dir=$gdir/m1
  for order in failover random; do
    url=$(bash scripts/galera.sh url "$gdir")?order=$order
    [[ $order == failover ]] && url=${url%\?*}
    e2e_runs "galera_$order"
  done

  # Failover: every process writes through member 2 (its list starts there).
  url=$(bash scripts/galera.sh url "$gdir" 2)
  new_schema galera_failover
  new_work
  write_config "$work/dsync.json"
  start_cluster 2
  local rate=${DSYNC_BENCH_GALERA_RATE:-100} producer t_kill t_first t_more t_rejoin0 rejoin_s
  ( n=0
    while :; do
      n=$((n + 1))
      sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
           SELECT 'bench', CONCAT('g', $n, '-', seq), CONCAT('d', $n, '-', seq), 'E2E_1', '{}'
           FROM seq_1_to_$((rate / 10))" 2>/dev/null || true
      sleep 0.1
    done ) &
  producer=$!
  pids+=("$producer")
  sleep 5
  t_kill=$(sql "SELECT NOW(6)")
  bash scripts/galera.sh kill "$gdir" 2
  wait_sql "SELECT COUNT(*) > 0 FROM distribute_event WHERE finished_time > '$t_kill'" 1 120 0.02
  wait_sql "SELECT COUNT(*) >= 100 FROM distribute_event WHERE finished_time > '$t_kill'" 1 120 0.05
  line=$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, '$t_kill', MIN(finished_time)) / 1e6,
                     (SELECT TIMESTAMPDIFF(MICROSECOND, '$t_kill', finished_time) / 1e6 FROM distribute_event
                      WHERE finished_time > '$t_kill' ORDER BY finished_time LIMIT 99, 1)
              FROM distribute_event WHERE finished_time > '$t_kill'")
  read -r t_first t_more <<<"$line"
  t_rejoin0=$(now_s)
  bash scripts/galera.sh restart "$gdir" 2
  rejoin_s=$(awk -v a="$t_rejoin0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }')
  echo "  kill -9 of member 2: next event finished after $t_first s, 100 after $t_more s;" \
    "member 2 rejoined (IST) in $rejoin_s s; DB_FAILOVER lines: $(cat "$work"/*.log | grep -c DB_FAILOVER || true)"
  result galera "failover rate=$rate next_event_s=$t_first hundred_events_s=$t_more rejoin_ist_s=$rejoin_s" \
    "load=$(cut -d' ' -f1 /proc/loadavg)"
  kill -9 "$producer" 2>/dev/null || true
  stop_procs
  drop_schema
  bash scripts/galera.sh stop "$gdir"
  galeras=()
  dir=$save_dir url=$save_url events=$save_events
}

# ---- sync (issue 13) ------------------------------------------------------------------
sync_rows=${DSYNC_BENCH_SYNC_ROWS:-100000}
sync_big_rows=${DSYNC_BENCH_SYNC_BIG_ROWS:-1000000}
sync_lanes=${DSYNC_BENCH_SYNC_LANES:-}  # the step's `lanes` (default: the step's default)
sync_bin_b=${DSYNC_BENCH_SYNC_BIN_B:-}  # a second binary: parity runs (sync_paired_table)

# write_sync_config FILE: one topic SYNC with one table_sync step of table $sync_table.
write_sync_config() {
  local base=${url%/*} lanes_param=""
  [[ -n $sync_lanes ]] && lanes_param=", \"lanes\": $sync_lanes"
  cat > "$1" <<JSON
{
  "database": "$schema_url",
  "service": "bench",
  "datasources": { "env_a": "$base/sync_src", "env_b": "$base/sync_tgt" },
  "registry":   { "heartbeat_interval_ms": 1000, "offline_timeout_ms": 30000, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": 20, "idle_interval_ms": 20, "lease_ttl_ms": 3000 },
  "consumer":   { "poll_interval_ms": 20, "capacity": 4 },
  "topics": {
    "SYNC": { "max_retry": 3, "max_processing_time_ms": 3600000,
              "steps": [ { "name": "s", "type": "table_sync", "source": "env_a", "target": "env_b",
                           "table": "$sync_table", "where": "grp = :g"$lanes_param } ] }
  }
}
JSON
}
bytes_sent() { root_sql "SHOW GLOBAL STATUS LIKE 'Bytes_sent'" | awk '{ print $2 }'; }
now_ns() { date +%s%N; }

# sync_case NAME: a fresh node runs one SYNC event; prints and records its figures.
sync_case() {
  local name=$1 code="sync-$1-$RANDOM$RANDOM" b0 b1 secs hwm out
  start_proc "node-$name" node --node-address "127.0.0.1:7101"
  local pid=$last_pid
  wait_sql "$(live_nodes)" 1 30
  b0=$(bytes_sent)
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('b', '$code', '$code', 'SYNC', '{\"g\": 1}')"
  # Polled every 0.25 s: a client process per poll costs CPU the step competes for on
  # 2 cores, and the step's time is taken from its row (database clock), not from here.
  wait_sql "SELECT status IN ('SUCCESS', 'COMPENSATED', 'FAILED') FROM distribute_event WHERE code = '$code'" 1 3600 0.25
  if [[ $(sql "SELECT status FROM distribute_event WHERE code = '$code'") != SUCCESS ]]; then
    echo "bench.sh: sync $name failed: $(sql "SELECT error_details FROM distribute_event_step WHERE job_code = '$code'")" >&2
    tail -n 5 "$work/node-$name.log" >&2
    return 1
  fi
  b1=$(bytes_sent)
  secs=$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, started_at, executed_at) / 1e6 FROM distribute_event_step WHERE job_code = '$code'")
  hwm=$(awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$pid/status")
  out=$(sql "SELECT output FROM distribute_event_step WHERE job_code = '$code'")
  kill -TERM "$pid"; wait_gone "$pid"
  echo "  $sync_table $name: ${secs} s, server sent $(( (b1 - b0) / 1024 )) KiB, node VmHWM ${hwm} MiB; $out"
  case_secs=$secs case_kib=$(( (b1 - b0) / 1024 )) case_hwm=$hwm
}
# sync_case_with BIN NAME: sync_case NAME on a node of binary BIN.
sync_case_with() {
  local saved=$bin
  bin=$1
  sync_case "$2" || { bin=$saved; return 1; }
  bin=$saved
}
wait_gone() { for _ in $(seq 1 200); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done; kill -9 "$1" 2>/dev/null || true; }

# timed CMD...: seconds CMD took (wall clock)
timed() { local t0 t1; t0=$(now_ns); "$@"; t1=$(now_ns); awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# sync_make_tables ROWS: sync_src.$sync_table with ROWS rows, an empty sync_tgt.$sync_table.
sync_make_tables() {
  local rows=$1
  root_sql "DROP DATABASE IF EXISTS sync_src; DROP DATABASE IF EXISTS sync_tgt; CREATE DATABASE sync_src; CREATE DATABASE sync_tgt"
  if [[ $sync_table == doc ]]; then
    local ddl="CREATE TABLE doc (id INT PRIMARY KEY, grp INT NOT NULL, title VARCHAR(200), body TEXT,
               at DATETIME(3), price DECIMAL(12,2), data VARBINARY(64)) DEFAULT CHARSET=utf8mb4"
    root_sql "USE sync_src; $ddl; SET SESSION max_recursive_iterations = 10000000;
              INSERT INTO doc SELECT seq, 1, CONCAT('title ', seq), REPEAT(MD5(seq), 28),
                '2025-01-01' + INTERVAL seq SECOND, seq / 100, UNHEX(SHA2(seq, 256)) FROM seq_1_to_$rows"
    root_sql "USE sync_tgt; $ddl"
  else
    local ddl="CREATE TABLE narrow (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3), n INT)"
    root_sql "USE sync_src; $ddl; INSERT INTO narrow SELECT seq, 1, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND, seq FROM seq_1_to_$rows"
    root_sql "USE sync_tgt; $ddl"
  fi
  root_sql "ANALYZE TABLE sync_src.$sync_table" >/dev/null
  echo "  $sync_table: $rows rows, $(root_sql "SELECT ROUND((DATA_LENGTH + INDEX_LENGTH) / 1048576) FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'sync_src' AND TABLE_NAME = '$sync_table'") MiB on disk"
}

sync_one_table() {  # sync_one_table TABLE ROWS WITH_PEER
  sync_table=$1
  local rows=$2 peer=$3 r
  local -a full dump insel older unch one pt_unch pt_one hwm_full hwm_older kib_full kib_unch
  sync_make_tables "$rows"
  local sock; sock=$dir/sock
  for r in $(seq 1 "$runs"); do
    root_sql "TRUNCATE sync_tgt.$sync_table"
    dump+=("$(timed bash -c "mariadb-dump --socket=$sock -uroot --single-transaction sync_src $sync_table | mariadb --socket=$sock -uroot sync_tgt")")
    root_sql "TRUNCATE sync_tgt.$sync_table"
    insel+=("$(timed root_sql "INSERT INTO sync_tgt.$sync_table SELECT * FROM sync_src.$sync_table")")
    root_sql "TRUNCATE sync_tgt.$sync_table"
    sync_case full; full+=("$case_secs"); hwm_full+=("$case_hwm"); kib_full+=("$case_kib")
    if [[ $sync_table == doc ]]; then
      root_sql "UPDATE sync_tgt.doc SET title = CONCAT('old ', id), at = at - INTERVAL 1 DAY"
    else
      root_sql "UPDATE sync_tgt.narrow SET name = CONCAT('old ', id), n = n - 1"
    fi
    sync_case older; older+=("$case_secs"); hwm_older+=("$case_hwm")
    sync_case unchanged; unch+=("$case_secs"); kib_unch+=("$case_kib")
    root_sql "UPDATE sync_src.$sync_table SET grp = 1, at = at + INTERVAL 1 SECOND WHERE id % 100 = 0"
    sync_case one_percent; one+=("$case_secs")
    if [[ $peer == yes ]]; then
      pt_unch+=("$(timed bash -c "pt-table-sync --execute --no-check-slave --charset utf8mb4 S=$sock,u=root,D=sync_src,t=$sync_table S=$sock,u=root,D=sync_tgt,t=$sync_table; [[ \$? -le 2 ]]")")
      root_sql "UPDATE sync_src.$sync_table SET at = at + INTERVAL 1 SECOND WHERE id % 100 = 50"
      pt_one+=("$(timed bash -c "pt-table-sync --execute --no-check-slave --charset utf8mb4 S=$sock,u=root,D=sync_src,t=$sync_table S=$sock,u=root,D=sync_tgt,t=$sync_table; [[ \$? -le 2 ]]")")
      [[ $(root_sql "CHECKSUM TABLE sync_src.$sync_table" | awk '{print $2}') == $(root_sql "CHECKSUM TABLE sync_tgt.$sync_table" | awk '{print $2}') ]] ||
        echo "  (pt-table-sync left differences)"
    fi
    echo "  run $r: dump|mariadb ${dump[-1]} s, INSERT...SELECT ${insel[-1]} s, dsync full ${full[-1]} s," \
      "older copy ${older[-1]} s, unchanged ${unch[-1]} s, 1% ${one[-1]} s${peer:+; pt-table-sync unchanged ${pt_unch[-1]:-} s, 1% ${pt_one[-1]:-} s}"
  done
  local m_full m_dump m_insel m_unch m_one m_older
  m_full=$(echo "${full[*]}" | median); m_dump=$(echo "${dump[*]}" | median); m_insel=$(echo "${insel[*]}" | median)
  m_unch=$(echo "${unch[*]}" | median); m_one=$(echo "${one[*]}" | median); m_older=$(echo "${older[*]}" | median)
  local line="table=$sync_table rows=$rows full_s=$m_full dump_s=$m_dump insert_select_s=$m_insel older_s=$m_older"
  line+=" unchanged_s=$m_unch one_percent_s=$m_one"
  line+=" speed_vs_dump=$(awk -v a="$m_dump" -v b="$m_full" 'BEGIN { printf "%.2f", a / b }')"
  line+=" speed_vs_insert_select=$(awk -v a="$m_insel" -v b="$m_full" 'BEGIN { printf "%.2f", a / b }')"
  line+=" unchanged_vs_full=$(awk -v a="$m_unch" -v b="$m_full" 'BEGIN { printf "%.3f", a / b }')"
  line+=" one_percent_vs_full=$(awk -v a="$m_one" -v b="$m_full" 'BEGIN { printf "%.3f", a / b }')"
  line+=" bytes_unchanged_vs_full=$(awk -v a="$(echo "${kib_unch[*]}" | median)" -v b="$(echo "${kib_full[*]}" | median)" 'BEGIN { printf "%.4f", a / b }')"
  line+=" vmhwm_full_mib=$(echo "${hwm_full[*]}" | median) vmhwm_older_mib=$(echo "${hwm_older[*]}" | median)"
  if [[ $peer == yes ]]; then
    line+=" pt_unchanged_s=$(echo "${pt_unch[*]}" | median) pt_one_percent_s=$(echo "${pt_one[*]}" | median)"
  fi
  result sync "$line"
}

# sync_paired_table TABLE ROWS: parity of two binaries (DSYNC_BENCH_SYNC_BIN_B): each case
# run with this build (a) and $sync_bin_b (b) from the same state, in ABBA order over the
# runs; medians per case and binary, and b/a (above 1: a is faster).
sync_paired_table() {
  sync_table=$1
  local rows=$2 r c side first
  local -A secs=() hwm=()
  sync_make_tables "$rows"
  for r in $(seq 1 "$runs"); do
    if ((r % 2)); then first="a b"; else first="b a"; fi
    for c in full older unchanged one_percent; do
      for side in $first; do
        case $c in
          full) root_sql "TRUNCATE sync_tgt.$sync_table" ;;
          older)  # the same older copy each time (the target equals the source here)
            if [[ $sync_table == doc ]]; then
              root_sql "UPDATE sync_tgt.doc SET title = CONCAT('old ', id), at = at - INTERVAL 1 DAY"
            else
              root_sql "UPDATE sync_tgt.narrow SET name = CONCAT('old ', id), n = n - 1"
            fi ;;
          one_percent) root_sql "UPDATE sync_src.$sync_table SET at = at + INTERVAL 1 SECOND WHERE id % 100 = 0" ;;
        esac
        if [[ $side == a ]]; then sync_case_with "$bin" "${c}_a"; else sync_case_with "$sync_bin_b" "${c}_b"; fi
        secs[${c}_$side]+="${secs[${c}_$side]:+,}$case_secs"
        hwm[${c}_$side]+="${hwm[${c}_$side]:+,}$case_hwm"
      done
    done
  done
  local line="paired table=$sync_table rows=$rows" ma mb
  for c in full older unchanged one_percent; do
    ma=$(echo "${secs[${c}_a]}" | median); mb=$(echo "${secs[${c}_b]}" | median)
    echo "  $sync_table $c: a ${secs[${c}_a]} s (median $ma), b ${secs[${c}_b]} s (median $mb), b/a $(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
    line+=" ${c}_a_s=$ma ${c}_b_s=$mb ${c}_b_over_a=$(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
  done
  line+=" vmhwm_full_a_mib=$(echo "${hwm[full_a]}" | median) vmhwm_full_b_mib=$(echo "${hwm[full_b]}" | median)"
  result sync "$line"
}

# sync_verify_bench: `dsync verify` of two equal copies of sync_src.doc (issue 14) against
# CHECKSUM TABLE of both sides (one statement, sequential), $runs runs, medians.
quiet() { "$@" >/dev/null; }
sync_verify_bench() {
  local r v=() vb=() c=() rc
  root_sql "TRUNCATE sync_tgt.doc; INSERT INTO sync_tgt.doc SELECT * FROM sync_src.doc"
  root_sql "CHECKSUM TABLE sync_src.doc, sync_tgt.doc" >/dev/null  # both tables in the buffer pool
  local -a verify=(verify --config "$work/dsync.json" --source env_a --target env_b --table doc --where "1 = 1" --json)
  for r in $(seq 1 "$runs"); do
    c+=("$(timed quiet root_sql "CHECKSUM TABLE sync_src.doc, sync_tgt.doc")")
    if [[ -n $sync_bin_b ]] && ! ((r % 2)); then  # parity: ABBA
      vb+=("$(timed quiet "$sync_bin_b" "${verify[@]}")")
      v+=("$(timed quiet "$bin" "${verify[@]}")")
    else
      v+=("$(timed quiet "$bin" "${verify[@]}")")
      [[ -z $sync_bin_b ]] || vb+=("$(timed quiet "$sync_bin_b" "${verify[@]}")")
    fi
  done
  set +e; "$bin" verify --config "$work/dsync.json" --source env_a --target env_b --table doc --where "1 = 1" >/dev/null; rc=$?; set -e
  [[ $rc == 0 ]] || echo "  (dsync verify of the equal copies exited $rc)"
  local mv mc; mv=$(echo "${v[*]}" | median); mc=$(echo "${c[*]}" | median)
  echo "  verify of two equal doc tables: dsync verify ${v[*]} s; CHECKSUM TABLE both sides ${c[*]} s"
  result sync "verify table=doc rows=$sync_rows verify_s=$mv checksum_table_both_s=$mc verify_vs_checksum_table=$(awk -v a="$mv" -v b="$mc" 'BEGIN { printf "%.2f", a / b }') exit=$rc"
  if [[ -n $sync_bin_b ]]; then
    local mb; mb=$(echo "${vb[*]}" | median)
    echo "  verify parity: a ${v[*]} s (median $mv), b ${vb[*]} s (median $mb), b/a $(awk -v a="$mv" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
    result sync "paired verify table=doc rows=$sync_rows verify_a_s=$mv verify_b_s=$mb verify_b_over_a=$(awk -v a="$mv" -v b="$mb" 'BEGIN { printf "%.3f", b / a }')"
  fi
}

section_sync() {
  new_schema sync_fw
  new_work
  sync_table=doc
  write_sync_config "$work/dsync.json"
  start_proc dispatcher dispatcher
  local disp=$last_pid
  if [[ -n $sync_bin_b ]]; then
    [[ -x $sync_bin_b ]] || die "DSYNC_BENCH_SYNC_BIN_B=$sync_bin_b is not an executable"
    echo "  parity: a = $bin, b = $sync_bin_b"
    sync_paired_table doc "$sync_rows"
  else
    sync_one_table doc "$sync_rows" yes
  fi
  sync_verify_bench
  sed -i "s/\"table\": \"doc\"/\"table\": \"narrow\"/" "$work/dsync.json"
  if [[ -n $sync_bin_b ]]; then sync_paired_table narrow "$sync_big_rows"; else sync_one_table narrow "$sync_big_rows" ""; fi
  kill -TERM "$disp" 2>/dev/null || true
  wait_gone "$disp"
  root_sql "DROP DATABASE IF EXISTS sync_src; DROP DATABASE IF EXISTS sync_tgt"
  drop_schema
}

# ---- relay (issue 35) ------------------------------------------------------------------
# Three servers: the framework database (C), env_a (A) and env_b (B). Direct: one node
# whose config names both datasources. Relayed: node A names env_a only, node B env_b
# only, so the step runs as two halves meeting in C. Each case is run in both modes
# from the same target state, in ABBA order over the runs (odd runs direct first).
relay_rows=${DSYNC_BENCH_RELAY_ROWS:-100000}
relay_big_rows=${DSYNC_BENCH_RELAY_BIG_ROWS:-1000000}

relay_config() {  # relay_config FILE DATASOURCES_JSON
  cat > "$1" <<JSON
{
  "database": "$schema_url",
  "service": "bench",
  "datasources": $2,
  "registry":   { "heartbeat_interval_ms": 1000, "offline_timeout_ms": 30000, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": 20, "idle_interval_ms": 20, "lease_ttl_ms": 3000 },
  "consumer":   { "poll_interval_ms": 20, "capacity": 4 },
  "topics": {
    "SYNC": { "max_retry": 3, "max_processing_time_ms": 3600000,
              "steps": [ { "name": "s", "type": "table_sync", "source": "env_a", "target": "env_b",
                           "table": "$relay_table", "where": "grp = :g" } ] }
  }
}
JSON
}
relay_sql() { bash scripts/mariadb.sh root "$1" -N -B -e "$2"; }  # relay_sql DIR SQL
relay_node() {  # relay_node NAME CONFIG PORT: a node of $work/CONFIG.json
  "$bin" node --config "$work/$2.json" --node-address "127.0.0.1:$3" >"$work/$1.log" 2>&1 &
  last_pid=$!
  disown "$last_pid"
  pids+=("$last_pid")
}
received() { relay_sql "$1" "SHOW GLOBAL STATUS LIKE 'Bytes_received'" | awk '{ print $2 }'; }
hwm_of() { awk '/^VmHWM/ { printf "%.1f", $2 / 1024 }' "/proc/$1/status"; }

# relay_make_tables TABLE ROWS: relay_src.TABLE on A with ROWS rows, an empty
# relay_tgt.TABLE on B (the sync section's two shapes).
relay_make_tables() {
  local table=$1 rows=$2 ddl fill
  if [[ $table == doc ]]; then
    ddl="CREATE TABLE doc (id INT PRIMARY KEY, grp INT NOT NULL, title VARCHAR(200), body TEXT,
         at DATETIME(3), price DECIMAL(12,2), data VARBINARY(64)) DEFAULT CHARSET=utf8mb4"
    fill="INSERT INTO doc SELECT seq, 1, CONCAT('title ', seq), REPEAT(MD5(seq), 28),
          '2025-01-01' + INTERVAL seq SECOND, seq / 100, UNHEX(SHA2(seq, 256)) FROM seq_1_to_$rows"
  else
    ddl="CREATE TABLE narrow (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3), n INT)"
    fill="INSERT INTO narrow SELECT seq, 1, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND, seq FROM seq_1_to_$rows"
  fi
  relay_sql "$dir_a" "DROP DATABASE IF EXISTS relay_src; CREATE DATABASE relay_src; USE relay_src; $ddl; $fill; ANALYZE TABLE $table" >/dev/null
  relay_sql "$dir_b" "DROP DATABASE IF EXISTS relay_tgt; CREATE DATABASE relay_tgt; USE relay_tgt; $ddl"
  table_bytes=$(relay_sql "$dir_a" "SELECT DATA_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'relay_src' AND TABLE_NAME = '$table'")
  echo "  $table: $rows rows, $((table_bytes / 1048576)) MiB of data on A"
}

# relay_case MODE NAME: fresh node(s) of MODE (direct | relayed) run one SYNC event.
# Sets case_secs, case_fw_kib (bytes the framework server received meanwhile),
# case_hwm_a / case_hwm_b (nodes' VmHWM), case_peak (the relay row's peak_bytes).
relay_case() {
  local mode=$1 name=$2 code="relay-$2-$RANDOM$RANDOM" r0 r1 pid_a pid_b
  if [[ $mode == direct ]]; then
    relay_node "node-$name" direct 7101; pid_a=$last_pid pid_b=$last_pid
    wait_sql "$(live_nodes)" 1 30
  else
    relay_node "node-a-$name" a 7101; pid_a=$last_pid
    relay_node "node-b-$name" b 7102; pid_b=$last_pid
    wait_sql "$(live_nodes)" 2 30
  fi
  r0=$(received "$dir")
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES ('b', '$code', '$code', 'SYNC', '{\"g\": 1}')"
  wait_sql "SELECT status IN ('SUCCESS', 'COMPENSATED', 'FAILED') FROM distribute_event WHERE code = '$code'" 1 3600 0.25
  if [[ $(sql "SELECT status FROM distribute_event WHERE code = '$code'") != SUCCESS ]]; then
    echo "bench.sh: relay $name failed: $(sql "SELECT error_details FROM distribute_event_step WHERE job_code = '$code'")" >&2
    return 1
  fi
  r1=$(received "$dir")
  case_secs=$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, started_at, executed_at) / 1e6 FROM distribute_event_step WHERE job_code = '$code'")
  case_hwm_a=$(hwm_of "$pid_a") case_hwm_b=$(hwm_of "$pid_b")
  case_peak=$(sql "SELECT COALESCE(MAX(peak_bytes), 0) FROM dsync_relay WHERE event_code = '$code'")
  case_fw_kib=$(( (r1 - r0) / 1024 ))
  kill -TERM "$pid_a" "$pid_b" 2>/dev/null || true; wait_gone "$pid_a"; wait_gone "$pid_b"
  sql "UPDATE distribute_node_registry SET status = 0"  # gone: the next case waits for its own
  echo "  $relay_table $name ($mode): ${case_secs} s, framework server received ${case_fw_kib} KiB, relay peak ${case_peak} B," \
    "VmHWM $( [[ $mode == direct ]] && echo "${case_hwm_a} MiB" || echo "A ${case_hwm_a} / B ${case_hwm_b} MiB")"
}

relay_paired_table() {  # relay_paired_table TABLE ROWS
  relay_table=$1
  local rows=$2 r c mode order
  local -A secs=() fw=() ha=() hb=() peak=()
  relay_make_tables "$relay_table" "$rows"
  relay_config "$work/direct.json" "{ \"env_a\": \"$url_a_base/relay_src\", \"env_b\": \"$url_b_base/relay_tgt\" }"
  relay_config "$work/a.json" "{ \"env_a\": \"$url_a_base/relay_src\" }"
  relay_config "$work/b.json" "{ \"env_b\": \"$url_b_base/relay_tgt\" }"
  for r in $(seq 1 "$runs"); do
    if ((r % 2)); then order="direct relayed"; else order="relayed direct"; fi
    for c in full unchanged one_percent; do
      for mode in $order; do
        case $c in
          full) relay_sql "$dir_b" "TRUNCATE relay_tgt.$relay_table" ;;
          one_percent) relay_sql "$dir_a" "UPDATE relay_src.$relay_table SET at = at + INTERVAL 1 SECOND WHERE id % 100 = 0" ;;
        esac
        relay_case "$mode" "${c}_$mode" || return 1
        secs[${c}_$mode]+="${secs[${c}_$mode]:+,}$case_secs"
        fw[${c}_$mode]+="${fw[${c}_$mode]:+,}$case_fw_kib"
        ha[${c}_$mode]+="${ha[${c}_$mode]:+,}$case_hwm_a"
        hb[${c}_$mode]+="${hb[${c}_$mode]:+,}$case_hwm_b"
        peak[${c}_$mode]+="${peak[${c}_$mode]:+,}$case_peak"
      done
    done
  done
  local line="table=$relay_table rows=$rows table_mib=$((table_bytes / 1048576)) window_bytes=$((64 << 20))" md mr
  for c in full unchanged one_percent; do
    md=$(echo "${secs[${c}_direct]}" | median); mr=$(echo "${secs[${c}_relayed]}" | median)
    echo "  $relay_table $c: direct ${secs[${c}_direct]} s (median $md), relayed ${secs[${c}_relayed]} s (median $mr)," \
      "relayed/direct time $(awk -v a="$md" -v b="$mr" 'BEGIN { printf "%.2f", b / a }')"
    line+=" ${c}_direct_s=$md ${c}_relayed_s=$mr ${c}_relayed_speed=$(awk -v a="$md" -v b="$mr" 'BEGIN { printf "%.2f", a / b }')"
    line+=" ${c}_fw_kib_direct=$(echo "${fw[${c}_direct]}" | median) ${c}_fw_kib_relayed=$(echo "${fw[${c}_relayed]}" | median)"
    line+=" ${c}_relay_peak_bytes=$(echo "${peak[${c}_relayed]}" | median)"
    line+=" ${c}_vmhwm_direct_mib=$(echo "${ha[${c}_direct]}" | median)"
    line+=" ${c}_vmhwm_source_half_mib=$(echo "${ha[${c}_relayed]}" | median) ${c}_vmhwm_target_half_mib=$(echo "${hb[${c}_relayed]}" | median)"
  done
  line+=" unchanged_fw_share=$(awk -v k="$(echo "${fw[unchanged_relayed]}" | median)" -v t="$table_bytes" 'BEGIN { printf "%.4f", k * 1024 / t }')"
  result relay "$line"
}

section_relay() {
  local dir_fw=$dir url_fw=$url  # the section's own server (the main loop's): the framework database
  start_server; dir_a=$dir; url_a_base=${url%/*}
  start_server; dir_b=$dir; url_b_base=${url%/*}
  dir=$dir_fw url=$url_fw
  new_schema relay_fw
  new_work
  relay_table=doc
  relay_config "$work/dsync.json" '{}'
  start_proc dispatcher dispatcher
  local disp=$last_pid
  relay_paired_table doc "$relay_rows"
  relay_paired_table narrow "$relay_big_rows"
  kill -TERM "$disp" 2>/dev/null || true
  wait_gone "$disp"
  for d in "$dir_a" "$dir_b"; do dir=$d; stop_server; done
  dir=$dir_fw; url=$url_fw
  drop_schema
}

# slowclients: see the header. One server for every case; the probe last (it may leave
# the old server's threads busy for a while).
section_slowclients() {
  local idle=${DSYNC_BENCH_SLOW_IDLE:-200} slowloris=${DSYNC_BENCH_SLOW_SLOWLORIS:-50}
  local server_bin=${DSYNC_BENCH_SLOW_BIN:-$bin} requests=${DSYNC_BENCH_SLOW_REQUESTS:-200}
  local timeout_s=${DSYNC_BENCH_SLOW_TIMEOUT_S:-120} api_port c i m r line p50s p99s maxs posts failed
  new_schema slowclients
  new_work
  write_config "$work/dsync.json"
  api_port=$(free_port)
  local saved_bin=$bin
  bin=$server_bin
  start_proc serve serve --listen "127.0.0.1:$api_port" --log-level warn
  bin=$saved_bin
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$api_port") 2>/dev/null && break
    sleep 0.1
  done
  for c in "0 0" "$idle $slowloris"; do
    read -r i m <<<"$c"
    p50s=() p99s=() maxs=() posts=() failed=()
    for r in $(seq 1 "$runs"); do
      line=$(python3 bench/slow_clients.py measure --port "$api_port" --idle "$i" --slow "$m" \
        --healthz "$requests" --prefix "s$i-$m-$r" --timeout "$timeout_s")
      echo "  idle=$i slowloris=$m run $r: $line"
      p50s+=("$(field healthz_p50_ms "$line")")
      p99s+=("$(field healthz_p99_ms "$line")")
      maxs+=("$(field healthz_max_ms "$line")")
      posts+=("$(field posts_per_s "$line")")
      failed+=("$(field healthz_failed "$line")/$(field posts_failed "$line")")
      sleep 1  # the previous run's connections close
    done
    result slowclients "idle=$i slowloris=$m binary=${server_bin#"$PWD"/}" \
      "healthz_p50_ms=$(echo "${p50s[*]}" | median) healthz_p99_ms=$(echo "${p99s[*]}" | median)" \
      "healthz_max_ms=$(echo "${maxs[*]}" | median) posts_per_s=$(echo "${posts[*]}" | median)" \
      "runs_posts_per_s=$(IFS=,; echo "${posts[*]}") runs_p99_ms=$(IFS=,; echo "${p99s[*]}")" \
      "runs_failed_healthz/posts=$(IFS=,; echo "${failed[*]}")"
  done
  line=$(python3 bench/slow_clients.py probe --port "$api_port")
  result slowclients "probe $line"
  stop_procs
  drop_schema
}

# -- capture (issue 36): binlog capture under a steady writer --
# Three servers on this machine: the source (binlog on, sync_binlog=1), the target, and
# the section's own server as the framework database. 1 dispatcher, DSYNC_BENCH_CAPTURE_NODES
# (1) node of capacity 16, and two `dsync capture` processes (the lease holder reads, the
# other stands by). The writer (bench/capture_writer.py piped into a mariadb client) changes
# 40 rows per transaction on two tables (w1, and w2 with a composite key): INSERT 12,
# UPDATE 6, DELETE 2 each, every changed row stamped written_at = NOW(6). Triggers on the
# target log (written_at, NOW(6)) of every row the apply inserts or changes into a
# table of another schema: lag = apply - write, per row (deletes are not timed; a row
# changed twice before its apply is timed from its last change). For each rate of
# DSYNC_BENCH_CAPTURE_RATES ("1000 5000 0": changed rows/s, 0 = as fast as they go), written
# by DSYNC_BENCH_CAPTURE_WRITERS (2) clients for DSYNC_BENCH_CAPTURE_S (30) s: rows written
# per s, applied rows/s (the capture's row changes over first write -> last event
# finished), lag p50/p99/max, framework-database row writes (Handler_write + _update +
# _delete) and commits per captured row, node and reader VmHWM. Then the kill case: the
# 5,000 rows/s writer for DSYNC_BENCH_CAPTURE_KILL_S (40) s, the reading process
# kill -9'd after 10 s: seconds from the kill until another process holds the lease
# (takeover), until the last row applied with a lag >= 1 s (recovery), and the peak lag.
# Each case also reports its events: count, keys per event, how many were retried,
# create -> start (queue) and start -> finish (run) p50/p99: where the lag goes. Last, `dsync verify` of both tables (exit 0).
section_capture() {
  local src_dir tgt_dir src_url tgt_url fw_schema=capture secs=${DSYNC_BENCH_CAPTURE_S:-30}
  local nodes=${DSYNC_BENCH_CAPTURE_NODES:-1} rate writers line
  src_dir=$(DSYNC_MARIADB_BINLOG=1 bash scripts/mariadb.sh start); servers+=("$src_dir")
  tgt_dir=$(bash scripts/mariadb.sh start); servers+=("$tgt_dir")
  src_url=$(bash scripts/mariadb.sh url "$src_dir")
  tgt_url=$(bash scripts/mariadb.sh url "$tgt_dir")
  qsrc() { bash scripts/mariadb.sh root "$src_dir" -N -B src -e "SET time_zone = '+00:00'; $1"; }
  qtgt() { bash scripts/mariadb.sh root "$tgt_dir" -N -B tgt -e "SET time_zone = '+00:00'; $1"; }
  local tables="CREATE TABLE w1 (id BIGINT PRIMARY KEY, n INT NOT NULL, note VARCHAR(64), written_at DATETIME(6) NOT NULL);
    CREATE TABLE w2 (g INT NOT NULL, id BIGINT NOT NULL, n INT NOT NULL, note VARCHAR(64), written_at DATETIME(6) NOT NULL,
                     PRIMARY KEY (g, id));"
  bash scripts/mariadb.sh root "$src_dir" -e "CREATE DATABASE src"
  bash scripts/mariadb.sh root "$tgt_dir" -e "CREATE DATABASE tgt; CREATE DATABASE lag;
    CREATE TABLE lag.log (t CHAR(2) NOT NULL, written_at DATETIME(6) NOT NULL, applied_at DATETIME(6) NOT NULL)"
  qsrc "$tables"
  qtgt "$tables"
  local t
  for t in w1 w2; do
    qtgt "CREATE TRIGGER ${t}_ins AFTER INSERT ON $t FOR EACH ROW INSERT INTO lag.log VALUES ('$t', NEW.written_at, NOW(6));
          CREATE TRIGGER ${t}_upd AFTER UPDATE ON $t FOR EACH ROW
            INSERT INTO lag.log SELECT '$t', NEW.written_at, NOW(6) FROM DUAL WHERE NEW.written_at <> OLD.written_at"
  done
  new_schema "$fw_schema"
  new_work
  # DSYNC_BENCH_CAPTURE_SQL_LOG=DIR: every statement of the three servers with its time
  # (the slow log at long_query_time 0) in DIR/slow-{src,tgt,fw}.log: where an event's time goes.
  if [[ -n ${DSYNC_BENCH_CAPTURE_SQL_LOG:-} ]]; then
    local d n
    for n in src:$src_dir tgt:$tgt_dir fw:$dir; do
      d=${n#*:}
      bash scripts/mariadb.sh root "$d" -e "SET GLOBAL slow_query_log_file = '$DSYNC_BENCH_CAPTURE_SQL_LOG/slow-${n%%:*}.log', GLOBAL long_query_time = 0, GLOBAL log_slow_verbosity = 'query_plan', GLOBAL slow_query_log = 1"
    done
  fi
  cat > "$work/dsync.json" <<JSON
{
  "database": "$schema_url",
  "service": "bench",
  "log_level": "info",
  "registry":   { "heartbeat_interval_ms": 1000, "offline_timeout_ms": 3000, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": $dispatcher_poll_ms, "idle_interval_ms": $dispatcher_idle_ms, "lease_ttl_ms": 3000, "batch_size": 500, "busy_interval_ms": ${DSYNC_BENCH_BUSY_MS:-2}, "wakeups": true },
  "consumer":   { "poll_interval_ms": $consumer_poll_ms, "capacity": 16, "wakeups": true },
  "topics": { "E2E_noop": { "steps": [ { "name": "s1", "type": "noop" } ] } },
  "datasources": { "src": "${src_url%/*}/src", "tgt": "${tgt_url%/*}/tgt" },
  "captures": { "bench": { "source": "src", "target": "tgt", "tables": ["w1", "w2"] } }
}
JSON
  local n reader_pids=()
  start_proc dispatcher dispatcher
  for n in $(seq 1 "$nodes"); do start_proc "node$n" node --node-address "127.0.0.1:$((7100 + n))"; done
  local node_pid=$last_pid
  start_proc reader1 capture; reader_pids+=("$last_pid")
  start_proc reader2 capture; reader_pids+=("$last_pid")
  wait_sql "SELECT state FROM dsync_capture WHERE name = 'bench'" RUNNING 60

  hwm_mib() { awk '/VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0; }
  holder_pid() { sql "SELECT SUBSTRING_INDEX(SUBSTRING_INDEX(holder, ':', 2), ':', -1) FROM dsync_capture WHERE name = 'bench' AND lease_until > NOW(3)"; }
  # caught_up: the reader at the source's position and no capture event left to run.
  caught_up() {
    local pos
    pos=$(qsrc "SELECT @@gtid_binlog_pos")
    wait_sql "SELECT gtid = '$pos' FROM dsync_capture WHERE name = 'bench'" 1 600 0.1
    wait_sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.capture' AND status NOT IN ('SUCCESS', 'FAILED', 'COMPENSATED')" 0 600 0.1
  }
  next_tx=0
  # write RATE SECONDS WRITERS: the writers, until done; sets t0/t1 (source clock).
  write() {
    local w wpids=() per
    per=$(awk -v r="$1" -v w="$3" 'BEGIN { print r / w }')
    t0=$(qsrc "SELECT NOW(6)")
    for w in $(seq 0 $(($3 - 1))); do
      { echo "SET time_zone = '+00:00';"; python3 bench/capture_writer.py --rate "$per" --seconds "$2" --writer "$w" --writers "$3" --first "$next_tx"; } |
        bash scripts/mariadb.sh root "$src_dir" src 2>>"$work/writer.log" &
      wpids+=("$!")
    done
    for w in "${wpids[@]}"; do wait "$w" || { echo "bench.sh: the writer failed: $(tail -3 "$work/writer.log")" >&2; return 1; }; done
    t1=$(qsrc "SELECT NOW(6)")
    next_tx=$(( $(qsrc "SELECT COALESCE(MAX(id), 0) DIV 12 + 1 FROM w1") + 100 ))
  }
  # lags FROM TO: the lags in ms of the rows written in [FROM, TO), sorted.
  lags() {
    bash scripts/mariadb.sh root "$tgt_dir" -N -B -e "SELECT TIMESTAMPDIFF(MICROSECOND, written_at, applied_at) / 1000
      FROM lag.log WHERE written_at >= '$1' AND written_at < '$2'" | sort -g
  }
  pct() { awk -v p="$1" '{ v[NR] = $1 } END { if (NR) { i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; printf "%.0f", v[i] } else print "none" }'; }
  # ev_stats FROM TO: the capture events created in [FROM, TO] (framework clock): their
  # count, keys per event, those retried (a deadlock between lanes, ...), and p50/p99 of
  # create -> start (queue) and start -> finish (run).
  ev_stats() {
    local f=$work/ev.tsv
    sql "SELECT TIMESTAMPDIFF(MICROSECOND, create_time, started_time) / 1000, TIMESTAMPDIFF(MICROSECOND, started_time, finished_time) / 1000,
           JSON_LENGTH(payload, '$.keys'), retry_count FROM distribute_event WHERE topic = 'dsync.capture' AND create_time BETWEEN '$1' AND '$2'
           AND finished_time IS NOT NULL" > "$f"
    echo "events=$(wc -l < "$f") keys_per_event=$(awk '{ s += $3 } END { if (NR) printf "%.0f", s / NR }' "$f")" \
      "retried_events=$(awk '$4 > 0 { n++ } END { print n + 0 }' "$f")" \
      "queue_p50_ms=$(cut -f1 "$f" | sort -g | pct 50) queue_p99_ms=$(cut -f1 "$f" | sort -g | pct 99)" \
      "run_p50_ms=$(cut -f2 "$f" | sort -g | pct 50) run_p99_ms=$(cut -f2 "$f" | sort -g | pct 99)"
  }
  fw_writes() { root_sql "SELECT SUM(VARIABLE_VALUE) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('HANDLER_WRITE', 'HANDLER_UPDATE', 'HANDLER_DELETE')"; }
  fw_commits() { root_sql "SELECT SUM(VARIABLE_VALUE) FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN ('COM_COMMIT', 'COM_INSERT', 'COM_UPDATE', 'COM_DELETE')"; }

  for rate in ${DSYNC_BENCH_CAPTURE_RATES:-1000 5000 0}; do
    writers=${DSYNC_BENCH_CAPTURE_WRITERS:-2}
    caught_up
    local rows0 w0 c0 rows1 w1 c1 last written
    rows0=$(sql "SELECT row_changes FROM dsync_capture WHERE name = 'bench'")
    w0=$(fw_writes); c0=$(fw_commits)
    write "$rate" "$secs" "$writers"
    caught_up
    rows1=$(sql "SELECT row_changes FROM dsync_capture WHERE name = 'bench'")
    w1=$(fw_writes); c1=$(fw_commits)
    last=$(sql "SELECT MAX(finished_time) FROM distribute_event WHERE topic = 'dsync.capture'")
    written=$((rows1 - rows0))
    local lag_file=$work/lags-$rate
    lags "$t0" "$t1" > "$lag_file"
    result capture "rate=$( ((rate == 0)) && echo max || echo "$rate") writers=$writers seconds=$secs nodes=$nodes" \
      "row_changes=$written written_per_s=$(sql "SELECT ROUND($written / (TIMESTAMPDIFF(MICROSECOND, '$t0', '$t1') / 1e6))")" \
      "applied_per_s=$(sql "SELECT ROUND($written / (TIMESTAMPDIFF(MICROSECOND, '$t0', '$last') / 1e6))")" \
      "lag_p50_ms=$(pct 50 < "$lag_file") lag_p99_ms=$(pct 99 < "$lag_file") lag_max_ms=$(pct 100 < "$lag_file") timed_rows=$(wc -l < "$lag_file")" \
      "fw_row_writes_per_row=$(awk -v d="$((w1 - w0))" -v n="$written" 'BEGIN { printf "%.2f", d / n }')" \
      "fw_statements_per_row=$(awk -v d="$((c1 - c0))" -v n="$written" 'BEGIN { printf "%.3f", d / n }')" \
      "node_vmhwm_mib=$(hwm_mib "$node_pid") reader_vmhwm_mib=$(hwm_mib "$(holder_pid)") $(ev_stats "$t0" "$last")"
  done

  # kill -9 of the reading process under the 5,000 rows/s writer.
  local kill_s=${DSYNC_BENCH_CAPTURE_KILL_S:-40} victim killed_at recovered peak
  caught_up
  if ((kill_s > 0)); then
    write 5000 "$kill_s" "${DSYNC_BENCH_CAPTURE_WRITERS:-2}" &
  local writer_job=$!
  sleep 10
  victim=$(holder_pid)
  killed_at=$(qsrc "SELECT NOW(6)")
  kill -9 "$victim"
  echo "  killed the reader $victim at $killed_at"
  local keep=()
  for n in "${reader_pids[@]}"; do [[ $n == "$victim" ]] || keep+=("$n"); done
  reader_pids=("${keep[@]}")
  start_proc reader3 capture; reader_pids+=("$last_pid")
  local took_over=""
  for _ in $(seq 1 300); do
    n=$(holder_pid)
    if [[ -n $n && $n != "$victim" ]]; then took_over=$(qsrc "SELECT TIMESTAMPDIFF(MICROSECOND, '$killed_at', NOW(6)) / 1e6"); break; fi
    sleep 0.1
  done
  wait "$writer_job"
  t1=$(qsrc "SELECT NOW(6)")
  caught_up
  read -r recovered peak < <(bash scripts/mariadb.sh root "$tgt_dir" -N -B -e "
    SELECT COALESCE(TIMESTAMPDIFF(MICROSECOND, '$killed_at', MAX(IF(TIMESTAMPDIFF(MICROSECOND, written_at, applied_at) >= 1000000, applied_at, NULL))) / 1e6, 0),
           MAX(TIMESTAMPDIFF(MICROSECOND, written_at, applied_at)) / 1e6
    FROM lag.log WHERE applied_at >= '$killed_at'")
  result capture "kill=reader rate=5000 seconds=$kill_s killed_after_s=10" \
    "takeover_s=${took_over:-none} recovery_s=$recovered peak_lag_s=$peak reader_starts=$(sql "SELECT reader_starts FROM dsync_capture WHERE name = 'bench'")"
  fi

  local equal=yes
  for t in w1 w2; do
    "$bin" verify --config "$work/dsync.json" --source src --target tgt --table "$t" --where "1 = 1" >"$work/verify-$t.out" 2>&1 || equal="no ($t: $(tail -1 "$work/verify-$t.out"))"
  done
  result capture "verify equal=$equal rows_w1=$(qtgt "SELECT COUNT(*) FROM w1") rows_w2=$(qtgt "SELECT COUNT(*) FROM w2")"
  stop_procs
  drop_schema
  for d in "$src_dir" "$tgt_dir"; do bash scripts/mariadb.sh stop "$d" >/dev/null 2>&1 || true; done
  keep=()
  for d in "${servers[@]}"; do [[ $d == "$src_dir" || $d == "$tgt_dir" ]] || keep+=("$d"); done
  servers=("${keep[@]}")
}

for s in "${selected[@]}"; do
  echo
  echo "==== section $s ===="
  start=$SECONDS
  log=$logs/$s-$(date +%Y%m%d-%H%M%S).log
  start_server
  # Not a pipeline: the section must run in this shell (its processes, its results).
  "section_$s" > >(tee "$log") 2>&1
  stop_server
  echo "==== section $s done in $((SECONDS - start)) s (load $(cut -d' ' -f1-3 /proc/loadavg)) ===="
done

# ---- summary ------------------------------------------------------------------------
echo
echo "==== summary"
printf '%s\n' "${setup[@]}"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end"
printf '%s\n' "${results[@]}" | awk '!seen[$0]++'

# The ratios of issue 6, from what this invocation measured.
pick() {  # pick SECTION-FILTER KEY: KEY of the first RESULT line matching the filter
  printf '%s\n' "${results[@]}" | grep -E "$1" | head -1 | sed -nE "s/.*(^| )$2=([^ ]*).*/\2/p" || true
}
e1=$(pick '^RESULT e2e steps=1 ' events_per_s)
e3=$(pick '^RESULT e2e steps=3 ' events_per_s)
w1=$(pick '^RESULT e2e steps=1 ' row_writes_per_s)
c1=$(pick '^RESULT e2e steps=1 ' commits_per_s)
pg=$(printf '%s\n' "${results[@]}" | grep '^RESULT pgboss ' | sed -nE 's/.* jobs_per_s=([0-9]+).*/\1/p' | sort -g | tail -1 || true)
sb_tps=$(printf '%s\n' "${results[@]}" | grep '^RESULT sysbench ' | sed -nE 's/.* tps=([0-9]+).*/\1/p' | sort -g | tail -1 || true)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
meets() { awk -v v="$1" -v t="$2" 'BEGIN { print (v <= t ? "met" : "missed") }'; }
if [[ -n $e1 && -n $pg ]]; then
  echo "RATIO dsync 1-step events/s / pg-boss jobs/s (best batch) = $e1 / $pg = $(ratio "$e1" "$pg") (target >= 1.0)"
fi
if [[ -n $e3 ]]; then
  echo "TARGET dsync 3-step events/s = $e3 (target >= 3000: $(awk -v v="$e3" 'BEGIN { print (v >= 3000 ? "met" : "missed") }'))"
fi
if [[ -n $w1 && -n $sb_tps ]]; then
  echo "RATIO dsync 1-step row writes/s / sysbench TPS (best of 1/4/8 threads) = $w1 / $sb_tps = $(ratio "$w1" "$sb_tps")"
  echo "RATIO dsync 1-step commits/s / sysbench TPS (best of 1/4/8 threads) = $c1 / $sb_tps = $(ratio "$c1" "$sb_tps")"
fi
# The database's own ceiling for dsync's row writes: shape=exact (dsync's own write set
# and statement shape) is the apples-to-apples one; the minimal shape (fewest writes,
# best of its two transaction shapes) is printed for reference.
ceiling_rate() {  # ceiling_rate STEPS SHAPE: the best events/s of that shape's RESULT lines
  printf '%s\n' "${results[@]}" | grep -E "^RESULT ceiling steps=$1 .*shape=$2 " |
    sed -nE 's/.* events_per_s=([0-9]+).*/\1/p' | sort -g | tail -1 || true
}
ce1=$(ceiling_rate 1 exact)
ce3=$(ceiling_rate 3 exact)
cm1=$(ceiling_rate 1 minimal)
cm3=$(ceiling_rate 3 minimal)
if [[ -n $ce1 ]]; then
  [[ -n $e1 ]] && echo "RATIO dsync 1-step events/s / the database's ceiling for its row writes (shape=exact) = $e1 / $ce1 = $(ratio "$e1" "$ce1")"
  [[ -n $pg ]] && echo "RATIO the database's 1-step ceiling (shape=exact) / pg-boss jobs/s = $ce1 / $pg = $(ratio "$ce1" "$pg")" \
    "(below 1.0: the 1.0x pg-boss target is above what these row writes allow on this machine)"
fi
if [[ -n $ce3 ]]; then
  [[ -n $e3 ]] && echo "RATIO dsync 3-step events/s / the database's ceiling for its row writes (shape=exact) = $e3 / $ce3 = $(ratio "$e3" "$ce3")"
  echo "TARGET the database's 3-step ceiling (shape=exact) = $ce3 events/s (the 3,000 target is $(awk -v v="$ce3" 'BEGIN { print (v >= 3000 ? "within" : "above") }') it)"
fi
for k in 1 3; do
  cm=cm$k ce=ce$k
  [[ -n ${!cm} ]] || continue
  ref_line="REFERENCE minimal ceiling $k-step = ${!cm} events/s (4+3K row writes, no fences, best of tx=per_stage/per_batch)"
  [[ -n ${!ce} ]] && ref_line+="; exact / minimal = ${!ce} / ${!cm} = $(ratio "${!ce}" "${!cm}")"
  echo "$ref_line"
done
# Issue 19: the capacity sweep against pg-boss's best, and its latency targets.
# ratio_target CAP: issue 19's target for that capacity's ratio to pg-boss, or nothing.
ratio_target() {
  case $1 in
    16) echo " (target >= 1.0)" ;;
    256) echo " (target >= 1.3)" ;;
  esac
}
while read -r line; do
  [[ -n $line ]] || continue
  cap=$(sed -nE 's/.* capacity=([0-9]+) .*/\1/p' <<<"$line")
  mode=$(sed -nE 's/.* wakeups=([a-z]+) .*/\1/p' <<<"$line")
  rate=$(sed -nE 's/.* events_per_s=([0-9]+).*/\1/p' <<<"$line")
  p50=$(sed -nE 's/.* p50_ms=([0-9.]+).*/\1/p' <<<"$line")
  p99=$(sed -nE 's/.* p99_ms=([0-9.]+).*/\1/p' <<<"$line")
  target=$(ratio_target "$cap")
  [[ -n $pg ]] && echo "RATIO capacity $cap wake-ups $mode: 1-step events/s / pg-boss jobs/s = $rate / $pg = $(ratio "$rate" "$pg")$target"
  echo "TARGET capacity $cap wake-ups $mode: pending->running at half load p50 $p50 ms (<= 5: $(meets "$p50" 5)), p99 $p99 ms (<= 50: $(meets "$p99" 50))"
  wp50=$(field producer_woken_p50_ms "$line")
  wp99=$(field producer_woken_p99_ms "$line")
  [[ -n $wp50 ]] && echo "TARGET capacity $cap wake-ups $mode, producer waking the dispatcher: p50 $wp50 ms (<= 5: $(meets "$wp50" 5)), p99 $wp99 ms (<= 50: $(meets "$wp99" 50))"
done < <(printf '%s\n' "${results[@]}" | grep '^RESULT capacity capacity=' || true)
while read -r line; do
  [[ -n $line ]] || continue
  cap=$(field capacity "$line")
  target=$(ratio_target "$cap")
  work=$(field work "$line")
  echo "RATIO capacity $cap work ${work:-demo}, paired runs: median of $(field pairs "$line") pairs' dsync events/s / pg-boss jobs/s = $(field ratio_median "$line")$target (pg-boss work $(field pgboss_work "$line"); pairs: $(field ratios "$line"))"
  [[ -n $ce1 && ${work:-demo} == demo ]] && echo "RATIO capacity $cap work demo, paired: dsync events/s / the database's 1-step ceiling (shape=exact) = $(field dsync_events_per_s "$line") / $ce1 = $(ratio "$(field dsync_events_per_s "$line")" "$ce1") (target >= 0.85)"
  [[ -n $(field a_over_b_median "$line") ]] && echo "RATIO capacity $cap work ${work:-demo}: this build / DSYNC_BENCH_PAIRED_BIN_B = $(field a_over_b_median "$line") (median; pairs $(field a_over_b "$line"); target >= 0.95); burn-down alone $(field a_over_b_process_median "$line") (pairs $(field a_over_b_process "$line")); MariaDB CPU us per event $(field cpu_us_per_event_mariadb "$line") vs $(field b_cpu_us_per_event_mariadb "$line"), row writes per event $(field row_writes_per_event "$line") vs $(field b_row_writes_per_event "$line")"
  [[ -n $(field shipped_defaults_events_per_s "$line") ]] && echo "REFERENCE capacity $cap work ${work:-demo}: with the shipped poll intervals $(field shipped_defaults_events_per_s "$line") events/s (paired runs at 20 ms: $(field dsync_events_per_s "$line"))"
done < <(printf '%s\n' "${results[@]}" | grep '^RESULT paired ' || true)
while read -r line; do
  [[ -n $line ]] || continue
  echo "TARGET fairness enabled=$(field enabled "$line"): B's 100 events beside A's $(field backlog "$line") in $(field b_ms "$line") ms, $(field b_over_alone "$line")x their time alone ($(field b_alone_ms "$line") ms; <= 2x with fairness on)"
done < <(printf '%s\n' "${results[@]}" | grep '^RESULT fairness ' || true)
lat50=$(pick '^RESULT latency ' p50_ms)
lat99=$(pick '^RESULT latency ' p99_ms)
fo=$(pick '^RESULT failover ' seconds)
rss=$(pick '^RESULT rss ' vmhwm_mib)
[[ -n $lat50 ]] && echo "TARGET pending->running at half load: p50 $lat50 ms (<= 50: $(meets "$lat50" 50)), p99 $lat99 ms (<= 250: $(meets "$lat99" 250))"
g1=$(pick '^RESULT galera target=single steps=1 ' events_per_s)
gf1=$(pick '^RESULT galera target=galera_failover steps=1 ' events_per_s)
g3=$(pick '^RESULT galera target=single steps=3 ' events_per_s)
gf3=$(pick '^RESULT galera target=galera_failover steps=3 ' events_per_s)
[[ -n $g1 && -n $gf1 ]] && echo "RATIO galera (all through member 1) / single server, 1-step = $gf1 / $g1 = $(ratio "$gf1" "$g1"); 3-step = $gf3 / $g3 = $(ratio "$gf3" "$g3")"
[[ -n $fo ]] && echo "TARGET failover $fo s (<= offline timeout 3 s + 2 s: $(meets "$fo" 5))"
[[ -n $rss ]] && echo "TARGET node peak RSS with 1,000 in flight $rss MiB (<= 64: $(meets "$rss" 64))"
pr=$(pick '^RESULT purge ' ratio)
[[ -n $pr ]] && echo "TARGET burn-down events/s with the retention purge running / without = $pr (>= 0.90: $(awk -v v="$pr" 'BEGIN { print (v >= 0.9 ? "met" : "missed") }'))"
sl=$(printf '%s\n' "${results[@]}" | grep -E '^RESULT slowclients idle=[1-9]' | head -1 || true)
if [[ -n $sl ]]; then
  sl99=$(field healthz_p99_ms "$sl")
  echo "TARGET /healthz with $(field idle "$sl") idle + $(field slowloris "$sl") slowloris connections: p99 $sl99 ms (<= 100: $(meets "$sl99" 100))"
fi
echo "logs:     $logs"
