"""The kernels over image windows: im2col and col2im (convolution as a matrix product) and max
pooling, on the GPU.

Introduced in notebook ``08d_fusion_and_graphs``; sources ``im2col.cu`` and ``maxpool.cu``.
``dlcourse.conv`` calls these, through ``layer_base.kernels_for``, when its input is a CuPy
array (``Conv2d``: :func:`unfold_cols`/:func:`fold_cols`; ``MaxPool2d``: maxpool_forward and
maxpool_backward) and uses its array code otherwise. :func:`unfold_cols` and :func:`fold_cols`
follow the contract of ``dlcourse.conv.unfold`` and ``fold`` (written there once: cols (C*KH*KW,
N*OH*OW), one column per window) with one stride and one padding for both axes; :func:`im2col`
and :func:`col2im` are the same with one row per window, (N*OH*OW, C*KH*KW), as the references
``dlcourse.kernels.reference.im2col_ref`` and ``col2im_ref`` are. For pooling the references are
``maxpool_forward_ref`` and ``maxpool_backward_ref``.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..backend import require_cupy
from ..shapes import output_size
from ._build import (CTYPE, LaunchConfig, ceil_div, check_gpu_array, geometry, get_kernel,
                     launch_config, remembered)

__all__ = ["unfold_cols", "fold_cols", "im2col", "col2im", "maxpool_forward", "maxpool_backward"]

THREADS = 256


@remembered
def _output_size(H, W, KH, KW, stride=1, padding=0, fn="im2col"):
    """``shapes.output_size`` for these kernels: one int stride and padding, and errors that
    name the kernel."""
    for name, v, lo in (("KH", KH, 1), ("KW", KW, 1), ("stride", stride, 1),
                        ("padding", padding, 0)):
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{fn}: {name} must be an integer >= {lo}, got {v!r}"
                             + (" (these kernels take one number for both directions)."
                                if isinstance(v, (tuple, list)) else "."))
    try:
        return output_size(H, W, KH, KW, stride, padding)   # the formula, written once
    except ValueError as err:
        raise ValueError(f"{fn}: {err}") from None


def _check_int32(fn, N, C, H, W, OH, OW, KH, KW):
    """The kernels index pixels and windows with 32-bit ints (only flat indices into cols are
    64-bit): N*C*H*W, N*OH*OW and C*KH*KW must stay below 2**31."""
    if max(N * C * H * W, N * OH * OW, C * KH * KW) >= 2**31:
        raise ValueError(f"{fn}: N*C*H*W = {N * C * H * W}, N*OH*OW = {N * OH * OW} or "
                         f"C*KH*KW = {C * KH * KW} reaches 2**31, past these kernels' 32-bit "
                         f"pixel indices. Split the batch.")


def _geometry(name, N, C, H, W, KH, KW, stride, padding):
    OH, OW = _output_size(H, W, KH, KW, stride, padding, fn=name)
    total, what = {"im2col": (N * OH * OW * C * KH * KW, "element of cols"),
                   "maxpool_forward": (N * C * OH * OW, "output element")}.get(
        name, (N * C * H * W, "input pixel"))
    file = "maxpool.cu" if name.startswith("maxpool") else "im2col.cu"
    return LaunchConfig(name, file, grid=(max(1, min(ceil_div(total, THREADS), 2**20)), 1, 1),
                        block=(THREADS, 1, 1),
                        note=f"one thread per {what} ({total} in all), grid-stride")


@geometry("im2col")
def _im2col_geometry(N, C, H, W, KH, KW, stride=1, padding=0):
    return _geometry("im2col", N, C, H, W, KH, KW, stride, padding)


@geometry("col2im")
def _col2im_geometry(N, C, H, W, KH, KW, stride=1, padding=0):
    return _geometry("col2im", N, C, H, W, KH, KW, stride, padding)


@geometry("maxpool_forward")
def _maxpool_forward_geometry(N, C, H, W, KH, KW, stride):
    return _geometry("maxpool_forward", N, C, H, W, KH, KW, stride, 0)


@geometry("maxpool_backward")
def _maxpool_backward_geometry(N, C, H, W, KH, KW, stride):
    return _geometry("maxpool_backward", N, C, H, W, KH, KW, stride, 0)


def _sizes(*ints):
    return tuple(np.int32(v) for v in ints)


def _strides(cupy, a):
    """(a, its strides in elements): a itself when every stride is a non-negative multiple of
    the item size (any transpose or slice), else a compact copy (a reversed view, say)."""
    if not all(st >= 0 and st % a.itemsize == 0 for st in a.strides):
        a = cupy.ascontiguousarray(a)
    return a, tuple(np.int64(st // a.itemsize) for st in a.strides)


def im2col(x, KH, KW, stride=1, padding=0):
    """:func:`unfold_cols` with one row per window: (N*OH*OW, C*KH*KW), a transposed view."""
    return unfold_cols(x, KH, KW, stride, padding).T


def col2im(cols, x_shape, KH, KW, stride=1, padding=0):
    """:func:`fold_cols` of cols with one row per window, (N*OH*OW, C*KH*KW) (read in place)."""
    return fold_cols(cols.T, x_shape, KH, KW, stride, padding)


def unfold_cols(x, KH, KW, stride=1, padding=0):
    """``dlcourse.conv.unfold`` on the GPU: every KH x KW window of x as a column of cols.

    x: (N, C, H, W) float32 or float64 CuPy array, any strides (a transposed view is read in
    place). Returns cols: (C*KH*KW, N*OH*OW), same dtype, C-contiguous: the matrix Conv2d
    multiplies (see im2col.cu for why this layout).
    """
    fn = "im2col"
    check_gpu_array(fn, "x", x, ndim=4, dtypes=(np.float32, np.float64), contiguous=False)
    cupy = require_cupy()
    x, strides = _strides(cupy, x)
    N, C, H, W = x.shape
    OH, OW = _output_size(H, W, KH, KW, stride, padding, fn=fn)
    _check_int32(fn, N, C, H, W, OH, OW, KH, KW)
    cols_t = cupy.empty((C * KH * KW, N * OH * OW), dtype=x.dtype)
    if cols_t.size == 0:
        return cols_t
    cfg = launch_config("im2col", N, C, H, W, KH, KW, stride, padding)
    kernel = get_kernel(cfg.file, f"im2col_kernel<{CTYPE[x.dtype]}>")
    kernel(cfg.grid, cfg.block,
           (x, cols_t) + strides + _sizes(N, C, H, W, KH, KW, stride, padding, OH, OW),
           shared_mem=cfg.shared_mem)
    return cols_t


def fold_cols(cols, x_shape, KH, KW, stride=1, padding=0):
    """The adjoint of :func:`unfold_cols`, on the GPU: add every entry of cols back onto the input
    pixel it was copied from (overlapping windows add up; padding is dropped).

    cols: (C*KH*KW, N*OH*OW) float32 or float64 CuPy array, any strides (read in place: the
    layout unfold_cols returns is the fastest);
    x_shape: (N, C, H, W). Returns dx: (N, C, H, W), same dtype. Deterministic: one thread per
    input pixel gathers the entries that came from it, so no atomics are needed.
    """
    fn = "col2im"
    check_gpu_array(fn, "cols", cols, ndim=2, dtypes=(np.float32, np.float64), contiguous=False)
    if len(x_shape) != 4:
        raise ValueError(f"{fn}: x_shape must be (N, C, H, W), got {tuple(x_shape)}.")
    cupy = require_cupy()
    N, C, H, W = (int(v) for v in x_shape)
    OH, OW = _output_size(H, W, KH, KW, stride, padding, fn=fn)
    expected = (C * KH * KW, N * OH * OW)
    if tuple(cols.shape) != expected:
        raise ValueError(f"{fn}: for x_shape {(N, C, H, W)}, a {KH}x{KW} kernel, stride "
                         f"{stride} and padding {padding}, cols must have shape (C*KH*KW, "
                         f"N*OH*OW) = {expected} (col2im: its transpose), got "
                         f"{tuple(cols.shape)}. Were the same KH, KW, stride and padding "
                         f"given to im2col?")
    cols, strides = _strides(cupy, cols.T)    # the kernel's indexing: one row per window
    _check_int32(fn, N, C, H, W, OH, OW, KH, KW)
    dx = cupy.empty((N, C, H, W), dtype=cols.dtype)
    if dx.size == 0:
        return dx
    if cols.size == 0:
        dx.fill(0)
        return dx
    cfg = launch_config("col2im", N, C, H, W, KH, KW, stride, padding)
    kernel = get_kernel(cfg.file, f"col2im_kernel<{CTYPE[cols.dtype]}>")
    kernel(cfg.grid, cfg.block,
           (cols, dx) + strides + _sizes(N, C, H, W, KH, KW, stride, padding, OH, OW),
           shared_mem=cfg.shared_mem)
    return dx


def maxpool_forward(x, KH, KW, stride):
    """Max pooling on the GPU: the maximum of every KH x KW window, slid by stride, and where
    it was.

    x: (N, C, H, W) float32 or float64 CuPy array, any strides (read in place). Returns
    (out, idx), both (N, C, OH, OW) and C-contiguous, OH = (H - KH) // stride + 1: out has x's
    dtype; idx (int32) holds kh * KW + kw of each window's maximum (the first, on ties).
    """
    fn = "maxpool_forward"
    check_gpu_array(fn, "x", x, ndim=4, dtypes=(np.float32, np.float64), contiguous=False)
    cupy = require_cupy()
    x, strides = _strides(cupy, x)
    N, C, H, W = x.shape
    OH, OW = _output_size(H, W, KH, KW, stride, 0, fn=fn)
    _check_int32(fn, N, C, H, W, OH, OW, KH, KW)
    out = cupy.empty((N, C, OH, OW), dtype=x.dtype)
    idx = cupy.empty((N, C, OH, OW), dtype=cupy.int32)
    if out.size:
        cfg = launch_config(fn, N, C, H, W, KH, KW, stride)
        get_kernel(cfg.file, f"{fn}<{CTYPE[x.dtype]}>")(
            cfg.grid, cfg.block, (x, out, idx) + strides + _sizes(N, C, H, W, KH, KW, stride, OH, OW),
            shared_mem=cfg.shared_mem)
    return out, idx


def maxpool_backward(dout, idx, dx, KH, KW, stride):
    """The backward of :func:`maxpool_forward`, on the GPU: dx[n, c, h, w] = the sum of dout
    over the windows whose maximum was at (h, w). Deterministic (no atomics).

    dout: (N, C, OH, OW) float CuPy array, any strides; idx: what maxpool_forward returned;
    dx: (N, C, H, W), dout's dtype, any strides: filled in place (every pixel written; pass
    ``cupy.empty_like(x)`` to get dx in x's memory layout). Returns dx.
    """
    fn = "maxpool_backward"
    check_gpu_array(fn, "dout", dout, ndim=4, dtypes=(np.float32, np.float64), contiguous=False)
    check_gpu_array(fn, "idx", idx, ndim=4, dtypes=(np.int32,))
    check_gpu_array(fn, "dx", dx, ndim=4, dtypes=(dout.dtype,), contiguous=False)
    cupy = require_cupy()
    dout, dout_strides = _strides(cupy, dout)
    N, C, H, W = dx.shape
    OH, OW = _output_size(H, W, KH, KW, stride, 0, fn=fn)
    if tuple(dout.shape) != (N, C, OH, OW) or tuple(idx.shape) != (N, C, OH, OW):
        raise ValueError(f"{fn}: for dx of shape {(N, C, H, W)}, a {KH}x{KW} window and stride "
                         f"{stride}, dout and idx must have shape {(N, C, OH, OW)}; got "
                         f"{tuple(dout.shape)} and {tuple(idx.shape)}. Were the same window and "
                         f"stride given to maxpool_forward?")
    if any(n > 1 and (st <= 0 or st % dx.itemsize) for n, st in zip(dx.shape, dx.strides)):
        raise ValueError(f"{fn}: dx must have positive strides, each a whole number of "
                         f"elements, got {dx.strides}: every pixel is written once. "
                         f"Use cupy.empty_like(x).")
    _check_int32(fn, N, C, H, W, OH, OW, KH, KW)
    if dx.size:
        cfg = launch_config(fn, N, C, H, W, KH, KW, stride)
        get_kernel(cfg.file, f"{fn}<{CTYPE[dx.dtype]}>")(
            cfg.grid, cfg.block,
            (dout, idx, dx) + dout_strides + tuple(np.int64(st // dx.itemsize) for st in dx.strides)
            + _sizes(N, C, H, W, KH, KW, stride, OH, OW), shared_mem=cfg.shared_mem)
    return dx
