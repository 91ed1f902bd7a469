"""Checks for lessons 10 and 11b: number formats and pruning (11a's are in ``quantization.py``).

- ``loss_scale_step(fn)`` (lesson 10): ``fn(scale, clean_steps, found_inf, growth_interval)
  -> (scale, clean_steps, take_step)``, one step of dynamic loss scaling;
- ``bf16_round(fn)`` (lesson 10): ``fn(x) -> float32 array of x's shape``, x rounded to the
  nearest bfloat16 on its bits (ties to even), compared bit for bit with ml_dtypes;
- ``magnitude_mask(fn)`` (lesson 11b): ``fn(w, sparsity) -> mask``, boolean of w's shape;
- ``prune_conv_pair(fn)`` (lesson 11b): ``fn(conv1, bn, conv2, keep) -> (conv1, bn, conv2)``,
  the channel pruning of conv1 -> BatchNorm -> ReLU -> conv2 (dicts of arrays): conv1's output
  channels of largest L1 norm kept in increasing order, BatchNorm's entries and conv2's input
  channels cut to match; compared with ``dl.prune_channels``.

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

__all__ = ["loss_scale_step", "bf16_round", "magnitude_mask", "prune_conv_pair"]


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
# Lesson 11b: channel pruning of a convolution pair (conv1 -> BatchNorm -> ReLU -> conv2)
# ======================================================================================
_BN_KEYS = ("gamma", "beta", "running_mean", "running_var")


def _keep_of(norms, keep):
    __tracebackhide__ = True
    return np.sort(np.argsort(-norms, kind="stable")[:keep])


def _pair_reference(conv1, bn, conv2, keep):
    """The oracle: dl.prune_channels on conv1 -> BatchNorm2d -> ReLU -> conv2 built from the
    arrays (run before the learner's function, with the library open)."""
    __tracebackhide__ = True
    from ..conv import Conv2d
    from ..layers import BatchNorm2d, ReLU, Sequential
    from ..prune import prune_channels
    F, C, KH, KW = conv1["W"].shape
    G, _, KH2, KW2 = conv2["W"].shape
    model = Sequential(Conv2d(C, F, (KH, KW)), BatchNorm2d(F), ReLU(), Conv2d(F, G, (KH2, KW2)))
    model.layers[0].load_state_dict({"W": conv1["W"], "b": conv1["b"]})
    model.layers[1].load_state_dict({k: bn[k] for k in _BN_KEYS})
    model.layers[3].load_state_dict({"W": conv2["W"], "b": conv2["b"]})
    small = prune_channels(model, 0, keep).layers
    return ({k: np.asarray(v) for k, v in small[0].state_dict().items()},
            {k: np.asarray(v) for k, v in small[1].state_dict().items()},
            {k: np.asarray(v) for k, v in small[3].state_dict().items()})


def _pair_cases():
    """(name, conv1, bn, conv2, keep). The hand case's filters rank differently by L1, L2, the
    largest |w|, the signed sum and the BatchNorm scale, and its bn.gamma is largest on the
    channels of smallest L1 norm; every case has G != F != keep, so a cut on the wrong axis has
    a shape of its own."""
    __tracebackhide__ = True
    gen = rng(112)

    def pair(W1, G, k2):
        __tracebackhide__ = True
        F = W1.shape[0]
        return ({"W": W1, "b": gen.standard_normal(F).astype(np.float32)},
                {"gamma": gen.uniform(0.5, 1.5, F).astype(np.float32),
                 "beta": gen.standard_normal(F).astype(np.float32),
                 "running_mean": gen.standard_normal(F).astype(np.float32),
                 "running_var": gen.uniform(0.5, 2.0, F).astype(np.float32)},
                {"W": gen.standard_normal((G, F, k2, k2)).astype(np.float32),
                 "b": gen.standard_normal(G).astype(np.float32)})

    # keep 2: by L1 {0, 2}; by L2 {1, 2}; by the largest |w| {1, 4}; by the signed sum {2, 4};
    # the smallest L1 {1, 3}
    hand = np.zeros((5, 1, 2, 2), np.float32)
    hand[0] = [[[-0.8, -0.8], [-0.8, -0.8]]]      # L1 3.2, L2 1.6, max 0.8, sum -3.2
    hand[1] = [[[2.0, 0.0], [0.0, 0.0]]]          # L1 2.0, L2 2.0, max 2.0
    hand[2] = [[[1.2, 1.2], [1.2, 1.2]]]          # L1 4.8, L2 2.4, max 1.2
    hand[3] = [[[0.1, -0.1], [0.1, 0.0]]]         # L1 0.3
    hand[4] = [[[1.9, 0.5], [0.0, 0.0]]]          # L1 2.4, L2 1.96, max 1.9
    c1, b, c2 = pair(hand, 3, 1)
    b["gamma"][:] = [0.2, 3.0, 0.1, 2.0, 0.3]     # |gamma| ranks {1, 3}: not the rule here
    cases = [("a hand case: conv1 W (5, 1, 2, 2), conv2 W (3, 5, 1, 1)", c1, b, c2, 2)]
    wide = gen.standard_normal((16, 8, 3, 3)).astype(np.float32)
    wide[::3] *= 0.2
    cases.append(("conv1 W (16, 8, 3, 3), conv2 W (12, 16, 3, 3)",) + pair(wide, 12, 3) + (6,))
    W1 = gen.standard_normal((6, 3, 1, 5)).astype(np.float32) * \
        np.array([3, 1, 0.1, 2, 0.5, 1.5], np.float32)[:, None, None, None]
    cases.append(("conv1 W (6, 3, 1, 5), conv2 W (4, 6, 3, 3)",) + pair(W1, 4, 3) + (5,))
    cases.append(("keep all 3 channels: conv1 W (3, 2, 3, 3), conv2 W (2, 3, 1, 1)",)
                 + pair(gen.standard_normal((3, 2, 3, 3)).astype(np.float32), 2, 1) + (3,))
    return cases


def _as_dict(value, keys, fn, case, what):
    """The learner's dict of arrays (a mapping holding ``keys``), as NumPy arrays."""
    __tracebackhide__ = True
    if not hasattr(value, "keys") or any(k not in value for k in keys):
        fail(fn, case, f"{what} is {type(value).__name__}"
                       f"{' with keys ' + str(sorted(value.keys())) if hasattr(value, 'keys') else ''}"
                       f", expected a dict with the keys {list(keys)}, as it came in.",
             "return a new dict for each of the three, with the keys it was given.")
    return {k: to_array(value[k], fn, case, f"{what}'s {k}") for k in keys}


def prune_conv_pair(fn):
    """``fn(conv1, bn, conv2, keep) -> (conv1, bn, conv2)``: channel pruning of conv1 -> BatchNorm
    -> ReLU -> conv2, the arrays as dicts (conv1 {"W": (F, C, KH, KW), "b": (F,)}, bn {"gamma",
    "beta", "running_mean", "running_var"}: (F,) each, conv2 {"W": (G, F, KH2, KW2), "b": (G,)}):
    keep the ``keep`` output channels of conv1 of largest L1 norm, in increasing order, and cut
    everything that holds one entry per such channel to match. Compared with ``dl.prune_channels``
    (closed while the function runs)."""
    __tracebackhide__ = True
    cases = _pair_cases()
    for name, conv1, bn, conv2, keep in cases:
        F, G = conv1["W"].shape[0], conv2["W"].shape[0]
        case = f"{name}, keep={keep}"
        want = _pair_reference(conv1, bn, conv2, keep)
        given = [{k: v.copy() for k, v in d.items()} for d in (conv1, bn, conv2)]
        out = expect_tuple(call(fn, *given, keep, case=case), 3, fn, case, "conv1, bn, conv2")
        for d, ref, what in zip(given, (conv1, bn, conv2), ("conv1", "bn", "conv2")):
            expect_unchanged(fn, case, [(f"{what}'s {k}", ref[k], d[k]) for k in ref],
                             "build new arrays (indexing with a list of indices copies).")
        got1 = _as_dict(out[0], ("W", "b"), fn, case, "conv1")
        gotb = _as_dict(out[1], _BN_KEYS, fn, case, "bn")
        got2 = _as_dict(out[2], ("W", "b"), fn, case, "conv2")
        # the channels: conv1's W decides which were kept
        flat = np.abs(conv1["W"]).reshape(F, -1)
        kept = _keep_of(flat.sum(axis=1), keep)
        W1 = got1["W"]
        expect_shape(W1, (keep,) + conv1["W"].shape[1:], fn, case, "conv1's W",
                     "conv1 keeps `keep` of its F filters (axis 0); each filter stays whole.")
        rows = [np.flatnonzero((conv1["W"] == w).all(axis=(1, 2, 3))) for w in W1]
        if all(r.size for r in rows) and sorted(int(r[0]) for r in rows) == kept.tolist() \
                and not np.array_equal(W1, conv1["W"][kept]):
            fail(fn, case, "conv1 keeps the right filters, in another order.",
                 "keep them in increasing order of their index (sort the indices), so that the "
                 "pruned model lists its channels as the old one did and matches "
                 "dl.prune_channels' state_dict.")
        expect_close(W1, want[0]["W"], fn, case, "conv1's W", atol=0, rtol=0, mistakes=[
            (lambda: conv1["W"][_keep_of(flat.max(axis=1), keep)],
             "the L1 norm is the sum of the ABSOLUTE values over the whole filter, not the "
             "largest one (that is the L-infinity norm): a filter of many medium weights can "
             "outweigh one with a single large weight."),
            (lambda: conv1["W"][_keep_of(np.sqrt((conv1["W"].reshape(F, -1) ** 2).sum(axis=1)),
                                         keep)],
             "the L1 norm is the sum of the ABSOLUTE values, not the square root of the sum of "
             "squares (that is L2): here the two rank the channels differently."),
            (lambda: conv1["W"][_keep_of(conv1["W"].reshape(F, -1).sum(axis=1), keep)],
             "take absolute values before summing: a channel of large negative weights matters "
             "as much as one of large positive weights."),
            (lambda: conv1["W"][np.sort(np.argsort(flat.sum(axis=1), kind="stable")[:keep])],
             "keep the channels of LARGEST norm: yours are the smallest (the ones to remove)."),
            (lambda: conv1["W"][_keep_of(np.abs(bn["gamma"]), keep)],
             "the rule of this exercise ranks conv1's filters by their L1 norm, not by the "
             "BatchNorm scale |gamma| (that is network slimming, an exercise at the end)."),
            (lambda: conv1["W"][_keep_of(np.abs(conv2["W"]).sum(axis=(0, 2, 3)), keep)],
             "rank conv1's own filters W1[f]: conv2's weights that read a channel are cut to "
             "match, they do not choose it."),
        ], fix="rank the F filters W1[f] by the sum of |w| over the input channels and the "
               "kernel, and keep the largest.")
        expect_shape(got1["b"], (keep,), fn, case, "conv1's b",
                     "conv1's bias holds one number per output channel: a removed filter's bias "
                     "goes with it.")
        expect_close(got1["b"], want[0]["b"], fn, case, "conv1's b", atol=0, rtol=0,
                     fix="cut the bias with the same indices as the filters.")
        for k in _BN_KEYS:
            expect_shape(gotb[k], (keep,), fn, case, f"bn's {k}",
                         "BatchNorm holds one entry per channel in EACH of its four arrays, the "
                         "running mean and variance too: a removed channel's entries go with it.")
            expect_close(gotb[k], want[1][k], fn, case, f"bn's {k}", atol=0, rtol=0,
                         mistakes=[(lambda: bn[k][np.arange(keep)],
                                    "BatchNorm's entries must be those of the KEPT channels, the "
                                    "same indices as conv1's, not the first `keep` of them.")],
                         fix="cut every BatchNorm array with the same indices as conv1.")
        W2 = got2["W"]
        KH2, KW2 = conv2["W"].shape[2:]
        if W2.shape == (keep, F, KH2, KW2):
            fail(fn, case, f"conv2's W has shape {shape_text(W2.shape)}: it was cut along its "
                           f"OUTPUT channels (axis 0).",
                 "conv2 reads conv1's channels through its INPUT axis (axis 1): it keeps all its "
                 "G filters, each losing the slices that read a removed channel.")
        if W2.shape == conv2["W"].shape and keep < F:
            fail(fn, case, f"conv2's W still has shape {shape_text(W2.shape)}: it reads {F} "
                           f"input channels, and the pruned conv1 produces {keep}.",
                 "conv2 must lose the input channels that read the removed ones (axis 1).")
        expect_shape(W2, (G, keep, KH2, KW2), fn, case, "conv2's W",
                     "conv2 keeps its G filters; each reads only the kept channels.")
        expect_close(W2, want[2]["W"], fn, case, "conv2's W", atol=0, rtol=0, mistakes=[
            (lambda: conv2["W"][:, :keep], "conv2 must keep the slices of the KEPT channels (the "
                                           "same indices as conv1's), not the first `keep`."),
        ], fix="cut conv2's axis 1 with the same indices as conv1's axis 0.")
        if got2["b"].shape == (keep,) and keep != G:
            fail(fn, case, f"conv2's b has {keep} entries: it was cut.",
                 "conv2's bias belongs to its OUTPUT channels, which all stay: leave it whole.")
        expect_shape(got2["b"], (G,), fn, case, "conv2's b",
                     "conv2's bias has one entry per output channel of conv2, all kept.")
        expect_close(got2["b"], want[2]["b"], fn, case, "conv2's b", atol=0, rtol=0,
                     fix="conv2's bias is not touched by the cut.")
    passed(fn, len(cases), name="prune_conv_pair")


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
    'prune_conv_pair': [
        ('three questions in order. Which channels: one number per output channel f of conv1, '
         'the sum of |w| over its filter W1[f], and the keep largest, listed by index. Then, for '
         'each array of the three layers: which of its axes has one entry per channel of '
         'conv1\'s output? Cut that axis, and leave every other axis whole'),
        ('pseudo-code: norms = |W1| summed over every axis but ___; kept = the indices of the '
         'keep largest norms, sorted ___; conv1: W and b indexed by kept on axis ___; bn: each '
         'of its ___ arrays indexed by kept; conv2: W indexed by kept on axis ___, and its bias '
         '___. Return three new dicts with the keys they came in with'),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'bf16_round': ['0x7fff', '0x7FFF', '32767', '0xffff0000', '0xFFFF0000', '>> 16', '0x8000'],
    'loss_scale_step': ['halve', 'half the scale', 'doubles', 'double the scale', 'scale / 2',
        'scale * 2', 'counted first', 'count first', 'back to zero', 'from zero'],
    'magnitude_mask': ['argsort', 'np.sort(', 'np.partition', 'np.quantile', 'np.percentile'],
    'prune_conv_pair': ['argsort', 'np.sort(', 'reshape(F, -1)', 'np.abs(W1).sum', '[-keep:]',
        '[:, kept]', 'axis 1', 'axis=1', 'bias whole', 'leave the bias', 'input channels of conv2'],
}
