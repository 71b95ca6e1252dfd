#!/usr/bin/env bash
# Issue 19 acceptance through real processes and a real MariaDB: with every poll
# interval long (3-5 s),
#   1. an event produced with `dsync produce` runs within milliseconds: the CLI wakes
#      the dispatcher, the dispatcher wakes the node (started_time - create_time on the
#      database clock);
#   2. with the node's wake-ups blocked (it listens elsewhere, so datagrams to its
#      address hit a closed port) every event still completes, by polling;
#   3. a flood of thousands of forged wake-ups to a node's port adds at most about one
#      poll per poll interval to its own (its poll counter in NODE_STOPPED).
source "$(dirname "$0")/lib.sh"

POLL_MS=3000
cat > "$WORK/dsync.json" <<JSON
{
  "database": "$DB_URL",
  "service": "wakeup-test",
  "registry":   { "heartbeat_interval_ms": 1000, "offline_timeout_ms": 5000, "sweep_interval_ms": 1000 },
  "dispatcher": { "poll_interval_ms": $POLL_MS, "idle_interval_ms": 5000, "lease_ttl_ms": 5000 },
  "consumer":   { "poll_interval_ms": $POLL_MS, "drain_timeout_ms": 5000 },
  "topics": { "DEMO": { "ordered": false, "steps": [ { "name": "s1", "type": "demo" } ] } }
}
JSON
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null

online() { sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1"; }
leased() { sql "SELECT COUNT(*) FROM distribute_lease_lock WHERE owner LIKE '% wake=127.0.0.1:%' AND expires_at > NOW(3)"; }
# ms from create to start of one event, on the database clock
start_ms() { sql "SELECT TIMESTAMPDIFF(MICROSECOND, create_time, started_time) DIV 1000 FROM distribute_event WHERE code = '$1'"; }
produce_cli() {
  "$DSYNC_BIN" produce --config "$WORK/dsync.json" --topic DEMO --code "$1" --tenant t1 --data-id "$1" \
    --payload '{}' >/dev/null
}
stop_node() {  # stop_node NAME: SIGTERM, wait, its NODE_STOPPED line in $line
  local pid_var="PID_$1"
  kill -TERM "${!pid_var}"
  wait "${!pid_var}" 2>/dev/null || true
  line=$(grep 'NODE_STOPPED' "$WORK/$1.log") || fail "$1 did not log NODE_STOPPED"
}
field() { sed -nE "s/.*(^| )$1=([^ ]*).*/\2/p" <<<"$2"; }

# --- 1. woken: milliseconds -------------------------------------------------------
PORT_A=$(free_port)
start_bg dispatcher "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_bg a "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$PORT_A" --capacity 4
wait_for '[[ $(online) == 1 && $(leased) == 1 ]]' 20 "node online, dispatcher leading with a wake address"
grep -q 'WAKEUP_LISTENING' "$WORK/a.log" || fail "node a is not listening for wake-ups"
worst=0
for i in 1 2 3; do
  sleep 1.5  # both well inside their 3-5 s pauses
  produce_cli "woken-$i"
  wait_for '[[ $(event_status woken-'$i') == SUCCESS ]]' 10 "woken-$i SUCCESS"
  ms=$(start_ms "woken-$i")
  echo "  woken-$i: created -> started in $ms ms (-> assigned $(sql "SELECT TIMESTAMPDIFF(MICROSECOND, create_time, assigned_time) DIV 1000 FROM distribute_event WHERE code = 'woken-$i'") ms; poll intervals $POLL_MS ms)"
  ((ms > worst)) && worst=$ms
done
((worst < 1000)) || fail "a woken event took $worst ms to start (wake-ups should make it milliseconds)"
pass "woken events start within $worst ms with $POLL_MS ms poll intervals"
stop_node a
(( $(field wakeups_acted "$line") >= 3 )) || fail "node a acted on fewer than 3 wake-ups: $line"
pass "node a was woken: $(field wakeups_received "$line") received, $(field wakeups_acted "$line") acted"

# --- 2. blocked: polling still completes everything ----------------------------------
read -r -d '' PORT_B OTHER < <(free_ports 2) || true  # distinct, in one call
start_bg b env DSYNC_CONSUMER_WAKEUP_LISTEN="127.0.0.1:$OTHER" "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$PORT_B" --capacity 4
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '"'127.0.0.1:$PORT_B'"'") == 1 ]]' 20 "node b online"
for i in 1 2 3; do produce_cli "blocked-$i"; done
produce "blocked-sql" '{}'  # the plain-SQL producer wakes nobody
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE '"'blocked-%'"' AND status = '"'SUCCESS'"'") == 4 ]]' 30 \
  "every event SUCCESS with node b's wake-ups blocked"
pass "blocked wake-ups: all 4 events SUCCESS by polling (start after create: $(sql "SELECT GROUP_CONCAT(TIMESTAMPDIFF(MICROSECOND, create_time, started_time) DIV 1000 ORDER BY id) FROM distribute_event WHERE code LIKE 'blocked-%'") ms)"
stop_node b
expect_eq "$(field wakeups_received "$line")" 0 "node b received no wake-up (its address is a closed port)"

# --- 3. a flood of forged wake-ups --------------------------------------------------
PORT_C=$(free_port)
t_start=$(now_ms)
start_bg c "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address "127.0.0.1:$PORT_C" --capacity 4
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND node_address = '"'127.0.0.1:$PORT_C'"'") == 1 ]]' 20 "node c online"
t0=$(now_ms)
end=$((t0 + 6000))
sent=0
while (( $(now_ms) < end )); do
  for _ in $(seq 1 200); do printf 'dsync-wake/1' >"/dev/udp/127.0.0.1/$PORT_C" 2>/dev/null || true; done
  sent=$((sent + 200))
done
t_flood_end=$(now_ms)
stop_node c
lived_ms=$(( $(now_ms) - t_start ))  # the node's life: start, flood, drain
polls=$(field polls "$line")
received=$(field wakeups_received "$line")
# Its own polls (one per interval at most, plus the first) and at most one woken per
# interval (WakeLimiter: after a poll that found nothing, one act per interval), plus
# one poll of slack. Without the rate limit every datagram would be a poll.
limit=$(( 2 * lived_ms / POLL_MS + 3 ))
echo "  flood: $sent datagrams sent in $((t_flood_end - t0)) ms, $received received, $(field wakeups_acted "$line") acted; node polled $polls times in ~$lived_ms ms"
(( received >= 1000 )) || fail "the flood did not reach node c ($received of $sent received)"
# The limiter's own count: the first act, then one per interval (each poll found
# nothing), and the one coalesced from the flood's end.
acted=$(field wakeups_acted "$line")
acted_limit=$(( lived_ms / POLL_MS + 2 ))
(( acted <= acted_limit )) || fail "node c acted on $acted wake-ups under the flood; at most $acted_limit expected (one per $POLL_MS ms)"
(( polls <= limit )) || fail "node c polled $polls times under the flood; at most $limit expected (its own + one woken per $POLL_MS ms)"
pass "a flood of $received forged wake-ups: $polls polls in ~$lived_ms ms (limit $limit: its own + one woken per interval)"
