#!/usr/bin/env bash
# Issue 35 item 5: bundles, a sync carried as a file between environments whose link
# passes only files. Side A's config names only env_a, side B's only env_b: the file is
# the only thing that crosses.
#  - export on A (a topic with two table_sync steps: an integer key with delete_missing,
#    a text key with NULLs and binary values);
#  - a truncated, an altered and a foreign-key copy are refused by import and by
#    verify --bundle, one line each naming the fault; nothing applied;
#  - verify --bundle before the import: exit 3;
#  - an import that fails in its second table (a unique key the target holds) restores
#    the first table byte for byte (the undo) and records no event;
#  - the import: both tables equal to env_a (ordered dumps), event bundle-<id> SUCCESS
#    with its two steps; verify --bundle: exit 0;
#  - the same bundle again: refused as a replay, nothing written;
#  - an import killed with kill -9 mid-table, then run again: equal, and no chunk
#    record written twice for a range.
source "$(dirname "$0")/lib.sh"
with_datasources
ROWS=${BUNDLE_ROWS:-60000}

on_both "CREATE TABLE big (id INT PRIMARY KEY, grp INT NOT NULL, name VARCHAR(40), at DATETIME(3));
         CREATE TABLE tagged (name VARCHAR(40) PRIMARY KEY, v INT, note TEXT, raw VARBINARY(16)) DEFAULT CHARSET=utf8mb4"
dbq "$SRC" "INSERT INTO big SELECT seq, seq % 7, CONCAT('name ', seq), '2025-01-01' + INTERVAL seq SECOND FROM seq_1_to_$ROWS;
            INSERT INTO tagged SELECT CONCAT('tag-', seq), seq, IF(seq % 5 = 0, NULL, REPEAT('n', seq % 50)),
                                      UNHEX(CONCAT('00FF', LPAD(HEX(seq), 8, '0'))) FROM seq_1_to_3000"
# env_b: an older copy: every 10th row missing, every 3rd different, 500 extra rows.
dbq "$TGT" "INSERT INTO big SELECT seq, seq % 7, IF(seq % 3 = 0, CONCAT('old ', seq), CONCAT('name ', seq)),
                                   '2025-01-01' + INTERVAL seq SECOND FROM seq_1_to_$ROWS WHERE seq % 10 <> 7;
            INSERT INTO big SELECT $ROWS + seq, 0, 'extra', NULL FROM seq_1_to_500;
            INSERT INTO tagged SELECT CONCAT('tag-', seq), seq, 'old', NULL FROM seq_1_to_2000"

TOPICS='{ "SYNC": { "steps": [
  { "name": "big", "type": "table_sync", "source": "env_a", "target": "env_b", "table": "big", "where": "1 = 1",
    "delete_missing": true },
  { "name": "tagged", "type": "table_sync", "source": "env_a", "target": "env_b", "table": "tagged",
    "where": "v >= :min_v" } ] } }'
BASE="mysql://$DB_USER:$DB_PASS@$DB_HOST:$DB_PORT"
KEY='{"bundle": {"key": "s3cret-bundle-key"}}'
CONFIG_FILE=$WORK/a.json write_config bundle "$TOPICS" "{\"datasources\": {\"env_a\": \"$BASE/$SRC\"}}" "$KEY"
CONFIG_FILE=$WORK/b.json write_config bundle "$TOPICS" "{\"datasources\": {\"env_b\": \"$BASE/$TGT\"}}" "$KEY"
CONFIG_FILE=$WORK/other.json write_config bundle "$TOPICS" "{\"datasources\": {\"env_b\": \"$BASE/$TGT\"}}" \
  '{"bundle": {"key": "another-key"}}'
"$DSYNC_BIN" migrate --config "$WORK/b.json" >/dev/null

dump() { dbq "$1" "SELECT * FROM big ORDER BY id" | md5sum; dbq "$1" "SELECT name, v, note, HEX(raw) FROM tagged ORDER BY name" | md5sum; }
# env_a's rows as a sync with {"min_v": 0} leaves them (tagged: every row has v >= 0).
want=$(dump "$SRC")

# --- export on side A ------------------------------------------------------------------
out=$("$DSYNC_BIN" bundle export --config "$WORK/a.json" --topic SYNC --payload '{"min_v": 0}' \
  --out "$WORK/x.dsb" 2>&1) || fail "export: $out"
echo "$out"
[[ -s $WORK/x.dsb && ! -e $WORK/x.dsb.part ]] || fail "export: no bundle file"
pass "export: $(stat -c %s "$WORK/x.dsb") bytes for $ROWS + 3000 rows"

# --- refusals --------------------------------------------------------------------------
before=$(dump "$TGT")
size=$(stat -c %s "$WORK/x.dsb")
head -c $((size - 40)) "$WORK/x.dsb" >"$WORK/cut.dsb"
cp "$WORK/x.dsb" "$WORK/altered.dsb"
printf 'X' | dd of="$WORK/altered.dsb" bs=1 seek=$((size / 2)) conv=notrunc status=none
refused() {  # refused FILE CONFIG EXPECTED_TEXT WHAT [import-only]
  local out rc=0
  out=$("$DSYNC_BIN" bundle import "$1" --config "$2" 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "$4: import exit $rc, expected 2: $out"
  [[ $(printf '%s\n' "$out" | grep -vc " warn \| info ") == 1 ]] || fail "$4: not one line: $out"
  [[ $out == *"$3"* ]] || fail "$4: '$out' does not name '$3'"
  if [[ -z ${5:-} ]]; then
    rc=0
    out=$("$DSYNC_BIN" verify --bundle "$1" --config "$2" 2>&1) || rc=$?
    [[ $rc == 2 && $out == *"$3"* ]] || fail "$4: verify --bundle exit $rc: $out"
  fi
  pass "$4 refused: $(printf '%s' "$out" | tail -n 1)"
}
refused "$WORK/cut.dsb" "$WORK/b.json" "truncated" "a truncated bundle"
refused "$WORK/altered.dsb" "$WORK/b.json" "signature mismatch" "an altered bundle"
refused "$WORK/x.dsb" "$WORK/other.json" "signature mismatch" "a bundle checked with another key"
expect_eq "$(dump "$TGT")" "$before" "nothing applied by a refused bundle"

rc=0; "$DSYNC_BIN" verify --bundle "$WORK/x.dsb" --config "$WORK/b.json" >"$WORK/v1.txt" 2>&1 || rc=$?
cat "$WORK/v1.txt"
expect_eq "$rc" 3 "verify --bundle before the import: different (exit 3)"

# --- a failing import restores what it wrote --------------------------------------------
dbq "$TGT" "ALTER TABLE tagged ADD UNIQUE KEY uk_v (v); INSERT INTO tagged VALUES ('zzz-blocker', 2500, 'x', NULL)"
before=$(dump "$TGT")
rc=0; out=$("$DSYNC_BIN" bundle import "$WORK/x.dsb" --config "$WORK/b.json" 2>&1) || rc=$?
echo "$out" | tail -n 2
[[ $rc != 0 && $out == *"restored"* ]] || fail "an import into a refusing target: exit $rc: $out"
expect_eq "$(dump "$TGT")" "$before" "the failed import's first table restored byte for byte (undo)"
expect_eq "$(sql "SELECT COUNT(*) FROM distribute_event WHERE topic = 'dsync.bundle'")" 0 "no event recorded for a failed import"
dbq "$TGT" "DELETE FROM tagged WHERE name = 'zzz-blocker'; ALTER TABLE tagged DROP KEY uk_v"

# --- the import ------------------------------------------------------------------------
out=$("$DSYNC_BIN" bundle import "$WORK/x.dsb" --config "$WORK/b.json" 2>&1) || fail "import: $out"
echo "$out"
expect_eq "$(dump "$TGT")" "$want" "env_b equals env_a after the import (ordered dumps of both tables)"
code=$(sql "SELECT code FROM distribute_event WHERE topic = 'dsync.bundle'")
[[ $code == bundle-* ]] || fail "no bundle event: '$code'"
expect_eq "$(event_status "$code")" SUCCESS "the import is event $code, SUCCESS"
expect_eq "$(sql "SELECT GROUP_CONCAT(step_name, ':', status ORDER BY sort) FROM distribute_event_step WHERE job_code = '$code'")" \
  "big:SUCCESS,tagged:SUCCESS" "its two steps SUCCESS"
"$DSYNC_BIN" verify --bundle "$WORK/x.dsb" --config "$WORK/b.json" >/dev/null 2>&1 || fail "verify --bundle after the import: exit $?"
pass "verify --bundle after the import: equal (exit 0)"

# --- a replay --------------------------------------------------------------------------
records=$(dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk")
before=$(dump "$TGT")
refused "$WORK/x.dsb" "$WORK/b.json" "imported before" "the same bundle again (a replay)" import-only
expect_eq "$(dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk")/$(dump "$TGT")" "$records/$before" "a replay writes nothing"

# --- kill -9 mid-import, then again -------------------------------------------------------
dbq "$SRC" "UPDATE big SET name = CONCAT('v2 ', id) WHERE id % 2 = 0"
want=$(dump "$SRC")
id2=$("$DSYNC_BIN" bundle export --config "$WORK/a.json" --topic SYNC --payload '{"min_v": 0}' --out "$WORK/y.dsb" \
  --json 2>/dev/null | jq -r .bundle_id) || fail "second export"
"$DSYNC_BIN" bundle import "$WORK/y.dsb" --config "$WORK/b.json" >"$WORK/import-killed.log" 2>&1 &
pid=$!
wait_for '[[ $(dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code = '"'"'bundle-$id2#1'"'"' AND chunk_no > 0") -gt 3 ]]' 60 \
  "the second import writing chunks"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
[[ -z $(event_status "bundle-$id2") ]] || fail "the import finished before its kill -9 (raise BUNDLE_ROWS): nothing tested"
echo "killed the import after $(dbq "$TGT" "SELECT COUNT(*) FROM dsync_sync_chunk WHERE step_code LIKE 'bundle-$id2#%' AND chunk_no > 0") chunk record(s)"
out=$("$DSYNC_BIN" bundle import "$WORK/y.dsb" --config "$WORK/b.json" 2>&1) || fail "import after kill -9: $out"
echo "$out"
expect_eq "$(dump "$TGT")" "$want" "after kill -9 and a second run, env_b equals env_a"
dup=$(dbq "$TGT" "SELECT COUNT(*) FROM (SELECT lo_key, hi_key FROM dsync_sync_chunk
                  WHERE step_code LIKE 'bundle-$id2#%' AND chunk_no > 0 AND compensated_at IS NULL
                  GROUP BY step_code, lo_key, hi_key HAVING SUM(rows_written > 0) > 1) d")
expect_eq "$dup" 0 "no range recorded twice with writes"
