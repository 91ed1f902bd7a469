"""The matrix product every layer uses, in one place.

Introduced in notebook ``03_backpropagation`` (``Linear``: ``x @ W``); ``06a_convolution_and_im2col``
(``Conv2d``: one matrix product after im2col) and ``08d_fusion_and_graphs`` (the fused layers) use it
too. Every matrix product of ``Linear``, ``Conv2d``, ``LinearReLU`` and ``Conv2dReLU``, forward
and backward, goes through :func:`matmul`, so a change of how products are computed is made
here once: ``dl.autocast("bf16")`` (``precision.py``, lesson 10) sets :func:`round_inputs` so
both inputs are rounded to a lower format and the products still add up in float32, as a
tensor core computes. ``dl.kernels.products_on_kernel()`` (lesson 08d) sets
:func:`compute_products` so the products of CuPy float32 arrays run on the course's own matmul
kernel instead of cuBLAS, which a CUDA graph cannot capture through CuPy. This module depends
only on ``backend.py`` (which library an array belongs to).
"""
from __future__ import annotations

from .backend import get_array_module

__all__ = ["matmul", "round_inputs", "input_rounding", "compute_products"]

_rounding = [None]     # None: plain a @ b; else a function that rounds one input
_product = [None]      # None: a @ b; else product(a, b) -> a @ b, or None where it can't


def matmul(a, b, out=None):
    """``a @ b``. a: (M, K), b: (K, N) -> (M, N), NumPy or CuPy (the arrays decide); written
    into ``out`` (an (M, N) array) when one is given.

    Under ``dl.autocast(fmt)`` both inputs are first rounded to ``fmt``; the product is still
    computed (and accumulated) in the inputs' float dtype."""
    rounding, product = _rounding[0], _product[0]
    if rounding is not None:
        a, b = rounding(a), rounding(b)
    c = None if product is None else product(a, b)
    if c is None:
        return a @ b if out is None else get_array_module(a).matmul(a, b, out=out)
    if out is None:
        return c
    out[...] = c
    return out


def compute_products(fn) -> object:
    """Make :func:`matmul` compute ``a @ b`` as ``fn(a, b)`` (``None``: with ``@``); where
    ``fn`` returns None for a pair of arrays, ``@`` computes it. Returns the previous setting."""
    before, _product[0] = _product[0], fn
    return before


def round_inputs(fn) -> object:
    """Make :func:`matmul` round both inputs with ``fn`` (``None``: no rounding). Returns the
    previous setting, so a context manager can put it back."""
    before, _rounding[0] = _rounding[0], fn
    return before


def input_rounding():
    """The function :func:`matmul` rounds its inputs with now, or ``None``."""
    return _rounding[0]
