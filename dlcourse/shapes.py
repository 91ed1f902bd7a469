"""Sizes shared by the layers and the kernels: a window's output size, a shape as text.

Introduced in notebook ``06_convolution`` (the output size of a convolution). It depends on
nothing, so the layers (``dlcourse/conv.py``), the CUDA wrappers and their NumPy references
(``dlcourse/kernels/``) can all use it without importing each other.
"""
from __future__ import annotations

__all__ = ["output_size", "shape_str"]


def shape_str(shape) -> str:
    """``(2, 3)`` as ``"(2, 3)"``, ``(4,)`` as ``"(4,)"``."""
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def output_size(H, W, KH, KW, stride=1, padding=0):
    """(OH, OW) of a KH×KW window slid with ``stride`` over an H×W input padded by ``padding``:
    OH = (H + 2*padding - KH) // stride + 1, OW likewise."""
    if stride < 1 or padding < 0:
        raise ValueError(f"stride must be >= 1 and padding >= 0, got stride={stride}, padding={padding}.")
    Hp, Wp = H + 2 * padding, W + 2 * padding
    if KH > Hp or KW > Wp:
        raise ValueError(f"A {KH}×{KW} window does not fit in the {H}×{W} input padded to {Hp}×{Wp}. "
                         f"Use a smaller kernel, more padding, or a larger image.")
    return (Hp - KH) // stride + 1, (Wp - KW) // stride + 1
