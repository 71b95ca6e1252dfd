#!/usr/bin/env bash
# Batch completion (issue 16 item 7) with real processes: 1,000 events produced with
# `dsync produce --file --on-complete-topic`, two dispatchers, one node. When every
# event is terminal, the leader detects it and starts the completing transaction; a
# test session holds the distribute_batch row locked so the leader is caught inside
# it, and the leader is kill -9'd there. The other dispatcher takes the lease over and
# produces the completion event: exactly one, with the batch's counts, which the node
# then runs. Also POST /v1/batches with on_complete, and its bad input.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT <<< "$(free_ports 1 | tr '\n' ' ')"

port=$(free_port)
write_config batch-e2e '{
  "W":    { "ordered": false, "steps": [ { "name": "w", "type": "demo" } ] },
  "DONE": { "steps": [ { "name": "d", "type": "demo" } ] }
}' '{"registry":   {"heartbeat_interval_ms": 400, "offline_timeout_ms": 4000, "sweep_interval_ms": 500},
     "dispatcher": {"lease_ttl_ms": 2000, "batch_check_interval_ms": 100},
     "consumer":   {"poll_interval_ms": 20}}' "{\"api\": {\"listen\": \"127.0.0.1:$port\"}}"
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null

# 1,000 events, 20 of them failing permanently (COMPENSATED: terminal too).
for i in $(seq 1 1000); do
  if (( i % 50 == 0 )); then payload='{"demo": {"fail": {"w": "permanent"}}}'; else payload='{}'; fi
  echo "{\"code\": \"e-$i\", \"topic\": \"W\", \"tenant_id\": \"t1\", \"data_id\": \"d$i\", \"payload\": $payload}"
done > "$WORK/events.jsonl"

# The lock holder: a client session fed through a FIFO.
mkfifo "$WORK/lock.fifo"
MYSQL_PWD=$DB_PASS mariadb --unbuffered -N -B -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SCHEMA" <"$WORK/lock.fifo" >"$WORK/lock.out" 2>&1 &
STARTED_PIDS+=($!)
exec 7>"$WORK/lock.fifo"

out=$("$DSYNC_BIN" produce --config "$WORK/dsync.json" --file "$WORK/events.jsonl" --batch B1 --batch-size 300 \
        --on-complete-topic DONE --on-complete-payload '{"report": "nightly"}')
expect_eq "$out" "batch B1: created=1000 existing=0 (follow it: dsync events --batch B1)" "1,000 events produced"
expect_eq "$(sql "SELECT CONCAT(status, ' ', on_complete_topic) FROM distribute_batch WHERE batch_code = 'B1'")" \
  "OPEN DONE" "the batch names its completion event"
echo "BEGIN; SELECT batch_code FROM distribute_batch WHERE batch_code = 'B1' FOR UPDATE;" >&7
wait_for '[[ -s $WORK/lock.out ]]' 10 "the test session holds the batch row"

start_bg d1 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_bg d2 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_bg n1 "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${N1_PORT} --capacity 8

terminal() { sql "SELECT COUNT(*) FROM distribute_event WHERE batch_code = 'B1' AND status IN ('SUCCESS', 'FAILED', 'COMPENSATED')"; }
wait_for '[[ $(terminal) == 1000 ]]' 120 "every event of the batch terminal"
# The leader found the batch complete and waits inside its completing transaction.
waiting() {
  sql "SELECT COUNT(*) FROM information_schema.innodb_trx t JOIN information_schema.processlist p
       ON p.id = t.trx_mysql_thread_id
       WHERE t.trx_state = 'LOCK WAIT' AND p.db = '$SCHEMA' AND t.trx_query LIKE '%distribute_batch%'"
}
for i in $(seq 1 200); do [[ $(waiting) == 1 ]] && break; sleep 0.1; done
if [[ $(waiting) != 1 ]]; then
  echo "DIAG waiting=$(waiting)"; sql "SELECT t.trx_state, p.db, p.command, p.state, LEFT(IFNULL(t.trx_query, p.info), 100) FROM information_schema.innodb_trx t LEFT JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id"
  sql "SELECT * FROM distribute_batch"; sql "SELECT status, COUNT(*) FROM distribute_event GROUP BY status"
  grep -vh "EVENT_\|STEP_\|CLAIM" $WORK/d1.log $WORK/d2.log | cut -c1-250 | tail -30
fi
wait_for '[[ $(waiting) == 1 ]]' 20 "the leader inside the completing transaction"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code = 'done:batch-e2e:B1'")" 0 "no completion event yet"
owner=$(sql "SELECT owner FROM distribute_lease_lock WHERE lock_name LIKE '%batch-e2e%'")
leader=""
for d in d1 d2; do
  pid_var=PID_$d
  [[ $owner == *":${!pid_var}:"* ]] && leader=$d
done
[[ -n $leader ]] || fail "no leader among the dispatchers (owner: $owner)"
leader_pid_var=PID_$leader
kill9 "${!leader_pid_var}"
pass "leader $leader kill -9'd during detection"
echo "ROLLBACK;" >&7
exec 7>&-

wait_for '[[ $(sql "SELECT status FROM distribute_batch WHERE batch_code = '"'B1'"'") == COMPLETED ]]' 30 \
  "the other dispatcher completes the batch"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'done:%'")" 1 "exactly one completion event"
payload=$(sql "SELECT payload FROM distribute_event WHERE code = 'done:batch-e2e:B1'")
echo "$payload" | grep -q '"total":1000' || fail "payload lacks the total: $payload"
echo "$payload" | grep -q '"by_status":{"COMPENSATED":20,"SUCCESS":980}' || fail "payload lacks the counts: $payload"
echo "$payload" | grep -q '"report":"nightly"' || fail "payload lacks the producer's fields: $payload"
pass "completion payload: the producer's fields and the batch's counts"
survivor=d1; [[ $leader == d1 ]] && survivor=d2
grep -q "BATCH_COMPLETED batch=B1 event=done:batch-e2e:B1" "$WORK/$survivor.log" || fail "no BATCH_COMPLETED line from $survivor"
wait_for '[[ $(event_status done:batch-e2e:B1) == SUCCESS ]]' 30 "the node ran the completion event"
sleep 0.5  # further checks by the leader change nothing
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code LIKE 'done:%'")" 1 "still exactly one"

# The API: on_complete in POST /v1/batches; bad input rejected and nothing written.
start_bg api "$DSYNC_BIN" serve --config "$WORK/dsync.json"
wait_for "curl -sf http://127.0.0.1:$port/healthz >/dev/null" 15 "API up"
post() { curl -s -o "$WORK/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$1" "http://127.0.0.1:$port/v1/batches"; }
ev='{"code": "a-1", "topic": "W", "tenant_id": "t1", "data_id": "a1"}'
expect_eq "$(post "{\"batch_code\": \"B2\", \"events\": [$ev], \"on_complete\": {\"topic\": \"NOPE\"}}")" 400 "unknown completion topic"
grep -q 'on_complete: unknown topic' "$WORK/body" || fail "unclear error: $(cat "$WORK/body")"
expect_eq "$(post "{\"batch_code\": \"B2\", \"events\": [$ev], \"on_complete\": {\"topic\": \"DONE\", \"x\": 1}}")" 400 "unknown on_complete field"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE batch_code = 'B2'")$(sql "SELECT COUNT(*) FROM distribute_batch WHERE batch_code = 'B2'")" 00 "rejected batches wrote nothing"
expect_eq "$(post "{\"batch_code\": \"B2\", \"events\": [$ev], \"on_complete\": {\"topic\": \"DONE\", \"payload\": {\"n\": 2}}}")" 201 "batch with on_complete"
wait_for '[[ $(event_status done:batch-e2e:B2) == SUCCESS ]]' 30 "B2's completion event produced and run"
echo "batch_completion_test: all ok"
