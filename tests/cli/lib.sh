# Shared helpers for the command-line tests (sourced, not run).
# Needs DSYNC_BIN (the binary) and DSYNC_TEST_DB_URL (a throwaway server, from
# scripts/test.sh). Every test gets its own schema and stops what it started.
set -euo pipefail

: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest)}"
: "${DSYNC_TEST_DB_URL:?DSYNC_TEST_DB_URL is not set: run via scripts/test.sh}"

# mysql://user:pass@host:port[,host:port...]/schema -> parts. The `mariadb` client
# below talks to the first host; dsync gets the whole list (DB_HOSTS) in DB_URL.
_url=${DSYNC_TEST_DB_URL#mysql://}
DB_USER=${_url%%:*}; _url=${_url#*:}
DB_PASS=${_url%%@*}; _url=${_url#*@}
DB_HOSTS=${_url%%/*}; _url=${DB_HOSTS%%,*}
DB_HOST=${_url%%:*}
DB_PORT=${_url#*:}

SCHEMA="cli_$(basename "${BASH_SOURCE[1]}" .sh)_$$"
DB_URL="mysql://$DB_USER:$DB_PASS@$DB_HOSTS/$SCHEMA"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsync-cli.XXXXXX")
STARTED_PIDS=()

sql() {  # sql "SELECT ..." -> tab-separated rows, no headers
  MYSQL_PWD=$DB_PASS mariadb -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SCHEMA" -e "$1"
}

cleanup() {
  local pid
  for pid in "${STARTED_PIDS[@]}"; do
    { kill -9 "$pid" && wait "$pid"; } 2>/dev/null || true
  done
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

# free_port, free_ports N, port_busy P: loopback ports below the ephemeral range.
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/ports.sh"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# wait_for "shell condition" TIMEOUT_S WHAT   (TIMEOUT_S may be fractional)
wait_for() {
  local deadline=$(( $(now_ms) + $(awk "BEGIN { print int($2 * 1000) }") ))
  until eval "$1"; do
    (( $(now_ms) < deadline )) || fail "timed out after $2 s waiting for: $3"
    sleep 0.05
  done
}

# kill9 PID: kill -9 one of our processes and reap it quietly.
kill9() { { kill -9 "$1" && wait "$1"; } 2>/dev/null || true; }

# start_bg NAME cmd...: runs a process in the background, logs to $WORK/NAME.log,
# records its PID (the only processes this test ever signals).
start_bg() {
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  local pid=$!
  STARTED_PIDS+=("$pid")
  eval "PID_$name=$pid"
}

# The saga-order invariant (docs/event-lifecycle.md "Invariants checked by tests") over every event of the schema,
# in SQL: prints the number of violating (event, rule) rows; 0 is good.
#  - a SUCCESS event has only SUCCESS steps;
#  - a COMPENSATED event has no step left SUCCESS/EXECUTING/COMPENSATING;
#  - compensated steps are a prefix of the plan (no PENDING/FAILED step before one);
#  - compensations ran in exact reverse order (a later step never compensated after
#    an earlier one).
saga_violations() {
  sql "
SELECT
 (SELECT COUNT(*) FROM distribute_event e JOIN distribute_event_step s ON s.job_code = e.code
   WHERE s.parent_step_id IS NULL AND e.status = 'SUCCESS' AND s.status <> 'SUCCESS')
+(SELECT COUNT(*) FROM distribute_event e JOIN distribute_event_step s ON s.job_code = e.code
   WHERE s.parent_step_id IS NULL AND e.status = 'COMPENSATED'
     AND s.status IN ('SUCCESS', 'EXECUTING', 'COMPENSATING'))
+(SELECT COUNT(*) FROM distribute_event_step c JOIN distribute_event_step p
     ON p.job_code = c.job_code AND p.sort < c.sort
   WHERE c.parent_step_id IS NULL AND p.parent_step_id IS NULL
     AND c.status = 'COMPENSATED' AND p.status IN ('PENDING', 'FAILED', 'EXECUTING'))
+(SELECT COUNT(*) FROM distribute_event_step a JOIN distribute_event_step b
     ON b.job_code = a.job_code AND a.sort < b.sort
   WHERE a.parent_step_id IS NULL AND b.parent_step_id IS NULL
     AND a.status = 'COMPENSATED' AND b.status = 'COMPENSATED' AND a.compensated_at < b.compensated_at)"
}

# produce CODE PAYLOAD_JSON [TOPIC]: the seed's plain-SQL producer.
produce() {
  local topic=${3:-DEMO}
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
       VALUES ('t1', '$1', '$1', '$topic', '$2')"
}

event_status() { sql "SELECT status FROM distribute_event WHERE code = '$1'"; }

# History without gaps (issue 16 item 5): every event's process_log is a chain of
# {"from","to"} transitions, each entry's `from` the previous entry's `to`, the first
# from PENDING (unless the 20-entry window dropped older ones, or the row was written
# with another status by hand: $1, a SQL condition, names those events), and the last
# `to` the event's status now. An event that left PENDING without any entry is a gap
# too. Prints the offending codes (none: the history is whole).
process_log_gaps() {
  local by_hand=${1:-FALSE}
  sql "SELECT JSON_OBJECT('code', code, 'status', status, 'by_hand', ($by_hand) IS TRUE,
                          'log', IF(JSON_VALID(process_log), JSON_EXTRACT(process_log, '\$'), NULL))
       FROM distribute_event" | jq -rs '
    .[] | select(
      (.log == null and .status != "PENDING" and .by_hand != true) or
      (.log != null and (
        (.log | length) == 0 or
        .log[-1].to != .status or
        ((.log | length) < 20 and .by_hand != true and .log[0].from != "PENDING") or
        ([range(1; .log | length) as $i | select(.log[$i].from != .log[$i - 1].to)] | length) > 0))
    ) | .code'
}

# write_config SERVICE TOPICS [MERGE...]: the config file ($CONFIG_FILE, default
# $WORK/dsync.json) for SERVICE with TOPICS (the "topics" object, JSON) and the short
# intervals the tests share: heartbeats every 300 ms, offline after 1.5 s, polls every
# 50 ms. Each MERGE, a JSON object, is merged over the result in turn (jq's `*`), so
# '{"consumer": {"capacity": 2}}' changes that one field and keeps the others.
write_config() {
  local service=$1 topics=$2
  shift 2
  jq -n --arg db "$DB_URL" --arg service "$service" --argjson topics "$topics" 'reduce
    ($ARGS.positional[] | fromjson) as $merge ({
      database: $db, service: $service,
      registry:   {heartbeat_interval_ms: 300, offline_timeout_ms: 1500, sweep_interval_ms: 250},
      dispatcher: {poll_interval_ms: 50, idle_interval_ms: 200, lease_ttl_ms: 3000},
      consumer:   {poll_interval_ms: 50, drain_timeout_ms: 3000},
      topics: $topics
    }; . * $merge)' --args "$@" \
    >"${CONFIG_FILE:-$WORK/dsync.json}" || fail "write_config: bad JSON for service $service"
}

# start_node NAME PORT [ARGS...]: `dsync node` at 127.0.0.1:PORT with $WORK/dsync.json,
# in the background (PID_NAME, log $WORK/NAME.log).
start_node() {
  local name=$1 port=$2
  shift 2
  start_bg "$name" "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$port" "$@"
}

# with_datasources: two new schemas on the test server, SRC and TGT (dropped at exit),
# and DATASOURCES, a config member naming them env_a and env_b (for write_config's
# MERGE). `dbq SCHEMA "SQL"` queries either; `on_both "SQL"` runs SQL in both.
with_datasources() {
  SRC="${SCHEMA}_a"
  TGT="${SCHEMA}_b"
  local base="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT"
  DATASOURCES="{\"datasources\": {\"env_a\": \"$base/$SRC\", \"env_b\": \"$base/$TGT\"}}"
  trap 'cleanup; drop_datasources' EXIT
  MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" \
    -e "CREATE DATABASE \`$SRC\`; CREATE DATABASE \`$TGT\`"
}
drop_datasources() {
  MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" \
    -e "DROP DATABASE IF EXISTS \`$SRC\`; DROP DATABASE IF EXISTS \`$TGT\`" 2>/dev/null || true
}
dbq() {  # dbq SCHEMA "SQL" -> tab-separated rows, no headers
  MYSQL_PWD=$DB_PASS mariadb -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$1" -e "$2"
}
on_both() { dbq "$SRC" "$1" && dbq "$TGT" "$1"; }

# big_tables ROWS: table `big` (id, grp, name, at) in SRC and TGT (with_datasources):
# ROWS rows in SRC; in TGT an older copy, every row different and 10 % missing.
big_tables() {
  on_both "CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3))"
  dbq "$SRC" "INSERT INTO big SELECT seq, 1, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND FROM seq_1_to_$1"
  dbq "$TGT" "INSERT INTO big SELECT seq, 1, CONCAT('old ', seq), NULL FROM seq_1_to_$1 WHERE seq % 10 <> 7"
}

# start_dispatch NODE PORT: migrates, starts a dispatcher (PID_disp) and node NODE at
# 127.0.0.1:PORT with $WORK/dsync.json, and waits until the node is online.
start_dispatch() {
  "$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
  start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
  start_node "$1" "$2"
  wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '127.0.0.1:$2'\") == 1 ]]" 15 "node $1 online"
}
