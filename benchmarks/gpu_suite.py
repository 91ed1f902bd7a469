"""The GPU benchmark suite: dlcourse's CUDA kernels and training steps, measured on one GPU.

    python benchmarks/gpu_suite.py [--out benchmarks/results] [--quick] [--sections ...] [--no-torch] [--dry-run]

What it measures (every figure on the GPU it runs on, and each result checked before it is timed):

1. matmul: the kernel ladder (naive, coalesced, tiled, register-blocked) at 4096x4096 FP32 as a
   share of cuBLAS FP32 (``cp.matmul`` with TF32 OFF), the register-blocked kernel built with
   each other tuning it supports (``REGBLOCK_TUNINGS``: BK, PREFETCH, DOUBLE_BUFFER,
   AVOID_CONFLICTS and TWO_BLOCKS), plus cuBLAS with TF32 ON,
   measured in a separate process because CuPy reads ``CUPY_TF32`` once, at import.
2. elementwise: the fused kernels on >= 64M elements as a fraction of the device's measured
   device-to-device copy bandwidth, and each fused kernel against the same chain unfused; the
   bandwidth of host<->device copies (pageable and pinned host memory).
3. training: one SGD step of the MLP 784-512-512-10 (batch 64 and 1024) and the CNN (batch 256),
   dlcourse on the GPU against PyTorch on the same GPU (TF32 off in both), dlcourse three ways
   (steps.VARIANTS: as it is, with no hand-written kernels, and dl.fuse'd); and the MLP step at
   batch 64 replayed as a CUDA graph, if capture works.
4. gpu vs cpu: the same MLP step at batch 32 ... 4096, dlcourse on the GPU and on the CPU.
5. precision: the matmul at the same size in FP32, TF32, FP16 (cuBLAS through CuPy: tensor
   cores, float32 accumulation) and BF16 (PyTorch's torch.matmul, with its FP32 and FP16 beside
   it: CuPy has no bfloat16), in TFLOP/s and as a speed-up over FP32; and dlcourse's training
   step (the MLP and CNN cases of 3.) with ``precision="fp32"``, ``"bf16"`` and ``"fp16"``.
   dlcourse EMULATES the 16-bit formats (it rounds the inputs, then multiplies in float32), so
   its bf16/fp16 steps measure what the emulation costs and are not expected to be faster.
6. attention: one attention forward pass, 4 samples x 8 heads x d = 64, FP32, T = 512 ... 4096,
   causal and not: naive ``dl.attention`` (CuPy array code: S and P are written out, T x T
   each), the FlashAttention kernel ``flash_attention_forward.cu`` (``K.flash_attention_forward``),
   ``dl.flash_attention``'s tiled array code (block 256 x 256), and PyTorch's
   ``scaled_dot_product_attention`` in FP32 where PyTorch has CUDA; each checked against the
   naive result first, in ms and TFLOP/s (4 N H T² d FLOPs, half of that when causal), with the
   bytes each version moves counted from the shapes (``attention_traffic``).
9. transformer_train: the character transformer of ``dlcourse train --model transformer
   --dataset text`` (its sizes: d_model 64, 4 heads, 2 layers, context 64, batch 32), trained
   with AdamW by the library's own step on CuPy, against the same model written in PyTorch
   eager on the same GPU (same weights, copied; same batches; its parameter count and first
   loss checked against dlcourse's), in tokens per second over timed rounds of steps after
   warm-up. Estimated (not measured) at 10-40 s on an H100 (docs/gpu_check.md).

Two more sections run only when ``--sections`` names them (``KERNEL_SECTIONS``; the check runs
them in a step of their own):

7. tensor_cores: ``matmul_wmma`` (FP16 in, FP32 accumulated) against cuBLAS FP16
   (``cp.matmul`` on float16) and ``matmul_warptile`` (rung 5) against cuBLAS FP32 (TF32 off), at
   4096x4096x4096; each checked against its cuBLAS product and for register spills
   (``local_size_bytes == 0``) before it is timed.
8. flash_memory: the FlashAttention kernel against naive attention (``naive_attention``: the
   T x T scores written out, both products on cuBLAS) and PyTorch's
   ``scaled_dot_product_attention`` in FP32, 1 sample x 8 heads x d = 64, T = 512 ... 16384,
   and causal at T = 1024 and 4096: time, the memory each holds (CuPy's pool; PyTorch's
   ``max_memory_allocated`` for SDPA), and the kernel's spills; then, where ``dl.kernels`` has
   it, ``flash_attention_wmma`` (FP16 in, FP32 out, tensor cores) against SDPA in FP16 on its
   FlashAttention backend, T = 1024 ... 16384, both checked against FP32.

``--dry-run`` prints what the chosen sections would run (sizes, launch geometry, bytes; for
transformer_train the two models' parameter counts, built on the CPU) and exits 0 without a
GPU, measuring and writing nothing.

It writes ``<out>/<device-name>.json`` (device, driver, CUDA, CuPy, PyTorch versions, date, every
figure) and a plot ``<out>/<device-name>.png`` beside it (sections 1-4; the others are in
the JSON and the printout only). Until the last section has run the JSON is
``<device-name>.partial.json`` (``"complete": false``), rewritten after each section, so
a run cut short keeps what it measured, says it is partial, and leaves earlier complete results
alone. Without a usable GPU it prints why and exits 0 having written nothing: a figure nobody
measured is never written down.

Timing (see shared/STYLE.md): GPU calls return before the work is done, so every time here comes
from CUDA events recorded around the call on the GPU's own clock, after warm-up calls (the first
call also compiles the kernel), as the median of repeated runs. CPU times use perf_counter.
"""
from __future__ import annotations

import os
import sys

if "--tf32-child" not in sys.argv:
    # CuPy reads CUPY_TF32 once, when it is imported: FP32 must mean FP32 before anything
    # imports CuPy. (The TF32 figure comes from a child process started with CUPY_TF32=1.)
    os.environ["CUPY_TF32"] = "0"

import argparse            # noqa: E402
import contextlib          # noqa: E402
import functools           # noqa: E402
import json                # noqa: E402
import platform            # noqa: E402
import re                  # noqa: E402
import statistics          # noqa: E402
import subprocess          # noqa: E402
import textwrap            # noqa: E402
import time                # noqa: E402
import traceback           # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path   # noqa: E402

import numpy as np         # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import dlcourse as dl                      # noqa: E402
from dlcourse import kernels as K          # noqa: E402
from dlcourse._io import atomic_write       # noqa: E402
from dlcourse.backend import gpu_available, gpu_problem, require_cupy  # noqa: E402
from dlcourse.cli.train_settings import TEXT_DEFAULTS  # noqa: E402
from dlcourse.precision import FORMATS, TRAINING_FORMATS as PRECISIONS, round_to  # noqa: E402
from steps import VARIANTS, dlcourse_step, torch_step  # noqa: E402  (benchmarks/steps.py)

SECTIONS = ("matmul", "elementwise", "training", "cpu_vs_gpu", "precision", "attention",
            "transformer_train")

# Problem sizes. --quick shrinks them for a smoke run (its JSON says "quick": true).
FULL = dict(matmul_n=4096, elem_rows=65536, elem_cols=1024, conv_batch=640,
            mlp_batches=(64, 1024), cnn_batch=256, graph_batch=64,
            cpu_batches=tuple(2 ** k for k in range(5, 13)), target_s=1.0,
            attention_T=(512, 1024, 2048, 4096), lm_rounds=5)
QUICK = dict(matmul_n=2048, elem_rows=16384, elem_cols=1024, conv_batch=160,
             mlp_batches=(64, 1024), cnn_batch=256, graph_batch=64,
             cpu_batches=(32, 256, 2048), target_s=0.25, attention_T=(512, 1024, 2048),
             lm_rounds=2)


# ======================================================================================
# Timing helpers
# ======================================================================================
def _repeats(estimate_s, target_s, lo=3, hi=200):
    """How many timed runs fit in about target_s seconds (at least lo, at most hi)."""
    return int(min(hi, max(lo, target_s / max(estimate_s, 1e-6))))


def _sample(once, target_s):
    """Call once() (it returns seconds) as often as fits in about target_s; summarize."""
    times = [once()]
    times += [once() for _ in range(_repeats(times[0], target_s) - 1)]
    return {"median_ms": statistics.median(times) * 1e3, "min_ms": min(times) * 1e3,
            "repeats": len(times)}


def time_cuda(cp, fn, target_s, stream=None, warmup=2):
    """Median seconds per call of fn, from CUDA events recorded on `stream` around each call.

    The end event is recorded after fn returns, so any host time fn spends (Python, a sync)
    is inside the interval too: for a training step this is the time a user waits.
    """
    stream = stream or cp.cuda.get_current_stream()
    for _ in range(warmup):
        fn()
    stream.synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def once():
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3   # ms -> s

    return _sample(once, target_s)


def time_torch(torch, fn, target_s, warmup=2):
    """time_cuda for PyTorch work (torch's own events and stream)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once():
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return _sample(once, target_s)


def time_cpu(fn, target_s, warmup=1):
    for _ in range(warmup):
        fn()

    def once():
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return _sample(once, target_s)


def rel_err(xp, a, ref):
    """max |a - ref| / max |ref|, as a Python float."""
    scale = float(xp.abs(ref).max()) or 1.0
    return float(xp.abs(a.astype(ref.dtype) - ref).max()) / scale


def say(line=""):
    print(line, flush=True)


# ======================================================================================
# 1. The matmul ladder against cuBLAS
# ======================================================================================
def _matmul_operands(cp, n):
    rs = cp.random.RandomState(0)
    A = rs.standard_normal((n, n), dtype=cp.float32)
    B = rs.standard_normal((n, n), dtype=cp.float32)
    return A, B


def tf32_child(n):
    """Run in a child process with CUPY_TF32=1: time cuBLAS with TF32 and print one JSON line."""
    cp = require_cupy()
    A, B = _matmul_operands(cp, n)
    ref64 = A.astype(cp.float64) @ B.astype(cp.float64)
    C = cp.matmul(A, B)
    err = rel_err(cp, C, ref64)
    t = time_cuda(cp, lambda: cp.matmul(A, B, out=C), 1.0)
    print(json.dumps({"median_ms": t["median_ms"], "repeats": t["repeats"],
                      "tflops": _tflops(n, t),
                      "max_rel_err_vs_fp64": err, "CUPY_TF32": os.environ.get("CUPY_TF32")}))


def section_matmul(cp, cfg, out):
    n = cfg["matmul_n"]
    flops = 2 * n ** 3
    out.update(n=n, flops=flops, kernels={})
    say(f"\n[1] matmul {n}x{n}x{n} FP32 — the kernel ladder as a share of cuBLAS (TF32 off)")
    A, B = _matmul_operands(cp, n)

    # The ladder, then regblock built with each other tuning it supports (REGBLOCK_TUNINGS);
    # regblock_builds: name -> keywords, the default build under its ladder name.
    regblock_builds = {"regblock": K.REGBLOCK_TUNINGS[0]}
    regblock_builds.update({K.matmul.regblock_label(**t): t for t in K.REGBLOCK_TUNINGS[1:]})
    runs = [(name, fn, K.launch_config(name, n, n, n)) for name, fn in K.MATMUL_KERNELS.items()]
    runs += [(name, functools.partial(K.matmul_regblock, **t),
              K.launch_config("regblock", n, n, n, **t))
             for name, t in regblock_builds.items() if name != "regblock"]
    w = max(len(name) for name, _, _ in runs + [("cuBLAS TF32 (CUPY_TF32=1)", 0, 0)])

    # The yardstick first, checked to really be FP32.
    ref, out["cublas_fp32"] = _cublas_fp32(cp, A, B, cfg["target_s"])
    base_ms = out["cublas_fp32"]["median_ms"]
    say(f"  {'cuBLAS FP32 (cp.matmul)':{w}s} {base_ms:9.3f} ms {out['cublas_fp32']['tflops']:7.2f} "
        f"TFLOP/s  100.0%   (error vs FP64 {out['cublas_fp32']['max_rel_err_vs_fp64']:.1e})")

    for name, fn, cfg_launch in runs:
        C = fn(A, B)                                    # compiles on first call
        err = rel_err(cp, C, ref)
        entry = {"launch": str(cfg_launch), "max_rel_err_vs_cublas": err}
        out["kernels"][name] = entry
        if not err < 1e-4:
            entry["error"] = f"wrong result: max relative error {err:.2e} against cp.matmul"
            say(f"  {name:{w}s} WRONG RESULT (error {err:.2e}); not timed")
            continue
        t = time_cuda(cp, lambda: fn(A, B), cfg["target_s"], warmup=1)
        entry.update(t, tflops=flops / (t["median_ms"] / 1e3) / 1e12,
                     share_of_cublas_fp32=base_ms / t["median_ms"])
        say(f"  {name:{w}s} {t['median_ms']:9.3f} ms {entry['tflops']:7.2f} TFLOP/s "
            f"{entry['share_of_cublas_fp32']:6.1%}   {cfg_launch.grid} x {cfg_launch.block}")
        del C
    cp.get_default_memory_pool().free_all_blocks()
    # The build to make the default (see "Tuning" in matmul_regblock.cu), with its keywords.
    timed = [name for name in regblock_builds if "share_of_cublas_fp32" in out["kernels"][name]]
    if timed:
        name = max(timed, key=lambda name: out["kernels"][name]["share_of_cublas_fp32"])
        out["fastest_regblock"] = dict(name=name, tuning=regblock_builds[name])
        say(f"  fastest regblock build: {name} ({regblock_builds[name]}): "
            f"{out['kernels'][name]['share_of_cublas_fp32']:.1%} of cuBLAS FP32")

    # TF32 in a fresh process: CuPy decides at import time.
    tf32 = out["cublas_tf32"] = _cublas_tf32(n, base_ms)
    if "error" in tf32:
        say(f"  cuBLAS TF32: not measured ({tf32['error']})")
    else:
        say(f"  {'cuBLAS TF32 (CUPY_TF32=1)':{w}s} {tf32['median_ms']:9.3f} ms {tf32['tflops']:7.2f} "
            f"TFLOP/s {tf32['speedup_over_fp32']:6.1%}   (error vs FP64 "
            f"{tf32['max_rel_err_vs_fp64']:.1e}{'' if tf32['tf32_active'] else ', TF32 NOT active?'})")


def _cublas_fp32(cp, A, B, target_s):
    """cuBLAS FP32 (``cp.matmul``, TF32 off) on A, B (n, n) float32: (C, its entry), checked
    against FP64 first: TF32 would show as a ~1e-3 error, and is refused."""
    n = A.shape[0]
    C = cp.matmul(A, B)
    err64 = rel_err(cp, C, A.astype(cp.float64) @ B.astype(cp.float64))
    if err64 > 1e-4:
        raise RuntimeError(f"cp.matmul differs from FP64 by {err64:.1e}: TF32 seems to be on "
                           f"(CUPY_TF32={os.environ.get('CUPY_TF32')}); refusing to time it as FP32.")
    t = time_cuda(cp, lambda: cp.matmul(A, B, out=C), target_s)
    return C, dict(t, tflops=_tflops(n, t), max_rel_err_vs_fp64=err64)


def _cublas_tf32(n, fp32_ms):
    """cuBLAS with TF32 at n (tf32_child, in a process started with CUPY_TF32=1): its entry,
    with its speed-up over ``fp32_ms``, or ``{"error": why}`` (the TF32 line is extra)."""
    env = dict(os.environ, CUPY_TF32="1")
    try:
        proc = subprocess.run([sys.executable, __file__, "--tf32-child", str(n)], env=env,
                              capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip()
                               else f"exit code {proc.returncode}")
        tf32 = json.loads(proc.stdout.strip().splitlines()[-1])
    except Exception as err:
        return {"error": f"{type(err).__name__}: {err}"}
    tf32["tf32_active"] = tf32["max_rel_err_vs_fp64"] > 1e-5   # TF32 keeps 10 mantissa bits
    tf32["speedup_over_fp32"] = fp32_ms / tf32["median_ms"]
    return tf32


# ======================================================================================
# 2. Fused elementwise kernels against the copy bandwidth
# ======================================================================================
def section_elementwise(cp, cfg, out):
    Nr, F = cfg["elem_rows"], cfg["elem_cols"]
    n = Nr * F
    f4 = 4
    say(f"\n[2] fused kernels on {n / 2**20:.0f}M float32 elements, as a fraction of the copy bandwidth")
    rs = cp.random.RandomState(1)
    x = rs.standard_normal((Nr, F), dtype=cp.float32)
    b = rs.standard_normal(F, dtype=cp.float32)
    target = cfg["target_s"]

    # The yardstick: a plain device-to-device copy (cudaMemcpyAsync) reads n and writes n.
    dst = cp.empty_like(x)
    dst.data.copy_from_device_async(x.data, x.nbytes)
    if not bool((dst == x).all()):
        raise RuntimeError("device-to-device copy check failed")
    t = time_cuda(cp, lambda: dst.data.copy_from_device_async(x.data, x.nbytes), target)
    copy_gbs = 2 * x.nbytes / (t["median_ms"] / 1e3) / 1e9
    out.update(n_elements=n, shape=[Nr, F], copy=dict(t, bandwidth_gbs=copy_gbs), kernels={})
    say(f"  {'copy (device to device)':36s} {t['median_ms']:8.3f} ms {copy_gbs:8.0f} GB/s   100%")

    def line(name, fn, useful_bytes, check, unfused_of=None):
        """Check, time, and report one kernel; useful_bytes = the least traffic the op needs."""
        problem = check()
        entry = {"useful_bytes": int(useful_bytes)}
        out["kernels"][name] = entry
        if problem:
            entry["error"] = problem
            say(f"  {name:36s} WRONG RESULT ({problem}); not timed")
            return None
        t = time_cuda(cp, fn, target)
        gbs = useful_bytes / (t["median_ms"] / 1e3) / 1e9
        entry.update(t, useful_bandwidth_gbs=gbs, fraction_of_copy=gbs / copy_gbs)
        extra = ""
        if unfused_of is not None and "median_ms" in out["kernels"].get(unfused_of, {}):
            entry["fused_speedup"] = t["median_ms"] / out["kernels"][unfused_of]["median_ms"]
            out["kernels"][unfused_of]["fused_speedup"] = entry["fused_speedup"]
            extra = f"   (speed-up from fusion: {entry['fused_speedup']:.2f}x)"
        say(f"  {name:36s} {t['median_ms']:8.3f} ms {gbs:8.0f} GB/s {gbs / copy_gbs:6.1%}{extra}")
        return t

    def close(a, ref, tol=1e-5):
        e = rel_err(cp, a, ref)
        return None if e <= tol else f"relative error {e:.1e}"

    # bias + ReLU forward: reads x, writes y.
    y_ref = cp.maximum(x + b, 0)
    line("bias_relu_forward (fused)", lambda: K.bias_relu_forward(x, b), 2 * n * f4,
         lambda: close(K.bias_relu_forward(x, b), y_ref))
    line("x + b, then maximum (unfused)", lambda: cp.maximum(x + b, 0), 2 * n * f4,
         lambda: None, unfused_of="bias_relu_forward (fused)")

    # bias + ReLU backward: reads dout and y, writes dx (db is F numbers).
    dout = rs.standard_normal((Nr, F), dtype=cp.float32)
    dx_ref = dout * (y_ref > 0)
    db_ref = dx_ref.sum(axis=0)

    def check_bwd():
        dx, db = K.bias_relu_backward(dout, y_ref)
        return close(dx, dx_ref) or close(db, db_ref, 1e-4)

    def unfused_bwd():
        dx = dout * (y_ref > 0)
        return dx, dx.sum(axis=0)

    line("bias_relu_backward (fused)", lambda: K.bias_relu_backward(dout, y_ref), 3 * n * f4,
         check_bwd)
    line("dout * (y > 0), then sum (unfused)", unfused_bwd, 3 * n * f4, lambda: None,
         unfused_of="bias_relu_backward (fused)")

    # The same pair with the bias along rows: Conv2d's output matrix (channels, N*OH*OW).
    C = 64
    xr, doutr = x.reshape(C, -1), dout.reshape(C, -1)
    br = rs.standard_normal(C, dtype=cp.float32)
    yr_ref = cp.maximum(xr + br[:, None], 0)
    say(f"  (rows: bias along the rows of a ({C}, {n // C}) matrix, as in Conv2d's output)")
    line("bias_relu_rows_forward (fused)", lambda: K.bias_relu_rows_forward(xr, br), 2 * n * f4,
         lambda: close(K.bias_relu_rows_forward(xr, br), yr_ref))
    line("x + b[:, None], then maximum (unfused)", lambda: cp.maximum(xr + br[:, None], 0),
         2 * n * f4, lambda: None, unfused_of="bias_relu_rows_forward (fused)")

    def check_rows_bwd():
        dx, db = K.bias_relu_rows_backward(doutr, yr_ref)
        dx_ref = doutr * (yr_ref > 0)
        return close(dx, dx_ref) or close(db, dx_ref.sum(axis=1), 1e-4)

    def unfused_rows_bwd():
        dx = doutr * (yr_ref > 0)
        return dx, dx.sum(axis=1)

    line("bias_relu_rows_backward (fused)", lambda: K.bias_relu_rows_backward(doutr, yr_ref),
         3 * n * f4, check_rows_bwd)
    line("dout * (y > 0), then row sums (unfused)", unfused_rows_bwd, 3 * n * f4, lambda: None,
         unfused_of="bias_relu_rows_backward (fused)")

    # softmax cross-entropy over F classes: reads the logits, writes the gradient.
    labels = rs.randint(0, F, size=Nr, dtype=cp.int64)
    rows = cp.arange(Nr)

    def unfused_ce():
        m = x.max(axis=1, keepdims=True)
        e = cp.exp(x - m)
        s = e.sum(axis=1, keepdims=True)
        loss = (cp.log(s[:, 0]) + m[:, 0] - x[rows, labels]).mean()
        grad = e / s
        grad[rows, labels] -= 1
        grad /= Nr
        return loss, grad

    def check_ce():
        loss, grad = K.softmax_cross_entropy(x, labels)
        ref_loss, ref_grad = unfused_ce()
        return close(grad, ref_grad, 1e-4) or close(loss, ref_loss, 1e-5)

    line("softmax_cross_entropy (fused)", lambda: K.softmax_cross_entropy(x, labels),
         2 * n * f4 + Nr * 8, check_ce)
    line("max, exp, sum, log, ... (unfused)", unfused_ce, 2 * n * f4 + Nr * 8, lambda: None,
         unfused_of="softmax_cross_entropy (fused)")

    # im2col / col2im at the CNN's second convolution (16 channels, 28x28, 3x3, padding 1).
    Bc, C, H, W = cfg["conv_batch"], 16, 28, 28
    xc = rs.standard_normal((Bc, C, H, W), dtype=cp.float32)
    cols = K.im2col(xc, 3, 3, 1, 1)
    c = rs.standard_normal(cols.shape, dtype=cp.float32)

    def check_adjoint():   # <im2col(x), c> == <x, col2im(c)>, in float64
        lhs = float((K.im2col(xc, 3, 3, 1, 1).astype(cp.float64) * c).sum())
        rhs = float((xc.astype(cp.float64) * K.col2im(c, xc.shape, 3, 3, 1, 1)).sum())
        e = abs(lhs - rhs) / max(abs(lhs), 1.0)
        return None if e < 1e-4 else f"adjoint identity off by {e:.1e}"

    say(f"  (im2col/col2im: x {Bc}x{C}x{H}x{W}, 3x3, padding 1 -> cols "
        f"{cols.shape[0]}x{cols.shape[1]} = {cols.size / 2**20:.0f}M elements)")
    line("im2col (gather)", lambda: K.im2col(xc, 3, 3, 1, 1), cols.nbytes + xc.nbytes,
         check_adjoint)
    line("col2im (gather, no atomics)", lambda: K.col2im(c, xc.shape, 3, 3, 1, 1),
         cols.nbytes + xc.nbytes, lambda: None)
    cp.get_default_memory_pool().free_all_blocks()
    out["host_device"] = _host_device_copies(cp, x.nbytes, target)


def _host_device_copies(cp, nbytes, target):
    """Bandwidth of copies between host memory and the GPU over the bus (PCIe or NVLink):
    host to device from ordinary (pageable) and from pinned (page-locked) host memory, and
    device to host into pinned memory. Each copy is checked once, then timed."""
    import cupyx
    n = nbytes // 4
    pageable = np.arange(n, dtype=np.float32)
    pinned = cupyx.empty_pinned(n, dtype=np.float32)
    pinned[...] = pageable
    expected = cp.asarray(pageable)  # what every copy must deliver, on the device
    dev = cp.empty(n, dtype=cp.float32)
    back = cupyx.empty_pinned(n, dtype=np.float32)
    copies = {"host_to_device_pageable": lambda: dev.set(pageable),
              "host_to_device_pinned": lambda: dev.set(pinned),
              "device_to_host_pinned": lambda: dev.get(out=back)}
    result = {"bytes": int(pageable.nbytes)}
    for name, copy in copies.items():
        to_device = name.startswith("host")
        dev[...] = 0 if to_device else expected    # the copy must fill dev / bring dev back
        back[...] = 0
        copy()
        cp.cuda.Device().synchronize()
        ok = bool((dev == expected).all()) if to_device else bool(np.array_equal(back, pageable))
        if not ok:
            result[name] = {"error": "the copy did not arrive intact"}
            say(f"  {name}: WRONG RESULT; not timed")
            continue
        t = time_cuda(cp, copy, target)
        result[name] = dict(t, bandwidth_gbs=pageable.nbytes / (t["median_ms"] / 1e3) / 1e9)
        say(f"  {name.replace('_', ' '):36s} {t['median_ms']:8.3f} ms "
            f"{result[name]['bandwidth_gbs']:8.1f} GB/s   ({pageable.nbytes / 2**20:.0f} MiB)")
    return result


# ======================================================================================
# 3./4. Training steps
# ======================================================================================
def _load_torch(args):
    if args.no_torch:
        return None, "skipped (--no-torch)"
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed (pip install torch) — torch lines skipped"
    if not torch.cuda.is_available():
        return None, f"PyTorch {torch.__version__} has no CUDA here — torch lines skipped"
    torch.backends.cuda.matmul.allow_tf32 = False   # FP32 means FP32, as for CuPy
    torch.backends.cudnn.allow_tf32 = False
    return torch, None


def section_training(cp, cfg, out, torch, torch_note):
    say("\n[3] one training step (forward + loss + backward + SGD momentum), FP32, TF32 off")
    if torch_note:
        say(f"  note: {torch_note}")
        out["torch_note"] = torch_note
    out["launch_overhead"] = _launch_overhead(cp)
    out["variants"] = dict(VARIANTS)
    out["cases"] = {}
    cases = [("mlp", b) for b in cfg["mlp_batches"]] + [("cnn", cfg["cnn_batch"])]
    for kind, batch in cases:
        key = f"{kind}_b{batch}"
        entry = out["cases"][key] = {"model": kind, "batch": batch}
        if torch is not None:
            entry["torch"] = time_torch(torch, torch_step(kind, batch, "cuda"), cfg["target_s"])
        first_losses = {}
        for variant in VARIANTS:     # "default" first: its figure is entry["dlcourse"]
            step = dlcourse_step(kind, batch, "gpu", variant=variant)
            first = first_losses[variant] = float(step())
            name = "dlcourse" if variant == "default" else f"dlcourse_{variant}"
            if not np.isfinite(first) or abs(first - first_losses["default"]) > 1e-4 * abs(first):
                entry[name] = {"error": f"first loss {first} (default variant: {first_losses['default']})"}
                say(f"  {key} {variant}: first loss {first} differs from the default's; not timed")
                continue
            entry[name] = time_cuda(cp, step, cfg["target_s"])
            msg = (f"  {kind.upper()} batch {batch:5d} {variant:8s}: dlcourse "
                   f"{entry[name]['median_ms']:8.3f} ms")
            if "torch" in entry:
                ratio = entry[name]["median_ms"] / entry["torch"]["median_ms"]
                entry[name]["over_torch"] = ratio
                if variant == "default":
                    entry["dlcourse_over_torch"] = ratio
                msg += (f"   PyTorch {entry['torch']['median_ms']:8.3f} ms   "
                        f"dlcourse/PyTorch {ratio:5.2f}x")
            say(msg)
            del step
    out["cuda_graph"] = _cuda_graph_line(cp, cfg)


def _launch_overhead(cp, n=2000):
    """Host time per launch of a tiny kernel (``x += 1`` on one number): what every array
    operation costs the CPU however little work it gives the GPU. A step made of L launches
    cannot take less than L times this, which is why small batches do not get faster."""
    x = cp.zeros(1, dtype=cp.float32)
    for _ in range(10):
        x += 1
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x += 1
    cp.cuda.Device().synchronize()
    per_launch = (time.perf_counter() - t0) / n
    if float(x[0]) != 10 + n:
        return {"error": f"x is {float(x[0])} after {10 + n} increments"}
    say(f"  launch overhead: {per_launch * 1e6:.1f} µs of host time per launch of a tiny kernel "
        f"(x += 1, {n} launches in a row)")
    return {"us_per_launch": per_launch * 1e6, "launches": n}


def _cuda_graph_line(cp, cfg):
    """Capture the dlcourse MLP step (fused loss) into a CUDA graph and replay it.

    A graph replays every kernel launch of the step with one call, removing Python and launch
    overhead, which dominates at small batch. It only works when the step never waits on the
    host and allocates nothing new while capturing, and CuPy refuses to capture cuBLAS calls
    (NotImplementedError, seen on an H100 with CuPy 14.2, 2026-11-26): the captured step, and
    the eager step it is compared with, compute their products on the course's matmul_regblock
    kernel (``K.products_on_kernel()``). The eager step with cuBLAS is timed too. If capture
    fails we say why.
    """
    batch = cfg["graph_batch"]
    entry = {"model": "mlp", "batch": batch, "products": "matmul_regblock (CuPy cannot capture "
             "cuBLAS calls)"}
    try:
        eager = dlcourse_step("mlp", batch, "gpu", fused_loss=True)
        entry["eager_fused_loss"] = time_cuda(cp, eager, cfg["target_s"])
        with K.products_on_kernel():
            eager = dlcourse_step("mlp", batch, "gpu", fused_loss=True)
            entry["eager_kernel_products"] = time_cuda(cp, eager, cfg["target_s"])
            graph, stream, step = _capture(cp, dlcourse_step("mlp", batch, "gpu", fused_loss=True))
            entry["max_rel_err_graph_vs_eager"] = _replay_error(cp, graph, stream, step)
        err = entry["max_rel_err_graph_vs_eager"]
        if not err < 1e-5:
            raise RuntimeError(f"graph replay differs from the eager step (error {err:.1e})")
        entry["graph"] = time_cuda(cp, lambda: graph.launch(stream), cfg["target_s"], stream=stream)
        eager_ms = entry["eager_kernel_products"]["median_ms"]
        entry["speedup_over_eager"] = eager_ms / entry["graph"]["median_ms"]
        say(f"  MLP batch {batch:5d}, CUDA graph: {entry['graph']['median_ms']:8.3f} ms per replay, "
            f"eager {eager_ms:8.3f} ms (both with the fused loss kernel and the products on "
            f"matmul_regblock): {entry['speedup_over_eager']:.2f}x; eager with cuBLAS "
            f"{entry['eager_fused_loss']['median_ms']:.3f} ms")
    except Exception as err:
        entry["error"] = f"{type(err).__name__}: {err}"
        say(f"  CUDA graph capture of the dlcourse step: not measured ({entry['error']})")
    return entry


def _capture(cp, step):
    """Warm step up on a stream of its own, then capture one call of it: (graph, stream, step)."""
    # A non-blocking stream does not wait for the null stream, where the model and the
    # data were copied to the GPU (and where the copies below run): wait for it by hand.
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    with stream:
        for _ in range(3):      # warm up on this stream: kernels compiled, pool filled
            step()
        stream.synchronize()
        stream.begin_capture()
        try:
            step()
        except BaseException:   # keep the step's own error, not end_capture's
            with contextlib.suppress(Exception):
                stream.end_capture()
            raise
        graph = stream.end_capture()
    return graph, stream, step


def _replay_error(cp, graph, stream, step):
    """One replay against one eager step from the same state: the largest relative error."""
    params = step.model.params
    saved = {k: p.copy() for k, p in params.items()}
    saved_state = {k: v.copy() for k, v in step.opt.state.items()}
    cp.cuda.Device().synchronize()          # the copies (null stream) before the replay
    graph.launch(stream)
    stream.synchronize()
    replayed = {k: p.copy() for k, p in params.items()}
    for k, p in params.items():
        p[...] = saved[k]
    for k, v in step.opt.state.items():
        v[...] = saved_state[k]
    cp.cuda.Device().synchronize()
    step()                      # eager, on the default stream
    cp.cuda.Device().synchronize()
    return max(rel_err(cp, replayed[k], p) for k, p in params.items())


def section_cpu_vs_gpu(cp, cfg, out):
    say("\n[4] the MLP 784-512-512-10 training step, GPU against CPU")
    out["model"] = "mlp 784-512-512-10"
    out["cases"] = {}
    for batch in cfg["cpu_batches"]:
        g_step, c_step = dlcourse_step("mlp", batch, "gpu"), dlcourse_step("mlp", batch, "cpu")
        g = time_cuda(cp, g_step, cfg["target_s"])
        c = time_cpu(c_step, cfg["target_s"])
        entry = out["cases"][str(batch)] = {
            "batch": batch, "gpu": g, "cpu": c, "cpu_over_gpu": c["median_ms"] / g["median_ms"],
            "gpu_samples_per_s": batch / (g["median_ms"] / 1e3),
            "cpu_samples_per_s": batch / (c["median_ms"] / 1e3)}
        say(f"  batch {batch:5d}: GPU {g['median_ms']:8.3f} ms   CPU {c['median_ms']:9.3f} ms   "
            f"CPU time / GPU time {entry['cpu_over_gpu']:6.1f}x")


# ======================================================================================
# 5. Lower precision: what tensor cores give, and what dlcourse's emulation costs
# ======================================================================================
PRECISION_NOTE = (
    "dlcourse EMULATES bf16 and fp16 (dlcourse/precision.py, ops.py): on the GPU it rounds the "
    "inputs of every matrix product (fp16 through CuPy's float16, bf16 by rounding the bits of "
    "the float32 numbers) and then multiplies them as float32 arrays (cuBLAS FP32, TF32 off), so "
    "it gets none of the 16-bit tensor cores' speed; fp16 also checks every gradient for inf "
    "and NaN (dl.LossScaler), which waits for the GPU. Its bf16/fp16 steps measure the cost of "
    "that emulation and are not expected to be faster than fp32; the cuBLAS and PyTorch matmul "
    "lines show what the tensor cores give.")


def _ulp(fmt):
    """The spacing of fmt's numbers just above 1, 2**-(mantissa bits): 2**-10 for fp16, 2**-7
    for bf16. Rounding to fmt moves a number by at most half of it, relatively."""
    return 2.0 ** -FORMATS[fmt][2]


def _tflops(n, t):
    """TFLOP/s of an n x n x n matrix product (2 n**3 floating-point operations) timed as t."""
    return 2 * n ** 3 / (t["median_ms"] / 1e3) / 1e12


def section_precision(cp, cfg, out, torch, torch_note, matmul=None):
    """fp16 and bf16 against FP32 and TF32, on the GPU the suite runs on.

    1. Matrix products at the matmul section's size n: cuBLAS FP32 and TF32 (the matmul
       section's figures when it ran at this n, else measured here), cuBLAS with float16
       inputs (``cp.matmul`` on float16 arrays: tensor cores), and PyTorch's ``torch.matmul``
       in float32 (TF32 off), float16 and bfloat16, because CuPy has no bfloat16 dtype. CuPy
       multiplies float16 arrays with ``cublasGemmEx`` with float16 inputs and output and
       ``CUBLAS_COMPUTE_32F`` (products added in float32) unless ``cupy._core.set_compute_type``
       changed it, and asks for the tensor-core algorithm on compute capability 7.0 and later
       (``tensordot_core_v11`` in CuPy's ``cupy/_core/_routines_linalg.pyx``, read for CuPy 14).
       Each result is checked first against FP64 of the same rounded inputs (the output is
       rounded to the format, so one unit in its last place is allowed for CuPy; PyTorch may
       also add split-K partial sums in 16 bits, ``allow_fp16/bf16_reduced_precision_reduction``,
       recorded, so four); its error against FP64 of the float32 inputs (what the format costs
       in all) is recorded too. TFLOP/s, and the speed-up over FP32 of the same library.
    2. dlcourse's training step (benchmarks/steps.py, the step ``dl.fit(precision=...)`` takes)
       in fp32, bf16 and fp16 for the training section's MLP and CNN cases: see PRECISION_NOTE,
       these time the emulation. Each step's first loss must be finite and within one unit in
       the last place of its format of fp32's (same model, same data) before it is timed.

    ``matmul``: the matmul section's results, if it ran (its FP32 and TF32 lines are reused).
    Fills ``out["matmul"]`` and ``out["training"]``; a figure that cannot be measured is an
    entry ``{"not_measured": why}``.
    """
    n = cfg["matmul_n"]
    say(f"\n[5] lower precision: {n}x{n}x{n} matrix products in FP32, TF32, FP16 and BF16, "
        f"and dlcourse's training step in fp32, bf16 and fp16")
    mm = out["matmul"] = {"n": n, "flops": 2 * n ** 3}
    A, B = _matmul_operands(cp, n)
    ref64 = A.astype(cp.float64) @ B.astype(cp.float64)
    _precision_cublas(cp, cfg, mm, matmul or {}, A, B, ref64)
    try:                        # the PyTorch lines are extra: a failure leaves the rest
        _precision_torch(cp, cfg, mm, torch, torch_note, A, B, ref64)
    except Exception as err:
        mm["torch_error"] = f"{type(err).__name__}: {err}"
        say(f"  PyTorch matmul lines stopped: {mm['torch_error']}")
    del A, B, ref64
    cp.get_default_memory_pool().free_all_blocks()
    out["training"] = _precision_steps(cp, cfg)


def _precision_line(label, entry, base=None):
    """Print one matrix-product line of section 5 (and set its speed-up over ``base``)."""
    if "median_ms" not in entry:
        say(f"  {label:34s} not measured: {entry.get('not_measured') or entry.get('error')}")
        return
    if base and "median_ms" in base:
        entry["speedup_over_fp32"] = base["median_ms"] / entry["median_ms"]
    speedup = f"{entry['speedup_over_fp32']:6.2f}x FP32" if "speedup_over_fp32" in entry else ""
    err = entry.get("max_rel_err_vs_fp64")
    say(f"  {label:34s} {entry['median_ms']:9.3f} ms {entry['tflops']:8.1f} TFLOP/s {speedup}"
        + (f"   (error vs FP64 {err:.1e})" if err is not None else ""))


def _precision_cublas(cp, cfg, mm, matmul, A, B, ref64):
    """cuBLAS through CuPy on A, B (n, n) float32 (ref64: their product in FP64): FP32, TF32
    (reused from the matmul section when it ran at this size) and FP16, into mm."""
    n, target = mm["n"], cfg["target_s"]
    same_n = matmul.get("n") == n
    if same_n and "median_ms" in (matmul.get("cublas_fp32") or {}):
        mm["cublas_fp32"] = dict(matmul["cublas_fp32"], source="the matmul section")
    else:
        mm["cublas_fp32"] = _cublas_fp32(cp, A, B, target)[1]
    fp32_ms = mm["cublas_fp32"]["median_ms"]
    if same_n and "median_ms" in (matmul.get("cublas_tf32") or {}):
        mm["cublas_tf32"] = dict(matmul["cublas_tf32"], source="the matmul section")
    else:
        mm["cublas_tf32"] = _cublas_tf32(n, fp32_ms)
    if "error" in mm["cublas_tf32"]:
        mm["cublas_tf32"] = {"not_measured": mm["cublas_tf32"]["error"]}
    _precision_line("cuBLAS FP32 (cp.matmul)", mm["cublas_fp32"])
    _precision_line("cuBLAS TF32 (CUPY_TF32=1)", mm["cublas_tf32"], mm["cublas_fp32"])

    A16, B16 = A.astype(cp.float16), B.astype(cp.float16)
    C16 = cp.matmul(A16, B16)
    entry = mm["cublas_fp16"] = {
        "inputs": "float16", "output": "float16", "cupy_compute_type": _cupy_compute_type(cp),
        "accumulation": "float32: CuPy calls cublasGemmEx with CUBLAS_COMPUTE_32F for float16 "
                        "(its tensordot_core_v11)",
        "max_rel_err_vs_fp64_same_inputs": rel_err(
            cp, C16, A16.astype(cp.float64) @ B16.astype(cp.float64)),
        "max_rel_err_vs_fp64": rel_err(cp, C16, ref64)}
    if not entry["max_rel_err_vs_fp64_same_inputs"] <= _ulp("fp16"):
        entry["error"] = (f"wrong result: max relative error "
                          f"{entry['max_rel_err_vs_fp64_same_inputs']:.1e} against FP64 of the same "
                          f"float16 inputs, more than one fp16 unit ({_ulp('fp16'):.1e})")
    else:
        entry.update(time_cuda(cp, lambda: cp.matmul(A16, B16, out=C16), target))
        entry["tflops"] = _tflops(n, entry)
    _precision_line("cuBLAS FP16 (cp.matmul, float16)", entry, mm["cublas_fp32"])
    mm["cublas_bf16"] = {"not_measured": "CuPy has no bfloat16 dtype (see torch_bf16)"}


def _cupy_compute_type(cp):
    """The compute type CuPy will use for float16 products (cupy._core.get_compute_type):
    1 is COMPUTE_TYPE_DEFAULT (CUBLAS_COMPUTE_32F for float16), 2 PEDANTIC (32F_PEDANTIC)."""
    try:
        return int(cp._core.get_compute_type(cp.float16))
    except Exception as err:
        return f"unknown ({type(err).__name__}: {err})"


def _precision_torch(cp, cfg, mm, torch, torch_note, A, B, ref64):
    """torch.matmul in float32 (TF32 off), float16 and bfloat16 on the same operands A, B, into
    mm; without PyTorch each line says why it was not measured."""
    n = mm["n"]
    if torch is None:
        for fmt in PRECISIONS:
            why = torch_note
            if fmt == "bf16":
                why = f"CuPy has no bfloat16 and PyTorch is not usable here ({torch_note})"
            mm[f"torch_{fmt}"] = {"not_measured": why}
            _precision_line(f"PyTorch {fmt.upper()}", mm[f"torch_{fmt}"])
        return
    matmul_settings = torch.backends.cuda.matmul
    mm["torch_settings"] = {k: getattr(matmul_settings, k, None) for k in (
        "allow_tf32", "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction")}
    tA, tB = (torch.from_numpy(cp.asnumpy(M)).cuda() for M in (A, B))
    dtypes = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    for fmt in PRECISIONS:
        a, b = tA.to(dtypes[fmt]), tB.to(dtypes[fmt])
        c = torch.matmul(a, b)
        got = cp.asarray(c.float().cpu().numpy())
        same = round_to(fmt, A).astype(cp.float64) @ round_to(fmt, B).astype(cp.float64)
        entry = mm[f"torch_{fmt}"] = {"dtype": str(dtypes[fmt]),
                                      "max_rel_err_vs_fp64_same_inputs": rel_err(cp, got, same),
                                      "max_rel_err_vs_fp64": rel_err(cp, got, ref64)}
        tol = 1e-4 if fmt == "fp32" else 4 * _ulp(fmt)
        if not entry["max_rel_err_vs_fp64_same_inputs"] <= tol:
            entry["error"] = (f"wrong result: max relative error "
                              f"{entry['max_rel_err_vs_fp64_same_inputs']:.1e} against FP64 of "
                              f"the same inputs (allowed {tol:.1e})")
        else:
            entry.update(time_torch(torch, lambda a=a, b=b, c=c: torch.matmul(a, b, out=c),
                                    cfg["target_s"]))
            entry["tflops"] = _tflops(n, entry)
        _precision_line(f"PyTorch {fmt.upper()} (torch.matmul)", entry,
                        None if fmt == "fp32" else mm["torch_fp32"])
        del a, b, c, got, same
    del tA, tB
    torch.cuda.empty_cache()


def _precision_steps(cp, cfg):
    """dlcourse's training step in each of PRECISIONS, for the training section's cases."""
    say("  dlcourse's training step, fp32 against its emulated bf16 and fp16. Note:")
    say(textwrap.fill(PRECISION_NOTE, 96, initial_indent="    ", subsequent_indent="    "))
    res = {"note": PRECISION_NOTE, "cases": {}}
    cases = [("mlp", b) for b in cfg["mlp_batches"]] + [("cnn", cfg["cnn_batch"])]
    for kind, batch in cases:
        key = f"{kind}_b{batch}"
        entry = res["cases"][key] = {"model": kind, "batch": batch}
        fp32_loss = None
        for fmt in PRECISIONS:          # "fp32" first: the others are checked against it
            step = dlcourse_step(kind, batch, "gpu", precision=fmt)
            first = float(step())
            fp32_loss = first if fmt == "fp32" else fp32_loss
            close = fmt == "fp32" or (fp32_loss is not None
                                      and abs(first - fp32_loss) <= _ulp(fmt) * abs(fp32_loss))
            if not (np.isfinite(first) and close):
                entry[fmt] = {"error": f"first loss {first} (fp32: {fp32_loss}); not timed"}
                say(f"  {key} {fmt}: first loss {first} is not finite or too far from fp32's "
                    f"{fp32_loss}; not timed")
                continue
            t = entry[fmt] = dict(time_cuda(cp, step, cfg["target_s"]), first_loss=first)
            scaler = getattr(getattr(step, "amp", None), "scaler", None)
            if scaler is not None:      # fp16: a skipped step (overflow) has no update to time
                t["loss_scaler"] = dict(scaler.state_dict(), steps=len(scaler.scales))
            msg = f"  {kind.upper()} batch {batch:5d} {fmt}: {t['median_ms']:8.3f} ms"
            if fmt != "fp32" and "median_ms" in entry["fp32"]:
                t["speedup_over_fp32"] = entry["fp32"]["median_ms"] / t["median_ms"]
                msg += f"   speed-up over fp32 {t['speedup_over_fp32']:5.2f}x (below 1: slower)"
            say(msg)
            del step
    return res


# ======================================================================================
# 6. Attention: naive against FlashAttention
# ======================================================================================
ATTENTION_SHAPE = dict(N=4, H=8, d=64)


def section_attention(cp, cfg, out, torch, torch_note):
    """One forward pass of attention at each T in cfg["attention_T"], causal and not."""
    from dlcourse.flash_attention import attention_traffic
    N, H, d = ATTENTION_SHAPE["N"], ATTENTION_SHAPE["H"], ATTENTION_SHAPE["d"]
    say(f"\n[6] attention forward, N={N} x heads={H} x d={d}, FP32: naive vs FlashAttention")
    out.update(ATTENTION_SHAPE, cases={}, torch_note=torch_note,
               note="naive: dl.attention (CuPy array code, S and P in memory); flash_kernel: "
                    "flash_attention_forward.cu; flash_array_code: dl.flash_attention's tiles "
                    "(256 x 256) as CuPy array code; torch_sdpa_fp32: PyTorch's "
                    "scaled_dot_product_attention, FP32")
    gen = np.random.default_rng(0)
    for T in cfg["attention_T"]:
        q, k, v = (cp.asarray(gen.standard_normal((N, H, T, d)).astype(np.float32)) for _ in range(3))
        for causal in (False, True):
            flops = 4 * N * H * T * T * d * (0.5 if causal else 1.0)
            traffic = attention_traffic(N, H, T, d, 4, (K.FLASH_BR, K.FLASH_BC), causal)
            entry = out["cases"][f"T={T}{' causal' if causal else ''}"] = {
                "T": T, "causal": causal, "flops": flops, "bytes_naive": traffic["naive"],
                "bytes_flash_kernel": traffic["flash"]}
            want = None
            runs = [("naive", lambda: dl.attention(q, k, v, causal=causal)),
                    ("flash_kernel", lambda: K.flash_attention_forward(q, k, v, causal)[0]),
                    ("flash_array_code", lambda: dl.flash_attention(q, k, v, causal=causal,
                                                                   block=(256, 256),
                                                                   use_kernel=False))]
            if torch is not None:
                tq, tk, tv = (torch.as_tensor(a, device="cuda") for a in (q, k, v))
                runs.append(("torch_sdpa_fp32", lambda: torch.nn.functional.scaled_dot_product_attention(
                    tq, tk, tv, is_causal=causal)))
            line = f"  T={T:5d}{' causal' if causal else '       '}"
            for name, fn in runs:
                try:
                    result = fn()
                    got = cp.asarray(result.contiguous() if name == "torch_sdpa_fp32" else result)
                    if want is None:
                        want = got                          # the naive result is the reference
                    err = rel_err(cp, got, want)
                    if err > 1e-4:
                        entry[name] = {"error": f"max relative error {err:.1e} against naive"}
                        line += f"   {name}: WRONG ({err:.1e})"
                        continue
                    t = (time_torch(torch, fn, cfg["target_s"]) if name == "torch_sdpa_fp32"
                         else time_cuda(cp, fn, cfg["target_s"]))
                    t["tflops"] = flops / (t["median_ms"] / 1e3) / 1e12
                    t["max_rel_err_vs_naive"] = err
                    entry[name] = t
                    line += f"   {name} {t['median_ms']:8.3f} ms ({t['tflops']:5.1f} TFLOP/s)"
                except Exception as err:                  # naive runs out of memory first
                    entry[name] = {"error": f"{type(err).__name__}: {err}"[:200]}
                    line += f"   {name}: {type(err).__name__}"
                cp.get_default_memory_pool().free_all_blocks()
            say(line)


# ======================================================================================
# 9. The character transformer's training step: dlcourse against PyTorch
# ======================================================================================
#: `dlcourse train --model transformer --dataset text`'s model and batch (TEXT_DEFAULTS:
#: d_model 64, 4 heads, 2 layers, context 64, batch 32, lr 3e-3), trained with AdamW (the
#: command's `--optimizer adamw`, weight decay 0.01; its default is adam); warmup steps, then
#: `rounds` rounds of `steps` timed steps (FULL; QUICK takes fewer: cfg["lm_rounds"]).
TRANSFORMER_TRAIN = dict({k: TEXT_DEFAULTS[k] for k in ("d_model", "heads", "layers",
                                                       "context", "batch_size", "lr")},
                         weight_decay=0.01, warmup=10, steps=50, batches=8, seed=0)


def lm_batches(ids, batch, T, count, seed=0):
    """``count`` batches of random windows of the text ``ids`` (1-D ints): a list of (x, y),
    (batch, T) int64 each, y = x shifted by one position (the next character)."""
    gen = np.random.default_rng(seed)
    ids = np.asarray(ids, dtype=np.int64)
    windows = [ids[gen.integers(0, len(ids) - T, size=batch)[:, None] + np.arange(T + 1)]
               for _ in range(count)]
    return [(w[:, :-1], w[:, 1:]) for w in windows]


def dlcourse_lm_step(model, s, device):
    """The library's training step of ``model`` (a dl.Transformer) as ``dl.fit`` takes it,
    moved to ``device``: step(x, y) -> the loss, a Python float (so each step waits for the
    GPU, as in dl.fit), x, y: (B, T) int64 on the device. dl.SequenceCrossEntropy, backward,
    dl.AdamW (betas (0.9, 0.999), eps 1e-8, weight decay s["weight_decay"]). Left out: what
    dl.fit does around each step (its snapshot to undo a diverged step, the lr schedule, the
    progress bar) and the copy of each batch to the device."""
    model.to(device)
    model.train()
    loss = dl.SequenceCrossEntropy()
    opt = dl.AdamW(model, lr=s["lr"], betas=(0.9, 0.999), eps=1e-8,
                   weight_decay=s["weight_decay"])

    def step(x, y):
        value = loss.forward(model.forward(x), y)          # a Python float
        model.backward(loss.backward())                    # fills model.grads
        opt.step()
        return value
    return step


def torch_lm(torch, model):
    """``model`` (a dl.Transformer with learned positions, on the CPU) written in PyTorch:
    nn.Embedding + a position table, pre-LayerNorm blocks (LayerNorm, q/k/v/o nn.Linear with
    biases, scaled_dot_product_attention with is_causal=True, LayerNorm, Linear-GELU(tanh)-Linear),
    LayerNorm, Linear head: ids (B, T) -> logits (B, T, V). Its weights are copied from
    ``model``'s (Linear weights transposed: dlcourse keeps W as (in, out)), every one of them
    (load_state_dict(strict=True)), so both start from the same point."""
    nn, F = torch.nn, torch.nn.functional
    V, D, T = model.vocab, model.d_model, model.max_len
    heads = model.blocks.layers[0].attention.heads
    hidden = model.blocks.layers[0].layers[1].block.layers[1].hidden

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
            self.fc1, self.fc2 = nn.Linear(D, hidden), nn.Linear(hidden, D)

        def forward(self, x):                                          # (B, T, D)
            B, T, _ = x.shape
            a = self.ln1(x)
            q, k, v = (lin(a).view(B, T, heads, D // heads).transpose(1, 2)
                       for lin in (self.q, self.k, self.v))             # (B, H, T, d)
            att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(att.transpose(1, 2).reshape(B, T, D))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(V, D)
            self.position = nn.Parameter(torch.zeros(T, D))
            self.blocks = nn.ModuleList(Block() for _ in model.blocks.layers)
            self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, V)

        def forward(self, idx):                                        # (B, T) int64
            h = self.embedding(idx) + self.position[:idx.shape[1]]
            for block in self.blocks:
                h = block(h)
            return self.head(self.norm(h))                             # (B, T, V)

    lm = LM()
    p = {key: dl.to_device(value, "cpu") for key, value in model.params.items()}
    state = {"embedding.weight": p["embedding.W"], "position": p["position.W"],
             "norm.weight": p["norm.gamma"], "norm.bias": p["norm.beta"],
             "head.weight": p["head.W"].T, "head.bias": p["head.b"]}
    for i in range(len(model.blocks.layers)):
        att, ff = f"blocks.{i}.0.block.1.", f"blocks.{i}.1.block.1."
        for n, norm in ((1, f"blocks.{i}.0.block.0."), (2, f"blocks.{i}.1.block.0.")):
            state[f"blocks.{i}.ln{n}.weight"] = p[norm + "gamma"]
            state[f"blocks.{i}.ln{n}.bias"] = p[norm + "beta"]
        for n in "qkvo":
            state[f"blocks.{i}.{n}.weight"] = p[f"{att}W{n}"].T
            state[f"blocks.{i}.{n}.bias"] = p[f"{att}b{n}"]
        for n in ("fc1", "fc2"):
            state[f"blocks.{i}.{n}.weight"] = p[f"{ff}{n}.W"].T
            state[f"blocks.{i}.{n}.bias"] = p[f"{ff}{n}.b"]
    if len(state) != len(p):
        raise ValueError(f"torch_lm copies {len(state)} arrays, but the dlcourse model has "
                         f"{len(p)}: {sorted(p)}")
    lm.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(a)) for k, a in state.items()},
                       strict=True)
    return lm


def torch_lm_step(torch, lm, s, device):
    """The same step in PyTorch eager on ``device``: step(x, y) -> loss.item() (waits, as
    dlcourse's), cross-entropy over the (B·T, V) rows, torch.optim.AdamW with the same lr,
    betas, eps and weight decay."""
    lm.to(device).train()
    opt = torch.optim.AdamW(lm.parameters(), lr=s["lr"], betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=s["weight_decay"])

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        logits = lm(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.item()
    return step


def _round_clock(cp, torch, on_gpu):
    """fn -> seconds of one call of fn: CUDA events on the current stream of CuPy (torch None)
    or of PyTorch, around the call; perf_counter on the CPU (on_gpu False)."""
    if not on_gpu:
        def seconds(fn):
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
    elif torch is None:
        start, end = cp.cuda.Event(), cp.cuda.Event()

        def seconds(fn):
            start.record()
            fn()
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) / 1e3
    else:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

        def seconds(fn):
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
    return seconds


def _tokens_per_second(step, batches, s, rounds, seconds):
    """Warm ``step`` up for s["warmup"] steps, then time ``rounds`` rounds of s["steps"] steps
    each, cycling through ``batches``: tokens per second (B·T per step) of the median round,
    and the losses of the timed steps' first and last."""
    for i in range(s["warmup"]):
        step(*batches[i % len(batches)])
    losses, times = [], []

    def round_of_steps():
        for i in range(s["steps"]):
            losses.append(step(*batches[i % len(batches)]))

    for _ in range(rounds):
        times.append(seconds(round_of_steps))
    tokens = s["batch_size"] * s["context"] * s["steps"]
    median_s = statistics.median(times)
    return {"tokens_per_s": tokens / median_s, "median_round_s": median_s,
            "min_round_s": min(times), "rounds": rounds, "steps_per_round": s["steps"],
            "ms_per_step": median_s / s["steps"] * 1e3, "loss_first_timed": losses[0],
            "loss_last_timed": losses[-1]}


def section_transformer_train(cp, cfg, out, torch, torch_note, sizes=None):
    """The character transformer of `dlcourse train --model transformer --dataset text`
    trained with the library's step on CuPy (dlcourse_lm_step) against the same model in
    PyTorch eager on the same GPU (torch_lm, torch_lm_step): tokens per second over
    cfg["lm_rounds"] rounds of TRANSFORMER_TRAIN["steps"] steps after warm-up, both on the same
    batches of the course's text (dl.data.load_text, on the device before timing), FP32 (TF32
    off). Checked before timing: the two models have the same number of parameters (copied
    weights) and their first losses agree (LOSS_TOL). ``cp``: CuPy, or NumPy to run the
    whole section on the CPU (PyTorch on the CPU, perf_counter clocks): how the tests run it,
    with ``sizes`` overriding TRANSFORMER_TRAIN. Estimated (not measured) at 10-40 s on an
    H100: see docs/gpu_check.md."""
    s = dict(TRANSFORMER_TRAIN, **(sizes or {}))
    on_gpu = cp is not np
    device, torch_device = ("gpu", "cuda") if on_gpu else ("cpu", "cpu")
    rounds = cfg["lm_rounds"]
    text = dl.data.load_text()
    T, B = s["context"], s["batch_size"]
    model = dl.Transformer(text.vocab_size, s["d_model"], s["heads"], s["layers"], max_len=T,
                           seed=s["seed"])
    lm = torch_lm(torch, model) if torch is not None else None    # weights copied, on the CPU
    out.update(settings=s, vocab=text.vocab_size, text=text.source, torch_note=torch_note,
               tokens_per_step=B * T, dlcourse_parameters=model.num_parameters(),
               optimizer="AdamW", precision="fp32")
    say(f"\n[9] the character transformer's training step (d_model {s['d_model']}, {s['heads']} "
        f"heads, {s['layers']} layers, context {T}, vocabulary {text.vocab_size}), batch {B}, "
        f"AdamW lr {s['lr']:g}, FP32: dlcourse on {'CuPy' if on_gpu else 'NumPy'} vs PyTorch eager")
    batches = lm_batches(text.train, B, T, s["batches"], s["seed"])
    step = dlcourse_lm_step(model, s, device)
    dl_batches = [tuple(dl.to_device(a, device) for a in pair) for pair in batches]
    first = step(*dl_batches[0])                     # compiles the kernels; checked below
    out["dlcourse"] = _tokens_per_second(step, dl_batches, s, rounds, _round_clock(cp, None, on_gpu))
    out["dlcourse"]["first_loss"] = first
    msg = (f"  dlcourse: {out['dlcourse_parameters']:,} parameters, "
           f"{out['dlcourse']['tokens_per_s']:10,.0f} tokens/s ({out['dlcourse']['ms_per_step']:.2f} ms/step)")
    if lm is None:
        say(msg + f"; PyTorch: {torch_note}")
        return
    out["torch_parameters"] = sum(p.numel() for p in lm.parameters())
    tstep = torch_lm_step(torch, lm, s, torch_device)
    t_batches = [tuple(torch.from_numpy(a).to(torch_device) for a in pair) for pair in batches]
    t_first = tstep(*t_batches[0])
    out["first_losses"] = {"dlcourse": first, "torch": t_first}
    problem = None
    if out["torch_parameters"] != out["dlcourse_parameters"]:
        problem = (f"PyTorch's model has {out['torch_parameters']:,} parameters, dlcourse's "
                   f"{out['dlcourse_parameters']:,}: not the same model")
    elif not abs(first - t_first) <= LOSS_TOL * abs(first):
        problem = f"first losses differ: dlcourse {first:.6f}, PyTorch {t_first:.6f}"
    if problem:
        out["torch"] = {"error": problem + "; not timed"}
        say(msg + f"\n  PyTorch: {problem}; not timed")
        return
    out["torch"] = _tokens_per_second(tstep, t_batches, s, rounds, _round_clock(cp, torch, on_gpu))
    out["dlcourse_over_torch"] = out["dlcourse"]["tokens_per_s"] / out["torch"]["tokens_per_s"]
    say(msg)
    say(f"  PyTorch:  {out['torch_parameters']:,} parameters, "
        f"{out['torch']['tokens_per_s']:10,.0f} tokens/s ({out['torch']['ms_per_step']:.2f} ms/step)"
        f"; first losses {first:.5f} and {t_first:.5f}")
    say(f"  dlcourse/PyTorch tokens per second: {out['dlcourse_over_torch']:.2f}x (below 1: slower); "
        f"after the same {s['warmup'] + 1 + rounds * s['steps']} steps on the same batches "
        f"their losses are {out['dlcourse']['loss_last_timed']:.5f} and "
        f"{out['torch']['loss_last_timed']:.5f}")


LOSS_TOL = 1e-4          # the first losses of the two models, same weights and batch: relative


def plan_transformer_train():
    """The dry run's lines for transformer_train: the model, built on the CPU to count its
    parameters (and PyTorch's, where PyTorch is importable), and the steps it would time."""
    s = TRANSFORMER_TRAIN
    text = dl.data.load_text()
    model = dl.Transformer(text.vocab_size, s["d_model"], s["heads"], s["layers"],
                           max_len=s["context"], seed=s["seed"])
    lines = [f"[9] transformer_train: dl.Transformer(vocab {text.vocab_size} here, d_model "
             f"{s['d_model']}, {s['heads']} heads, {s['layers']} layers, context {s['context']}), "
             f"batch {s['batch_size']} ({s['batch_size'] * s['context']} tokens per step), "
             f"AdamW lr {s['lr']:g}, weight decay {s['weight_decay']}, FP32",
             f"    dlcourse: {model.num_parameters():,} parameters; {s['warmup']} warm-up steps, "
             f"then {FULL['lm_rounds']} rounds ({QUICK['lm_rounds']} with --quick) of "
             f"{s['steps']} timed steps on {s['batches']} batches already on the GPU"]
    try:
        import torch
    except ImportError:
        return lines + ["    PyTorch: not importable here, so its parameters are not counted"]
    lm = torch_lm(torch, model)
    lines.append(f"    PyTorch eager, the same weights: "
                 f"{sum(p.numel() for p in lm.parameters()):,} parameters; the same steps, "
                 f"after its first loss is checked against dlcourse's (relative {LOSS_TOL:.0e})")
    return lines


# ======================================================================================
# 7-8. The hand-written kernels closest to the hardware (issue 43): only with --sections
# ======================================================================================
#: The sections main() runs only when --sections names them (the check runs them in a step of
#: their own, benchmarks/gpu_check.sh), with the problem sizes they use.
KERNEL_SECTIONS = ("tensor_cores", "flash_memory")
TENSOR_CORES_N = 4096                         # C = A @ B at 4096 x 4096 x 4096
FLASH_MEMORY_SHAPE = dict(N=1, H=8, d=64, T=(512, 1024, 2048, 4096, 8192, 16384),
                          causal_T=(1024, 4096), wmma_T=(1024, 2048, 4096, 8192, 16384),
                          target_s=0.25)
WMMA_TOL = 1e-2          # flash_attention_wmma's error against FP32 (P is rounded to FP16)


def _no_spills(file, name):
    """The compiled kernel's local memory per thread, in bytes: 0 unless it spills registers."""
    return int(K.get_kernel(file, name).local_size_bytes)


def section_tensor_cores(cp, cfg, out):
    """matmul_wmma (FP16 in, FP32 accumulated) against cuBLAS FP16 (cp.matmul on float16), and
    matmul_warptile against cuBLAS FP32 (TF32 off), at TENSOR_CORES_N cubed. Each kernel is
    checked against its cuBLAS product first and its registers must not spill."""
    n = TENSOR_CORES_N
    flops = 2 * n ** 3
    out.update(n=n, flops=flops)
    say(f"\n[7] tensor cores and warp tiling, {n}x{n}x{n}: matmul_wmma vs cuBLAS FP16, "
        f"matmul_warptile vs cuBLAS FP32")
    A, B = _matmul_operands(cp, n)
    # FP16: cuBLAS returns float16 (its sums are in FP32 on tensor cores), the kernel float32.
    A16, B16 = A.astype(cp.float16), B.astype(cp.float16)
    C16 = cp.matmul(A16, B16)
    t = time_cuda(cp, lambda: cp.matmul(A16, B16, out=C16), cfg["target_s"])
    out["cublas_fp16"] = dict(t, tflops=flops / (t["median_ms"] / 1e3) / 1e12)
    ref32, out["cublas_fp32"] = _cublas_fp32(cp, A, B, cfg["target_s"])
    pairs = [("wmma", lambda: K.matmul_wmma(A16, B16), C16.astype(cp.float32), "cublas_fp16",
              "matmul_wmma.cu", 1e-2),
             ("warptile", lambda: K.matmul_warptile(A, B), ref32, "cublas_fp32",
              "matmul_warptile.cu", 1e-4)]
    for name, fn, ref, base, file, tol in pairs:
        C = fn()                                      # compiles on first call
        err = rel_err(cp, C, ref)
        entry = out[name] = {"launch": str(K.launch_config(name, n, n, n)),
                             f"max_rel_err_vs_{base}": err,
                             "local_size_bytes": _no_spills(file, f"matmul_{name}")}
        if not err < tol or entry["local_size_bytes"]:
            entry["error"] = (f"wrong result: max relative error {err:.2e} against {base}"
                              if not err < tol else
                              f"spills: {entry['local_size_bytes']} bytes of local memory per thread")
            say(f"  {name}: {entry['error']}; not timed")
            continue
        t = time_cuda(cp, fn, cfg["target_s"], warmup=1)
        entry.update(t, tflops=flops / (t["median_ms"] / 1e3) / 1e12,
                     share_of_cublas=out[base]["median_ms"] / t["median_ms"])
        say(f"  matmul_{name:9s} {t['median_ms']:8.3f} ms {entry['tflops']:7.1f} TFLOP/s "
            f"{entry['share_of_cublas']:6.1%} of {base} ({out[base]['tflops']:.1f} TFLOP/s); "
            f"no spills")
        del C
    cp.get_default_memory_pool().free_all_blocks()


def naive_attention(cp, q, k, v, causal=False):
    """softmax(q k^T / sqrt(d)) v with the scores S and probabilities P written out, (B, T, T)
    each, and both products on cuBLAS (cp.matmul). q, k, v: (B, T, d) float32. causal: row i
    sees keys j <= i (a (T, T) bias of -inf above the diagonal added to S)."""
    S = cp.matmul(q, k.transpose(0, 2, 1))
    S *= np.float32(1.0 / np.sqrt(q.shape[-1]))
    if causal:
        T = S.shape[-1]
        S += cp.triu(cp.full((T, T), -np.inf, dtype=np.float32), 1)
    S -= S.max(axis=-1, keepdims=True)
    P = cp.exp(S, out=S)
    P /= P.sum(axis=-1, keepdims=True)
    return cp.matmul(P, v)


def _peak_bytes(cp, fn):
    """Bytes CuPy's pool holds after one call of fn, beyond what it held before: the pool keeps
    every block it allocated until free_all_blocks(), so this is the call's high-water mark
    (an upper bound: a freed block reused for a smaller array counts whole)."""
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.total_bytes()
    result = fn()
    cp.cuda.get_current_stream().synchronize()
    peak = pool.total_bytes() - before
    del result
    pool.free_all_blocks()
    return peak


def _torch_peak_bytes(torch, fn):
    """Bytes PyTorch's allocator had in use at most during one call of fn, beyond what it
    held before (torch.cuda.max_memory_allocated after reset_peak_memory_stats)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    result = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del result
    torch.cuda.empty_cache()
    return peak


def _sdpa(torch, q, k, v, causal, flash_backend=False):
    """PyTorch's scaled_dot_product_attention on q, k, v (torch tensors (N, H, T, d));
    flash_backend=True: only its FlashAttention backend (FP16/BF16), an error where it cannot."""
    F = torch.nn.functional
    if not flash_backend:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _check_and_time(cp, torch, name, fn, want, tol, target_s, err_key="max_rel_err_vs_naive"):
    """One run of a flash_memory case: fn's result (a CuPy array or a torch tensor) checked
    against ``want`` (max relative error at most tol, kept under err_key; want None: fn's is
    the reference), then timed and its peak memory measured, each with its own library's
    events and allocator. Returns (entry, result as CuPy): the entry holds an "error" instead
    when it failed."""
    on_torch = name.startswith("torch")
    try:
        result = fn()
        got = cp.asarray(result.contiguous()) if on_torch else result
        err = 0.0 if want is None else rel_err(cp, got, want)
        if err > tol:
            return {"error": f"max relative error {err:.1e} against the reference "
                             f"(allowed {tol:.0e})"}, None
        if on_torch:
            t = time_torch(torch, fn, target_s, warmup=1)
            t["peak_bytes"] = _torch_peak_bytes(torch, fn)
        else:
            t = time_cuda(cp, fn, target_s, warmup=1)
            t["peak_bytes"] = _peak_bytes(cp, fn)
        t[err_key] = err
        return t, got
    except Exception as err:                     # naive runs out of memory first
        return {"error": f"{type(err).__name__}: {err}"[:200]}, None


def _flash_cell(name, entry):
    """The printed cell of one run: its time and memory, or why it has none."""
    if "median_ms" in entry:
        return f"{name} {entry['median_ms']:8.3f} ms {entry['peak_bytes'] / 2**20:8.1f} MiB"
    return f"{name}: {entry['error'][:60]}"


def section_flash_memory(cp, cfg, out, torch=None, torch_note=None):
    """The FlashAttention forward kernel against naive attention (naive_attention: scores in
    memory, cuBLAS products) and PyTorch's scaled_dot_product_attention, FP32, N x H problems
    of T x d for each T of FLASH_MEMORY_SHAPE, and causal for each of its causal_T: time, peak
    memory (CuPy's pool; PyTorch's allocator for SDPA), and the kernel's spills. Then, where
    dl.kernels has it, flash_attention_wmma (FP16 in, FP32 out, tensor cores) against SDPA in
    FP16 on its FlashAttention backend, for each of wmma_T, both checked against FP32 naive
    attention of the same FP16 inputs. Without PyTorch (torch None) the SDPA runs are left
    out and torch_note says why."""
    S = FLASH_MEMORY_SHAPE
    N, H, d, target_s = S["N"], S["H"], S["d"], S["target_s"]
    out.update(N=N, H=H, d=d, cases={}, torch_note=torch_note)
    kname = f"flash_attention_forward<{K.flash_head_dim(d)}>"
    out["local_size_bytes"] = _no_spills("flash_attention_forward.cu", kname)
    say(f"\n[8] FlashAttention kernel vs naive attention (S in memory, cuBLAS) and PyTorch SDPA, "
        f"N={N} x H={H} x d={d}, FP32; {kname}: {out['local_size_bytes']} bytes of local "
        f"memory per thread")
    if torch is None:
        say(f"  note: {torch_note}: the PyTorch SDPA runs are left out")
    gen = np.random.default_rng(0)
    cases = [(T, False) for T in S["T"]] + [(T, True) for T in S["causal_T"]]
    for T, causal in cases:
        q, k, v = (cp.asarray(gen.standard_normal((N, H, T, d)).astype(np.float32)) for _ in range(3))
        flat = [a.reshape(N * H, T, d) for a in (q, k, v)]
        entry = out["cases"][f"T={T}{' causal' if causal else ''}"] = {
            "T": T, "causal": causal, "flops": 4 * N * H * T * T * d * (0.5 if causal else 1.0)}
        runs = [("naive", lambda: naive_attention(cp, *flat, causal=causal).reshape(N, H, T, d)),
                ("flash_kernel", lambda: K.flash_attention_forward(q, k, v, causal)[0])]
        if torch is not None:
            tq, tk, tv = (torch.as_tensor(a, device="cuda") for a in (q, k, v))
            runs.append(("torch_sdpa_fp32", lambda: _sdpa(torch, tq, tk, tv, causal)))
        want, cells = None, []
        for name, fn in runs:
            if want is None and name != "naive":        # nothing to check it against: not timed
                entry[name] = {"error": "not checked: the naive result is missing"}
            else:
                entry[name], got = _check_and_time(cp, torch, name, fn, want, 1e-4, target_s)
                want = got if name == "naive" else want
            cells.append(_flash_cell(name, entry[name]))
            cp.get_default_memory_pool().free_all_blocks()
        kernel_ms = entry["flash_kernel"].get("median_ms")
        for base in ("naive", "torch_sdpa_fp32"):
            if kernel_ms and "median_ms" in entry.get(base, {}):
                key = "speedup_over_naive" if base == "naive" else "speedup_over_torch_sdpa_fp32"
                entry[key] = entry[base]["median_ms"] / kernel_ms
        ratios = [f"{entry[key]:.2f}x {what}" for key, what in (
            ("speedup_over_naive", "naive"), ("speedup_over_torch_sdpa_fp32", "SDPA"))
            if key in entry]
        say(f"  T={T:6d}{' causal' if causal else '       '}   " + "   ".join(cells)
            + (f"   kernel {', '.join(ratios)}" if ratios else ""))
        if torch is not None:
            torch.cuda.empty_cache()
        cp.get_default_memory_pool().free_all_blocks()
    out["wmma"] = _flash_wmma_lines(cp, torch, torch_note, gen)


def _flash_wmma_lines(cp, torch, torch_note, gen):
    """flash_attention_wmma (where dl.kernels has it) against PyTorch's SDPA in FP16 on its
    FlashAttention backend, N x H problems of T x 64 for each T of FLASH_MEMORY_SHAPE's
    wmma_T, not causal: each checked against naive_attention in FP32 on the same FP16 inputs
    (at most WMMA_TOL), then timed, with its peak memory. Returns the section's "wmma" entry."""
    S = FLASH_MEMORY_SHAPE
    N, H, d, target_s = S["N"], S["H"], S["d"], S["target_s"]
    wmma = getattr(K, "flash_attention_wmma", None)
    if wmma is None:
        say("  flash_attention_wmma: not in dl.kernels, so its lines are left out")
        return {"not_measured": "dl.kernels has no flash_attention_wmma"}
    res = {"cases": {}, "tolerance": WMMA_TOL,
           "note": "errors against naive_attention in FP32 on the same FP16 inputs"}
    try:
        res["local_size_bytes"] = _no_spills("flash_attention_wmma.cu", "flash_attention_wmma")
    except Exception as err:
        res["local_size_bytes"] = f"unknown ({type(err).__name__}: {err})"[:200]
    say(f"  flash_attention_wmma (FP16 in, FP32 out) vs PyTorch SDPA FP16 (flash backend), "
        f"N={N} x H={H} x d={d}; {res['local_size_bytes']} bytes of local memory per thread")
    for T in S["wmma_T"]:
        q16, k16, v16 = (cp.asarray(gen.standard_normal((N, H, T, d)).astype(np.float16))
                         for _ in range(3))
        flat16 = [a.reshape(N * H, T, d) for a in (q16, k16, v16)]
        entry = res["cases"][f"T={T}"] = {"T": T, "flops": 4 * N * H * T * T * d}
        try:
            want = naive_attention(cp, *(a.astype(cp.float32) for a in flat16))
        except Exception as err:
            entry["error"] = f"no FP32 reference: {type(err).__name__}: {err}"[:200]
            say(f"  T={T:6d}   {entry['error']}; not timed")
            continue
        runs = [("flash_attention_wmma", lambda: wmma(*flat16, causal=False))]
        if torch is not None:
            tq, tk, tv = (torch.as_tensor(a, device="cuda") for a in (q16, k16, v16))
            runs.append(("torch_sdpa_fp16_flash",
                         lambda: _sdpa(torch, tq, tk, tv, False, flash_backend=True)
                         .reshape(N * H, T, d)))
        cells = []
        for name, fn in runs:
            entry[name], _ = _check_and_time(cp, torch, name, fn, want, WMMA_TOL, target_s,
                                             "max_rel_err_vs_fp32")
            cells.append(_flash_cell(name, entry[name]))
            cp.get_default_memory_pool().free_all_blocks()
        if "median_ms" in entry["flash_attention_wmma"] and \
                "median_ms" in entry.get("torch_sdpa_fp16_flash", {}):
            entry["speedup_over_torch_sdpa_fp16_flash"] = (
                entry["torch_sdpa_fp16_flash"]["median_ms"] / entry["flash_attention_wmma"]["median_ms"])
            cells.append(f"wmma {entry['speedup_over_torch_sdpa_fp16_flash']:.2f}x SDPA")
        errors = ", ".join(f"{name} {entry[name]['max_rel_err_vs_fp32']:.1e}" for name, _ in runs
                           if "max_rel_err_vs_fp32" in entry[name])
        say(f"  T={T:6d}   " + "   ".join(cells) + (f"   (errors: {errors})" if errors else ""))
        if torch is not None:
            torch.cuda.empty_cache()
        cp.get_default_memory_pool().free_all_blocks()
    if torch is None:
        res["torch_note"] = torch_note
    return res


def plan_sections(sections):
    """What --dry-run prints for the sections that have a plan (KERNEL_SECTIONS and
    transformer_train): each run, its sizes, launch geometry and the bytes it will ask for,
    computed from the shapes on the CPU (no GPU: nothing is run or measured)."""
    lines = []
    if "tensor_cores" in sections:
        n = TENSOR_CORES_N
        lines.append(f"[7] tensor_cores: {n}x{n}x{n}, operands {2 * n * n * 4 / 2**20:.0f} MiB FP32 "
                     f"+ {2 * n * n * 2 / 2**20:.0f} MiB FP16")
        for name, base in (("wmma", "cuBLAS FP16 (cp.matmul on float16)"),
                           ("warptile", "cuBLAS FP32 (cp.matmul, TF32 off)")):
            lines.append(f"    matmul_{name} vs {base}: {K.launch_config(name, n, n, n)}, "
                         f"checked, then local_size_bytes == 0, then timed")
    if "flash_memory" in sections:
        lines += _plan_flash_memory()
    if "transformer_train" in sections:
        lines += plan_transformer_train()
    return lines


def _plan_flash_memory():
    S = FLASH_MEMORY_SHAPE
    N, H, d = S["N"], S["H"], S["d"]
    lines = [f"[8] flash_memory: N={N} x H={H} x d={d}, FP32; "
             f"flash_attention_forward<{K.flash_head_dim(d)}>: local_size_bytes == 0 checked; "
             f"each run checked against naive, then timed (target {S['target_s']} s) and its "
             f"peak memory taken"]
    for T in S["T"]:
        scores = N * H * T * T * 4
        lines.append(f"    T={T:6d}: naive holds S (= P) of {scores / 2**20:9.1f} MiB; flash "
                     f"{K.launch_config('flash_attention_forward', N * H, T, T, d)}, "
                     f"q, k, v, out {4 * N * H * T * d * 4 / 2**20:.1f} MiB")
    lines.append("    PyTorch SDPA FP32 (torch.nn.functional.scaled_dot_product_attention) at each "
                 "T above: time, torch.cuda.max_memory_allocated (left out without PyTorch)")
    lines.append(f"    causal (is_causal=True; naive masked) at T = "
                 f"{', '.join(map(str, S['causal_T']))}: naive, the kernel and SDPA FP32")
    if getattr(K, "flash_attention_wmma", None) is None:
        lines.append("    flash_attention_wmma: not in dl.kernels, so its lines are left out")
        return lines
    lines.append(f"    flash_attention_wmma (FP16 in, FP32 out) vs PyTorch SDPA FP16, flash backend "
                 f"(sdpa_kernel(SDPBackend.FLASH_ATTENTION)), not causal; each checked against "
                 f"naive FP32 of the same FP16 inputs (error <= {WMMA_TOL:.0e}); "
                 f"local_size_bytes taken")
    for T in S["wmma_T"]:
        try:
            launch = K.launch_config("flash_attention_wmma", N * H, T)
        except Exception as err:                       # its geometry not registered (yet)
            launch = f"launch geometry unknown ({type(err).__name__})"
        lines.append(f"    T={T:6d}: wmma {launch}, q, k, v {3 * N * H * T * d * 2 / 2**20:.1f} MiB "
                     f"FP16, out {N * H * T * d * 4 / 2**20:.1f} MiB FP32")
    return lines


# ======================================================================================
# Environment, output, plot
# ======================================================================================
def environment(cp, torch):
    info = dl.device_info("gpu")
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    env = {
        "device": info["name"], "compute_capability": info["compute_capability"],
        "memory_total_gb": info["memory_total_gb"], "sm_count": props["multiProcessorCount"],
        "driver": info["driver_version"], "cuda_runtime": info["cuda_runtime_version"],
        "cupy": cp.__version__, "CUPY_TF32": os.environ.get("CUPY_TF32"),
        "torch": None, "torch_cuda": None, "numpy": np.__version__,
        "python": platform.python_version(), "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "blas": info.get("blas"), "blas_threads": info.get("blas_threads"),
        "dlcourse": getattr(dl, "__version__", None),
    }
    try:
        major, minor = cp.cuda.nvrtc.getVersion()
        env["nvrtc"] = f"{major}.{minor}"
    except Exception:
        pass
    if torch is not None:
        env.update(torch=torch.__version__, torch_cuda=torch.version.cuda,
                   torch_allow_tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                   torch_allow_tf32_cudnn=torch.backends.cudnn.allow_tf32,
                   torch_cudnn_benchmark=torch.backends.cudnn.benchmark)
    env["git_commit"] = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    # None where the code is not a git checkout (a copy of the tree): unknown, not "no changes"
    env["git_uncommitted_changes"] = None if status is None else bool(status)
    return env


def _git(*args):
    """git's output in ROOT, stripped; None when git is missing or fails (not a checkout)."""
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except Exception:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def save(results, path, complete):
    """Write results as JSON, atomically (a reader sees the previous file or the whole new one).
    ``complete`` says whether every section asked for has run. Until then they go to
    ``<name>.partial.json`` beside ``path``, so a run cut short never replaces the complete
    results of an earlier run; the complete ones go to ``path``, and the partial file goes."""
    partial = path.with_name(f"{path.stem}.partial.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path if complete else partial, "w", encoding="utf-8") as f:
        f.write(json.dumps({**results, "complete": complete}, indent=2, default=str) + "\n")
    if complete:
        partial.unlink(missing_ok=True)


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    fig.suptitle(f"dlcourse GPU suite — {results['environment']['device']} "
                 f"({results['date'][:10]}{', quick' if results['quick'] else ''})")

    def empty(ax, title, why="not measured"):
        ax.set_title(title)
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()

    mm = results.get("matmul", {})
    ax = axes[0, 0]
    timed = {k: v for k, v in mm.get("kernels", {}).items() if "share_of_cublas_fp32" in v}
    if timed:
        # Horizontal bars, top to bottom: the regblock builds have long names.
        names = list(timed) + ["cuBLAS FP32"]
        shares = [100 * v["share_of_cublas_fp32"] for v in timed.values()] + [100.0]
        bars = ax.barh(names, shares, color=["#9ecae1"] * len(timed) + ["#3182bd"])
        ax.bar_label(bars, fmt="%.1f%%", fontsize=7)
        ax.invert_yaxis()
        ax.tick_params(axis="y", labelsize=7)
        tf32 = mm.get("cublas_tf32", {})
        if "speedup_over_fp32" in tf32:
            ax.axvline(100 * tf32["speedup_over_fp32"], ls="--", color="gray")
            ax.text(100 * tf32["speedup_over_fp32"], len(names) - 1, " cuBLAS TF32", va="center",
                    color="gray")
        ax.set_xlabel("% of cuBLAS FP32 speed")
        ax.set_title(f"matmul {mm['n']}³ FP32: the kernel ladder")
    else:
        empty(ax, "matmul ladder", mm.get("error", "not measured"))

    ew = results.get("elementwise", {})
    ax = axes[0, 1]
    timed = {k: v for k, v in ew.get("kernels", {}).items() if "fraction_of_copy" in v}
    if timed:
        names = list(timed)
        bars = ax.barh(names, [100 * v["fraction_of_copy"] for v in timed.values()],
                       color=["#31a354" if "(fused)" in n or "gather" in n else "#a1d99b" for n in names])
        ax.bar_label(bars, fmt="%.0f%%")
        ax.invert_yaxis()
        ax.set_xlabel(f"% of copy bandwidth ({ew['copy']['bandwidth_gbs']:.0f} GB/s), useful bytes")
        ax.set_title(f"fused vs unfused, {ew['n_elements'] / 2**20:.0f}M elements")
    else:
        empty(ax, "elementwise kernels", ew.get("error", "not measured"))

    tr = results.get("training", {})
    ax = axes[1, 0]
    cases = {k: v for k, v in tr.get("cases", {}).items() if "dlcourse" in v}
    if cases:
        xs = np.arange(len(cases))
        bars = [("dlcourse_plain", "dlcourse, plain CuPy"),
                ("dlcourse", "dlcourse (its kernels: the default)"),
                ("dlcourse_fused", "dlcourse, dl.fuse'd"), ("torch", "PyTorch")]
        for i, (key, label) in enumerate(bars):
            ms = [(v.get(key) or {}).get("median_ms", np.nan) for v in cases.values()]
            if not all(np.isnan(ms)):
                ax.bar(xs + 0.2 * (i - 1.5), ms, 0.2, label=label)
        g = tr.get("cuda_graph", {})
        if "graph" in g:
            ax.axhline(g["graph"]["median_ms"], ls="--", color="gray",
                       label=f"dlcourse MLP b{g['batch']} as a CUDA graph")
        ax.set_xticks(xs, list(cases))
        ax.set_yscale("log")
        ax.set_ylabel("ms per training step (log scale)")
        ax.set_title("training step on the GPU")
        ax.legend()
    else:
        empty(ax, "training step", tr.get("error", "not measured"))

    cg = results.get("cpu_vs_gpu", {})
    ax = axes[1, 1]
    cases = cg.get("cases", {})
    if cases:
        b = [v["batch"] for v in cases.values()]
        ax.loglog(b, [v["gpu"]["median_ms"] for v in cases.values()], "o-", label="GPU (CuPy)", base=2)
        ax.loglog(b, [v["cpu"]["median_ms"] for v in cases.values()], "s-", label="CPU (NumPy)", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel("ms per training step")
        ax.set_title("MLP 784-512-512-10 step: GPU vs CPU")
        ax.legend()
    else:
        empty(ax, "GPU vs CPU", cg.get("error", "not measured"))

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                    help="folder for <device>.json and <device>.png (default: benchmarks/results)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)}")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    ap.add_argument("--dry-run", action="store_true",
                    help="print what the chosen sections would run and exit: no GPU needed, "
                         "nothing measured or written")
    ap.add_argument("--tf32-child", type=int, metavar="N", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.tf32_child:
        tf32_child(args.tf32_child)
        return 0
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS + KERNEL_SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from "
                 f"{', '.join(SECTIONS + KERNEL_SECTIONS)}")
    if args.dry_run:
        say(f"dry run: sections {', '.join(sections)}{' (quick)' if args.quick else ''}; "
            f"nothing is run, measured or written")
        for line in plan_sections(sections):
            say(line)
        return 0
    if not gpu_available():
        say(f"No usable GPU, so nothing was measured and nothing was written. {gpu_problem()}")
        return 0

    cp = require_cupy()
    torch, torch_note = _load_torch(args)
    cfg = QUICK if args.quick else FULL
    results = {"suite": "dlcourse benchmarks/gpu_suite.py", "quick": args.quick,
               "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "environment": environment(cp, torch), "config": cfg}
    env = results["environment"]
    say(f"GPU: {env['device']} (CC {env['compute_capability']}, {env['sm_count']} SMs, "
        f"{env['memory_total_gb']} GiB), driver {env['driver']}, CUDA runtime {env['cuda_runtime']}, "
        f"CuPy {env['cupy']}, PyTorch {env['torch']}, CUPY_TF32={env['CUPY_TF32']}")

    # The JSON is written (atomically) after every section, to <device>.partial.json with
    # "complete": false until the last: a run cut short (a time limit, a crash) still leaves
    # what it measured, marked as partial, and an earlier complete file stays as it was.
    path = Path(args.out) / f"{slug(env['device'])}.json"
    started = time.perf_counter()
    for i, name in enumerate(sections):
        out = results[name] = {}
        try:
            if name == "matmul":
                section_matmul(cp, cfg, out)
            elif name == "elementwise":
                section_elementwise(cp, cfg, out)
            elif name == "training":
                section_training(cp, cfg, out, torch, torch_note)
            elif name == "cpu_vs_gpu":
                section_cpu_vs_gpu(cp, cfg, out)
            elif name == "attention":
                section_attention(cp, cfg, out, torch, torch_note)
            elif name == "transformer_train":
                section_transformer_train(cp, cfg, out, torch, torch_note)
            elif name == "tensor_cores":
                section_tensor_cores(cp, cfg, out)
            elif name == "flash_memory":
                section_flash_memory(cp, cfg, out, torch, torch_note)
            else:
                section_precision(cp, cfg, out, torch, torch_note, results.get("matmul"))
        except Exception as err:   # keep what was measured; say what failed and why
            out["error"] = f"{type(err).__name__}: {err}"
            say(f"  section {name} stopped: {out['error']}")
            traceback.print_exc()
        cp.get_default_memory_pool().free_all_blocks()
        results["wall_s"] = time.perf_counter() - started
        save(results, path, complete=i == len(sections) - 1)

    say(f"\nwrote {path}")
    try:
        plot(results, path.with_suffix(".png"))
        say(f"wrote {path.with_suffix('.png')}")
    except Exception as err:
        say(f"plot not written: {type(err).__name__}: {err}")
    say(f"total {results['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
