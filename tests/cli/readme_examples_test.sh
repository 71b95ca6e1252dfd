#!/usr/bin/env bash
# The README's examples work as written: every ```sh block after a
# `<!-- readme-test: api -->` marker and every ```sql block after a
# `<!-- readme-test: sql -->` marker is run, in README order, against a real
# `dsync all` (dispatcher + node + API in one process) on a real database.
#
# The only substitution: the README talks to the default 127.0.0.1:8080; the test's
# server listens on a free port, so that address is rewritten to it. A block fails
# the test when it exits non-zero (the README's curl commands use --fail-with-body,
# so an HTTP error fails them) or when a SQL statement errors.
source "$(dirname "$0")/lib.sh"
# Node addresses on free ports: a node listens for wake-ups on its address, and
# tests run in parallel (ctest -j2); a fixed port could take another test's wake-ups.
read -r NODE_PORT <<< "$(free_ports 1 | tr '\n' ' ')"
: "${DSYNC_SOURCE_DIR:?DSYNC_SOURCE_DIR is not set: run via ctest}"
readme=$DSYNC_SOURCE_DIR/README.md

# extract MARKER LANG -> writes block files $WORK/MARKER-N.LANG, prints their count
extract() {
  awk -v marker="<!-- readme-test: $1 -->" -v lang="$2" -v out="$WORK/$1-" '
    $0 == marker { armed = 1; next }
    armed && $0 == "```" lang { inside = 1; n++; file = out n "." lang; next }
    inside && $0 == "```" { inside = 0; armed = 0; close(file); next }
    inside { print > file }
    END { print n + 0 }' "$readme"
}
n_api=$(extract api sh)
n_sql=$(extract sql sql)
(( n_api >= 3 )) || fail "README has $n_api api example blocks (expected at least 3)"
(( n_sql >= 1 )) || fail "README has $n_sql sql example blocks (expected at least 1)"
pass "README: $n_api api blocks, $n_sql sql blocks"

port=$(free_port)
# The topics the README's examples use, with no-op demo steps (no second
# environment needed to show the API).
write_config readme '{
  "SPACE_ADD": { "steps": [ { "name": "space", "type": "demo" }, { "name": "docs", "type": "demo" },
                            { "name": "tags", "type": "demo" }, { "name": "permissions", "type": "demo" } ] },
  "DOC_UPDATE": { "steps": [ { "name": "doc", "type": "demo" } ] }
}' '{"consumer": {"capacity": 4}}'
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
start_bg all "$DSYNC_BIN" all --config "$WORK/dsync.json" --listen "127.0.0.1:$port" --node-address 127.0.0.1:${NODE_PORT}
wait_for "curl -sf http://127.0.0.1:$port/healthz >/dev/null" 15 "API up on $port"

# The retry example re-drives DOC_UPDATE-103: make it a compensated failure first.
"$DSYNC_BIN" produce --config "$WORK/dsync.json" --topic DOC_UPDATE --code DOC_UPDATE-103 --tenant t1 \
  --data-id doc-103 --payload '{"doc_id": 103, "demo": {"fail": {"doc": "permanent"}}}' >/dev/null
wait_for '[[ $(event_status DOC_UPDATE-103) == COMPENSATED ]]' 20 "DOC_UPDATE-103 compensated"

for i in $(seq 1 "$n_api"); do
  block=$WORK/api-$i.sh
  sed -i "s#127\.0\.0\.1:8080#127.0.0.1:$port#g; s#localhost:8080#127.0.0.1:$port#g" "$block"
  if ! out=$(cd "$WORK" && bash -euo pipefail "$block" 2>&1); then
    fail "README api block $i failed:
$(cat "$block")
--- output:
$out"
  fi
  pass "README api block $i: $(head -c 100 <<<"$out" | tr '\n' ' ')"
done

# Let every event the examples produced settle, so the SQL examples see history.
wait_for '[[ $(sql "SELECT COUNT(*) FROM distribute_event WHERE status NOT IN ('"'SUCCESS','FAILED','COMPENSATED'"')") == 0 ]]' 30 \
  "events produced by the examples terminal"

for i in $(seq 1 "$n_sql"); do
  block=$WORK/sql-$i.sql
  if ! out=$(MYSQL_PWD=$DB_PASS mariadb -h "$DB_HOST" -P "$DB_PORT" -u "$DB_USER" "$SCHEMA" <"$block" 2>&1); then
    fail "README sql block $i failed:
$(cat "$block")
--- output:
$out"
  fi
  pass "README sql block $i ($(grep -c ';' "$block") statements)"
done
# The history the SQL examples point at is really there.
expect_eq "$(sql "SELECT COUNT(*) > 0 FROM v_step_history WHERE event_code = 'SPACE_ADD-9-20261120'")" 1 \
  "the README's example event has a step history"
echo "readme_examples_test: all passed"
