#!/usr/bin/env python3
"""scripts/harden_check.py: the hardening issue's acceptance runs against a
real `inferd serve` (stories260K on the CPU backend, loopback only), printed
as a table.

  python3 scripts/harden_check.py --inferd build/cli/inferd [--fixtures ../shared/fixtures]
      [--slow 10000] [--settle 60]

1. Slow connections: --slow connections from 127.0.0.2, each sending an
   unfinished request head; meanwhile /health and a completion from
   127.0.0.1 must answer within 1 s.
2. Large bodies: four 8 MB /tokenize requests at once; /health is polled
   from another client throughout, its p99 must stay under 100 ms.
3. Memory: the server's RSS idle, right after the large bodies, and
   --settle seconds later (must be within 2x of idle).
Exit status 0 when every row passes.
"""
import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import urllib.request


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(base, path, body=None, timeout=30):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method="POST" if data is not None else "GET",
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        code = e.code
    return code, time.perf_counter() - t


def slow_connections(port, n, src="127.0.0.2"):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(True)
        try:
            s.bind((src, 0))
            s.connect(("127.0.0.1", port))
            s.send(b"GET /health HTTP/1.1\r\nHo")
        except OSError:
            s.close()
            continue
        socks.append(s)
    return socks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferd", required=True)
    ap.add_argument("--fixtures", default=os.environ.get("INFERD_FIXTURES", "../shared/fixtures"))
    ap.add_argument("--slow", type=int, default=10000)
    ap.add_argument("--settle", type=float, default=60.0)
    ap.add_argument("--big-mb", type=int, default=8)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, a.slow + 1024)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    if want < a.slow + 64:
        print(f"note: file limit {hard} caps the slow connections", file=sys.stderr)
    port = free_port()
    model = os.path.join(a.fixtures, "models", "stories260K")
    log = open("/tmp/harden_check_server.log", "w")
    srv = subprocess.Popen([a.inferd, "serve", "--model", model, "--device", "cpu", "--threads", "2",
                            "--port", str(port), "--host", "127.0.0.1", "--log-level", "warn"],
                           stdout=log, stderr=subprocess.STDOUT, preexec_fn=lambda: resource.setrlimit(
                               resource.RLIMIT_NOFILE, (want, hard)))
    base = f"http://127.0.0.1:{port}"
    rows, ok_all = [], True

    def row(name, value, ok):
        nonlocal ok_all
        ok_all &= ok
        rows.append((name, value, "PASS" if ok else "FAIL"))
        print(f"{name}: {value} {'PASS' if ok else 'FAIL'}", flush=True)

    try:
        for _ in range(300):
            try:
                if http(base, "/health", timeout=1)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            sys.exit("server did not start (/tmp/harden_check_server.log)")
        for _ in range(20):  # warm the allocator before the idle figure
            http(base, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 16})
        time.sleep(1.0)
        idle = rss_mb(srv.pid)

        # 1. slow connections from another address
        t = time.perf_counter()
        socks = slow_connections(port, a.slow)
        t_open = time.perf_counter() - t
        code_h, t_h = http(base, "/health", timeout=10)
        code_c, t_c = http(base, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8}, timeout=10)
        row(f"{len(socks)} slow connections from 127.0.0.2 (opened in {t_open:.1f} s): /health from 127.0.0.1",
            f"{code_h} in {t_h * 1e3:.0f} ms", code_h == 200 and t_h < 1.0)
        row("  ... and a completion from 127.0.0.1", f"{code_c} in {t_c * 1e3:.0f} ms", code_c == 200 and t_c < 1.0)
        for s in socks:
            s.close()
        time.sleep(1.0)

        # 2. four large /tokenize bodies while /health is polled
        big = json.dumps({"prompt": "Once upon a time there was a big dog. " * (a.big_mb * 1024 * 1024 // 38)})
        big = big.encode()
        lat, stop = [], threading.Event()

        def poll():
            while not stop.is_set():
                try:
                    code, dt = http(base, "/health", timeout=30)
                    lat.append(dt if code == 200 else 99.0)
                except OSError:
                    lat.append(99.0)
                time.sleep(0.01)

        codes = []

        def big_one():
            try:
                codes.append(http(base, "/tokenize", big, timeout=120)[0])
            except OSError as e:
                codes.append(str(e))

        p = threading.Thread(target=poll)
        p.start()
        t = time.perf_counter()
        ths = [threading.Thread(target=big_one) for _ in range(4)]
        for th in ths:
            th.start()
        peak = idle
        while any(th.is_alive() for th in ths):
            peak = max(peak, rss_mb(srv.pid))
            time.sleep(0.05)
        t_big = time.perf_counter() - t
        time.sleep(0.5)
        stop.set()
        p.join()
        lat.sort()
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else 99.0
        p50 = lat[len(lat) // 2] if lat else 99.0
        row(f"four {len(big) / 1e6:.1f} MB /tokenize (answers {codes}, {t_big:.1f} s): /health p50 / p99 "
            f"over {len(lat)} polls", f"{p50 * 1e3:.1f} / {p99 * 1e3:.1f} ms", p99 < 0.1)

        # 3. memory
        after = rss_mb(srv.pid)
        time.sleep(a.settle)
        settled = rss_mb(srv.pid)
        row(f"RSS MiB: idle / peak / right after / {a.settle:.0f} s later",
            f"{idle:.1f} / {peak:.1f} / {after:.1f} / {settled:.1f}", settled <= 2 * idle)
        code, _ = http(base, "/health")
        row("server still serving", str(code), code == 200)
    finally:
        srv.terminate()
        try:
            srv.wait(30)
        except subprocess.TimeoutExpired:
            srv.kill()
    print("\n| check | measured | result |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")
    sys.exit(0 if ok_all else 1)


if __name__ == "__main__":
    main()
