"""Mixed precision: number formats, low-precision matrix products, dynamic loss scaling.

Introduced in notebook ``10_number_formats_and_mixed_precision``.

A tensor core multiplies fp16 or bf16 numbers and adds the products in float32. A product of
two bf16 (8 significant bits) or fp16 (11 bits) numbers has at most 22 significant bits, so it
is exact in float32 (24 bits): "round the inputs to the low format, then multiply in float32"
computes what the hardware computes, up to the order of the additions. That is how this module
emulates the formats on any backend::

    with dl.autocast("bf16"):            # every matmul of Linear, Conv2d and the fused layers
        out = model.forward(x)           # takes bf16-rounded inputs, accumulates in float32

    dl.fit(model, loss, opt, X, y, precision="fp16")   # with a dl.LossScaler, float32 masters

``dlcourse/ops.py``'s ``matmul(a, b)`` is the one matrix product the layers call; ``autocast``
tells it to round both inputs (``lowp_matmul`` is the same function); outside ``autocast`` (or in
``"fp32"``) it is ``a @ b``. Parameters, optimizer state and everything elementwise stay in
float32 (the "master copies"): only the inputs of the products are rounded.

On the CPU the rounding is exact through ``ml_dtypes.bfloat16`` and NumPy's float16; on the GPU
fp16 is CuPy's float16, and bf16 (which CuPy lacks) is the same round-to-nearest-even done on the
bits of the float32 numbers (:func:`round_bf16_bits`, tested equal to ``ml_dtypes``).
"""
from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from . import ops
from ._validate import number, whole_number
from .backend import get_array_module

__all__ = ["FORMATS", "autocast", "current_format", "round_to", "round_bf16_bits", "lowp_matmul",
           "LossScaler", "Policy"]

# name -> (sign, exponent, mantissa) bits; "tf32" rounds the mantissa to 10 bits like fp16 but
# keeps float32's exponent. Used by the lesson's table and by round_to.
FORMATS = {
    "fp32": (1, 8, 23),
    "tf32": (1, 8, 10),
    "bf16": (1, 8, 7),
    "fp16": (1, 5, 10),
    "fp8_e4m3": (1, 4, 3),
    "fp8_e5m2": (1, 5, 2),
}
TRAINING_FORMATS = ("fp32", "bf16", "fp16")

_state = {"format": "fp32"}


def _check_format(fmt, allowed=tuple(FORMATS)) -> str:
    if fmt not in allowed:
        raise ValueError(f"Unknown number format {fmt!r}: expected one of {list(allowed)}. "
                         f"For mixed-precision training use precision=\"bf16\" or \"fp16\".")
    return fmt


def current_format() -> str:
    """The format matrix products round their inputs to now (``"fp32"``: no rounding)."""
    return _state["format"]


@contextlib.contextmanager
def autocast(fmt: str = "bf16"):
    """``with autocast("bf16"):`` rounds the inputs of every :func:`lowp_matmul` (every matrix
    product of Linear, Conv2d and the fused layers, forward and backward) to ``fmt`` and
    accumulates in float32. ``"fp32"`` turns rounding off. The previous format comes back after
    the block, even if it fails."""
    _check_format(fmt, TRAINING_FORMATS + ("tf32",))
    before = _state["format"]
    _state["format"] = fmt
    rounding = None if fmt == "fp32" else functools.partial(round_to, fmt)
    before_rounding = ops.round_inputs(rounding)     # every layer's matmul (dlcourse/ops.py)
    try:
        yield fmt
    finally:
        _state["format"] = before
        ops.round_inputs(before_rounding)


def _low_dtype(fmt):
    import ml_dtypes
    return {"fp16": np.float16, "bf16": ml_dtypes.bfloat16,
            "fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}[fmt]


def round_bf16_bits(x):
    """x (float32, NumPy or CuPy) rounded to the nearest bfloat16, ties to even, returned as
    float32: add 0x7FFF plus the lowest kept bit to the 32-bit pattern, then clear the low 16
    bits. NaN stays NaN (its low bits could otherwise carry it into infinity)."""
    xp = get_array_module(x)
    x = xp.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)
    return xp.where(xp.isnan(x), x, r)


def _round_mantissa(x, bits):
    """float32 x rounded to ``bits`` mantissa bits (ties to even), float32's exponent kept (TF32)."""
    xp = get_array_module(x)
    x = xp.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    drop = 23 - bits
    half = np.uint32((1 << (drop - 1)) - 1)
    keep = np.uint32((0xFFFFFFFF >> drop) << drop)
    r = ((u + half + ((u >> drop) & np.uint32(1))) & keep).view(np.float32)
    return xp.where(xp.isnan(x), x, r)


def round_to(fmt: str, x):
    """x rounded to the nearest number of format ``fmt`` (round to nearest, ties to even),
    returned in x's float dtype (float32, or float64 for gradient checks). Values beyond the
    format's range become inf (fp16 above 65504), values below its smallest subnormal become 0:
    exactly what storing x in that format does. Float8 formats are CPU only (ml_dtypes)."""
    _check_format(fmt)
    if fmt == "fp32":
        return x
    xp = get_array_module(x)
    dtype = x.dtype
    if fmt == "tf32":
        return _round_mantissa(x.astype(np.float32), 10).astype(dtype)
    if fmt == "bf16" and dtype == np.float32:    # the bit trick: ml_dtypes' answer, 10x faster
        return round_bf16_bits(x)
    with np.errstate(over="ignore"):             # overflow to inf is what the format does
        if fmt == "fp16":
            return x.astype(np.float16).astype(dtype)
        if xp is np:
            return x.astype(_low_dtype(fmt)).astype(dtype)
        if fmt == "bf16":
            return round_bf16_bits(x.astype(np.float32)).astype(dtype)
    raise ValueError(f"round_to({fmt!r}) runs on NumPy arrays only (ml_dtypes); move x to the "
                     f"CPU with dl.to_numpy(x).")


# ``a @ b`` with both inputs rounded to the current :func:`autocast` format and the products
# added in a's float dtype (float32): what a tensor core computes. ``a @ b`` in ``"fp32"``.
lowp_matmul = ops.matmul


# ======================================================================================
# Dynamic loss scaling
# ======================================================================================
class LossScaler:
    """Dynamic loss scaling for fp16 training.

    fp16's smallest (subnormal) number is 2**-24 ≈ 6e-8: smaller gradients round to zero. So the
    loss's gradient is multiplied by ``scale`` before backward (every gradient below it grows by
    the same factor) and the parameter gradients are divided by it before the update.

    The rules (PyTorch's GradScaler's):

    * a step whose gradients are all finite counts as clean; after ``growth_interval`` clean
      steps in a row the scale is multiplied by ``growth_factor`` (2);
    * a step with an inf or NaN gradient is **skipped** (no update) and the scale is multiplied
      by ``backoff_factor`` (halved); the count of clean steps starts again.

    State: ``scale``, ``clean_steps`` (clean steps since the last change), ``skipped`` (steps
    skipped so far), ``scales`` (the scale used at each step, for a plot). ``state_dict()`` is
    what ``dl.fit`` saves in ``history.loss_scaler``.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 200):
        # Each argument checked by itself, naming it and the value given: an infinite scale
        # would make every step overflow and be skipped, silently.
        self.scale = number(init_scale, "LossScaler(init_scale=...)", "init_scale=2.0**16",
                            low=0, low_open=True)
        self.growth_factor = number(growth_factor, "LossScaler(growth_factor=...)",
                                    "growth_factor=2.0", low=1, low_open=True)
        self.backoff_factor = number(backoff_factor, "LossScaler(backoff_factor=...)",
                                     "backoff_factor=0.5", low=0, high=1, low_open=True)
        self.growth_interval = whole_number(growth_interval, "LossScaler(growth_interval=...)")
        self.clean_steps = 0
        self.skipped = 0
        self.scales: list = []

    def update(self, found_inf: bool) -> bool:
        """Apply the rules after one step's gradients were checked. Returns whether the
        optimizer should step (False: skip it)."""
        self.scales.append(self.scale)
        if found_inf:
            self.scale *= self.backoff_factor
            self.clean_steps = 0
            self.skipped += 1
            return False
        self.clean_steps += 1
        if self.clean_steps == self.growth_interval:
            self.scale *= self.growth_factor
            self.clean_steps = 0
        return True

    def unscale(self, grads: dict) -> bool:
        """Divide every gradient by the scale, in place; returns whether one is inf or NaN."""
        found_inf = False
        inv = 1.0 / self.scale
        for g in grads.values():
            g *= g.dtype.type(inv)
            xp = get_array_module(g)
            if not found_inf and not bool(xp.isfinite(g).all()):
                found_inf = True
        return found_inf

    def state_dict(self) -> dict:
        return {"scale": self.scale, "clean_steps": self.clean_steps, "skipped": self.skipped,
                "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
                "growth_interval": self.growth_interval}

    def __repr__(self):
        return (f"LossScaler(scale={self.scale:g}, clean_steps={self.clean_steps}, "
                f"skipped={self.skipped}, growth_interval={self.growth_interval})")


class Policy:
    """The steps this lesson adds to ``dl.fit``'s loop for ``precision=`` and ``loss_scaler=``
    (``fit`` makes one only when either is asked for)::

        with policy.autocast():                               # bf16/fp16 products
            out = model.forward(xb)
            value = loss.forward(out, yb)
            model.backward(policy.scale(loss.backward()))     # times the loss scale
        if policy.should_step(model):       # unscales; False: fp16 gradients overflowed, skip
            optimizer.step()
        policy.record(history)              # after each epoch: the format, the scaler's state

    fp16 gets a :class:`LossScaler` unless one is given (``loss_scaler=False``: none, to see
    gradients underflow); bf16 and fp32 need none (bf16 has float32's range).
    """

    def __init__(self, precision: str = "fp32", loss_scaler=None):
        self.format = _check_format(precision, TRAINING_FORMATS)
        if loss_scaler is None:
            loss_scaler = LossScaler() if precision == "fp16" else False
        if loss_scaler is not False and not isinstance(loss_scaler, LossScaler):
            raise TypeError(f"fit(loss_scaler=...) takes a dl.LossScaler(), None (the default: "
                            f"one for fp16) or False (none); got {type(loss_scaler).__name__}.")
        self.scaler = loss_scaler or None

    @contextlib.contextmanager
    def autocast(self):
        """``autocast(format)``; with a loss scaler, an overflow to inf is expected (the scaler
        finds it and skips the step), so NumPy is told not to warn about it."""
        with autocast(self.format):
            if self.scaler is None:
                yield
            else:
                with np.errstate(over="ignore", invalid="ignore"):
                    yield

    def scale(self, dout):
        """The loss's gradient (N, K), times the loss scale, as the low format stores it (the
        model's output, and so its gradient, is an fp16/bf16 tensor under autocast)."""
        if self.scaler is not None:
            dout = dout * dout.dtype.type(self.scaler.scale)
        return round_to(self.format, dout)

    def should_step(self, model) -> bool:
        if self.scaler is None:
            return True
        return self.scaler.update(self.scaler.unscale(model.grads))

    def record(self, history) -> None:
        """Put the precision and the scaler's state in the history (after each epoch)."""
        history.precision = self.format
        if self.scaler is not None:
            history.loss_scaler = self.scaler.state_dict()
            history.loss_scale = list(self.scaler.scales)


def finite_range(fmt: str) -> dict:
    """Largest finite, smallest normal and smallest subnormal positive numbers of ``fmt``, and
    the spacing of numbers just above 1 (machine epsilon), from its bit counts (IEEE-style;
    E4M3 keeps its all-ones exponent for numbers, so its largest is 448)."""
    _, e, m = FORMATS[_check_format(fmt)]
    bias = 2 ** (e - 1) - 1
    if fmt == "fp8_e4m3":
        largest = 448.0
    else:
        largest = (2 - 2.0 ** -m) * 2.0 ** (2 ** e - 2 - bias)
    return {"max": largest, "min_normal": 2.0 ** (1 - bias),
            "min_subnormal": 2.0 ** (1 - bias - m), "eps": 2.0 ** -m,
            "decimal_digits": round(m * math.log10(2) + math.log10(2), 1)}
