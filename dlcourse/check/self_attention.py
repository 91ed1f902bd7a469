"""Checks for lessons 15 and 16: attention by hand, and FlashAttention.

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/attention.py``, ``dlcourse/flash_attention.py``) and either
prints one line saying that every case passes, or raises :class:`ExerciseError` naming the case,
the problem and, for the common mistakes, the likely fix::

    dl.check.attention_backward(attention_backward)

=====================  ============================  ==========================================
lesson                 check                         your function
=====================  ============================  ==========================================
15_attention           :func:`attention_backward`    ``(dout, cache) -> dq, dk, dv``
15_attention           :func:`causal_mask`           ``(Tq, Tk) -> bool (Tq, Tk)``
16_flash_attention     :func:`merge_softmax`         ``(m1, l1, o1, m2, l2, o2) -> m, l, o``
16_flash_attention     :func:`attention_bytes`       ``(N, H, T, d, itemsize, Br, causal)``
                                                     ``-> (naive, tiled)`` bytes
=====================  ============================  ==========================================

(The module shares its name with ``dlcourse/attention.py`` on purpose: it checks that lesson's
exercises, as ``check/residual.py`` checks ``Residual``'s.) The shared machinery (``call``,
``fail``, ``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import math

import numpy as np

from .harness import (PeakMemory, call, expect_close, expect_on_gpu, expect_shape, expect_tuple,
                      expect_unchanged, fail, gpu, passed, rng, shape_text, to_array, to_number)

__all__ = ["attention_backward", "causal_mask", "merge_softmax", "attention_bytes"]


# While the learner's function runs the library is closed (harness.call; seal.py): an answer
# that calls into it, or into any package but NumPy and CuPy, fails, naming the call.


# ======================================================================================
# 15_attention: attention_backward
# ======================================================================================
def _attention_cases():
    """(q, k, v, causal) of each case, float64. The second has Tq == Tk, where a missing
    transpose keeps the shapes right and only the values tell; the third is causal, so P holds
    zeros; the fourth has one head of size 1; the last has rows of _LONG keys, where a Tk x Tk
    matrix per row (the softmax's Jacobian, which the lesson asks not to build) is 8 MiB."""
    __tracebackhide__ = True
    r = rng(151)
    cases = []
    for (N, H, Tq, Tk, d), causal in [((2, 2, 3, 5, 4), False), ((1, 2, 4, 4, 3), False),
                                      ((2, 1, 5, 5, 2), True), ((1, 3, 2, 6, 1), False),
                                      ((1, 2, 2, _LONG, 4), False)]:
        q, k, v = (r.standard_normal(s) for s in ((N, H, Tq, d), (N, H, Tk, d), (N, H, Tk, d)))
        cases.append((q * 1.5, k, v, causal))
    return cases


_LONG = 1024     # keys per row in the case where a Tk x Tk matrix would show


def _expect_no_square(fn, case, peak, p, Tk):
    """Fail if the call held a Tk x Tk array (a row's Jacobian, even in 16 bits) at some moment:
    the rule's answer needs a few arrays of p's size, 32 KiB in the long case."""
    __tracebackhide__ = True
    if peak.bytes < Tk * Tk * 2:
        return
    fail(fn, case, f"it builds a Tk x Tk matrix for a row of p (the softmax's Jacobian, {Tk} x "
                   f"{Tk} here): your function held {peak.bytes / 2 ** 20:.1f} MiB at once, where "
                   f"p itself is {p.nbytes / 2 ** 10:.0f} KiB. The lesson asks for the Jacobian "
                   f"applied to dP without building the Tk x Tk matrix: a real model's rows hold "
                   f"thousands of keys.",
         "work out, for one row, what the Jacobian times dP gives at each key j; that needs "
         "no Tk x Tk array, only products of rows and one sum over the keys.")


def _attention_reference(q, k, v, causal, dout):
    """(P, dq, dk, dv) from the library's attention, in float64."""
    __tracebackhide__ = True
    from ..attention import attention_backward as backward, attention_forward as forward
    _, cache = forward(q, k, v, causal=causal)
    return (cache[3],) + backward(dout, cache)


def attention_backward(fn) -> None:
    """Check ``fn(dout, cache)`` -> ``(dq, dk, dv)``: the backward pass of scaled dot-product
    attention ``out = softmax(q k^T / sqrt(d)) v``, with ``cache = (q, k, v, p)``: q (N, H, Tq,
    d), k and v (N, H, Tk, d), p (N, H, Tq, Tk) the attention weights (each row sums to 1;
    masked entries are 0). Compared with ``dl.attention``'s backward (gradient-checked in
    tests/test_attention.py; refused while your function runs). The usual mistakes are named:
    the softmax's Jacobian taken as diagonal, its sum over the wrong axis, the 1/sqrt(d)
    forgotten, a missing transpose."""
    __tracebackhide__ = True
    cases = _attention_cases()
    cp = gpu()
    for q, k, v, causal in cases:
        N, H, Tq, d = q.shape
        Tk = k.shape[2]
        dout = rng(Tq * 10 + Tk).standard_normal(q.shape)
        p, e_dq, e_dk, e_dv = _attention_reference(q, k, v, causal, dout)
        case = (f"q {shape_text(q.shape)}, k and v {shape_text(k.shape)}, p "
                f"{shape_text(p.shape)}{', causal (p is 0 above the diagonal)' if causal else ''}")
        given = {"dout": dout.copy(), "q": q.copy(), "k": k.copy(), "v": v.copy(), "p": p.copy()}
        with PeakMemory(Tk >= _LONG) as peak:       # the rule: no Tk x Tk matrix
            answer = call(fn, given["dout"], (given["q"], given["k"], given["v"], given["p"]),
                          case=case,
                          on_error="follow the shapes: dout (N, H, Tq, d), p (N, H, Tq, Tk); "
                                   "swapaxes(-1, -2) transposes the last two axes of a 4-D "
                                   "array, and @ multiplies over the last two.")
        out = expect_tuple(answer, 3, fn, case, "dq, dk, dv")
        dq, dk, dv = (to_array(a, fn, case, n) for a, n in zip(out, ("dq", "dk", "dv")))
        scale = 1 / math.sqrt(d)
        pT = p.swapaxes(-1, -2)
        dp = dout @ v.swapaxes(-1, -2)                         # (N, H, Tq, Tk)
        expect_shape(dv, v.shape, fn, case, "dv", "dv has v's shape (N, H, Tk, d): the weights "
                                                 "p reach v through p @ v, keys on p's last axis.")
        expect_close(dv, e_dv, fn, case, "dv", mistakes=[
            (lambda: p @ dout if Tq == Tk else None, "p must be transposed: v's row j is used by "
                                                     "every query i with weight p[i, j]."),
            (lambda: pT @ dout * scale, "dv has no 1/sqrt(d): the scale sits on the scores, "
                                        "before the softmax, not on p @ v."),
        ], fix="out = p @ v, a matrix product: its gradient with respect to v is p transposed "
               "times dout (lesson 03's Linear, head by head).")

        def ds_of(dp_to_ds):
            __tracebackhide__ = True
            return dp_to_ds(dp)

        jac_wrong = [
            (lambda: ds_of(lambda g: p * g) @ k * scale,
             "the softmax's Jacobian is taken as diagonal (p times dP): every weight of a row "
             "depends on EVERY score of that row, through the shared denominator; the term "
             "that comes from it (a sum over the row) is missing."),
            (lambda: ds_of(lambda g: p * (g - (g * p).sum(axis=-2, keepdims=True))) @ k * scale,
             "the sum over a row runs over the wrong axis: a row of p is one query's weights "
             "over the keys, the LAST axis (keepdims=True to broadcast back)."),
            (lambda: ds_of(lambda g: g) @ k * scale,
             "the gradient skips the softmax: dP went straight to the scores. The scores pass "
             "through a softmax first, row by row."),
            (lambda: ds_of(lambda g: g - (g * p).sum(axis=-1, keepdims=True)) @ k * scale,
             "the factor p in front is missing: the derivative of p_j with respect to s_j "
             "carries p_j itself (and so does every other entry of the Jacobian)."),
            (lambda: ds_of(lambda g: p * (g - g.sum(axis=-1, keepdims=True))) @ k * scale,
             "the row sum must weight dP by p: it is the average of dP under the row's "
             "weights, not a plain sum."),
        ]
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
        expect_shape(dq, q.shape, fn, case, "dq", "dq has q's shape (N, H, Tq, d).")
        expect_close(dq, e_dq, fn, case, "dq", mistakes=jac_wrong + [
            (lambda: ds @ k, "dq misses the 1/sqrt(d): the scores are q k^T DIVIDED by sqrt(d), "
                             "so their gradient reaches q multiplied by that factor."),
            (lambda: ds @ k * math.sqrt(d), "dq is multiplied by sqrt(d): the scores are "
                                            "divided by it, so the factor is 1/sqrt(d)."),
            (lambda: ds.swapaxes(-1, -2) @ k * scale if Tq == Tk else None,
             "dq takes dS itself, not its transpose: row i of the scores belongs to query i."),
        ], fix="derive it step by step as the lesson sets it up: dP from out = p @ v, then dS "
               "through the softmax of one row, then the product q k^T with its scale.")
        expect_shape(dk, k.shape, fn, case, "dk", "dk has k's shape (N, H, Tk, d): the scores' "
                                                 "transpose meets q.")
        expect_close(dk, e_dk, fn, case, "dk", mistakes=[
            (lambda: ds @ q * scale if Tq == Tk else None,
             "dS must be transposed for dk: key j's column of the scores gathers every query."),
            (lambda: ds.swapaxes(-1, -2) @ q, "dk misses the 1/sqrt(d) the scores carry."),
        ], fix="the scores are q k^T / sqrt(d): k's gradient is dS transposed times q, with the "
               "same scale as dq.")
        expect_unchanged(fn, case, [(n, ref, given[n]) for n, ref in
                                    (("dout", dout), ("q", q), ("k", k), ("v", v), ("p", p))])
        _expect_no_square(fn, case, peak, p, Tk)
    if cp is not None:
        q, k, v, causal = cases[0]
        dout = rng(35).standard_normal(q.shape)
        p, e_dq, e_dk, e_dv = _attention_reference(q, k, v, causal, dout)
        case = f"q {shape_text(q.shape)}, on the GPU (CuPy arrays)"
        out = expect_tuple(call(fn, cp.asarray(dout), tuple(cp.asarray(a) for a in (q, k, v, p)),
                                case=case), 3, fn, case,
                           "dq, dk, dv")
        for g, name, ref in zip(out, ("dq", "dk", "dv"), (e_dq, e_dk, e_dv)):
            expect_on_gpu(g, fn, case, name)
            expect_close(to_array(g, fn, case, name), ref, fn, case, name)
    passed(fn, len(cases) + (cp is not None), cp is not None)


# ======================================================================================
# 15_attention: causal_mask
# ======================================================================================
def causal_mask(fn) -> None:
    """Check ``fn(Tq, Tk)`` -> a boolean (Tq, Tk) array, True where query i may look at key j.
    The Tq queries are the LAST Tq of the Tk positions (Tq == Tk in training; Tq < Tk when
    generating with a key/value cache), and each may see its own position and every earlier
    one. Compared with ``dl.attention(..., causal=True)``'s mask (refused while it runs)."""
    __tracebackhide__ = True
    cases = [(4, 4), (1, 1), (1, 5), (3, 7), (6, 6)]
    for Tq, Tk in cases:
        case = f"Tq={Tq}, Tk={Tk}" + (" (the queries are the last Tq of Tk positions)"
                                       if Tq < Tk else "")
        got = call(fn, Tq, Tk, case=case)
        arr = to_array(got, fn, case, "the mask")
        expect_shape(arr, (Tq, Tk), fn, case, "the mask", "one row per query, one column per key.")
        if arr.dtype != np.bool_:
            fail(fn, case, f"the mask has dtype {arr.dtype}, not bool.",
                 "return booleans, True where the query may look (PyTorch's convention for "
                 "scaled_dot_product_attention): compare positions with <=, or astype(bool).")
        i = np.arange(Tq)[:, None] + (Tk - Tq)          # each query's position among the keys
        j = np.arange(Tk)[None, :]
        expect_close(arr.astype(np.int8), (j <= i).astype(np.int8), fn, case, "the mask", mistakes=[
            ((j < i).astype(np.int8), "a query may look at its OWN position too: the diagonal "
                                      "is True."),
            ((j >= i).astype(np.int8), "True is where the key comes AFTER the query: the future. "
                                       "A query sees its own position and the ones before it."),
            ((j > i).astype(np.int8), "the mask is inverted: True marks the keys a query MAY see "
                                      "(and they include its own position)."),
            ((j <= np.arange(Tq)[:, None]).astype(np.int8) if Tq < Tk else None,
             "the queries are the LAST Tq positions (the earlier Tk - Tq keys come from the "
             "cache): query i sits at position i + (Tk - Tq), and sees everything up to there."),
        ], fix="query i sits at position i + (Tk - Tq) among the keys; it may see key j when j "
               "is not later than that.")
    passed(fn, len(cases))


# ======================================================================================
# 16_flash_attention: merge_softmax
# ======================================================================================
def _partial(s, v):
    """(m, l, o) of one block: max (R, 1), sum of exp(s - m) (R, 1), the normalised output."""
    __tracebackhide__ = True
    with np.errstate(invalid="ignore"):
        m = s.max(axis=1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = e.sum(axis=1, keepdims=True)
    o = (e @ v) / np.where(l > 0, l, 1)
    return m, l, o


def _merge_cases():
    """(s1, v1, s2, v2) of each case: the scores (R, B1), (R, B2) of two blocks of keys and
    their values. The second has scores near 1000 (exp overflows), the third a row whose first
    block is all masked (-inf: m1 = -inf, l1 = 0, o1 = 0), the fourth maxima that differ by 30,
    the last a row whose keys are masked in both blocks (m1 = m2 = -inf, l1 = l2 = 0: a causal
    tile's row before its first key, merged into the starting state), whose result is m = -inf,
    l = 0, o = 0."""
    __tracebackhide__ = True
    r = rng(161)
    cases = []
    for R, B1, B2, d, shift in [(3, 4, 5, 2, 0.0), (2, 3, 3, 4, 1000.0), (4, 2, 6, 3, 0.0),
                                (2, 5, 2, 1, 0.0)]:
        s1, s2 = r.standard_normal((R, B1)) * 2 + shift, r.standard_normal((R, B2)) * 2 + shift
        if B1 == 2:
            s1[1] = -np.inf
        if d == 1:
            s2 += 30
        cases.append((s1, r.standard_normal((B1, d)), s2, r.standard_normal((B2, d))))
    s1, s2 = r.standard_normal((3, 3)), r.standard_normal((3, 2))
    s1[1], s2[1], s2[2] = -np.inf, -np.inf, -np.inf
    cases.append((s1, r.standard_normal((3, 2)), s2, r.standard_normal((2, 2))))
    return cases


def merge_softmax(fn) -> None:
    """Check ``fn(m1, l1, o1, m2, l2, o2)`` -> ``(m, l, o)``: merge the softmax-attention
    results of two blocks of keys for the same R query rows. Block b gives m_b (R, 1), the
    largest score of each row; l_b (R, 1), the sum of exp(score - m_b) over the block; o_b
    (R, d), the block's own attention output (its softmax-weighted average of values). The
    merge must equal the result over both blocks at once: m the larger max, l the sum against
    it, o the output over all keys. Cases with scores near 1000 (exp overflows), with a row
    whose first block is entirely masked (m1 = -inf, l1 = 0), and with a row masked in both
    blocks (its merge is m = -inf, l = 0, o = 0)."""
    __tracebackhide__ = True
    cases = _merge_cases()
    cp = gpu()
    for s1, v1, s2, v2 in cases:
        R, d = s1.shape[0], v1.shape[1]
        (m1, l1, o1), (m2, l2, o2) = _partial(s1, v1), _partial(s2, v2)
        m, l, o = _partial(np.concatenate([s1, s2], axis=1), np.concatenate([v1, v2]))
        masked = bool(np.isinf(m1).any())
        empty = (np.isinf(m1) & np.isinf(m2)).ravel()          # rows with no key at all
        both = (f"row {int(np.argmax(empty))} entirely masked in BOTH blocks (m1 = m2 = -inf, "
                f"l1 = l2 = 0)")
        case = (f"R={R} rows, d={d}; blocks of {s1.shape[1]} and {s2.shape[1]} keys"
                + (", scores near 1000" if s1.min() > 500 else "")
                + (f", {both}" if empty.any() else
                   ", row 1's first block entirely masked (m1 = -inf, l1 = 0)" if masked else "")
                + (", maxima about 30 apart" if d == 1 else ""))
        nothing = ("a row with no key at all merges to m = -inf, l = 0, o = 0 (the tiled "
                   "loop's starting state): there the new max is -inf too, so exp(m1 - m) is "
                   "exp(-inf + inf) = nan, and o is 0 / 0. Guard such rows, so that a masked "
                   "block's factor is 0 and nothing is divided by l = 0.")
        given = [a.copy() for a in (m1, l1, o1, m2, l2, o2)]
        out = expect_tuple(call(fn, *given, case=case,
                                on_error="m and l are (R, 1) columns, so they broadcast against "
                                         "o (R, d) as they are."),
                           3, fn, case, "m, l, o")
        gm, gl, go = (to_array(a, fn, case, n) for a, n in zip(out, ("m", "l", "o")))
        expect_shape(gm, (R, 1), fn, case, "m", "one max per row, kept as a column (R, 1).")
        expect_close(gm, m, fn, case, "m", mistakes=[
            (np.minimum(m1, m2), "m is the LARGER of the two maxima."),
            (m1 + m2, "m is the larger of the two maxima, not their sum."),
        ])
        with np.errstate(all="ignore"):
            a1, a2 = np.exp(m1 - m), np.exp(m2 - m)
            b1, b2 = np.exp(m - m1), np.exp(m - m2)
        expect_shape(gl, (R, 1), fn, case, "l", "one sum per row, (R, 1).")
        if np.isnan(gl[empty]).any():
            fail(fn, case, f"l is nan in row {int(np.argmax(empty))}, whose keys are all "
                           f"masked.", nothing)
        if not np.isfinite(gl).all():
            fail(fn, case, "l holds inf or nan.",
                 "exp of a score near 1000 overflows: exponentiate only DIFFERENCES from the "
                 "new max (each at most 0), never a max or a score alone. A masked block has "
                 "m = -inf: exp(-inf - m) is 0, as it should be.")
        expect_close(gl, l, fn, case, "l", mistakes=[
            (lambda: l1 + l2, "the two sums were taken against DIFFERENT maxima (each "
                              "block's own): rescale each to the new max before adding them."),
            (lambda: b1 * l1 + b2 * l2, "the rescaling factors are upside down: a block whose "
                                        "max is below the new one must SHRINK (its exponent is "
                                        "at most 0)."),
            (lambda: np.maximum(a1 * l1, a2 * l2), "l is a sum over all the keys of both blocks: "
                                                   "add the rescaled sums."),
        ], fix="each l_b sums exp(score - m_b); written against the new max m, each term is "
               "multiplied by one factor per block. Which?")
        expect_shape(go, (R, d), fn, case, "o", "o has o1's shape (R, d).")
        if not np.isfinite(go[empty]).all():
            fail(fn, case, f"o holds nan in row {int(np.argmax(empty))}, whose keys are all "
                           f"masked.", nothing)
        if not np.isfinite(go).all():
            fail(fn, case, "o holds inf or nan.",
                 "only differences from the new max may be exponentiated; and a masked block "
                 "(l = 0) must add nothing, so weight each o_b by its share rather than divide "
                 "by its own l.")
        expect_close(go, o, fn, case, "o", mistakes=[
            (lambda: a1 * l1 * o1 + a2 * l2 * o2, "o is not normalised: divide the weighted sum "
                                                  "by the merged l."),
            (lambda: (l1 * o1 + l2 * o2) / (l1 + l2), "the weights l1 and l2 are against "
                                                      "different maxima: rescale them first."),
            (lambda: (a1 * o1 + a2 * o2) / (a1 + a2), "each block's output is an average over "
                                                      "its own keys: weight it by the probability "
                                                      "mass its block holds (its rescaled l), not "
                                                      "by the factor alone."),
            (lambda: (o1 + o2) / 2, "the blocks do not weigh the same: weight each o_b by its "
                                    "share of the merged sum."),
        ], fix="o over all keys is the average of the two blocks' outputs, each weighted by its "
               "share of the whole softmax denominator.")
        expect_unchanged(fn, case, list(zip(("m1", "l1", "o1", "m2", "l2", "o2"),
                                            (m1, l1, o1, m2, l2, o2), given)))
    if cp is not None:
        s1, v1, s2, v2 = cases[0]
        parts = _partial(s1, v1) + _partial(s2, v2)
        expected = _partial(np.concatenate([s1, s2], axis=1), np.concatenate([v1, v2]))
        case = "the first case, on the GPU (CuPy arrays)"
        out = expect_tuple(call(fn, *(cp.asarray(a) for a in parts), case=case), 3, fn, case,
                           "m, l, o")
        for g, name, ref in zip(out, ("m", "l", "o"), expected):
            expect_on_gpu(g, fn, case, name)
            expect_close(to_array(g, fn, case, name), ref, fn, case, name)
    passed(fn, len(cases) + (cp is not None), cp is not None)


# ======================================================================================
# 16_flash_attention: attention_bytes
# ======================================================================================
def _tiled_rows(T, Br, causal, last, cap=True):
    """Key (and value) rows the tiled forward reads, summed over its query tiles: every key, or
    (causal) the keys up to ``last(i0, i1)`` of each tile, at most T unless ``cap`` is False
    (wrong rules, for the mistakes)."""
    __tracebackhide__ = True
    tiles = [(i0, min(i0 + Br, T)) for i0 in range(0, T, Br)]
    return sum((min(T, last(i0, i1)) if cap else last(i0, i1)) if causal else T
               for i0, i1 in tiles)


def _attention_bytes_cases():
    """(N, H, T, d, itemsize, Br, causal). Ragged T (100 = 3 tiles of 32 and one of 4), a T
    below one tile, T = 1, causal and not, fp16 and fp32. The first has three query tiles, so
    reading k and v once in all and reading only k per tile give different counts."""
    __tracebackhide__ = True
    return [(1, 1, 12, 4, 4, 4, False), (1, 2, 100, 16, 4, 32, False), (2, 3, 16, 8, 4, 8, True),
            (4, 8, 256, 64, 2, 64, False), (1, 2, 100, 16, 4, 32, True), (1, 1, 5, 2, 4, 8, True),
            (1, 2, 1, 1, 4, 1, False), (2, 2, 4096, 64, 2, 128, True)]


def attention_bytes(fn) -> None:
    """Check ``fn(N, H, T, d, itemsize, Br, causal)`` -> ``(naive, tiled)``: the bytes one
    attention forward pass reads plus writes in memory (self-attention, Tq = Tk = T), counted
    from the shapes as lesson 16 sets it up. naive: three steps (the scores, the softmax, the
    weighted sum), each reading its inputs from memory and writing its output there once, the
    matrices whole whatever the mask. tiled: query tiles of Br rows (the last may be shorter),
    each reading its rows of q, every key and value row (causal: those up to the tile's last
    row), and writing its rows of out and one log-sum-exp per row. Compared with
    ``dl.flash_attention``'s ``attention_traffic`` (closed while it runs)."""
    __tracebackhide__ = True
    from ..flash_attention import attention_traffic
    cases = _attention_bytes_cases()
    for N, H, T, d, b, Br, causal in cases:
        case = (f"N={N}, H={H}, T={T}, d={d}, itemsize={b} bytes, Br={Br}"
                + (", causal" if causal else "") + (" (T is not a multiple of Br)"
                                                     if T % Br and T > Br else ""))
        out = expect_tuple(call(fn, N, H, T, d, b, Br, causal, case=case), 2, fn, case,
                           "naive, tiled")
        naive, tiled = (to_number(v, fn, case, f"the {n} byte count",
                                  "return two numbers: bytes read plus written, naive then tiled.")
                        for v, n in zip(out, ("naive", "tiled")))
        want = attention_traffic(N, H, T, d, itemsize=b, block=(Br, Br), causal=causal)
        problems = N * H * b
        square, rows = T * T, T * d
        if naive != want["naive"]:
            mistakes = [
                (N * H * (4 * square + 4 * rows), "that counts elements: multiply by itemsize, "
                                                  "the bytes of one number."),
                ((4 * square + 4 * rows) * b, "that is one head of one sample: every (sample, "
                                              "head) pair has its own q, k, v and T x T scores."),
                (problems * (2 * square + 4 * rows), "the softmax step is missing: it READS the "
                                                     "scores and WRITES the weights, T x T each."),
                (problems * (2 * square + rows), "count reads too, not only writes: each step "
                                                 "reads its inputs back from memory."),
                (problems * (3 * square + 4 * rows), "one T x T pass is missing: the scores are "
                                                     "written, read by the softmax, the weights "
                                                     "written, and read by the product with v."),
                (problems * (4 * square + 3 * rows), "one (T, d) array is missing: q and k are "
                                                     "read for the scores, v for the product, and "
                                                     "out is written."),
                (problems * (2 * T * (T + 1) + 4 * rows) if causal else None,
                 "the naive version masks entries in place: its matrices stay T x T, and each is "
                 "written and read whole, causal or not."),
            ]
            fix = next((why for wrong, why in mistakes if wrong is not None and naive == wrong),
                       "go step by step: for each of the three steps, which arrays does it read, "
                       "which does it write, and how many numbers does each hold?")
            fail(fn, case, f"naive is {naive:,.0f} bytes, expected {want['naive']:,}.", fix)
        expected = want["flash"]
        if tiled == expected:
            continue
        kv = _tiled_rows(T, Br, causal, lambda i0, i1: i1)

        def count(kv_rows, lse=True, v_too=True):
            __tracebackhide__ = True
            return problems * (2 * rows + (2 if v_too else 1) * kv_rows * d + (T if lse else 0))
        mistakes = [
            (problems * (4 * rows + T), "that reads k and v once in all, the ideal: the tiled "
                                        "version streams every key and value row once PER QUERY "
                                        "TILE, and there are as many tiles as it takes to cover "
                                        "T rows."),
            (count(T * (T // Br)) if T % Br else None,
             "the number of query tiles is rounded DOWN: a last, shorter tile still reads every "
             "key and value row (round T / Br up)."),
            (count(T * T / Br) if T % Br else None,
             "T / Br query tiles is not a whole number here: count the tiles, the last one "
             "shorter (round up)."),
            (count(kv, lse=False), "the log-sum-exp is missing: each query row writes one "
                                   "number of it, kept for the backward pass."),
            (count(kv, v_too=False), "v is streamed with k: each query tile reads both, row for "
                                     "row."),
            (count(_tiled_rows(T, Br, False, None)) if causal else None,
             "causal: a query tile reads only the keys up to its own last row; the later ones are "
             "masked for every row of the tile, so they are skipped."),
            (count(T * (T + 1) // 2) if causal and Br > 1 else None,
             "causal keys are read per TILE, not per row: each row of a tile gets the keys up to "
             "the tile's LAST row, those it does not see are masked after the read."),
            (count(_tiled_rows(T, Br, True, lambda i0, i1: i0)) if causal else None,
             "a causal query tile reads the keys up to its LAST row (i1 keys for a tile ending "
             "before row i1), not up to its first."),
            (count(_tiled_rows(T, Br, True, lambda i0, i1: i0 + Br, cap=False)) if causal and T % Br
             else None, "a causal tile reads keys up to its last row, and there are only T of "
                        "them: the last, shorter tile does not read past T."),
            (count(kv) // (N * H) if N * H > 1 else None,
             "that is one head of one sample: every (sample, head) pair is its own problem."),
            (count(kv) // b if b > 1 else None, "that counts elements: multiply by itemsize."),
        ]
        fix = next((why for wrong, why in mistakes if wrong is not None and tiled == wrong),
                   "count per query tile: its rows of q read and of out written, the key and "
                   "value rows it reads, one number per row written at the end; then add the "
                   "tiles, and scale by the problems and the bytes per number.")
        fail(fn, case, f"tiled is {tiled:,.0f} bytes, expected {expected:,}.", fix)
    passed(fn, len(cases), name="attention_bytes")


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    "attention_backward": [
        ("go backwards through the three steps of the forward pass: out = p @ v (a matrix "
         "product: two gradients, as in Linear), p = softmax of each row of the scores, scores "
         "= q times k transposed, scaled. For the softmax, take ONE row: how does p_i change "
         "when s_j changes, for i == j and for i != j?"),
        ("dv = (p with its last two axes swapped) @ ___; dP = dout @ (___ with its last two axes "
         "swapped); dS = p times (dP minus the row sum, over the LAST axis with keepdims, of "
         "___); dq = dS @ ___ times 1/sqrt(d); dk = (dS swapped) @ ___ times the same factor. "
         "The lesson's one-row example checks the softmax step by hand."),
    ],
    "causal_mask": [
        ("with a cache the queries are the last Tq of the Tk positions: what is query i's "
         "position among the keys? Then: which keys j are not in its future?"),
        ("make a column of query positions (Tq, 1) = i + (Tk - ___) and a row of key positions "
         "(1, Tk); compare them with ___ so that broadcasting gives (Tq, Tk) booleans."),
    ],
    "merge_softmax": [
        ("the merged max is the larger of the two. Each l_b is a sum of exp(s - m_b): multiply "
         "it by exp(m_b - m) to write it against the new max m. Each o_b is its block's "
         "average; how much of the whole softmax mass does block b hold?"),
        ("m = the elementwise larger of ___ and ___; a_b = exp(___ - m) for b = 1, 2 (a "
         "difference, at most 0); l = a_1 l_1 + ___; o = (a_1 l_1 o_1 + ___) / ___. A block "
         "with m_b = -inf gets a_b = 0 by itself."),
    ],
    "attention_bytes": [
        ("naive: list the three steps, which arrays each reads and which it writes, and how many "
         "numbers each array holds for one (sample, head). tiled: take one query tile of Br rows "
         "and list what IT reads and writes; how many tiles cover T rows when Br does not divide "
         "T? With a causal mask, which key rows can a tile skip?"),
        ("for one (sample, head): naive = (the scores step: ___) + (the softmax: ___) + (the "
         "weighted sum: ___), each term a count of T x d or T x T arrays. tiled = q read once + "
         "out written once + ___ (one number per row) + 2 x d x (key rows read, summed over the "
         "tiles); a tile reads ___ key rows, or with the mask the keys up to row ___ of the "
         "tile. Multiply both by N, H and ___."),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'causal_mask': ['Tk - Tq', 'tk - tq', '<=', 'np.tril', 'tril'],
    'attention_backward': ['a product with p and one sum per row', 'one sum per row', 'p * (dP',
        'p * (dp', 'dP - ', 'row sum', 'sum(p * dP', '(dP * p).sum'],
    'attention_bytes': ['4 * T * d', '4*T*d', '3 * T * T', 'T * T *', 'T*T', '6 * T * d',
        'ceil', '-(-T // Br)', '(T + Br - 1) // Br', 'T / Br', 'min(T, i0 + Br)',
        'min(i0 + Br, T)', 'T * (T + Br)', '2 * T * d'],
    'merge_softmax': ['the larger one', 'np.maximum(m1, m2)', 'exp(m1 - m', 'exp(m_b - m)',
        'exponential of a difference', 'share of the merged sum', "weighted by each block's",
        "rescale each block's sum"],
}
