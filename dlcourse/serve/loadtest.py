"""A bounded load test of ``dlcourse serve`` on loopback: throughput and latency for each engine,
with dynamic batching on and off, for one client and for many.

Introduced in notebook ``12_checkpoint_to_service``; ``benchmarks/serve_load.py`` is its command
line, and ``tests/test_serve.py`` runs :func:`run_load`. Every server is a real ``dlcourse serve``
process on a free port; every client a thread with its own keep-alive HTTP connection sending
a fixed number of requests, so a run always ends.

    rows = load_table("cnn.npz", body, requests=200)    # engines x batching x clients
    print(format_table(rows))

The clients run on the same machine as the server and share its cores: on a small machine
they take part of the time they measure, so compare rows of one table, not across machines.
"""
from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

__all__ = ["free_port", "rss_mib", "start_server", "stop_server", "health", "run_load",
           "load_table", "format_table"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    """Resident memory of a process, in MiB (Linux /proc; NaN elsewhere)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def health(port: int) -> dict:
    """What ``GET /health`` of the service on ``port`` answers."""
    return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read())


def start_server(model_path, port: int, *extra, timeout: float = 90.0):
    """``dlcourse serve MODEL --port PORT [extra...]`` in its own process group; returns the
    Popen once GET /health answers (or raises with the server's output)."""
    proc = subprocess.Popen([sys.executable, "-m", "dlcourse", "serve", str(model_path),
                             "--port", str(port), *map(str, extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"dlcourse serve exited with {proc.returncode}:\n"
                               f"{proc.stdout.read()}")
        try:
            health(port)
            return proc
        except OSError:
            if time.monotonic() > deadline:
                stop_server(proc)
                raise RuntimeError(f"dlcourse serve did not answer within {timeout:.0f} s")
            time.sleep(0.2)


def stop_server(proc) -> str:
    """Stop a server from :func:`start_server`; returns what it printed."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    return proc.stdout.read() if proc.stdout else ""


def run_load(port: int, body: bytes, requests: int = 300, clients: int = 4) -> dict:
    """Send ``requests`` POST /predict with ``body`` from ``clients`` threads; returns
    ``{"requests", "errors", "p50_ms", "p99_ms", "seconds", "per_second"}``."""
    latencies, errors, lock = [], [], threading.Lock()
    share = [requests // clients + (i < requests % clients) for i in range(clients)]
    ready = threading.Barrier(clients + 1)       # the clock starts when every client is ready

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        ready.wait()
        try:
            for _ in range(n):
                start = time.perf_counter()
                try:
                    conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
                    response = conn.getresponse()
                    data = response.read()
                    ok = response.status == 200 and "classes" in json.loads(data)
                except (OSError, http.client.HTTPException, ValueError) as err:
                    ok, data = False, repr(err).encode()
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                elapsed = time.perf_counter() - start
                with lock:
                    latencies.append(elapsed)
                    if not ok:
                        errors.append(data[:200])
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in share]
    for t in threads:
        t.start()
    ready.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"requests": len(latencies), "errors": errors, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "seconds": seconds,
            "per_second": len(latencies) / seconds}


def load_table(model_path, body: bytes, *, requests: int = 400, clients=(1, 16),
               engines=("onnxruntime", "dlcourse"), windows_ms=(0, 2), warmup: int = 50) -> list:
    """One row per (engine, batch window, clients): a server per engine and window, a warm-up
    of ``warmup`` requests, then ``requests`` requests from each number of ``clients``.

    Each row: ``engine``, ``window_ms``, ``clients``, what :func:`run_load` returns, and
    ``per_call`` (requests answered per model call: 1 without batching) and
    ``memory_mib`` (the server's resident memory after the warm-up and at the end).
    """
    rows = []
    for engine in engines:
        for window in windows_ms:
            port = free_port()
            proc = start_server(model_path, port, "--engine", engine, "--batch-window-ms", window)
            try:
                run_load(port, body, requests=warmup, clients=max(clients))
                before, mine = rss_mib(proc.pid), []
                for n in clients:
                    served = health(port)["served"]
                    result = run_load(port, body, requests=requests, clients=n)
                    now = health(port)["served"]
                    calls = max(now["model_calls"] - served["model_calls"], 1)
                    mine.append({"engine": engine, "window_ms": window, "clients": n, **result,
                                 "per_call": (now["requests"] - served["requests"]) / calls})
                after = rss_mib(proc.pid)
            finally:
                stop_server(proc)
            for row in mine:
                row["memory_mib"] = (before, after)
            rows += mine
    return rows


def format_table(rows) -> str:
    """The rows of :func:`load_table` as a text table."""
    lines = [f"{'engine':<12} {'batching':>9} {'clients':>7} {'requests/s':>10} {'p50 ms':>7} "
             f"{'p99 ms':>7} {'requests/call':>13} {'errors':>6}"]
    for r in rows:
        batching = f"{r['window_ms']:g} ms" if r["window_ms"] else "off"
        lines.append(f"{r['engine']:<12} {batching:>9} {r['clients']:>7} {r['per_second']:>10.0f} "
                     f"{r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} {r['per_call']:>13.1f} "
                     f"{len(r['errors']):>6}")
    return "\n".join(lines)
