"""The NumPy passes of a convolution and a max pooling split between the CPU's cores, with
the very numbers of the layers' own code: an experiment, off by default (measured below).

Read with notebook ``07_training_a_cnn``, whose CNN it concerns (optional reading: nothing in
a lesson depends on it); ``benchmarks/cpu_step.py --split-passes`` times it against PyTorch.

On a CPU, NumPy's BLAS library runs each matrix product on every core it may use. The passes
around the products are plain NumPy: im2col's copy and the bias of ``Conv2d.forward``, the
bias gradient and col2im's sums of its backward, the maxima of ``MaxPool2d`` and where they
were, and the gradient sent back to them. One NumPy call runs on one core. Each pass treats
every sample by itself, so, as ``dl.infer`` does (``fast_inference.py``), the batch can be cut
into as many parts as BLAS has threads (:func:`split`), one thread running each part (NumPy
lets go of Python's lock while it computes) and writing its own samples of one output array.
The products are left whole, on the caller's thread, called exactly as the layers call them:
a product cut into parts adds its terms in another order (OpenBLAS's blocking depends on the
shapes), and one run on one BLAS thread differs in the last bits from one run on two. So
everything here is the layer's own arithmetic on a part of the batch, and the results are
the layers' own, **bit for bit**, at any thread count (tests/test_threaded_step.py checks the
outputs, caches, gradients, dx and the parameters after optimizer steps). The one pass that
adds over the batch, the bias gradient, is split by channel instead: each channel's sum is
still one sum.

**Why it is off.** Measured on 2026-11-26 on the 2-core AMD EPYC VM of docs/benchmarks.md's figures
(OpenBLAS 0.3.31, OPENBLAS_CORETYPE=Haswell, load average about 0.5): the course's CNN step at
batch 64 took 7.4-8.3 ms with the passes on one core, 11.5-12.2 ms split (PyTorch: 4.5-5.2
ms; five runs of each). Timing each part showed why: after every product OpenBLAS's second thread keeps spinning
for about 0.1 s (2^28 cycles, its THREAD_TIMEOUT) waiting for the next one, so the thread
running the other half shares a core with it and takes twice as long as the worker (e.g. the
first pooling: 886 against 433 microseconds). With ``OPENBLAS_THREAD_TIMEOUT=4`` in the
environment the spinning stops and the long passes run 1.15-1.7x faster split (col2im 1.19
ms -> 0.70), the short ones slower (the bias: 39 -> 72 microseconds), and the step took 7.2 ms
against 7.4: waking a worker and handing the GIL back and forth costs tens of microseconds per
pass, and the passes last 0.04-1.2 ms each. Parts smaller than halves, taken by whichever thread
is free (``CHUNKS_PER_THREAD``), cost more than they saved (8.4 ms). The same step on one
thread per product and every pass split, as ``dl.infer`` does, would change the numbers of
the products (see above) unless it ran on one BLAS thread throughout, which the layers
cannot choose for the whole step.

``Conv2d`` and ``MaxPool2d`` ask :func:`threads_for` first in their ``forward`` and
``backward`` (the CPU's counterpart of ``layer_base.kernels_for``); it answers None, and the
layer runs its own code, unless all of these hold: the layer's ``use_threads`` is on
(``dl.use_threads(model)``; off by default), the array is a NumPy one (on a GPU CuPy's
kernels already use the whole device), BLAS may use more than one thread, the batch has a
sample per part and at least :data:`MIN_NUMBERS` numbers, and the caller is not itself one of
the workers.

Reading map: :func:`threads_for`, :func:`split`, then one function per layer method:
:func:`conv_forward`, :func:`conv_backward` (with :func:`unfold_into`, :func:`fold_into`),
:func:`max_and_where`, :func:`maxpool_backward`; :func:`use_threads` is the switch and
:func:`blas_threads` the reading of BLAS's threads that ``dl.infer`` shares.
"""
from __future__ import annotations

import itertools
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from threadpoolctl import ThreadpoolController

from .layer_base import every_layer
from .ops import matmul
from .shapes import as_pair, output_size

__all__ = ["threads_for", "use_threads", "split", "parts_of", "blas_threads", "blas_controller",
           "conv_forward", "conv_backward", "unfold_into", "fold_into", "max_and_where",
           "maxpool_backward", "MIN_NUMBERS"]

# The fewest numbers an array must hold for its pass to be split: below it a pass takes a few
# tens of microseconds, what starting the other threads costs.
MIN_NUMBERS = 2**15
CHUNKS_PER_THREAD = 1       # parts per thread in a split (see split)

_blas = []                  # [threadpoolctl's controller, its BLAS libraries], made on first use
_pool = [None]              # the worker threads, kept from call to call
_pool_lock = threading.Lock()
_inside = threading.local()  # .busy: this thread is running a part


# ======================================================================================
# Whether to split, and how
# ======================================================================================
def threads_for(x, enabled: bool = True):
    """This module, when a layer's pass over the batch ``x`` is to be split between threads
    (see the module's docstring for when); else None, and the layer runs its own code."""
    if not enabled or not isinstance(x, np.ndarray) or getattr(_inside, "busy", False):
        return None
    if x.ndim < 1 or x.size < MIN_NUMBERS or len(x) < 2 or blas_threads() < 2:
        return None
    return sys.modules[__name__]


def use_threads(obj, enabled: bool = True):
    """Let (``enabled=True``) or stop every layer of ``obj`` from splitting its CPU passes
    between threads (each layer's ``use_threads``; off unless set). Either way the numbers
    are the same; see the module's docstring for the times. Returns ``obj``."""
    for layer in every_layer(obj):
        if hasattr(layer, "use_threads"):
            layer.use_threads = bool(enabled)
    return obj


def parts_of(n: int, parts: int):
    """``range(n)`` cut into ``parts`` runs (lo, hi) of sizes as equal as can be, none empty."""
    parts = max(1, min(parts, n))
    edges = [n * k // parts for k in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def split(work, n: int):
    """Run ``work(lo, hi)`` over ``range(n)`` cut into parts (:func:`parts_of`), on this
    thread and the workers side by side (one thread per BLAS thread), each thread taking the
    next part left when it is done with one (``CHUNKS_PER_THREAD`` parts per thread: with more
    than one, a thread slowed down does fewer). Returns when every part is done; an error in
    any part is raised here, after all have finished."""
    threads = min(blas_threads(), n)
    parts = parts_of(n, threads * CHUNKS_PER_THREAD)
    order = itertools.count()                     # next(order): the next part to take

    def take_parts():
        _inside.busy = True
        for i in iter(order.__next__, None):
            if i >= len(parts):
                return
            work(*parts[i])

    pool = _workers(threads - 1)
    others = [pool.submit(take_parts) for _ in range(threads - 1)]
    try:
        take_parts()
    finally:
        _inside.busy = False
        for done in others:              # wait for every part before anything is raised:
            done.exception()             # they write into arrays the caller owns
    for done in others:
        done.result()


def _workers(n: int) -> ThreadPoolExecutor:
    """A pool of ``n`` threads (at least one), kept for the next call."""
    with _pool_lock:
        pool = _pool[0]
        if pool is None or pool._max_workers != max(n, 1):
            if pool is not None:
                pool.shutdown(wait=False)
            pool = _pool[0] = ThreadPoolExecutor(max(n, 1), thread_name_prefix="dlcourse-part")
        return pool


def blas_controller() -> ThreadpoolController:
    """threadpoolctl's view of the loaded thread pools (made once: finding them takes a moment)."""
    if not _blas:
        controller = ThreadpoolController()
        _blas.extend([controller, controller.select(user_api="blas").lib_controllers])
    return _blas[0]


def blas_threads() -> int:
    """The threads NumPy's BLAS library may use now (threadpoolctl's reading; by default the
    CPUs, fewer inside ``threadpool_limits``); 1 if threadpoolctl finds no BLAS."""
    blas_controller()
    return max([lib.num_threads for lib in _blas[1]] or [1])


# ======================================================================================
# Conv2d: forward and backward, the products whole, the passes split by sample
# ======================================================================================
def conv_forward(conv, x):
    """``conv.forward(x)`` (x: (N, C, H, W) -> (N, F, OH, OW)), with the same cache and output
    layout: im2col and the bias split by sample, the product z = W_mat @ cols whole."""
    W, b = conv.params["W"], conv.params["b"]
    F, C, KH, KW = W.shape
    N, _, H, W_in = x.shape
    OH, OW = output_size(H, W_in, KH, KW, conv.stride, conv.padding)
    P = OH * OW                                              # columns per sample
    cols = np.empty((C * KH * KW, N * P), x.dtype)           # (C*KH*KW, N*OH*OW)
    split(lambda lo, hi: unfold_into(cols[:, lo * P:hi * P], x[lo:hi], KH, KW, conv.stride,
                                     conv.padding), N)
    conv.cache = (x.shape, cols)                             # what Conv2d.matrix_forward keeps
    z = matmul(W.reshape(F, -1), cols)                       # (F, N*OH*OW): as the layer calls it
    bias = b.reshape(-1, 1)

    def add_bias(lo, hi):
        part = z[:, lo * P:hi * P]
        part += bias
    split(add_bias, N)
    return conv.as_image(z, x.shape)


def conv_backward(conv, dout, input_grad: bool = True):
    """``conv.backward(dout, input_grad)``: fills ``conv.grads`` and returns dx (N, C, H, W)
    (or None), the same numbers in the same layouts. The bias gradient is split by channel,
    the products (dW, then dcols) are the layer's own, col2im is split by sample."""
    N, F = dout.shape[:2]
    dz = dout.transpose(1, 0, 2, 3)                          # (F, N, OH, OW)
    if dz.flags.c_contiguous:                                # a channel-major dout: a view
        dz = dz.reshape(F, -1)
    else:                                                    # the copy reshape would make
        rows = np.empty(dz.shape, dz.dtype)

        def copy(lo, hi):
            rows[:, lo:hi] = dz[:, lo:hi]
        split(copy, N)
        dz = rows.reshape(F, -1)                             # (F, N*OH*OW)
    db = np.empty(F, dz.dtype)
    split(lambda lo, hi: np.sum(dz[lo:hi], axis=1, out=db[lo:hi]), F)   # a channel's sum whole
    conv.matrix_backward(dz, db, input_grad=False)           # grads: dW = cols @ dz.T, as ever
    if not input_grad:
        return None
    x_shape, _ = conv.cache
    W = conv.params["W"]
    dcols = matmul(W.reshape(F, -1).T, dz)                   # (C*KH*KW, N*OH*OW), as the layer
    return fold_into(dcols, x_shape, *W.shape[2:], conv.stride, conv.padding)


def unfold_into(out, x, KH, KW, stride, padding):
    """``conv.unfold(x, ...)`` written into ``out`` (C*KH*KW, n*OH*OW), a block of columns of
    the whole batch's ``cols``: the padded x's windows, one column per window."""
    n, C, H, W = x.shape
    (sh, sw), (ph, pw) = as_pair(stride), as_pair(padding)
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    if ph or pw:
        x_pad = np.zeros_like(x, shape=(n, C, H + 2 * ph, W + 2 * pw))   # x's memory layout
        x_pad[:, :, ph:ph + H, pw:pw + W] = x
    else:
        x_pad = x
    sN, sC, sH, sW = x_pad.strides
    # entry [c, kh, kw, n, i, j] is x_pad[n, c, i*sh + kh, j*sw + kw]
    windows = np.lib.stride_tricks.as_strided(
        x_pad, shape=(C, KH, KW, n, OH, OW), strides=(sC, sH, sW, sN, sH * sh, sW * sw))
    view = out.reshape(windows.shape)        # out is a contiguous block: a view, never a copy
    assert np.shares_memory(view, out), "unfold_into: out must be one contiguous block"
    view[...] = windows


def fold_into(dcols, x_shape, KH, KW, stride, padding):
    """``conv.fold``: dcols (C*KH*KW, N*OH*OW) -> dx (N, C, H, W), each sample's windows
    added back by one thread, in fold's order (kernel offset by kernel offset)."""
    N, C, H, W = x_shape
    (sh, sw), (ph, pw) = as_pair(stride), as_pair(padding)
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    cols6 = dcols.reshape(C, KH, KW, N, OH, OW)
    dx_pad = np.empty((C, N, H + 2 * ph, W + 2 * pw), dcols.dtype)       # channel-major, as fold
    dx = np.empty((C, N, H, W), dcols.dtype) if ph or pw else dx_pad

    def part(lo, hi):
        acc = dx_pad[:, lo:hi]
        acc[...] = 0
        for kh in range(KH):
            for kw in range(KW):
                acc[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw] += cols6[:, kh, kw, lo:hi]
        if ph or pw:                                         # compact, as fold's copy
            dx[:, lo:hi] = acc[:, :, ph:ph + H, pw:pw + W]
    split(part, N)
    return dx.transpose(1, 0, 2, 3)                                      # (N, C, H, W)


# ======================================================================================
# MaxPool2d: the maxima and where they were; the gradient sent back to them
# ======================================================================================
def max_and_where(pool, x):
    """``pool._max_and_where(x)``, split by sample: the maxima (N, C, OH, OW) of x's windows in
    x's memory layout, and which window offset k = kh*KW + kw holds each (int8 or int32)."""
    N, C, H, W = x.shape
    KH, KW = pool.kernel_size
    sh, sw = pool.stride
    OH, OW = output_size(H, W, KH, KW, pool.stride)
    first = x[:, :, 0:sh * OH:sh, 0:sw * OW:sw]
    best = np.empty_like(first, order="K")                   # the layout first.copy(order="K") has
    itype = np.int8 if KH * KW <= 127 else np.int32
    idx = np.empty_like(best, dtype=itype)                   # which offset holds the max

    def part(lo, hi):
        b, i, xs = best[lo:hi], idx[lo:hi], x[lo:hi]
        b[...] = first[lo:hi]
        i[...] = 0
        for k in range(1, KH * KW):
            kh, kw = divmod(k, KW)
            v = xs[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw]
            better = v > b                                   # strict: ties keep the first
            np.maximum(i, better.astype(itype) * itype(k), out=i)
            np.maximum(b, v, out=b)
    split(part, N)
    return best, idx


def maxpool_backward(pool, dout):
    """``pool.backward(dout)``: dx (N, C, H, W) in x's memory layout, each window's gradient
    sent to the offset that held its maximum, split by sample."""
    x, idx = pool.cache[:2]
    N, C, H, W = x.shape
    KH, KW = pool.kernel_size
    sh, sw = pool.stride
    _, _, OH, OW = dout.shape
    tiles = (sh, sw) == (KH, KW) and sh * OH == H and sw * OW == W
    dx = np.empty_like(x, dtype=dout.dtype)                  # x's layout

    def part(lo, hi):
        d, i, out = dout[lo:hi], idx[lo:hi], dx[lo:hi]
        if not tiles:
            out[...] = 0
        for k in range(KH * KW):
            kh, kw = divmod(k, KW)
            target = out[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw]
            if tiles:
                np.multiply(d, i == k, out=target)           # every pixel written once
            else:
                target += d * (i == k)                       # overlapping windows add up
    split(part, N)
    return dx
