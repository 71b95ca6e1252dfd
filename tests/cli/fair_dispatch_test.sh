#!/usr/bin/env bash
# Issue 37 item 1 through real processes: 1 dispatcher, 2 nodes of capacity 45 without
# prefetch (what a node holds beyond its capacity runs in the order it was assigned,
# before anything the dispatcher shares later: with prefetch, B's first events would
# also wait for the queue A's backlog left on the nodes; docs/fairness-and-limits.md).
# Tenant A holds a backlog of FAIR_BACKLOG (1,500) due events of 50-150 ms steps (sleeping:
# the times are the steps', not this shared machine's CPU); tenant B then produces 100 of
# 100 ms.
# B's time (its first create_time to its last finished_time, database clock) is compared
# with the same 100 on the idle cluster:
#   - fairness on (the default): B finishes within 2x its idle time;
#   - fairness off (fairness.enabled false, a new dispatcher): B waits behind A's
#     backlog, as before issue 37 (at least half of A's drain time).
# The figures at a 100,000-event backlog come from `scripts/bench.sh fairness`.
#
# Why A's steps vary. When A's running events all last the same, they end together, and
# slots free in waves of 90, one per step length: B, arriving between two waves, waits for
# the next, and the ratio then depends on where B fell between waves as much as on the share
# (1.87x and 1.92x with 300 ms steps; a clean-clone run at 2.07x with 100 ms steps). With
# A's steps spread from 50 to 150 ms, slots free continuously and B gets half of them.
#
# Why 90 slots. With C slots and steps of one "round" (100 ms plus the dispatch overhead),
# B alone takes ceil(100 / C) rounds; beside A's backlog, fairly shared, B gets half of the
# slots A's running events free (about C per round), so its 100th event is assigned after
# about 200 / C rounds and finishes one round later: 200 / C + 1 rounds. At C = 40 (two
# nodes of 20, this test until 2026-11-27) that is 6 rounds against 3, exactly the 2x bound,
# and a clean-clone CI run measured 2.01x with an equal share (112 of A's beside B's 100).
# At C = 90: 3.2 rounds against 2, 1.6x for an exact half share, so the bound tests the
# share rather than the rounding of waves.
source "$(dirname "$0")/lib.sh"
read -r P1 P2 <<< "$(free_ports 2 | tr '\n' ' ')"
BACKLOG=${FAIR_BACKLOG:-1500}

topics='{ "F": { "ordered": false, "steps": [ { "name": "s", "type": "demo" } ] } }'
write_config fair "$topics" '{"consumer": {"capacity": 45, "prefetch": 0}}'
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_node n1 "$P1"
start_node n2 "$P2"
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 2 ]]' 15 "two nodes online"

# B's steps last 100 ms; A's 50 to 150 ms (spread evenly by sequence number), as real
# steps vary: A's running events then end one by one rather than in waves of 90.
produce_tenant() {  # produce_tenant TENANT PREFIX COUNT
  local sleep="100"
  [[ $1 == A ]] && sleep="50 + seq * 37 % 101"
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
       SELECT '$1', CONCAT('$2-', seq), CONCAT('$2-', seq), 'F',
              CONCAT('{\"demo\": {\"sleep_ms\": ', $sleep, '}}') FROM seq_1_to_$3"
}
done_count() { sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE '$1-%' AND status = 'SUCCESS'"; }
# b_ms PREFIX: first create_time to last finished_time of the prefix's events, ms.
b_ms() {
  sql "SELECT ROUND(TIMESTAMPDIFF(MICROSECOND, MIN(create_time), MAX(finished_time)) / 1000)
       FROM distribute_event WHERE code LIKE '$1-%'"
}

# --- B alone on the idle cluster (the median of three runs: this machine is shared) ----
idles=()
for i in 1 2 3; do
  produce_tenant B "idle$i" 100
  wait_for '[[ $(done_count idle'"$i"') == 100 ]]' 60 "B's 100 events on the idle cluster"
  idles+=("$(b_ms "idle$i")")
done
idle=$(printf '%s\n' "${idles[@]}" | sort -n | sed -n 2p)
echo "B alone: ${idle} ms (median of ${idles[*]})"

# run PREFIX: A's backlog, B's 100 once A runs; B's time in $b, A's drain in $a.
run() {
  produce_tenant A "a$1" "$BACKLOG"
  wait_for '[[ $(done_count a'"$1"') -ge 50 ]]' 60 "A's backlog running"
  produce_tenant B "b$1" 100
  # The share is counted from when B's events could be seen: the INSERT has committed
  # (their create_time is the statement's start; under load a dispatch cycle of A alone
  # can run before the commit, which a window from create_time counted against the share:
  # 211 of A's beside B's 100 in one loaded CI run).
  visible=$(sql "SELECT UTC_TIMESTAMP(3)")  # the product's sessions run in UTC
  wait_for '[[ $(done_count b'"$1"') == 100 ]]' 300 "B's 100 events beside A's backlog"
  b=$(b_ms "b$1")
  during=$(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'a$1-%' AND assigned_time BETWEEN '$visible' AND (SELECT MAX(assigned_time) FROM distribute_event WHERE code LIKE 'b$1-%')")
  echo "  $1: $during of A's events were assigned while B's 100 were (over $(sql "SELECT TIMESTAMPDIFF(MICROSECOND, '$visible', MAX(assigned_time)) DIV 1000 FROM distribute_event WHERE code LIKE 'b$1-%'") ms from their commit)"
  wait_for '[[ $(done_count a'"$1"') == '"$BACKLOG"' ]]' 600 "A's backlog drained"
  a=$(b_ms "a$1")
  # A's events not yet assigned when B's were committed (what B could wait behind).
  behind=$(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'a$1-%' AND assigned_time >= '$visible'")
}

# --- fairness on (the default) ----------------------------------------------------------
run fair
fair_b=$b fair_a=$a
echo "fair: B ${fair_b} ms beside A's ${BACKLOG} (A drained in ${fair_a} ms); B alone ${idle} ms; ratio $(awk -v a="$fair_b" -v b="$idle" 'BEGIN { printf "%.2f", a / b }')"
(( fair_b <= 2 * idle )) || fail "fair: B took ${fair_b} ms, more than twice its ${idle} ms alone"
pass "fairness on: B's 100 events finish within 2x their idle time beside A's backlog"
(( during >= 50 && during <= 150 )) || fail "fair: $during of A's events assigned beside B's 100, not an equal share"
pass "fairness on: A and B shared the assignments equally while both had due events ($during : 100)"

# --- fairness off: a dispatcher with fairness.enabled false ---------------------------
kill9 "$PID_disp"
write_config fair "$topics" '{"consumer": {"capacity": 45, "prefetch": 0}, "fairness": {"enabled": false}}'
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
run unfair
echo "unfair: B ${b} ms beside A's ${BACKLOG} (A drained in ${a} ms); ratio to alone $(awk -v a="$b" -v b="$idle" 'BEGIN { printf "%.2f", a / b }')"
# Behind the backlog: of A's events still unassigned when B's arrived, at least 90 % were
# assigned before B's last (A's drain time is no yardstick here: it includes the new
# dispatcher's start).
echo "unfair: $during of the $behind A's events unassigned at B's arrival were assigned before B's last"
(( during * 10 >= behind * 9 )) || fail "unfair: only $during of A's $behind remaining events went before B's last: not behind the backlog"
(( b > 2 * idle )) || fail "unfair: B took ${b} ms, within twice its idle time: no contrast"
pass "fairness off: B waits behind A's backlog (today's behaviour)"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE status <> 'SUCCESS'")" 0 "every event SUCCESS"
