#!/usr/bin/env bash
# Issue 34 item 1, with real processes: a batch's completion event cannot be taken by a
# producer, and batch codes are scoped by service.
#  - `dsync produce` refuses a code with the completion prefix (exit 2, nothing written).
#  - A plain-SQL producer inserts the batch's completion code first (the API and the
#    CLI cannot stop SQL). Until issue 34 the leader took that event for its own, marked
#    the batch COMPLETED and logged BATCH_COMPLETED while the real on_complete event was
#    never produced. Now the leader marks the batch CONFLICT with the reason, logs
#    BATCH_COMPLETION_CONFLICT, produces nothing, and `dsync events --batch` shows it.
#  - Two services with one batch code each: each service's dispatcher completes its own
#    batch with its own events' counts, and `dsync events --batch` counts its own.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r NA_PORT NB_PORT <<< "$(free_ports 2 | tr '\n' ' ')"

TOPICS='{ "W": { "ordered": false, "steps": [ { "name": "w", "type": "demo" } ] },
          "DONE": { "steps": [ { "name": "d", "type": "demo" } ] } }'
FAST='{"dispatcher": {"batch_check_interval_ms": 100}, "consumer": {"poll_interval_ms": 20}}'
CONFIG_FILE=$WORK/a.json write_config svc-a "$TOPICS" "$FAST"
CONFIG_FILE=$WORK/b.json write_config svc-b "$TOPICS" "$FAST"
"$DSYNC_BIN" migrate --config "$WORK/a.json" >/dev/null

lines() {  # lines PREFIX N: N events of topic W
  local i
  for i in $(seq 1 "$2"); do echo "{\"code\": \"$1-$i\", \"topic\": \"W\", \"tenant_id\": \"t1\", \"data_id\": \"$1$i\"}"; done
}

# The CLI refuses the reserved prefix.
set +e
"$DSYNC_BIN" produce --config "$WORK/a.json" --code 'done:svc-a:HB' --topic DONE --tenant t1 --data-id x \
  >"$WORK/out" 2>"$WORK/err"
rc=$?
set -e
expect_eq "$rc" 2 "produce of a completion code: exit 2"
grep -q "reserved for batch completion events" "$WORK/err" || fail "unclear error: $(cat "$WORK/err")"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event")" 0 "nothing written"

# Batch HB of service A, hijacked by a plain INSERT of its completion code.
lines hb 3 > "$WORK/hb.jsonl"
"$DSYNC_BIN" produce --config "$WORK/a.json" --file "$WORK/hb.jsonl" --batch HB --on-complete-topic DONE >/dev/null
sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, service)
     VALUES ('t1', 'done:svc-a:HB', 'x', 'W', '{\"forged\": true}', 'svc-a')"
# Batch SB in both services: 2 events in A, 4 in B, each with a completion event.
lines sa 2 > "$WORK/sa.jsonl"
lines sb 4 > "$WORK/sb.jsonl"
"$DSYNC_BIN" produce --config "$WORK/a.json" --file "$WORK/sa.jsonl" --batch SB --on-complete-topic DONE >/dev/null
"$DSYNC_BIN" produce --config "$WORK/b.json" --file "$WORK/sb.jsonl" --batch SB --on-complete-topic DONE >/dev/null
expect_eq "$(sql "SELECT GROUP_CONCAT(CONCAT(service, '/', batch_code, '/', status) ORDER BY service, batch_code)
                  FROM distribute_batch")" "svc-a/HB/OPEN,svc-a/SB/OPEN,svc-b/SB/OPEN" "three batch rows, SB once per service"

start_bg da "$DSYNC_BIN" dispatcher --config "$WORK/a.json"
start_bg db "$DSYNC_BIN" dispatcher --config "$WORK/b.json"
start_bg na "$DSYNC_BIN" node --config "$WORK/a.json" --node-address 127.0.0.1:${NA_PORT} --capacity 4
start_bg nb "$DSYNC_BIN" node --config "$WORK/b.json" --node-address 127.0.0.1:${NB_PORT} --capacity 4

batch_status() { sql "SELECT status FROM distribute_batch WHERE service = '$1' AND batch_code = '$2'"; }
wait_for '[[ $(batch_status svc-a HB) == CONFLICT ]]' 60 "service A's leader marks the hijacked batch CONFLICT"
wait_for '[[ $(batch_status svc-a SB) == COMPLETED && $(batch_status svc-b SB) == COMPLETED ]]' 60 \
  "both services complete their own SB"

# The hijack: reported, not taken for a completion.
grep -q "BATCH_COMPLETION_CONFLICT batch=HB event=done:svc-a:HB service=svc-a reason=event done:svc-a:HB exists but was not produced by this batch's completer (topic W" \
  "$WORK/da.log" || fail "no BATCH_COMPLETION_CONFLICT line: $(grep BATCH "$WORK/da.log" | tail -3)"
! grep -q "BATCH_COMPLETED batch=HB" "$WORK/da.log" || fail "the leader logged a completion it did not produce"
pass "the leader logged BATCH_COMPLETION_CONFLICT and no BATCH_COMPLETED for HB"
expect_eq "$(sql "SELECT CONCAT(topic, ' ', payload) FROM distribute_event WHERE code = 'done:svc-a:HB'")" \
  'W {"forged": true}' "the producer's event is left as written"
out=$("$DSYNC_BIN" events --config "$WORK/a.json" --batch HB)
[[ $out == *"completion: CONFLICT done:svc-a:HB (event done:svc-a:HB exists but was not produced by this batch's completer"* ]] \
  || fail "dsync events --batch does not show the conflict: $out"
pass "dsync events --batch HB shows the conflict"

# Scoped by service: each completion event counts its own service's events.
for s in a b; do
  payload=$(sql "SELECT payload FROM distribute_event WHERE code = 'done:svc-$s:SB' AND service = 'svc-$s'")
  total=$([[ $s == a ]] && echo 2 || echo 4)
  echo "$payload" | grep -q "\"total\":$total" || fail "svc-$s SB completion counts the wrong events: $payload"
done
pass "SB of svc-a counted 2 events, SB of svc-b 4"
expect_eq "$("$DSYNC_BIN" events --config "$WORK/b.json" --batch SB | head -1)" "batch SB: 4/4 terminal (100.0%) SUCCESS=4" \
  "dsync events --batch SB in service B counts B's events"
wait_for '[[ $(event_status done:svc-b:SB) == SUCCESS && $(event_status done:svc-a:SB) == SUCCESS ]]' 30 \
  "each service's node ran its completion event"
echo "batch_hijack_test: all ok"
