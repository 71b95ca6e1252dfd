#!/usr/bin/env bash
# Issue 5: the operator commands through the real binary and a real pipeline.
# produce (flags, --event JSON, --file/stdin in batches) is idempotent by code and
# writes nothing for bad input (unknown topic, bad JSON, hostile strings, a bad line
# anywhere in a file); events lists with filters and keyset pages; events show prints
# the step timeline; retry re-drives FAILED/COMPENSATED events from the failed step or
# from the start (and refuses others); drain makes a live node exit; --json is JSON.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT <<< "$(free_ports 1 | tr '\n' ' ')"

write_config ops '{
  "DEMO": { "max_retry": 2, "backoff_base_ms": 50, "backoff_max_ms": 100, "ordered": false,
            "steps": [ { "name": "s1", "type": "demo" }, { "name": "s2", "type": "demo" },
                       { "name": "s3", "type": "demo" } ] },
  "OTHER": { "steps": [ { "name": "only", "type": "demo" } ] }
}' '{"consumer": {"drain_timeout_ms": 5000, "capacity": 4}}'
dsync() { "$DSYNC_BIN" "$@" --config "$WORK/dsync.json"; }
events_digest() { sql "SELECT COUNT(*), IFNULL(SUM(CRC32(CONCAT_WS('|', code, topic, tenant_id, data_id, payload))), 0) FROM distribute_event"; }
expect_fail() {  # expect_fail EXIT_CODE "message part" WHAT -- cmd...
  local want=$1 part=$2 what=$3; shift 4
  local out rc=0
  out=$("$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == "$want" ]] || fail "$what: exit $rc (want $want): $out"
  [[ $out == *"$part"* ]] || fail "$what: message '$out' lacks '$part'"
  [[ $(printf '%s' "$out" | wc -l) -le 1 ]] || fail "$what: message is not one line: $out"
  pass "$what -> exit $want: $out"
}
dsync migrate >/dev/null

# --- produce: flags, idempotent by code --------------------------------------
out=$(dsync produce --topic DEMO --code op-1 --tenant t1 --data-id d1 --payload '{"k": "v"}')
[[ $out == "created event op-1 "* ]] || fail "first produce: $out"
out=$(dsync produce --topic DEMO --code op-1 --tenant t1 --data-id OTHER --payload '{"k": "changed"}')
[[ $out == "event op-1 already exists"* ]] || fail "second produce: $out"
expect_eq "$(sql "SELECT CONCAT(COUNT(*), ' ', MAX(data_id), ' ', MAX(payload)) FROM distribute_event WHERE code = 'op-1'")" \
  '1 d1 {"k":"v"}' "same code twice: one event, the first one's content"
json=$(dsync produce --event '{"code": "op-2", "topic": "OTHER", "tenant_id": "t1", "data_id": "d2", "priority": -3, "trace_id": "tr-9"}' --json)
expect_eq "$(jq -r '"\(.created) \(.event.status) \(.event.priority) \(.event.trace_id)"' <<<"$json")" "true PENDING -3 tr-9" "--event JSON with --json output"

# --- produce: bad input writes nothing ----------------------------------------
before=$(events_digest)
expect_fail 2 "unknown topic 'NOPE'" "unknown topic" -- dsync produce --topic NOPE --code x1 --tenant t --data-id d
expect_fail 2 "--payload is not valid JSON" "malformed payload" -- dsync produce --topic DEMO --code x2 --tenant t --data-id d --payload '{"a":'
expect_fail 2 "--payload must be a JSON object" "payload not an object" -- dsync produce --topic DEMO --code x3 --tenant t --data-id d --payload '[1]'
expect_fail 2 "code must be 1 to 64 characters" "code too long" -- dsync produce --topic DEMO --code "$(printf 'c%.0s' $(seq 1 65))" --tenant t --data-id d
expect_fail 2 "tenant_id contains a control character" "newline in tenant" -- dsync produce --topic DEMO --code x4 --tenant $'a\nb' --data-id d
expect_fail 2 "data_id is not valid UTF-8" "invalid UTF-8" -- dsync produce --topic DEMO --code x5 --tenant t --data-id $'\xff\xfe'
expect_fail 2 "code must be 1 to 64" "empty code" -- dsync produce --topic DEMO --code "" --tenant t --data-id d
expect_fail 2 "unknown field 'colour'" "unknown field in --event" -- dsync produce --event '{"code":"x6","topic":"DEMO","tenant_id":"t","data_id":"d","colour":"red"}'
big=$(head -c 1100000 /dev/zero | tr '\0' 'a')
printf '{"code":"x7","topic":"DEMO","tenant_id":"t","data_id":"d","payload":{"blob":"%s"}}\n' "$big" >"$WORK/big.jsonl"
expect_fail 2 "the limit is 1048576" "oversized payload" -- dsync produce --file "$WORK/big.jsonl"
expect_eq "$(events_digest)" "$before" "event table unchanged after every rejection"

# Hostile strings that are valid text are stored byte for byte, never interpreted.
hostile="x');DROP TABLE e;-- \"\\%_😀"
dsync produce --topic DEMO --code "h-1" --tenant "$hostile" --data-id "' OR 1=1 --" --payload '{"q": "\u0000'"'"'"}' >/dev/null
expect_eq "$(sql "SELECT LOWER(HEX(tenant_id)) FROM distribute_event WHERE code = 'h-1'")" \
  "$(printf '%s' "$hostile" | od -An -tx1 | tr -d ' \n')" "hostile tenant stored byte for byte"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE data_id = ''' OR 1=1 --'")" 1 "hostile data_id stored as text"

# --- produce --file: batches; one bad line rejects the whole file ----------------
for i in $(seq 1 25); do
  printf '{"code":"f-%d","topic":"DEMO","tenant_id":"t2","data_id":"e%d","payload":{}}\n' "$i" "$i"
done >"$WORK/events.jsonl"
cp "$WORK/events.jsonl" "$WORK/bad.jsonl"
echo '{"code":"f-bad","topic":"DEMO","tenant_id":"t2"' >>"$WORK/bad.jsonl"
before=$(events_digest)
expect_fail 2 "bad.jsonl:26: not valid JSON; nothing was written" "bad line 26" -- dsync produce --file "$WORK/bad.jsonl"
expect_eq "$(events_digest)" "$before" "nothing written for a file with one bad line"
out=$(dsync produce --file "$WORK/events.jsonl" --batch b-ops --batch-size 10)
expect_eq "$out" "batch b-ops: created=25 existing=0 (follow it: dsync events --batch b-ops)" "file produced in batches of 10"
out=$(dsync produce --file - --batch b-ops <"$WORK/events.jsonl")
expect_eq "$out" "batch b-ops: created=0 existing=25 (follow it: dsync events --batch b-ops)" "the same file again: all existing"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE batch_code = 'b-ops'")" 25 "25 events carry the batch code"

# --- events: list, filters, keyset pages --------------------------------------
expect_eq "$(dsync events --topic OTHER --json | jq -r '.events | map(.code) | join(",")')" "op-2" "--topic filter"
page1=$(dsync events --status pending --limit 10 --json)
expect_eq "$(jq '.events | length' <<<"$page1")" 10 "first page has 10"
after=$(jq -r '.next' <<<"$page1")
page2=$(dsync events --status PENDING --limit 10 --after "$after" --json)
expect_eq "$(jq -r '[.events[].id] | min < ('"$after"')' <<<"$page2")" true "second page continues below the cursor"
all=$(dsync events --limit 1000 --json | jq '.events | length')
expect_eq "$all" "$(sql "SELECT COUNT(*) FROM distribute_event")" "one page of 1000 lists every event"
expect_fail 2 "unknown status 'DONE'" "bad status" -- dsync events --status done
expect_fail 2 "--limit must be an integer from 1 to 1000" "bad limit" -- dsync events --limit 0
expect_fail 1 "no event 'missing'" "show unknown code" -- dsync events show missing

# --- a pipeline: a permanent failure, compensated; retry re-drives it ---------------
start_bg disp "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_bg n1 "$DSYNC_BIN" node --config "$WORK/dsync.json" --node-address 127.0.0.1:${N1_PORT}
dsync produce --topic DEMO --code poison --tenant t3 --data-id p --payload '{"demo": {"fail": {"s3": "permanent"}}}' >/dev/null
wait_for '[[ $(event_status poison) == COMPENSATED ]]' 20 "poison compensated"
wait_for '[[ $(dsync events --batch b-ops --json | jq .terminal) == 25 ]]' 30 "batch b-ops done"
expect_eq "$(dsync events --batch b-ops)" "batch b-ops: 25/25 terminal (100.0%) SUCCESS=25" "batch progress"
show=$(dsync events show poison)
[[ $show == *"status         COMPENSATED"* && $show == *"COMPENSATE s2"* && $show == *"COMPENSATE s1"* ]] || fail "events show: $show"
pass "events show prints status and the compensation timeline"
expect_eq "$(dsync events show poison --json | jq -r '[.timeline[] | "\(.action):\(.step_name)"] | join(",")')" \
  "EXECUTE:s1,EXECUTE:s2,EXECUTE:s3,COMPENSATE:s2,COMPENSATE:s1" "timeline in run order (compensation reversed)"
expect_fail 1 "is SUCCESS; only FAILED or COMPENSATED" "retry of a SUCCESS event" -- dsync retry f-1
expect_fail 2 "--from must be start or failed-step" "bad --from" -- dsync retry poison --from middle

# The poison is in the payload: retry from the failed step fails again at s3 (s1 and
# s2 were compensated, so they run again too: nothing is SUCCESS in a COMPENSATED event).
v_before=$(sql "SELECT version FROM distribute_event WHERE code = 'poison'")
out=$(dsync retry poison)
# The command prints the status it reads back: PENDING, or already ASSIGNED or RUNNING
# when the dispatcher it woke was quicker (the retry itself is checked in process_log below).
[[ $out =~ ^"event poison re-driven from the failed step: "(PENDING|ASSIGNED|RUNNING)" (version " ]] ||
  fail "retry output: $out"
wait_for '[[ $(event_status poison) == COMPENSATED && $(sql "SELECT attempt FROM distribute_event WHERE code = '"'poison'"'") == 2 ]]' 20 "retried poison compensated again"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'poison'")" 0 "compensated again: no ledger rows"
(( $(sql "SELECT version FROM distribute_event WHERE code = 'poison'") > v_before )) || fail "version did not grow"
# process_log: assigned, claimed, compensating, compensated, then the operator's retry.
expect_eq "$(sql "SELECT JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[0].to')) FROM distribute_event WHERE code = 'poison'")" \
  "ASSIGNED" "the assignment is in process_log"
expect_eq "$(sql "SELECT JSON_UNQUOTE(JSON_EXTRACT(process_log, '\$[4].why')) FROM distribute_event WHERE code = 'poison'")" \
  "operator retry from the failed step" "the retry is in process_log"

# Fix the payload (an operator correcting data) and retry from the start: SUCCESS.
sql "UPDATE distribute_event SET payload = '{}' WHERE code = 'poison'"
dsync retry poison --from start >/dev/null
wait_for '[[ $(event_status poison) == SUCCESS ]]' 20 "poison SUCCESS after the fix"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'poison' AND applications = 1")" 3 "ledger: 3 steps applied once"
expect_eq "$(saga_violations)" 0 "saga order holds"

# A FAILED event whose compensation did not finish (s3 permanent, the compensation of
# s2 always fails): s1 still SUCCESS, s2 COMPENSATING, both applied. A retry never runs
# them forward again (issue 34: s2 used to be re-applied, its ledger row at 2, then 3):
# it finishes the compensation; a second retry then runs the event from a clean state.
dsync produce --topic DEMO --code keep --tenant t4 --data-id k --payload '{"demo": {"fail": {"s3": "permanent"}, "fail_compensation": {"s2": "always"}}}' >/dev/null
wait_for '[[ $(event_status keep) == FAILED ]]' 30 "keep FAILED (compensation of s2 never succeeds)"
expect_eq "$(sql "SELECT GROUP_CONCAT(status ORDER BY sort) FROM distribute_event_step WHERE job_code = 'keep'")" \
  "SUCCESS,COMPENSATING,FAILED" "s1 untouched, s2 compensation failed, s3 failed"
sql "UPDATE distribute_event SET payload = '{}' WHERE code = 'keep'"
expect_fail 1 "steps still applied: s1 (SUCCESS), s2 (COMPENSATING); retry it without --from start" \
  "retry --from start of a half-compensated event" -- dsync retry keep --from start
out=$(dsync retry keep)
[[ $out == "event keep re-driven to finish its compensation"* ]] || fail "retry output: $out"
wait_for '[[ $(event_status keep) == COMPENSATED ]]' 20 "keep COMPENSATED (its compensation finished)"
expect_eq "$(sql "SELECT COUNT(*) FROM demo_ledger WHERE event_code = 'keep'")" 0 "compensated: no ledger rows"
dsync retry keep >/dev/null
wait_for '[[ $(event_status keep) == SUCCESS ]]' 20 "keep SUCCESS"
expect_eq "$(sql "SELECT GROUP_CONCAT(applications ORDER BY step_name) FROM demo_ledger WHERE event_code = 'keep'")" "1,1,1" \
  "ledger: every step applied exactly once"

# --- drain: the node exits by itself ----------------------------------------
expect_eq "$(dsync nodes --json | jq -r '.[0].status')" online "node online"
out=$(dsync drain 127.0.0.1:${N1_PORT})
[[ $out == "node 127.0.0.1:${N1_PORT} is draining"* ]] || fail "drain output: $out"
wait_for '! kill -0 $PID_n1 2>/dev/null' 10 "drained node exits"
rc=0; wait "$PID_n1" || rc=$?
expect_eq "$rc" 0 "drained node exit code"
expect_fail 1 "no live node '127.0.0.1:${N1_PORT}'" "drain of a node that is gone" -- dsync drain 127.0.0.1:${N1_PORT}
expect_fail 2 "'dsync drain' needs ADDRESS" "drain without address" -- dsync drain
echo "operator_test: all passed"
