"""The FlashAttention forward kernel: ``flash_attention_forward.cu``, and its launch.

Introduced in notebook 16 (FlashAttention; issue 31). Read the ``.cu`` file's header first:
one thread block per tile of 64 query rows, the K and V tiles through shared memory, each
row's running max, sum and output in registers. Its NumPy (and CuPy array-code) version,
the one it must match, is ``dlcourse.flash_attention.flash_attention`` (and both must match
``dlcourse.attention.attention``). ``dl.flash_attention`` calls this wrapper for float32
CuPy arrays with d <= 64 (:func:`flash_kernel_takes`).
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import require_cupy
from ._build import LaunchConfig, ceil_div, check_gpu_array, geometry, get_kernel, launch_config

__all__ = ["flash_attention_forward", "flash_kernel_takes", "flash_head_dim", "FLASH_HEAD_DIMS",
           "FLASH_BR", "FLASH_BC"]

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
