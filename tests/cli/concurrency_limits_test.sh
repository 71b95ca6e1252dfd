#!/usr/bin/env bash
# Issue 37 item 2 through real processes: concurrency limits enforced by the dispatcher
# from the database's state (docs/fairness-and-limits.md).
#  - datasources.env_b.max_concurrent_steps = 2, 4 nodes of capacity 16, 200 events of
#    a topic syncing env_a -> env_b (table_sync, then a 100 ms demo step): sampled from
#    the database throughout, never more than 2 of them in flight (ASSIGNED, RUNNING or
#    COMPENSATING; so never more than 2 RUNNING), also while two nodes running
#    such events are kill -9ed (their RUNNING events keep their slots until the sweeper
#    hands them back) and replaced; the limit is reached (the check can fail), and every event ends SUCCESS;
#  - a topic with concurrency_key payload.space_id and concurrency_limit 3: 150 events
#    over 3 spaces never have more than 3 of one space in flight; 30 events without a
#    space_id are not limited (more than 3 of them run at once).
source "$(dirname "$0")/lib.sh"
read -r P1 P2 P3 P4 P5 P6 <<< "$(free_ports 6 | tr '\n' ' ')"

with_datasources
fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}
on_both "CREATE TABLE item (id INT PRIMARY KEY, name VARCHAR(50))"
dbq "$SRC" "INSERT INTO item SELECT seq, CONCAT('item ', seq) FROM seq_1_to_200"

base="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT"
write_config limits '{
  "SYNC":  { "ordered": false, "steps": [
               { "name": "items", "type": "table_sync", "source": "env_a", "target": "env_b",
                 "table": "item", "where": "id = :id" },
               { "name": "hold", "type": "demo" } ] },
  "KEYED": { "ordered": false, "concurrency_key": "payload.space_id", "concurrency_limit": 3,
             "steps": [ { "name": "k", "type": "demo" } ] }
}' "$DATASOURCES" "{\"datasources\": {\"env_b\": {\"url\": \"$base/$TGT\", \"max_concurrent_steps\": 2}}}" \
  '{"consumer": {"capacity": 16, "drain_timeout_ms": 2000}}'
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
for n in 1 2 3 4; do
  port_var="P$n"
  start_node "n$n" "${!port_var}" --capacity 16
done
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 4 ]]' 15 "four nodes online"

# The sampler: every ~20 ms, in flight and RUNNING of SYNC, the most in flight of one
# space_id of KEYED, and in flight of KEYED without a space_id; one line per sample.
in_flight="status IN ('ASSIGNED', 'RUNNING', 'COMPENSATING')"
space="JSON_UNQUOTE(JSON_EXTRACT(payload, '\$.space_id'))"
( while true; do
    sql "SELECT (SELECT COUNT(*) FROM distribute_event WHERE topic = 'SYNC' AND $in_flight),
                (SELECT COUNT(*) FROM distribute_event WHERE topic = 'SYNC' AND status = 'RUNNING'),
                (SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) n FROM distribute_event
                   WHERE topic = 'KEYED' AND $in_flight AND $space IS NOT NULL GROUP BY $space) k),
                (SELECT COUNT(*) FROM distribute_event WHERE topic = 'KEYED' AND $in_flight AND $space IS NULL)" \
      >>"$WORK/samples" 2>/dev/null || true
    sleep 0.02
  done ) &
STARTED_PIDS+=($!)

sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
     SELECT 't1', CONCAT('sync-', seq), CONCAT('item-', seq), 'SYNC',
            CONCAT('{\"id\": ', seq, ', \"demo\": {\"sleep_ms\": 100}}') FROM seq_1_to_200"
sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
     SELECT 't1', CONCAT('key-', seq), CONCAT('key-', seq), 'KEYED',
            CONCAT('{\"space_id\": \"s', seq % 3, '\", \"demo\": {\"sleep_ms\": 40}}') FROM seq_1_to_150"
sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload)
     SELECT 't1', CONCAT('free-', seq), CONCAT('free-', seq), 'KEYED', '{\"demo\": {\"sleep_ms\": 300}}' FROM seq_1_to_30"
done_sync() { sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'SYNC' AND status = 'SUCCESS'"; }

# Two nodes die while running SYNC events (kill -9), once a quarter of SYNC is done: the
# dead nodes' events stay RUNNING, holding their slots, until the sweeper hands them
# back (offline after 1.5 s); two new nodes take the dead ones' place.
wait_for '[[ $(done_sync) -ge 50 ]]' 120 "50 sync events done"
declare -A pid_of=(["127.0.0.1:$P1"]=n1 ["127.0.0.1:$P2"]=n2 ["127.0.0.1:$P3"]=n3 ["127.0.0.1:$P4"]=n4)
killed=()
# A victim is frozen (SIGSTOP) before its event is confirmed still RUNNING on it, then
# killed: a SYNC event lasts 100 ms, less than a loaded machine may take between the
# query that finds it and the kill, and an event that ended before the kill was not
# interrupted. A node whose event ended in between is thawed and another is looked for.
interrupt_one() {  # kills an original node running a SYNC event; false if it got away
  local alive id name pid_var
  alive=$(printf "'%s'," "${!pid_of[@]}")
  wait_for 'read -r id node <<< "$(sql "SELECT id, node_address FROM distribute_event WHERE topic = '"'SYNC'"'
                AND status = '"'RUNNING'"' AND node_address IN (${alive%,}) ORDER BY id LIMIT 1")"; [[ -n $node ]]' \
    30 "a SYNC event RUNNING on an original node"
  name=${pid_of[$node]}
  pid_var="PID_$name"
  kill -STOP "${!pid_var}"
  if [[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE id = $id AND status = 'RUNNING' AND node_address = '$node'") != 1 ]]; then
    kill -CONT "${!pid_var}"
    return 1
  fi
  kill9 "${!pid_var}"
  unset "pid_of[$node]"
  killed+=("$name")
}
for attempt in $(seq 1 20); do
  (( ${#killed[@]} == 2 )) && break
  interrupt_one || true
done
(( ${#killed[@]} == 2 )) || fail "could not catch two nodes running a SYNC event in 20 attempts"
echo "killed ${killed[*]} (each running a SYNC event) at $(done_sync) sync events done"
start_node n5 "$P5" --capacity 16
start_node n6 "$P6" --capacity 16
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE status = '"'SUCCESS'"'") == 380 ]]' 300 "every event SUCCESS"
resets=$(sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'SYNC' AND reset_count > 0")

samples=$(wc -l < "$WORK/samples")
read -r max_sync max_running max_space max_free <<< "$(awk '{ for (i = 1; i <= 4; i++) if ($i > m[i]) m[i] = $i }
  END { print m[1] + 0, m[2] + 0, m[3] + 0, m[4] + 0 }' "$WORK/samples")"
echo "$samples samples: SYNC in flight max $max_sync (RUNNING max $max_running); KEYED per space max $max_space; KEYED without a space max $max_free; events reset after the kills: $resets"
(( samples >= 50 )) || fail "only $samples samples"
(( resets >= 2 )) || fail "the kills interrupted $resets SYNC events, expected at least 2"
(( max_sync <= 2 )) || fail "env_b's limit of 2 exceeded: $max_sync SYNC events in flight at once"
(( max_sync == 2 )) || fail "env_b's limit never reached ($max_sync): the check proves nothing"
pass "datasource limit: at most 2 events touching env_b in flight on 4+ nodes of capacity 16, through two kill -9s"
(( max_space <= 3 )) || fail "the per-key limit of 3 exceeded: $max_space of one space_id in flight"
(( max_space == 3 )) || fail "the per-key limit never reached ($max_space)"
pass "key limit: at most 3 events of one space_id in flight"
(( max_free > 3 )) || fail "events without a space_id were limited too (max $max_free in flight)"
pass "events without the key are not limited ($max_free in flight at once)"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM item")" 200 "every item synced to env_b"
