"""Fused kernels: several array operations done in one pass over memory.

Introduced in notebook ``08d_fusion_and_graphs``. Sources: ``bias_relu.cu``, ``softmax_cross_entropy.cu`` and
``optimizers.cu``. NumPy references: ``dlcourse.kernels.reference.bias_relu_forward_ref``,
``bias_relu_backward_ref``, ``softmax_cross_entropy_ref``, ``sgd_momentum_update_ref`` and
``adam_update_ref``.

Elementwise operations do a flop or two per number they load, so memory bandwidth sets their
speed; doing ``x + b`` and ``max(., 0)`` in one kernel halves the bytes moved. The optimizer
updates fuse the four (SGD) or twelve (Adam) array operations of an update into one launch, which
matters most where launches, not bytes, set the time: small batches. The benchmark
(``benchmarks/gpu_suite.py``) measures exactly that against the device's copy bandwidth.
All wrappers take float32 or float64 C-contiguous CuPy arrays.
"""
from __future__ import annotations

import numpy as np

from ..backend import require_cupy
from ._build import CTYPE, LaunchConfig, ceil_div, check_gpu_array, geometry, get_kernel, launch_config

__all__ = ["bias_relu_forward", "bias_relu_backward", "bias_relu_rows_forward",
           "bias_relu_rows_backward", "softmax_cross_entropy", "sgd_momentum_update",
           "adam_update"]

FLOATS = (np.float32, np.float64)


@geometry("bias_relu")
def _bias_relu_geometry(N, F, itemsize=4):
    block = (32, 8, 1)   # bias_relu.cu relies on this shape (BR_BX, BR_BY)
    grid_x = ceil_div(F, 32)
    # Enough blocks to fill every SM several times over; each walks its rows grid-stride.
    grid_y = max(1, min(ceil_div(N, 8), max(1, 4096 // grid_x), 65535))
    return LaunchConfig("bias_relu", "bias_relu.cu", grid=(grid_x, grid_y, 1), block=block,
                        static_shared_mem=8 * 33 * itemsize,   # backward's sums[8][33]
                        note="x over columns (coalesced), y splits the rows")


@geometry("bias_relu_rows")
def _bias_relu_rows_geometry(F, M, itemsize=4):
    threads = 256   # bias_relu.cu relies on this (BRR_THREADS)
    # Enough blocks in all (about 4096) to fill every SM several times over; each row gets
    # at least one, and no more than its length needs.
    grid_x = max(1, min(ceil_div(M, threads), max(1, 4096 // max(F, 1))))
    return LaunchConfig("bias_relu_rows", "bias_relu.cu", grid=(grid_x, F, 1), block=(threads, 1, 1),
                        static_shared_mem=(threads // 32) * itemsize,   # backward's warp_sums
                        note="y is the row (channel), x splits the row")


@geometry("softmax_cross_entropy")
def _softmax_geometry(N, C, itemsize=4):
    threads = 32
    while threads < min(C, 256):   # a power of two from 32 to 256, about the row length
        threads *= 2
    return LaunchConfig("softmax_cross_entropy", "softmax_cross_entropy.cu", grid=(min(N, 2**20), 1, 1),
                        block=(threads, 1, 1), static_shared_mem=2 * 32 * itemsize,
                        note="one block per row (grid-stride when N > 2**20)")


@geometry("optimizer_update")
def _optimizer_geometry(n):
    threads = 256
    return LaunchConfig("optimizer_update", "optimizers.cu",
                        grid=(max(1, min(ceil_div(n, threads), 4096)), 1, 1), block=(threads, 1, 1),
                        note="one thread per element, grid-stride past 4096 blocks")


def _check_forward(fn, x, b, axis):
    """x: a 2-D float CuPy array; b: one entry per column (axis=1) or per row (axis=0) of x."""
    check_gpu_array(fn, "x", x, ndim=2, dtypes=FLOATS)
    check_gpu_array(fn, "b", b, ndim=1, dtypes=(x.dtype,))
    if b.shape[0] != x.shape[axis]:
        what, other = (("column (feature)", "bias_relu_rows_forward for one per row") if axis == 1
                       else ("row (channel)", "bias_relu_forward for one per column"))
        raise ValueError(f"{fn}: b has {b.shape[0]} entries but x has shape {tuple(x.shape)}; "
                         f"here the bias needs one entry per {what}. (Use {other}.)")


def _check_backward(fn, dout, y):
    """dout, y: 2-D float CuPy arrays of one shape and dtype (dout is the gradient of y)."""
    check_gpu_array(fn, "dout", dout, ndim=2, dtypes=FLOATS)
    check_gpu_array(fn, "y", y, ndim=2, dtypes=(dout.dtype,))
    if dout.shape != y.shape:
        raise ValueError(f"{fn}: dout has shape {tuple(dout.shape)} but y has shape "
                         f"{tuple(y.shape)}; dout is the gradient of y, so they must match.")


def bias_relu_forward(x, b):
    """y = max(x + b, 0) in one kernel. x: (N, F), b: (F,), same float dtype. Returns y: (N, F)."""
    fn = "bias_relu_forward"
    _check_forward(fn, x, b, axis=1)
    N, F = x.shape
    cupy = require_cupy()
    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    cfg = launch_config("bias_relu", N, F, x.dtype.itemsize)
    kernel = get_kernel(cfg.file, f"bias_relu_forward<{CTYPE[x.dtype]}>")
    kernel(cfg.grid, cfg.block, (x, b, y, np.int64(N), np.int32(F)), shared_mem=cfg.shared_mem)
    return y


def bias_relu_backward(dout, y):
    """Backward of y = max(x + b, 0). dout, y: (N, F) (y is the forward output).

    Returns (dx, db): dx = dout * (y > 0) of shape (N, F), and db = dx.sum(axis=0) of shape
    (F,). db is summed without atomics (per-block partial sums, then one small sum), so the
    result is the same, bit for bit, on every run.
    """
    fn = "bias_relu_backward"
    _check_backward(fn, dout, y)
    N, F = y.shape
    cupy = require_cupy()
    dx = cupy.empty_like(y)
    if y.size == 0:
        return dx, cupy.zeros(F, dtype=y.dtype)
    cfg = launch_config("bias_relu", N, F, y.dtype.itemsize)
    partial = cupy.empty((cfg.grid[1], F), dtype=y.dtype)   # one row of sums per block-row
    kernel = get_kernel(cfg.file, f"bias_relu_backward<{CTYPE[y.dtype]}>")
    kernel(cfg.grid, cfg.block, (dout, y, dx, partial, np.int64(N), np.int32(F)),
           shared_mem=cfg.shared_mem)
    return dx, partial.sum(axis=0)


def _rows(fn, x):
    """F, M of x: (F, M); the grid has one block row per row of x, and at most 65535."""
    F, M = x.shape
    if F > 65535:
        raise ValueError(f"{fn}: x has F={F} rows, but the grid's y dimension (one block row per "
                         f"row of x) holds at most 65535.")
    return F, M


def bias_relu_rows_forward(x, b):
    """y = max(x + b[:, None], 0) in one kernel: the bias along rows, as in a convolution's
    output matrix. x: (F, M), b: (F,), same float dtype. Returns y: (F, M)."""
    fn = "bias_relu_rows_forward"
    _check_forward(fn, x, b, axis=0)
    F, M = _rows(fn, x)
    cupy = require_cupy()
    y = cupy.empty_like(x)
    if x.size == 0:
        return y
    cfg = launch_config("bias_relu_rows", F, M, x.dtype.itemsize)
    kernel = get_kernel(cfg.file, f"bias_relu_rows_forward<{CTYPE[x.dtype]}>")
    kernel(cfg.grid, cfg.block, (x, b, y, np.int64(M)), shared_mem=cfg.shared_mem)
    return y


def bias_relu_rows_backward(dout, y):
    """Backward of y = max(x + b[:, None], 0). dout, y: (F, M) (y is the forward output).

    Returns (dx, db): dx = dout * (y > 0) of shape (F, M), and db = dx.sum(axis=1) of shape
    (F,), summed without atomics, so the same bits on every run.
    """
    fn = "bias_relu_rows_backward"
    _check_backward(fn, dout, y)
    F, M = _rows(fn, y)
    cupy = require_cupy()
    dx = cupy.empty_like(y)
    if y.size == 0:
        return dx, cupy.zeros(F, dtype=y.dtype)
    cfg = launch_config("bias_relu_rows", F, M, y.dtype.itemsize)
    partial = cupy.empty((F, cfg.grid[0]), dtype=y.dtype)   # one sum per block
    kernel = get_kernel(cfg.file, f"bias_relu_rows_backward<{CTYPE[y.dtype]}>")
    kernel(cfg.grid, cfg.block, (dout, y, dx, partial, np.int64(M)), shared_mem=cfg.shared_mem)
    return dx, partial.sum(axis=1)


def softmax_cross_entropy(logits, labels):
    """Mean softmax cross-entropy and its gradient, in one kernel (one block per row).

    logits: (N, C) float32/float64; labels: (N,) int32/int64 class indices in [0, C).
    Returns (loss, dlogits): loss is a 0-d CuPy array (the mean over rows — call float(loss)
    when you need a Python number; that waits for the GPU), dlogits = (softmax - onehot) / N
    of shape (N, C). A label outside [0, C) makes that row's loss, and so the mean, NaN.
    """
    fn = "softmax_cross_entropy"
    check_gpu_array(fn, "logits", logits, ndim=2, dtypes=FLOATS)
    check_gpu_array(fn, "labels", labels, ndim=1, dtypes=(np.int32, np.int64))
    N, C = logits.shape
    if labels.shape[0] != N:
        raise ValueError(f"{fn}: labels has {labels.shape[0]} entries for N={N} rows of "
                         f"logits; give one class index per row.")
    if C == 0 or max(N, C) > 2**31 - 1:
        raise ValueError(f"{fn}: need at least one class and N, C < 2**31; got N={N}, C={C}.")
    cupy = require_cupy()
    dlogits = cupy.empty_like(logits)
    if N == 0:
        return cupy.asarray(float("nan"), dtype=logits.dtype), dlogits
    loss_rows = cupy.empty(N, dtype=logits.dtype)
    cfg = launch_config("softmax_cross_entropy", N, C, logits.dtype.itemsize)
    kernel = get_kernel(cfg.file, f"softmax_cross_entropy<{CTYPE[logits.dtype]}, {CTYPE[labels.dtype]}>")
    inv_N = logits.dtype.type(1.0 / N)
    kernel(cfg.grid, cfg.block, (logits, labels, loss_rows, dlogits, np.int32(N), np.int32(C),
                                 inv_N), shared_mem=cfg.shared_mem)
    return loss_rows.mean(), dlogits


# --------------------------------------------------------------------------------------
# Optimizer updates: in place, one launch per parameter
# --------------------------------------------------------------------------------------
def _check_state(fn, p, **arrays):
    """p: a float CuPy array updated in place; every other array: the same shape and dtype."""
    check_gpu_array(fn, "p", p, dtypes=FLOATS)
    for name, a in arrays.items():
        check_gpu_array(fn, name, a, dtypes=(p.dtype,))
        if a.shape != p.shape:
            raise ValueError(f"{fn}: {name} has shape {tuple(a.shape)} but p has shape "
                             f"{tuple(p.shape)}; the optimizer keeps one {name} per entry of p.")


def _update(kernel, p, arrays, scalars):
    """Launch ``kernel<T>`` on p and arrays (all of p's shape) with the scalars cast to T."""
    if p.size:
        cfg = launch_config("optimizer_update", p.size)
        T = p.dtype.type
        get_kernel(cfg.file, f"{kernel}<{CTYPE[p.dtype]}>")(
            cfg.grid, cfg.block, (p, *arrays, np.int64(p.size), *(T(s) for s in scalars)),
            shared_mem=cfg.shared_mem)
    return p


def sgd_momentum_update(p, grad, v, lr, momentum, weight_decay=0.0):
    """One step of SGD with momentum on one parameter, in place, in one kernel:
    ``g = grad + weight_decay * p;  v = momentum * v + g;  p -= lr * v``.

    p, grad, v: CuPy arrays of one shape, float32 or float64, C-contiguous (v is the momentum
    buffer, updated too). lr, momentum, weight_decay: Python numbers. Returns p.
    """
    fn = "sgd_momentum_update"
    _check_state(fn, p, grad=grad, v=v)
    return _update(fn, p, (grad, v), (lr, momentum, weight_decay))


def adam_update(p, grad, m, v, b1, b2, step_size, eps, weight_decay=0.0):
    """One step of Adam on one parameter, in place, in one kernel:
    ``g = grad + weight_decay * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g²;
    p -= step_size * m / (sqrt(v) + eps)``.

    p, grad, m, v: CuPy arrays of one shape, float32 or float64, C-contiguous (m, v updated
    too). step_size and eps carry the bias corrections (``dl.Adam`` computes them). Returns p.
    """
    fn = "adam_update"
    _check_state(fn, p, grad=grad, m=m, v=v)
    return _update(fn, p, (grad, m, v),
                   (b1, 1.0 - b1, b2, 1.0 - b2, step_size, eps, weight_decay))
