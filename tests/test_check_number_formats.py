"""The lesson 10 exercise check ``dl.check.bf16_round``: a right answer passes on every backend,
and each common wrong answer gets the message that names its mistake; ml_dtypes' bfloat16 and
the library's own bf16 rounding are refused.

Each wrong answer is a small function named after its mistake, written as a learner would."""

import ml_dtypes
import numpy as np
import pytest

import dlcourse as dl
from dlcourse.check import ExerciseError

KEPT, HALF, JUST_UNDER_HALF = np.uint32(0xFFFF0000), np.uint32(0x8000), np.uint32(0x7FFF)


def expect_fail(fn, *words):
    with pytest.raises(ExerciseError) as e:
        dl.check.bf16_round(fn)
    msg = str(e.value)
    for w in words:
        assert w in msg, (w, msg)
    return msg


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)


def bf16_good(x):
    xp = dl.get_array_module(x)
    u = xp.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    odd = (u >> np.uint32(16)) & np.uint32(1)
    out = ((u + JUST_UNDER_HALF + odd) & KEPT).view(np.float32)
    return xp.where(xp.isnan(x), x, out)


def bf16_nan_to_inf(x):          # the rounding right, NaN not kept
    u = _bits(x)
    return ((u + JUST_UNDER_HALF + ((u >> 16) & 1)) & KEPT).view(np.float32)


def bf16_truncates(x):
    return np.where(np.isnan(x), x, (_bits(x) & KEPT).view(np.float32))


def bf16_half_up(x):
    return np.where(np.isnan(x), x, ((_bits(x) + HALF) & KEPT).view(np.float32))


def bf16_half_down(x):
    return np.where(np.isnan(x), x, ((_bits(x) + JUST_UNDER_HALF) & KEPT).view(np.float32))


def bf16_sign_lost(x):           # rounds the magnitude, forgets the sign bit
    u = _bits(x) & np.uint32(0x7FFFFFFF)
    out = ((u + JUST_UNDER_HALF + ((u >> 16) & 1)) & KEPT).view(np.float32)
    return np.where(np.isnan(x), x, out)


def bf16_in_place(x):
    keep = np.isnan(x)
    u = x.view(np.uint32)
    u += JUST_UNDER_HALF + ((u >> 16) & 1)
    u &= KEPT
    return np.where(keep, np.float32(np.nan), x)


def bf16_returns_bits(x):
    return bf16_good(x).view(np.uint32)


def bf16_float64(x):
    return bf16_good(x).astype(np.float64)


def bf16_saturates(x):           # the largest finite values stay finite instead of going to inf
    out = bf16_good(x)
    return np.where(np.isinf(out) & np.isfinite(x), np.copysign(np.float32(3.3895314e38), x),
                    out).astype(np.float32)


def bf16_as_float16(x):
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def bf16_unchanged(x):
    return x.copy()


def bf16_ml_dtypes(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def bf16_ml_dtypes_by_name(x):
    return x.astype("bfloat16").astype(np.float32)


def bf16_through_a_helper(x):    # ml_dtypes reached from another function: refused while it runs
    return bf16_ml_dtypes(x)


def bf16_library(x):
    return dl.precision.round_bf16_bits(x)


def bf16_round_to(x):
    return dl.precision.round_to("bf16", x)


def test_the_right_answer_passes_on_every_backend(device, capsys):
    """On the cupy backend the check adds a case on the GPU (a CuPy array in, one out)."""
    dl.check.bf16_round(bf16_good)
    out = capsys.readouterr().out
    assert "\u2713 bf16_good: all" in out
    assert ("NumPy and CuPy" in out) == (device == "gpu"), out


def test_the_reference_rounds_like_ml_dtypes_on_every_bit_pattern_class(xp):
    """Every sign and exponent with mantissas at, around and between the ties, as the check's
    comparison assumes (and the library's own round_bf16_bits, the same rule)."""
    top = np.arange(1 << 9, dtype=np.uint32) << np.uint32(23)          # sign and exponent
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000, 0x18000, 0x17FFF,
                    0x7FFFFF, 0x7F8000, 0x400000], np.uint32)
    x = (top[:, None] | low[None, :]).ravel().view(np.float32)
    got = dl.to_numpy(bf16_good(xp.asarray(x)))
    with np.errstate(all="ignore"):
        want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    assert np.array_equal(dl.precision.round_bf16_bits(x).view(np.uint32)[~nan],
                          want.view(np.uint32)[~nan])


@pytest.mark.parametrize("fn, words", [
    (bf16_truncates, ["truncation", "NEAREST bf16"]),
    (bf16_half_up, ["round half up", "half to EVEN", "1 + 2^-8 rounds down to 1"]),
    (bf16_half_down, ["round half down", "half to EVEN", "goes UP to 1.015625"]),
    (bf16_nan_to_inf, ["NaN turned into inf", "bits 0x7F800001", "Keep x itself"]),
    (bf16_sign_lost, ["the sign is lost", "top bit"]),
    (bf16_in_place, ["changed its input x in place", "a view of x shares x's memory"]),
    (bf16_returns_bits, ["dtype uint32", "reinterpret them as float32"]),
    (bf16_float64, ["dtype float64, expected float32"]),
    (bf16_saturates, ["round up past the largest bf16 number", "gives infinity",
                      "bits 0x7F7FFFFF"]),
    (bf16_as_float16, ["that is float16", "8 exponent bits"]),
    (bf16_unchanged, ["nothing was rounded"]),
], ids=lambda v: getattr(v, "__name__", "words"))
def test_the_check_names_the_mistake(fn, words):
    expect_fail(fn, *words)


@pytest.mark.parametrize("fn", [bf16_ml_dtypes, bf16_ml_dtypes_by_name, bf16_through_a_helper])
def test_ml_dtypes_bfloat16_is_refused_and_given_back(fn):
    expect_fail(fn, "ml_dtypes.bfloat16", "not you", "work on the bits")
    assert ml_dtypes.bfloat16(1.0) == 1.0          # the check puts ml_dtypes back as it was


def bf16_torch(x):
    import torch
    return torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()


def bf16_torch_method(x):
    import torch
    return torch.tensor(x).bfloat16().float().numpy()


@pytest.mark.parametrize("fn", [bf16_torch, bf16_torch_method])
def test_torchs_bfloat16_cast_is_refused_under_its_own_name(fn):
    """PyTorch's cast is named as PyTorch's, not as ml_dtypes' (issue 37)."""
    pytest.importorskip("torch")
    with pytest.raises(dl.check.ExerciseError) as info:
        dl.check.bf16_round(fn)
    text = str(info.value)
    assert "it calls torch." in text and "testing torch, not you" in text, text
    assert "ml_dtypes" not in text, text


@pytest.mark.parametrize("fn, name", [(bf16_library, "dl.precision.round_bf16_bits"),
                                      (bf16_round_to, "dl.precision.round_to")])
def test_the_librarys_own_rounding_is_refused(fn, name):
    expect_fail(fn, name, "library's own version")
    assert dl.precision.round_to("bf16", np.float32([1 + 2**-8]))[0] == 1.0   # and given back


def test_not_implemented_gives_the_first_hint():
    def bf16_round(x):
        raise NotImplementedError("HINT: view x as unsigned 32-bit integers")
    expect_fail(bf16_round, "not implemented yet", "unsigned 32-bit integers")
