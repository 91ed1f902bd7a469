"""FlashAttention: attention computed over tiles, never forming the T×T matrix.

Introduced in notebook 16 (FlashAttention; issue 31); ``attention.py`` (notebook 15) is the
naive version it must equal. Dao et al., "FlashAttention" (2022) and FlashAttention-2 (2023).

Naive attention writes S = q k^T and P = softmax(S), (N, H, Tq, Tk) each, to memory and reads
them back: O(T²) memory and traffic. The softmax of a row needs the whole row (its max and its
sum), which seems to force that. The *online softmax* does not: keep, per query row, the
running max ``m``, the running sum ``l`` of exp(s - m) and the running output ``o`` (the
unnormalised sum of exp(s - m) v). A new tile of scores s (Br × Bc) with values v::

    m_new = max(m, rowmax(s))
    p     = exp(s - m_new)                     (Br, Bc)   only this tile's scores
    alpha = exp(m - m_new)                     rescales what was summed against the old max
    l     = alpha * l + rowsum(p)
    o     = alpha * o + p @ v_tile
    m     = m_new
    ... after the last tile: out = o / l,   and lse = m + log(l) (the log of the row's sum)

So each query tile streams the key/value tiles once, and the extra memory is that of o, m, l
(O(Tq·d)) plus one Br × Bc tile, whatever T is.

* :func:`flash_attention` ``(q, k, v, causal=False, block=(Br, Bc)) -> out``: equals
  ``dl.attention(q, k, v, causal=causal)`` (to 1e-5 in float32) for any T;
* :func:`flash_attention_forward` ``-> (out, cache)``, the cache holding q, k, v, out and
  lse: O(T·d), no T×T matrix;
* :func:`flash_attention_backward` ``(dout, cache) -> (dq, dk, dv)``: **recomputes** each
  tile of P from q, k and lse (as the paper does) instead of storing it, with
  D = rowsum(dout * out) standing in for rowsum(dP * P): the same formulas as
  ``attention_backward``, tile by tile, again without a T×T array.
* :func:`attention_traffic` ``(N, H, T, d, ...)``: bytes each version reads and writes, from
  the shapes (notebook 16's table).

On the GPU, float32 with d <= 64, the forward runs the CUDA kernel
``kernels/flash_attention_forward.cu`` (one thread block per query tile, the K/V tiles in
shared memory, m, l and o in registers; its tiles are fixed at compile time, so ``block`` is
then ignored); ``use_kernel=False`` or any other array runs the array code below.
"""
from __future__ import annotations

import math

import numpy as np

from .attention import check_qkv
from .backend import get_array_module
from .layer_base import kernels_for

__all__ = ["flash_attention", "flash_attention_forward", "flash_attention_backward",
           "attention_traffic", "DEFAULT_BLOCK"]

DEFAULT_BLOCK = (64, 64)    # (Br, Bc): query rows and key/value rows per tile


def _block(block):
    try:
        Br, Bc = (int(b) for b in block)
    except (TypeError, ValueError):
        raise TypeError(f"flash_attention(block=...) takes a pair (Br, Bc) of tile sizes, e.g. "
                        f"block=(64, 64); got {block!r}.") from None
    if Br < 1 or Bc < 1:
        raise ValueError(f"flash_attention(block=...) needs tiles of at least 1 row, got {block!r}.")
    return Br, Bc


def _causal_tile(i0, i1, j0, j1, shift, xp):
    """(i1-i0, j1-j0) booleans: key j may be seen by query i when j <= i + shift."""
    return xp.arange(j0, j1)[None, :] <= xp.arange(i0, i1)[:, None] + shift


def _key_end(i1, Tk, shift, causal):
    """How many keys the query rows before i1 may see (causal: up to the last row's diagonal)."""
    return max(0, min(Tk, i1 + shift)) if causal else Tk


def flash_attention_forward(q, k, v, causal=False, block=DEFAULT_BLOCK, use_kernel=True):
    """Tiled attention with the online softmax. q: (N, H, Tq, d), k, v: (N, H, Tk, d).

    Returns (out (N, H, Tq, d), cache); cache = (q, k, v, out, lse, causal, block), with lse
    (N, H, Tq) the log of each row's softmax denominator (plus its max): all O(T·d)."""
    check_qkv(q, k, v, None)
    Br, Bc = _block(block)
    kernels = kernels_for(q, use_kernel, same_dtype=(k, v))
    if kernels is not None and kernels.flash_kernel_takes(q, k, v):
        out, lse = kernels.flash_attention_forward(q, k, v, causal)
        return out, (q, k, v, out, lse, bool(causal), (Br, Bc))
    xp = get_array_module(q)
    N, H, Tq, d = q.shape
    Tk, shift = k.shape[2], k.shape[2] - q.shape[2]
    dtype = q.dtype
    scale = dtype.type(1.0 / math.sqrt(d))
    out = xp.empty_like(q)
    lse = xp.empty((N, H, Tq), dtype=dtype)
    for i0 in range(0, Tq, Br):                              # one query tile at a time
        i1 = min(i0 + Br, Tq)
        qi = q[:, :, i0:i1] * scale                          # (N, H, br, d)
        m = xp.full((N, H, i1 - i0, 1), -np.inf, dtype=dtype)   # running max
        l = xp.zeros((N, H, i1 - i0, 1), dtype=dtype)           # running sum of exp(s - m)
        o = xp.zeros((N, H, i1 - i0, d), dtype=dtype)           # running sum of exp(s - m) v
        for j0 in range(0, _key_end(i1, Tk, shift, causal), Bc):   # stream the K/V tiles
            j1 = min(j0 + Bc, Tk)
            s = qi @ k[:, :, j0:j1].swapaxes(-1, -2)         # (N, H, br, bc): one tile of S
            if causal and j1 - 1 > i0 + shift:               # the tile crosses the diagonal
                s = xp.where(_causal_tile(i0, i1, j0, j1, shift, xp), s, -np.inf)
            m_new = xp.maximum(m, s.max(axis=-1, keepdims=True))
            m_safe = xp.where(m_new == -np.inf, 0, m_new)    # a row that has seen nothing yet
            p = xp.exp(s - m_safe)
            alpha = xp.exp(m - m_safe)                       # rescale the old sums to m_new
            l = alpha * l + p.sum(axis=-1, keepdims=True)
            o = alpha * o + p @ v[:, :, j0:j1]
            m = m_new
        seen = l > 0                                         # False: every key was masked
        out[:, :, i0:i1] = o / xp.where(seen, l, 1)
        lse[:, :, i0:i1] = xp.where(seen, m + xp.log(xp.where(seen, l, 1)), np.inf)[..., 0]
    return out, (q, k, v, out, lse, bool(causal), (Br, Bc))


def flash_attention_backward(dout, cache):
    """dout: (N, H, Tq, d) -> (dq, dk, dv), recomputing each tile of P from q, k and lse.

    For each key/value tile j and query tile i: P_ij = exp(q_i k_j^T / sqrt(d) - lse_i),
    dv_j += P_ij^T dout_i, dP_ij = dout_i v_j^T, dS_ij = P_ij * (dP_ij - D_i) with
    D = rowsum(dout * out) (= rowsum(dP * P): one number per query row), dq_i += dS_ij k_j
    / sqrt(d), dk_j += dS_ij^T q_i / sqrt(d). Extra memory: one tile, plus dq, dk, dv."""
    q, k, v, out, lse, causal, (Br, Bc) = cache
    xp = get_array_module(q)
    Tq, d = q.shape[2], q.shape[3]
    Tk, shift = k.shape[2], k.shape[2] - q.shape[2]
    scale = q.dtype.type(1.0 / math.sqrt(d))
    D = (dout * out).sum(axis=-1, keepdims=True)             # (N, H, Tq, 1)
    dq, dk, dv = xp.zeros_like(q), xp.zeros_like(k), xp.zeros_like(v)
    for j0 in range(0, Tk, Bc):
        j1 = min(j0 + Bc, Tk)
        kj, vj = k[:, :, j0:j1], v[:, :, j0:j1]
        first = max(0, (j0 - shift) // Br * Br) if causal else 0   # rows that see this tile
        for i0 in range(first, Tq, Br):
            i1 = min(i0 + Br, Tq)
            s = (q[:, :, i0:i1] @ kj.swapaxes(-1, -2)) * scale
            if causal and j1 - 1 > i0 + shift:
                s = xp.where(_causal_tile(i0, i1, j0, j1, shift, xp), s, -np.inf)
            p = xp.exp(s - lse[:, :, i0:i1, None])          # the tile of P, recomputed
            dv[:, :, j0:j1] += p.swapaxes(-1, -2) @ dout[:, :, i0:i1]
            dp = dout[:, :, i0:i1] @ vj.swapaxes(-1, -2)
            ds = p * (dp - D[:, :, i0:i1])
            dq[:, :, i0:i1] += (ds @ kj) * scale
            dk[:, :, j0:j1] += (ds.swapaxes(-1, -2) @ q[:, :, i0:i1]) * scale
    return dq, dk, dv


def flash_attention(q, k, v, causal=False, block=DEFAULT_BLOCK, use_kernel=True):
    """Attention over tiles: equals ``dl.attention(q, k, v, causal=causal)`` without forming
    the (Tq, Tk) matrix. q: (N, H, Tq, d), k, v: (N, H, Tk, d) -> (N, H, Tq, d).
    ``block`` = (Br, Bc) query and key rows per tile (any T works: the last tile is smaller)."""
    return flash_attention_forward(q, k, v, causal, block, use_kernel)[0]


def attention_traffic(N, H, T, d, itemsize=4, block=DEFAULT_BLOCK, causal=False) -> dict:
    """Bytes read and written by one attention forward pass, counted from the shapes (each
    array element read or written once per pass over it; caches ignored).

    naive: read q, k and write S (T²); read S, write P (2 T²); read P and v, write out.
    flash: read q and write out once; read every K/V tile once per query tile (causal: only
    the tiles at or below the diagonal); write lse (T). Returns {"naive": bytes, "flash": bytes}."""
    Br, Bc = _block(block)
    naive = 2 * T * d + T * T + 2 * T * T + T * T + T * d + T * d
    kv_rows = sum(_key_end(min(i0 + Br, T), T, 0, causal) for i0 in range(0, T, Br))
    flash = T * d + 2 * kv_rows * d + T * d + T
    return {"naive": N * H * naive * itemsize, "flash": N * H * flash * itemsize}
