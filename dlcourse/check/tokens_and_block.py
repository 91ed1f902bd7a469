"""Checks for lesson 15c: tokens and the modern block (byte-level BPE, RMSNorm, RoPE).

Each check takes *your* function, runs it on several small cases, compares it with the
library's reference (``dlcourse/data/bpe.py``: the naive BPE learner, ``learn_merges_naive``;
``dlcourse/modern_block.py``: ``RMSNorm`` and ``rope``, gradient-checked and compared with
PyTorch in tests/test_modern_block.py) and either prints one line saying that every case
passes, or raises :class:`ExerciseError` naming the case, the problem and, for the common
mistakes, the likely fix::

    dl.check.rmsnorm_backward(rmsnorm_backward)

==================================  ===========================  ==============================
lesson                              check                        your function
==================================  ===========================  ==============================
15c_tokens_and_the_modern_block     :func:`bpe_merge_step`       ``(chunks, freqs, new) ->
                                                                 pair, merged``
15c_tokens_and_the_modern_block     :func:`rmsnorm_backward`     ``(dout, x, g, eps) -> dx, dg``
15c_tokens_and_the_modern_block     :func:`rope`                 ``(x, start) -> y``
==================================  ===========================  ==============================

(Named ``tokens_and_block.py``: ``bpe.py`` and ``modern_block.py`` are the library's, and no two
modules of the package share a name.) The shared machinery lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_shape, expect_unchanged, fail, passed, rng,
                      shape_text, to_array)

__all__ = ["bpe_merge_step", "rmsnorm_backward", "rope"]

N_BYTES = 256
BASE = 10000.0


# ======================================================================================
# bpe_merge_step
# ======================================================================================
def _ids_of(chunk):
    """A chunk's ids as the library's learner sees them: a str is its UTF-8 bytes."""
    __tracebackhide__ = True
    return list(chunk.encode("utf-8")) if isinstance(chunk, str) else [int(t) for t in chunk]


def _merge_reference(chunks, freqs, new):
    """(pair, merged) of one step of the library's naive learner (learn_merges_naive)."""
    __tracebackhide__ = True
    from ..data.bpe import merge_pair, pair_counts
    ids = [_ids_of(c) for c in chunks]
    counts = pair_counts(ids, freqs)
    pair = min(counts, key=lambda p: (-counts[p], p))
    return pair, [merge_pair(c, pair, new) for c in ids]


def _counts_with(ids, freqs, overlapping=True, weighted=True):
    """{pair: count}, counted right, or with overlaps in a run counted once (as str.count), or
    each distinct chunk once."""
    __tracebackhide__ = True
    counts = {}
    for c, f in zip(ids, freqs):
        i = 0
        while i + 1 < len(c):
            p = (c[i], c[i + 1])
            counts[p] = counts.get(p, 0) + (f if weighted else 1)
            run = p[0] == p[1] and i + 2 < len(c) and c[i + 2] == p[1]
            i += 2 if run and not overlapping else 1
    return counts


def _best(counts, smallest=True):
    __tracebackhide__ = True
    if smallest:
        return min(counts, key=lambda p: (-counts[p], p))
    return max(counts, key=lambda p: (counts[p], p))


def _wrong_pairs(chunks, freqs):
    """(pair, what is wrong) of the known mistakes in choosing the pair."""
    __tracebackhide__ = True
    ids = [_ids_of(c) for c in chunks]
    out = [(_best(_counts_with(ids, freqs), smallest=False), "ties are broken the other way: "
            "among pairs with the same count, the library takes the SMALLER pair (a, b), "
            "compared as tuples (the smaller a, then the smaller b), so the same text always "
            "gives the same merges."),
           (_best(_counts_with(ids, freqs, weighted=False)), "each chunk's pairs are counted "
            "once: a distinct chunk stands for freqs[i] places in the text, so its pairs count "
            "freqs[i] times."),
           (_best(_counts_with(ids, freqs, overlapping=False)), "overlapping pairs are counted "
            "once: in 'aaa' the neighbours (a, a) occur TWICE, at positions 0-1 and 1-2. Count "
            "every pair of neighbours; only the merge goes left to right without overlap.")]
    if any(isinstance(c, str) and len(c.encode("utf-8")) != len(c) for c in chunks):
        chars = ("you counted CHARACTERS: byte-level BPE starts from the UTF-8 bytes of the "
                 "text (256 ids), and a character such as 'é' is two of them. A chunk that is "
                 "still a str must become its bytes first.")
        for as_ids in ([list(map(ord, c)) for c in chunks], [list(c) for c in chunks]):
            for smallest in (True, False):
                out.append((_best(_counts_with(as_ids, freqs), smallest), chars))
    return out


def _merged_variants(ids, pair, new):
    """(merged, what is wrong) of the known mistakes in replacing the pair."""
    __tracebackhide__ = True
    a, b = pair

    def greedy(c):                          # after a match, on from i + 1: overlaps merged
        __tracebackhide__ = True
        out, i = [], 0
        while i < len(c):
            out.append(new if i + 1 < len(c) and c[i] == a and c[i + 1] == b else c[i])
            i += 1
        return out

    def right_to_left(c):
        __tracebackhide__ = True
        out, i = [], len(c) - 1
        while i >= 0:
            if i >= 1 and c[i - 1] == a and c[i] == b:
                out.append(new)
                i -= 2
            else:
                out.append(c[i])
                i -= 1
        return out[::-1]
    return [([greedy(c) for c in ids], "a pair that overlaps itself is merged twice: after "
             "replacing (a, b) at i, go on from i + 2, past both ids (\"aaa\" with (a, a) "
             "becomes [new, a], two ids)."),
            ([right_to_left(c) for c in ids], "the merge runs right to left: the library goes "
             "left to right, so \"aaa\" with (a, a) becomes [new, a], not [a, new].")]


def _bpe_cases():
    """(what, chunks, freqs, new) of each case: ties, overlaps, weights, multi-byte characters,
    and a later step whose chunks already hold merged ids (>= 256)."""
    __tracebackhide__ = True
    later = [[97, 256, 99], [256, 256, 98], [99, 97, 256]]
    return [
        ("a tie: (a, b) and (b, a) both 3 times", ["abab", "baba"], [1, 1], 256),
        ("overlapping pairs: 'aaa' 4 times, 'ab' 7 times", ["aaa", "ab"], [4, 7], 256),
        ("weights: 'xy' once, 'zw' 4 times, 'xyxy' once", ["xy", "zw", "xyxy"], [1, 4, 1], 256),
        ("multi-byte characters: 'héé', ' é', 'ü', 'ee'", ["héé", " é", "ü", "ee"],
         [2, 3, 4, 1], 256),
        ("a later step: chunks that hold merged ids, new id 257", later, [2, 1, 3], 257),
        ("merging inside a run: 'aaaaa' and 'aab'", ["aaaaa", "aab"], [1, 1], 256),
    ]


def _copy_chunks(chunks):
    __tracebackhide__ = True
    return [c if isinstance(c, str) else list(c) for c in chunks]


def bpe_merge_step(fn) -> None:
    """Check ``fn(chunks, freqs, new)`` -> ``(pair, merged)``: one merge of byte-level BPE.
    ``chunks``: the text's distinct chunks, each a str (not merged yet: its ids are its UTF-8
    bytes) or a list of ids; ``freqs[i]``: how often chunk i occurs; ``new``: the id the merge
    makes. ``pair`` is the most frequent pair of neighbouring ids (ties: the smaller pair),
    ``merged`` the chunks as lists of ids with each occurrence of the pair, left to right,
    replaced by ``new``. Compared with the library's naive learner (``learn_merges_naive``);
    the usual mistakes are named: ties the other way, overlapping pairs counted once or merged
    twice, freqs ignored, characters where BPE has bytes. The last case runs your function
    merge after merge on a sentence with multi-byte characters and compares every merge."""
    __tracebackhide__ = True
    cases = _bpe_cases()
    for what, chunks, freqs, new in cases:
        case = f"{what} (freqs {freqs}, new = {new})"
        given = _copy_chunks(chunks)
        out = call(fn, given, list(freqs), new, case=case,
                   on_error="pair is a tuple of two ids; merged is a list with one list of ids "
                            "per chunk.")
        pair, merged = _pair_and_merged(out, fn, case)
        e_pair, e_merged = _merge_reference(chunks, freqs, new)
        _expect_pair(pair, e_pair, chunks, freqs, fn, case)
        _expect_merged(merged, e_merged, chunks, e_pair, new, fn, case)
        if given != _copy_chunks(chunks):
            fail(fn, case, "your function changed the chunks it was given, in place.",
                 "build new lists for the merged chunks; leave the caller's as they are.")
    _expect_learned_merges(fn)
    passed(fn, len(cases) + 1)


def _pair_and_merged(out, fn, case):
    __tracebackhide__ = True
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(fn, case, f"your function returned {type(out).__name__}; it should return two "
                       f"things, (pair, merged).", "return pair, merged")
    pair, merged = out
    try:
        pair = tuple(t if isinstance(t, str) else int(t) for t in pair)
        merged = [[t if isinstance(t, str) else int(t) for t in c] for c in merged]
    except (TypeError, ValueError):
        fail(fn, case, "pair should be a tuple of two ids, and merged a list of chunks, each a "
                       "list of ids.", "return pair, merged")
    if len(pair) != 2:
        fail(fn, case, f"pair should be two ids, (a, b); got {pair}.")
    return pair, merged


def _expect_pair(pair, e_pair, chunks, freqs, fn, case):
    __tracebackhide__ = True
    if pair == e_pair:
        return
    if any(isinstance(t, str) for t in pair):
        fail(fn, case, f"pair should be {e_pair}; got {pair}.", "pair holds ids (integers), "
             "never characters: byte-level BPE counts the UTF-8 bytes of the text.")
    for wrong, why in _wrong_pairs(chunks, freqs):
        if pair == wrong:
            fail(fn, case, f"pair should be {e_pair}; got {pair}.", why)
    fail(fn, case, f"pair should be {e_pair}; got {pair}.",
         "count every pair of neighbouring ids in every chunk, freqs[i] times for chunk i; the "
         "largest count wins, and among equal counts the smaller pair.")


def _expect_merged(merged, e_merged, chunks, pair, new, fn, case):
    __tracebackhide__ = True
    if merged == e_merged:
        return
    if len(merged) != len(e_merged):
        fail(fn, case, f"merged has {len(merged)} chunks; it should have one per chunk given, "
                       f"{len(e_merged)}, in the same order.")
    ids = [_ids_of(c) for c in chunks]
    i = next(k for k, (m, e) in enumerate(zip(merged, e_merged)) if m != e)
    problem = f"chunk {i} should become {e_merged[i]}; got {merged[i]}."
    if any(isinstance(t, str) for t in merged[i]):
        fail(fn, case, problem, "merged holds ids (integers), never characters: a chunk that is "
                                "still a str is its UTF-8 bytes.")
    for wrong, why in _merged_variants(ids, pair, new):
        if merged == wrong:
            fail(fn, case, problem, why)
    if merged[i] == ids[i]:
        fail(fn, case, problem, f"the pair {pair} was not replaced by new = {new} in it.")
    fail(fn, case, problem, f"replace each (a, b) = {pair} of neighbours by new, left to right, "
                            f"and keep every other id as it is.")


def _expect_learned_merges(fn):
    """Your function applied merge after merge from the text reproduces the library's naive
    learner's merges (the last case)."""
    __tracebackhide__ = True
    import re
    from collections import Counter
    from ..data.bpe import PRE_SPLIT, learn_merges_naive
    text = ("Byte-level BPE starts from bytes: naïve café, 'don't', über-fast, "
            "the the the theme; aaaa aaa 12345 123. ")
    words = Counter(re.findall(PRE_SPLIT, text))
    chunks, freqs = list(words), list(words.values())
    expected = learn_merges_naive([list(w.encode("utf-8")) for w in chunks], freqs, 12)
    state = list(chunks)
    for k, e in enumerate(expected):
        case = (f"merge {k + 1} of {len(expected)}, your function called again on what it "
                f"returned, from the chunks of {text!r}")
        pair, merged = _pair_and_merged(call(fn, _copy_chunks(state), list(freqs), N_BYTES + k,
                                             case=case), fn, case)
        if pair != e:
            fail(fn, case, f"merge {k + 1} should be {e}; got {pair} (the merges before it "
                           f"matched).", "on chunks that already hold merged ids, count and "
                                         "merge exactly as on bytes.")
        state = merged


# ======================================================================================
# rmsnorm_backward
# ======================================================================================
def _rmsnorm_reference(dout, x, g, eps):
    """(dx, dg) from the library's RMSNorm, in float64."""
    __tracebackhide__ = True
    from ..modern_block import RMSNorm
    layer = RMSNorm(x.shape[-1], eps=eps, dtype=np.float64)
    layer.params = {"g": g.copy()}
    layer.forward(x.copy())
    return layer.backward(dout.copy()), layer.grads["g"]


def _rmsnorm_cases():
    """(dout, x, g, eps) of each case: one has N == D, one a large eps with small x (where eps
    outside the root shows), one a 3-D x (the statistics over the last axis only)."""
    __tracebackhide__ = True
    r = rng(151)
    cases = []
    for shape, eps, scale in [((4, 6), 1e-6, 2.0), ((5, 5), 1e-3, 1.0), ((3, 8), 0.5, 0.3),
                              ((2, 3, 4), 1e-6, 1.5), ((1, 7), 1e-2, 1.0)]:
        x = r.standard_normal(shape) * scale + 0.7 * r.standard_normal(shape[:-1] + (1,))
        cases.append((r.standard_normal(shape), x, r.uniform(0.5, 2.0, shape[-1]), eps))
    return cases


def rmsnorm_backward(fn) -> None:
    """Check ``fn(dout, x, g, eps)`` -> ``(dx, dg)``: the backward pass of RMSNorm over the last
    axis of x (..., D), ``y = g * x / sqrt(mean(x**2) + eps)``; g (D,). Compared with
    ``dl.RMSNorm``'s backward (gradient-checked against finite differences in float64 in
    tests/test_check_modern.py). The usual mistakes are named: the mean subtracted as in
    LayerNorm, the 1/D missing (a sum where the derivation has a mean), eps outside the root,
    the root's path forgotten, dg not summed over every row."""
    __tracebackhide__ = True
    cases = _rmsnorm_cases()
    for dout, x, g, eps in cases:
        D = x.shape[-1]
        case = (f"dout and x of shape {shape_text(x.shape)}, g of shape {shape_text((D,))}, "
                f"eps = {eps:g}")
        e_dx, e_dg = _rmsnorm_reference(dout, x, g, eps)
        given = {"dout": dout.copy(), "x": x.copy(), "g": g.copy()}
        out = call(fn, given["dout"], given["x"], given["g"], eps, case=case,
                   on_error="the root mean square is one number per row: a mean over the last "
                            "axis with keepdims=True broadcasts it back over dout.")
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            fail(fn, case, f"your function returned {type(out).__name__}; it should return "
                           f"two arrays, (dx, dg).", "return dx, dg")
        dx, dg = (to_array(a, fn, case, n) for a, n in zip(out, ("dx", "dg")))
        x2 = x.reshape(-1, D)
        d2 = dout.reshape(-1, D)
        rms = np.sqrt((x2 * x2).mean(axis=1, keepdims=True) + eps)
        xh = x2 / rms
        outside = np.sqrt((x2 * x2).mean(axis=1, keepdims=True)) + eps
        eps_out = ("eps sits outside the root: RMSNorm divides by sqrt(mean(x**2) + eps), eps "
                   "INSIDE the square root (as torch.nn.RMSNorm).")
        rows = "g has one entry per feature, shared by every row: dg gathers over every row."
        expect_shape(dg, (D,), fn, case, "dg", rows)
        expect_close(dg, e_dg, fn, case, "dg", mistakes=[
            (lambda: d2.sum(axis=0), "g multiplies x_hat = x / rms, so dout reaches g multiplied "
                                     "by x_hat; summing dout alone misses it."),
            (lambda: (d2 * x2).sum(axis=0), "g multiplies the NORMALIZED x (x / rms), not x."),
            (lambda: (d2 * xh).mean(axis=0), "dg is a SUM over the rows, not a mean."),
            (lambda: (d2 * x2 / outside).sum(axis=0), eps_out),
        ])
        expect_shape(dx, x.shape, fn, case, "dx", "dx has x's shape.")
        dh = d2 * g

        def dx_with(center=False, reduce=np.mean, r=rms, root_path=True):
            __tracebackhide__ = True

            def f():
                __tracebackhide__ = True
                xh_ = x2 / r
                out = dh
                if center:
                    out = out - dh.mean(axis=1, keepdims=True)
                if root_path:
                    out = out - xh_ * reduce(dh * xh_, axis=1, keepdims=True)
                return (out / r).reshape(x.shape)
            return f
        expect_close(dx, e_dx, fn, case, "dx", mistakes=[
            (dx_with(center=True), "that is LayerNorm's backward: RMSNorm subtracts no mean, so "
                                   "there is no mean's path (no '- mean(dx_hat)' term)."),
            (dx_with(reduce=np.sum), "the root's path is D times too large: mean(x**2) divides "
                                     "by D, so its path carries a 1/D (a mean over the "
                                     "features, not a sum)."),
            (dx_with(r=outside), eps_out),
            (dx_with(r=outside, center=True), "that is LayerNorm's backward, with eps outside "
                                              "the root as well."),
            (dx_with(root_path=False), "that is only the direct path: every x of a row also "
                                       "reaches the loss through the row's rms, which adds a "
                                       "term of its own."),
            (lambda: (d2 / rms).reshape(x.shape), "g is missing, and so is the rms's path: the "
                                                  "gradient reaching x_hat is dout times g."),
        ], fix="derive it as the lesson sets it up (one row's graph: x -> rms -> x_hat -> y) and "
               "compare with dl.gradcheck on a float64 dl.RMSNorm and a small x.")
        expect_unchanged(fn, case, [(k, ref, given[k]) for k, ref in
                                    (("dout", dout), ("x", x), ("g", g))])
    passed(fn, len(cases))


# ======================================================================================
# rope
# ======================================================================================
def _rope_reference(x, start):
    __tracebackhide__ = True
    from ..modern_block import rope as library_rope
    return library_rope(x.copy(), start)


def _rope_variant(x, start, layout="pairs", sign=1.0, freq=2.0, pos_axis=-2):
    """x rotated with one thing changed: "half" pairs (i, i + d/2); sign -1 the other way;
    freq 1 theta_i = base^(-i/d); pos_axis 0 positions from the first axis."""
    __tracebackhide__ = True
    *_, T, d = x.shape
    theta = BASE ** (-freq * np.arange(d // 2) / d)
    t = np.arange(start, start + x.shape[pos_axis])
    ang = t[:, None] * theta                                         # (T', d/2)
    if pos_axis == 0 and x.ndim == 3:
        ang = ang[:, None, :]
    cos, sin = np.cos(ang), sign * np.sin(ang)
    if layout == "half":
        x0, x1 = x[..., :d // 2], x[..., d // 2:]
        return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2], y[..., 1::2] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
    return y


def _rope_cases():
    """(x, start) of each case: a batch of heads, a start past 0, a lone row, d = 2."""
    __tracebackhide__ = True
    r = rng(152)
    return [(r.standard_normal((5, 8)), 0), (r.standard_normal((3, 6, 4)), 0),
            (r.standard_normal((2, 4, 8)), 7), (r.standard_normal((2, 1, 3, 6)), 11),
            (r.standard_normal((4, 2)), 3)]


def rope(fn) -> None:
    """Check ``fn(x, start)`` -> ``y``: rotary position embeddings on x (..., T, d), positions
    on axis -2 starting at ``start``, each pair (x[..., 2i], x[..., 2i+1]) turned by the angle
    t * theta_i, theta_i = 10000**(-2i/d). Compared with ``dl.rope``; the usual mistakes are
    named: the rotate-half layout (pairs i, i + d/2) instead of interleaved pairs, the sine's
    sign flipped (turned the other way), the start ignored, the frequencies' 2 missing,
    positions read from the wrong axis. The last case checks the relative-position property:
    q turned at m and k at n give q'.k' that depends only on n - m."""
    __tracebackhide__ = True
    cases = _rope_cases()
    for x, start in cases:
        case = f"x of shape {shape_text(x.shape)}, start = {start}"
        given = x.copy()
        y = to_array(call(fn, given, start, case=case,
                          on_error="x is (..., T, d): positions on axis -2, the d features (d/2 "
                                   "pairs) on axis -1; cos and sin of shape (T, d/2) broadcast "
                                   "over the leading axes."), fn, case, "y")
        expect_shape(y, x.shape, fn, case, "y", "a rotation keeps x's shape.")
        expect_close(y, _rope_reference(x, start), fn, case, "y", rtol=1e-6, atol=1e-9, mistakes=[
            (lambda: _rope_variant(x, start, layout="half"), "that is the rotate-half layout, "
             "pairs (i, i + d/2) as in some PyTorch code: this course (and the original paper) "
             "turns interleaved pairs, (2i, 2i+1)."),
            (lambda: _rope_variant(x, start, sign=-1.0), "the rotation goes the wrong way: the "
             "sine's sign is flipped. The first of a pair gets cos minus sin, the second sin plus "
             "cos."),
            (lambda: _rope_variant(x, 0) if start else None, "the start is ignored: row j of x "
             "is at position start + j, not j (a key/value cache feeds one new row at a time)."),
            (lambda: _rope_variant(x, start, freq=1.0), "the frequencies are wrong: pair i turns "
             "at theta_i = 10000**(-2i/d), the exponent runs over the EVEN feature indices."),
            (lambda: _rope_variant(x, start, pos_axis=0) if x.ndim == 3 else None,
             "the positions are read from axis 0: they run along axis -2 (T), whatever the "
             "leading axes are."),
            (lambda: _rope_variant(x, start, layout="half", sign=-1.0), "the rotate-half layout, "
             "and turned the other way as well."),
        ], fix="build the angles t * theta_i as a (T, d/2) table, t = start, start + 1, ...; "
               "then turn each pair (2i, 2i+1) by its angle (see the lesson's 2 x 2 rotation).")
        expect_unchanged(fn, case, [("x", x, given)])
    _expect_relative(fn)
    passed(fn, len(cases) + 1)


def _expect_relative(fn):
    """q turned at position m and k at n: the score depends on n - m only."""
    __tracebackhide__ = True
    r = rng(153)
    q, k = r.standard_normal((1, 8)), r.standard_normal((1, 8))
    case = "the relative-position property: q at m, k at n, for (m, n) = (2, 5) and (10, 13)"
    scores = []
    for m, n in [(2, 5), (10, 13)]:
        qm = to_array(call(fn, q.copy(), m, case=case), fn, case, "q turned")
        kn = to_array(call(fn, k.copy(), n, case=case), fn, case, "k turned")
        scores.append(float((qm * kn).sum()))
    if not np.isclose(scores[0], scores[1], rtol=1e-9, atol=1e-9):
        fail(fn, case, f"q'.k' is {scores[0]:.6g} at (2, 5) and {scores[1]:.6g} at (10, 13): it "
                       f"should depend on the offset n - m = 3 only.",
             "turn both by the same kind of rotation (angle position * theta_i per pair): "
             "R(m)^T R(n) = R(n - m) holds for rotations only.")


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'bpe_merge_step': [
        ("three steps: (1) the ids of every chunk (a str is still text: which 256 values does "
         "byte-level BPE start from?); (2) a dict pair -> count, every pair of neighbours in "
         "every chunk, each counted freqs[i] times, overlaps included; (3) the best pair, then a "
         "walk along each chunk that replaces it, left to right."),
        ("pair = the pair with the largest count, ties to the smaller pair (a key such as "
         "(-count, ___) for min); for the merge, at position i: if ids[i], ids[i + 1] is the "
         "pair, append ___ and jump to i + ___, else append ids[i] and go to i + 1. Compare "
         "with the lesson's merges printed from dl.data.BPETokenizer.train."),
    ],
    'rmsnorm_backward': [
        ("one row's graph: its D values -> r, one over the root of (mean of the squares + eps) "
         "-> x_hat, x scaled by r -> y, g times x_hat. Each x reaches the loss directly "
         "(through its own x_hat) and through r, which every x_hat of the row shares. What is "
         "d r / d x_j? dg gathers over every row."),
        ("with the gradient reaching x_hat (dout times g) and r per row (keepdims): dx = r "
         "times (that gradient - x_hat times the mean over the row of ___); dg = the sum of ___ "
         "over every axis but the last. Set it beside LayerNorm's backward (lesson 07b): which "
         "term is gone, and why?"),
    ],
    'rope': [
        ("build the table of angles first: the positions of the T rows (a column) times "
         "theta_i for i = 0 ... d/2 - 1 (a row) gives (T, d/2). Then split x into its even and "
         "odd features (slices with a step of 2): each (..., T, d/2), one per pair."),
        ("y_even = x_even * ___ - x_odd * ___; y_odd = x_even * ___ + x_odd * ___; write them "
         "back interleaved into a new array of x's shape. The lesson's 2 x 2 rotation matrix is "
         "the pattern."),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'bpe_merge_step': ['encode', 'utf-8', 'utf8', 'i + 2', 'i += 2', '-count', 'smaller pair',
                       'smallest pair', 'min(', 'overlap'],
    'rmsnorm_backward': ['x_hat * ', 'mean(g_hat', '(g_hat -', 'r * (', 'no mean',
                         'sum(axis=0)', 'inside the root', 'inside the square root'],
    'rope': ['0::2', '1::2', 'cos -', '* cos', '* sin', 'cos(', 'sin(', '2i+1', '2i + 1',
             'interleaved'],
}
