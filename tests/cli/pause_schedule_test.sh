#!/usr/bin/env bash
# Issue 37 items 3 and 4 through real processes: two dispatchers, a node and the API.
#   Pause: `dsync pause` keeps a topic's due events PENDING (listed as `paused` by the
#   attention view) while events of the topic already running finish and other topics
#   run; the pause survives kill -9 of every dispatcher and a restart, and a leader
#   change (kill -9 of the leader); `dsync topics` and GET /v1/topics show who paused
#   it and when; POST /v1/topics/{topic}/resume (token required) lets them run.
#   Schedules (six-field cron, a tick every 20 s, grace 8 s; the lease TTL is 3 s, so a
#   takeover ends well within the grace): with every dispatcher down across a tick for
#   longer than grace_ms, `skip` fires nothing for it and `run_once` fires it once; a
#   schedule fires one event per tick across a kill -9 of the leader a few seconds
#   before the tick (the other dispatcher fires it, once), and every tick from the first
#   has exactly one event (but the one `skip` passed over); `dsync schedules` and
#   GET /v1/schedules list the next and last runs; `dsync schedules` prints a long
#   cron expression whole, the columns after it aligned. Takes about 55 s.
source "$(dirname "$0")/lib.sh"
read -r NODE_PORT API_PORT <<< "$(free_ports 2 | tr '\n' ' ')"
token="pause-test-token-$$"
SVC=pause-sched
# Schedules tick every P s at second O (mod P) of each minute, O chosen so that the
# first tick comes ~10 s after the start (once a leader has created the schedules' rows)
# and the next one just after the pause checks: no waiting for a phase later.
P=20 G=8
O=$(( ($(date +%s) + 10) % P ))
CRON="$O/$P * * * * *"

write_config "$SVC" '{
  "PAUSABLE": { "steps": [ { "name": "p", "type": "demo" } ] },
  "OTHER":    { "steps": [ { "name": "o", "type": "demo" } ] },
  "TICK":     { "ordered": false, "steps": [ { "name": "t", "type": "demo" } ] }
}' "{\"api\": {\"token\": \"$token\"},
     \"schedules\": {
       \"skip-20s\": {\"cron\": \"$CRON\", \"topic\": \"TICK\", \"missed\": \"skip\", \"grace_ms\": 8000,
                     \"payload\": {\"kind\": \"skip\"}},
       \"once-20s\": {\"cron\": \"$CRON\", \"topic\": \"TICK\", \"missed\": \"run_once\", \"grace_ms\": 8000}}}"

"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_bg d1 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_bg d2 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_node node "$NODE_PORT" --capacity 8
start_bg api "$DSYNC_BIN" serve --config "$WORK/dsync.json" --listen "127.0.0.1:$API_PORT"
wait_for "[[ \$(sql \"SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1\") == 1 ]]" 15 "node online"
wait_for "curl -sf -H 'Authorization: Bearer $token' http://127.0.0.1:$API_PORT/healthz >/dev/null" 15 "API up"
has_leader() { [[ $(sql "SELECT COUNT(*) FROM distribute_lease_lock WHERE lock_name = 'dispatcher:$SVC' AND expires_at > UTC_TIMESTAMP(3)") == 1 ]]; }
wait_for has_leader 15 "a leader"
count() { sql "SELECT COUNT(*) FROM distribute_event WHERE $1"; }
# leader_name: d1, d2 or d3, whichever holds the lease (by the pid in its owner).
leader_name() {
  local owner d pid_var
  owner=$(sql "SELECT owner FROM distribute_lease_lock WHERE lock_name = 'dispatcher:$SVC' AND expires_at > UTC_TIMESTAMP(3)")
  for d in d1 d2 d3; do
    pid_var=PID_$d
    [[ -n ${!pid_var:-} && $owner == *":${!pid_var}:"* ]] && { echo "$d"; return; }
  done
}
api() {  # api METHOD PATH [BODY] -> body; HTTP status in $WORK/status
  local args=(-s -o "$WORK/body" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $token")
  [[ $1 == POST ]] && args+=(-H 'Content-Type: application/json' --data "${3:-}")
  curl "${args[@]}" "http://127.0.0.1:$API_PORT$2" >"$WORK/status"
  cat "$WORK/body"
}

# --- pause: running events finish, due ones wait ----------------------------------
for i in 1 2; do produce "slow-$i" '{"demo": {"sleep_ms": 4000}}' PAUSABLE; done
wait_for '[[ $(count "code LIKE '"'slow-%'"' AND status = '"'RUNNING'"'") == 2 ]]' 15 "two PAUSABLE events running"
out=$("$DSYNC_BIN" pause PAUSABLE --config "$WORK/dsync.json" --reason "maintenance window" --by ops-alice)
[[ $out == "topic PAUSABLE paused by ops-alice at "*": no event of it is assigned until \`dsync resume PAUSABLE\`; running events finish" ]] \
  || fail "pause output: $out"
pass "dsync pause says who paused and what it means"
for i in $(seq 1 10); do produce "wait-$i" '{}' PAUSABLE; done
for i in $(seq 1 5); do produce "other-$i" '{}' OTHER; done
wait_for '[[ $(count "code LIKE '"'other-%'"' AND status = '"'SUCCESS'"'") == 5 ]]' 20 "other topics run"
wait_for '[[ $(count "code LIKE '"'slow-%'"' AND status = '"'SUCCESS'"'") == 2 ]]' 20 "running events finish while paused"
sleep 1  # a few more dispatch cycles
expect_eq "$(count "code LIKE 'wait-%' AND status = 'PENDING'")" 10 "the paused topic's due events stay PENDING"
expect_eq "$(sql "SELECT COUNT(*) FROM v_events_needing_attention WHERE reason = 'paused' AND topic = 'PAUSABLE'")" 10 \
  "the attention view lists them as paused"
detail=$(sql "SELECT detail FROM v_events_needing_attention WHERE code = 'wait-1'")
[[ $detail == "topic PAUSABLE paused by ops-alice at "*" UTC: maintenance window" ]] || fail "attention detail: $detail"
pass "the attention detail names who paused it, when and why"
att=$("$DSYNC_BIN" events --attention --config "$WORK/dsync.json")
[[ $(grep -c "^paused " <<<"$att") == 10 ]] || fail "dsync events --attention: $att"
pass "dsync events --attention lists them too"
topics=$("$DSYNC_BIN" topics --config "$WORK/dsync.json")
grep -Eq "^PAUSABLE +paused +10 +yes +ops-alice +[0-9T:.-]+Z +maintenance window$" <<<"$topics" || fail "dsync topics: $topics"
grep -Eq "^OTHER +active +0 +yes" <<<"$topics" || fail "dsync topics (OTHER): $topics"
pass "dsync topics shows the pause with who, when and why"
again=$("$DSYNC_BIN" pause PAUSABLE --config "$WORK/dsync.json" --by someone-else)
[[ $again == "topic PAUSABLE was already paused by ops-alice at "* ]] || fail "second pause: $again"
pass "a second pause leaves the first one as it is"

# --- the pause survives every dispatcher's death and a restart ----------------------
kill9 "$PID_d1"; kill9 "$PID_d2"
start_bg d3 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
wait_for '[[ $(leader_name) == d3 ]]' 20 "the restarted dispatcher leads"
produce after-restart '{}' OTHER
wait_for '[[ $(count "code = '"'after-restart'"' AND status = '"'SUCCESS'"'") == 1 ]]' 20 "the new leader dispatches"
expect_eq "$(count "code LIKE 'wait-%' AND status = 'PENDING'")" 10 "still paused after a restart of every dispatcher"
# A leader change: a second dispatcher, then kill -9 of the leader.
start_bg d1 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
sleep 1
kill9 "$PID_d3"
wait_for '[[ $(leader_name) == d1 ]]' 20 "the other dispatcher takes over"
produce after-takeover '{}' OTHER
wait_for '[[ $(count "code = '"'after-takeover'"' AND status = '"'SUCCESS'"'") == 1 ]]' 20 "the new leader dispatches"
expect_eq "$(count "code LIKE 'wait-%' AND status = 'PENDING'")" 10 "still paused after a leader change"
start_bg d2 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"

# --- the API: listing, token, resume ----------------------------------------------
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' -d '' http://127.0.0.1:$API_PORT/v1/topics/PAUSABLE/resume)" 401 \
  "resume needs the token"
t=$(api GET /v1/topics)
expect_eq "$(jq -r '.topics[] | select(.topic == "PAUSABLE") | [.paused, .pause.paused_by, .pending] | @tsv' <<<"$t")" \
  "$(printf 'true\tops-alice\t10')" "GET /v1/topics shows the pause"
r=$(api POST /v1/topics/PAUSABLE/resume)
expect_eq "$(cat "$WORK/status") $(jq -r '[.paused, .was_paused, .ended.paused_by] | @tsv' <<<"$r")" \
  "$(printf '200 false\ttrue\tops-alice')" "POST /v1/topics/PAUSABLE/resume"
wait_for '[[ $(count "code LIKE '"'wait-%'"' AND status = '"'SUCCESS'"'") == 10 ]]' 30 "resumed events run"
expect_eq "$(sql "SELECT COUNT(*) FROM v_events_needing_attention WHERE reason = 'paused'")" 0 "nothing paused is left"
r=$(api POST /v1/topics/OTHER/pause '{"reason": "api test", "by": "console-bob"}')
expect_eq "$(cat "$WORK/status") $(jq -r '[.paused, .created, .pause.paused_by] | @tsv' <<<"$r")" \
  "$(printf '200 true\ttrue\tconsole-bob')" "POST /v1/topics/OTHER/pause"
out=$("$DSYNC_BIN" resume OTHER --config "$WORK/dsync.json")
[[ $out == "topic OTHER resumed (paused by console-bob at "* ]] || fail "dsync resume: $out"
pass "dsync resume ends the API's pause"
out=$("$DSYNC_BIN" pause 'bad,name' --config "$WORK/dsync.json" 2>&1) && fail "a malformed topic name was accepted"
[[ $out == *"topic must be 1 to 50 characters of A-Z a-z 0-9 _ . -"* ]] || fail "bad name refusal: $out"
pass "a malformed topic name is refused with one line"

# --- schedules: every dispatcher down across a tick for longer than grace_ms --------
# A late tick is one seen more than G s after its time.
next_after() { echo $(( $1 - (($1 - O) % P + P) % P + P )); }  # next_after EPOCH: the first tick after it
tick_code() { echo "sched:$SVC:$1:$2"; }  # tick_code NAME EPOCH
iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }
next_tick_of() { sql "SELECT TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', next_tick) FROM dsync_schedule WHERE name = '$1'"; }
# handled_and_clear: both schedules fired a tick already, have handled every due tick
# (their next_tick is the next tick after now), and that tick is at least 3 s away, so
# a kill now precedes it.
handled_and_clear() {
  local now next
  next=$(next_after "$(date +%s)")
  [[ $(sql "SELECT COUNT(*) FROM dsync_schedule WHERE last_tick IS NOT NULL") == 2 ]] || return 1
  [[ $(next_tick_of skip-20s) == "$next" && $(next_tick_of once-20s) == "$next" ]] || return 1
  now=$(date +%s); (( next - now >= 3 ))
}
wait_for handled_and_clear $(( 2 * P + 5 )) "both schedules up to date, 3 s or more before a tick"
for d in d1 d2 d3; do pid_var=PID_$d; [[ -n ${!pid_var:-} ]] && kill9 "${!pid_var}"; done
tick_b=$(next_tick_of once-20s)
(( $(date +%s) < tick_b )) || fail "every dispatcher was not down before the tick at $(iso $tick_b)"
pass "every dispatcher kill -9'd $(( tick_b - $(date +%s) )) s before the tick at $(iso $tick_b)"
wait_for "(( \$(date +%s) >= $tick_b + G + 1 ))" $(( P + G + 5 )) "$(( G + 1 )) s past the tick with no dispatcher"
start_bg d1 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
start_bg d2 "$DSYNC_BIN" dispatcher --config "$WORK/dsync.json"
# The restarted leader must look before the next tick (P - G - 1 s later), or the tick
# it fires is that one.
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE code = '"'$(tick_code once-20s $tick_b)'"'") == 1 ]]' \
  $(( P - G - 1 )) "run_once fires the missed tick when a dispatcher is back"
wait_for '[[ $(sql "SELECT skipped_ticks FROM dsync_schedule WHERE name = '"'skip-20s'"'") != 0 ]]' 5 "skip's pass after the gap"
expect_eq "$(count "code = '$(tick_code skip-20s $tick_b)'")" 0 "skip does not fire a tick seen over $(( G + 1 )) s late (grace $G s)"
expect_eq "$(sql "SELECT skipped_ticks FROM dsync_schedule WHERE name = 'skip-20s'")" 1 "skip counted the tick it passed over"
expect_eq "$(sql "SELECT skipped_ticks FROM dsync_schedule WHERE name = 'once-20s'")" 0 "run_once skipped nothing"

# --- schedules: one event per tick across a leader kill ----------------------------
# Kill the leader 6 to 9 s before a tick: the other dispatcher leads before the tick.
until_tick() { local now; now=$(date +%s); echo $(( $(next_after "$now") - now )); }
wait_for '(( $(until_tick) >= 6 && $(until_tick) <= 9 ))' $(( P + 2 )) "6 to 9 s before a tick"
tick_c=$(next_after "$(date +%s)")
wait_for '[[ -n $(leader_name) ]]' 3 "a leader before the tick"
leader=$(leader_name)
pid_var=PID_$leader
kill9 "${!pid_var}"
pass "leader $leader kill -9'd $(( tick_c - $(date +%s) )) s before the tick at $(iso $tick_c)"
wait_for "(( \$(date +%s) >= $tick_c + 5 ))" $(( P + 5 )) "5 s past the tick"
for s in skip-20s once-20s; do
  expect_eq "$(count "code = '$(tick_code $s $tick_c)' AND topic = 'TICK'")" 1 "$s fired the tick after the leader kill"
done
fired_by=$(grep -l "SCHEDULE_FIRED schedule=once-20s service=$SVC tick=$(iso $tick_c)" "$WORK"/d[123].log | wc -l)
expect_eq "$fired_by" 1 "one dispatcher fired the tick"
# Every tick since the schedules started, up to tick_c, has exactly one event, and none
# is missing (but skip's at tick_b).
first=$(sql "SELECT MIN(CAST(SUBSTRING_INDEX(code, ':', -1) AS UNSIGNED)) FROM distribute_event WHERE topic = 'TICK' AND data_id = 'once-20s'")
ticks=$(( (tick_c - first) / P + 1 ))
(( first < tick_b )) || fail "the first tick $(iso $first) is not before the gap"
upto="topic = 'TICK' AND CAST(SUBSTRING_INDEX(code, ':', -1) AS UNSIGNED) <= $tick_c"
expect_eq "$(sql "SELECT COUNT(*), COUNT(DISTINCT code) FROM distribute_event WHERE $upto AND data_id = 'once-20s'" | tr '\t' ' ')" \
  "$ticks $ticks" "once-20s: one event per tick from the first ($(iso $first)) to the last"
expect_eq "$(sql "SELECT COUNT(*), COUNT(DISTINCT code) FROM distribute_event WHERE $upto AND data_id = 'skip-20s'" | tr '\t' ' ')" \
  "$(( ticks - 1 )) $(( ticks - 1 ))" "skip-20s: one event per tick from the first to the last, but the one it skipped"
expect_eq "$(sql "SELECT GROUP_CONCAT(skipped_ticks ORDER BY name) FROM dsync_schedule")" "0,1" \
  "no other tick skipped (once-20s, skip-20s)"
# Listed before the next tick (tick_c + P) changes them.
out=$("$DSYNC_BIN" schedules --config "$WORK/dsync.json")
grep -Eq "^once-20s +${CRON//\*/\\*} +TICK +run_once +$(iso $(( tick_c + P )) | sed 's/Z$/.000Z/') +$(iso $tick_c | sed 's/Z$/.000Z/') " <<<"$out" \
  || fail "dsync schedules: $out"
pass "dsync schedules lists the next tick and the last run"
s=$(api GET /v1/schedules)
expect_eq "$(jq -r '.schedules[] | select(.name == "skip-20s") | [.missed, .skipped_ticks, .last_event_code, .next_tick, .next_tick_source] | @tsv' <<<"$s")" \
  "$(printf 'skip\t1\t%s\t%s\tleader' "$(tick_code skip-20s $tick_c)" "$(iso $(( tick_c + P )) | sed 's/Z$/.000Z/')")" "GET /v1/schedules"
wait_for '[[ $(count "topic = '"'TICK'"' AND status <> '"'SUCCESS'"'") == 0 ]]' 10 "the schedule's events ran"
payload=$(sql "SELECT payload FROM distribute_event WHERE code = '$(tick_code skip-20s $tick_c)'")
expect_eq "$(jq -c . <<<"$payload")" \
  "{\"kind\":\"skip\",\"schedule\":{\"name\":\"skip-20s\",\"tick\":\"$(iso $tick_c)\"}}" \
  "the event's payload names the schedule and the tick"

# --- `dsync schedules` and `dsync topics` print long values whole -------------------
# Another service with no dispatcher: its next ticks are computed from the config. Its
# topic and one schedule's name have the 50 characters the database holds.
long_topic=TOPIC_OF_FIFTY_CHARACTERS_0123456789_0123456789_ab
long_name=schedule-of-fifty-characters-0123456789-0123456789
(( ${#long_topic} == 50 && ${#long_name} == 50 )) || fail "the test's long names are not 50 characters"
CONFIG_FILE="$WORK/long-cron.json" write_config "$SVC-cron" "{\"$long_topic\": {\"steps\": [{\"name\": \"l\", \"type\": \"demo\"}]}}" \
  "{\"schedules\": {\"weekday-quarters\": {\"cron\": \"0 0,15,30,45 3-5 * * mon-fri\", \"topic\": \"$long_topic\"},
                  \"$long_name\": {\"cron\": \"@daily\", \"topic\": \"$long_topic\"}}}"
out=$("$DSYNC_BIN" schedules --config "$WORK/long-cron.json")
grep -Eq "^weekday-quarters +0 0,15,30,45 3-5 \* \* mon-fri +$long_topic +skip +[0-9T:.-]+Z \(computed\) " <<<"$out" \
  || fail "dsync schedules (a 28-character cron, a 50-character topic): $out"
grep -Eq "^$long_name +@daily +$long_topic +skip " <<<"$out" || fail "dsync schedules (a 50-character name): $out"
pass "dsync schedules prints long names, cron expressions and topics whole"
# Each column's header and its values start in the same column: CRON, TOPIC, MISSED.
for column in "CRON:0 0,15;@daily" "TOPIC:$long_topic" "MISSED:skip"; do
  expect_eq "$(awk -v h="${column%%:*}" -v v="${column#*:}" '
      NR == 1 { print index($0, h); next }
      { n = split(v, alts, ";"); for (i = 1; i <= n; i++) if (index($0, alts[i])) print index($0, alts[i]) }' <<<"$out" | sort -u)" \
    "$(awk -v h="${column%%:*}" 'NR == 1 { print index($0, h) }' <<<"$out")" "dsync schedules: ${column%%:*} aligned"
done
# `dsync topics`: the 50-character topic, paused by a 40-character name, whole and aligned.
long_by=operator-with-a-forty-character-name-012
"$DSYNC_BIN" pause "$long_topic" --config "$WORK/long-cron.json" --by "$long_by" >/dev/null
out=$("$DSYNC_BIN" topics --config "$WORK/long-cron.json")
grep -Eq "^$long_topic +paused +0 +yes +$long_by +[0-9T:.-]+Z +-$" <<<"$out" || fail "dsync topics (long values): $out"
expect_eq "$(awk 'NR == 1 { print index($0, "PAUSED_AT") } NR > 1 { print match($0, /[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T/) }' <<<"$out" | sort -u)" \
  "$(awk 'NR == 1 { print index($0, "PAUSED_AT") }' <<<"$out")" "dsync topics: PAUSED_AT aligned"
pass "dsync topics prints a 50-character topic and a long pauser whole"
echo "PASS"
