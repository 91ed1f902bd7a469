"""The FlashAttention forward kernels, ``flash_attention_forward.cu`` (FP32) and
``flash_attention_wmma.cu`` (tensor cores), and their launch.

Introduced in notebook 16 (FlashAttention; issue 31). Read the ``.cu`` file's header first:
one thread block per tile of 64 query rows, the K and V tiles through shared memory, each
row's running max, sum and output in registers. Its NumPy (and CuPy array-code) version,
the one it must match, is ``dlcourse.flash_attention.flash_attention`` (and both must match
``dlcourse.attention.attention``). ``dl.flash_attention`` calls this wrapper for float32
CuPy arrays with d <= 64 (:func:`flash_kernel_takes`).

Beside it, on the tensor cores (issue 43): ``flash_attention_wmma`` (flash_attention_wmma.cu),
float16 q, k, v of head size 64, float32 output; S = Q Kᵀ and O += P V on 16x16x16 WMMA
fragments, the online softmax between them in float32. On NumPy arrays it returns its reference
``reference.flash_attention_fp16``, so it runs everywhere (as ``matmul_wmma`` does).
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import device_of, require_cupy
from . import reference
from ._build import LaunchConfig, ceil_div, check_gpu_array, geometry, get_kernel, launch_config

__all__ = ["flash_attention_forward", "flash_kernel_takes", "flash_head_dim", "FLASH_HEAD_DIMS",
           "FLASH_BR", "FLASH_BC", "flash_attention_wmma", "FLASH_WMMA_D"]

FILE = "flash_attention_forward.cu"
FLASH_BR, FLASH_BC = 64, 32           # the .cu file's FA_BR and FA_BC
FLASH_HEAD_DIMS = (16, 32, 64)        # the instantiated D: the smallest D >= d is used


def flash_head_dim(d: int) -> int:
    """The compiled head size D the kernel runs a head of size d with (d <= 64)."""
    for D in FLASH_HEAD_DIMS:
        if d <= D:
            return D
    raise ValueError(f"flash_attention_forward (the CUDA kernel) takes heads of size d <= "
                     f"{FLASH_HEAD_DIMS[-1]} (q and o are kept in registers), got d={d}. Use "
                     f"dl.flash_attention(..., use_kernel=False), the array code, or more heads.")


@geometry("flash_attention_forward")
def _flash_geometry(B, Tq, Tk, d):
    D = flash_head_dim(d)
    return LaunchConfig("flash_attention_forward", FILE, grid=(ceil_div(Tq, FLASH_BR), B, 1),
                        block=(FLASH_BR, 1, 1), static_shared_mem=2 * FLASH_BC * D * 4,
                        note=f"one block per {FLASH_BR} query rows of one (sample, head); "
                             f"K/V tiles of {FLASH_BC} rows, D={D}")


def flash_kernel_takes(q, k, v) -> bool:
    """Whether the kernel can take these (CuPy) arrays: float32, d <= 64, N*H <= 65535."""
    N, H, _, d = q.shape
    return (all(a.dtype == np.float32 for a in (q, k, v)) and d <= FLASH_HEAD_DIMS[-1]
            and 1 <= N * H <= 65535)


def flash_attention_forward(q, k, v, causal=False):
    """out, lse = FlashAttention's forward on the GPU. q: (N, H, Tq, d), k, v: (N, H, Tk, d),
    float32 CuPy arrays (copied first when not C-contiguous), d <= 64. Returns out
    (N, H, Tq, d) and lse (N, H, Tq), the log of each row's softmax denominator."""
    fn = "flash_attention_forward"
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_gpu_array(fn, name, a, ndim=4, dtypes=(np.float32,), contiguous=False)
    N, H, Tq, d = q.shape
    Tk = k.shape[2]
    if k.shape != v.shape or k.shape[:2] != (N, H) or k.shape[3] != d:
        raise ValueError(f"{fn}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k "
                         f"and v must be (N, H, Tk, d) with q's N, H and d.")
    if N * H > 65535:
        raise ValueError(f"{fn}: N * heads = {N * H} problems, but the grid's y dimension (one "
                         f"block row per problem) holds at most 65535.")
    cupy = require_cupy()
    q, k, v = (cupy.ascontiguousarray(a) for a in (q, k, v))
    out = cupy.empty((N, H, Tq, d), dtype=np.float32)
    lse = cupy.empty((N, H, Tq), dtype=np.float32)
    if out.size == 0:
        return out, lse
    cfg = launch_config("flash_attention_forward", N * H, Tq, Tk, d)
    kernel = get_kernel(cfg.file, f"flash_attention_forward<{flash_head_dim(d)}>")
    kernel(cfg.grid, cfg.block, (q, k, v, out, lse, np.int32(Tq), np.int32(Tk), np.int32(d),
                                 np.float32(1.0 / math.sqrt(d)), np.int32(bool(causal))),
           shared_mem=cfg.shared_mem)
    return out, lse


# --------------------------------------------------------------------------------------
# On the tensor cores: flash_attention_wmma.cu (FP16 in, FP32 out, d = 64)
# --------------------------------------------------------------------------------------
WMMA_FILE = "flash_attention_wmma.cu"
FLASH_WMMA_D = 64                     # the .cu file's FW_D: the one head size it is built for
_WMMA_ROWS, _WMMA_WARPS, _PAD_HALVES, _PAD_FLOATS = 64, 4, 8, 4   # FW_BR = FW_BC, FW_WARPS, pads


@geometry("flash_attention_wmma")
def _flash_wmma_geometry(B, T):
    rows, D, warps = _WMMA_ROWS, FLASH_WMMA_D, _WMMA_WARPS
    kv_tiles = 2 * rows * (D + _PAD_HALVES) * 2                     # Ks, Vs: halves
    per_warp = 16 * (rows + _PAD_FLOATS) * 4 + 16 * (rows + _PAD_HALVES) * 2   # Ss, Ps
    return LaunchConfig("flash_attention_wmma", WMMA_FILE, grid=(ceil_div(T, rows), B, 1),
                        block=(32 * warps, 1, 1), static_shared_mem=kv_tiles + warps * per_warp,
                        note=f"one block per {rows} query rows of one (sample, head), 16 per "
                             f"warp; K/V tiles of {rows} keys; WMMA fragments, d={D}")


def _check_wmma_operands(fn, q, k, v, on_gpu):
    """Assert what flash_attention_wmma needs (on either backend); return (B, T)."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        if on_gpu:
            check_gpu_array(fn, name, a, ndim=3, dtypes=(np.float16,), contiguous=False)
        elif a.ndim != 3 or a.dtype != np.float16:
            raise TypeError(f"{fn}: {name} must be a 3-D (B, T, d) float16 array, got shape "
                            f"{tuple(a.shape)} and dtype {a.dtype}; convert with "
                            f"{name}.astype(np.float16) (and fold the heads into B).")
    if not q.shape == k.shape == v.shape:
        raise ValueError(f"{fn}: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: "
                         f"all three must be (B, T, d) of one shape (this kernel has Tq = Tk; "
                         f"for a key/value cache use flash_attention_forward).")
    B, T, d = q.shape
    if d != FLASH_WMMA_D:
        raise ValueError(f"{fn}: heads of size d={FLASH_WMMA_D} only (the kernel's tiles are "
                         f"{FLASH_WMMA_D} wide: FW_D in {WMMA_FILE}), got d={d}. Choose the "
                         f"number of heads so that width / heads = {FLASH_WMMA_D}, or use "
                         f"flash_attention_forward (float32, any d <= 64).")
    if B > 65535:
        raise ValueError(f"{fn}: B = {B} problems, but the grid's y dimension (one block row "
                         f"per problem) holds at most 65535; split the batch.")
    return B, T


def flash_attention_wmma(q, k, v, causal=False):
    """out = softmax(q kᵀ / sqrt(64)) v on the tensor cores. q, k, v: (B, T, 64) float16
    (B = N * heads); returns out (B, T, 64) float32. causal: row i sees keys j <= i. Any T:
    the kernel zero-fills the tiles past T and masks those keys. S = Q Kᵀ and O += P V run on
    WMMA fragments (FP16 in, FP32 sums), the online softmax in FP32, P rounded to FP16 for
    the second product (flash_attention_wmma.cu). Inputs that are strided, or not 16-byte
    aligned, are copied first.

    On NumPy arrays it returns ``reference.flash_attention_fp16(q, k, v, causal)`` (same
    dtypes and shapes asked), what the kernel must compute, so code written with it runs on
    the CPU too."""
    fn = "flash_attention_wmma"
    on_gpu = any(device_of(a) == "gpu" for a in (q, k, v))
    B, T = _check_wmma_operands(fn, q, k, v, on_gpu)
    if not on_gpu:
        return reference.flash_attention_fp16(q, k, v, causal)
    cupy = require_cupy()
    q, k, v = (_compact(cupy, a) for a in (q, k, v))
    out = cupy.empty((B, T, FLASH_WMMA_D), dtype=cupy.float32)
    if out.size == 0:
        return out
    cfg = launch_config("flash_attention_wmma", B, T)
    kernel = get_kernel(cfg.file, "flash_attention_wmma")
    kernel(cfg.grid, cfg.block, (q, k, v, out, np.int32(T),
                                 np.float32(1.0 / math.sqrt(FLASH_WMMA_D)),
                                 np.int32(bool(causal))), shared_mem=cfg.shared_mem)
    return out


def _compact(cupy, a):
    """a itself when C-contiguous and 16-byte aligned (the kernel's 16-byte loads), else a
    new array (CuPy's allocations are aligned) holding a copy."""
    if a.flags.c_contiguous and a.data.ptr % 16 == 0:
        return a
    b = cupy.empty(a.shape, dtype=a.dtype)
    b[...] = a
    return b
