"""One training step (forward, loss, backward, SGD update; float32) of dlcourse against the
same model in PyTorch, on the CPU, with the same number of threads, in one run.

    python benchmarks/cpu_step.py [--threads N] [--repeat 30] [--json OUT.json]

Targets (issue 2): MLP 784-512-512-10 at batch 256 within 1.3x of PyTorch; the CNN
conv(1→16)-ReLU-pool-conv(16→32)-ReLU-pool-Linear(32·7·7→10) on 1×28×28 at batch 64 within
2.0x. PyTorch is optional: without it only dlcourse's times are printed.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import dlcourse as dl  # noqa: E402

TARGETS = {"mlp": 1.3, "cnn": 2.0}


def median_time(step, repeat, warmup=5):
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def dlcourse_step(kind, batch):
    rng = np.random.default_rng(0)
    if kind == "mlp":
        model = dl.MLP([784, 512, 512, 10], seed=0)
        x = rng.standard_normal((batch, 784), dtype=np.float32)
    else:
        model = dl.CNN(1, (28, 28), 10, seed=0)
        x = rng.standard_normal((batch, 1, 28, 28), dtype=np.float32)
    y = rng.integers(0, 10, batch)
    loss = dl.SoftmaxCrossEntropy()
    opt = dl.SGD(model, lr=0.01, momentum=0.9)

    def step():
        loss.forward(model.forward(x), y)
        model.backward(loss.backward(), input_grad=False)   # as dl.fit does: no dL/dx needed
        opt.step()
    return step


def torch_step(kind, batch):
    import torch
    from torch import nn
    torch.manual_seed(0)
    if kind == "mlp":
        model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 10))
        x = torch.randn(batch, 784)
    else:
        model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
        x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    lossf = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        loss.item()   # dlcourse returns the loss as a float too
    return step


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=30)
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
          f"NumPy {np.__version__}, PyTorch {torch_version}")
    results = {"date": date.today().isoformat(), "threads": args.threads, "numpy": np.__version__,
               "torch": torch_version, "cases": {}}
    ok = True
    for kind, batch in (("mlp", 256), ("cnn", 64)):
        t_dl = median_time(dlcourse_step(kind, batch), args.repeat)
        line = f"{kind.upper():4s} batch {batch:4d}: dlcourse {t_dl * 1e3:7.2f} ms"
        case = {"batch": batch, "dlcourse_ms": t_dl * 1e3}
        if torch is not None:
            t_pt = median_time(torch_step(kind, batch), args.repeat)
            ratio = t_dl / t_pt
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
