#!/usr/bin/env bash
# The Galera suite (ctest galera_e2e, label galera): a throwaway 3-member cluster of
# its own (scripts/galera.sh), then, against the URL naming its three members:
#   1. galera_storage_test (gtest): pool failover and readiness, certification
#      conflicts retried, the migrator's lock across members, session settings, a
#      member kill -9'd and rejoining by IST;
#   2. tests/cli/saga_e2e_test.sh, unchanged: the saga end-to-end test through the
#      cluster (dsync processes get the member list; the test's own SQL goes to member 1).
# The chaos run on Galera is its own ctest (galera_chaos: chaos_test.sh, CHAOS_GALERA=1).
# Needs DSYNC_BIN and GALERA_STORAGE_TEST (the gtest binary); stops the cluster even on failure.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest)}"
: "${GALERA_STORAGE_TEST:?GALERA_STORAGE_TEST is not set: run via ctest}"

t0=$(date +%s)
DSYNC_GALERA_DIR=$(bash "$SRC/scripts/galera.sh" start)
trap 'bash "$SRC/scripts/galera.sh" stop "$DSYNC_GALERA_DIR"' EXIT
DSYNC_TEST_DB_URL=$(bash "$SRC/scripts/galera.sh" url "$DSYNC_GALERA_DIR")
export DSYNC_GALERA_DIR DSYNC_TEST_DB_URL DSYNC_SOURCE_DIR=$SRC
echo "cluster of 3 up in $(( $(date +%s) - t0 )) s"

"$GALERA_STORAGE_TEST"
bash "$SRC/tests/cli/saga_e2e_test.sh"
bash "$SRC/scripts/galera.sh" status "$DSYNC_GALERA_DIR"
echo "ok: galera suite passed in $(( $(date +%s) - t0 )) s"
