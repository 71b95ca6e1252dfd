#!/usr/bin/env bash
# The benchmark command (benchmarks are not tests: nothing here is run by ctest).
# Installs what is missing, builds the bench programs, starts a throwaway MariaDB, runs
# the selected sections one after another and prints their figures with the setup they
# were measured on. The server is stopped even on failure.
#
#   bash scripts/bench.sh              # every section
#   bash scripts/bench.sh dispatch     # only the named sections
#   DSYNC_BENCH_DISPATCH_ARGS="--runs 1 --terminal 200000" bash scripts/bench.sh dispatch
#
# Sections (each a function section_<name> below, listed in `sections`):
#   dispatch   dispatcher assignments/s and cycle latency, 100k pending over 8 nodes,
#              with 0 and 1M terminal rows, plus the EXPLAIN of every dispatch and
#              sweeper query (bench/dispatch_bench.cc; figures in bench/RESULTS.md)
# To add one (end-to-end throughput, latency, failover, RSS, sysbench, pg-boss: issue 6):
# write section_<name> (it gets $build, $dir, $url; extra packages via
# `bash scripts/setup.sh PKG...`), append <name> to `sections`, and have it print its
# figures as `RESULT <name> key=value ...` lines: those are repeated in the summary.
#
# Output: everything on stdout, and a copy in $build/bench-logs/<section>-<time>.log.
# The machine's load matters (2 cores here): a warning is printed when other work runs.
set -euo pipefail
cd "$(dirname "$0")/.."

sections=(dispatch)

die() { echo "bench.sh: $*" >&2; exit 2; }

selected=("$@")
((${#selected[@]} > 0)) || selected=("${sections[@]}")
for s in "${selected[@]}"; do
  [[ " ${sections[*]} " == *" $s "* ]] || die "unknown section '$s' (known: ${sections[*]})"
done

grep -Eq '^[[:space:]]*add_subdirectory\(bench[[:space:])]' CMakeLists.txt ||
  die "CMakeLists.txt does not add_subdirectory(bench) yet: add that line, then run again"

bash scripts/setup.sh
build=${DSYNC_BENCH_BUILD_DIR:-build-bench}
echo "== building ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target dsync_dispatch_bench >/dev/null
logs=$build/bench-logs
mkdir -p "$logs"

dir=$(bash scripts/mariadb.sh start)
trap 'bash scripts/mariadb.sh stop "$dir"' EXIT
url=$(bash scripts/mariadb.sh url "$dir")
sql() { bash scripts/mariadb.sh root "$dir" -N -B -e "$1"; }

# ---- setup ------------------------------------------------------------------------
# Let the load of the build settle first (on 2 cores a compile in the last minute
# drags the first runs down): wait while the 1-minute load exceeds half the cpus, for
# at most DSYNC_BENCH_SETTLE_S seconds (default 90).
busy() { awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v n="$(nproc)" 'BEGIN { exit !(l > n / 2) }'; }
for _ in $(seq 1 "${DSYNC_BENCH_SETTLE_S:-90}"); do busy || break; sleep 1; done
read -r server_version flush_commit buffer_pool_mb < <(
  sql "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size DIV 1048576")
cpu_model=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
setup=(
  "date:     $(date -u +%Y-%m-%dT%H:%M:%SZ)   commit $commit"
  "cpus:     $(nproc) (${cpu_model:-unknown})"
  "memory:   $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
  "mariadb:  $server_version   innodb_flush_log_at_trx_commit=$flush_commit   innodb_buffer_pool_size=${buffer_pool_mb}M"
  "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
)
echo "== setup"
printf '%s\n' "${setup[@]}"
if busy; then
  echo "WARNING: load average $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cpus: other work is running;" \
    "figures will be low and noisy"
fi

# ---- sections -----------------------------------------------------------------------
results=()

section_dispatch() {
  local log
  log=$logs/dispatch-$(date +%Y%m%d-%H%M%S).log
  # shellcheck disable=SC2086  # word splitting of the extra arguments is intended
  "$build/bench/dsync_dispatch_bench" --db "$url" --source-dir "$PWD" ${DSYNC_BENCH_DISPATCH_ARGS:-} |
    tee "$log"
  mapfile -t -O "${#results[@]}" results < <(grep '^RESULT ' "$log")
}

for s in "${selected[@]}"; do
  echo
  echo "==== section $s ===="
  start=$SECONDS
  "section_$s"
  echo "==== section $s done in $((SECONDS - start)) s ===="
done

# ---- summary ------------------------------------------------------------------------
echo
echo "==== summary"
printf '%s\n' "${setup[@]}"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end"
printf '%s\n' "${results[@]}"
echo "logs:     $logs"
