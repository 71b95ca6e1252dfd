#!/usr/bin/env bash
# Issue 14 item 4 and issue 13 through real processes (dispatcher, node, MariaDB):
#  A. conflict-safe compensation: a saga syncs a table, then its next step fails and
#     the sync is compensated; a production write to a synced row in between is a
#     conflict. on_conflict fail: the event ends FAILED, listed in
#     v_events_needing_attention with the key; skip: that row is left, the rest
#     restored, the skipped key in the step's output; overwrite: all restored. The
#     sync step row keeps the target's schema fingerprint in its compensation data.
#  B. heartbeat: a sync longer than its topic's max_processing_time_ms (with a longer
#     step timeout) keeps the event's modifier_time fresh, so the sweeper does not
#     reset it: it succeeds on its first claim.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r N1_PORT <<< "$(free_ports 1 | tr '\n' ' ')"

fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, attempt, last_error FROM distribute_event" >&2; sql "SELECT job_code, step_name, status, error_details, output FROM distribute_event_step" >&2; tail -n 15 "$WORK"/*.log >&2; exit 1; }
with_datasources

saga() {  # saga TOPIC ON_CONFLICT: a sync, then a demo step that can be told to fail
  cat <<JSON
  "$1": { "max_retry": 2, "backoff_base_ms": 100, "backoff_max_ms": 200,
    "steps": [ { "name": "sync", "type": "table_sync", "source": "env_a", "target": "env_b",
                 "table": "doc", "where": "grp = :g", "on_conflict": "$2" },
               { "name": "next", "type": "demo" } ] },
JSON
}
write_config tsconf "{
$(saga CF fail)
$(saga CS skip)
$(saga CO overwrite)
  \"LONG\": { \"max_retry\": 1, \"max_processing_time_ms\": 1000,
    \"steps\": [ { \"name\": \"long\", \"type\": \"table_sync\", \"source\": \"env_a\", \"target\": \"env_b\",
                 \"table\": \"big\", \"where\": \"1 = 1\", \"chunk_size\": 40, \"timeout_ms\": 300000 } ] }
}" "$DATASOURCES" '{"registry": {"offline_timeout_ms": 3000}, "consumer": {"drain_timeout_ms": 8000, "capacity": 2}}'
on_both "CREATE TABLE doc (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40));
         CREATE TABLE big (id INT PRIMARY KEY, name VARCHAR(40))"
dbq "$SRC" "INSERT INTO doc SELECT seq, 1, CONCAT('new ', seq) FROM seq_1_to_10"
dbq "$SRC" "INSERT INTO big SELECT seq, CONCAT('row ', seq) FROM seq_1_to_120000"
older_copy() { dbq "$TGT" "DELETE FROM doc; INSERT INTO doc SELECT seq, 1, CONCAT('old ', seq) FROM seq_1_to_8"; }
dump() { dbq "$TGT" "SELECT id, grp, name FROM doc ORDER BY id"; }

start_dispatch n1 ${N1_PORT}

step_status() { sql "SELECT status FROM distribute_event_step WHERE job_code = '$1' AND step_name = '$2'"; }
# run_saga CODE TOPIC: the sync succeeds, production writes row 5 while the next step
# sleeps, then the next step fails permanently and the sync is compensated.
run_saga() {
  older_copy
  before=$(dump)
  produce "$1" '{"g": 1, "demo": {"sleep_ms": 2500, "fail": {"next": "permanent"}}}' "$2"
  wait_for '[[ $(step_status '"$1"' sync) == SUCCESS ]]' 60 "$1: sync step SUCCESS"
  dbq "$TGT" "UPDATE doc SET name = 'production' WHERE id = 5"
  wait_for '[[ $(event_status '"$1"') == FAILED || $(event_status '"$1"') == COMPENSATED ]]' 60 "$1: event done"
}

# --- A. fail ---------------------------------------------------------------------------
run_saga cf-1 CF
expect_eq "$(event_status cf-1)" FAILED "on_conflict fail: the event ends FAILED"
expect_eq "$(sql "SELECT reason FROM v_events_needing_attention WHERE code = 'cf-1'")" failed \
  "on_conflict fail: the event is listed in v_events_needing_attention"
err=$(sql "SELECT last_error FROM distribute_event WHERE code = 'cf-1'")
[[ $err == *'compensation refused (on_conflict fail): 1 row(s) of env_b.doc changed since the sync wrote them, keys ["5"]'* ]] \
  || fail "last_error does not name the conflicting key: $err"
echo "ok: cf-1 last_error: $err"
expect_eq "$(sql "SELECT output FROM distribute_event_step WHERE job_code = 'cf-1' AND step_name = 'sync'")" \
  '{"compensation":"refused","conflict_keys":[["5"]],"conflicts":1,"on_conflict":"fail"}' "the refusal is the step's output"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM doc WHERE name LIKE 'new %'")" 9 "nothing restored (9 synced rows left)"
expect_eq "$(dbq "$TGT" "SELECT name FROM doc WHERE id = 5")" production "production's write kept"

# --- A. skip ---------------------------------------------------------------------------
run_saga cs-1 CS
expect_eq "$(event_status cs-1)" COMPENSATED "on_conflict skip: the event is COMPENSATED"
expect_eq "$(sql "SELECT JSON_EXTRACT(output, '$.skipped_keys') FROM distribute_event_step WHERE job_code = 'cs-1' AND step_name = 'sync'")" \
  '[["5"]]' "the skipped key is in the step's output"
expect_eq "$(dump)" "$(echo "$before" | sed 's/^5\t1\told 5$/5\t1\tproduction/')" "the rest restored, row 5 left as production wrote it"

# --- A. overwrite ----------------------------------------------------------------------
run_saga co-1 CO
expect_eq "$(event_status co-1)" COMPENSATED "on_conflict overwrite: the event is COMPENSATED"
expect_eq "$(dump)" "$before" "everything restored, production's write overwritten"
# The schema preflight's fingerprint of the target (16 hex digits) and shape are kept
# with the step row, the same for every sync of the unchanged table.
fingerprint() { sql "SELECT JSON_VALUE(compensation_data, '$.schema_fingerprint') FROM distribute_event_step WHERE job_code = '$1' AND step_name = '$2'"; }
fp=$(fingerprint cf-1 sync)
[[ $fp =~ ^[0-9a-f]{16}$ ]] || fail "the sync step's compensation_data has no schema fingerprint: '$fp'"
expect_eq "$(fingerprint co-1 sync)" "$fp" "the same fingerprint for every sync of the unchanged table ($fp)"
expect_eq "$(sql "SELECT JSON_EXTRACT(compensation_data, '$.schema.key') FROM distribute_event_step WHERE job_code = 'cf-1' AND step_name = 'sync'")" \
  '["id"]' "the compensation data holds the target's shape (its primary key)"

# --- B. a sync longer than max_processing_time_ms --------------------------------------
produce long-1 '{}' LONG
wait_for '[[ $(event_status long-1) =~ ^(SUCCESS|FAILED|COMPENSATED)$ ]]' 240 "long-1 done"
expect_eq "$(event_status long-1)" SUCCESS "the long sync succeeded"
took=$(sql "SELECT TIMESTAMPDIFF(MICROSECOND, started_time, finished_time) DIV 1000 FROM distribute_event WHERE code = 'long-1'")
echo "ok: long-1 ran $took ms with max_processing_time_ms 1000"
# The sweeper's bound: max_processing_time_ms + its grace (at least 2 s) = 3000 ms.
(( took > 3000 )) || fail "the sync took only $took ms: too short to show the heartbeat (needs > 1000 + 2000 ms)"
expect_eq "$(sql "SELECT attempt FROM distribute_event WHERE code = 'long-1'")" 1 "claimed once: never reset by the sweeper"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code = 'long-1' AND process_log LIKE '%max_processing_time%'")" 0 \
  "no timed-out reset in the process log"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM big")" 120000 "every row copied"
long_fp=$(fingerprint long-1 long)
expect_eq "$(sql "SELECT JSON_VALUE(output, '$.schema_fingerprint') FROM distribute_event_step WHERE job_code = 'long-1'")" "$long_fp" \
  "the sync's output and compensation data carry the same fingerprint"
[[ $long_fp =~ ^[0-9a-f]{16}$ && $long_fp != "$fp" ]] || fail "table big's fingerprint '$long_fp' (doc's: $fp)"
expect_eq "$(saga_violations)" 0 "saga order holds"
echo "PASS table_sync_conflict_test"
