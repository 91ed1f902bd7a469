"""A bounded load test of `dlcourse serve` on loopback (notebook 12).

A fixed number of POST /predict requests from several concurrent clients (threads, each with
its own keep-alive connection); it stops by itself when they are done. Prints the errors (there
must be none), the latency percentiles p50 / p99, the throughput, and the server's resident
memory after a warm-up and at the end (it must stay flat: no request leaks memory).

    python benchmarks/serve_load.py                     # trains a small MLP, serves it, loads it
    python benchmarks/serve_load.py --requests 5000 --clients 8 --batch 16

tests/test_serve.py runs :func:`run_load` with a few hundred requests.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np


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


def start_server(model_path, port: int, *extra, timeout: float = 90.0):
    """``dlcourse serve MODEL --port PORT`` in its own process group; returns the Popen once
    GET /health answers (or raises with the server's output)."""
    proc = subprocess.Popen([sys.executable, "-m", "dlcourse", "serve", str(model_path),
                             "--port", str(port), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"dlcourse serve exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
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

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
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
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    ms = np.array(latencies) * 1000
    return {"requests": len(latencies), "errors": errors, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "seconds": seconds,
            "per_second": len(latencies) / seconds}


def digits_model(path) -> Path:
    """A small MLP trained briefly on the bundled digits, saved at ``path``."""
    import dlcourse as dl
    (X, y), _, _ = dl.data.load_digits()
    model = dl.MLP([64, 64, 10], seed=0)
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=3e-3), X, y, epochs=15,
           batch_size=32, progress=False, seed=0)
    return dl.save(model, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1, help="samples per request")
    args = parser.parse_args(argv)
    import dlcourse as dl
    with tempfile.TemporaryDirectory() as folder:
        model_path = digits_model(Path(folder) / "mlp.npz")
        X = dl.data.load_digits("test")[0][:args.batch]
        body = json.dumps({"inputs": X.tolist()}).encode()
        port = free_port()
        server = start_server(model_path, port)
        try:
            run_load(port, body, requests=min(200, args.requests), clients=args.clients)  # warm-up
            before = rss_mib(server.pid)
            result = run_load(port, body, requests=args.requests, clients=args.clients)
            after = rss_mib(server.pid)
        finally:
            stop_server(server)
    print(f"dlcourse serve on loopback, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPU cores: "
          f"{result['requests']} requests of batch {args.batch} from {args.clients} clients in "
          f"{result['seconds']:.1f} s ({result['per_second']:.0f}/s); errors: "
          f"{len(result['errors'])}; latency p50 {result['p50_ms']:.1f} ms, p99 "
          f"{result['p99_ms']:.1f} ms; server memory {before:.1f} -> {after:.1f} MiB")
    return 1 if result["errors"] or after - before > 20 else 0


if __name__ == "__main__":
    sys.exit(main())
