"""A bounded load test of `dlcourse serve` on loopback (notebook 12): throughput and latency
for 1 and 16 concurrent clients, on each engine (onnxruntime, dlcourse), with dynamic batching
on and off, in one run and one table.

A fixed number of POST /predict requests per row from concurrent clients (threads, each with its
own keep-alive connection); it stops by itself when they are done. Prints the table (errors:
there must be none; p50 / p99 latency; throughput; requests answered per model call, which
batching raises), and each server's resident memory after a warm-up and at the end (it must
stay flat: no request leaks memory). The machinery is dlcourse/serve/loadtest.py, which lesson
12 runs too.

    python benchmarks/serve_load.py                      # trains a small MLP, serves it, loads it
    python benchmarks/serve_load.py --model cnn --requests 1000 --batch 1
    python benchmarks/serve_load.py --model-path cnn.npz --clients 1,4,16 --windows 0,2,5

tests/test_serve.py runs :func:`run_load` with a few hundred requests.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from dlcourse.serve.loadtest import (format_table, free_port, health, load_table,  # noqa: F401
                                     rss_mib, run_load, start_server, stop_server)


def digits_model(path, model: str = "mlp") -> Path:
    """A small MLP (or CNN) trained briefly on the bundled digits, saved at ``path``."""
    import dlcourse as dl
    (X, y), _, _ = dl.data.load_digits(flat=model == "mlp")
    net = (dl.MLP([64, 64, 10], seed=0) if model == "mlp" else
           dl.CNN(1, (8, 8), 10, channels=(8, 16), seed=0))
    dl.fit(net, dl.SoftmaxCrossEntropy(), dl.Adam(net, lr=3e-3), X, y, epochs=15,
           batch_size=32, progress=False, seed=0)
    return dl.save(net, path)


def _list(cast):
    return lambda text: [cast(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400, help="per row (default: 400)")
    parser.add_argument("--clients", type=_list(int), default=[1, 16], help="default: 1,16")
    parser.add_argument("--batch", type=int, default=1, help="samples per request (default: 1)")
    parser.add_argument("--engines", type=_list(str), default=["onnxruntime", "dlcourse"])
    parser.add_argument("--windows", type=_list(float), default=[0, 2],
                        help="--batch-window-ms values, 0 = no batching (default: 0,2)")
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp",
                        help="the digits model trained for the test (default: mlp)")
    parser.add_argument("--model-path", help="serve this saved model instead (digits-shaped)")
    args = parser.parse_args(argv)
    import dlcourse as dl
    with tempfile.TemporaryDirectory() as folder:
        model_path = args.model_path or digits_model(Path(folder) / "model.npz", args.model)
        X = dl.data.load_digits("test")[0][:args.batch]        # flat: any digits model takes it
        body = json.dumps({"inputs": X.tolist()}).encode()
        rows = load_table(model_path, body, requests=args.requests, clients=args.clients,
                          engines=args.engines, windows_ms=args.windows)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"dlcourse serve on loopback, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPU cores "
          f"(clients on the same cores), load average {load:.2f}: {args.requests} requests of "
          f"batch {args.batch} per row, model {args.model_path or args.model}")
    print(format_table(rows))
    grew = []
    for r in rows[::len(args.clients)]:
        before, after = r["memory_mib"]
        print(f"server memory, {r['engine']}, batching {r['window_ms']:g} ms: {before:.1f} -> "
              f"{after:.1f} MiB")
        grew.append(after - before)
    return 1 if any(r["errors"] for r in rows) or max(grew) > 20 else 0


if __name__ == "__main__":
    sys.exit(main())
