"""One training step (forward, loss, backward, SGD update; float32) of dlcourse against the
same model in PyTorch, on the CPU, with the same number of threads, in one run.

    python benchmarks/cpu_step.py [--threads N] [--rounds 8] [--variant default|fused] [--json OUT.json]

The two libraries are timed in alternating blocks of steps, so that a busy spell of a shared
machine slows both alike; the ratio is the median of the per-round ratios.

Targets (issue 2): MLP 784-512-512-10 at batch 256 within 1.3x of PyTorch; the CNN
conv(1→16)-ReLU-pool-conv(16→32)-ReLU-pool-Linear(32·7·7→10) on 1×28×28 at batch 64 within
2.0x. PyTorch is optional: without it only dlcourse's times are printed. ``--variant fused``
times ``dl.fuse(model)`` (bias + ReLU in place, one pass fewer) instead of the model as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

from steps import VARIANTS, dlcourse_step, torch_step   # benchmarks/steps.py

TARGETS = {"mlp": 1.3, "cnn": 2.0}


def block_time(step, n, settle=0.5, warmup=3):
    """Median seconds of n consecutive calls of step, after ``settle`` idle seconds (the other
    library's worker threads, OpenBLAS or OpenMP, spin a while after their last call and
    would otherwise steal the cores) and ``warmup`` untimed calls (caches are cold again)."""
    time.sleep(settle)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def compare(step_dl, step_pt, rounds, block=15, warmup=5):
    """Time the two steps in alternating blocks, ``rounds`` times, so that a slow spell of a
    shared machine hits both alike. Returns (dlcourse s, PyTorch s, ratio): medians over the
    rounds, the ratio taken within each round."""
    for _ in range(warmup):
        step_dl()
        if step_pt is not None:
            step_pt()
    t_dl, t_pt, ratios = [], [], []
    for _ in range(rounds):
        t_dl.append(block_time(step_dl, block))
        if step_pt is not None:
            t_pt.append(block_time(step_pt, block))
            ratios.append(t_dl[-1] / t_pt[-1])
    med = statistics.median
    return med(t_dl), (med(t_pt) if t_pt else None), (med(ratios) if ratios else None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=8,
                    help="alternating blocks of 15 steps of each library (default 8)")
    ap.add_argument("--variant", default="default", choices=[v for v in VARIANTS if v != "plain"],
                    help="dlcourse as it is (default) or dl.fuse'd (fused)")
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)

    from threadpoolctl import threadpool_limits
    threadpool_limits(args.threads)
    try:
        import torch
        torch.set_num_threads(args.threads)
        torch_version = torch.__version__
    except ImportError:
        torch = None
        torch_version = None
        print("PyTorch is not installed: printing dlcourse's times only "
              "(pip install torch==2.13.0 for the comparison).")

    print(f"CPU: {platform.processor() or platform.machine()}, {args.threads} threads, "
          f"NumPy {np.__version__}, PyTorch {torch_version}, dlcourse variant: {args.variant}")
    results = {"date": date.today().isoformat(), "threads": args.threads, "numpy": np.__version__,
               "variant": args.variant,
               "torch": torch_version, "cases": {}}
    ok = True
    for kind, batch in (("mlp", 256), ("cnn", 64)):
        t_dl, t_pt, ratio = compare(dlcourse_step(kind, batch, variant=args.variant),
                                    torch_step(kind, batch) if torch is not None else None,
                                    args.rounds)
        line = f"{kind.upper():4s} batch {batch:4d}: dlcourse {t_dl * 1e3:7.2f} ms"
        case = {"batch": batch, "dlcourse_ms": t_dl * 1e3}
        if torch is not None:
            met = ratio <= TARGETS[kind]
            ok &= met
            line += (f"  PyTorch {t_pt * 1e3:7.2f} ms  ratio {ratio:4.2f}x  "
                     f"(target <= {TARGETS[kind]}x: {'met' if met else 'NOT met'})")
            case.update(torch_ms=t_pt * 1e3, ratio=ratio, target=TARGETS[kind])
        print(line)
        results["cases"][kind] = case
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
