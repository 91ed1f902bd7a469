"""Checks for lesson 16b: FlashAttention's tiled forward and its backward, written by the
learner.

Each check runs *your* function on small cases (ragged T, Tq != Tk, both causal settings, tiles
that do not divide T, scores large enough to overflow ``exp``), compares it with the library
(``dl.attention`` and ``dlcourse/flash_attention.py``, itself tested against ``dl.attention``
and by ``dl.gradcheck``), names the usual mistakes, and enforces the lesson's rule: **no
Tq x Tk temporary**. One case has Tq = Tk = 2048, where the full matrix is 32 MiB in float64;
the memory your function holds at once (tracemalloc around the call) must stay far below it.
Where a GPU is usable, one causal case runs again on CuPy arrays: the results must be right and
stay on the GPU (the memory rule is measured on NumPy only: tracemalloc does not see the GPU).

=================================  ====================================  =================
lesson                             check                                 your function
=================================  ====================================  =================
16b_flash_attention_backward       :func:`flash_forward_tiled`           -> (out, lse)
16b_flash_attention_backward       :func:`flash_backward`                -> (dq, dk, dv)
=================================  ====================================  =================
"""
from __future__ import annotations

import math

import numpy as np

from .harness import (GPU_FIX, PeakMemory, call, expect_close, expect_finite, expect_gpu_close,
                      expect_shape, expect_tuple, expect_unchanged, fail, gpu, passed, rng,
                      shape_text, to_array, to_gpu)

__all__ = ["flash_forward_tiled", "flash_backward"]

LONG = 2048           # Tq = Tk in the memory case: the full matrix is LONG^2 * 8 bytes = 32 MiB
LIMIT = LONG * LONG * 8 // 8      # what the function may hold at once there: 4 MiB


def _memory_rule(fn, case, peak, Tq, Tk, itemsize):
    """Fail, naming the rule, when the call held a Tq x Tk-sized amount of memory at once."""
    __tracebackhide__ = True
    if peak.bytes <= LIMIT:
        return
    full = Tq * Tk * itemsize
    fail(fn, case, f"it breaks the memory rule (no Tq x Tk temporary): your function held "
                   f"{peak.bytes / 2 ** 20:.1f} MiB at once, where the full {Tq} x {Tk} matrix "
                   f"is {full / 2 ** 20:.0f} MiB and the rule allows {LIMIT / 2 ** 20:.0f} MiB "
                   f"(a few tiles, q, k, v and the outputs). Something of the size of all the "
                   f"scores, or a strip of many query rows against every key, was made.",
         "make only one (block_q, block_k) tile of scores at a time: loop over the key tiles "
         "inside a loop over the query tiles, carrying each row's running max, sum and output.")


def _cases():
    """(N, H, Tq, Tk, d, block_q, block_k, causal, score scale) of each case."""
    __tracebackhide__ = True
    return [(2, 2, 7, 7, 4, 3, 2, False, 1.0), (1, 2, 5, 9, 3, 2, 4, True, 1.0),
            (2, 1, 10, 10, 4, 4, 3, True, 1.0), (1, 1, 6, 11, 2, 5, 5, False, 1.0),
            (1, 2, 6, 6, 4, 4, 4, False, 60.0), (1, 1, LONG, LONG, 8, 128, 128, True, 1.0)]


# The case run again on CuPy arrays where a GPU is usable: the first causal one (Tq < Tk, tiles
# that do not divide T), so that the mask is made on the GPU too.
GPU_CASE = 1
def _gpu_results(fn, cp, case, names, args, refs):
    """Call ``fn`` on ``args`` with the arrays moved to CuPy; each result named in ``names``
    must stay on the GPU and equal its NumPy ``refs``."""
    __tracebackhide__ = True
    case = f"{case}, on the GPU (CuPy arrays)"
    out = expect_tuple(call(fn, *to_gpu(cp, list(args)), case=case, on_error=GPU_FIX),
                       len(names), fn, case, ", ".join(names))
    for got, ref, name in zip(out, refs, names):
        expect_gpu_close(got, ref, fn, case, name)


def _case_text(q, k, bq, bk, causal, scale):
    __tracebackhide__ = True
    Tq, Tk = q.shape[2], k.shape[2]
    return (f"q {shape_text(q.shape)}, k and v {shape_text(k.shape)}, block_q={bq}, "
            f"block_k={bk}, causal={causal}"
            + (" (the queries are the last Tq positions)" if causal and Tq < Tk else "")
            + (", scores in the thousands (exp overflows)" if scale > 10 else "")
            + (f" (the memory case: the full matrix is {Tq * Tk * 8 / 2 ** 20:.0f} MiB)"
               if Tq >= LONG else ""))


def _inputs(case):
    __tracebackhide__ = True
    N, H, Tq, Tk, d, bq, bk, causal, scale = case
    r = rng(Tq * 13 + Tk)
    q = r.standard_normal((N, H, Tq, d)) * scale
    k, v = r.standard_normal((N, H, Tk, d)), r.standard_normal((N, H, Tk, d))
    return q, k, v, bq, bk, causal, scale


def _full(q, k, v, causal, scale=True, top_left=False):
    """(P, out, lse) from the whole matrix: the check's own comparison (never timed)."""
    __tracebackhide__ = True
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    S = q @ k.swapaxes(-1, -2) / (math.sqrt(d) if scale else 1.0)
    if causal:
        shift = 0 if top_left else Tk - Tq
        S = np.where(np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + shift, S, -np.inf)
    m = S.max(axis=-1, keepdims=True)
    P = np.exp(S - m)
    l = P.sum(axis=-1, keepdims=True)
    return P / l, (P / l) @ v, (m + np.log(l))[..., 0]


def _no_rescale(q, k, v, bk, causal, which="lo"):
    """The online softmax without the rescaling of what was summed before (out, lse), in the
    running sum (``which`` holds "l"), the running output ("o") or both."""
    __tracebackhide__ = True
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    m = np.full(q.shape[:3] + (1,), -np.inf)
    l, o = np.zeros(q.shape[:3] + (1,)), np.zeros(q.shape)
    for j in range(0, Tk, bk):
        s = q @ k[:, :, j:j + bk].swapaxes(-1, -2) / math.sqrt(d)
        if causal:
            s = np.where(np.arange(j, min(j + bk, Tk))[None, :]
                         <= np.arange(Tq)[:, None] + Tk - Tq, s, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        safe = np.where(np.isfinite(m_new), m_new, 0)
        p, alpha = np.exp(s - safe), np.exp(m - safe)
        l = (1 if "l" in which else alpha) * l + p.sum(axis=-1, keepdims=True)
        o = (1 if "o" in which else alpha) * o + p @ v[:, :, j:j + bk]
        m = m_new
    return o / l, (m + np.log(l))[..., 0]


def flash_forward_tiled(fn) -> None:
    """Check ``fn(q, k, v, block_q, block_k, causal)`` -> ``(out, lse)``: attention computed
    over (block_q, block_k) tiles with the online softmax, q (N, H, Tq, d), k and v (N, H, Tk,
    d); out (N, H, Tq, d) equal to ``dl.attention(q, k, v, causal=causal)``, lse (N, H, Tq)
    the log of each row's softmax denominator, log(sum_j exp(s_j)) with s the scaled scores.
    Causal: the queries are the last Tq of the Tk positions (Tq <= Tk). The memory case
    (Tq = Tk = 2048) fails any answer that holds a Tq x Tk-sized temporary."""
    __tracebackhide__ = True
    from ..flash_attention import flash_attention_forward
    cases = _cases()
    cp = gpu()
    for spec in cases:
        q, k, v, bq, bk, causal, scale = _inputs(spec)
        case = _case_text(q, k, bq, bk, causal, scale)
        given = [a.copy() for a in (q, k, v)]
        with PeakMemory(q.shape[2] >= LONG) as peak:
            answer = call(fn, *given, bq, bk, causal, case=case,
                          on_error="q (N, H, Tq, d) against a tile of k (N, H, block_k, d): "
                                   "q_tile @ k_tile.swapaxes(-1, -2) is (N, H, block_q, "
                                   "block_k); the last tile may be smaller.")
        out, lse = expect_tuple(answer, 2, fn, case, "out, lse")
        out, lse = to_array(out, fn, case, "out"), to_array(lse, fn, case, "lse")
        _memory_rule(fn, case, peak, q.shape[2], k.shape[2], 8)
        e_out, cache = flash_attention_forward(q, k, v, causal, block=(64, 64))
        e_lse = cache[4]
        long = q.shape[2] >= LONG
        expect_shape(out, q.shape, fn, case, "out", "out has q's shape (N, H, Tq, d).")
        expect_finite(out, fn, case, "out", "exponentiate only differences from a running max "
                                            "(each at most 0), never a score alone.")
        wrong = [
            (lambda: _full(q, k, v, causal, scale=False)[1], "the scores are not divided by "
                                                             "sqrt(d)."),
            (lambda: _full(q, k, v, causal, top_left=True)[1] if causal and k.shape[2] >
             q.shape[2] else None, "the causal mask is aligned top-left: the queries are the "
                                   "LAST Tq of the Tk positions, so query i sits at position "
                                   "i + (Tk - Tq)."),
            (lambda: _full(q, k, v, not causal)[1], "causal is ignored or inverted: with "
                                                    "causal=True a query sees its own position "
                                                    "and the earlier ones only."),
            *[(lambda w=w: _no_rescale(q, k, v, bk, causal, w)[0],
               f"what was summed before a new tile is not rescaled when the running max grows"
               f" ({what}): both the running sum and the running output were taken against "
               f"the old max.") for w, what in (("lo", "neither the sum nor the output"),
                                                ("l", "the running sum"),
                                                ("o", "the running output"))],
        ] if not long else []
        expect_close(out, e_out, fn, case, "out", mistakes=wrong,
                     fix="carry, per query row, the running max m, the running sum l and the "
                         "unnormalised output; merge each tile into them (lesson 16); divide "
                         "by l once at the end.")
        expect_shape(lse, e_lse.shape, fn, case, "lse", "one number per query row: (N, H, Tq), "
                                                        "no trailing axis of 1.")
        expect_close(lse, e_lse, fn, case, "lse", mistakes=[] if long else [
            (lambda: _full(q, k, v, causal)[2] - np.log(_full_l(q, k, causal)),
             "lse is only the running max: add the log of the running sum."),
            (lambda: np.log(_full_l(q, k, causal)), "lse is only log(l), the sum taken against "
                                                    "the max: add the max back."),
            (lambda: _full(q, k, v, causal, scale=False)[2], "lse is taken over scores not "
                                                             "divided by sqrt(d)."),
        ], fix="lse = m + log(l) per row: the log of the sum of exp(score) over the row.")
        expect_unchanged(fn, case, list(zip("qkv", (q, k, v), given)))
    if cp is not None:
        q, k, v, bq, bk, causal, scale = _inputs(cases[GPU_CASE])
        e_out, cache = flash_attention_forward(q, k, v, causal, block=(64, 64))
        _gpu_results(fn, cp, _case_text(q, k, bq, bk, causal, scale), ("out", "lse"),
                     (q, k, v, bq, bk, causal), (e_out, cache[4]))
    passed(fn, len(cases) + (cp is not None), cp is not None)


def _full_l(q, k, causal):
    """Each row's sum of exp(s - max) (N, H, Tq)."""
    __tracebackhide__ = True
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    S = q @ k.swapaxes(-1, -2) / math.sqrt(d)
    if causal:
        S = np.where(np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq, S, -np.inf)
    return np.exp(S - S.max(axis=-1, keepdims=True)).sum(axis=-1)


def _backward_full(dout, q, k, v, out, lse, causal, D_kind="right", use_lse=True,
                   scale_dq=True, scale_dk=True, mask=True):
    """(dq, dk, dv) from whole matrices, with one mistake made (the check names each)."""
    __tracebackhide__ = True
    Tq, Tk, d = q.shape[2], k.shape[2], q.shape[3]
    sc = 1 / math.sqrt(d)
    S = q @ k.swapaxes(-1, -2) * sc
    if causal and mask:
        S = np.where(np.arange(Tk)[None, :] <= np.arange(Tq)[:, None] + Tk - Tq, S, -np.inf)
    P = np.exp(S - lse[..., None]) if use_lse else np.exp(S)
    D = {"right": (dout * out).sum(axis=-1, keepdims=True),
         "no_out": dout.sum(axis=-1, keepdims=True),
         "axis": (dout * out).sum(axis=-2, keepdims=True),
         "zero": 0.0}[D_kind]
    dP = dout @ v.swapaxes(-1, -2)
    dS = P * (dP - D)
    return (dS @ k * (sc if scale_dq else 1.0), dS.swapaxes(-1, -2) @ q * (sc if scale_dk else 1.0),
            P.swapaxes(-1, -2) @ dout)


_BACKWARD_MISTAKES = [
    (dict(D_kind="no_out"), "D is the row sum of dout alone: it is the row sum of dout times "
                            "out, elementwise (the same number as the row sum of dP times P)."),
    (dict(D_kind="axis"), "D is summed over the wrong axis: one number per query row, the sum "
                          "over the d features (the last axis, keepdims=True)."),
    (dict(D_kind="zero"), "the term D is missing from dS: the softmax's Jacobian subtracts, in "
                          "each row, the P-weighted average of dP, which D stands for."),
    (dict(use_lse=False), "the tile's P is recomputed without lse: P = exp(scores - lse), the "
                          "saved log of each row's denominator, so no max and no sum are needed "
                          "again."),
    (dict(scale_dq=False), "dq misses the 1/sqrt(d) the scores carry."),
    (dict(scale_dk=False), "dk misses the 1/sqrt(d) the scores carry."),
    (dict(scale_dq=False, scale_dk=False), "dq and dk miss the 1/sqrt(d) the scores carry."),
    (dict(mask=False), "the causal mask is not applied when P is recomputed: the tiles that "
                       "cross the diagonal must hide the keys after each query again."),
]


def flash_backward(fn) -> None:
    """Check ``fn(dout, q, k, v, out, lse, block_q, block_k, causal)`` -> ``(dq, dk, dv)``:
    FlashAttention-2's backward, tile by tile, recomputing each tile's P from q, k and lse
    (N, H, Tq), with D = rowsum(dout * out). Compared with ``dl.attention``'s backward (and
    the library's ``flash_attention_backward``); the memory case (Tq = Tk = 2048) fails any
    answer that holds a Tq x Tk-sized temporary. Named: D computed wrong, lse not used, the
    1/sqrt(d) missing, the causal mask forgotten in the recompute."""
    __tracebackhide__ = True
    from ..attention import attention_backward, attention_forward
    from ..flash_attention import flash_attention_forward
    cases = [c for c in _cases() if c[8] == 1.0]
    cp = gpu()
    for spec in cases:
        q, k, v, bq, bk, causal, scale = _inputs(spec)
        case = _case_text(q, k, bq, bk, causal, scale)
        out, cache = flash_attention_forward(q, k, v, causal, block=(64, 64))
        lse = cache[4]
        dout = rng(q.shape[2] + 5).standard_normal(q.shape)
        given = [a.copy() for a in (dout, q, k, v, out, lse)]
        with PeakMemory(q.shape[2] >= LONG) as peak:
            answer = call(fn, *given, bq, bk, causal, case=case,
                          on_error="lse has one number per query row, (N, H, Tq): give its "
                                   "slice a last axis of 1 to broadcast against a (N, H, "
                                   "block_q, block_k) tile.")
        dq, dk, dv = (to_array(a, fn, case, n) for a, n in
                      zip(expect_tuple(answer, 3, fn, case, "dq, dk, dv"), ("dq", "dk", "dv")))
        _memory_rule(fn, case, peak, q.shape[2], k.shape[2], 8)
        if q.shape[2] >= LONG:
            from ..flash_attention import flash_attention_backward
            refs = flash_attention_backward(dout, cache)
        else:
            refs = attention_backward(dout, attention_forward(q, k, v, causal=causal)[1])
        for got, ref, name, i in zip((dq, dk, dv), refs, ("dq", "dk", "dv"), range(3)):
            expect_shape(got, ref.shape, fn, case, name, f"{name} has the shape of "
                                                         f"{name[1]}.")
            expect_finite(got, fn, case, name)
            expect_close(got, ref, fn, case, name, mistakes=[] if q.shape[2] >= LONG else [
                (lambda kw=kw, i=i: _backward_full(dout, q, k, v, out, lse, causal, **kw)[i],
                 why) for kw, why in _BACKWARD_MISTAKES],
                fix="for each tile: P = exp(scores - lse), dv += P^T dout, dP = dout v^T, dS = "
                    "P (dP - D), dq += dS k / sqrt(d), dk += dS^T q / sqrt(d).")
        expect_unchanged(fn, case, list(zip(("dout", "q", "k", "v", "out", "lse"),
                                            (dout, q, k, v, out, lse), given)))
    if cp is not None:
        q, k, v, bq, bk, causal, scale = _inputs(_cases()[GPU_CASE])
        out, cache = flash_attention_forward(q, k, v, causal, block=(64, 64))
        dout = rng(q.shape[2] + 5).standard_normal(q.shape)
        refs = attention_backward(dout, attention_forward(q, k, v, causal=causal)[1])
        _gpu_results(fn, cp, _case_text(q, k, bq, bk, causal, scale), ("dq", "dk", "dv"),
                     (dout, q, k, v, out, cache[4], bq, bk, causal), refs)
    passed(fn, len(cases) + (cp is not None), cp is not None)


# Deeper hint levels (level 1 is the `# HINT:` line in the exercise's cell).
HINTS: dict[str, list[str]] = {
    "flash_forward_tiled": [
        ("two loops: over query tiles, and inside it over key tiles. For one query tile keep "
         "three running arrays per row (the max so far, the sum of exponentials against it, "
         "the unnormalised output); each key tile gives its scores, its own max, and is merged "
         "in exactly as merge_softmax merged two blocks. Causal: mask the keys that come after "
         "the query's own position among the keys (the queries are the last positions)."),
        ("per key tile: s = q_tile @ k_tile^T / sqrt(d) (masked: -inf); m_new = max(m, row max "
         "of s); alpha = exp(m - ___); p = exp(s - ___); l becomes alpha times the old l, "
         "plus ___; o becomes alpha times the old o, plus p @ ___; then m becomes m_new. After "
         "the last tile: out = o / ___, lse = ___ + log(___). Guard a row that has seen no key "
         "yet (m = -inf)."),
    ],
    "flash_backward": [
        ("the same loops as the forward, the other way round if you like (key tiles outside, "
         "query tiles inside). Per tile: recompute the tile's probabilities from the scores and "
         "lse alone; then the four products of attention's backward (lesson 15), with the row "
         "sum that needed the whole row replaced by one number per row computed before the "
         "loops."),
        ("before the loops: D = (dout * ___).sum(axis=___, keepdims=True). Per tile (i, j): P = "
         "exp(s - lse[..., ___]); dv[j] += P^T @ dout[i]; dP = dout[i] @ v[j]^T; dS = P * (dP - "
         "D[i]); dq[i] += dS @ k[j] * ___; dk[j] += dS^T @ q[i] * ___."),
    ],
}

# What would give each answer away in its first-level hint.
ANSWER_TOKENS: dict[str, list[str]] = {
    "flash_forward_tiled": ["exp(m - m_new)", "alpha * l", "alpha * o", "m + log(l)",
                            "m + np.log(l)", "o / l"],
    "flash_backward": ["dout * out", "rowsum(dout", "exp(s - lse", "P * (dP - D)",
                       "p * (dp - d)", "dS.T @ q"],
}
