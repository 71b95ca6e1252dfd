#!/usr/bin/env bash
# Issue 38: an `http` step over https verifies the peer by default. A receiver on
# loopback with a self-signed certificate (for IP 127.0.0.1): the default step fails
# permanently naming the certificate problem and sends nothing it could read; the same
# step trusting that certificate (`ca_file`) succeeds; `tls_verify: false` succeeds; a
# certificate from an issuer not trusted fails; a trusted certificate for another name fails.
source "$(dirname "$0")/lib.sh"
read -r N1_PORT RX_PORT RX2_PORT <<< "$(free_ports 3 | tr '\n' ' ')"
fail() { echo "FAIL: $*" >&2; sql "SELECT code, status, last_error FROM distribute_event" >&2; tail -n 20 "$WORK"/*.log >&2; exit 1; }
PYTHON=$(command -v python3) || fail "python3 is not installed (scripts/setup.sh installs it)"
command -v openssl >/dev/null || fail "openssl is not installed"

cert() {  # cert NAME SAN
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=dsync-test" -addext "subjectAltName=$2" \
    -keyout "$WORK/$1.key" -out "$WORK/$1.pem" 2>/dev/null || fail "openssl req"
}
cert good "IP:127.0.0.1"
cert other "DNS:not-this-host.example"
cat > "$WORK/tls_rx.py" <<'PY'
import json, ssl, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"tls": True, "key": self.headers.get("Idempotency-Key")}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[2], sys.argv[3])
s = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H); s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
PY
start_bg rx "$PYTHON" "$WORK/tls_rx.py" "$RX_PORT" "$WORK/good.pem" "$WORK/good.key"
start_bg rx2 "$PYTHON" "$WORK/tls_rx.py" "$RX2_PORT" "$WORK/other.pem" "$WORK/other.key"
wait_for "curl -sk -X POST https://127.0.0.1:$RX_PORT/ >/dev/null" 10 "the https receiver answers"
wait_for "curl -sk -X POST https://127.0.0.1:$RX2_PORT/ >/dev/null" 10 "the second https receiver answers"

url="https://127.0.0.1:$RX_PORT/hook"
write_config tls "{
  \"STRICT\":  { \"max_retry\": 0, \"steps\": [ { \"name\": \"h\", \"type\": \"http\", \"url\": \"$url\" } ] },
  \"TRUSTED\": { \"max_retry\": 0, \"steps\": [ { \"name\": \"h\", \"type\": \"http\", \"url\": \"$url\", \"ca_file\": \"$WORK/good.pem\" } ] },
  \"LOOSE\":   { \"max_retry\": 0, \"steps\": [ { \"name\": \"h\", \"type\": \"http\", \"url\": \"$url\", \"tls_verify\": false } ] },
  \"WRONG\":   { \"max_retry\": 0, \"steps\": [ { \"name\": \"h\", \"type\": \"http\", \"url\": \"$url\", \"ca_file\": \"$WORK/other.pem\" } ] },
  \"NAME\":    { \"max_retry\": 0, \"steps\": [ { \"name\": \"h\", \"type\": \"http\", \"url\": \"https://127.0.0.1:$RX2_PORT/hook\",
                                            \"ca_file\": \"$WORK/other.pem\" } ] }
}"
start_dispatch n1 "$N1_PORT"
for t in STRICT TRUSTED LOOSE WRONG NAME; do produce "tls-$t" '{}' "$t"; done
for t in STRICT TRUSTED LOOSE WRONG NAME; do
  wait_for "[[ \$(event_status tls-$t) =~ ^(SUCCESS|COMPENSATED|FAILED)$ ]]" 30 "tls-$t finished (is \$(event_status tls-$t))"
done
expect_eq "$(event_status tls-STRICT)" COMPENSATED "a self-signed peer is refused by default"
err=$(sql "SELECT error_details FROM distribute_event_step WHERE code = 'tls-STRICT#1'")
[[ $err == *"TLS certificate not accepted: self-signed certificate"* ]] || fail "STRICT error: $err"
pass "the error names the certificate problem"
expect_eq "$(event_status tls-TRUSTED)" SUCCESS "trusting the certificate (ca_file) succeeds"
expect_eq "$(sql "SELECT JSON_EXTRACT(output, '\$.tls') FROM distribute_event_step WHERE code = 'tls-TRUSTED#1'")" true \
  "the answer over TLS is the step's output"
expect_eq "$(event_status tls-LOOSE)" SUCCESS "tls_verify false succeeds"
expect_eq "$(event_status tls-WRONG)" COMPENSATED "a certificate from an untrusted issuer is refused"
expect_eq "$(event_status tls-NAME)" COMPENSATED "a trusted certificate for another name is refused"
err=$(sql "SELECT error_details FROM distribute_event_step WHERE code = 'tls-NAME#1'")
[[ $err == *"TLS certificate not accepted: IP address mismatch"* ]] || fail "NAME error: $err"
pass "the error names the mismatch"
