"""Smaller and faster models (issue 19): int8 post-training quantization, magnitude pruning and
mixed-precision training of the digits MLP and CNN, against float32, seeded, in one run.

    python benchmarks/compression.py [--threads 2] [--seeds 0 1 2] [--models mlp cnn] [--json OUT.json]

Targets (each judged on the mean over the seeds; the test set has 270 digits, so one digit is
0.37 points):

* int8 PTQ (per channel): test accuracy within 0.5 points of float32; the checkpoint at most
  30 % of the float32 one's size;
* 80 % global magnitude pruning, then fine-tuning: at most 1 point lost (90 % reported too);
* bf16 and fp16 (with dynamic loss scaling) training from the same seed: final test accuracy
  within 0.5 points of float32.

Exit status 0 when every target is met, 1 otherwise. Everything runs on the CPU (NumPy); the
low formats are emulated exactly by rounding (``dl.autocast``), so this measures accuracy, not
speed.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import dlcourse as dl

MODELS = {
    "mlp": dict(flat=True, build=lambda seed: dl.MLP([64, 128, 10], seed=seed), epochs=20),
    "cnn": dict(flat=False, build=lambda seed: dl.CNN(image_size=8, channels=(8, 16), seed=seed),
                epochs=10),
}
FINE_TUNE_EPOCHS = 10


def train(kind, seed, precision="fp32", model=None, epochs=None, lr=3e-3):
    spec = MODELS[kind]
    (X, y) = dl.data.load_digits("train", flat=spec["flat"])
    model = spec["build"](seed) if model is None else model
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=lr), X, y,
           epochs=epochs or spec["epochs"], batch_size=64, seed=seed, progress=False,
           precision=precision)
    return model


def accuracy(kind, model) -> float:
    Xt, yt = dl.data.load_digits("test", flat=MODELS[kind]["flat"])
    return 100.0 * dl.evaluate(model, Xt, yt)["accuracy"]


def file_size(model) -> int:
    with tempfile.TemporaryDirectory() as folder:
        return dl.save(model, Path(folder) / "m.npz").stat().st_size


def array_bytes(model) -> int:
    """The bytes of the arrays themselves (a file adds a header per array and the JSON)."""
    return sum(a.nbytes for a in model.state_dict().values())


def run(kind, seed) -> dict:
    """Every figure for one model and one seed."""
    X, _ = dl.data.load_digits("train", flat=MODELS[kind]["flat"])
    r = {}
    t = time.perf_counter()
    base = train(kind, seed)
    r["fp32"] = accuracy(kind, base)
    r["fp32_bytes"], r["fp32_array_bytes"] = file_size(base), array_bytes(base)
    for per_channel, name in ((True, "int8"), (False, "int8_per_tensor")):
        q = dl.quantize(base, X[:512], per_channel=per_channel)
        r[name] = accuracy(kind, q)
        r[name + "_bytes"], r[name + "_array_bytes"] = file_size(q), array_bytes(q)
    for sparsity in (0.8, 0.9):
        pruned = MODELS[kind]["build"](seed)                       # a copy of base
        pruned.load_state_dict(base.state_dict())
        dl.prune(pruned, sparsity, scope="global")
        r[f"pruned{int(sparsity * 100)}"] = accuracy(kind, pruned)
        train(kind, seed, model=pruned, epochs=FINE_TUNE_EPOCHS, lr=1e-3)
        r[f"pruned{int(sparsity * 100)}_tuned"] = accuracy(kind, pruned)
        r[f"pruned{int(sparsity * 100)}_sparsity"] = dl.sparsity(pruned)["total"]
    for fmt in ("bf16", "fp16"):
        r[fmt] = accuracy(kind, train(kind, seed, precision=fmt))
    r["seconds"] = time.perf_counter() - t
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits
    threadpool_limits(args.threads)

    results, ok = {}, True
    for kind in args.models:
        runs = [run(kind, seed) for seed in args.seeds]
        mean = {k: statistics.fmean(r[k] for r in runs) for k in runs[0]}
        results[kind] = {"runs": runs, "mean": mean}
        checks = [
            ("int8 PTQ (per channel) vs fp32", mean["int8"] - mean["fp32"], -0.5, "points"),
            ("int8 checkpoint / fp32 checkpoint", 100 * mean["int8_bytes"] / mean["fp32_bytes"], 30, "%"),
            ("80% pruned + fine-tuned vs fp32", mean["pruned80_tuned"] - mean["fp32"], -1.0, "points"),
            ("bf16 training vs fp32", mean["bf16"] - mean["fp32"], -0.5, "points"),
            ("fp16 + loss scaling vs fp32", mean["fp16"] - mean["fp32"], -0.5, "points"),
        ]
        print(f"\n== digits {kind.upper()}, seeds {args.seeds}, {args.threads} threads "
              f"({mean['seconds']:.1f} s per seed) ==")
        print("test accuracy (%), mean over seeds [per seed]:")
        for k in ("fp32", "int8", "int8_per_tensor", "pruned80", "pruned80_tuned", "pruned90",
                  "pruned90_tuned", "bf16", "fp16"):
            print(f"  {k:16s} {mean[k]:6.2f}  [{', '.join(f'{r[k]:.2f}' for r in runs)}]")
        print(f"  checkpoint bytes: fp32 {mean['fp32_bytes']:.0f}, int8 {mean['int8_bytes']:.0f}, "
              f"int8 per tensor {mean['int8_per_tensor_bytes']:.0f}; the arrays alone: fp32 "
              f"{mean['fp32_array_bytes']:.0f}, int8 {mean['int8_array_bytes']:.0f} "
              f"({100 * mean['int8_array_bytes'] / mean['fp32_array_bytes']:.1f} %)")
        for name, value, bound, unit in checks:
            met = value <= bound if unit == "%" else value >= bound
            ok &= met
            sign = "<=" if unit == "%" else ">="
            print(f"  {'MET ' if met else 'MISS'} {name}: {value:+.2f} {unit} (target {sign} {bound:+g})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
