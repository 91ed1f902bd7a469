"""Convolution and max pooling: naive loops beside one im2col version, and their backward.

Introduced in notebooks ``06a_convolution_and_im2col`` (the forward passes, im2col) and
``06b_pooling_and_convolution_backward`` (max pooling, the backward passes).

Shapes (the same letters in the code):

* x: (N, C, H, W) input images, W: (F, C, KH, KW) filters, b: (F,) biases
* stride = (sh, sw), padding = (ph, pw): one number per axis (an int means the same for both)
* OH = (H + 2*ph - KH) // sh + 1, OW = (W + 2*pw - KW) // sw + 1  (``shapes.output_size``)
* out: (N, F, OH, OW)

A 1-D signal of length L is a 1×L image: ``Conv2d(1, 8, (1, 5), padding=(0, 2))`` slides a
5-wide window along it.

Reading map (lessons 06a-06b). The ``*_naive`` functions loop over every output pixel: slow,
obviously right, and the oracle the fast version is tested against. The fast version turns
convolution into one matrix product: :func:`unfold` (im2col, one column per window) and its
adjoint :func:`fold`, looping only over the KH*KW kernel offsets; ``Conv2d.forward`` /
``backward`` are a few lines on top of them (their two matrix steps, ``matrix_forward`` and
``matrix_backward``, are what the fused ``Conv2dReLU`` reuses). ``MaxPool2d`` keeps a running
maximum over the window offsets and where it was. To read ``Conv2d.backward`` on the CPU: this
file (``Conv2d.backward``, ``Conv2d.matrix_backward``, :func:`fold`), ``ops.matmul``, and
``layer_base.checked`` (the dout check); by name only, ``shapes.output_size`` (the formula
above) and ``layer_base.kernels_for`` (None on the CPU).

What lives elsewhere: the ``Layer`` base class and ``@checked`` in ``layer_base.py``; the GPU
kernels (``kernels/unfold.py``: ``im2col.cu``, ``maxpool.cu``, lesson 08d), asked for through
the one hook ``layer_base.kernels_for`` (None on the CPU) in :func:`unfold`, :func:`fold` and
``MaxPool2d``'s ``_kernel_*`` methods; the fused ``Conv2dReLU`` (``fusion.py``, lesson 08d),
built from ``Conv2d``'s own matrix steps; inference's faster column orders and pooling
(``fast_inference.py``, lesson 12).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._validate import float_dtype, shape_str, whole_number
from .backend import get_array_module, rng
from .layer_base import Layer, checked, kernels_for
from .ops import matmul
from .shapes import as_pair, output_size
from .threaded import threads_for

__all__ = ["output_size", "conv2d_forward_naive", "conv2d_backward_naive", "maxpool_forward_naive",
           "maxpool_backward_naive", "im2col", "col2im", "unfold",
           "fold", "as_image", "as_matrix", "Conv2d", "MaxPool2d"]


def _pair(v, name, layer, minimum=0):
    """kernel_size, stride, padding: an int (both axes) or a pair (h, w) of whole numbers."""
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{layer}({name}=...) must be an int or a pair (h, w), got {v!r}.")
        return tuple(whole_number(a, f"{layer}({name}=...)", minimum) for a in v)
    v = whole_number(v, f"{layer}({name}=...)", minimum)
    return v, v


def _pad(x, padding):
    """Zero-pad the two spatial axes of x (N, C, H, W) by padding = (ph, pw) (or an int)."""
    ph, pw = as_pair(padding)
    if ph == pw == 0:
        return x
    xp = get_array_module(x)
    N, C, H, W = x.shape
    # zeros_like keeps x's memory layout (a conv output is channel-major): no transposing copy
    out = xp.zeros_like(x, shape=(N, C, H + 2 * ph, W + 2 * pw))
    out[:, :, ph:ph + H, pw:pw + W] = x
    return out


# ======================================================================================
# Naive loops: the definition, and the test oracle
# ======================================================================================
def conv2d_forward_naive(x, W, b, stride=1, padding=0):
    """out[n, f, i, j] = sum over c, kh, kw of x_pad[n, c, i*sh + kh, j*sw + kw] * W[f, c, kh, kw] + b[f]
    (stride = (sh, sw), or an int for both axes; padding likewise)."""
    N, C, H, Wd = x.shape
    F, _, KH, KW = W.shape
    OH, OW = output_size(H, Wd, KH, KW, stride, padding)
    sh, sw = as_pair(stride)
    xp = get_array_module(x)
    x_pad = _pad(x, padding)
    out = xp.zeros((N, F, OH, OW), dtype=x.dtype)
    for n in range(N):
        for f in range(F):
            for i in range(OH):
                for j in range(OW):
                    window = x_pad[n, :, i * sh:i * sh + KH, j * sw:j * sw + KW]
                    out[n, f, i, j] = (window * W[f]).sum() + b[f]
    return out


def conv2d_backward_naive(dout, x, W, stride=1, padding=0):
    """Returns (dx, dW, db) for :func:`conv2d_forward_naive`: each output pixel sends its
    gradient back to the window it was computed from."""
    N, C, H, Wd = x.shape
    F, _, KH, KW = W.shape
    _, _, OH, OW = dout.shape
    (sh, sw), (ph, pw) = as_pair(stride), as_pair(padding)
    xp = get_array_module(x)
    x_pad = _pad(x, padding)
    dx_pad = xp.zeros_like(x_pad)
    dW = xp.zeros_like(W)
    db = dout.sum(axis=(0, 2, 3))
    for n in range(N):
        for f in range(F):
            for i in range(OH):
                for j in range(OW):
                    hs, ws = i * sh, j * sw
                    dW[f] += x_pad[n, :, hs:hs + KH, ws:ws + KW] * dout[n, f, i, j]
                    dx_pad[n, :, hs:hs + KH, ws:ws + KW] += W[f] * dout[n, f, i, j]
    dx = dx_pad[:, :, ph:ph + H, pw:pw + Wd]
    return dx, dW, db


def maxpool_forward_naive(x, KH, KW, stride):
    """out[n, c, i, j] = max of x[n, c, i*sh:i*sh + KH, j*sw:j*sw + KW] (stride (sh, sw) or an int)."""
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride)
    sh, sw = as_pair(stride)
    xp = get_array_module(x)
    out = xp.zeros((N, C, OH, OW), dtype=x.dtype)
    for i in range(OH):
        for j in range(OW):
            out[:, :, i, j] = x[:, :, i * sh:i * sh + KH, j * sw:j * sw + KW].max(axis=(2, 3))
    return out


def maxpool_backward_naive(dout, x, KH, KW, stride):
    """Each window's gradient goes to its (first) maximum; overlapping windows add up."""
    N, C, H, W = x.shape
    _, _, OH, OW = dout.shape
    sh, sw = as_pair(stride)
    xp = get_array_module(x)
    dx = xp.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for i in range(OH):
                for j in range(OW):
                    window = x[n, c, i * sh:i * sh + KH, j * sw:j * sw + KW]
                    kh, kw = np.unravel_index(int(window.argmax()), window.shape)
                    dx[n, c, i * sh + kh, j * sw + kw] += dout[n, c, i, j]
    return dx


# ======================================================================================
# im2col: convolution as one matrix product
# ======================================================================================
def _windows(x_pad, KH, KW, stride, OH, OW):
    """A strided *view* (no copy) of every KH×KW window of x_pad (N, C, Hp, Wp), of shape
    (C, KH, KW, N, OH, OW): entry [c, kh, kw, n, i, j] is x_pad[n, c, i*sh + kh, j*sw + kw]."""
    xp = get_array_module(x_pad)
    N, C = x_pad.shape[:2]
    sh, sw = as_pair(stride)
    sN, sC, sH, sW = x_pad.strides
    return xp.lib.stride_tricks.as_strided(
        x_pad, shape=(C, KH, KW, N, OH, OW), strides=(sC, sH, sW, sN, sH * sh, sW * sw))


def unfold(x, KH, KW, stride=1, padding=0, use_kernels=True):
    """im2col, one *column* per window (the layout of the whole library, GPU kernel included):

    x: (N, C, H, W)  ->  cols: (C*KH*KW, N*OH*OW), with
    cols[(c*KH + kh)*KW + kw, (n*OH + i)*OW + j] = x_pad[n, c, i*sh + kh, j*sw + kw]

    Then ``W.reshape(F, -1) @ cols`` is the convolution. Here a strided view and one copy; on
    the GPU the one branch to the CUDA kernel (``im2col.cu``; it takes one stride and one
    padding for both axes, so it is used only when they are).
    """
    k = kernels_for(x, use_kernels, same_per_axis=(stride, padding))
    if k is not None:
        return k.unfold_cols(x, KH, KW, as_pair(stride)[0], as_pair(padding)[0])
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    windows = _windows(_pad(x, padding), KH, KW, stride, OH, OW)
    return windows.reshape(C * KH * KW, N * OH * OW)       # the one copy


def fold(cols, x_shape, KH, KW, stride=1, padding=0, use_kernels=True):
    """The adjoint of :func:`unfold`: cols (C*KH*KW, N*OH*OW) -> dx: x_shape = (N, C, H, W),
    each entry added back to the input pixel it came from (overlapping windows add up)."""
    k = kernels_for(cols, use_kernels, same_per_axis=(stride, padding))
    if k is not None:
        return k.fold_cols(cols, x_shape, KH, KW, as_pair(stride)[0], as_pair(padding)[0])
    N, C, H, W = x_shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    (sh, sw), (ph, pw) = as_pair(stride), as_pair(padding)
    cols6 = cols.reshape(C, KH, KW, N, OH, OW)
    # Accumulate channel-major, (C, N, Hp, Wp), so that each add reads cols6 in memory order.
    dx_pad = get_array_module(cols).zeros((C, N, H + 2 * ph, W + 2 * pw), dtype=cols.dtype)
    for kh in range(KH):          # a loop over kernel offsets only: KH*KW strided adds
        for kw in range(KW):
            dx_pad[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw] += cols6[:, kh, kw]
    dx = dx_pad[:, :, ph:ph + H, pw:pw + W]
    if ph or pw:
        dx = dx.copy()            # compact, so the layer below reads it in one sweep
    return dx.transpose(1, 0, 2, 3)                                    # (N, C, H, W)


def im2col(x, KH, KW, stride=1, padding=0):
    """:func:`unfold` with one *row* per window, as CS231n writes it: (N*OH*OW, C*KH*KW)."""
    _check_images(x, "im2col")
    KH, KW = whole_number(KH, "im2col(KH=...)"), whole_number(KW, "im2col(KW=...)")
    stride, padding = _pair(stride, "stride", "im2col", 1), _pair(padding, "padding", "im2col")
    return unfold(x, KH, KW, stride, padding).T


def _check_images(x, fn):
    """x is an array of images (N, C, H, W), or an error that says how to make one (a learner
    calls im2col by hand; the layers check their own input)."""
    if not hasattr(x, "shape") or not hasattr(x, "ndim"):
        raise TypeError(f"{fn} expects an array of images (N, C, H, W), got "
                        f"{type(x).__name__}. Convert it with np.asarray(x, dtype=np.float32).")
    if x.ndim != 4:
        hint = {2: " One one-channel image (H, W) is x[None, None].",
                3: " One image (C, H, W) is x[None]; a batch of one-channel images (N, H, W) "
                   "is x[:, None]."}.get(x.ndim, "")
        raise ValueError(f"{fn} expects images of shape (N, C, H, W) (4-D), got shape "
                         f"{shape_str(x.shape)} ({x.ndim}-D).{hint}")


def col2im(cols, x_shape, KH, KW, stride=1, padding=0):
    """The adjoint of :func:`im2col`: cols (N*OH*OW, C*KH*KW) -> dx (N, C, H, W)."""
    return fold(cols.T, x_shape, KH, KW, stride, padding)


def as_image(out, N, OH, OW):
    """The convolution's output matrix (F, N*OH*OW) seen as (N, F, OH, OW): a view, no copy."""
    return out.reshape(out.shape[0], N, OH, OW).transpose(1, 0, 2, 3)


def as_matrix(dout):
    """The inverse of :func:`as_image`: (N, F, OH, OW) -> (F, N*OH*OW) (a view when dout is
    channel-major in memory, as the gradients of this library's layers are)."""
    return dout.transpose(1, 0, 2, 3).reshape(dout.shape[1], -1)


# ======================================================================================
# Layers
# ======================================================================================
class Conv2d(Layer):
    """2-D convolution (cross-correlation, as in every framework).

    x: (N, C, H, W) -> out: (N, F, OH, OW)
    params["W"]: (F, C, KH, KW), params["b"]: (F,)
    kernel_size, stride, padding: an int, or a pair (h, w) per axis; the layer keeps pairs:
    ``.kernel_size == (KH, KW)``, ``.stride == (sh, sw)``, ``.padding == (ph, pw)``.

    Forward: cols = unfold(x) (C*KH*KW, N*OH*OW); z = W_mat @ cols (F, N*OH*OW),
    W_mat = W as (F, C*KH*KW); out = z + b.
    Backward: dW = dout_mat @ cols.T, db = dout_mat summed over its columns,
    dcols = W_mat.T @ dout_mat, dx = fold(dcols).
    ``Conv2dReLU`` (fusion.py) reuses :meth:`matrix_forward` and :meth:`matrix_backward`, the
    two matrix steps without the bias.

    On the GPU, unfold and fold run the CUDA kernels of ``dlcourse.kernels`` (lesson 08d);
    set ``layer.use_kernels = False`` (or ``dl.use_kernels(model, False)``) to time the plain
    CuPy version instead.
    """

    input_shape, input_ndim = "(N, C_in, H, W)", 4
    use_kernels = True   # on the GPU: im2col/col2im by the hand-written kernels
    use_threads = False  # on the CPU: split a large batch's passes between cores (threaded.py)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1,
                 padding=0, dtype=np.float32, seed=None):
        super().__init__()
        self.in_channels = whole_number(in_channels, "Conv2d(in_channels=...)", minimum=0)
        self.out_channels = whole_number(out_channels, "Conv2d(out_channels=...)", minimum=0)
        self.kernel_size = _pair(kernel_size, "kernel_size", "Conv2d")
        if min(self.in_channels, self.out_channels, *self.kernel_size) < 1:
            raise ValueError(f"Conv2d needs in_channels, out_channels and kernel_size >= 1, got "
                             f"Conv2d({in_channels}, {out_channels}, kernel_size={kernel_size}).")
        self.stride = _pair(stride, "stride", "Conv2d", minimum=1)
        self.padding = _pair(padding, "padding", "Conv2d", minimum=0)
        KH, KW = self.kernel_size
        dtype = float_dtype(dtype)
        fan_in = self.in_channels * KH * KW
        W = rng(seed).standard_normal((self.out_channels, self.in_channels, KH, KW)) * np.sqrt(2.0 / fan_in)
        self.params = {"W": W.astype(dtype), "b": np.zeros(self.out_channels, dtype=dtype)}

    @checked
    def forward(self, x):
        """x: (N, C, H, W) -> out: (N, F, OH, OW), channel-major in memory (a view of the
        (F, N*OH*OW) matrix)."""
        threads = threads_for(x, self.use_threads)      # None unless asked for (threaded.py)
        if threads is not None:
            return threads.conv_forward(self, x)        # the same numbers, split between cores
        z = self.matrix_forward(x)                              # (F, N*OH*OW)
        z += self.params["b"].reshape(-1, 1)
        return self.as_image(z, x.shape)

    @checked
    def backward(self, dout, input_grad: bool = True):
        """dout: (N, F, OH, OW) -> dx: (N, C, H, W); fills grads["W"] (F, C, KH, KW) and
        grads["b"] (F,). ``input_grad=False`` skips dx and returns None."""
        threads = threads_for(dout, self.use_threads)
        if threads is not None:
            return threads.conv_backward(self, dout, input_grad)
        dout_mat = dout.transpose(1, 0, 2, 3).reshape(dout.shape[1], -1)   # (F, N*OH*OW)
        return self.matrix_backward(dout_mat, dout_mat.sum(axis=1), input_grad)

    def matrix_forward(self, x):
        """z = W_mat @ unfold(x): (F, N*OH*OW), without the bias; caches (x.shape, cols)."""
        W = self.params["W"]
        F, C, KH, KW = W.shape
        cols = unfold(x, KH, KW, self.stride, self.padding, self.use_kernels)   # (C*KH*KW, N*OH*OW)
        self.cache = (x.shape, cols)
        return matmul(W.reshape(F, -1), cols)

    def matrix_backward(self, dz, db, input_grad: bool = True):
        """dz: (F, N*OH*OW), the gradient of z = W_mat @ cols; db: (F,). Fills grads; returns
        dx = fold(W_mat.T @ dz): (N, C, H, W), or None without ``input_grad``."""
        x_shape, cols = self.cache
        W = self.params["W"]
        F, C, KH, KW = W.shape
        dW = matmul(cols, dz.T).T                                          # (F, C*KH*KW)
        self.grads = {"W": dW.reshape(W.shape), "b": db}
        if not input_grad:
            return None
        dcols = matmul(W.reshape(F, -1).T, dz)                             # (C*KH*KW, N*OH*OW)
        return fold(dcols, x_shape, KH, KW, self.stride, self.padding, self.use_kernels)

    def as_image(self, z, x_shape):
        """z: (F, N*OH*OW) seen as the output (N, F, OH, OW), for an input of shape x_shape."""
        N, _, H, W = x_shape
        return as_image(z, N, *output_size(H, W, *self.kernel_size, self.stride, self.padding))

    def check(self, x):
        super().check(x)
        if x.shape[1] != self.in_channels:
            hint = (" The channels look last (N, H, W, C): use x.transpose(0, 3, 1, 2)."
                    if x.shape[3] == self.in_channels else "")
            raise ValueError(f"Conv2d(in_channels={self.in_channels}) got x of shape {shape_str(x.shape)}: "
                             f"axis 1 (channels) must be {self.in_channels}.{hint}")

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": list(self.stride),
                "padding": list(self.padding)}


class PoolCache(NamedTuple):
    """What MaxPool2d.forward keeps: x, which window offset held each maximum, and the
    kernels module whose forward kernel made ``idx`` (its backward kernel reads it), or None."""
    x: object
    idx: object
    kernels: object = None


class MaxPool2d(Layer):
    """Max over each KH×KW window, slid by ``stride`` (default: the kernel size, so windows
    tile the image). kernel_size and stride: an int, or a pair (h, w) per axis; the layer
    keeps pairs: ``.kernel_size == (KH, KW)``, ``.stride == (sh, sw)``.

    x: (N, C, H, W) -> out: (N, C, OH, OW), OH = (H - KH) // sh + 1, OW = (W - KW) // sw + 1.
    Backward sends each window's gradient to its maximum; with overlapping windows
    (stride < kernel) a pixel can be the maximum of several and its gradients add up.
    On the GPU forward and backward are one CUDA kernel each (``kernels/maxpool.cu``,
    :meth:`_kernel_forward`); ``dl.use_kernels(model, False)`` runs the array code.
    ``dl.infer`` pools faster still, keeping only the maxima (``fast_inference.py``).
    """

    input_shape, input_ndim = "(N, C, H, W)", 4
    use_kernels = True
    use_threads = False  # on the CPU: split a large batch between cores (threaded.py)

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size", "MaxPool2d")
        self.stride = _pair(self.kernel_size if stride is None else stride, "stride", "MaxPool2d")
        if min(*self.stride, *self.kernel_size) < 1:
            raise ValueError(f"MaxPool2d needs kernel_size and stride >= 1, got "
                             f"kernel_size={kernel_size}, stride={stride}.")

    @checked
    def forward(self, x):
        """x: (N, C, H, W) -> out: (N, C, OH, OW), in x's memory layout."""
        k = kernels_for(x, self.use_kernels, same_per_axis=(self.stride,))
        if k is not None:
            return self._kernel_forward(k, x)
        threads = threads_for(x, self.use_threads)      # None unless asked for (threaded.py)
        best, idx = self._max_and_where(x) if threads is None else threads.max_and_where(self, x)
        self.cache = PoolCache(x, idx)
        return best

    def _max_and_where(self, x):
        """The maxima (N, C, OH, OW) of x's windows, and which window offset k = kh*KW + kw
        holds each (an int array of the same shape)."""
        N, C, H, W = x.shape
        KH, KW = self.kernel_size
        sh, sw = self.stride
        OH, OW = output_size(H, W, KH, KW, self.stride)
        xp = get_array_module(x)
        # A running maximum over the KH*KW window offsets: each offset (kh, kw) is one strided
        # slice of x holding that position of every window, of the output's shape (N, C, OH, OW).
        best = x[:, :, 0:sh * OH:sh, 0:sw * OW:sw].copy(order="K")   # in x's memory layout
        itype = np.int8 if KH * KW <= 127 else np.int32
        idx = xp.zeros_like(best, dtype=itype)            # which offset holds the max
        for k in range(1, KH * KW):
            kh, kw = divmod(k, KW)
            v = x[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw]
            better = v > best                             # strict: ties keep the first maximum
            # "idx = k where better": k grows, so it is the larger of idx and k*better
            xp.maximum(idx, better.astype(itype) * itype(k), out=idx)
            xp.maximum(best, v, out=best)
        return best, idx

    @checked
    def backward(self, dout):
        """dout: (N, C, OH, OW) -> dx: (N, C, H, W), in x's memory layout."""
        x, idx, k = self.cache
        if k is not None:            # forward ran the kernel: so does backward
            return self._kernel_backward(k, dout)
        threads = threads_for(dout, self.use_threads)
        if threads is not None:
            return threads.maxpool_backward(self, dout)
        N, C, H, W = x.shape
        KH, KW = self.kernel_size
        sh, sw = self.stride
        _, _, OH, OW = dout.shape
        xp = get_array_module(dout)
        # Windows that tile x exactly (no overlap, nothing left over) write every pixel once:
        # no zeros first, no adding up (the CNN's pools; a training step's speed depends on it).
        tiles = (sh, sw) == (KH, KW) and sh * OH == H and sw * OW == W
        dx = (xp.empty_like if tiles else xp.zeros_like)(x, dtype=dout.dtype)   # x's layout
        for k in range(KH * KW):      # loop over window offsets only, never over pixels
            kh, kw = divmod(k, KW)
            target = dx[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw]
            if tiles:
                xp.multiply(dout, idx == k, out=target)   # the gradient of the windows offset k won
            else:
                target += dout * (idx == k)               # overlapping windows add up
        return dx

    def _kernel_forward(self, k, x):
        """The GPU path: one launch makes the maxima and where they were (C-contiguous)."""
        best, idx = k.maxpool_forward(x, *self.kernel_size, self.stride[0])   # sh == sw here
        self.cache = PoolCache(x, idx, kernels=k)
        return best

    def _kernel_backward(self, k, dout):
        x, idx, _ = self.cache
        dx = get_array_module(dout).empty_like(x, dtype=dout.dtype)
        return k.maxpool_backward(dout, idx, dx, *self.kernel_size, self.stride[0])

    def get_config(self):
        return {"kernel_size": list(self.kernel_size), "stride": list(self.stride)}
