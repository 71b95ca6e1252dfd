#!/usr/bin/env bash
# The README's first command, in the test suite: scripts/demo.sh with the binary
# under test (no second build). The demo verifies itself with SQL (env_b equals
# env_a for every synced space, the poisoned space left as it was, nothing lost)
# and exits non-zero when any check fails.
set -euo pipefail
: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest)}"
: "${DSYNC_SOURCE_DIR:?DSYNC_SOURCE_DIR is not set: run via ctest}"
DSYNC_DEMO_BIN=$DSYNC_BIN bash "$DSYNC_SOURCE_DIR/scripts/demo.sh"
