"""Convolution and max pooling: naive loops beside the fast im2col versions.

Introduced in notebook ``06_convolution``; the GPU im2col kernels in ``08c_fusion_and_graphs``.

Shapes (the same letters in the code):

* x: (N, C, H, W) input images, W: (F, C, KH, KW) filters, b: (F,) biases
* stride = (sh, sw), padding = (ph, pw): one number per axis (an int means the same for both)
* OH = (H + 2*ph - KH) // sh + 1, OW = (W + 2*pw - KW) // sw + 1
* out: (N, F, OH, OW)

A 1-D signal of length L is a 1×L image: ``Conv2d(1, 8, (1, 5), padding=(0, 2))`` slides a
5-wide window along it.

The ``*_naive`` functions loop over every output pixel: slow, obviously right, and the
oracle the fast versions are tested against. The fast versions turn convolution into one
matrix product (im2col) and loop only over the KH*KW kernel offsets, never over pixels
or over the batch. The fused ``Conv2dReLU`` of lesson ``08c_fusion_and_graphs``
(``dlcourse/fusion.py``) is built from the same functions: :func:`unfold`, :func:`fold`,
:func:`as_image`, :func:`as_matrix`.
"""
from __future__ import annotations

import numpy as np

from . import kernels
from ._validate import float_dtype, shape_str, whole_number
from .backend import get_array_module, rng
from .layers import Layer
from .ops import matmul
from .shapes import as_pair, output_size

__all__ = ["output_size", "conv2d_forward_naive", "conv2d_backward_naive", "maxpool_forward_naive",
           "maxpool_backward_naive", "maxpool_forward", "maximum_of", "im2col", "col2im", "unfold",
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


def maxpool_forward(x, KH, KW, stride, new=None):
    """The maxima of :func:`maxpool_forward_naive`, fast: out (N, C, OH, OW) in x's memory layout.

    A window's maximum is the maximum over its KW columns of the maxima over its KH rows. So
    first take the maximum of whole rows of x (long contiguous runs), rows[n, c, i, :] = max over
    kh of x[n, c, i*sh + kh, :], then of KW columns of that: (KH-1) + (KW-1) elementwise maxima
    instead of the KH*KW - 1 of a loop over window offsets, and only the last ones strided.
    Only the last two axes are pooled: any two axes may come first (dl.infer pools (F, N, ...)).

    ``new(name, shape)``, if given, returns the arrays to write the row maxima ("rows") and the
    result ("pooled") into: dl.infer's kept memory (``fast_inference.Buffers``).
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
# im2col / col2im: convolution as one matrix product
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


def im2col(x, KH, KW, stride=1, padding=0):
    """Unfold every window of x into a row.

    x: (N, C, H, W)  ->  cols: (N*OH*OW, C*KH*KW), with
    cols[(n*OH + i)*OW + j, (c*KH + kh)*KW + kw] = x_pad[n, c, i*sh + kh, j*sw + kw]
    (stride = (sh, sw) and padding = (ph, pw), or an int each for both axes).

    Then ``cols @ W.reshape(F, -1).T`` is the convolution. On the GPU this is one CUDA kernel
    (``dlcourse.kernels.im2col``); here it is a strided view and one copy.
    """
    return unfold(x, KH, KW, stride, padding).T


def col2im(cols, x_shape, KH, KW, stride=1, padding=0):
    """The adjoint of :func:`im2col`: add every entry of cols (N*OH*OW, C*KH*KW) back to the
    input pixel it came from. Returns dx: x_shape = (N, C, H, W)."""
    return fold(cols.T, x_shape, KH, KW, stride, padding)


def unfold(x, KH, KW, stride=1, padding=0, use_kernels=True):
    """im2col with one *column* per window: x (N, C, H, W) -> cols (C*KH*KW, N*OH*OW), the
    layout NumPy builds fastest, and the one ``W.reshape(F, -1) @ cols`` wants. On the GPU,
    the one branch to the CUDA kernel (``kernels/im2col.cu``; it takes one stride and one
    padding for both axes, so it is used only when they are).
    """
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    (sh, _), (ph, _) = as_pair(stride), as_pair(padding)
    k = kernels.usable_for(x, use_kernels, same_per_axis=(stride, padding))
    if k is not None:
        return k.im2col(x, KH, KW, sh, ph).T     # the kernel stores cols transposed
    windows = _windows(_pad(x, padding), KH, KW, stride, OH, OW)
    return windows.reshape(C * KH * KW, N * OH * OW)       # the one copy


def fold(cols, x_shape, KH, KW, stride=1, padding=0, use_kernels=True):
    """The adjoint of :func:`unfold`: cols (C*KH*KW, N*OH*OW) -> dx: x_shape = (N, C, H, W),
    each entry added back to the input pixel it came from."""
    N, C, H, W = x_shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    (sh, sw), (ph, pw) = as_pair(stride), as_pair(padding)
    xp = get_array_module(cols)
    k = kernels.usable_for(cols, use_kernels, same_per_axis=(stride, padding))
    if k is not None:   # reads cols in place, whatever its layout
        return k.col2im(cols.T, x_shape, KH, KW, sh, ph)
    cols6 = cols.reshape(C, KH, KW, N, OH, OW)
    # Accumulate channel-major, (C, N, Hp, Wp), so that each add reads cols6 in memory order.
    dx_pad = xp.zeros((C, N, H + 2 * ph, W + 2 * pw), dtype=cols.dtype)
    for kh in range(KH):          # a loop over kernel offsets only: KH*KW strided adds
        for kw in range(KW):
            dx_pad[:, :, kh:kh + sh * OH:sh, kw:kw + sw * OW:sw] += cols6[:, kh, kw]
    dx = dx_pad[:, :, ph:ph + H, pw:pw + W]
    if ph or pw:
        dx = dx.copy()            # compact, so the layer below reads it in one sweep
    return dx.transpose(1, 0, 2, 3)                                    # (N, C, H, W)


def as_image(out, N, OH, OW):
    """The convolution's output matrix (F, N*OH*OW) seen as (N, F, OH, OW): a view, no copy."""
    return out.reshape(out.shape[0], N, OH, OW).transpose(1, 0, 2, 3)


def as_matrix(dout):
    """The inverse of :func:`as_image`: (N, F, OH, OW) -> (F, N*OH*OW) (a view when dout is
    channel-major in memory, as the gradients of this library's layers are)."""
    return dout.transpose(1, 0, 2, 3).reshape(dout.shape[1], -1)


def conv_output_shape(layer, x_shape):
    """(N, OH, OW) of a Conv2d (or Conv2dReLU) ``layer`` for input x of shape x_shape."""
    N, _, H, W = x_shape
    KH, KW = layer.kernel_size
    return (N, *output_size(H, W, KH, KW, layer.stride, layer.padding))


# ======================================================================================
# Layers
# ======================================================================================
class Conv2d(Layer):
    """2-D convolution (cross-correlation, as in every framework).

    x: (N, C, H, W) -> out: (N, F, OH, OW)
    params["W"]: (F, C, KH, KW), params["b"]: (F,)
    kernel_size, stride, padding: an int, or a pair (h, w) per axis; the layer keeps pairs:
    ``.kernel_size == (KH, KW)``, ``.stride == (sh, sw)``, ``.padding == (ph, pw)``.
    OH = (H + 2*ph - KH) // sh + 1, OW = (W + 2*pw - KW) // sw + 1.

    Forward: cols = unfold(x) (C*KH*KW, N*OH*OW); out = W_mat @ cols + b, W_mat = W as (F, C*KH*KW).
    Backward: dW = dout_mat @ cols.T, db = dout_mat summed over its columns,
    dcols = W_mat.T @ dout_mat, dx = fold(dcols).

    On the GPU, unfold and fold run the CUDA kernels of ``dlcourse.kernels`` (lesson 08c);
    set ``layer.use_kernels = False`` (or ``dl.use_kernels(model, False)``) to time the plain
    CuPy version instead.
    """

    input_shape, input_ndim = "(N, C_in, H, W)", 4
    use_kernels = True   # on the GPU: im2col/col2im by the hand-written kernels

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

    def forward(self, x):
        """x: (N, C, H, W) -> out: (N, F, OH, OW), channel-major in memory (a view of the
        (F, N*OH*OW) matrix)."""
        W, b = self.params["W"], self.params["b"]
        F, C, KH, KW = W.shape
        cols = unfold(x, KH, KW, self.stride, self.padding, self.use_kernels)   # (C*KH*KW, N*OH*OW)
        out = matmul(W.reshape(F, -1), cols)                                   # (F, N*OH*OW)
        out += b.reshape(F, 1)
        self.cache = (x.shape, cols)
        return as_image(out, *conv_output_shape(self, x.shape))

    def backward(self, dout, input_grad: bool = True):
        """dout: (N, F, OH, OW) -> dx: (N, C, H, W); fills grads["W"] (F, C, KH, KW) and
        grads["b"] (F,). ``input_grad=False`` skips dx and returns None."""
        x_shape, cols = self.cache
        W = self.params["W"]
        F, C, KH, KW = W.shape
        dout_mat = as_matrix(dout)                                             # (F, N*OH*OW)
        dW = matmul(cols, dout_mat.T).T                                        # (F, C*KH*KW)
        self.grads = {"W": dW.reshape(W.shape), "b": dout_mat.sum(axis=1)}
        if not input_grad:
            return None
        dcols = matmul(W.reshape(F, -1).T, dout_mat)                           # (C*KH*KW, N*OH*OW)
        return fold(dcols, x_shape, KH, KW, self.stride, self.padding, self.use_kernels)

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


class MaxPool2d(Layer):
    """Max over each KH×KW window, slid by ``stride`` (default: the kernel size, so windows
    tile the image). kernel_size and stride: an int, or a pair (h, w) per axis; the layer
    keeps pairs: ``.kernel_size == (KH, KW)``, ``.stride == (sh, sw)``.

    x: (N, C, H, W) -> out: (N, C, OH, OW), OH = (H - KH) // sh + 1, OW = (W - KW) // sw + 1.
    Backward sends each window's gradient to its maximum; with overlapping windows
    (stride < kernel) a pixel can be the maximum of several and its gradients add up.
    In evaluation mode forward keeps only the maxima (less than half the work of also
    recording where they were); backward, if asked, finds where from the cached x.
    On the GPU forward and backward are one CUDA kernel each (``kernels/maxpool.cu``) instead
    of a few array operations per window position; ``dl.use_kernels(model, False)`` runs the
    array code below.
    """

    input_shape, input_ndim = "(N, C, H, W)", 4
    use_kernels = True

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size", "MaxPool2d")
        self.stride = _pair(self.kernel_size if stride is None else stride, "stride", "MaxPool2d")
        if min(*self.stride, *self.kernel_size) < 1:
            raise ValueError(f"MaxPool2d needs kernel_size and stride >= 1, got "
                             f"kernel_size={kernel_size}, stride={stride}.")

    def forward(self, x):
        """x: (N, C, H, W) -> out: (N, C, OH, OW), in x's memory layout."""
        k = kernels.usable_for(x, self.use_kernels, same_per_axis=(self.stride,))
        if k is not None:
            return self._forward_kernel(k, x)
        # Only backward needs where each maximum was: in evaluation mode forward skips it,
        # and a backward after it (a saliency map, say) finds it again from x.
        best, idx = self._max_and_where(x, where=self.training)
        self.cache = (x, idx, False)          # False: the array code made idx (or will)
        return best

    def _max_and_where(self, x, where=True):
        """The maxima (N, C, OH, OW) of x's windows and, if ``where``, which window offset
        k = kh*KW + kw holds each (an int array of the same shape; else None)."""
        N, C, H, W = x.shape
        KH, KW = self.kernel_size
        sh, sw = self.stride
        OH, OW = output_size(H, W, KH, KW, self.stride)
        if not where:                 # the maxima alone: rows first, then columns
            return maxpool_forward(x, KH, KW, self.stride), None
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

    def backward(self, dout):
        """dout: (N, C, OH, OW) -> dx: (N, C, H, W), in x's memory layout."""
        x, idx, kernel_made_idx = self.cache
        if kernel_made_idx:          # forward ran the kernel: so does backward
            return self._backward_kernel(dout)
        if idx is None:              # forward ran in evaluation mode
            _, idx = self._max_and_where(x)
        N, C, H, W = x.shape
        KH, KW = self.kernel_size
        sh, sw = self.stride
        _, _, OH, OW = dout.shape
        xp = get_array_module(dout)
        # Windows that tile x exactly (no overlap, nothing left over) write every pixel once.
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

    def _forward_kernel(self, k, x):
        """The GPU path: one launch makes the maxima and where they were (C-contiguous)."""
        best, idx = k.maxpool_forward(x, *self.kernel_size, self.stride[0])   # sh == sw here
        self.cache = (x, idx, True)
        return best

    def _backward_kernel(self, dout):
        x, idx, _ = self.cache
        dx = get_array_module(dout).empty_like(x, dtype=dout.dtype)
        return kernels.maxpool_backward(dout, idx, dx, *self.kernel_size, self.stride[0])

    def get_config(self):
        return {"kernel_size": list(self.kernel_size), "stride": list(self.stride)}
