#!/usr/bin/env bash
# Issue 34 item 6 through the real binary (`dsync all` with an API token, two schemas
# as env_a and env_b, topics syncing env_a -> env_b):
#  A. a repair event produced through the API cannot write outside its topic's step:
#     the old payload (source env_b, target env_a, table, where) and payloads that add
#     a datasource or filter end COMPENSATED with the reason, and env_a (the source of
#     truth) and env_b are untouched;
#  B. POST /v1/verify needs the token (401 without it) and takes a configured topic
#     only: one table with a free filter (`txt LIKE 's3c%'`) is refused (400) and
#     records nothing;
#  C. --plan is exactly what --repair does, for every kind of difference (missing in
#     target, different, extra in target with and without delete_missing): the rows
#     the repair inserted, updated and deleted are the plan's keys, and nothing else
#     changed.
source "$(dirname "$0")/lib.sh"

with_datasources
port=$(free_port)
TOKEN=repair-scope-token
write_config repair '{
  "MIRROR": { "steps": [ { "name": "docs", "type": "table_sync", "source": "env_a", "target": "env_b",
                           "table": "doc", "where": "grp = :g", "delete_missing": true } ] },
  "MERGE":  { "steps": [ { "name": "docs", "type": "table_sync", "source": "env_a", "target": "env_b",
                           "table": "doc", "where": "grp = :g" } ] },
  "dsync_repair": { "steps": [ { "name": "repair", "type": "table_repair" } ] }
}' "$DATASOURCES" "{\"consumer\": {\"capacity\": 2}, \"api\": {\"listen\": \"127.0.0.1:$port\", \"token\": \"$TOKEN\"}}"
V=("$DSYNC_BIN" verify --config "$WORK/dsync.json")
API="http://127.0.0.1:$port"
auth=(-H "Authorization: Bearer $TOKEN")

on_both "CREATE TABLE doc (a INT NOT NULL PRIMARY KEY, grp INT NOT NULL, txt VARCHAR(50) NULL) DEFAULT CHARSET=utf8mb4"
dbq "$SRC" "INSERT INTO doc SELECT seq, 1 + seq % 2, CONCAT('text ', seq) FROM seq_1_to_40"
dbq "$SRC" "INSERT INTO doc VALUES (100, 1, 's3cret')"
dbq "$TGT" "INSERT INTO doc SELECT * FROM \`$SRC\`.doc WHERE a <> 100"
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_bg all "$DSYNC_BIN" all --config "$WORK/dsync.json" --node-address "127.0.0.1:$(free_port)"
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_node_registry WHERE status = 1") == 1 ]]' 20 "node online"
wait_for '[[ $(curl -s -o /dev/null -w "%{http_code}" "$API/healthz" "${auth[@]}") == 200 ]]' 20 "API up"

state() { dbq "$1" "SELECT COUNT(*), IFNULL(SUM(CRC32(CONCAT_WS('|', a, grp, IFNULL(txt, '<null>')))), 0) FROM doc"; }
post() {  # post PATH BODY -> "STATUS BODY"
  curl -sS -o "$WORK/post.out" -w '%{http_code}' -X POST -H 'Content-Type: application/json' "${auth[@]}" "$API$1" -d "$2"
  echo " $(cat "$WORK/post.out")"
}

# --- A: hostile repair payloads ---------------------------------------------------------
src_before=$(state "$SRC"); tgt_before=$(state "$TGT")
n=0
for payload in \
  '{"source": "env_b", "target": "env_a", "table": "doc", "where": "1 = 1", "params": {}, "key_columns": ["a"], "keys": [[100]]}' \
  '{"topic": "MIRROR", "step": "docs", "payload": {"g": 1}, "keys": [[100]], "source": "env_b", "target": "env_a"}' \
  '{"topic": "MIRROR", "step": "docs", "payload": {"g": 1}, "keys": [[100]], "where": "1 = 1"}' \
  '{"topic": "dsync_repair", "step": "repair", "keys": [[100]]}' \
  '{"topic": "NOPE", "step": "docs", "keys": [[100]]}'; do
  n=$((n + 1))
  out=$(post /v1/events "{\"code\": \"hostile-$n\", \"tenant_id\": \"t1\", \"data_id\": \"doc\", \"topic\": \"dsync_repair\", \"payload\": $payload}")
  [[ $out == 201* ]] || fail "producing hostile-$n: $out"
done
for i in $(seq 1 $n); do
  wait_for "[[ \$(event_status hostile-$i) =~ ^(SUCCESS|FAILED|COMPENSATED)$ ]]" 30 "hostile-$i finished"
  expect_eq "$(event_status hostile-$i)" COMPENSATED "hostile repair $i is refused (compensated)"
  err=$(sql "SELECT error_details FROM distribute_event_step WHERE job_code = 'hostile-$i' AND step_name = 'repair'")
  [[ $err == "table_repair repair: "* ]] || fail "hostile-$i: the step's error does not say why: $err"
  pass "hostile-$i: $err"
done
expect_eq "$(state "$SRC")" "$src_before" "env_a (the source of truth) is untouched by every hostile repair"
expect_eq "$(state "$TGT")" "$tgt_before" "env_b is untouched by every hostile repair"
expect_eq "$(dbq "$SRC" "SELECT txt FROM doc WHERE a = 100")" "s3cret" "env_a's row 100 is still there"

# --- B: POST /v1/verify: token, configured topics only ------------------------------------
status=$(curl -sS -o /dev/null -w '%{http_code}' -X POST -H 'Content-Type: application/json' "$API/v1/verify" \
  -d '{"topic": "MIRROR", "payload": {"g": 1}}')
expect_eq "$status" 401 "POST /v1/verify without the token: 401"
status=$(curl -sS -o /dev/null -w '%{http_code}' "$API/v1/verify")
expect_eq "$status" 401 "GET /v1/verify without the token: 401"
history=$(sql "SELECT COUNT(*) FROM dsync_verify_result")
out=$(post /v1/verify '{"source": "env_a", "target": "env_b", "table": "doc", "where": "txt LIKE '"'"'s3c%'"'"'"}')
[[ $out == 400* && $out == *topic* ]] || fail "a one-table probe was not refused: $out"
pass "POST /v1/verify of one table with a free filter: ${out:0:160}"
expect_eq "$(sql "SELECT COUNT(*) FROM dsync_verify_result")" "$history" "the refused probe recorded nothing"
out=$(post /v1/verify '{"topic": "MERGE", "payload": {"g": 1}}')
[[ $out == 200* ]] || fail "POST /v1/verify of a topic: $out"
expect_eq "$(jq -c '.tables[0] | [.step, .missing_in_target]' <<<"${out#* }")" '["docs",[[100]]]' \
  "POST /v1/verify of a configured topic answers"

# --- C: --plan == --repair for every kind of difference ------------------------------------
dbq "$TGT" "DELETE FROM doc WHERE a = 4;
            UPDATE doc SET txt = 'changed' WHERE a IN (6, 8);
            INSERT INTO doc VALUES (201, 1, 'extra'), (203, 1, 'extra'), (202, 2, 'other group')"
# Keys the target gained, lost or changed between snapshot `snap` and now.
changes() {
  dbq "$TGT" "SELECT 'insert', a FROM doc WHERE a NOT IN (SELECT a FROM snap)
              UNION ALL SELECT 'delete', a FROM snap WHERE a NOT IN (SELECT a FROM doc)
              UNION ALL SELECT 'update', d.a FROM doc d JOIN snap s USING (a)
                        WHERE NOT (d.grp <=> s.grp AND d.txt <=> s.txt)" | LC_ALL=C sort
}
plan_changes() {  # the plan's keys in the same form
  jq -r '.tables[0] | (.insert_keys[] | "insert\t\(.[0])"), (.update_keys[] | "update\t\(.[0])"),
                      (.delete_keys[] | "delete\t\(.[0])")' "$1" | LC_ALL=C sort
}
for topic in MERGE MIRROR; do
  dbq "$TGT" "DROP TABLE IF EXISTS snap; CREATE TABLE snap AS SELECT * FROM doc"
  set +e; "${V[@]}" --topic "$topic" --payload '{"g": 1}' --plan --json > "$WORK/plan-$topic.json"; rc=$?; set -e
  expect_eq "$rc" 3 "$topic --plan: a sync would write (exit 3)"
  jq -c '.tables[0] | {insert_keys, update_keys, delete_keys, extra_kept_keys}' "$WORK/plan-$topic.json"
  expect_eq "$(changes)" "" "$topic --plan wrote nothing"
  set +e; "${V[@]}" --topic "$topic" --payload '{"g": 1}' --repair --timeout-ms 60000 > "$WORK/repair-$topic.txt" 2>&1; rc=$?; set -e
  cat "$WORK/repair-$topic.txt"
  expect_eq "$(changes)" "$(plan_changes "$WORK/plan-$topic.json")" \
    "$topic: the rows --repair inserted, updated and deleted are exactly the plan's"
  code=$(grep -oE 'repair-[0-9a-f]{16}' "$WORK/repair-$topic.txt" | head -1)
  expect_eq "$(event_status "$code")" SUCCESS "$topic: the repair event succeeded"
  expect_eq "$(sql "SELECT output FROM distribute_event_step WHERE job_code = '$code'" | jq -c '[.inserted, .updated, .deleted // 0]')" \
    "$(jq -c '.tables[0] | [.insert, .update, .delete]' "$WORK/plan-$topic.json")" \
    "$topic: the repair step's counts are the plan's"
  expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM doc WHERE a = 202")" 1 "$topic: the other group's extra row is left alone"
done
expect_eq "$(jq -c '.tables[0] | [.insert, .update, .delete, .extra_kept_keys]' "$WORK/plan-MERGE.json")" '[2,2,0,[[201],[203]]]' \
  "MERGE (no delete_missing): the plan inserts 4 and 100, updates 6 and 8, keeps the extra rows"
expect_eq "$(jq -c '.tables[0] | [.insert, .update, .delete, .delete_keys]' "$WORK/plan-MIRROR.json")" '[0,0,2,[[201],[203]]]' \
  "MIRROR (delete_missing), after MERGE's repair: the plan deletes the extra rows"
"${V[@]}" --topic MIRROR --payload '{"g": 1}' > /dev/null || fail "verify after the repairs: exit $?"
pass "verify of MIRROR after the repairs exits 0"
expect_eq "$(state "$SRC")" "$src_before" "env_a is unchanged by every repair"
echo "PASS repair_scope_test"
