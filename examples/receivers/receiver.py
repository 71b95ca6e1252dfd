#!/usr/bin/env python3
"""A dsync `http` step receiver in Python (standard library only).

Forward action:  POST /refresh        -> "refreshes" data_id, once per Idempotency-Key
Compensation:    POST /refresh/undo   -> undoes what that key's forward call did, once

Both are idempotent by the Idempotency-Key header (the step code; the compensation's
key is the step code + "-compensate"): a retried or repeated call answers what the first
answered and changes nothing again. State is kept in memory (use a table in real life).

  python3 receiver.py PORT [JOURNAL_FILE]
Environment: DELAY_FIRST_MS (sleep that long before answering each key's first call),
FAIL_FIRST (answer 503 + Retry-After: 1 to the first N calls).
Each call is appended to JOURNAL_FILE: "START <path> <key>" when it arrives, then
"POST <path> <key> <status>" when answered.
"""
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
key_locks = {}     # idempotency key -> lock held while that key's call runs
answers = {}       # idempotency key -> (status, body) already given
applied = {}       # data_id -> number of refreshes applied (the "side effect")
seen_keys = set()  # keys whose first call started
calls = 0
DELAY_FIRST_MS = int(os.environ.get("DELAY_FIRST_MS", "0"))
FAIL_FIRST = int(os.environ.get("FAIL_FIRST", "0"))
JOURNAL = sys.argv[2] if len(sys.argv) > 2 else None


def journal(line):
    if JOURNAL:
        with lock, open(JOURNAL, "a") as f:
            f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def reply(self, status, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        global calls
        key = self.headers.get("Idempotency-Key", "")
        length = int(self.headers.get("Content-Length", "0"))
        ctx = json.loads(self.rfile.read(length) or b"{}")
        with lock:
            calls += 1
            n = calls
            first = key not in seen_keys
            seen_keys.add(key)
        journal(f"START {self.path} {key}")
        if n <= FAIL_FIRST:
            journal(f"POST {self.path} {key} 503")
            return self.reply(503, {"error": "busy"}, [("Retry-After", "1")])
        if not key or self.path not in ("/refresh", "/refresh/undo"):
            journal(f"POST {self.path} {key} 400")
            return self.reply(400, {"error": "unknown action or no Idempotency-Key"})
        # One call per key at a time: a retry that arrives while the first call still
        # runs (its caller died) waits for it, then gets its answer.
        with lock:
            key_lock = key_locks.setdefault(key, threading.Lock())
        with key_lock:
            if first and DELAY_FIRST_MS:
                time.sleep(DELAY_FIRST_MS / 1000)
            status, body = self.apply(key, ctx)
        journal(f"POST {self.path} {key} {status}")
        self.reply(status, body)

    def apply(self, key, ctx):
        with lock:
            if key in answers:  # a retry: the same answer, nothing applied again
                status, body = answers[key]
            elif self.path == "/refresh":
                data_id = ctx.get("data_id", "")
                applied[data_id] = applied.get(data_id, 0) + 1
                status, body = 200, {"refreshed": data_id, "key": key, "applied": applied[data_id]}
            else:
                forward = key[: -len("-compensate")]
                data_id = ctx.get("data_id", "")
                undone = forward in answers
                if undone:
                    applied[data_id] = applied.get(data_id, 1) - 1
                    del answers[forward]
                status, body = 200, {"undone": undone, "key": key, "applied": applied.get(data_id, 0)}
            answers[key] = (status, body)
        return status, body

    def do_GET(self):
        with lock:
            self.reply(200, {"applied": applied})


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    server.serve_forever()
