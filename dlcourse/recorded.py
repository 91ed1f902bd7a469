"""GPU results recorded by ``benchmarks/gpu_suite.py``, read back for the lessons that show them
(00, 05, 08a-08d and 10) on any machine, with or without a GPU.

The suite writes one ``benchmarks/results/<device>.json`` per GPU it ran on, naming the device
under ``environment.device`` and the date under ``date``. Each figure a lesson shows from these
files is printed with that device and date. Nothing here makes a figure up: with no file
recorded there is nothing to show, and the lessons say so.

    for rec in dl.recorded.gpu_results():
        print(rec.title)                               # "h100.json: measured on ... (2026-...)"
        print(dl.recorded.lookup(rec.results, "matmul", "cublas_fp32", "tflops"))
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

__all__ = ["Recorded", "results_folder", "gpu_results", "lookup", "PUBLISHED_SGEMM",
           "matmul_ladder", "kernel_report", "precision_report"]


class Recorded(NamedTuple):
    """One results file: its name, the device it was measured on, and what it holds."""
    file: str
    device: str
    results: dict

    @property
    def date(self) -> str:
        """The day of the run (YYYY-MM-DD), or "date not recorded"."""
        date = self.results.get("date")
        return str(date)[:10] if date else "date not recorded"

    @property
    def title(self) -> str:
        """One line naming the file, the device, the date and what kind of run it was."""
        notes = [self.date]
        if self.results.get("quick"):
            notes.append("a --quick run")
        if self.results.get("complete") is False:
            notes.append("partial: the run stopped before its last section")
        return f"{self.file}: measured on {self.device} ({', '.join(notes)})"


def results_folder() -> Path:
    """``benchmarks/results`` of this checkout: beside the ``dlcourse`` package, or above or in
    the current folder (a notebook runs in ``notebooks/``)."""
    for base in (Path(__file__).resolve().parents[1], Path.cwd().parent, Path.cwd()):
        if (base / "benchmarks").is_dir():
            return base / "benchmarks" / "results"
    return Path("..") / "benchmarks" / "results"


def gpu_results(folder: str | Path | None = None,
                say: Callable[[str], Any] | None = print) -> list[Recorded]:
    """Every readable results file in ``folder`` (default: :func:`results_folder`) that names
    the device it was measured on, sorted by file name.

    A file that is not JSON, or does not say which device it comes from, is skipped, and
    ``say`` (``print`` by default; ``None`` for silence) is told why: a lesson must not fail
    because of one bad file, and a figure without its device is never shown.
    """
    folder = results_folder() if folder is None else Path(folder)
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            _tell(say, f"skipping {path.name}: not readable JSON ({err})")
            continue
        device = lookup(results, "environment", "device")
        if not isinstance(device, str) or not device.strip():
            _tell(say, f"skipping {path.name}: it does not say which device it was measured on "
                       "(environment.device)")
            continue
        found.append(Recorded(path.name, device.strip(), results))
    return found


def lookup(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or ``None`` where a level is missing or is not a dictionary: a file
    from an older suite, or a section that stopped early, lacks some figures."""
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _tell(say, message):
    if say is not None:
        say(message)


# --------------------------------------------------------------------------------------
# What the GPU lessons (08a-08d) read from a results file, and the one published figure they
# show when nothing is recorded.

PUBLISHED_SGEMM = {
    "source": "S. Boehm, \"How to optimize a CUDA matmul kernel for cuBLAS-like performance\" "
              "(siboehm.com, 2022)",
    "device": "NVIDIA A6000",
    "problem": "FP32 C = A @ B at 4096³",
    # percent of cuBLAS, as he reports them: his kernels, his GPU, his timings
    "percent_of_cublas": {"naive": 1.3, "coalesced": 8.5, "shared-memory tiled": 12.8,
                          "1-D block tiling": 36.5, "2-D block tiling": 68.7,
                          "vectorized": 78.4, "warp tiling": 93.7, "cuBLAS": 100.0},
}
"""Someone else's measurement on another GPU, never dlcourse's: show it labelled as such."""


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def matmul_ladder(results: dict) -> tuple[dict, Any]:
    """``({rung: GFLOP/s}, n)`` from a results file's ``matmul`` section: the four rungs, the
    fastest other build of regblock (the suite times each as ``"regblock, BK=..."``), cuBLAS
    FP32 and TF32 (labelled ``"cuBLAS FP32"``, ``"cuBLAS TF32"``), at size ``n``³. Entries
    without a number are left out; an empty dictionary means no ladder was recorded. (Lesson
    08b plots it; lesson 08c reads the same section with :func:`lookup`: every build of regblock
    with and without ``AVOID_CONFLICTS``, and cuBLAS FP32 against TF32.)"""
    mm = lookup(results, "matmul") or {}
    kernels = mm.get("kernels") if isinstance(mm.get("kernels"), dict) else {}
    ladder = {name: 1e3 * k["tflops"] for name, k in kernels.items()
              if isinstance(k, dict) and _number(k.get("tflops"))}
    tuned = {name: ladder.pop(name) for name in list(ladder) if name.startswith("regblock,")}
    if tuned:
        best = max(tuned, key=tuned.get)
        ladder[best] = tuned[best]
    for key, label in (("cublas_fp32", "cuBLAS FP32"), ("cublas_tf32", "cuBLAS TF32")):
        tflops = lookup(mm, key, "tflops")
        if _number(tflops):
            ladder[label] = 1e3 * tflops
    return ladder, mm.get("n")


def kernel_report(results: dict) -> list[str]:
    """Lines that say what a results file recorded for the fused kernels, the training steps
    (without our kernels, with them, ``dl.fuse``'d, PyTorch), the launch overhead and the
    CUDA graph: the figures of lesson ``08d_fusion_and_graphs``. Missing figures are left out."""
    lines = []
    kernels = lookup(results, "elementwise", "kernels") or {}
    for kernel, entry in kernels.items():
        # gpu_suite.py stores fused_speedup = unfused time / fused time
        if isinstance(entry, dict) and "(fused)" in kernel and _number(entry.get("fused_speedup")):
            lines.append(f"{kernel:34s} {entry['fused_speedup']:.2f}x faster than unfused")
    labels = (("dlcourse_plain", "no kernels of ours"), ("dlcourse", "dlcourse"),
              ("dlcourse_fused", "dl.fuse'd"), ("torch", "PyTorch"))
    for case, entry in (lookup(results, "training", "cases") or {}).items():
        times = [f"{label} {lookup(entry, key, 'median_ms'):.3f} ms" for key, label in labels
                 if _number(lookup(entry, key, "median_ms"))]
        if times:
            lines.append(f"training step {case:10s} " + ", ".join(times))
    us = lookup(results, "training", "launch_overhead", "us_per_launch")
    if _number(us):
        lines.append(f"launch overhead: {us:.1f} µs of host time per tiny kernel launch")
    graph = lookup(results, "training", "cuda_graph") or {}
    replay = lookup(graph, "graph", "median_ms")
    same = lookup(graph, "eager_kernel_products", "median_ms")   # the captured step, run eagerly
    cublas = lookup(graph, "eager_fused_loss", "median_ms")
    if _number(same) and _number(replay):
        lines.append(f"MLP step batch {graph.get('batch')}, products on matmul_regblock: eager "
                     f"{same:.3f} ms, as a CUDA graph {replay:.3f} ms ({same / replay:.2f}x)"
                     + (f"; eager with cuBLAS {cublas:.3f} ms" if _number(cublas) else ""))
    elif _number(cublas) and _number(replay):   # files from before the products moved
        lines.append(f"MLP step batch {graph.get('batch')}: eager {cublas:.3f} ms, as a CUDA graph "
                     f"{replay:.3f} ms ({cublas / replay:.2f}x)")
    elif isinstance(graph, dict) and graph.get("error"):
        lines.append(f"CUDA graph: not measured ({graph['error']})")
    return lines


# --------------------------------------------------------------------------------------
# What lesson 10 (number formats and mixed precision) reads: the suite's "precision" section.

_PRECISION_MATMULS = (("cublas_fp32", "cuBLAS FP32"), ("cublas_tf32", "cuBLAS TF32"),
                      ("cublas_fp16", "cuBLAS FP16"), ("cublas_bf16", "cuBLAS BF16"),
                      ("torch_fp32", "PyTorch FP32"), ("torch_fp16", "PyTorch FP16"),
                      ("torch_bf16", "PyTorch BF16"))


def precision_report(results: dict) -> list[str]:
    """Lines that say what a results file recorded in its ``precision`` section: the matrix
    product in each format (TFLOP/s, and the speed-up over FP32 of the same library), what was
    not measured and why, and dlcourse's training step in fp32, bf16 and fp16, which dlcourse
    emulates (the speed-up there is the emulation's, usually below 1). Missing figures are left
    out; no section, no lines."""
    lines = []
    mm = lookup(results, "precision", "matmul") or {}
    if mm.get("n"):
        lines.append(f"matmul {mm['n']}x{mm['n']}x{mm['n']}:")
    for key, label in _PRECISION_MATMULS:
        entry = mm.get(key)
        if not isinstance(entry, dict):
            continue
        if _number(entry.get("tflops")):
            speedup = entry.get("speedup_over_fp32")
            lines.append(f"  {label:13s} {entry['tflops']:8.1f} TFLOP/s"
                         + (f"  {speedup:5.2f}x FP32" if _number(speedup) else ""))
        elif entry.get("not_measured") or entry.get("error"):
            lines.append(f"  {label:13s} not measured ({entry.get('not_measured') or entry['error']})")
    training = lookup(results, "precision", "training") or {}
    cases = training.get("cases") if isinstance(training.get("cases"), dict) else {}
    for case, entry in cases.items():
        times = []
        for fmt in ("fp32", "bf16", "fp16"):
            ms, speedup = lookup(entry, fmt, "median_ms"), lookup(entry, fmt, "speedup_over_fp32")
            if _number(ms):
                times.append(f"{fmt} {ms:.3f} ms" + (f" ({speedup:.2f}x)" if _number(speedup) else ""))
        if times:
            lines.append(f"dlcourse step {case:10s} " + ", ".join(times))
    if cases:
        lines.append("  (dlcourse emulates bf16 and fp16: rounded inputs, float32 products; "
                     "the tensor cores' speed is in the matmul lines)")
    return lines
