"""Checks for lessons 10 and 11b: number formats and pruning (11a's are in ``quantization.py``).

- ``loss_scale_step(fn)`` (lesson 10): ``fn(scale, clean_steps, found_inf, growth_interval)
  -> (scale, clean_steps, take_step)``, one step of dynamic loss scaling;
- ``bf16_round(fn)`` (lesson 10): ``fn(x) -> float32 array of x's shape``, x rounded to the
  nearest bfloat16 on its bits (ties to even), compared bit for bit with ml_dtypes;
- ``magnitude_mask(fn)`` (lesson 11b): ``fn(w, sparsity) -> mask``, boolean of w's shape;
- ``channel_l1_keep(fn)`` (lesson 11b): ``fn(W, keep) -> indices``, the output channels of W
  that channel pruning keeps (largest L1 norm), in increasing order.

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` naming the case, the problem and the likely mistake, e.g.
``dl.check.loss_scale_step(loss_scale_step)``. The shared machinery (``call``, ``fail``,
``expect_close``, ...) lives in ``harness.py``.
"""
from __future__ import annotations

import numpy as np

from .harness import (call, expect_close, expect_on_gpu, expect_shape,
                      expect_tuple, expect_unchanged, fail, gpu, passed, rng, shape_text,
                      to_array, to_number)

__all__ = ["loss_scale_step", "bf16_round", "magnitude_mask", "channel_l1_keep"]


# ======================================================================================
# Lesson 10: one step of dynamic loss scaling
# ======================================================================================
# The library's own loss scaler answers with an error while the learner's function runs.


def _ref_loss_scale_step(scale, clean_steps, found_inf, growth_interval):
    __tracebackhide__ = True
    if found_inf:
        return scale * 0.5, 0, False
    count = clean_steps + 1
    if count == growth_interval:
        return scale * 2.0, 0, True
    return scale, count, True


def loss_scale_step(fn):
    """``fn(scale, clean_steps, found_inf, growth_interval) -> (scale, clean_steps, take_step)``."""
    __tracebackhide__ = True
    # Every argument varies: scales that are not powers of two, growth intervals of 1, 3, 5 and
    # 2000, counts at, below and one short of the interval, overflows at every count.
    cases = [(1024.0, 0, False, 3), (1024.0, 1, False, 3), (1024.0, 2, False, 3),
             (1024.0, 2, True, 3), (65536.0, 0, True, 2000), (8.0, 1999, False, 2000),
             (1.5, 0, False, 1), (0.75, 0, True, 1), (96.0, 3, False, 5), (96.0, 4, False, 5),
             (40.0, 1, False, 7)]
    fixes = {
        "skip": "a step whose gradients hold inf or NaN must be skipped (take_step False): "
                "the update would write inf into the weights.",
        "halve": "after an overflow the scale is halved, so that the next step's gradients fit.",
        "reset": "after an overflow the count of clean steps starts again at 0.",
        "grow": "after growth_interval clean steps in a row, double the scale and set the count "
                "back to 0; count this step first, then compare the new count with "
                "growth_interval (the one you are given: it changes from case to case).",
        "count": "a clean step adds one to clean_steps (and leaves the scale alone until the "
                 "count reaches growth_interval).",
    }
    for scale, clean, inf, interval in cases:
        case = f"scale={scale:g}, clean_steps={clean}, found_inf={inf}, growth_interval={interval}"
        got = expect_tuple(call(fn, scale, clean, inf, interval, case=case), 3, fn, case,
                           "scale, clean_steps, take_step")
        new_scale = to_number(got[0], fn, case, "the new scale")
        new_clean = to_number(got[1], fn, case, "the new clean_steps")
        want = _ref_loss_scale_step(scale, clean, inf, interval)
        if bool(got[2]) != want[2]:
            fail(fn, case, f"take_step is {bool(got[2])}, expected {want[2]}.",
                 fixes["skip"] if inf else "a step with finite gradients is taken (take_step True).")
        if new_scale != want[0]:
            fix = fixes["halve"] if inf else fixes["grow"]
            fail(fn, case, f"the new scale is {new_scale:g}, expected {want[0]:g}.", fix)
        if new_clean != want[1]:
            fix = fixes["reset"] if inf else fixes["grow"] if want[1] == 0 else fixes["count"]
            fail(fn, case, f"clean_steps is {new_clean:g}, expected {want[1]}.", fix)
    passed(fn, len(cases))


_KEPT = np.uint32(0xFFFF0000)     # the 16 bits a bfloat16 keeps of a float32


def _bf16_cases():
    """(name, float32 x) pairs: every kind of value the rounding must get right."""
    __tracebackhide__ = True
    gen = rng(10)
    near_one = 1 + np.arange(0, 17, dtype=np.float64) * 2.0**-9    # ties, ups and downs near 1
    high = gen.integers(0, 1 << 16, 12, dtype=np.uint32) << np.uint32(16)
    ties = np.r_[high | np.uint32(0x8000), high[:6] | np.uint32(0x18000)]   # exactly halfway
    sub = np.r_[np.array([0, 1, 0x8000, 0x18000, 0x28000, 0x7FFFFF, 0x7F8000], np.uint32),
                gen.integers(0, 1 << 23, 9, dtype=np.uint32)]              # exponent field 0
    sub = np.r_[sub, sub | np.uint32(0x80000000)]                          # and their negatives
    edges = np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7F0000, 0x7F800000,
                      0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0x7F80FFFF, 0x7FFFFFFF,
                      0xFFFFFFFF, 0x3F800000], np.uint32)
    normal = (gen.standard_normal((4, 6)) * 10.0 ** gen.integers(-6, 6, (4, 6))).astype(np.float32)
    return [("normal numbers of both signs from 1e-6 to 1e6, shape (4, 6)", normal),
            ("values from 1 to 1.03125 in steps of 2^-9, ties among them (and their negatives)",
             np.r_[near_one, -near_one].astype(np.float32)),
            ("exactly halfway between two bf16 numbers (ties), both signs",
             np.r_[ties, ties | np.uint32(0x80000000)].view(np.float32)),
            ("zeros and subnormals (exponent field 0), both signs", sub.view(np.float32)),
            ("the largest finite float32s (they round up to inf in bf16), inf, -inf and NaNs "
             "(one of them with only its low 16 mantissa bits set)", edges.view(np.float32)),
            ("random bit patterns, shape (64, 64) (every kind of value, NaNs included)",
             gen.integers(0, 1 << 32, (64, 64), dtype=np.uint64).astype(np.uint32)
             .view(np.float32))]


def _ref_bf16(x):
    """ml_dtypes' bfloat16 rounding (round to nearest, ties to even), as float32."""
    __tracebackhide__ = True
    import ml_dtypes
    with np.errstate(all="ignore"):
        return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def _bf16_mistakes(x):
    """(wrong answer as a function of nothing, what went wrong) for the usual wrong roundings."""
    __tracebackhide__ = True
    u = np.ascontiguousarray(x).view(np.uint32)
    want = _ref_bf16(x)
    return [
        (lambda: (u & _KEPT).view(np.float32),
         "that is truncation (chopping): the low 16 bits are dropped, so every value moves "
         "towards zero. Round to the NEAREST bf16 number: when the dropped bits are more "
         "than half of one step of the kept part, the kept part goes up by one."),
        (lambda: ((u + np.uint32(0x8000)) & _KEPT).view(np.float32),
         "that is round half up: a value exactly halfway (dropped bits 1000...0) always "
         "goes up (away from zero). Round half to EVEN instead, to the neighbour whose "
         "lowest kept bit is 0 (so 1 + 2^-8 rounds down to 1, and 1 + 3 x 2^-8 up to "
         "1.015625)."),
        (lambda: ((u + np.uint32(0x7FFF)) & _KEPT).view(np.float32),
         "that is round half down: a value exactly halfway always goes down (towards zero). "
         "Round half to EVEN instead, to the neighbour whose lowest kept bit is 0 "
         "(1 + 3 x 2^-8 goes UP to 1.015625)."),
        (lambda: np.abs(want),
         "the sign is lost: negative inputs come back positive. The sign is the top bit of "
         "the pattern; keep it (round the pattern as it is, without taking absolute values "
         "or clearing bit 31)."),
        (lambda: x.copy(),
         "nothing was rounded: the values come back as they went in."),
        (lambda: x.astype(np.float16).astype(np.float32),
         "that is float16 (5 exponent bits, 10 mantissa bits); bfloat16 keeps float32's 8 "
         "exponent bits and only the top 7 mantissa bits: the top 16 bits of the pattern.")]


def bf16_round(fn):
    """``fn(x) -> float32 array of x's shape``: x (float32) rounded to the nearest bfloat16,
    ties to even, NaN kept NaN, overflow to inf; compared bit for bit with ml_dtypes."""
    __tracebackhide__ = True
    cases = _bf16_cases()
    for case, x in cases:
        given = x.copy()
        got = _bf16_call(fn, given, case)
        changed = given.view(np.uint32) != x.view(np.uint32)    # bits: NaN != NaN as floats
        if changed.any():
            i = int(np.argmax(changed.ravel()))
            fail(fn, case, f"your function changed its input x in place: x = "
                           f"{_num(x.ravel()[i])} (bits {_hex(x.ravel()[i])}) is "
                           f"{_num(given.ravel()[i])} (bits {_hex(given.ravel()[i])}) after the "
                           f"call, so the caller's x is no longer what it passed.",
                 "a view of x shares x's memory: adding into the view (+=, &=) writes into x. "
                 "Compute the rounded bits into a new array instead.")
        _expect_bf16(fn, case, x, got)
    cp = gpu()
    if cp is not None:
        case, x = cases[-1]
        case = f"{case}, on the GPU (a CuPy array)"
        got = _bf16_call(fn, cp.asarray(x), case)
        expect_on_gpu(got, fn, case, "the result")
        _expect_bf16(fn, case, x, got)
    passed(fn, len(cases) + (cp is not None), cp is not None)


def _bf16_call(fn, x, case):
    """The learner's answer for x. The library is closed while it runs, and so are ml_dtypes'
    bfloat16 (what the check compares with) and PyTorch's casts; a dtype named by its string
    (``x.astype("bfloat16")``), which reaches ml_dtypes without a call, is refused here."""
    __tracebackhide__ = True
    fix = ("work on the bits: view x as unsigned 32-bit integers (no copy), round them with "
           "integer operations, and view the result as float32 again.")
    if _names_bfloat16(getattr(fn, "__code__", None)):
        fail(fn, case, "it converts to the dtype named \"bfloat16\", ml_dtypes.bfloat16, whose "
                       "rounding is what this exercise asks you to build and what the check "
                       "compares with, so the check would be testing ml_dtypes, not you.", fix)
    return call(fn, x, case=case, on_refused=fix)


def _names_bfloat16(code) -> bool:
    """Does a function's code (or a function defined inside it) name bfloat16 by a string?"""
    __tracebackhide__ = True
    if code is None:
        return False
    return ("bfloat16" in code.co_consts
            or any(_names_bfloat16(c) for c in code.co_consts if hasattr(c, "co_names")))


def _expect_bf16(fn, case, x, got):
    """Compare the learner's result with ml_dtypes' bit for bit; name the mistake."""
    __tracebackhide__ = True
    got = to_array(got, fn, case, "the result")
    expect_shape(got, x.shape, fn, case, "the result", "one rounded value per entry of x.")
    if got.dtype == np.uint32:
        fail(fn, case, "the result has dtype uint32: those are the rounded bit patterns.",
             "reinterpret them as float32 (a view of the same bits, not a conversion of the "
             "integers' values).")
    if got.dtype != np.float32:
        fail(fn, case, f"the result has dtype {got.dtype}, expected float32.",
             "return float32 numbers (each one exactly a bfloat16 value: its low 16 bits 0).")
    want = _ref_bf16(x)
    nan = np.isnan(want)
    same = ~nan & (got.view(np.uint32) == want.view(np.uint32))
    wrong_at = ~(same | nan)
    if wrong_at.any():
        finite = ~nan
        overflow = np.isinf(want) & np.isfinite(x)
        why = ("float32 values at the very top of the range round up past the largest bf16 "
               "number: the carry runs into the exponent and gives infinity, as storing them in "
               "bf16 does." if not (wrong_at & ~overflow).any() else
               "round to the nearest bf16 number (ties to even) on the bits: add to the "
               "pattern what makes the kept part go up exactly when it should, then clear the "
               "low 16 bits; a carry into the exponent is right.")
        for wrong, explanation in _bf16_mistakes(x) if (wrong_at & ~overflow).any() else ():
            try:
                with np.errstate(all="ignore"):
                    wrong = np.asarray(wrong())
            except Exception:  # noqa: BLE001 - a mistake that cannot be computed here
                continue
            if np.array_equal(got[finite].view(np.uint32), wrong[finite].view(np.uint32)):
                why = explanation
                break
        i = int(np.argmax(wrong_at.ravel()))
        xi, gi, wi = x.ravel()[i], got.ravel()[i], want.ravel()[i]
        fail(fn, case, f"{int(wrong_at.sum())} of {x.size} values are not the nearest "
                       f"bf16; the first: x = {_num(xi)} (bits {_hex(xi)}) gave {_num(gi)} "
                       f"(bits {_hex(gi)}), expected {_num(wi)} (bits {_hex(wi)}).", why)
    lost = nan & ~np.isnan(got)
    if lost.any():
        i = int(np.argmax(lost.ravel()))
        xi, gi = x.ravel()[i], got.ravel()[i]
        turned = "inf" if np.isinf(gi) else "zero" if gi == 0 else "a number"
        why = {"inf": "a NaN whose mantissa bits are all among the low 16 loses them when they "
                      "are cleared, and an all-ones exponent over a zero mantissa is infinity.",
               "zero": "the all-ones pattern carries past the top bit when rounded and wraps "
                       "round to a zero.",
               "a number": "rounding moved its bits out of the NaN patterns."}[turned]
        fail(fn, case, f"NaN turned into {turned}: x = nan (bits {_hex(xi)}) gave {_num(gi)} "
                       f"(bits {_hex(gi)}); a NaN must stay NaN.",
             f"{why} Keep x itself wherever x is NaN (test x, not the rounded bits).")


def _hex(value) -> str:
    __tracebackhide__ = True
    return f"0x{int(np.float32(value).view(np.uint32)):08X}"


def _num(value) -> str:
    __tracebackhide__ = True
    return f"{float(value):.9g}"


# ======================================================================================
# Lesson 11b: a magnitude-pruning mask
# ======================================================================================






def magnitude_mask(fn):
    """``fn(w, sparsity) -> mask``: boolean, False for the ``sparsity`` fraction of entries of
    smallest |w| (ties do not occur in the cases; a fractional count is rounded to the
    nearest whole number)."""
    __tracebackhide__ = True
    gen = rng(12)
    cases = [(np.array([0.5, -3.0, 0.1, 2.0, -0.2, 1.0, -0.05, 0.7], np.float32), 0.5),
             (gen.standard_normal((6, 5)).astype(np.float32), 0.8),
             (gen.standard_normal((3, 4)).astype(np.float32), 0.25),
             (gen.standard_normal((4, 5)).astype(np.float32), 0.33),    # 6.6 weights: 7
             (gen.standard_normal((10, 10)).astype(np.float32), 0.57),  # 56.99999999999999: 57
             (gen.standard_normal((2, 5)).astype(np.float32), 0.42)]    # 4.2 weights: 4
    for w, sparsity in cases:
        case = f"w of shape {w.shape}, sparsity={sparsity}"
        given = w.copy()
        mask = to_array(call(fn, given, sparsity, case=case), fn, case,
                        "mask")
        expect_unchanged(fn, case, [("w", w, given)])
        expect_shape(mask, w.shape, fn, case, "mask", "one True/False per weight: w's shape.")
        exact = sparsity * w.size
        want = _count_mask(w, int(round(exact))) > 0
        signed = np.ones(w.size, bool)
        signed[np.argsort(w, axis=None)[:int(round(exact))]] = False
        counting = (f"sparsity x size is {exact:.15g} here, not a whole number of weights: round "
                    f"it to the NEAREST whole number ({int(round(exact))}); converting it to an "
                    f"integer directly cuts the fraction off, and rounding up overshoots.")
        expect_close(mask.astype(np.float64), want.astype(np.float64), fn, case, "mask",
                     atol=0, rtol=0, mistakes=[
            (~want, "the mask is True for weights to KEEP (the largest |w|) and False for the "
                    "pruned ones: yours is the other way round."),
            (signed.reshape(w.shape).astype(np.float64),
             "rank the weights by magnitude, |w|: a large negative weight matters as much as a "
             "large positive one."),
            (lambda: _count_mask(w, int(round((1 - sparsity) * w.size))),
             "sparsity is the fraction to REMOVE: keep the largest (1 - sparsity) of the weights."),
            (lambda: _count_mask(w, int(exact)) if int(exact) != int(round(exact)) else None,
             counting),
            (lambda: _count_mask(w, int(np.ceil(exact)))
             if int(np.ceil(exact)) != int(round(exact)) else None, counting)])
    passed(fn, len(cases))


def _count_mask(w, k):
    """False for the k entries of smallest |w|."""
    __tracebackhide__ = True
    keep = np.ones(w.size, bool)
    keep[np.argsort(np.abs(w), axis=None)[:k]] = False
    return keep.reshape(w.shape).astype(np.float64)
























# ======================================================================================
# Lesson 11b: the channels that channel pruning keeps
# ======================================================================================


def _keep_of(norms, keep):
    __tracebackhide__ = True
    return np.sort(np.argsort(-norms, kind="stable")[:keep])


def channel_l1_keep(fn):
    """``fn(W, keep) -> indices``: the ``keep`` output channels (axis 0 of W (F, C, KH, KW)) of
    largest L1 norm, in increasing order."""
    __tracebackhide__ = True
    gen = rng(112)
    # keep 2: by L1 {0, 2}; by L2 {1, 2}; by the largest |w| (L-infinity) {1, 4}; by the signed
    # sum {2, 4}; the smallest L1 {1, 3}; unsorted [2, 0]: each mistake gives its own answer
    hand = np.zeros((5, 1, 2, 2), np.float32)
    hand[0] = [[[-0.8, -0.8], [-0.8, -0.8]]]      # L1 3.2, L2 1.6, max 0.8, sum -3.2
    hand[1] = [[[2.0, 0.0], [0.0, 0.0]]]          # L1 2.0, L2 2.0, max 2.0
    hand[2] = [[[1.2, 1.2], [1.2, 1.2]]]          # L1 4.8, L2 2.4, max 1.2
    hand[3] = [[[0.1, -0.1], [0.1, 0.0]]]         # L1 0.3
    hand[4] = [[[1.9, 0.5], [0.0, 0.0]]]          # L1 2.4, L2 1.96, max 1.9
    wide = gen.standard_normal((16, 8, 3, 3)).astype(np.float32)
    wide[::3] *= 0.2
    cases = [("a hand case (5, 1, 2, 2)", hand, 2),
             ("a (16, 8, 3, 3) convolution", wide, 8),
             ("a (6, 3, 1, 5) convolution, keep 5", gen.standard_normal((6, 3, 1, 5)).astype(np.float32) *
              np.array([3, 1, 0.1, 2, 0.5, 1.5], np.float32)[:, None, None, None], 5),
             ("keep all 3 channels", gen.standard_normal((3, 2, 3, 3)).astype(np.float32), 3)]
    for name, W, keep in cases:
        case = f"{name}, W of shape {shape_text(W.shape)}, keep={keep}"
        given = W.copy()
        got = to_array(call(fn, given, keep, case=case), fn, case,
                       "indices")
        expect_unchanged(fn, case, [("W", W, given)])
        F = W.shape[0]
        flat = np.abs(W).reshape(F, -1)
        want = _keep_of(flat.sum(axis=1), keep)
        if got.shape == want.shape and np.array_equal(np.sort(got), want) \
                and not np.array_equal(got, want):
            fail(fn, case, f"the indices {got.tolist()} are the right channels in another order.",
                 "return them in increasing order (sort them), so the kept channels stay in the "
                 "order they had and the next layer's inputs line up with them.")
        expect_close(got.astype(np.float64), want.astype(np.float64), fn, case, "indices",
                     atol=0, rtol=0, mistakes=[
            (lambda: _keep_of(flat.max(axis=1), keep),
             "the L1 norm is the sum of the ABSOLUTE values over the whole filter, not the "
             "largest one (that is the L-infinity norm): a filter of many medium weights can "
             "outweigh one with a single large weight."),
            (lambda: _keep_of(np.sqrt((W.reshape(F, -1) ** 2).sum(axis=1)), keep),
             "the L1 norm is the sum of the ABSOLUTE values, not the square root of the sum of "
             "squares (that is L2): here the two rank the channels differently."),
            (lambda: _keep_of(W.reshape(F, -1).sum(axis=1), keep),
             "take absolute values before summing: a channel of large negative weights matters "
             "as much as one of large positive weights."),
            (lambda: np.sort(np.argsort(flat.sum(axis=1), kind="stable")[:keep]),
             "keep the channels of LARGEST norm: yours are the smallest (the ones to remove)."),
            (lambda: _keep_of(np.abs(W).sum(axis=(0, 2, 3)), keep),
             "a channel is one output filter, W[f] (axis 0): the norm sums over everything else "
             "(the input channels and the kernel), not over axis 0.")])
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'loss_scale_step': [
        ('two branches. Overflow: what happens to the scale, the count, the step? No overflow: '
         'the count grows by one first; only then ask whether it has reached growth_interval'),
        ('write the timeline for growth_interval = 3 from a count of 0: clean, clean, clean '
         '(which of these doubles the scale, and what is the count after it?), then an overflow. '
         'The rules are the two bullet points of section 4 of this lesson'),
    ],
    'bf16_round': [
        ('read the 16 dropped bits as a number d from 0 to 65535: halfway to the next bf16 '
         'number is d = 32768. Which number, added to the whole pattern, carries one into the '
         'kept part exactly when d is above halfway, and not when it is below? At exactly '
         'halfway that sum does not carry: what extra 1, taken from the kept part itself, makes '
         'a tie go up only from an odd neighbour?'),
        ('pseudo-code: bits = x viewed as ___ (a view, no copy); last = the lowest kept bit '
         '(shift right by ___, keep one bit); rounded = bits plus ___ plus last, then AND a mask '
         'that keeps the top ___ bits; the answer is rounded viewed as float32, except where x '
         'is NaN (keep x there). The worked example before the exercise is one tie of each kind'),
    ],
    'magnitude_mask': [
        ('how many weights are pruned? the sparsity fraction of all of them, rounded to the '
         'nearest whole number (not cut down). Which weights? the ones whose absolute values come '
         'first when sorted in increasing order'),
        ('pseudo-code: k = nearest whole number to ___ x ___; keep = a flat boolean array of Trues, '
         'one per weight; the indices of the k smallest |w| (an argsort over the flattened '
         'magnitudes) become False; give keep the shape of w. Section 1 describes the rule'),
    ],
    'channel_l1_keep': [
        ('one number per output channel f: the L1 norm of the filter W[f], the sum of the '
         'absolute values over its input channels and kernel positions. Which channels have '
         'the keep largest of these numbers?'),
        ('pseudo-code: norms = |W| reshaped to (F, ___), summed over axis ___; order = the '
         'channel indices sorted by decreasing norm (argsort of ___); take the first keep of '
         'them; sort those indices in increasing order and return them'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'bf16_round': ['0x7fff', '0x7FFF', '32767', '0xffff0000', '0xFFFF0000', '>> 16', '0x8000'],
    'loss_scale_step': ['halve', 'half the scale', 'doubles', 'double the scale', 'scale / 2',
        'scale * 2', 'counted first', 'count first', 'back to zero', 'from zero'],
    'magnitude_mask': ['argsort', 'np.sort(', 'np.partition', 'np.quantile', 'np.percentile'],
    'channel_l1_keep': ['argsort', 'np.sort(', 'reshape(F, -1)', 'np.abs(W).sum', '[-keep:]'],
}
