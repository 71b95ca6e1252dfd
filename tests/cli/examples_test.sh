#!/usr/bin/env bash
# Issue 38: the example receivers (examples/receivers/, one file each in Python, Node.js
# and Go, standard library only) behind a real dispatcher and node, with the example
# topic's shape (examples/space_sync.json: table_sync, then http). For each language:
# an event that succeeds (the row synced, the receiver's refresh applied once, its
# answer stored as the step's output), and one whose later step fails for good (the
# receiver's undo called with "<step code>-compensate" and the forward output; the row
# restored to what the target held). A language whose runtime is missing is skipped
# with a note (scripts/setup.sh installs python3, nodejs and golang-go).
source "$(dirname "$0")/lib.sh"
EXAMPLES=$(cd "$(dirname "$0")/../../examples" && pwd)
read -r N1_PORT PY_PORT JS_PORT GO_PORT <<< "$(free_ports 4 | tr '\n' ' ')"
fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, last_error FROM distribute_event" >&2; sql "SELECT code, status, output, error_details FROM distribute_event_step" >&2; tail -n 20 "$WORK"/*.log >&2; exit 1; }
with_datasources
on_both "CREATE TABLE kb_space (id INT PRIMARY KEY, name VARCHAR(40))"
dbq "$SRC" "INSERT INTO kb_space VALUES (1, 'py new'), (2, 'py doomed'), (3, 'js new'), (4, 'js doomed'), (5, 'go new'), (6, 'go doomed')"
dbq "$TGT" "INSERT INTO kb_space VALUES (2, 'py old'), (4, 'js old'), (6, 'go old')"

langs=()
PYTHON=$(command -v python3 || true); NODE=$(command -v node || command -v nodejs || true); GO=$(command -v go || true)
[[ -n $PYTHON ]] && langs+=(py) || echo "note: python3 not installed: the Python receiver is skipped"
[[ -n $NODE ]] && langs+=(js) || echo "note: node not installed: the Node.js receiver is skipped"
[[ -n $GO ]] && langs+=(go) || echo "note: go not installed: the Go receiver is skipped"
(( ${#langs[@]} > 0 )) || fail "no receiver runtime installed"

# One topic per language, shaped like examples/space_sync.json's SPACE_SYNC (its exec
# step replaced by a demo step that the failing events fail).
topic() {  # topic LANG PORT
  jq -n --arg port "$2" '{
    max_retry: 1, backoff_base_ms: 100, ordered: false,
    steps: [
      {name: "space", type: "table_sync", source: "env_a", target: "env_b", table: "kb_space", where: "id = :space_id"},
      {name: "refresh", type: "http", timeout_ms: 10000, url: "http://127.0.0.1:\($port)/refresh",
       headers: {"Authorization": "Bearer ${EXAMPLE_TOKEN}"},
       compensate: {url: "http://127.0.0.1:\($port)/refresh/undo"}},
      {name: "check", type: "demo"}]}'
}
topics=$(jq -n --argjson py "$(topic py "$PY_PORT")" --argjson js "$(topic js "$JS_PORT")" --argjson go "$(topic go "$GO_PORT")" \
  '{SPACE_SYNC_PY: $py, SPACE_SYNC_JS: $js, SPACE_SYNC_GO: $go}')
write_config examples "$topics" "$DATASOURCES"
for lang in "${langs[@]}"; do
  case $lang in
    py) port=$PY_PORT; start_bg rx_py "$PYTHON" "$EXAMPLES/receivers/receiver.py" "$port" "$WORK/journal_py" ;;
    js) port=$JS_PORT; start_bg rx_js "$NODE" "$EXAMPLES/receivers/receiver.js" "$port" "$WORK/journal_js" ;;
    go) port=$GO_PORT
        # Built once into the test's folder (go run would leave a build cache behind).
        (cd "$WORK" && cp "$EXAMPLES/receivers/receiver.go" . && GOCACHE="$WORK/gocache" GOPATH="$WORK/gopath" \
           "$GO" build -o receiver_go receiver.go) || fail "go build of the example receiver"
        start_bg rx_go "$WORK/receiver_go" "$port" "$WORK/journal_go" ;;
  esac
  wait_for "curl -sf http://127.0.0.1:$port/ >/dev/null" 60 "the $lang receiver answers"
done
EXAMPLE_TOKEN=example-secret start_dispatch n1 "$N1_PORT"

id=0
for lang in "${langs[@]}"; do
  T=SPACE_SYNC_${lang^^}
  eval "port=\$${lang^^}_PORT"
  ok=$((++id)); doomed=$((++id))
  produce "$lang-ok" "{\"space_id\": $ok}" "$T"
  produce "$lang-doomed" "{\"space_id\": $doomed, \"demo\": {\"fail\": {\"check\": \"permanent\"}}}" "$T"
  wait_for "[[ \$(event_status $lang-ok) == SUCCESS ]]" 60 "$lang-ok SUCCESS (is \$(event_status $lang-ok))"
  wait_for "[[ \$(event_status $lang-doomed) == COMPENSATED ]]" 60 "$lang-doomed COMPENSATED (is \$(event_status $lang-doomed))"
  expect_eq "$(dbq "$TGT" "SELECT name FROM kb_space WHERE id = $ok")" "$lang new" "$lang: the row synced"
  expect_eq "$(dbq "$TGT" "SELECT name FROM kb_space WHERE id = $doomed")" "$lang old" "$lang: the doomed event's row restored"
  expect_eq "$(sql "SELECT JSON_UNQUOTE(JSON_EXTRACT(output, '\$.refreshed')) FROM distribute_event_step WHERE code = '$lang-ok#2'")" \
    "$lang-ok" "$lang: the receiver's answer is the step's output"
  expect_eq "$(curl -sf "http://127.0.0.1:$port/" | jq -S -c ".applied")" "{\"$lang-doomed\":0,\"$lang-ok\":1}" \
    "$lang: refresh applied once for the good event, undone for the doomed one"
  expect_eq "$(grep -c "/refresh/undo $lang-doomed#2-compensate 200" "$WORK/journal_$lang")" 1 \
    "$lang: the undo came with the compensation key"
done
expect_eq "$(saga_violations)" 0 "saga order holds"
