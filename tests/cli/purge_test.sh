#!/usr/bin/env bash
# Retention on demand (issue 16 item 6): `dsync purge` removes only terminal events
# finished longer ago than --older-than, with their steps, in batches; --archive moves
# them to the archive tables; --dry-run writes nothing; registry rows silent longer
# than registry.purge_after_ms go too; bad input is one line on stderr, exit 2, and
# writes nothing.
source "$(dirname "$0")/lib.sh"

cat > "$WORK/dsync.json" <<JSON
{
  "database": "$DB_URL",
  "retention": { "batch_size": 7 },
  "topics": { "T": { "steps": [ { "name": "s", "type": "demo" } ] } }
}
JSON
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null

seed() {  # seed PREFIX COUNT STATUS AGE_DAYS: events with one step each
  local finished="NOW(3) - INTERVAL $4 DAY"
  [[ $3 == SUCCESS || $3 == FAILED || $3 == COMPENSATED ]] || finished=NULL
  sql "INSERT INTO distribute_event (tenant_id, code, data_id, topic, status, create_time, finished_time)
       SELECT 't1', CONCAT('$1-', seq), CONCAT('$1-', seq), 'T', '$3', NOW(3) - INTERVAL $4 DAY, $finished
       FROM seq_1_to_$2"
  sql "INSERT INTO distribute_event_step (tenant_id, code, job_code, sort, step_type, step_name, status)
       SELECT 't1', CONCAT('$1-', seq, '#0'), CONCAT('$1-', seq), 0, 'demo', 's', 'SUCCESS' FROM seq_1_to_$2"
}
seed ok 50 SUCCESS 10
seed comp 3 COMPENSATED 10
seed failed 10 FAILED 10
seed running 5 RUNNING 40
seed pending 4 PENDING 40
seed fresh 6 SUCCESS 0
sql "INSERT INTO distribute_node_registry (service_name, node_address, status, last_heartbeat_time)
     VALUES ('kbs-sync', '10.0.0.9:1', 0, NOW(3) - INTERVAL 30 DAY), ('kbs-sync', '10.0.0.8:1', 1, NOW(3))"

checksum() {
  sql "SELECT CONCAT((SELECT COUNT(*) FROM distribute_event), ':', (SELECT COUNT(*) FROM distribute_event_step), ':',
       (SELECT COUNT(*) FROM distribute_event_archive), ':', (SELECT COUNT(*) FROM distribute_event_step_archive), ':',
       (SELECT COUNT(*) FROM distribute_node_registry), ':',
       (SELECT SUM(CRC32(CONCAT_WS('|', code, status, version))) FROM distribute_event))"
}
before=$(checksum)

# Bad input: one line, exit 2, nothing written.
bad() {  # bad EXPECTED_SUBSTRING ARGS...
  local want=$1; shift
  set +e
  "$DSYNC_BIN" purge --config "$WORK/dsync.json" "$@" >"$WORK/out" 2>"$WORK/err"
  local rc=$?
  set -e
  expect_eq "$rc" 2 "purge $* exits 2"
  expect_eq "$(wc -l < "$WORK/err")" 1 "purge $*: one line on stderr"
  grep -q -- "$want" "$WORK/err" || fail "purge $*: stderr lacks '$want': $(cat "$WORK/err")"
}
bad "must be a number and a unit" --older-than banana
bad "must be a number and a unit" --older-than 7
bad "must be a number and a unit" --older-than 3x
bad "is not a terminal status" --older-than 1d --status BOGUS
bad "is not a terminal status" --older-than 1d --status SUCCESS,RUNNING
bad "older-than is required" --status FAILED
expect_eq "$(checksum)" "$before" "bad input wrote nothing"

# --dry-run counts and writes nothing.
out=$("$DSYNC_BIN" purge --config "$WORK/dsync.json" --older-than 1d --dry-run)
expect_eq "$out" "would delete events=63 steps=63 by_status=COMPENSATED:3,FAILED:10,SUCCESS:50 registry_rows=1" "dry run counts"
expect_eq "$(checksum)" "$before" "dry run wrote nothing"
out=$("$DSYNC_BIN" purge --config "$WORK/dsync.json" --older-than 1d --archive --dry-run)
expect_eq "$out" "would archive events=63 steps=63 by_status=COMPENSATED:3,FAILED:10,SUCCESS:50 registry_rows=1" "archive dry run counts"
expect_eq "$(checksum)" "$before" "archive dry run wrote nothing (live and archive tables)"

# --archive, FAILED only.
out=$("$DSYNC_BIN" purge --config "$WORK/dsync.json" --older-than 5d --status FAILED --archive)
expect_eq "$out" "archive events=10 steps=10 by_status=FAILED:10 registry_rows=1 batches=2" "archive FAILED"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_archive WHERE status = 'FAILED'")" 10 "FAILED rows in the archive"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step_archive WHERE job_code LIKE 'failed-%'")" 10 "their steps in the archive"
expect_eq "$(sql "SELECT COUNT(*) FROM v_events_all WHERE stored = 'archive'")" 10 "v_events_all shows them"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_node_registry")" 1 "the long-dead registry row is gone, the live one stays"

# Too young for 20d: nothing; then everything old goes in batches of 7 (retention.batch_size).
out=$("$DSYNC_BIN" purge --config "$WORK/dsync.json" --older-than 20d --json)
expect_eq "$(echo "$out" | grep -c '"events": 0')" 1 "nothing finished 20 days ago"
out=$("$DSYNC_BIN" purge --config "$WORK/dsync.json" --older-than 24h)
expect_eq "$out" "delete events=53 steps=53 by_status=COMPENSATED:3,SUCCESS:50 registry_rows=0 batches=8" "delete the rest"
expect_eq "$(sql "SELECT GROUP_CONCAT(CONCAT(status, ':', n) ORDER BY status) FROM
                  (SELECT status, COUNT(*) n FROM distribute_event GROUP BY status) x")" \
  "PENDING:4,RUNNING:5,SUCCESS:6" "non-terminal and recent events untouched"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step")" 15 "their steps untouched"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event_step s LEFT JOIN distribute_event e ON e.code = s.job_code
                  WHERE e.id IS NULL")" 0 "no orphaned steps"
echo "purge_test: all ok"
