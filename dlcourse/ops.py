"""The matrix product every layer uses, in one place.

Introduced in notebook ``03_backpropagation`` (``Linear``: ``x @ W``); ``06_convolution``
(``Conv2d``: one matrix product after im2col) and ``08c_fusion_and_graphs`` (the fused layers) use it
too. Every matrix product of ``Linear``, ``Conv2d``, ``LinearReLU`` and ``Conv2dReLU``, forward
and backward, goes through :func:`matmul`, so a change of how products are computed (a lower
precision, a kernel of our own) is made here once. This module depends on nothing.
"""
from __future__ import annotations

__all__ = ["matmul"]


def matmul(a, b):
    """``a @ b``. a: (M, K), b: (K, N) -> (M, N), NumPy or CuPy (the arrays decide)."""
    return a @ b
