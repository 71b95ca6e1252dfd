#!/usr/bin/env bash
# consumer.prefetch -1, the default (consumer/consumer_node.h AutoPrefetch): a node
# publishes prefetch = capacity until it has run a step; once its steps are fast
# (demo without sleep) it publishes 3 x capacity, at once (an early beat, long before
# the next heartbeat), and the dispatcher then holds that many on it beyond capacity;
# a node of slow steps (demo sleeping 30 ms) keeps capacity; an explicit --prefetch
# stays as given.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r FAST_PORT FIXED_PORT SLOW_PORT <<< "$(free_ports 3 | tr '\n' ' ')"

# Heartbeats every 10 s: a prefetch seen in the registry within 5 s of the first
# events came from the early beat.
write_config autopf '{
  "FAST": { "max_retry": 3, "ordered": false, "steps": [ { "name": "f1", "type": "demo" } ] },
  "SLOW": { "max_retry": 3, "ordered": false, "steps": [ { "name": "s1", "type": "demo" } ] }
}' '{"registry": {"heartbeat_interval_ms": 10000, "offline_timeout_ms": 30000}}'
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_node fast ${FAST_PORT} --topics FAST --capacity 2
start_node fixed ${FIXED_PORT} --topics FAST --capacity 2 --prefetch 1
start_node slow ${SLOW_PORT} --topics SLOW --capacity 2
prefetch() { sql "SELECT JSON_VALUE(metadata, '$.prefetch') FROM distribute_node_registry WHERE node_address = '127.0.0.1:$1' AND status = 1"; }
wait_for '[[ $(prefetch ${FAST_PORT}) == 2 && $(prefetch ${FIXED_PORT}) == 1 && $(prefetch ${SLOW_PORT}) == 2 ]]' 15 "three nodes online"
pass "before any step: prefetch = capacity (auto), 1 (--prefetch 1)"
grep -q "capacity=2 prefetch=auto" "$WORK/fast.log" || fail "fast node's start line: $(grep NODE_STARTING "$WORK/fast.log")"
grep -q "capacity=2 prefetch=1" "$WORK/fixed.log" || fail "fixed node's start line: $(grep NODE_STARTING "$WORK/fixed.log")"
pass "start lines name the prefetch"

for i in 1 2 3 4 5 6; do produce "f$i" '{}' FAST; done
for i in 1 2 3; do produce "s$i" '{"demo": {"sleep_ms": 30}}' SLOW; done
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE status = '"'SUCCESS'"'") == 9 ]]' 20 "the 9 events SUCCESS"
wait_for '[[ $(prefetch ${FAST_PORT}) == 6 ]]' 5 "the fast node to publish prefetch 6 (3 x capacity)"
pass "fast steps: prefetch 3 x capacity, published before the next heartbeat"
# The others do not change: their next beats publish the same.
sleep 1.5
expect_eq "$(prefetch ${FIXED_PORT})" 1 "--prefetch 1 stays 1"
expect_eq "$(prefetch ${SLOW_PORT})" 2 "slow steps: prefetch stays = capacity"
grep -q "HEARTBEAT_FAILED" "$WORK/fast.log" && fail "a beat failed: $(grep HEARTBEAT_FAILED "$WORK/fast.log")"

# The dispatcher holds capacity + prefetch on each FAST node: both frozen, 20 FAST
# events go 8 (2 + 6) to the auto node and 3 (2 + 1) to the fixed one; 9 wait.
kill -STOP "$PID_fast" "$PID_fixed"
for i in $(seq 1 20); do produce "g$i" '{}' FAST; done
held() { sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'g%' AND status = 'ASSIGNED' AND node_address = '127.0.0.1:$1'"; }
wait_for '[[ $(held ${FAST_PORT}) == 8 && $(held ${FIXED_PORT}) == 3 ]]' 10 "8 held by the auto node, 3 by the fixed one"
sleep 1  # more dispatch cycles: nothing beyond those limits
expect_eq "$(held ${FAST_PORT}) $(held ${FIXED_PORT}) $(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'g%' AND status = 'PENDING'")" \
  "8 3 9" "held on the auto node, on the fixed node, still pending"
kill -CONT "$PID_fast" "$PID_fixed"
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE status = '"'SUCCESS'"'") == 29 ]]' 30 "all 29 events SUCCESS"
pass "thawed: every event done"
