# Shared helpers for the command-line tests (sourced, not run).
# Needs DSYNC_BIN (the binary) and DSYNC_TEST_DB_URL (a throwaway server, from
# scripts/test.sh). Every test gets its own schema and stops what it started.
set -euo pipefail

: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest)}"
: "${DSYNC_TEST_DB_URL:?DSYNC_TEST_DB_URL is not set: run via scripts/test.sh}"

# mysql://user:pass@host:port/schema -> parts
_url=${DSYNC_TEST_DB_URL#mysql://}
DB_USER=${_url%%:*}; _url=${_url#*:}
DB_PASS=${_url%%@*}; _url=${_url#*@}
DB_HOST=${_url%%:*}; _url=${_url#*:}
DB_PORT=${_url%%/*}

SCHEMA="cli_$(basename "${BASH_SOURCE[1]}" .sh)_$$"
DB_URL="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/$SCHEMA"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsync-cli.XXXXXX")
STARTED_PIDS=()

sql() {  # sql "SELECT ..." -> tab-separated rows, no headers
  MYSQL_PWD=$DB_PASS mariadb -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SCHEMA" -e "$1"
}

cleanup() {
  local pid
  for pid in "${STARTED_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" -e "DROP DATABASE IF EXISTS \`$SCHEMA\`" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

expect_eq() {  # expect_eq ACTUAL EXPECTED WHAT
  [[ "$1" == "$2" ]] || fail "$3: expected '$2', got '$1'"
  pass "$3"
}

# wait_for "shell condition" TIMEOUT_S WHAT
wait_for() {
  local deadline=$((SECONDS + $2))
  until eval "$1"; do
    ((SECONDS < deadline)) || fail "timed out after $2 s waiting for: $3"
    sleep 0.1
  done
}

# start_bg NAME cmd...: runs a process in the background, logs to $WORK/NAME.log,
# records its PID (the only processes this test ever signals).
start_bg() {
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  local pid=$!
  STARTED_PIDS+=("$pid")
  eval "PID_$name=$pid"
}
