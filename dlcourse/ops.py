"""The matrix product every layer uses, in one place.

Introduced in notebook ``03_backpropagation`` (``Linear``: ``x @ W``); ``06_convolution``
(``Conv2d``: one matrix product after im2col) and ``08c_fusion_and_graphs`` (the fused layers) use it
too. Every matrix product of ``Linear``, ``Conv2d``, ``LinearReLU`` and ``Conv2dReLU``, forward
and backward, goes through :func:`matmul`, so a change of how products are computed is made
here once: ``dl.autocast("bf16")`` (``precision.py``, lesson 10) sets :func:`round_inputs` so
both inputs are rounded to a lower format and the products still add up in float32, as a
tensor core computes. This module depends only on ``backend.py`` (which library an array
belongs to).
"""
from __future__ import annotations

from .backend import get_array_module

__all__ = ["matmul", "round_inputs", "input_rounding"]

_rounding = [None]     # None: plain a @ b; else a function that rounds one input


def matmul(a, b, out=None):
    """``a @ b``. a: (M, K), b: (K, N) -> (M, N), NumPy or CuPy (the arrays decide); written
    into ``out`` (an (M, N) array) when one is given.

    Under ``dl.autocast(fmt)`` both inputs are first rounded to ``fmt``; the product is still
    computed (and accumulated) in the inputs' float dtype."""
    rounding = _rounding[0]
    if rounding is not None:
        a, b = rounding(a), rounding(b)
    if out is None:
        return a @ b
    return get_array_module(a).matmul(a, b, out=out)


def round_inputs(fn) -> object:
    """Make :func:`matmul` round both inputs with ``fn`` (``None``: no rounding). Returns the
    previous setting, so a context manager can put it back."""
    before, _rounding[0] = _rounding[0], fn
    return before


def input_rounding():
    """The function :func:`matmul` rounds its inputs with now, or ``None``."""
    return _rounding[0]
