#!/usr/bin/env bash
# Issue 34 "The HTTP server", with the real `dsync serve` and real sockets
# (bench/slow_clients.py is the client): with 200 idle and 50 slowloris connections
# open, /healthz answers quickly and event POSTs go through; a POST without
# Content-Length is answered at once (411); a 1 GiB Content-Length is refused (413) and
# the server does not read the body the client goes on sending; a foreign Host header
# (DNS rebinding) is refused with 421 when no token is set, a retry POST included.
# On the Poco-based server (before issue 34): /healthz waited 30 s, the POST without
# Content-Length 30 s (then 400), the huge body was read to 64 MiB, the foreign Host
# got 200/409.
source "$(dirname "$0")/lib.sh"

write_config abuse '{
  "DEMO": { "steps": [ { "name": "s1", "type": "demo" } ] }
}'
"$DSYNC_BIN" migrate --config "$WORK/dsync.json" >/dev/null
client() { timeout 120 python3 "$(dirname "$0")/../../bench/slow_clients.py" "$@"; }

for try in 1 2 3; do
  port=$(free_port)
  start_bg serve "$DSYNC_BIN" serve --config "$WORK/dsync.json" --listen "127.0.0.1:$port"
  wait_for "curl -sf http://127.0.0.1:$port/healthz >/dev/null || ! kill -0 $PID_serve" 30 "API up on $port"
  kill -0 "$PID_serve" 2>/dev/null && break
  (( try < 3 )) || fail "serve does not start: $(tail -3 "$WORK/serve.log")"
done

line=$(client measure --port "$port" --idle 200 --slow 50 --healthz 20 --post-seconds 2 --post-clients 2 \
  --topic DEMO --timeout 3) || fail "the slow-client measurement did not finish in 120 s"
echo "measure: $line"
field() { sed -nE "s/.*(^| )$1=([^ ]*).*/\2/p" <<<"$line"; }
expect_eq "$(field healthz_failed)" 0 "every /healthz answered 200 with 250 slow connections open"
awk -v v="$(field healthz_max_ms)" 'BEGIN { exit !(v < 1000) }' ||
  fail "/healthz took $(field healthz_max_ms) ms at worst (bound 1000; target 100)"
pass "/healthz at worst $(field healthz_max_ms) ms, p99 $(field healthz_p99_ms) ms"
expect_eq "$(field posts_failed)" 0 "no event POST failed"
awk -v v="$(field posts_per_s)" 'BEGIN { exit !(v >= 10) }' || fail "event POSTs: $(field posts_per_s)/s"
pass "event POSTs kept going: $(field posts_per_s)/s"

line=$(client probe --port "$port") || fail "the probe did not finish in 120 s"
echo "probe: $line"
expect_eq "$(field no_length_status)" 411 "POST without Content-Length"
awk -v v="$(field no_length_ms)" 'BEGIN { exit !(v < 1000) }' || fail "411 took $(field no_length_ms) ms"
pass "411 at once ($(field no_length_ms) ms)"
expect_eq "$(field huge_status)" 413 "1 GiB Content-Length refused"
awk -v v="$(field huge_body_bytes_accepted)" 'BEGIN { exit !(v < 16 * 1048576) }' ||
  fail "the server took $(field huge_body_bytes_accepted) bytes of the refused body"
pass "the refused body was not read ($(field huge_body_bytes_accepted) bytes went into socket buffers)"
expect_eq "$(field foreign_host_status)" 421 "GET with Host: attacker.example"
expect_eq "$(field foreign_retry_status)" 421 "retry POST with Host: attacker.example"
kill -0 "$PID_serve" 2>/dev/null || fail "serve died"
pass "serve still running"
