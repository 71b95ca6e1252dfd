#!/usr/bin/env bash
# The chaos suite (issue 6): real processes, real kill -9, a real SIGSTOP and a real
# database crash, then every promise checked with SQL.
#
# Setup: a MariaDB of its own (it is killed and restarted), 2 dispatchers and 4
# consumer nodes as separate `dsync` processes, heartbeat 1 s / offline timeout 4 s.
# A producer inserts CHAOS_EVENTS three-step `demo` events with plain SQL at
# CHAOS_RATE events/s, each with a scripted fate (slot = sequence number % 20):
#   slots 0-10  plain                                        -> SUCCESS
#   11, 12, 13  s1 / s2 / s3 fail transiently 1 / 2 / 1 times -> SUCCESS
#   14, 15, 16  s1 / s2 / s3 fail permanently                  -> COMPENSATED
#   17          s3 permanent, compensations of s2 and s1 fail once -> COMPENSATED
#   18          s2 permanent, compensation of s1 always fails  -> FAILED (s1 left applied)
#   19          s3 permanent, compensation of s2 always fails  -> FAILED (s1, s2 left applied)
# While it runs: every 2-3 s a random consumer is kill -9'd and restarted under its
# address 0.3-1.2 s later; the leading dispatcher is kill -9'd once (and restarted);
# one node with events in flight is SIGSTOPped until the registry shows it offline and
# the sweeper has taken its events (at least offline timeout + 1 s; an event whose row
# the paused node holds locked mid-transaction is left to it, so then until the others
# are taken), then SIGCONTed; MariaDB is kill -9'd once and started again. Then
# quiescence, a graceful stop of every process, and the checks:
#   lost             events missing or not terminal (SUCCESS, COMPENSATED, FAILED)
#   fate mismatches  final status differs from the scripted fate
#   saga_violations  the saga-order invariant (tests/cli/lib.sh saga_violations)
#   ledger_mismatches demo_ledger against the final state: a SUCCESS event has its 3
#                    rows with applications = 1, a COMPENSATED one none, a FAILED one
#                    exactly the steps left SUCCESS/COMPENSATING; and per step, the
#                    audit's applications minus undos equals the ledger row's presence
#   double_owner     see below
#   innocent_retries retries charged to innocent events: an event whose retry_count
#                    is above what its scripted step failures use (kills, freezes and
#                    the database restart are resets, never retries:
#                    docs/event-lifecycle.md, "Retry arithmetic"); max_retry is 2,
#                    exactly what fate 12 needs
# and one summary line:
#   events=… kills=… db_restarts=… freezes=… lost=0 double_owner=0 innocent_retries=0 saga_violations=0 ledger_mismatches=0 …
#
# "No event ever had two owners at once", and why this check can fail: every demo
# step of these events runs with {"audit": true}, so each application and each undo
# appends a demo_ledger_audit row (V005) inside the step's fenced transaction. The row
# records the writer's view (the claim attempt its run holds, its pid) and, read by
# the same statement, the database's view of the owner at that instant (the event
# row's attempt, status and node_address). Every claim bumps `attempt`, so an attempt
# names exactly one owner. If fencing were broken (a write fenced by node_address
# only, or not at all, or a frozen node's write slipping past a reset), the stale
# writer's row would commit with writer_attempt <> owner_attempt (a newer claim
# exists), or with owner_status PENDING/ASSIGNED (it was reset and not yet
# reclaimed), or from a pid that never ran under owner_node; and if two owners both
# ran a step, the step would have two 'apply' rows (and demo_ledger applications 2).
# double_owner counts all of these. The frozen node is checked on its own as well:
# it must have lost events while frozen (judged at the thaw), it must say so in its log
# (the random kills spare it until it has, at most 20 s), and it must have written
# nothing for them.
# (Tried: a build whose step fence matched any version fails here with double_owner,
# ledger_mismatches and frozen_late_writes all non-zero.)
#
# A second service runs beside the tested one (issue 16 item 4): service "side", with
# its own dispatcher (sd) and node (sn) on the same database and the same topic
# CHAOS, which the chaos never kills (the database crash hits it too). A second
# producer inserts "side-N" events (service 'side', the plain fate) while the chaos
# runs. Checked: every side event SUCCESS with its ledger exact like the others, no
# event or step of either service ever ran on the other's nodes, and neither
# service's dispatcher reset the other's events (cross_service=0); sd and sn never
# die and exit 0 on SIGTERM.
#
# The CHAOS topic has a concurrency limit (issue 37): concurrency_key tenant_id, at most
# CHAOS_KEY_LIMIT (3) in flight per tenant, the events spread over four tenants; a
# sampler reads the most in flight of one tenant every 0.1 s all through the chaos
# (key_limit_max=M/LIMIT in the summary); above the limit fails the run.
#
# Short form (ctest, label chaos): 600 events. Long form: scripts/chaos.sh (5,000).
# Knobs (environment): CHAOS_EVENTS, CHAOS_RATE, CHAOS_CAPACITY, CHAOS_SLEEP_MS,
# CHAOS_QUIESCE_S, CHAOS_NODES (default "n1 n2 n3 n4"), CHAOS_KEEP_DIR (copy the
# process logs there at the end).
#
# CHAOS_GALERA=1 (ctest galera_chaos): the database is a 3-member Galera cluster of
# its own (scripts/galera.sh). Every process gets the three members in its own order
# (d1 and the nodes n1, n4 write through member 1, d2 and n2 through member 2, n3
# through member 3), so they write through different members and conflict in
# certification; the producer and the checks use member 1. "The database crash" is
# member 2 kill -9'd: the processes on it fail over to member 3; 3 s later it is
# restarted and rejoins by IST (galera.sh restart). At the end every member must
# be Synced in a cluster of 3 and hold the same rows (CHECKSUM TABLE on each).
SRC=$(cd "$(dirname "$0")/../.." && pwd)
: "${DSYNC_BIN:?DSYNC_BIN is not set: run via scripts/test.sh (ctest) or scripts/chaos.sh}"

EVENTS=${CHAOS_EVENTS:-600}
RATE=${CHAOS_RATE:-30}             # events produced per second
CAPACITY=${CHAOS_CAPACITY:-6}      # per node
SLEEP_MS=${CHAOS_SLEEP_MS:-50}     # per demo step
KEY_LIMIT=${CHAOS_KEY_LIMIT:-3}    # issue 37: CHAOS events in flight per tenant (concurrency_key tenant_id)
QUIESCE_S=${CHAOS_QUIESCE_S:-90}   # after the chaos, for everything to become terminal
read -r -a NODES <<< "${CHAOS_NODES:-n1 n2 n3 n4}"
HEARTBEAT_MS=1000
OFFLINE_MS=4000
GALERA=${CHAOS_GALERA:-0}
DB_SCRIPT=$SRC/scripts/mariadb.sh
((GALERA)) && DB_SCRIPT=$SRC/scripts/galera.sh
KILLED_MEMBER=2

# A server (or cluster) of our own: this test crashes it, and other tests run in parallel.
OWN_DB=$(bash "$DB_SCRIPT" start)
DSYNC_TEST_DB_URL=$(bash "$DB_SCRIPT" url "$OWN_DB")
export DSYNC_TEST_DB_URL
source "$SRC/tests/cli/lib.sh"
keep_logs() {
  if [[ -n ${CHAOS_KEEP_DIR:-} ]]; then
    mkdir -p "$CHAOS_KEEP_DIR" && cp "$WORK"/*.log "$CHAOS_KEEP_DIR"/ 2>/dev/null || true
  fi
}
trap 'keep_logs; cleanup; bash "$DB_SCRIPT" stop "$OWN_DB"' EXIT

cat > "$WORK/dsync.json" <<JSON
{
  "database": "$DB_URL",
  "service": "chaos",
  "registry":   { "heartbeat_interval_ms": $HEARTBEAT_MS, "offline_timeout_ms": $OFFLINE_MS, "sweep_interval_ms": 500 },
  "dispatcher": { "poll_interval_ms": 50, "idle_interval_ms": 200, "lease_ttl_ms": 3000 },
  "consumer":   { "poll_interval_ms": 50, "drain_timeout_ms": 10000, "capacity": $CAPACITY },
  "topics": {
    "CHAOS": {
      "max_retry": 2, "backoff_base_ms": 100, "backoff_max_ms": 500, "max_processing_time_ms": 30000,
      "ordered": false, "concurrency_key": "tenant_id", "concurrency_limit": $KEY_LIMIT,
      "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" }, { "name": "s3", "type": "demo" } ]
    }
  }
}
JSON
# The side service: the same topics, its own name (Galera: per member, below).
sed 's|"service": "chaos"|"service": "side"|' "$WORK/dsync.json" > "$WORK/side.json"
export DSYNC_LOG_LEVEL=info
# config_of NAME: the configuration a process runs with (Galera: its own member order).
declare -A MEMBER_OF=([d1]=1 [d2]=2 [n1]=1 [n2]=2 [n3]=3 [n4]=1 [sd]=3 [sn]=2)
config_of() {
  local base=dsync
  [[ $1 == sd || $1 == sn ]] && base=side
  if ((GALERA)); then echo "$WORK/$base-${MEMBER_OF[$1]:-1}.json"; else echo "$WORK/$base.json"; fi
}
if ((GALERA)); then
  for m in 1 2 3; do
    hosts=$(bash "$DB_SCRIPT" url "$OWN_DB" "$m"); hosts=${hosts#*@}; hosts=${hosts%%/*}
    sed "s|\"database\": \"[^\"]*\"|\"database\": \"mysql://$DB_USER:$DB_PASS@$hosts/$SCHEMA\"|" \
      "$WORK/dsync.json" > "$WORK/dsync-$m.json"
    sed 's|"service": "chaos"|"service": "side"|' "$WORK/dsync-$m.json" > "$WORK/side-$m.json"
  done
fi

q() { sql "$1" 2>/dev/null || true; }  # a poll that tolerates the database being down
log() { printf '[%5.1fs] %s\n' "$(awk "BEGIN { print ($(now_ms) - ${T_START:-$(now_ms)}) / 1000 }")" "$*"; }

# --- processes: every incarnation has its own log; pids leave the list once reaped --
declare -A PID=() INC=() STATE=() RESTART_AT=()
spawn() {  # spawn NAME cmd...: (re)starts a process under NAME
  local name=$1; shift
  INC[$name]=$(( ${INC[$name]:-0} + 1 ))
  "$@" >"$WORK/$name.${INC[$name]}.log" 2>&1 &
  PID[$name]=$!
  STARTED_PIDS+=("$!")
  echo "$! $name ${ADDR[$name]:-}" >> "$WORK/procs"
  LAST_SPAWN=$(now_ms)
}
forget_pid() {
  local keep=() p
  for p in "${STARTED_PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  STARTED_PIDS=("${keep[@]}")
}
reap9() { kill9 "$1"; forget_pid "$1"; }
# Node addresses on free ports (a node listens for wake-ups on its address): two chaos
# runs at once (ctest -j2) must not wake each other's nodes.
declare -A ADDR=()
mapfile -t NODE_PORTS < <(free_ports $(( ${#NODES[@]} + 1 )))
for i in "${!NODES[@]}"; do ADDR[${NODES[$i]}]="127.0.0.1:${NODE_PORTS[$i]}"; done
ADDR[sn]=127.0.0.1:${NODE_PORTS[${#NODES[@]}]}
SIDE_NODE=${ADDR[sn]}
start_node() { spawn "$1" "$DSYNC_BIN" node --config "$(config_of "$1")" --node-address "${ADDR[$1]}"; STATE[$1]=up; }
start_dispatcher() { spawn "$1" "$DSYNC_BIN" dispatcher --config "$(config_of "$1")"; }

"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_dispatcher d1
start_dispatcher d2
for n in "${NODES[@]}"; do start_node "$n"; done
start_dispatcher sd
start_node sn
wait_for '[[ $(q "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND service_name = '"'chaos'"'") == ${#NODES[@]} ]]' 20 \
  "${#NODES[@]} nodes online"
wait_for '[[ $(q "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1 AND service_name = '"'side'"'") == 1 ]]' 20 \
  "the side service's node online"
LEASE="lock_name = 'dispatcher:chaos'"
wait_for '[[ -n $(q "SELECT owner FROM distribute_lease_lock WHERE owner IS NOT NULL AND $LEASE") ]]' 20 "a dispatcher leads"
wait_for '[[ -n $(q "SELECT owner FROM distribute_lease_lock WHERE owner IS NOT NULL AND lock_name = '"'dispatcher:side'"'") ]]' 20 \
  "the side service's dispatcher leads"

# --- scripted fates -------------------------------------------------------------
# `retries`: the forward retries the fate's own step failures use (retry_count must end
# exactly there: a kill, a freeze or the database restart is never charged to them).
sql "CREATE TABLE chaos_fate (slot INT PRIMARY KEY, fate VARCHAR(40) NOT NULL, payload TEXT NOT NULL,
       expect_status VARCHAR(30) NOT NULL, retries INT NOT NULL)"
fate() {  # fate SLOT NAME STATUS EXTRA_DEMO_JSON [RETRIES]
  local payload
  payload=$(printf '{"demo": {"sleep_ms": %d, "audit": true%s}}' "$SLEEP_MS" "$4")
  sql "INSERT INTO chaos_fate VALUES ($1, '$2', '$payload', '$3', ${5:-0})"
}
for s in $(seq 0 10); do fate "$s" ok SUCCESS ""; done
fate 11 transient_s1 SUCCESS ', "fail": {"s1": 1}' 1
fate 12 transient_s2 SUCCESS ', "fail": {"s2": 2}' 2
fate 13 transient_s3 SUCCESS ', "fail": {"s3": 1}' 1
fate 14 permanent_s1 COMPENSATED ', "fail": {"s1": "permanent"}'
fate 15 permanent_s2 COMPENSATED ', "fail": {"s2": "permanent"}'
fate 16 permanent_s3 COMPENSATED ', "fail": {"s3": "permanent"}'
fate 17 comp_retry COMPENSATED ', "fail": {"s3": "permanent"}, "fail_compensation": {"s2": 1, "s1": 1}'
fate 18 comp_never_s1 FAILED ', "fail": {"s2": "permanent"}, "fail_compensation": {"s1": "always"}'
fate 19 comp_never_s2 FAILED ', "fail": {"s3": "permanent"}, "fail_compensation": {"s2": "always"}'
SLOT_OF_CODE="CAST(SUBSTRING(e.code, 3) AS UNSIGNED) % 20"

# --- the producer: plain SQL, paced, idempotent (INSERT IGNORE by uk_code) so a
# batch retried across the database crash cannot duplicate anything --------------
producer() {
  local t0 made=0 target upto
  t0=$(now_ms)
  while (( made < EVENTS )); do
    target=$(( ($(now_ms) - t0) * RATE / 1000 + 1 ))
    upto=$(( target < EVENTS ? target : EVENTS ))
    if (( upto > made )); then
      if sql "INSERT IGNORE INTO distribute_event (tenant_id, code, data_id, topic, payload)
              SELECT CONCAT('t', s.seq % 4), CONCAT('c-', s.seq), CONCAT('c-', s.seq), 'CHAOS', f.payload
              FROM seq_$((made + 1))_to_${upto} s JOIN chaos_fate f ON f.slot = s.seq % 20" 2>/dev/null; then
        made=$upto
        echo "$made" > "$WORK/produced.tmp" && mv "$WORK/produced.tmp" "$WORK/produced"
      fi
    fi
    sleep 0.2
  done
  touch "$WORK/producer.done"
}
# The side service's producer: 5 events a second while the chaos producer runs, the
# plain fate, service 'side' named in the INSERT.
side_producer() {
  local made=0
  while [[ ! -f $WORK/producer.done ]]; do
    if sql "INSERT IGNORE INTO distribute_event (tenant_id, code, data_id, topic, payload, service)
            SELECT 't1', 'side-$made', 'side-$made', 'CHAOS', f.payload, 'side' FROM chaos_fate f WHERE f.slot = 0" \
       2>/dev/null; then
      made=$((made + 1))
    fi
    sleep 0.2
  done
}
T_START=$(now_ms)
producer >"$WORK/producer.log" 2>&1 &
PRODUCER=$!
STARTED_PIDS+=("$PRODUCER")
side_producer >"$WORK/side_producer.log" 2>&1 &
SIDE_PRODUCER=$!
STARTED_PIDS+=("$SIDE_PRODUCER")
# Issue 37: the CHAOS topic's per-tenant limit (concurrency_key tenant_id, four tenants),
# sampled from the database all through the chaos: the most events of one tenant in
# flight at once (samples fail while the database is down; they are skipped).
( while true; do
    q "SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) n FROM distribute_event WHERE service = 'chaos'
         AND status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING') GROUP BY tenant_id) x" >>"$WORK/key_samples"
    sleep 0.1
  done ) &
STARTED_PIDS+=($!)

# --- the chaos -----------------------------------------------------------------
P_MS=$(( EVENTS * 1000 / RATE ))            # production period
FREEZE_AT=$(( T_START + (P_MS * 15 / 100 > 2000 ? P_MS * 15 / 100 : 2000) ))
LEADER_AT=$(( T_START + P_MS * 45 / 100 ))
DB_AT=$(( T_START + P_MS * 70 / 100 ))
next_kill=$(( T_START + 2000 + RANDOM % 1001 ))
kills=0; dispatcher_kills=0; db_restarts=0; freezes=0
freeze_state=pending; leader_state=pending; db_state=pending
LAST_SPAWN=$(now_ms); last_progress=0
frozen=""; frozen_pid=""; frozen_since=0; frozen_held=""
# Set at the thaw: the held events ("code:attempt") other nodes had taken by then (what
# the frozen node lost while frozen), and when it was thawed.
frozen_lost_held=""; frozen_thawed_at=0
FROZEN_REPORT_MS=20000  # how long the thawed node is spared by the random kills to report them

up_nodes() { local n; for n in "${NODES[@]}"; do [[ ${STATE[$n]} == up ]] && echo "$n"; done; true; }

try_freeze() {
  # The up node with the most events RUNNING (mid-saga) right now.
  local addr n
  addr=$(q "SELECT node_address FROM distribute_event WHERE status IN ('RUNNING', 'COMPENSATING')
            AND node_address IS NOT NULL AND service = 'chaos' GROUP BY node_address ORDER BY COUNT(*) DESC")
  for a in $addr; do
    for n in $(up_nodes); do
      [[ ${ADDR[$n]} == "$a" ]] || continue
      # Not while it starts: the RUNNING rows under its address may still be the
      # orphans of its previous process, which it is handing back.
      grep -q NODE_STARTED "$WORK/$n.${INC[$n]}.log" || continue
      kill -STOP "${PID[$n]}"
      # What it held at the moment it stopped: "code:attempt" of its in-flight runs.
      frozen_held=$(q "SELECT CONCAT(code, ':', attempt) FROM distribute_event
                       WHERE node_address = '$a' AND status IN ('RUNNING', 'COMPENSATING')")
      if [[ -z $frozen_held ]]; then  # its runs ended before the signal: try again soon
        kill -CONT "${PID[$n]}"
        return 1
      fi
      frozen=$n; frozen_pid=${PID[$n]}; frozen_since=$(now_ms); STATE[$n]=frozen
      frozen_log="$WORK/$n.${INC[$n]}.log"
      freezes=$((freezes + 1))
      log "SIGSTOP $n (pid $frozen_pid) holding $(wc -w <<< "$frozen_held") running event(s)"
      freeze_state=frozen
      return 0
    done
  done
  return 1
}

frozen_events_taken() {  # how many held events have a newer claim or another status/owner
  local held code attempt still taken=0
  for held in $frozen_held; do
    code=${held%%:*}; attempt=${held##*:}
    still=$(q "SELECT COUNT(*) FROM distribute_event WHERE code = '$code' AND attempt = $attempt
               AND node_address = '${ADDR[$frozen]}' AND status IN ('RUNNING', 'COMPENSATING')")
    [[ $still == 0 ]] && taken=$((taken + 1))
  done
  echo "$taken"
}

maybe_thaw() {
  local now=$1 offline taken held elapsed
  elapsed=$(( now - frozen_since ))
  (( elapsed >= OFFLINE_MS + 1000 )) || return 0
  offline=$(q "SELECT status FROM distribute_node_registry WHERE node_address = '${ADDR[$frozen]}'")
  taken=$(frozen_events_taken)
  held=$(wc -w <<< "$frozen_held")
  # Thaw once the registry calls it offline and the sweeper took its events. A node
  # paused mid-transaction keeps that event's row locked, and the sweeper skips a
  # locked event (its owner's session is open): then thaw once the others were taken.
  # If it lost nothing within 15 s, the freeze proved nothing: thaw and try again.
  if [[ $offline == 0 ]] && (( taken == held )); then
    :
  elif [[ $offline == 0 ]] && (( taken >= 1 && elapsed >= OFFLINE_MS + 4000 )); then
    :
  elif (( elapsed < 15000 )); then
    return 0
  fi
  THAW_DB_TIME=$(q "SELECT UTC_TIMESTAMP(6)")
  # What it lost while frozen: taken by now (a newer claim, or reset and not its own
  # again). Judged here, not at the end: an event it still held at the thaw and lost
  # later (a random kill) is no frozen loss. The same rule as the end's checks.
  frozen_lost_held=""
  for held in $frozen_held; do
    [[ $(q "SELECT attempt > ${held##*:} OR node_address IS NULL OR node_address <> '${ADDR[$frozen]}'
            FROM distribute_event WHERE code = '${held%%:*}'") == 1 ]] && frozen_lost_held+=" $held"
  done
  # Transactions open for 2 s+ now can only be the frozen node's.
  frozen_open_trx=$(q "SELECT COUNT(*) FROM information_schema.INNODB_TRX
                       WHERE trx_started < NOW() - INTERVAL 2 SECOND")
  kill -CONT "$frozen_pid"
  STATE[$frozen]=up
  frozen_thawed_at=$(now_ms)
  log "SIGCONT $frozen after $elapsed ms (registry offline: $([[ $offline == 0 ]] && echo yes || echo no)," \
      "events taken by others: $taken of $held, its open transactions: ${frozen_open_trx:-?})"
  if (( taken == 0 )); then
    log "the frozen node lost nothing: freezing again"
    freezes=$((freezes - 1)); freeze_state=pending; FREEZE_AT=$(( now + 1000 ))
    return 0
  fi
  freeze_state=done
}

kill_leader() {
  local owner pid d
  owner=$(q "SELECT owner FROM distribute_lease_lock WHERE owner IS NOT NULL AND expires_at > NOW(3) AND $LEASE")
  pid=$(cut -d: -f2 <<< "$owner")
  for d in d1 d2; do
    [[ ${PID[$d]} == "$pid" ]] || continue
    TOKEN_BEFORE=$(q "SELECT MAX(token) FROM distribute_lease_lock WHERE $LEASE")
    KILLED_LEADER=$pid
    reap9 "$pid"
    kills=$((kills + 1)); dispatcher_kills=$((dispatcher_kills + 1))
    log "kill -9 leading dispatcher $d (pid $pid, token $TOKEN_BEFORE)"
    start_dispatcher "$d"
    leader_state=done
    return 0
  done
  return 1  # no live leader right now (e.g. between leases): try again next tick
}

crash_db() {
  if ((GALERA)); then
    log "kill -9 Galera member $KILLED_MEMBER (the member d2 and n2 write through)"
    bash "$DB_SCRIPT" kill "$OWN_DB" "$KILLED_MEMBER"
    sleep 3  # the processes on it fail over and run on the other two meanwhile
    bash "$DB_SCRIPT" restart "$OWN_DB" "$KILLED_MEMBER"
    log "member $KILLED_MEMBER rejoined: $(grep -c 'IST received' "$OWN_DB/m$KILLED_MEMBER/err.log") IST(s) received," \
        "$(bash "$DB_SCRIPT" status "$OWN_DB" | tr '\n' ' ')"
  else
    log "kill -9 MariaDB"
    bash "$DB_SCRIPT" kill "$OWN_DB"
    sleep 0.5
    bash "$DB_SCRIPT" restart "$OWN_DB"
    log "MariaDB back"
  fi
  db_restarts=$((db_restarts + 1))
  db_state=done
}

# The thawed node has logged, for every event it lost while frozen, that it stopped
# (EVENT_LOST_OWNERSHIP or EVENT_ABANDONED: the check at the end), or had
# FROZEN_REPORT_MS to do so. Until then the random kills spare it: a node killed before
# its runs reached their next fenced write never learns what it lost, and the check
# would blame the product for a line the kill took away.
frozen_reported_all() {
  local held
  (( $(now_ms) - frozen_thawed_at >= FROZEN_REPORT_MS )) && return 0
  for held in $frozen_lost_held; do
    grep -qE "EVENT_(LOST_OWNERSHIP|ABANDONED) event=${held%%:*} " "$frozen_log" || return 1
  done
  return 0
}

kill_random_node() {
  local candidates=() n
  mapfile -t candidates < <(up_nodes)
  if [[ $freeze_state == done && -n $frozen ]] && ! frozen_reported_all; then
    mapfile -t candidates < <(for n in "${candidates[@]}"; do [[ $n == "$frozen" ]] || echo "$n"; done)
    (( ${#candidates[@]} > 0 )) || return 0
  fi
  (( ${#candidates[@]} > 1 )) || return 0   # always leave one node running
  n=${candidates[RANDOM % ${#candidates[@]}]}
  reap9 "${PID[$n]}"
  log "kill -9 $n (pid ${PID[$n]})"
  STATE[$n]=down
  RESTART_AT[$n]=$(( $(now_ms) + 300 + RANDOM % 901 ))
  kills=$((kills + 1))
}

restart_due() {
  local n now=$1
  for n in "${NODES[@]}"; do
    if [[ ${STATE[$n]} == down ]] && (( now >= RESTART_AT[$n] )); then start_node "$n"; fi
  done
}
pending_restarts() { local n; for n in "${NODES[@]}"; do [[ ${STATE[$n]} == down ]] && return 0; done; return 1; }

while :; do
  now=$(now_ms)
  restart_due "$now"
  if [[ $freeze_state == pending ]] && (( now >= FREEZE_AT )); then try_freeze || true; fi
  [[ $freeze_state == frozen ]] && maybe_thaw "$now"
  if [[ $leader_state == pending ]] && (( now >= LEADER_AT )); then kill_leader || true; fi
  if [[ $db_state == pending && $freeze_state == done ]] && (( now >= DB_AT )) && ! pending_restarts \
     && (( now - LAST_SPAWN >= 1500 )); then
    crash_db
    now=$(now_ms)
  fi
  production_done=0; [[ -f $WORK/producer.done ]] && production_done=1
  if (( production_done )) && [[ $freeze_state == done && $leader_state == done && $db_state == done ]]; then
    pending_restarts || break
  elif (( now >= next_kill )); then
    kill_random_node
    next_kill=$(( now + 2000 + RANDOM % 1001 ))
  fi
  if (( now - last_progress >= 5000 )); then
    last_progress=$now
    log "produced=$(cat "$WORK/produced" 2>/dev/null || echo 0) terminal=$(q "SELECT COUNT(*) FROM distribute_event
         WHERE status IN ('SUCCESS', 'COMPENSATED', 'FAILED')") kills=$kills freezes=$freezes db_restarts=$db_restarts"
  fi
  # A process we did not kill must not have died.
  for n in "${NODES[@]}" d1 d2 sd sn; do
    if [[ ${STATE[$n]:-up} != down ]] && ! kill -0 "${PID[$n]}" 2>/dev/null; then
      tail -n 20 "$WORK/$n.${INC[$n]}.log" >&2
      fail "$n (pid ${PID[$n]}) died on its own"
    fi
  done
  (( now < T_START + P_MS + 60000 )) \
    || fail "the chaos could not finish its plan (freeze $freeze_state, leader kill $leader_state, db restart $db_state)"
  sleep 0.1
done
T_CHAOS_END=$(now_ms)
log "chaos over: kills=$kills (dispatcher $dispatcher_kills) freezes=$freezes db_restarts=$db_restarts; waiting for quiescence"

# --- quiescence -------------------------------------------------------------------
deadline=$(( $(now_ms) + QUIESCE_S * 1000 ))
while :; do
  left=$(q "SELECT COUNT(*) FROM distribute_event WHERE status NOT IN ('SUCCESS', 'COMPENSATED', 'FAILED')")
  total=$(q "SELECT COUNT(*) FROM distribute_event WHERE service = 'chaos'")
  [[ $left == 0 && $total == "$EVENTS" ]] && break
  if (( $(now_ms) >= deadline )); then
    log "not quiescent after ${QUIESCE_S}s: $left of $total events not terminal"
    break
  fi
  sleep 0.5
done
T_QUIET=$(now_ms)
log "quiescent (or gave up) $(( (T_QUIET - T_CHAOS_END) / 1000 )) s after the chaos"

# The leadership moved when the leader was killed.
token_after=$(q "SELECT MAX(token) FROM distribute_lease_lock WHERE $LEASE")
owner_after=$(q "SELECT owner FROM distribute_lease_lock WHERE owner IS NOT NULL AND $LEASE")
(( token_after > TOKEN_BEFORE )) || fail "no new lease after the leader was killed (token $token_after)"
[[ $(cut -d: -f2 <<< "$owner_after") != "$KILLED_LEADER" ]] || fail "the killed dispatcher still holds the lease"
pass "a new dispatcher took the lease after the leader's kill -9 (token $TOKEN_BEFORE -> $token_after)"

# Every process stops cleanly: nothing writes after this point.
kill9 "$SIDE_PRODUCER"; forget_pid "$SIDE_PRODUCER"
for n in "${NODES[@]}" d1 d2 sd sn; do kill -TERM "${PID[$n]}"; done
for n in "${NODES[@]}" d1 d2 sd sn; do
  rc=0; wait "${PID[$n]}" || rc=$?
  forget_pid "${PID[$n]}"
  [[ $rc == 0 ]] || { tail -n 20 "$WORK/$n.${INC[$n]}.log" >&2; fail "$n exited $rc after SIGTERM"; }
done
kill9 "$PRODUCER"; forget_pid "$PRODUCER"
pass "every surviving process exited 0 on SIGTERM"
log "all processes stopped; checking"

# --- checks -----------------------------------------------------------------------
sql "CREATE TABLE chaos_process (pid INT NOT NULL, name VARCHAR(16) NOT NULL, node_address VARCHAR(128) NULL)"
while read -r pid name addr; do
  sql "INSERT INTO chaos_process VALUES ($pid, '$name', NULLIF('$addr', ''))"
done < "$WORK/procs"

TERMINAL="('SUCCESS', 'COMPENSATED', 'FAILED')"
lost=$(sql "SELECT $EVENTS - COUNT(*) + COALESCE(SUM(status NOT IN $TERMINAL), 0) FROM distribute_event
            WHERE service = 'chaos'")
fate_mismatches=$(sql "SELECT COUNT(*) FROM distribute_event e JOIN chaos_fate f ON f.slot = $SLOT_OF_CODE
                       WHERE e.service = 'chaos' AND e.status <> f.expect_status")
# Retries charged to innocent events: retry_count above what the event's own scripted
# step failures use (0 for every fate but 11-13; the side service's are all plain).
# max_retry is 2, which fate 12 needs exactly: a charged kill would also turn it.
INNOCENT_ROWS="
SELECT e.code, e.service, e.status, e.retry_count, e.reset_count, f.retries AS scripted, e.process_log
FROM distribute_event e JOIN chaos_fate f ON f.slot = IF(e.service = 'side', 0, $SLOT_OF_CODE)
WHERE e.retry_count > f.retries"
innocent_retries=$(sql "SELECT COUNT(*) FROM ($INNOCENT_ROWS) x")
resets_not_charged=$(sql "SELECT COALESCE(SUM(reset_count), 0) FROM distribute_event")
# The side service: all SUCCESS; nothing ran across services, in event rows, step rows
# or resets logged by either service's dispatchers.
side_events=$(sql "SELECT COUNT(*) FROM distribute_event WHERE service = 'side'")
side_lost=$(sql "SELECT COUNT(*) FROM distribute_event WHERE service = 'side' AND status <> 'SUCCESS'")
CROSS_ROWS="
SELECT e.code, e.service, s.step_name, s.node_address FROM distribute_event e
JOIN distribute_event_step s ON s.job_code = e.code
WHERE (e.service = 'side') <> (s.node_address <=> '$SIDE_NODE')
   OR (e.service = 'side') <> (e.node_address <=> '$SIDE_NODE')"
cross_service=$(sql "SELECT COUNT(*) FROM ($CROSS_ROWS) x")
cross_resets=$(( $(cat "$WORK"/sd.*.log | grep -c 'EVENT_RESET event=c-' || true)
                 + $(cat "$WORK"/d1.*.log "$WORK"/d2.*.log | grep -c 'EVENT_RESET event=side-' || true) ))
cross_service=$((cross_service + cross_resets))
violations=$(saga_violations)

# Ledger against the final state, per event; then audit net effect against the ledger, per step.
LEDGER_BAD_EVENTS="
SELECT e.code, e.status, COALESCE(l.steps, '') AS ledger, COALESCE(l.bad, 0) AS not_once,
       COALESCE(k.steps, '') AS left_applied
FROM distribute_event e
LEFT JOIN (SELECT event_code, GROUP_CONCAT(step_name ORDER BY step_name) AS steps,
                  SUM(applications <> 1) AS bad
           FROM demo_ledger GROUP BY event_code) l ON l.event_code = e.code
LEFT JOIN (SELECT job_code, GROUP_CONCAT(step_name ORDER BY step_name) AS steps
           FROM distribute_event_step WHERE status IN ('SUCCESS', 'COMPENSATING')
           GROUP BY job_code) k ON k.job_code = e.code
WHERE COALESCE(l.bad, 0) > 0
   OR (e.status = 'SUCCESS' AND COALESCE(l.steps, '') <> 's1,s2,s3')
   OR (e.status = 'COMPENSATED' AND l.steps IS NOT NULL)
   OR (e.status = 'FAILED' AND COALESCE(l.steps, '') <> COALESCE(k.steps, ''))"
AUDIT_BY_STEP="
SELECT s.code, s.status,
       COALESCE(SUM(a.op = 'apply'), 0) AS applies, COALESCE(SUM(a.op = 'undo'), 0) AS undos,
       (SELECT COUNT(*) FROM demo_ledger l WHERE l.idempotency_key = s.code) AS ledger_rows
FROM distribute_event_step s LEFT JOIN demo_ledger_audit a ON a.idempotency_key = s.code
GROUP BY s.code, s.status"
AUDIT_NET_BAD="SELECT * FROM ($AUDIT_BY_STEP) t WHERE applies - undos <> ledger_rows"
ledger_mismatches=$(sql "SELECT (SELECT COUNT(*) FROM ($LEDGER_BAD_EVENTS) x) + (SELECT COUNT(*) FROM ($AUDIT_NET_BAD) y)")

# Writes by a non-owner, and effects committed twice.
STALE_WRITES="
SELECT a.id, a.event_code, a.step_name, a.op, a.writer_attempt, a.writer_pid,
       a.owner_attempt, a.owner_status, a.owner_node, a.written_at
FROM demo_ledger_audit a
WHERE NOT (a.writer_attempt <=> a.owner_attempt)
   OR NOT (a.owner_status <=> IF(a.op = 'apply', 'RUNNING', 'COMPENSATING'))
   OR NOT EXISTS (SELECT 1 FROM chaos_process p WHERE p.pid = a.writer_pid AND p.node_address <=> a.owner_node)"
TWICE="SELECT * FROM ($AUDIT_BY_STEP) t WHERE applies > 1 OR undos > 1"
double_owner=$(sql "SELECT (SELECT COUNT(*) FROM ($STALE_WRITES) x) + (SELECT COUNT(*) FROM ($TWICE) y)")

# The audit has something to look at (the net check above ties it to every ledger row).
audited=$(sql "SELECT COUNT(*) FROM demo_ledger_audit WHERE op = 'apply'")
(( audited > 0 )) || fail "no audit rows: the demo step did not audit"

# The frozen node: it lost events while frozen (frozen_lost_held, judged at the thaw),
# learnt so when it woke, and wrote nothing for them afterwards.
frozen_lost=0; frozen_late_writes=0; frozen_reported=0; frozen_unreported=""
for held in $frozen_lost_held; do
  code=${held%%:*}; attempt=${held##*:}
  frozen_lost=$((frozen_lost + 1))
  late=$(sql "SELECT COUNT(*) FROM demo_ledger_audit WHERE event_code = '$code' AND writer_pid = $frozen_pid
              AND writer_attempt = $attempt AND written_at >= '$THAW_DB_TIME'")
  frozen_late_writes=$((frozen_late_writes + late))
  # Lost ownership found by a fence, or the run abandoned because the server ended the
  # frozen session's idle transaction (idle_transaction_timeout): either way it stopped.
  if grep -qE "EVENT_(LOST_OWNERSHIP|ABANDONED) event=$code " "$frozen_log"; then
    frozen_reported=$((frozen_reported + 1))
  else
    frozen_unreported+=" $code"
  fi
done
log "frozen node $frozen: held $(wc -w <<< "$frozen_held"), lost $frozen_lost, reported $frozen_reported, late writes $frozen_late_writes"

# How hard the chaos bit (informational).
logs=("$WORK"/n*.log)
log "figures: claims=$(sql "SELECT SUM(attempt) FROM distribute_event")" \
    "events_last_reset=$(sql "SELECT COUNT(*) FROM distribute_event WHERE last_error LIKE 'reset%'")" \
    "resets_not_charged=$resets_not_charged" \
    "lost_ownership_logged=$(cat "${logs[@]}" | grep -c EVENT_LOST_OWNERSHIP || true)" \
    "abandoned_logged=$(cat "${logs[@]}" | grep -c EVENT_ABANDONED || true)" \
    "handed_back_at_restart=$(cat "${logs[@]}" | sed -n 's/.*NODE_STARTED.*orphans_handed_back=\([0-9]*\).*/\1/p' | awk '{ s += $1 } END { print s + 0 }')" \
    "audit_rows=$(sql "SELECT COUNT(*) FROM demo_ledger_audit")"

# Galera: the killed member is back in a cluster of three and every member holds the
# same rows (the checks above read member 1 only).
galera_line=""
if ((GALERA)); then
  member_sums() {  # member_sums N: the checksums of the tables the checks read, on member N
    bash "$DB_SCRIPT" root "$OWN_DB" "$1" -N -B "$SCHEMA" \
      -e "CHECKSUM TABLE distribute_event, distribute_event_step, demo_ledger, demo_ledger_audit" | cut -f2 | tr '\n' ' '
  }
  sums1=$(member_sums 1)
  members_differ=0
  for m in 2 3; do [[ $(member_sums "$m") == "$sums1" ]] || members_differ=$((members_differ + 1)); done
  synced=$(bash "$DB_SCRIPT" status "$OWN_DB" | awk '$3 == "Synced" && $4 == 3' | wc -l)
  ists=$(grep -c 'IST received' "$OWN_DB/m$KILLED_MEMBER/err.log" || true)
  failovers=$(cat "$WORK"/*.log | grep -c DB_FAILOVER || true)
  galera_line="galera_members_synced=$synced members_differ=$members_differ killed_member_ists=$ists failovers=$failovers "
fi

key_samples=$(grep -c . "$WORK/key_samples" || true)
key_max=$(sort -n "$WORK/key_samples" | tail -1)
elapsed=$(( (T_QUIET - T_START) / 1000 ))
echo "${galera_line}events=$EVENTS kills=$kills db_restarts=$db_restarts freezes=$freezes lost=$lost double_owner=$double_owner" \
     "innocent_retries=$innocent_retries" \
     "saga_violations=$violations ledger_mismatches=$ledger_mismatches fate_mismatches=$fate_mismatches" \
     "dispatcher_kills=$dispatcher_kills frozen_lost=$frozen_lost frozen_late_writes=$frozen_late_writes" \
     "side_events=$side_events side_lost=$side_lost cross_service=$cross_service" \
     "key_limit_max=${key_max:-0}/$KEY_LIMIT key_samples=$key_samples seconds=$elapsed"

# Evidence for whatever failed.
show() { echo "--- $1" >&2; sql "$2 LIMIT 10" >&2 || true; }
rc=0
if (( lost > 0 )); then
  rc=1; show "not terminal" "SELECT code, status, phase, node_address, attempt, version, retry_count, next_run_time, process_log
                             FROM distribute_event WHERE status NOT IN $TERMINAL"
fi
if (( side_events < 10 || side_lost > 0 )); then
  rc=1; show "the side service: $side_events events, not SUCCESS" "SELECT code, status, node_address, process_log
                             FROM distribute_event WHERE service = 'side' AND status <> 'SUCCESS'"
fi
if (( cross_service > 0 )); then
  rc=1; show "ran across services ($cross_resets cross-service resets logged)" "$CROSS_ROWS"
fi
if (( fate_mismatches > 0 )); then
  rc=1; show "fate mismatches" "SELECT e.code, f.fate, f.expect_status, e.status, e.retry_count, e.result, e.process_log
                                FROM distribute_event e JOIN chaos_fate f ON f.slot = $SLOT_OF_CODE
                                WHERE e.status <> f.expect_status"
fi
if (( violations > 0 )); then
  rc=1; show "saga order" "SELECT job_code, GROUP_CONCAT(step_name, ':', status, '@', COALESCE(compensated_at, '-') ORDER BY sort)
                           FROM distribute_event_step GROUP BY job_code
                           HAVING SUM(status IN ('EXECUTING', 'COMPENSATING')) > 0"
fi
if (( ledger_mismatches > 0 )); then
  rc=1; show "ledger vs final state" "$LEDGER_BAD_EVENTS"; show "audit net vs ledger" "$AUDIT_NET_BAD"
fi
if (( innocent_retries > 0 )); then
  rc=1; show "retries charged to innocent events" "$INNOCENT_ROWS"
fi
echo "retries charged to innocent events: $innocent_retries"
if (( double_owner > 0 )); then
  rc=1; show "writes by a non-owner" "$STALE_WRITES"; show "effects committed twice" "$TWICE"
fi
if (( key_samples < 20 || ${key_max:-0} > KEY_LIMIT || ${key_max:-0} < 1 )); then
  rc=1; echo "FAIL: per-tenant concurrency limit $KEY_LIMIT: most in flight ${key_max:-none} over $key_samples samples" >&2
fi
(( kills >= 3 && dispatcher_kills == 1 && db_restarts == 1 && freezes == 1 )) \
  || { rc=1; echo "FAIL: the chaos did not happen as planned" >&2; }
if ((GALERA)); then
  (( synced == 3 )) || { rc=1; echo "FAIL: only $synced of 3 Galera members Synced at the end" >&2; }
  (( members_differ == 0 )) || { rc=1; echo "FAIL: $members_differ member(s) hold other rows than member 1" >&2; }
  (( ists >= 2 )) || { rc=1; echo "FAIL: the killed member did not rejoin by IST" >&2; }
  (( failovers >= 1 )) || { rc=1; echo "FAIL: no process failed over (DB_FAILOVER) when its member died" >&2; }
fi
(( frozen_lost >= 1 )) || { rc=1; echo "FAIL: the frozen node lost no event while frozen (held: $frozen_held)" >&2; }
(( frozen_late_writes == 0 )) || { rc=1; echo "FAIL: the frozen node wrote for events it had lost" >&2; }
if (( frozen_reported != frozen_lost )); then
  rc=1; echo "FAIL: the frozen node reported $frozen_reported of $frozen_lost lost events" >&2
  # What the frozen node logged about each event it lost without saying so, and its
  # row now: the next reader of a red run sees why without the logs.
  for code in $frozen_unreported; do
    echo "  unreported $code: the frozen node's log lines for it:" >&2
    grep -F "$code" "$frozen_log" | tail -n 8 | sed 's/^/    /' >&2 || true
    echo "    row: $(sql "SELECT status, attempt, node_address, version, last_error FROM distribute_event
                        WHERE code = '$code'")" >&2
  done
  echo "  the frozen node's last lines:" >&2
  tail -n 12 "$frozen_log" | sed 's/^/    /' >&2
fi
# History without gaps (issue 16 item 5): every event's process_log is a whole chain.
history_gaps=$(process_log_gaps | wc -l)
if (( history_gaps > 0 )); then
  rc=1; echo "FAIL: $history_gaps event(s) with a gap in process_log, e.g.:" >&2
  for code in $(process_log_gaps | head -3); do sql "SELECT code, status, process_log FROM distribute_event WHERE code = '$code'" >&2; done
fi
(( rc == 0 )) || fail "chaos found violations (see above)"
pass "chaos: every event terminal and as scripted, saga order, ledger exact, never two owners; the side service untouched"
