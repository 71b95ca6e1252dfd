#!/usr/bin/env bash
# Issue 14 items 1-3 through the real binary: two schemas as two datasources.
#  A. `dsync verify` of one table finds exactly the planted differences (missing,
#     extra, changed, NULL vs '', case-only, trailing-space-only, a binary column,
#     DATETIME(3) fractions, a composite key) and nothing else: exit 3, drilling into
#     the one differing range only;
#  B. --plan prints inserts/updates and writes nothing (row count, CHECKSUM TABLE);
#  C. bad input (malformed --params, unknown datasource/table, hostile --where and
#     values): one line on stderr, exit 2, nothing written (not even history);
#  D. a plan "table_sync, then table_verify" whose verify fails is compensated: the
#     target is back as it was;
#  E. --topic verify, --repair (one table_repair event syncing exactly the differing
#     keys), re-verify exit 0; history rows and v_verify_latest (one row per filter);
#     POST /v1/verify (a configured topic) and /metrics; --repair --no-wait; a topic verify reads the
#     step's filter and columns; a datasource that cannot be reached exits 1.
source "$(dirname "$0")/lib.sh"

fail() { echo "FAIL: $*" >&2; sql "SELECT code, topic, status, last_error FROM distribute_event" >&2 || true; tail -n 20 "$WORK"/*.log >&2 || true; exit 1; }
with_datasources
port=$(free_port)

write_config verify '{
  "SYNC": { "steps": [ { "name": "docs", "type": "table_sync", "source": "env_a", "target": "env_b",
                         "table": "doc", "where": "grp = :g", "delete_missing": true } ] },
  "SYNC_THEN_VERIFY": { "max_retry": 3, "backoff_base_ms": 100, "steps": [
      { "name": "titles", "type": "table_sync", "source": "env_a", "target": "env_b",
        "table": "doc", "where": "grp = :g", "columns": ["a", "b", "grp", "txt"] },
      { "name": "check", "type": "table_verify", "source": "env_a", "target": "env_b",
        "table": "doc", "where": "grp = :g" } ] },
  "dsync_repair": { "steps": [ { "name": "repair", "type": "table_repair" } ] }
}' "$DATASOURCES" "{\"consumer\": {\"capacity\": 2}, \"api\": {\"listen\": \"127.0.0.1:$port\"}}"
V=("$DSYNC_BIN" verify --config "$WORK/dsync.json")
ONE=(--source env_a --target env_b --table doc)

for s in "$SRC" "$TGT"; do
  dbq "$s" "CREATE TABLE doc (a INT NOT NULL, b VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL,
              grp INT NOT NULL, txt VARCHAR(50) COLLATE utf8mb4_general_ci NULL, opt VARCHAR(10) NULL,
              bin VARBINARY(8) NULL, at DATETIME(3) NULL, PRIMARY KEY (a, b)) DEFAULT CHARSET=utf8mb4"
  dbq "$s" "INSERT INTO doc SELECT seq, 'k', 1, CONCAT('text ', seq), NULL, UNHEX(LPAD(HEX(seq), 8, '0')),
              '2025-01-01 00:00:00.123' + INTERVAL seq SECOND FROM seq_1_to_3000"
done
# The planted differences (all within the first 1,000 keys: the first range).
dbq "$SRC" "INSERT INTO doc VALUES (7, 'b', 1, 'second key part', NULL, NULL, NULL)"
dbq "$TGT" "DELETE FROM doc WHERE a = 5;
            INSERT INTO doc VALUES (500, 'zz', 1, 'extra', NULL, NULL, NULL);
            UPDATE doc SET txt = 'changed' WHERE a = 10;
            UPDATE doc SET opt = '' WHERE a = 11;
            UPDATE doc SET txt = UPPER(txt) WHERE a = 12;
            UPDATE doc SET txt = CONCAT(txt, ' ') WHERE a = 13;
            UPDATE doc SET bin = UNHEX('000000FF') WHERE a = 14;
            UPDATE doc SET at = at + INTERVAL 1000 MICROSECOND WHERE a = 15;"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM \`$SRC\`.doc s JOIN \`$TGT\`.doc t USING (a, b) WHERE s.a IN (12, 13) AND s.txt = t.txt")" 2 \
  "the case-only and trailing-space-only changes compare equal under the collation"
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null

target_state() { dbq "$TGT" "SELECT COUNT(*) FROM doc"; dbq "$TGT" "CHECKSUM TABLE doc EXTENDED" | cut -f2; }
history_rows() { sql "SELECT COUNT(*) FROM dsync_verify_result"; }

# --- A: exactly the planted differences ----------------------------------------------
set +e
"${V[@]}" "${ONE[@]}" --where "1 = 1" --json > "$WORK/a.json" 2> "$WORK/a.err"; rc=$?
set -e
expect_eq "$rc" 3 "verify of a differing table exits 3"
cat "$WORK/a.json"
expect_eq "$(jq -c '.equal' "$WORK/a.json")" false "equal is false"
expect_eq "$(jq -c '.tables[0].missing_in_target' "$WORK/a.json")" '[[5,"k"],[7,"b"]]' "missing in target: the deleted row and a composite key's second part"
expect_eq "$(jq -c '.tables[0].extra_in_target' "$WORK/a.json")" '[[500,"zz"]]' "extra in target"
expect_eq "$(jq -c '.tables[0].different' "$WORK/a.json")" '[[10,"k"],[11,"k"],[12,"k"],[13,"k"],[14,"k"],[15,"k"]]' \
  "different: changed, NULL vs '', case-only, trailing space, binary, DATETIME(3) fraction"
expect_eq "$(jq -c '[.tables[0].source_rows, .tables[0].target_rows]' "$WORK/a.json")" '[3001,3000]' "row counts"
chunks=$(jq '.tables[0].chunks' "$WORK/a.json")
(( chunks >= 2 )) || fail "expected at least 2 ranges, got $chunks"
expect_eq "$(jq '.tables[0].chunks_differing' "$WORK/a.json")" 1 "only the range holding the differences was drilled into ($chunks ranges)"
"${V[@]}" "${ONE[@]}" --where "a > 500" > "$WORK/a2.txt" || fail "the equal part of the table did not verify equal (exit $?)"
grep -q '^equal' "$WORK/a2.txt" || fail "human output: $(cat "$WORK/a2.txt")"
pass "a filter leaving out the differences verifies equal (exit 0)"
set +e; "${V[@]}" "${ONE[@]}" --where "a BETWEEN :lo AND :hi" --params '{"lo": 1, "hi": 12}' --max-keys 2 > "$WORK/a3.txt"; rc=$?; set -e
expect_eq "$rc" 3 "a filter with params over part of the differences exits 3"
cat "$WORK/a3.txt"
grep -q 'different: *\[10,"k"\] \[11,"k"\] ... (3 in all)' "$WORK/a3.txt" || fail "human output lists the first keys and the total"
# --json with --max-keys below the differences: each list holds at most the cap, each
# *_total the real count; every key of the issue's contract is there, of its type.
set +e; "${V[@]}" "${ONE[@]}" --where "1 = 1" --max-keys 2 --json > "$WORK/a4.json"; rc=$?; set -e
expect_eq "$rc" 3 "a capped --json verify exits 3"
expect_eq "$(jq -c '.tables[0] | [(.missing_in_target | length), .missing_in_target_total, (.extra_in_target | length),
    .extra_in_target_total, (.different | length), .different_total]' "$WORK/a4.json")" '[2,2,1,1,2,6]' \
  "--max-keys 2: the lists are capped at 2, the totals are the real counts (2, 1, 6)"
expect_eq "$(jq -c '.tables[0].different' "$WORK/a4.json")" '[[10,"k"],[11,"k"]]' "the capped list holds the first keys"
expect_eq "$(jq -c '[(.equal | type), (.tables | length), (.tables[0] | {table, source_rows, target_rows,
    missing_in_target, extra_in_target, different, chunks, chunks_differing} | map_values(type))]' "$WORK/a4.json")" \
  '["boolean",1,{"table":"string","source_rows":"number","target_rows":"number","missing_in_target":"array","extra_in_target":"array","different":"array","chunks":"number","chunks_differing":"number"}]' \
  "--json has every key of the contract"

# --- B: --plan writes nothing -----------------------------------------------------------
before=$(target_state)
set +e; "${V[@]}" --topic SYNC --payload '{"g": 1}' --plan --json > "$WORK/plan.json"; rc=$?; set -e
expect_eq "$rc" 3 "--plan exits 3 when a sync would write"
expect_eq "$(jq -c '.tables[0] | [.insert, .update, .delete]' "$WORK/plan.json")" '[2,6,1]' \
  "--plan: 2 inserts, 6 updates, 1 delete (delete_missing)"
expect_eq "$(jq -c '.tables[0].delete_keys' "$WORK/plan.json")" '[[500,"zz"]]' "--plan names the row to delete"
expect_eq "$(target_state)" "$before" "--plan wrote nothing (row count and CHECKSUM TABLE unchanged)"
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'dsync%'")" 0 \
  "verify and --plan created nothing in the target"

# --- C: bad input -------------------------------------------------------------------------
rows=$(history_rows)
bad() {  # bad WHAT args...: exit 2, one line on stderr
  local what=$1; shift
  set +e; "${V[@]}" "$@" > "$WORK/bad.out" 2> "$WORK/bad.err"; local rc=$?; set -e
  [[ $rc == 2 ]] || fail "$what: exit $rc, stderr: $(cat "$WORK/bad.err")"
  [[ $(wc -l < "$WORK/bad.err") == 1 ]] || fail "$what: stderr is not one line: $(cat "$WORK/bad.err")"
  [[ ! -s "$WORK/bad.out" ]] || fail "$what: printed a result"
  pass "$what -> exit 2: $(cat "$WORK/bad.err")"
}
bad "malformed --params" "${ONE[@]}" --where "grp = :g" --params '{"g": 1'
bad "--params not an object" "${ONE[@]}" --where "grp = :g" --params '[1]'
bad "a placeholder without a value" "${ONE[@]}" --where "grp = :g"
bad "unknown datasource" --source env_x --target env_b --table doc --where "1 = 1"
bad "unknown target datasource" --source env_a --target env_x --table doc --where "1 = 1"
bad "unknown table" --source env_a --target env_b --table nosuch --where "1 = 1"
bad "hostile table name" --source env_a --target env_b --table 'doc`; DROP TABLE doc; --' --where "1 = 1"
bad "hostile where (statement)" "${ONE[@]}" --where "1 = 1; DROP TABLE doc"
bad "hostile where (comment)" "${ONE[@]}" --where "grp = 1 OR 1 = 1 -- x"
bad "hostile where (function)" "${ONE[@]}" --where "SLEEP(5) = 0"
bad "unknown column in where" "${ONE[@]}" --where "nosuch = 1"
bad "hostile value for an integer column" "${ONE[@]}" --where "grp = :g" --params '{"g": "1 OR 1=1"}'
bad "object as a value" "${ONE[@]}" --where "grp = :g" --params '{"g": {"x": 1}}'
bad "unknown topic" --topic NOPE --payload '{}'
bad "malformed --payload" --topic SYNC --payload '{"g":'
bad "--repair without a repair topic" "${ONE[@]}" --where "1 = 1" --repair --repair-topic SYNC
expect_eq "$(target_state)" "$before" "bad input wrote nothing to the target"
expect_eq "$(history_rows)" "$rows" "bad input recorded no history"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM doc")" 3001 "the source is untouched"
# A hostile string bound to a text column is a value, not SQL: it matches no row.
set +e; "${V[@]}" "${ONE[@]}" --where "b = :v" --params '{"v": "k'"'"' OR 1=1 -- "}' --json > "$WORK/c.json" 2> "$WORK/c.err"; rc=$?; set -e
expect_eq "$rc" 0 "a hostile string for a text column: no error, exit 0"
expect_eq "$(jq -c '[.equal, .tables[0].source_rows, .tables[0].target_rows]' "$WORK/c.json")" '[true,0,0]' \
  "a hostile string for a text column matches no row"
expect_eq "$(cat "$WORK/c.err")" "" "a hostile string for a text column: nothing on stderr"
expect_eq "$(target_state)" "$before" "a hostile string for a text column wrote nothing"

# --- C2: a datasource that cannot be reached is a runtime failure: exit 1, one line ----
jq '.datasources.env_b = "mysql://nobody:x@127.0.0.1:1/nothing?connect_timeout_ms=500"' "$WORK/dsync.json" > "$WORK/down.json"
set +e; "$DSYNC_BIN" verify --config "$WORK/down.json" "${ONE[@]}" --where "1 = 1" > "$WORK/down.out" 2> "$WORK/down.err"; rc=$?; set -e
expect_eq "$rc" 1 "verify against an unreachable target exits 1 ($(cat "$WORK/down.err"))"
expect_eq "$(wc -l < "$WORK/down.err")" 1 "the runtime failure is one line on stderr"
[[ ! -s "$WORK/down.out" ]] || fail "the runtime failure printed a result: $(cat "$WORK/down.out")"

# --- D: sync then verify, the verify fails, the saga is compensated ----------------------
start_bg all "$DSYNC_BIN" all --config "$WORK/dsync.json" --node-address 127.0.0.1:$(free_port)
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 1 ]]' 20 "node online"
produce stv-1 '{"g": 1}' SYNC_THEN_VERIFY
wait_for '[[ $(event_status stv-1) == COMPENSATED || $(event_status stv-1) == FAILED ]]' 60 "stv-1 finished"
expect_eq "$(event_status stv-1)" COMPENSATED "a failing table_verify compensates its saga"
sql "SELECT step_name, status, LEFT(error_details, 200) FROM distribute_event_step WHERE job_code = 'stv-1' ORDER BY sort"
[[ $(sql "SELECT error_details FROM distribute_event_step WHERE job_code = 'stv-1' AND step_name = 'check'") == *differ* ]] ||
  fail "the verify step's error does not say the tables differ"
expect_eq "$(sql "SELECT status FROM distribute_event_step WHERE job_code = 'stv-1' AND step_name = 'titles'")" COMPENSATED \
  "the sync step was compensated"
# A difference fails the verify step permanently: no retry although max_retry is 3.
expect_eq "$(sql "SELECT retry_count FROM distribute_event WHERE code = 'stv-1'")" 0 "the failing table_verify was not retried"
expect_eq "$(sql "SELECT SUM(j.to_status = 'PENDING'), SUM(j.to_status = 'COMPENSATED') FROM distribute_event e,
                 JSON_TABLE(e.process_log, '\$[*]' COLUMNS (to_status VARCHAR(32) PATH '\$.to')) j WHERE e.code = 'stv-1'")" "0	1" \
  "the process log has no retry (back to PENDING), and one move to COMPENSATED"
expect_eq "$(target_state)" "$before" "the target is exactly as before the saga"
expect_eq "$(saga_violations)" 0 "saga order holds"

# --- E: topic verify, repair, re-verify, history, API, metrics -----------------------------
set +e; "${V[@]}" --topic SYNC --payload '{"g": 1}' --json > "$WORK/e.json"; rc=$?; set -e
expect_eq "$rc" 3 "topic verify exits 3"
expect_eq "$(jq -c '.tables[0] | [.step, .missing_in_target_total, .extra_in_target_total, .different_total]' "$WORK/e.json")" \
  '["docs",2,1,6]' "topic verify checks the plan's table_sync step"
set +e; "${V[@]}" --topic SYNC --payload '{"g": 1}' --repair --timeout-ms 60000 > "$WORK/repair.txt" 2>&1; rc=$?; set -e
cat "$WORK/repair.txt"
expect_eq "$rc" 0 "--repair then re-verify exits 0"
expect_eq "$(sql "SELECT COUNT(*), MIN(data_id) FROM distribute_event WHERE topic = 'dsync_repair'")" "1	doc" \
  "one repair event for the one differing table"
code=$(sql "SELECT code FROM distribute_event WHERE topic = 'dsync_repair'")
expect_eq "$(event_status "$code")" SUCCESS "the repair event succeeded"
expect_eq "$(sql "SELECT payload FROM distribute_event WHERE code = '$code'" | jq -c '.keys')" \
  '[[5,"k"],[7,"b"],[10,"k"],[11,"k"],[12,"k"],[13,"k"],[14,"k"],[15,"k"],[500,"zz"]]' \
  "the repair event carries exactly the 9 differing keys (missing, different, extra)"
out=$(sql "SELECT output FROM distribute_event_step WHERE job_code = '$code'")
echo "repair step output: $out"
expect_eq "$(jq -c '[.rows, .unchanged, .inserted, .updated, .deleted]' <<<"$out")" '[8,0,2,6,1]' \
  "the repair read only the 8 differing source rows (none unchanged) and wrote exactly the differing keys"
"${V[@]}" --topic SYNC --payload '{"g": 1}' > /dev/null || fail "verify after repair: exit $?"
pass "verify after the repair exits 0"
expect_eq "$(dbq "$SRC" "SELECT COUNT(*) FROM \`$SRC\`.doc s JOIN \`$TGT\`.doc t USING (a, b) WHERE BINARY s.txt <=> BINARY t.txt AND s.opt <=> t.opt AND s.bin <=> t.bin AND s.at <=> t.at")" \
  3001 "every row is byte-equal after the repair"
expect_eq "$(sql "SELECT CONCAT(is_equal, ' ', missing_in_target, ' ', different) FROM v_verify_latest WHERE subject = 'SYNC'")" \
  "1 0 0" "v_verify_latest: the latest result of topic SYNC is equal"
[[ $(sql "SELECT first_keys FROM dsync_verify_result WHERE subject = 'SYNC' ORDER BY id LIMIT 1") == *'[500,"zz"]'* ]] ||
  fail "the history keeps the first differing keys"
pass "history keeps counts and first keys"
# POST /v1/verify answers the --json shape; /metrics exports the last result and its age.
api=$(curl -sS -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/verify" \
  -d '{"topic": "SYNC", "payload": {"g": 1}}')
expect_eq "$(jq -c '[.equal, .tables[0].source_rows, .tables[0].target_rows]' <<<"$api")" '[true,3001,3001]' "POST /v1/verify"
# One table with a free filter is the command line's, not the API's (issue 34).
status=$(curl -sS -o "$WORK/api.err" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
  "http://127.0.0.1:$port/v1/verify" -d '{"source": "env_a", "target": "env_b", "table": "doc", "where": "1 = 1; DROP TABLE doc"}')
expect_eq "$status" 400 "POST /v1/verify with a hostile where: 400 ($(cat "$WORK/api.err"))"
# v_verify_latest keeps one row per filter of the same table and target, each with its
# own latest result: "1 = 1" differed three times and is now equal; the BETWEEN
# filter's one run (before the repair) differed.
"${V[@]}" "${ONE[@]}" --where "1 = 1" > /dev/null || fail "verify of the whole table after the repair: exit $?"
expect_eq "$(sql "SELECT COUNT(*) FROM dsync_verify_result WHERE subject_kind = 'table' AND subject = 'doc' AND filter_text = '1 = 1 {}'")" 3 \
  "three runs of the filter 1 = 1 in the history"
expect_eq "$(sql "SELECT filter_text, is_equal FROM v_verify_latest WHERE subject_kind = 'table' AND subject = 'doc' AND target_ds = 'env_b'" | LC_ALL=C sort)" \
  "$(printf '%s\t%s\n' '1 = 1 {}' 1 'a > 500 {}' 1 'a BETWEEN :lo AND :hi {"hi":12,"lo":1}' 0 \
     'b = :v {"v":"k'"'"' OR 1=1 -- "}' 1)" \
  "v_verify_latest: one row per filter of table doc, each with its latest result"
metrics=$(curl -sS "http://127.0.0.1:$port/metrics")
grep -q '^dsync_verify_last_equal{subject="SYNC",kind="topic",table="doc",target="env_b"} 1' <<<"$metrics" ||
  fail "metrics: $(grep verify <<<"$metrics")"
grep -q '^dsync_verify_last_age_seconds{subject="doc",kind="table"' <<<"$metrics" || fail "metrics: no age"
pass "metrics export the last result and its age"

# --- E2: --repair --no-wait ---------------------------------------------------------------
dbq "$TGT" "UPDATE doc SET txt = 'after the repair' WHERE a = 20"
set +e; "${V[@]}" --topic SYNC --payload '{"g": 1}' --repair --no-wait > "$WORK/nowait.txt" 2>&1; rc=$?; set -e
cat "$WORK/nowait.txt"
expect_eq "$rc" 3 "--repair --no-wait exits 3 (the differences are not yet repaired)"
line=$(grep -E '^repair event repair-[0-9a-f]{16} for doc \(1 keys\)$' "$WORK/nowait.txt") || fail "no line names the repair event"
grep -q '^after repair' "$WORK/nowait.txt" && fail "--no-wait re-verified"
code=$(awk '{print $3}' <<<"$line")
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE code = '$code' AND topic = 'dsync_repair'")" 1 "the named repair event exists"
wait_for '[[ $(event_status '"$code"') =~ ^(SUCCESS|FAILED|COMPENSATED)$ ]]' 60 "the --no-wait repair event finished"
expect_eq "$(event_status "$code")" SUCCESS "the --no-wait repair event succeeded"
"${V[@]}" --topic SYNC --payload '{"g": 1}' > /dev/null || fail "verify after the --no-wait repair: exit $?"
pass "verify after the --no-wait repair exits 0"

# --- E3: a topic verify reads the step's filter and columns --------------------------------
# SYNC_THEN_VERIFY's sync step copies a, b, grp, txt of group :g. Planted: a difference
# in a column it does not copy (30), one in a column it copies (31), and one outside
# its filter (9000, group 2).
dbq "$TGT" "UPDATE doc SET opt = 'not synced' WHERE a = 30; UPDATE doc SET txt = 'synced' WHERE a = 31;
            INSERT INTO doc VALUES (9000, 'k', 2, 'target', NULL, NULL, NULL)"
dbq "$SRC" "INSERT INTO doc VALUES (9000, 'k', 2, 'source', NULL, NULL, NULL)"
set +e; "${V[@]}" --topic SYNC_THEN_VERIFY --payload '{"g": 1}' --json > "$WORK/cols.json"; rc=$?; set -e
expect_eq "$rc" 3 "topic verify with a columns list exits 3"
expect_eq "$(jq -c '.tables | map([.step, .missing_in_target, .extra_in_target, .different])' "$WORK/cols.json")" \
  '[["titles",[],[],[[31,"k"]]]]' "topic verify: only the copied column's difference in the step's group"
set +e; "${V[@]}" "${ONE[@]}" --where "1 = 1" --json > "$WORK/all.json"; rc=$?; set -e
expect_eq "$(jq -c '.tables[0].different' "$WORK/all.json")" '[[30,"k"],[31,"k"],[9000,"k"]]' \
  "the whole table, every column: all three differences"

# --- F: two independent servers ----------------------------------------------------------
second=$(bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" start)
trap 'cleanup; drop_datasources; bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" stop "$second"' EXIT
url2=$(bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" url "$second")
bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" root "$second" -e "CREATE TABLE dsync.doc (a INT NOT NULL,
    b VARCHAR(20) COLLATE utf8mb4_general_ci NOT NULL, grp INT NOT NULL,
    txt VARCHAR(50) COLLATE utf8mb4_general_ci NULL, opt VARCHAR(10) NULL, bin VARBINARY(8) NULL, at DATETIME(3) NULL,
    PRIMARY KEY (a, b)) DEFAULT CHARSET=utf8mb4"
MYSQL_PWD=$DB_PASS mariadb -N -B -r -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SRC" -e "SELECT CONCAT('INSERT INTO dsync.doc VALUES (',
    a, ',', QUOTE(b), ',', grp, ',', QUOTE(txt), ',', QUOTE(opt), ',', IFNULL(CONCAT('0x', HEX(bin)), 'NULL'), ',',
    QUOTE(at), ');') FROM doc WHERE a <= 200" > "$WORK/rows.sql"
echo "UPDATE dsync.doc SET txt = 'other server' WHERE a = 100;" >> "$WORK/rows.sql"
bash "$DSYNC_SOURCE_DIR/scripts/mariadb.sh" root "$second" < "$WORK/rows.sql"
jq --arg u "$url2" '.datasources.env_c = $u' "$WORK/dsync.json" > "$WORK/two.json"
set +e; "$DSYNC_BIN" verify --config "$WORK/two.json" --source env_a --target env_c --table doc --where "a <= 200" --json > "$WORK/f.json"; rc=$?; set -e
expect_eq "$rc" 3 "verify across two servers finds the difference"
expect_eq "$(jq -c '.tables[0] | [.source_rows, .target_rows, .missing_in_target, .extra_in_target, .different]' "$WORK/f.json")" \
  '[201,201,[],[],[[100,"k"]]]' "across two servers: exactly the changed row"
echo "PASS verify_test"
