#!/usr/bin/env bash
# The test command: installs what is missing, builds, starts a throwaway MariaDB,
# runs every test (unit, integration, CLI) against it, and stops it even on failure.
# Exit status is non-zero on any failure.
#
#   bash scripts/test.sh            # everything
#   bash scripts/test.sh -R Registry   # extra arguments go to ctest
#   DSYNC_TEST_JOBS=2 bash scripts/test.sh   # tests run at once (default: two per core)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
build=${DSYNC_BUILD_DIR:-build}
DSYNC_BUILD_DIR=$build bash scripts/build.sh

# The throwaway servers' datadirs (this one, and those tests start themselves through
# scripts/mariadb.sh and scripts/galera.sh) go in memory, /dev/shm, when it has room for
# the suite's servers (scripts/mariadb_common.sh, servers_in_memory): on this machine's
# disk each commit's and each DDL's fsync cost most of the suite's time (a schema's 29
# migrations: 4.8 s on disk, 0.15 s in memory; it_saga_engine_test: 41 s against 7 s).
# What the tests claim holds the same: a process killed with -9 loses nothing its
# database committed; only a crash of the machine would tell the two apart, and no test
# makes one. DSYNC_DB_TMPDIR overrides (DSYNC_DB_TMPDIR=/tmp: on disk).
source scripts/mariadb_common.sh
servers_in_memory 8
echo "test.sh: throwaway servers' datadirs in ${DSYNC_DB_TMPDIR:-${TMPDIR:-/tmp}}" >&2
dir=$(bash scripts/mariadb.sh start)
trap 'bash scripts/mariadb.sh stop "$dir"' EXIT
export DSYNC_TEST_DB_URL
DSYNC_TEST_DB_URL=$(bash scripts/mariadb.sh url "$dir")
export DSYNC_TEST_MARIADB_DIR=$dir
export DSYNC_BIN=$(cd "$build" && pwd)/dsync

# Tests spend most of their time waiting (on the database, on processes they start, on
# timeouts they provoke): the suite used about a third of 2 cores at -j2, so it runs two
# tests per core (DSYNC_TEST_JOBS overrides), longest first (tests/CMakeLists.txt,
# DSYNC_TEST_SECONDS). On 2 cores: 398 s at -j3, 348 s at -j4 (bench/RESULTS.md, section 8).
jobs=${DSYNC_TEST_JOBS:-$(($(nproc) * 2))}
ctest --test-dir "$build" --output-on-failure --timeout 600 -j"$jobs" "$@"
