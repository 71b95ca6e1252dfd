#!/usr/bin/env bash
# Issue 34 item 7, through the real binary: `dsync produce` refuses codes holding
# control, bidi or zero-width characters and the reserved completion prefix (one line,
# exit 2, nothing written); JSON input nests at most 64 levels, as in the API;
# `dsync events`, `dsync events show` and their --json never write a control character,
# bidi override or zero-width character read from the database to the terminal (rows
# written by plain SQL hold ESC/OSC sequences, U+202E and U+200B in a code, an error, a
# payload and a step error; the output bytes are checked); and `dsync purge
# --older-than` refuses a duration that would overflow instead of deleting every
# finished event.
source "$(dirname "$0")/lib.sh"

write_config hostile-codes '{ "DEMO": { "steps": [ { "name": "s1", "type": "demo" } ] } }'
dsync() { "$DSYNC_BIN" "$@" --config "$WORK/dsync.json"; }
dsync migrate >/dev/null

# refused WHAT EXPECTED_SUBSTRING ARGS...: exit 2, one line on stderr naming the problem.
refused() {
  local what=$1 want=$2; shift 2
  set +e
  "$DSYNC_BIN" "$@" --config "$WORK/dsync.json" >"$WORK/out" 2>"$WORK/err"
  local rc=$?
  set -e
  expect_eq "$rc" 2 "$what: exit 2"
  expect_eq "$(wc -l < "$WORK/err")" 1 "$what: one line on stderr"
  grep -qF -- "$want" "$WORK/err" || fail "$what: stderr lacks '$want': $(cat -v "$WORK/err")"
}
count() { sql "SELECT COUNT(*) FROM distribute_event"; }

# --- codes ----------------------------------------------------------------------
# Characters as UTF-8 bytes (whatever the locale): U+202E, U+200B, U+FEFF, U+009B.
RLO_B=$'\xe2\x80\xae'; ZWSP_B=$'\xe2\x80\x8b'; BOM_B=$'\xef\xbb\xbf'; CSI_B=$'\xc2\x9b'
refused "RLO in a code" "code contains U+202E" produce --code "invoice${RLO_B}fdp.exe" --topic DEMO --tenant t1 --data-id d1
refused "zero-width space in a code" "code contains U+200B" produce --code "zw${ZWSP_B}sp" --topic DEMO --tenant t1 --data-id d1
refused "BOM in a code" "code contains U+FEFF" produce --code "${BOM_B}bom" --topic DEMO --tenant t1 --data-id d1
refused "ESC in a code" "code contains U+001B" produce --code $'esc\e]0;pwned\a' --topic DEMO --tenant t1 --data-id d1
refused "C1 CSI in a code" "code contains U+009B" produce --code "c1${CSI_B}2J" --topic DEMO --tenant t1 --data-id d1
refused "the completion prefix" "reserved for batch completion events" produce --code 'done:hostile-codes:B1' --topic DEMO --tenant t1 --data-id d1
printf '%s\n' '{"code": "fine-1", "topic": "DEMO", "tenant_id": "t1", "data_id": "d"}' \
  '{"code": "zw\u200bsp", "topic": "DEMO", "tenant_id": "t1", "data_id": "d"}' > "$WORK/events.jsonl"
refused "a --file line with U+200B" "events.jsonl:2: code contains U+200B" produce --file "$WORK/events.jsonl"
refused "a batch code with U+202E" "batch code contains U+202E" produce --file <(echo '{"code": "ok-1", "topic": "DEMO", "tenant_id": "t1", "data_id": "d"}') --batch "b${RLO_B}1"
expect_eq "$(count)" 0 "refused codes wrote nothing"

# Exact codes: case, accents and trailing spaces make different events.
for code in CASE-abc case-ABC cafe 'café' 'cafe '; do
  out=$(dsync produce --code "$code" --topic DEMO --tenant t1 --data-id d1)
  [[ $out == "created event $code (id "* ]] || fail "'$code' not created: $out"
done
pass "CASE-abc, case-ABC, cafe, café and 'cafe ' are five events"
expect_eq "$(count)" 5 "five rows"
printf '%s\n' '{"code": "Bat-1", "topic": "DEMO", "tenant_id": "t1", "data_id": "a"}' \
  '{"code": "bat-1", "topic": "DEMO", "tenant_id": "t1", "data_id": "b"}' \
  '{"code": "BAT-1 ", "topic": "DEMO", "tenant_id": "t1", "data_id": "c"}' > "$WORK/batch.jsonl"
expect_eq "$(dsync produce --file "$WORK/batch.jsonl" --batch BAT)" \
  "batch BAT: created=3 existing=0 (follow it: dsync events --batch BAT)" "a batch of Bat-1, bat-1, 'BAT-1 ' answers created=3"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE batch_code = 'BAT'")" 3 "and stores 3 rows"

# --- one JSON depth limit ---------------------------------------------------------
nest() { local n=$1 s='{}' i; for ((i = 1; i < n; i++)); do s="{\"a\": $s}"; done; echo "$s"; }
refused "--payload nesting 65 levels" "--payload nests deeper than 64 levels" \
  produce --code deep-65 --topic DEMO --tenant t1 --data-id d1 --payload "$(nest 65)"
out=$(dsync produce --code deep-64 --topic DEMO --tenant t1 --data-id d1 --payload "$(nest 64)")
[[ $out == "created event deep-64 "* ]] || fail "a payload of 64 levels was not produced: $out"
pass "--payload nesting 64 levels is produced"
refused "--event nesting 65 levels" "--event nests deeper than 64 levels" \
  produce --event "{\"code\": \"e\", \"topic\": \"DEMO\", \"tenant_id\": \"t\", \"data_id\": \"d\", \"payload\": $(nest 64)}"

# --- output of stored data ----------------------------------------------------------
# Written by plain SQL (the producer contract lets anyone), bytes made with CHAR():
# ESC ] 0 ; title BEL (OSC: sets the window title), ESC [ 2 J (clears the screen),
# U+202E (right-to-left override), U+200B (zero-width space), C1 CSI (U+009B).
ESC="CHAR(27)"; RLO="X'E280AE'"; ZWSP="X'E2808B'"; CSI="X'C29B'"
sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload, status, last_error)
     VALUES ('t1', CONCAT('evil-', $ESC, ']0;pwned', CHAR(7), $RLO, 'gpj.exe'), CONCAT('d', $ZWSP), 'DEMO',
             CONCAT('{\"a\": \"', $ESC, '[2J\"}'), 'FAILED', CONCAT('boom ', $ESC, '[2J', $CSI, '31m', $RLO))"
code="evil-"$'\e]0;pwned\a'"${RLO_B}gpj.exe"
sql "INSERT INTO distribute_event_step (tenant_id, code, job_code, step_type, step_name, status, sort, error_details)
     SELECT 't1', CONCAT(code, '#1'), code, 'demo', CONCAT('s', $ESC, '[1A'), 'FAILED', 1,
            CONCAT('step ', $ESC, ']8;;http://x', CHAR(7), 'link')
     FROM distribute_event WHERE code LIKE 'evil-%'"

raw_free() {  # raw_free FILE WHAT: no ESC, BEL, C1, RLO or ZWSP byte sequence in FILE
  local hits
  hits=$(LC_ALL=C grep -c -e $'\e' -e $'\a' -e $'\xc2\x9b' -e $'\xe2\x80\xae' -e $'\xe2\x80\x8b' "$1" || true)
  expect_eq "$hits" 0 "$2: no control, bidi or zero-width bytes reach the terminal"
}
dsync events > "$WORK/list"
raw_free "$WORK/list" "dsync events"
grep -qF 'evil-\x1b]0;pwned\x07' "$WORK/list" || fail "dsync events: the code is not shown escaped: $(cat -v "$WORK/list")"
grep -qF 'boom \x1b[2J\u009b31m\u202e' "$WORK/list" || fail "dsync events: the error is not shown escaped: $(cat -v "$WORK/list")"
pass "dsync events shows the code and the error with visible escapes"

dsync events show "$code" > "$WORK/show"
raw_free "$WORK/show" "dsync events show"
grep -qF 'code           evil-\x1b]0;pwned\x07\u202egpj.exe' "$WORK/show" || fail "show: code not escaped: $(cat -v "$WORK/show")"
grep -qF 'entity         t1 / d\u200b' "$WORK/show" || fail "show: data_id not escaped: $(cat -v "$WORK/show")"
grep -qF '{"a": "\x1b[2J"}' "$WORK/show" || fail "show: payload not escaped: $(cat -v "$WORK/show")"
grep -qF 'step \x1b]8;;http://x\x07link' "$WORK/show" || fail "show: step error not escaped: $(cat -v "$WORK/show")"
grep -qF 's\x1b[1A' "$WORK/show" || fail "show: step name not escaped: $(cat -v "$WORK/show")"
pass "dsync events show escapes the code, entity, payload, step name and step error"

dsync events --json > "$WORK/list.json"
raw_free "$WORK/list.json" "dsync events --json"
expect_eq "$(jq -r '.events[] | select(.status == "FAILED") | .code' "$WORK/list.json")" "$code" \
  "dsync events --json: the same code for a JSON reader"
dsync events show "$code" --json > "$WORK/show.json"
raw_free "$WORK/show.json" "dsync events show --json"
grep -qF '\u202e' "$WORK/show.json" || fail "show --json: U+202E not written as \\u202e"
expect_eq "$(jq -r '.last_error' "$WORK/show.json")" "boom "$'\e[2J'"${CSI_B}31m${RLO_B}" \
  "dsync events show --json: the error is intact for a JSON reader"

# --- purge: a duration that overflows ---------------------------------------------------
sql "UPDATE distribute_event SET status = 'SUCCESS', finished_time = NOW(3) - INTERVAL 5 MINUTE WHERE code = 'cafe'"
before=$(count)
refused "purge --older-than 213503618d" "--older-than must be at most 36500d (100 years); got '213503618d'" \
  purge --older-than 213503618d
refused "purge --older-than 999999999999d" "must be at most 36500d" purge --older-than 999999999999d
refused "purge --older-than 3153600001s" "must be at most 36500d" purge --older-than 3153600001s
expect_eq "$(count)" "$before" "the refused purges deleted nothing"
out=$(dsync purge --older-than 36500d)
expect_eq "$out" "delete events=0 steps=0 by_status=- registry_rows=0 batches=0" "purge --older-than 36500d: nothing that old"
expect_eq "$(sql "SELECT status FROM distribute_event WHERE code = 'cafe'")" SUCCESS "the event finished 5 minutes ago is kept"
echo "hostile_codes_test: all ok"
