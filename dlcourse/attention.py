"""Scaled dot-product attention and multi-head attention, forward and backward by hand.

Introduced in notebook 15 (attention by hand; issue 31), used by ``transformer.py`` (the
transformer block and the small character model) and checked against ``flash_attention.py``
(notebook 16, the tiled version that never forms the T×T matrix).

The math, with the letters used in the code (N samples, H heads, Tq queries, Tk keys, d the
size of one head)::

    q: (N, H, Tq, d)   k: (N, H, Tk, d)   v: (N, H, Tk, d)
    S = q @ k^T / sqrt(d)                          (N, H, Tq, Tk)  the scores
    S[keep == False] = -inf                        the mask (and the causal mask)
    P = softmax(S, over the keys)                  (N, H, Tq, Tk)  each row sums to 1
    out = P @ v                                    (N, H, Tq, d)   a weighted average of values

Backward, given dout = dL/d(out) (N, H, Tq, d)::

    dv = P^T @ dout                                (N, H, Tk, d)
    dP = dout @ v^T                                (N, H, Tq, Tk)
    dS = P * (dP - sum(dP * P, over the keys))     softmax's Jacobian, never formed
    dq = dS @ k / sqrt(d),  dk = dS^T @ q / sqrt(d)

The softmax of one row has the Jacobian diag(p) - p p^T (Tk × Tk per row, N·H·Tq of them);
applied to a row of dP it is p * (dP - p·dP): one product per entry and one sum per row.

**Masks**, in the two conventions of PyTorch's ``scaled_dot_product_attention``: a boolean
``mask``, True where a query may look at a key, or a float ``mask`` added to the scores (0
keeps a key, -inf drops it; other values shift the score). Either is an array of shape
(N, H, Tq, Tk) or one that broadcasts to it without adding axes: (Tq, Tk), (N, 1, Tq, Tk),
(N, 1, 1, Tk), ... Anything else (a list, integers, a fifth axis) is refused. ``causal=True`` lets
query i see keys j <= i + (Tk - Tq): the usual lower triangle when Tq == Tk, and, when the
queries are the last Tq of Tk positions (generation with a key/value cache), each still sees
itself and everything before it (FlashAttention-2's "bottom-right" alignment). A query row
whose keys are all masked gets weights 0, so its output is 0 (not NaN) and so is its gradient
(PyTorch gives NaN there); with no keys at all (Tk = 0) every row is such a row, and the output
is zeros, as ``flash_attention``'s.

API (``import dlcourse as dl``):

* :func:`attention` ``(q, k, v, mask=None, causal=False) -> out``;
* :func:`attention_forward` ``-> (out, cache)`` and :func:`attention_backward`
  ``(dout, cache) -> (dq, dk, dv)``: the pair the layers use, the cache holding P;
* :func:`causal_mask` ``(Tq, Tk, xp=np)``: the boolean (Tq, Tk) mask ``causal=True`` applies;
* :class:`MultiHeadAttention` ``(d_model, heads, causal=False)``: a layer on x (N, T, d_model),
  with the Q, K, V and output projections; the heads are a reshape of d_model into
  (heads, d_model / heads). ``step(x, past)`` runs it for generation with a key/value cache.

The batched products here use ``@`` on 4-D arrays (``dl.autocast`` rounds only the
projections, which go through ``ops.matmul``).
"""
from __future__ import annotations

import math

import numpy as np

from ._validate import float_dtype, shape_str, whole_number
from .backend import get_array_module, rng
from .layer_base import Layer, checked
from .modern_block import rope, rope_backward
from .ops import matmul

__all__ = ["attention", "attention_forward", "attention_backward", "causal_mask", "check_qkv",
           "check_mask", "masked_softmax", "MultiHeadAttention"]


# ==== The attention function ==========================================================
def causal_mask(Tq: int, Tk: int, xp=np):
    """(Tq, Tk) booleans, True where query i may see key j: j <= i + (Tk - Tq)."""
    return xp.arange(Tk)[None, :] <= xp.arange(Tq)[:, None] + (Tk - Tq)


def masked_softmax(S, keep=None):
    """Softmax over the last axis of S with the entries where ``keep`` is False left out
    (weight 0); a row with nothing kept is all zeros. S: (..., Tk); keep broadcasts to S."""
    xp = get_array_module(S)
    if S.shape[-1] == 0:                           # no keys at all: every row has nothing kept
        return xp.zeros_like(S)
    if keep is not None:
        S = xp.where(keep, S, -xp.inf)
    m = S.max(axis=-1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)             # a row with nothing kept: no -inf - -inf
    P = xp.exp(S - m)
    l = P.sum(axis=-1, keepdims=True)
    P /= xp.where(l > 0, l, 1)
    return P


def _mask_terms(mask, causal, Tq, Tk, xp, dtype):
    """(keep, bias): the boolean mask applied (None: every key for every query) and the float
    mask added to the scores (None: nothing added), from ``mask`` (checked by check_qkv)."""
    keep = bias = None
    if mask is not None and mask.dtype == bool:
        keep = xp.asarray(mask)
    elif mask is not None:
        bias = xp.asarray(mask, dtype=dtype)
    if causal:
        tri = causal_mask(Tq, Tk, xp)
        keep = tri if keep is None else keep & tri
    return keep, bias


def check_qkv(q, k, v, mask):
    for name, a in (("q", q), ("k", k), ("v", v)):
        if not hasattr(a, "ndim") or a.ndim != 4:
            raise ValueError(f"attention expects q, k, v of shape (N, heads, T, d); {name} has "
                             f"shape {shape_str(getattr(a, 'shape', ()))}. One head: add the "
                             f"axis with {name}[:, None].")
        if not np.issubdtype(a.dtype, np.floating):
            raise TypeError(f"attention expects floating-point q, k, v; {name} has dtype {a.dtype}.")
    if k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"attention: q {shape_str(q.shape)}, k {shape_str(k.shape)}, v "
                         f"{shape_str(v.shape)} do not fit: k and v must have one shape "
                         f"(N, heads, Tk, d), and q (N, heads, Tq, d) the same N, heads and d.")
    if mask is not None:
        check_mask(mask, (*q.shape[:3], k.shape[2]))


def check_mask(mask, want):
    """Refuse a mask that is not a bool or float array broadcasting to ``want`` = (N, H, Tq, Tk)
    without adding axes, or a float mask holding NaN or +inf (see the module's Masks)."""
    conventions = ("a bool array, True = attend, or a float array added to the scores, 0 = "
                   "keep, -inf = drop (PyTorch's scaled_dot_product_attention)")
    if not hasattr(mask, "shape") or not hasattr(mask, "dtype"):
        raise TypeError(f"attention(mask=...) takes {conventions}; got a "
                        f"{type(mask).__name__}. Make it an array first: mask = "
                        f"np.array(mask, dtype=bool).")
    if mask.dtype != bool and not np.issubdtype(mask.dtype, np.floating):
        raise TypeError(f"attention(mask=...) takes {conventions}; got dtype {mask.dtype}. For "
                        f"1 = attend, 0 = not: mask.astype(bool).")
    shape = tuple(mask.shape)
    try:
        fits = len(shape) <= 4 and np.broadcast_shapes(shape, want) == tuple(want)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"attention: mask of shape {shape_str(shape)} does not broadcast to "
                         f"(N, heads, Tq, Tk) = {shape_str(want)} without adding axes: give "
                         f"(Tq, Tk), (N, 1, Tq, Tk) or (N, heads, Tq, Tk), each axis its size "
                         f"or 1.")
    if mask.dtype != bool:
        xp = get_array_module(mask)
        if bool(xp.isnan(mask).any()) or bool((mask == np.inf).any()):
            raise ValueError("attention(mask=...): a float mask is added to the scores (0 = "
                             "keep, -inf = drop), and this one holds NaN or +inf, which would "
                             "make the output NaN. Use -inf (or a bool mask) for the keys to "
                             "drop.")


def attention_forward(q, k, v, mask=None, causal=False):
    """out = softmax(q @ k^T / sqrt(d), masked) @ v, and the cache backward needs.

    q: (N, H, Tq, d), k and v: (N, H, Tk, d); mask: broadcasts to (N, H, Tq, Tk), bool (True =
    attend) or float (added to the scores); causal: see the module. Returns (out (N, H, Tq, d),
    cache = (q, k, v, P))."""
    check_qkv(q, k, v, mask)
    xp = get_array_module(q)
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    scale = q.dtype.type(1.0 / math.sqrt(d))
    keep, bias = _mask_terms(mask, causal, Tq, Tk, xp, q.dtype)
    S = q @ k.swapaxes(-1, -2)                             # (N, H, Tq, Tk)
    S *= scale                                             # in place from here on: one array
    if bias is not None:                                   # of (N, H, Tq, Tk) becomes P
        S += bias                                          # a float mask: added to the scores
    P = _masked_softmax_in_place(S, keep)
    out = P @ v                                            # (N, H, Tq, d)
    return out, (q, k, v, P)


def _masked_softmax_in_place(S, keep):
    """:func:`masked_softmax`'s numbers, written over S (attention's own scores): no second
    array of S's size (the long sequences of lessons 15-16 are bound by these)."""
    xp = get_array_module(S)
    if S.shape[-1] == 0:
        return S
    if keep is not None:
        xp.copyto(S, S.dtype.type(-np.inf), where=xp.logical_not(keep))
    m = S.max(axis=-1, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0)
    S -= m
    xp.exp(S, out=S)
    l = S.sum(axis=-1, keepdims=True)
    S /= xp.where(l > 0, l, 1)
    return S


def attention_backward(dout, cache):
    """dout: (N, H, Tq, d) -> (dq, dk, dv), shaped like q, k, v."""
    q, k, v, P = cache
    scale = q.dtype.type(1.0 / math.sqrt(q.shape[-1]))
    dv = P.swapaxes(-1, -2) @ dout                          # (N, H, Tk, d)
    dP = dout @ v.swapaxes(-1, -2)                          # (N, H, Tq, Tk)
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))    # softmax backward, row by row
    dq = (dS @ k) * scale
    dk = (dS.swapaxes(-1, -2) @ q) * scale
    return dq, dk, dv


def attention(q, k, v, mask=None, causal=False):
    """Scaled dot-product attention: (N, H, Tq, d) queries over (N, H, Tk, d) keys and values
    -> (N, H, Tq, d). See :func:`attention_forward` and the module docstring."""
    return attention_forward(q, k, v, mask, causal)[0]


# ==== Multi-head attention ============================================================
class MultiHeadAttention(Layer):
    """Multi-head self-attention (Vaswani et al., 2017) on a sequence of vectors.

    x: (N, T, D) -> out: (N, T, D), D = ``d_model``, H = ``heads``, d = D / H::

        Q = x @ Wq + bq,  K = x @ Wk + bk,  V = x @ Wv + bv     (N, T, D) each
        split the last axis into heads: (N, T, H, d) -> (N, H, T, d)    a reshape
        A = attention(Q, K, V, causal=causal)                    (N, H, T, d)
        merge the heads back: (N, T, D);  out = A @ Wo + bo

    params: ``Wq``, ``Wk``, ``Wv``, ``Wo`` (D, D), stored (in, out) as Linear's W, and
    ``bq``, ``bk``, ``bv``, ``bo`` (D,). Weights start as normals of std 1/sqrt(D).
    ``bias=False``: no biases (the projections are x @ W alone, as in LLaMA; lesson 15b's
    ``mha_forward`` takes the four matrices only).
    ``forward(x, mask=None)``: mask as in :func:`attention` (bool: True = attend; float: added
    to the scores), broadcasting to (N, heads, T, T), besides ``causal``.
    ``rope=True``: q and k of each head turned by their position (``dl.rope``, rotary position
    embeddings, as Llama) before the scores; backward turns dq and dk back.
    """

    input_shape, input_ndim = "(N, T, d_model)", 3

    def __init__(self, d_model: int, heads: int, causal: bool = False, dtype=np.float32,
                 seed=None, bias: bool = True, rope: bool = False):
        super().__init__()
        self.d_model = D = whole_number(d_model, "MultiHeadAttention(d_model=...)")
        self.heads = H = whole_number(heads, "MultiHeadAttention(heads=...)")
        if D % H:
            raise ValueError(f"MultiHeadAttention(d_model={D}, heads={H}): d_model must be a "
                             f"multiple of heads, each head gets d_model / heads numbers. E.g. "
                             f"heads={max(h for h in range(1, H + 1) if D % h == 0)}.")
        self.causal, self.bias, self.rope = bool(causal), bool(bias), bool(rope)
        if self.rope and (D // H) % 2:
            raise ValueError(f"MultiHeadAttention(d_model={D}, heads={H}, rope=True): rope turns "
                             f"each head's {D // H} numbers in pairs, so d_model / heads must be "
                             f"even. Pick another number of heads.")
        dtype = float_dtype(dtype)
        gen = rng(seed)
        self.params = {}
        for name in ("q", "k", "v", "o"):
            self.params[f"W{name}"] = (gen.standard_normal((D, D)) / math.sqrt(D)).astype(dtype)
            if self.bias:
                self.params[f"b{name}"] = np.zeros(D, dtype=dtype)

    # -- the heads as a reshape -------------------------------------------------------------
    def split_heads(self, y):
        """(N, T, D) -> (N, H, T, d)."""
        N, T, _ = y.shape
        return y.reshape(N, T, self.heads, -1).transpose(0, 2, 1, 3)

    def merge_heads(self, a):
        """(N, H, T, d) -> (N, T, D): the inverse of split_heads."""
        N, H, T, d = a.shape
        return a.transpose(0, 2, 1, 3).reshape(N, T, H * d)

    def project(self, x2, name):
        """x2 (M, D) @ W<name> + b<name> (no bias: x2 @ W<name>)."""
        y = matmul(x2, self.params[f"W{name}"])
        return y + self.params[f"b{name}"] if self.bias else y

    @checked
    def forward(self, x, mask=None):
        N, T, D = x.shape
        x2 = x.reshape(N * T, D)
        q, k, v = (self.split_heads(self.project(x2, n).reshape(N, T, D)) for n in "qkv")
        if self.rope:                                      # positions 0 ... T-1
            q, k = rope(q), rope(k)
        a, att_cache = attention_forward(q, k, v, mask, self.causal)
        a2 = self.merge_heads(a).reshape(N * T, D)
        self.cache = (x2, a2, att_cache)
        return self.project(a2, "o").reshape(N, T, D)

    @checked
    def backward(self, dout):
        x2, a2, att_cache = self.cache
        N, T, D = dout.shape
        p = self.params
        dout2 = dout.reshape(N * T, D)
        grads = {"Wo": matmul(a2.T, dout2), **({"bo": dout2.sum(axis=0)} if self.bias else {})}
        da = self.split_heads(matmul(dout2, p["Wo"].T).reshape(N, T, D))
        dq, dk, dv = attention_backward(da, att_cache)
        if self.rope:
            dq, dk = rope_backward(dq), rope_backward(dk)
        dx2 = 0
        for name, dy in (("q", dq), ("k", dk), ("v", dv)):
            dy2 = self.merge_heads(dy).reshape(N * T, D)
            grads[f"W{name}"] = matmul(x2.T, dy2)
            if self.bias:
                grads[f"b{name}"] = dy2.sum(axis=0)
            dx2 = dx2 + matmul(dy2, p[f"W{name}"].T)
        self.grads = grads
        return dx2.reshape(N, T, D)

    def step(self, x, past=None):
        """Inference with a key/value cache (generation): x (N, T_new, D) holds the new
        positions only; ``past`` = (K, V), each (N, H, T_past, d), the keys and values of the
        positions before (None: none). Returns (out (N, T_new, D), (K, V) with the new
        positions appended). Each new query sees the past and the new positions up to itself
        (``causal`` as in :func:`attention`). Nothing is kept for backward."""
        self.check(x)
        N, T, D = x.shape
        xp = get_array_module(x)
        x2 = x.reshape(N * T, D)
        q, k, v = (self.split_heads(self.project(x2, n).reshape(N, T, D)) for n in "qkv")
        if self.rope:                          # the new positions go on from where past ends
            start = 0 if past is None else past[0].shape[2]
            q, k = rope(q, start), rope(k, start)
        if past is not None:
            k, v = xp.concatenate([past[0], k], axis=2), xp.concatenate([past[1], v], axis=2)
        a = attention(q, k, v, causal=self.causal)
        out = self.project(self.merge_heads(a).reshape(N * T, D), "o").reshape(N, T, D)
        return out, (k, v)

    def check(self, x):
        super().check(x)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"MultiHeadAttention(d_model={self.d_model}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.d_model} "
                             f"(x is (N, T, d_model): samples, positions, features).")

    def get_config(self):
        return {"d_model": self.d_model, "heads": self.heads, "causal": self.causal,
                **({} if self.bias else {"bias": False}), **({"rope": True} if self.rope else {})}
