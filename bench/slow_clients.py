#!/usr/bin/env python3
"""Slow and hostile HTTP clients against a running `dsync serve` (scripts/bench.sh
section `slowclients`, tests/cli/http_abuse_test.sh). Standard library only.

  slow_clients.py measure --port P --idle 200 --slow 50 [--healthz 200] [--post-seconds 5]
      opens IDLE connections that send nothing and SLOW ones that send a request head
      one byte every --trickle-ms (slowloris), then measures GET /healthz latency
      (one fresh connection per request, sequential) and event POST throughput
      (--post-clients keep-alive connections for --post-seconds); prints one line
      `healthz_p50_ms=... healthz_p99_ms=... healthz_max_ms=... healthz_failed=N
       posts_per_s=... posts_failed=N idle_open=N slow_open=N`
  slow_clients.py probe --port P
      one line of the single defects of issue 34: `no_length_status=S no_length_ms=T
      huge_status=S huge_body_bytes_accepted=B foreign_host_status=S
      foreign_retry_status=S`

Every request is HTTP/1.1 to 127.0.0.1 with `Host: 127.0.0.1:P` unless stated.
"""
import argparse
import json
import socket
import sys
import threading
import time


def connect(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(s):
    """(status, body) of one response on socket s (Content-Length bodies)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed before a response")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, rest[:length]


def request(method, path, host, body=None, extra=""):
    r = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}"
    if body is not None:
        r += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    r += "\r\n"
    out = r.encode()
    if body is not None:
        out += body.encode()
    return out


def percentile(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def measure(a):
    host = f"127.0.0.1:{a.port}"
    idle, slow = [], []
    for _ in range(a.idle):
        idle.append(connect(a.port))
    head = f"POST /v1/events HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode()
    for _ in range(a.slow):
        s = connect(a.port)
        s.sendall(head)
        slow.append(s)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in list(slow):
                try:
                    s.send(b"a")
                except OSError:
                    slow.remove(s)
            stop.wait(a.trickle_ms / 1000.0)

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    time.sleep(0.2)

    lat, failed = [], 0
    for _ in range(a.healthz):
        t0 = time.monotonic()
        try:
            with connect(a.port, timeout=a.timeout) as s:
                s.sendall(request("GET", "/healthz", host))
                status, _ = read_response(s)
            if status != 200:
                failed += 1
        except OSError:
            failed += 1
        lat.append((time.monotonic() - t0) * 1000.0)

    counts, fails = [0] * a.post_clients, [0] * a.post_clients
    deadline = time.monotonic() + a.post_seconds

    def poster(i):
        n = 0
        s = None
        while time.monotonic() < deadline:
            body = json.dumps({"code": f"{a.prefix}-{i}-{n}", "topic": a.topic, "tenant_id": "bench",
                               "data_id": f"d-{i}-{n}", "payload": {}})
            n += 1
            try:
                if s is None:
                    s = connect(a.port, timeout=a.timeout)
                s.sendall(request("POST", "/v1/events", host, body))
                status, _ = read_response(s)
                if status == 201:
                    counts[i] += 1
                else:
                    fails[i] += 1
            except OSError:
                fails[i] += 1
                if s is not None:
                    s.close()
                s = None
        if s is not None:
            s.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=poster, args=(i,)) for i in range(a.post_clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.monotonic() - t0
    stop.set()
    t.join()
    open_idle = 0
    for s in idle:
        try:
            s.setblocking(False)
            open_idle += 1 if s.recv(1) else 0
        except BlockingIOError:
            open_idle += 1
        except OSError:
            pass
        s.close()
    slow_open = len(slow)
    for s in slow:
        s.close()
    print(f"healthz_p50_ms={percentile(lat, 50):.1f} healthz_p99_ms={percentile(lat, 99):.1f} "
          f"healthz_max_ms={max(lat) if lat else float('nan'):.1f} healthz_failed={failed} "
          f"posts_per_s={sum(counts) / elapsed:.0f} posts_failed={sum(fails)} "
          f"idle_open={open_idle} slow_open={slow_open}")


def probe(a):
    host = f"127.0.0.1:{a.port}"
    out = {}
    # A POST without Content-Length, not chunked.
    with connect(a.port, timeout=60) as s:
        t0 = time.monotonic()
        s.sendall(f"POST /v1/events HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\r\n".encode())
        try:
            status, _ = read_response(s)
        except OSError:
            status = 0
        out["no_length_status"] = status
        out["no_length_ms"] = f"{(time.monotonic() - t0) * 1000:.0f}"
    # A huge Content-Length: the answer, then how much body the server still takes.
    with connect(a.port, timeout=5) as s:
        s.sendall(f"POST /v1/events HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: 1073741824\r\n\r\n".encode())
        try:
            status, _ = read_response(s)
        except OSError:
            status = 0
        out["huge_status"] = status
        sent, block = 0, b"x" * (1 << 20)
        t0 = time.monotonic()
        try:
            while sent < (64 << 20) and time.monotonic() - t0 < 15:
                sent += s.send(block)
        except OSError:
            pass
        out["huge_body_bytes_accepted"] = sent
    # DNS rebinding: a foreign Host, a read and a retry POST.
    for key, req in (("foreign_host_status", request("GET", "/v1/events", "attacker.example")),
                     ("foreign_retry_status", request("POST", "/v1/events/none/retry", "attacker.example", "{}"))):
        with connect(a.port, timeout=10) as s:
            s.sendall(req)
            try:
                out[key], _ = read_response(s)
            except OSError:
                out[key] = 0
    print(" ".join(f"{k}={v}" for k, v in out.items()))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--port", type=int, required=True)
    m.add_argument("--idle", type=int, default=0)
    m.add_argument("--slow", type=int, default=0)
    m.add_argument("--trickle-ms", type=int, default=1000)
    m.add_argument("--healthz", type=int, default=200)
    m.add_argument("--post-seconds", type=float, default=5)
    m.add_argument("--post-clients", type=int, default=4)
    m.add_argument("--timeout", type=float, default=60)
    m.add_argument("--topic", default="E2E_1")
    m.add_argument("--prefix", default="slow")
    pr = sub.add_parser("probe")
    pr.add_argument("--port", type=int, required=True)
    a = p.parse_args()
    if a.cmd == "measure":
        measure(a)
    else:
        probe(a)


if __name__ == "__main__":
    sys.exit(main())
