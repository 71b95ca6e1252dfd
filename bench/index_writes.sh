#!/usr/bin/env bash
# Page and handler writes per event of each status change, as the product's statements
# make them (bench/RESULTS.md section 11, issue 37): counts, not timings, so it runs on a
# loaded machine as well as on a quiet one.
#
#   bash bench/index_writes.sh DSYNC_BINARY [ROWS]   # ROWS default 20000
#
# Starts its own throwaway server (scripts/mariadb.sh), migrates it with DSYNC_BINARY
# (so the schema is that binary's), inserts ROWS events with the bench's plain INSERT
# (500 rows a statement), then moves them through the statements of events/assign.cc and
# events/transitions.cc, in UPDATEs of 50 rows (the assignment chunk and a claim batch):
#   insert:             the plain INSERT (tenant_id, code, data_id, topic, payload)
#   assign:             PENDING -> ASSIGNED (events::AssignChunkSql, one node)
#   claim:              ASSIGNED -> RUNNING (events::ClaimFirstAttempts)
#   finish:             RUNNING -> SUCCESS  (the group commit's SucceedEvent)
#   claim+finish:       ASSIGNED -> SUCCESS (the group commit's claim at commit: a short
#                       run is claimed and finished in one statement; half the events go
#                       this way, the other half through claim and finish)
# For each phase it prints Innodb_buffer_pool_write_requests, Handler_write,
# Handler_update and Handler_delete per row, counted after InnoDB's purge has removed
# what the phase delete-marked (history list length back to 0), so a moved index entry
# counts its insert, its delete-mark and its purge.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?usage: bench/index_writes.sh DSYNC_BINARY [ROWS]}
rows=${2:-20000}
dir=$(bash scripts/mariadb.sh start)
trap 'bash scripts/mariadb.sh stop "$dir" >/dev/null 2>&1 || true' EXIT
url=$(bash scripts/mariadb.sh url "$dir")
"$bin" migrate --db "$url" >/dev/null
sql() { mariadb --socket="$dir/sock" -uroot -N -B dsync -e "$1"; }
version=$(sql "SELECT MAX(version) FROM dsync_schema_version")

status_counter() { sql "SHOW GLOBAL STATUS LIKE '$1'" | awk '{print $2}'; }
wait_purge() {
  for _ in $(seq 1 600); do
    local h
    h=$(sql "SHOW ENGINE INNODB STATUS\G" | sed -n 's/^History list length \([0-9]*\).*/\1/p')
    [[ ${h:-1} -eq 0 ]] && return 0
    sleep 0.1
  done
  echo "index_writes: purge did not finish" >&2
}
counters() {
  echo "$(status_counter Innodb_buffer_pool_write_requests) $(status_counter Handler_write)" \
       "$(status_counter Handler_update) $(status_counter Handler_delete)"
}
# phase NAME N STATEMENTS...: runs the statements (autocommit each), waits out purge,
# prints the counters' deltas divided by N.
phase() {
  local name=$1 n=$2
  shift 2
  wait_purge
  read -r w0 hw0 hu0 hd0 < <(counters)
  printf '%s\n' "$@" | mariadb --socket="$dir/sock" -uroot dsync
  wait_purge
  read -r w1 hw1 hu1 hd1 < <(counters)
  awk -v name="$name" -v n="$n" -v w=$((w1 - w0)) -v hw=$((hw1 - hw0)) -v hu=$((hu1 - hu0)) -v hd=$((hd1 - hd0)) \
    'BEGIN { printf "%-14s %8.2f %8.2f %8.2f %8.2f\n", name, w / n, hw / n, hu / n, hd / n }'
}

# The statements, per 50 ids (a..b).
log="process_log = JSON_ARRAY_APPEND(IF(JSON_VALID(process_log), IF(JSON_LENGTH(process_log) >= 20, JSON_REMOVE(process_log, '\$[0]'), process_log), '[]'), '\$', JSON_OBJECT('at', LEFT(DATE_FORMAT(NOW(3), '%Y-%m-%dT%H:%i:%s.%f'), 23), 'node', 'n1:9000', 'from', status, 'to', 'X', 'why', 'bench'))"
fair=""
sql "SELECT 1 FROM information_schema.columns WHERE table_schema = 'dsync' AND table_name = 'distribute_event' AND column_name = 'fair_pending'" | grep -q 1 && fair="fair_pending = 0, "
inserts=() assigns=() claims=() finishes=() claim_finishes=()
for ((a = 1; a <= rows; a += 500)); do
  v=""
  for ((i = a; i < a + 500 && i <= rows; i++)); do v+="${v:+,}('bench','ev-$i','d-$i','bench.demo','{}')"; done
  inserts+=("INSERT INTO distribute_event (tenant_id, code, data_id, topic, payload) VALUES $v;")
done
for ((a = 1; a <= rows; a += 50)); do
  b=$((a + 49))
  assigns+=("UPDATE distribute_event SET node_address = 'n1:9000', $log, status = 'ASSIGNED', ${fair}version = version + 1, assigned_time = NOW(3) WHERE id BETWEEN $a AND $b AND status = 'PENDING';")
  if (( (a / 50) % 2 == 0 )); then
    claims+=("UPDATE distribute_event FORCE INDEX (PRIMARY) SET $log, status = 'RUNNING', version = version + 1, attempt = attempt + 1, started_time = NOW(3), modifier_time = NOW(3) WHERE id BETWEEN $a AND $b AND status = 'ASSIGNED' AND node_address = 'n1:9000' AND phase = 'FORWARD' AND attempt = 0;")
    finishes+=("UPDATE distribute_event FORCE INDEX (PRIMARY) SET $log, status = 'SUCCESS', version = version + 1, finished_time = NOW(3), modifier_time = NOW(3), progress = 100, result = '{}' WHERE id BETWEEN $a AND $b;")
  else
    claim_finishes+=("UPDATE distribute_event FORCE INDEX (PRIMARY) SET $log, status = 'SUCCESS', version = version + 1, attempt = attempt + 1, started_time = NOW(3), modifier_time = NOW(3), finished_time = NOW(3), progress = 100, result = '{}' WHERE id BETWEEN $a AND $b AND status = 'ASSIGNED' AND node_address = 'n1:9000' AND phase = 'FORWARD' AND attempt = 0;")
  fi
done
half=$((rows / 2))
echo "schema version $version, $rows events; per row:"
printf '%-14s %8s %8s %8s %8s\n' phase pages h_write h_update h_delete
phase insert "$rows" "${inserts[@]}"
phase assign "$rows" "${assigns[@]}"
phase claim "$half" "${claims[@]}"
phase finish "$half" "${finishes[@]}"
phase claim+finish "$half" "${claim_finishes[@]}"
sql "SELECT status, COUNT(*) FROM distribute_event GROUP BY status" | tr '\t' ' ' | paste -sd';' | sed 's/^/final statuses: /'
