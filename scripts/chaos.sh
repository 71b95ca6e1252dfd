#!/usr/bin/env bash
# The chaos suite, long form: 5,000 three-step demo events with scripted fates through
# 2 dispatchers and 4 consumer nodes, with kill -9 of a random node every 2-3 s, a
# kill -9 of the leading dispatcher, a frozen node (SIGSTOP past the offline
# timeout) and a MariaDB crash and restart; then every event checked with SQL.
# What is checked and why the checks can fail: tests/chaos/chaos_test.sh (its short
# form, 600 events, runs inside scripts/test.sh under the ctest label `chaos`).
#
#   bash scripts/chaos.sh                    # installs what is missing, builds, runs
#   CHAOS_EVENTS=20000 bash scripts/chaos.sh # other knobs: CHAOS_RATE, CHAOS_CAPACITY,
#                                            # CHAOS_SLEEP_MS, CHAOS_QUIESCE_S
#
# Prints progress, then one summary line
#   events=5000 kills=… db_restarts=1 freezes=1 lost=0 double_owner=0 saga_violations=0 ledger_mismatches=0 …
# and exits non-zero on any violation. The processes' logs are kept in
# ${CHAOS_KEEP_DIR:-/tmp/dsync-chaos-logs.<pid>}.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
build=${DSYNC_BUILD_DIR:-build}
[[ $build == /* ]] || build=$PWD/$build
DSYNC_BUILD_DIR=$build bash scripts/build.sh dsync

export DSYNC_BIN=$build/dsync
export CHAOS_EVENTS=${CHAOS_EVENTS:-5000}
export CHAOS_RATE=${CHAOS_RATE:-40}
export CHAOS_QUIESCE_S=${CHAOS_QUIESCE_S:-300}
export CHAOS_KEEP_DIR=${CHAOS_KEEP_DIR:-${TMPDIR:-/tmp}/dsync-chaos-logs.$$}
echo "chaos: $CHAOS_EVENTS events at $CHAOS_RATE/s; process logs in $CHAOS_KEEP_DIR"
exec bash tests/chaos/chaos_test.sh
