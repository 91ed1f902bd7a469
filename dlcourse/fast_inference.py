"""Inference: a trained model's forward pass when no backward pass follows, made fast on the CPU.

Introduced in notebook ``12_checkpoint_to_service``; :func:`dlcourse.inference.predict_proba`
(so ``dlcourse predict`` and ``dlcourse serve``) runs it, and ``benchmarks/onnx_inference.py``
times it against onnxruntime.

    logits = dl.infer(model, x)    # the numbers model.eval().forward(x) gives; the mode is kept

``model.forward`` is written for training: each layer keeps what its backward needs and makes
a new array for its output, and the whole batch goes through one layer before the next. For
inference alone five things make the same computation faster on a CPU, as an inference
engine such as onnxruntime does them:

1. **Nothing is kept for backward** by the steps below (a layer that runs its own ``forward``
   keeps its usual cache, of the last chunk only), and the model runs in evaluation mode
   (Dropout passes everything through, BatchNorm uses its running statistics).
2. **The batch goes through in chunks that fit in the CPU's cache** (:func:`chunk_size`). For
   256 MNIST images the first convolution's output is 12.8 MB and the second one's im2col
   columns 29 MB: far more than a core's caches (here 1 MiB of L2, and an L3 shared with
   other cores): layer after layer the arrays would stream from main memory. A chunk of a few
   dozen images keeps a layer's output in the cache until the next layer reads it;
   onnxruntime tiles its work for the same reason. On a GPU the batch goes in whole: a large
   batch is what a GPU wants.
3. **Layers that follow each other run as one step** (:func:`plan`), as onnxruntime fuses
   Conv and Relu. ``Conv2d [-> BatchNorm2d] [-> ReLU] [-> MaxPool2d]`` is im2col and one
   matrix product, then the pooling, then the bias and the ReLU, in place, on the pooled
   quarter of the values: adding a per-channel bias and ReLU never change which value of a
   window is largest (both are non-decreasing), so pooling first gives exactly the same
   numbers (and when the columns are fewer than the output channels, as in a first layer on
   one-channel images, the columns are put in pooling order, :func:`unfold_pooled`, so the
   pooling is the maximum of contiguous blocks). A BatchNorm2d in evaluation mode is a
   per-channel scale and shift, folded into the convolution's weights and bias
   (:func:`fold_batchnorm`, lesson 12's exercise).
   ``Linear -> ReLU`` adds the bias and applies the ReLU in place. Any other layer runs its own
   ``forward`` (a Residual, a LayerNorm: the numbers of ``forward`` in evaluation mode).
4. **Chunks run side by side on the CPU's cores** (``workers``): each chunk is independent of
   the others, and NumPy lets go of Python's lock while it computes, so two threads really run
   at once. The matrix products of a chunk are too small for the BLAS library to split well
   between cores, so while the workers run, each product runs on one BLAS thread: a core per
   chunk rather than two cores fighting over one small product. By default ``infer`` uses as
   many workers as BLAS may use threads (``threadpoolctl``), so a process that limits BLAS to
   one thread runs its chunks one after the other.
5. **The memory is kept** (:class:`Buffers`, an *arena* as onnxruntime has one): a step
   writes its columns, products and pooled values into arrays the steps used before, for the
   chunk before and the call before. A fresh array of a few megabytes is new memory to the
   operating system, and the first write to each 4 KiB page of it costs a page fault. Left to
   the memory allocator, a 256-image batch of the course's CNN took anywhere from 0 to about
   6,000 faults, depending on the chunk size and on what the process had done before: up to
   20 of its 16 to 40 ms on the 2-core VM this was measured on (a fault costs a few
   microseconds there); with the arena, none after the first call.

Reading map (lesson 12): :func:`infer`, then :func:`plan` and its steps (:func:`conv_step`,
:func:`linear_step`, :func:`pool_step`), the column orders (:func:`unfold_wide`,
:func:`unfold_pooled`), the maxima-only pooling (:func:`maxpool_forward`) and :class:`Buffers`.
They build on ``conv.unfold`` and ``ops.matmul``; the layers themselves know nothing of them.

Every step is tested against ``model.forward`` (tests/test_fast_inference.py).
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ._validate import shape_str, whole_number
from .backend import get_array_module
from .conv import Conv2d, MaxPool2d, unfold
from .fusion import Conv2dReLU, LinearReLU
from .layer_base import Layer, eval_mode
from .layers import (BatchNorm2d, Flatten, GlobalAvgPool2d, Identity, Linear, ReLU, Residual,
                     Sequential)
from .ops import matmul
from .shapes import as_pair, output_size
from .threaded import blas_controller, blas_threads   # shared with the training step's threads

__all__ = ["infer", "blas_threads", "Buffers", "plan", "conv_step", "linear_step", "fold_batchnorm",
           "tiles", "unfold_pooled", "unfold_wide", "maxpool_forward", "maximum_of", "chunk_size",
           "CACHE_BYTES"]

# What the largest array of one chunk may take. Smaller chunks stay in a faster cache but pay
# Python's cost per step more often: on the 2-core AMD EPYC this was tuned on (1 MiB of L2 per
# core, 32 MiB of L3), chunks of 16 to 48 samples of the 28x28 CNN ran alike, and 4 MiB gives 37.
CACHE_BYTES = 4 * 2**20

_lock = threading.Lock()  # infer switches the model's mode, and a layer's forward keeps a cache
_arena = []               # _arena[k]: the Buffers of worker k (CPU only)


def infer(model: Layer, x, batch_size: int | None = None, workers: int | None = None):
    """``model``'s outputs for the batch ``x``, in evaluation mode: the numbers
    ``model.eval().forward(x)`` gives (to float rounding), faster, with nothing kept for backward.

    x: a batch shaped as the model's input, e.g. (N, 784) or (N, 1, 28, 28), NumPy or CuPy;
    returns (N, K) on x's device. ``batch_size``: samples per chunk; None chooses it from the
    model's largest array per sample (:func:`chunk_size`) on the CPU, and the whole batch on a
    GPU. ``workers``: threads running chunks side by side on the CPU; None: as many as the BLAS
    library may use (:func:`blas_threads`). The model's mode (training or evaluation) is put
    back afterwards. On the CPU each worker keeps its chunk's arrays for the next call
    (:class:`Buffers`): a few megabytes for the course's CNN.
    """
    xp = get_array_module(x)
    on_gpu = xp is not np
    if getattr(x, "ndim", 0) < 1 or len(x) == 0:
        raise ValueError(f"infer needs a batch of at least one sample, got shape "
                         f"{shape_str(getattr(x, 'shape', ()))}. One sample x needs a batch axis: "
                         f"x[None].")
    with _lock, eval_mode(model):
        model.check(x)                          # the model's own checks (a CNN's image size)
        steps = plan(model)
        if batch_size is None:
            batch_size = len(x) if on_gpu else chunk_size(model, x.shape[1:], x.dtype.itemsize)
        batch_size = whole_number(batch_size, "infer(batch_size=...)")
        workers = whole_number(blas_threads() if workers is None else workers,
                               "infer(workers=...)")
        chunks = [x[i:i + batch_size] for i in range(0, len(x), batch_size)]
        workers = 1 if on_gpu else min(workers, len(chunks))
        outs = [None] * len(chunks)
        while not on_gpu and len(_arena) < workers:
            _arena.append(Buffers())

        def run(k):                                     # worker k: chunks k, k + workers, ...
            buffers = Buffers() if on_gpu else _arena[k]    # on a GPU, CuPy's memory pool
            for i in range(k, len(chunks), workers):
                h = chunks[i]
                for step in steps:
                    h = step(h, buffers)
                outs[i] = h.copy()                      # h may live in the buffers

        if workers == 1:
            run(0)
        else:                                           # a core per worker, one BLAS thread each
            with (blas_controller().limit(limits=1, user_api="blas"),
                  ThreadPoolExecutor(workers) as pool):
                list(pool.map(run, range(workers)))
    return outs[0] if len(outs) == 1 else xp.concatenate(outs)


class Buffers:
    """The arrays the steps reuse from step to step, chunk to chunk and call to call.

    ``buffers.empty(name, shape, dtype, xp)`` is an array of that shape whose contents are
    garbage: the memory given for ``name`` the last time, when it is large enough (and of that
    dtype and device), else new memory, kept for next time unless it is larger than
    ``KEEP_BYTES`` (a chunk far larger than :func:`chunk_size` chooses: its memory is given back
    as usual). ``zeros`` is the same, zeroed.

    The steps of a chunk share one ``Buffers``: the memory one step has just written is still
    in the cache when the next step reuses it. So a conv step's arrays are scratch ("x_pad",
    "cols", "z", "rows") except the one it returns ("pooled"), and it copies its input (the
    step before's "pooled") into "x_pad" before it writes anything else.
    """

    KEEP_BYTES = 16 * CACHE_BYTES

    def __init__(self):
        self.arrays = {}

    def empty(self, name, shape, dtype, xp=np):
        size = math.prod(shape)
        flat = self.arrays.get(name)
        if (flat is None or flat.size < size or flat.dtype != dtype
                or get_array_module(flat) is not xp):
            flat = xp.empty(size, dtype)
            if flat.nbytes <= self.KEEP_BYTES:
                self.arrays[name] = flat
        return flat[:size].reshape(shape)

    def zeros(self, name, shape, dtype, xp=np):
        out = self.empty(name, shape, dtype, xp)
        out[...] = 0
        return out


# ======================================================================================
# Steps: layers that follow each other, run as one
# ======================================================================================
def plan(model: Layer) -> list:
    """The steps :func:`infer` runs for ``model`` (in evaluation mode): a list of functions
    ``step(chunk, buffers=None)`` returning the next activation (``buffers``: the
    :class:`Buffers` the steps of a chunk share; None: new arrays). Conv2d [-> BatchNorm2d] [-> ReLU] [-> MaxPool2d] and
    Linear [-> ReLU] become one step each (the fused layers of ``dl.fuse`` too); any other
    layer is its own ``forward``."""
    layers = [l for l in (model.layers if isinstance(model, Sequential) else [model])
              if type(l) is not Identity]               # dl.fuse leaves Identity in a ReLU's place
    steps, i = [], 0

    def take(kind):                                     # the next layer, if it is of this kind
        nonlocal i
        if i < len(layers) and type(layers[i]) is kind:
            i += 1
            return layers[i - 1]
        return None

    while i < len(layers):
        layer = layers[i]
        i += 1
        if type(layer) in (Conv2d, Conv2dReLU):
            conv, relu = (layer.layer, True) if type(layer) is Conv2dReLU else (layer, False)
            bn = None if relu else take(BatchNorm2d)
            relu = relu or take(ReLU) is not None
            steps.append(conv_step(conv, bn, relu, take(MaxPool2d)))
        elif type(layer) is MaxPool2d:                  # the maxima alone: no indices
            steps.append(lambda x, buffers=None, pool=layer: pool_step(pool, x))
        elif type(layer) in (Linear, LinearReLU):
            linear, relu = (layer.layer, True) if type(layer) is LinearReLU else (layer, False)
            steps.append(linear_step(linear, relu or take(ReLU) is not None))
        else:
            steps.append(lambda x, buffers=None, forward=layer.forward: forward(x))
    return steps


def conv_step(conv: Conv2d, bn: BatchNorm2d | None = None, relu: bool = False,
              pool: MaxPool2d | None = None):
    """One step for conv [-> bn] [-> ReLU] [-> pool]: x (N, C, H, W) -> (N, F, OH', OW'),
    channel-major in memory as Conv2d's output is.

    z = W_mat @ cols without the bias, pooled if there is a pool, then z += b and ReLU in
    place: max(z_i) + b = max(z_i + b) and max(ReLU(z_i)) = ReLU(max(z_i)), exactly, since
    adding b (even rounded to float32) and ReLU never change which z_i is largest.

    The columns: for stride 1 :func:`unfold_wide` (long runs to copy), else ``unfold``. When
    a pool tiles the output and the columns are fewer than the output channels (C*KH*KW < F,
    a first layer on one-channel images), :func:`unfold_pooled` instead: its copy reads with
    a stride, so costs more per column, but the pool becomes maxima of contiguous blocks, and
    the pool's work grows with F while the copy's grows with C*KH*KW.
    """
    W, b = fold_batchnorm(conv, bn) if bn is not None else (conv.params["W"], conv.params["b"])
    F, C, KH, KW = W.shape
    W_mat = W.reshape(F, -1)                                            # (F, C*KH*KW)
    wide = conv.stride == (1, 1)
    pooled_columns = wide and pool is not None and C * KH * KW < F

    def step(x, buffers=None):
        conv.check(x)                                   # channels, dtype, device: as forward
        xp, buffers = get_array_module(x), Buffers() if buffers is None else buffers

        def new(name, shape):                           # this step's array `name`, reused
            return buffers.empty(name, shape, x.dtype, xp)

        N, _, H, W_in = x.shape
        OH, OW = output_size(H, W_in, KH, KW, conv.stride, conv.padding)
        if pooled_columns and tiles(pool, OH, OW):      # the pool: maxima of contiguous blocks
            PH, PW = pool.kernel_size
            cols = unfold_pooled(x, KH, KW, conv.padding, PH, PW, buffers)  # (C*KH*KW, PH*PW*N*OH'*OW')
            blocks = matmul(W_mat, cols, out=new("z", (F, cols.shape[1])))
            blocks = blocks.reshape(F, PH * PW, -1)                         # a block per window offset
            z = maximum_of([blocks[:, k] for k in range(PH * PW)], new("pooled", blocks[:, 0].shape))
            z = z.reshape(F, N, OH // PH, OW // PW)
        else:
            if wide:
                cols, Wp = unfold_wide(x, KH, KW, conv.padding, buffers)      # (C*KH*KW, N*OH*Wp)
                z = matmul(W_mat, cols, out=new("z", (F, cols.shape[1])))
                z = z.reshape(F, N, OH, Wp)[:, :, :, :OW]                     # wrapped columns dropped
            else:
                cols = unfold(x, KH, KW, conv.stride, conv.padding, conv.use_kernels)
                z = matmul(W_mat, cols).reshape(F, N, OH, OW)
            if pool is not None:                        # (F, N, OH', OW'): pooled over the last two
                z = maxpool_forward(z, *pool.kernel_size, pool.stride, new)
            elif wide:
                z = z.copy(order="K")                   # compact: no wrapped columns left in it
        z = z.transpose(1, 0, 2, 3)                                           # (N, F, OH', OW')
        z += b.reshape(1, F, 1, 1)
        return xp.maximum(z, 0, out=z) if relu else z

    return step


def pool_step(pool: MaxPool2d, x):
    """MaxPool2d's forward without recording where each maximum was (backward never comes)."""
    pool.check(x)
    return maxpool_forward(x, *pool.kernel_size, pool.stride)


def linear_step(linear: Linear, relu: bool = False):
    """One step for Linear [-> ReLU]: x (N, in) -> max(x @ W + b, 0) (N, out), in place."""
    W, b = linear.params["W"], linear.params["b"]

    def step(x, buffers=None):
        linear.check(x)
        y = matmul(x, W)          # (N, out): small next to a convolution's arrays, so not reused
        y += b
        return get_array_module(y).maximum(y, 0, out=y) if relu else y

    return step


def fold_batchnorm(conv: Conv2d, bn: BatchNorm2d):
    """(W, b) of one convolution computing conv then bn in evaluation mode.

    bn(z) = gamma * (z - mean) / sqrt(var + eps) + beta = s * z + (beta - s * mean) per channel,
    with s = gamma / sqrt(var + eps); and z = W * x + b, so W' = s * W and b' = s * (b - mean) + beta.
    """
    W, b = conv.params["W"], conv.params["b"]
    xp = get_array_module(W)
    s = bn.params["gamma"] / xp.sqrt(bn.buffers["running_var"] + W.dtype.type(bn.eps))   # (F,)
    W_folded = (W * s.reshape(-1, 1, 1, 1)).astype(W.dtype)
    b_folded = (s * (b - bn.buffers["running_mean"]) + bn.params["beta"]).astype(W.dtype)
    return W_folded, b_folded


# ======================================================================================
# im2col for inference: two column orders that copy or pool faster
# ======================================================================================
def tiles(pool: MaxPool2d, OH: int, OW: int) -> bool:
    """Whether ``pool``'s windows tile an OH x OW image: side by side (stride = kernel size),
    nothing left over."""
    PH, PW = pool.kernel_size
    return pool.stride == pool.kernel_size and OH % PH == 0 and OW % PW == 0


def unfold_pooled(x, KH, KW, padding, PH, PW, buffers=None):
    """im2col for a stride-1 convolution followed by a PH x PW pooling that tiles its output,
    with the columns in pooling order.

    x: (N, C, H, W) -> cols (C*KH*KW, PH*PW * N*OH'*OW'), OH' = OH // PH, OW' = OW // PW:
    column ((dh*PW + dw)*N + n)*OH'*OW' + i'*OW' + j' is the window of output pixel
    (PH*i' + dh, PW*j' + dw) of image n. The product W_mat @ cols then holds PH*PW blocks, one
    per position in the pooling window, and the pooling is the elementwise maximum of the blocks.
    ``buffers``: where to write (:class:`Buffers`; None: new arrays).
    """
    N, C, H, W = x.shape
    ph, pw = padding
    OH, OW = H + 2 * ph - KH + 1, W + 2 * pw - KW + 1
    xp = get_array_module(x)
    buffers = Buffers() if buffers is None else buffers
    x_pad = buffers.zeros("x_pad", (C, N, H + 2 * ph, W + 2 * pw), x.dtype, xp)   # channel-major
    x_pad[:, :, ph:ph + H, pw:pw + W] = x.transpose(1, 0, 2, 3)
    sC, sN, sH, sW = x_pad.strides
    # entry [c, kh, kw, dh, dw, n, i', j'] is x_pad[n, c, PH*i' + dh + kh, PW*j' + dw + kw]
    windows = xp.lib.stride_tricks.as_strided(
        x_pad, shape=(C, KH, KW, PH, PW, N, OH // PH, OW // PW),
        strides=(sC, sH, sW, sH, sW, sN, PH * sH, PW * sW))
    cols = buffers.empty("cols", windows.shape, x.dtype, xp)
    cols[...] = windows                                               # the one copy
    return cols.reshape(C * KH * KW, -1)


def unfold_wide(x, KH, KW, padding, buffers=None):
    """im2col for a stride-1 convolution, with each output row as wide as the padded input.

    x: (N, C, H, W) -> (cols, Wp): cols (C*KH*KW, N*OH*Wp), Wp = W + 2*pw, OH = H + 2*ph - KH + 1.

    im2col copies, for each kernel offset (kh, kw), the pixels x_pad[n, c, i + kh, j + kw]:
    for an output row i they are one run of OW numbers, then the copy jumps to the next row.
    Here each output row also takes the KW - 1 positions j = OW .. Wp - 1 past its end, which
    run on into the next row of x_pad: then the OH rows of an image follow each other in
    memory, and one offset of one image is ONE run of OH*Wp numbers. Long runs copy several
    times faster than short ones. The product then computes Wp - OW outputs per row that are
    not outputs at all (they mix the end of one row with the start of the next): the caller
    drops them. A spare zero row under each image keeps the last run inside the array.
    ``buffers``: where to write (:class:`Buffers`; None: new arrays).
    """
    N, C, H, W = x.shape
    ph, pw = padding
    Hp, Wp = H + 2 * ph, W + 2 * pw
    OH = Hp - KH + 1
    xp = get_array_module(x)
    buffers = Buffers() if buffers is None else buffers
    x_pad = buffers.zeros("x_pad", (C, N, Hp + 1, Wp), x.dtype, xp)   # channel-major, spare row
    x_pad[:, :, ph:ph + H, pw:pw + W] = x.transpose(1, 0, 2, 3)
    sC, sN, sH, sW = x_pad.strides
    # entry [c, kh, kw, n, i, j] is x_pad[n, c, i + kh, j + kw], j running on past the row's end
    windows = xp.lib.stride_tricks.as_strided(x_pad, shape=(C, KH, KW, N, OH, Wp),
                                              strides=(sC, sH, sW, sN, sH, sW))
    cols = buffers.empty("cols", windows.shape, x.dtype, xp)
    cols[...] = windows                                                 # the one copy
    return cols.reshape(C * KH * KW, N * OH * Wp), Wp


# ======================================================================================
# Pooling the maxima alone
# ======================================================================================
def maxpool_forward(x, KH, KW, stride, new=None):
    """The maxima of ``conv.maxpool_forward_naive``, fast: out (N, C, OH, OW) in x's memory layout.

    A window's maximum is the maximum over its KW columns of the maxima over its KH rows. So
    first take the maximum of whole rows of x (long contiguous runs), rows[n, c, i, :] = max over
    kh of x[n, c, i*sh + kh, :], then of KW columns of that: (KH-1) + (KW-1) elementwise maxima
    instead of the KH*KW - 1 of a loop over window offsets, and only the last ones strided.
    Only the last two axes are pooled: any two axes may come first (:func:`conv_step` pools
    (F, N, ...)). ``new(name, shape)``, if given, returns the arrays to write the row maxima
    ("rows") and the result ("pooled") into: the step's :class:`Buffers`.
    """
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride)
    sh, sw = as_pair(stride)
    rows = maximum_of([x[:, :, kh:kh + sh * OH:sh] for kh in range(KH)],        # (N, C, OH, W)
                      new("rows", (N, C, OH, W)) if new and KH > 1 else None)
    out = maximum_of([rows[:, :, :, kw:kw + sw * OW:sw] for kw in range(KW)],   # (N, C, OH, OW)
                     new("pooled", (N, C, OH, OW)) if new else None)
    return out if KH * KW > 1 or new else out.copy(order="K")          # never a view of x


def maximum_of(arrays, out=None):
    """The elementwise maximum of ``arrays`` (all of one shape): written into ``out`` if given,
    else a new array in the first one's memory layout (the array itself if it is the only one)."""
    xp = get_array_module(arrays[0])
    if len(arrays) == 1:
        if out is not None:
            xp.copyto(out, arrays[0])
        return arrays[0] if out is None else out
    out = xp.maximum(arrays[0], arrays[1], out=out)
    for a in arrays[2:]:
        xp.maximum(out, a, out=out)
    return out


# ======================================================================================
# How many samples per chunk
# ======================================================================================
def chunk_size(model: Layer, sample_shape, itemsize: int = 4, budget: int = CACHE_BYTES) -> int:
    """Samples per chunk so that the largest array one chunk makes fits in ``budget`` bytes.

    The largest array per sample is found by following one sample's shape through the layers:
    a Conv2d's im2col columns (C*KH*KW x OH*OW numbers), or any layer's output.
    """
    widest = _largest_array(model, tuple(sample_shape)) * itemsize
    return max(1, budget // max(widest, 1))


def _largest_array(model, shape) -> int:
    """The most numbers one sample of ``shape`` makes in any array on its way through model."""
    return _follow(model, shape)[0]


def _follow(model, shape):
    """(the most numbers one sample of ``shape`` makes in any array of ``model``, the shape of
    its output): a Residual's block and shortcut are followed inside."""
    largest = math.prod(shape)
    for layer in (model.layers if isinstance(model, Sequential) else [model]):
        layer = getattr(layer, "layer", layer)          # a fused layer's Linear or Conv2d
        if isinstance(layer, Conv2d) and len(shape) == 3:
            _, H, W = shape
            KH, KW = layer.kernel_size
            OH, OW = output_size(H, W, KH, KW, layer.stride, layer.padding)
            largest = max(largest, layer.in_channels * KH * KW * OH * OW)
            shape = (layer.out_channels, OH, OW)
        elif isinstance(layer, MaxPool2d) and len(shape) == 3:
            C, H, W = shape
            shape = (C, *output_size(H, W, *layer.kernel_size, layer.stride))
        elif isinstance(layer, Linear):
            shape = (layer.out_features,)
        elif isinstance(layer, (Flatten, GlobalAvgPool2d)):
            shape = (math.prod(shape) if isinstance(layer, Flatten) else shape[0],)
        elif isinstance(layer, Residual):
            if layer.shortcut is not None:
                largest = max(largest, _follow(layer.shortcut, shape)[0])
            inner, shape = _follow(layer.block, shape)
            largest = max(largest, inner)
        largest = max(largest, math.prod(shape))
    return largest, shape
