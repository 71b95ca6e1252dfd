#!/usr/bin/env bash
# Bad input gives one line on stderr and a non-zero exit: malformed URL, unreachable
# database, wrong password, unknown config key, heartbeat interval too long for the
# timeout, non-JSON config, unknown command/option, bad flag values, missing schema.
source "$(dirname "$0")/lib.sh"

# expect_error EXPECTED_FRAGMENT cmd...: non-zero exit, exactly one stderr line
# containing the fragment, and never the test password.
expect_error() {
  local fragment=$1; shift
  local rc=0
  "$@" >"$WORK/out" 2>"$WORK/err" < /dev/null || rc=$?
  ((rc != 0)) || fail "exit 0 for: $*"
  local lines
  lines=$(wc -l < "$WORK/err")
  [[ $lines == 1 ]] || fail "expected one stderr line for '$*', got $lines: $(cat "$WORK/err")"
  grep -qF -- "$fragment" "$WORK/err" || fail "expected '$fragment' for '$*', got: $(cat "$WORK/err")"
  if grep -qF -- "$DB_PASS" "$WORK/err"; then fail "password in error: $(cat "$WORK/err")"; fi
  pass "$fragment (exit $rc)"
}

"$DSYNC_BIN" migrate --db "$DB_URL" >/dev/null

expect_error "bad database URL: missing mysql:// scheme" "$DSYNC_BIN" migrate --db "not-a-url"
expect_error "unknown option 'colour'" "$DSYNC_BIN" migrate --db "$DB_URL?colour=red"
expect_error "Can't connect" "$DSYNC_BIN" migrate --db "mysql://$DB_USER:$DB_PASS@127.0.0.1:1/$SCHEMA?connect_timeout_ms=1000"
expect_error "Access denied" "$DSYNC_BIN" nodes --db "mysql://$DB_USER:wrong$DB_PASS@$DB_HOST:$DB_PORT/$SCHEMA"
expect_error "no database: pass --db" env -u DSYNC_DB_URL "$DSYNC_BIN" nodes
expect_error "run \`dsync migrate\`" "$DSYNC_BIN" nodes --db "mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT/mysql"

echo '{"database": "x", "topics": {}, "registry": {"heartbeat_intervall_ms": 5}}' > "$WORK/unknown.json"
expect_error "registry.heartbeat_intervall_ms" "$DSYNC_BIN" nodes --config "$WORK/unknown.json"
echo '{"topics": {"T": {"steps": [{"name": "s", "type": "demo"}]}}, "registry": {"heartbeat_interval_ms": 20000, "offline_timeout_ms": 30000}}' > "$WORK/interval.json"
expect_error "heartbeat_interval_ms" "$DSYNC_BIN" node --db "$DB_URL" --config "$WORK/interval.json"
echo '{"database": "mysql://a@b/c", "topics": ' > "$WORK/broken.json"
expect_error "not valid JSON" "$DSYNC_BIN" nodes --config "$WORK/broken.json"
expect_error "cannot read" "$DSYNC_BIN" nodes --config "$WORK/does-not-exist.json"
expect_error "DSYNC_REGISTRY_OFFLINE_TIMEOUT_MS" env DSYNC_REGISTRY_OFFLINE_TIMEOUT_MS=soon "$DSYNC_BIN" nodes --db "$DB_URL"

expect_error "unknown command 'launch'" "$DSYNC_BIN" launch
expect_error "unknown option --capacty" "$DSYNC_BIN" node --capacty 3
expect_error "--capacity must be an integer from 1 to 10000" "$DSYNC_BIN" node --db "$DB_URL" --capacity lots
expect_error "--prefetch must be an integer from -1 to 10000" "$DSYNC_BIN" node --db "$DB_URL" --prefetch -2
expect_error "--prefetch must be an integer from -1 to 10000" "$DSYNC_BIN" all --db "$DB_URL" --prefetch many
expect_error "DSYNC_CONSUMER_PREFETCH" env DSYNC_CONSUMER_PREFETCH=-5 "$DSYNC_BIN" node --db "$DB_URL"
echo '{"topics": {"T": {"steps": [{"name": "s", "type": "demo"}]}}, "dispatcher": {"poll_interval_ms": 50, "busy_interval_ms": 60}}' > "$WORK/busy.json"
expect_error "dispatcher.busy_interval_ms (60) must be at most dispatcher.poll_interval_ms (50)" "$DSYNC_BIN" dispatcher --db "$DB_URL" --config "$WORK/busy.json"
expect_error "--node-address must be HOST:PORT" "$DSYNC_BIN" node --db "$DB_URL" --node-address nohost
expect_error "log_level: expected one of trace|debug|info|warn|error|off, got 'loud'" "$DSYNC_BIN" nodes --db "$DB_URL" --log-level loud
expect_error "--topics: unknown topic 'NOPE'" "$DSYNC_BIN" node --db "$DB_URL" --node-address h:1 \
  --config "$(dirname "$0")/../../config/dsync.example.json" --topics NOPE

# Help and version work without a database.
"$DSYNC_BIN" --help | grep -q "usage: dsync COMMAND" || fail "dsync --help"
"$DSYNC_BIN" node --help | grep -q -- "--node-address" || fail "dsync node --help"
"$DSYNC_BIN" --version | grep -q "^dsync " || fail "dsync --version"
pass "help and version"
