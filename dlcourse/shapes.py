"""Sizes shared by the layers and the kernels: a window's output size, a shape as text.

Introduced in notebook ``06a_convolution_and_im2col`` (the output size of a convolution). It depends on
nothing, so the layers (``dlcourse/conv.py``), the CUDA wrappers and their NumPy references
(``dlcourse/kernels/``), ``dl.infer`` and the exercise checks can all use it without
importing each other. The one output-size function (:func:`output_size`) and the one shape
printer (:func:`shape_str`) of the library.
"""
from __future__ import annotations

__all__ = ["output_size", "shape_str", "as_pair"]


def shape_str(shape) -> str:
    """``(2, 3)`` as ``"(2, 3)"``, ``(4,)`` as ``"(4,)"`` (NumPy integers print as ints)."""
    shape = tuple(int(s) if hasattr(s, "__index__") else s for s in shape)
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def as_pair(v):
    """A per-axis setting as (h, w): ``2`` -> ``(2, 2)``, ``(1, 2)`` -> ``(1, 2)`` (as PyTorch
    accepts kernel_size, stride and padding). Validation is the layer's job."""
    return (v, v) if not isinstance(v, (tuple, list)) else tuple(v)


def output_size(H, W, KH, KW, stride=1, padding=0):
    """(OH, OW) of a KH×KW window slid with ``stride`` over an H×W input padded by ``padding``
    (each an int, or a pair (h, w) per axis): OH = (H + 2*ph - KH) // sh + 1, OW likewise."""
    (sh, sw), (ph, pw) = as_pair(stride), as_pair(padding)
    if min(sh, sw) < 1 or min(ph, pw) < 0:
        raise ValueError(f"stride must be >= 1 and padding >= 0, got stride={stride}, padding={padding}.")
    Hp, Wp = H + 2 * ph, W + 2 * pw
    if KH > Hp or KW > Wp:
        raise ValueError(f"A {KH}×{KW} window does not fit in the {H}×{W} input padded to {Hp}×{Wp}. "
                         f"Use a smaller kernel, more padding, or a larger image.")
    return (Hp - KH) // sh + 1, (Wp - KW) // sw + 1
