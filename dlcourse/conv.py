"""Convolution and max pooling: naive loops beside the fast im2col versions.

Introduced in notebook ``06_convolution``; the GPU im2col kernels in ``08_cuda_kernels``.

Shapes (the same letters in the code):

* x: (N, C, H, W) input images, W: (F, C, KH, KW) filters, b: (F,) biases
* OH = (H + 2*padding - KH) // stride + 1, OW = (W + 2*padding - KW) // stride + 1
* out: (N, F, OH, OW)

The ``*_naive`` functions loop over every output pixel: slow, obviously right, and the
oracle the fast versions are tested against. The fast versions turn convolution into one
matrix product (im2col) and loop only over the KH*KW kernel offsets, never over pixels
or over the batch.
"""
from __future__ import annotations

import numpy as np

from ._validate import check_input, shape_str
from .backend import get_array_module, gpu_kernels, rng
from .layers import Layer, _float_dtype
from .precision import lowp_matmul   # a @ b, inputs rounded under dl.autocast (lesson 10)


def _pair(v, name):
    if isinstance(v, (tuple, list)):
        if len(v) != 2:
            raise ValueError(f"{name} must be an int or a pair (h, w), got {v!r}.")
        return int(v[0]), int(v[1])
    return int(v), int(v)


def _single(v, name, layer):
    """stride and padding are one number for both axes here (the kernels take one); a pair
    of equal numbers is accepted as that number."""
    if isinstance(v, (tuple, list)):
        if len(v) == 2 and int(v[0]) == int(v[1]):
            return int(v[0])
        raise ValueError(f"{layer} takes one {name} for both height and width (an int), got "
                         f"{name}={v!r}. Pass an int, e.g. {name}={int(v[0]) if v else 1}.")
    return int(v)


def output_size(H, W, KH, KW, stride=1, padding=0):
    """(OH, OW) of a KH×KW window slid with ``stride`` over an H×W input padded by ``padding``."""
    if stride < 1 or padding < 0:
        raise ValueError(f"stride must be >= 1 and padding >= 0, got stride={stride}, padding={padding}.")
    Hp, Wp = H + 2 * padding, W + 2 * padding
    if KH > Hp or KW > Wp:
        raise ValueError(f"A {KH}×{KW} window does not fit in the {H}×{W} input padded to {Hp}×{Wp}. "
                         f"Use a smaller kernel, more padding, or a larger image.")
    return (Hp - KH) // stride + 1, (Wp - KW) // stride + 1


def _pad(x, padding):
    """Zero-pad the two spatial axes of x (N, C, H, W)."""
    if padding == 0:
        return x
    xp = get_array_module(x)
    N, C, H, W = x.shape
    # zeros_like keeps x's memory layout (a conv output is channel-major): no transposing copy
    out = xp.zeros_like(x, shape=(N, C, H + 2 * padding, W + 2 * padding))
    out[:, :, padding:padding + H, padding:padding + W] = x
    return out


# ======================================================================================
# Naive loops: the definition, and the test oracle
# ======================================================================================
def conv2d_forward_naive(x, W, b, stride=1, padding=0):
    """out[n, f, i, j] = sum over c, kh, kw of x_pad[n, c, i*s + kh, j*s + kw] * W[f, c, kh, kw] + b[f]."""
    N, C, H, Wd = x.shape
    F, _, KH, KW = W.shape
    OH, OW = output_size(H, Wd, KH, KW, stride, padding)
    xp = get_array_module(x)
    x_pad = _pad(x, padding)
    out = xp.zeros((N, F, OH, OW), dtype=x.dtype)
    for n in range(N):
        for f in range(F):
            for i in range(OH):
                for j in range(OW):
                    window = x_pad[n, :, i * stride:i * stride + KH, j * stride:j * stride + KW]
                    out[n, f, i, j] = (window * W[f]).sum() + b[f]
    return out


def conv2d_backward_naive(dout, x, W, stride=1, padding=0):
    """Returns (dx, dW, db) for :func:`conv2d_forward_naive`: each output pixel sends its
    gradient back to the window it was computed from."""
    N, C, H, Wd = x.shape
    F, _, KH, KW = W.shape
    _, _, OH, OW = dout.shape
    xp = get_array_module(x)
    x_pad = _pad(x, padding)
    dx_pad = xp.zeros_like(x_pad)
    dW = xp.zeros_like(W)
    db = dout.sum(axis=(0, 2, 3))
    for n in range(N):
        for f in range(F):
            for i in range(OH):
                for j in range(OW):
                    hs, ws = i * stride, j * stride
                    dW[f] += x_pad[n, :, hs:hs + KH, ws:ws + KW] * dout[n, f, i, j]
                    dx_pad[n, :, hs:hs + KH, ws:ws + KW] += W[f] * dout[n, f, i, j]
    dx = dx_pad[:, :, padding:padding + H, padding:padding + Wd]
    return dx, dW, db


def maxpool_forward_naive(x, KH, KW, stride):
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride)
    xp = get_array_module(x)
    out = xp.zeros((N, C, OH, OW), dtype=x.dtype)
    for i in range(OH):
        for j in range(OW):
            out[:, :, i, j] = x[:, :, i * stride:i * stride + KH, j * stride:j * stride + KW].max(axis=(2, 3))
    return out


def maxpool_backward_naive(dout, x, KH, KW, stride):
    """Each window's gradient goes to its (first) maximum; overlapping windows add up."""
    N, C, H, W = x.shape
    _, _, OH, OW = dout.shape
    xp = get_array_module(x)
    dx = xp.zeros_like(x)
    for n in range(N):
        for c in range(C):
            for i in range(OH):
                for j in range(OW):
                    window = x[n, c, i * stride:i * stride + KH, j * stride:j * stride + KW]
                    kh, kw = np.unravel_index(int(window.argmax()), window.shape)
                    dx[n, c, i * stride + kh, j * stride + kw] += dout[n, c, i, j]
    return dx


# ======================================================================================
# im2col / col2im: convolution as one matrix product
# ======================================================================================
def _windows(x_pad, KH, KW, stride, OH, OW):
    """A strided *view* (no copy) of every KH×KW window of x_pad (N, C, Hp, Wp), of shape
    (C, KH, KW, N, OH, OW): entry [c, kh, kw, n, i, j] is x_pad[n, c, i*stride + kh, j*stride + kw]."""
    xp = get_array_module(x_pad)
    N, C = x_pad.shape[:2]
    sN, sC, sH, sW = x_pad.strides
    return xp.lib.stride_tricks.as_strided(
        x_pad, shape=(C, KH, KW, N, OH, OW), strides=(sC, sH, sW, sN, sH * stride, sW * stride))


def im2col(x, KH, KW, stride=1, padding=0):
    """Unfold every window of x into a row.

    x: (N, C, H, W)  ->  cols: (N*OH*OW, C*KH*KW), with
    cols[(n*OH + i)*OW + j, (c*KH + kh)*KW + kw] = x_pad[n, c, i*stride + kh, j*stride + kw].

    Then ``cols @ W.reshape(F, -1).T`` is the convolution. On the GPU this is one CUDA kernel
    (``dlcourse.kernels.im2col``); here it is a strided view and one copy.
    """
    return _im2col_t(x, KH, KW, stride, padding).T


def col2im(cols, x_shape, KH, KW, stride=1, padding=0):
    """The adjoint of :func:`im2col`: add every entry of cols (N*OH*OW, C*KH*KW) back to the
    input pixel it came from. Returns dx: x_shape = (N, C, H, W)."""
    return _col2im_t(cols.T, x_shape, KH, KW, stride, padding)


def _im2col_t(x, KH, KW, stride, padding, use_kernels=True):
    """im2col transposed: (C*KH*KW, N*OH*OW), the fastest layout for NumPy to build."""
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    k = gpu_kernels(x, use_kernels)
    if k is not None:   # the one branch to a GPU kernel (it returns cols stored transposed)
        return k.im2col(x, KH, KW, stride, padding).T
    windows = _windows(_pad(x, padding), KH, KW, stride, OH, OW)
    return windows.reshape(C * KH * KW, N * OH * OW)   # the one copy


def _col2im_t(cols_t, x_shape, KH, KW, stride, padding, use_kernels=True):
    N, C, H, W = x_shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    xp = get_array_module(cols_t)
    k = gpu_kernels(cols_t, use_kernels)
    if k is not None:   # reads cols_t in place, whatever its layout
        return k.col2im(cols_t.T, x_shape, KH, KW, stride, padding)
    cols6 = cols_t.reshape(C, KH, KW, N, OH, OW)
    # Accumulate channel-major, (C, N, Hp, Wp), so that each add reads cols6 in memory order.
    dx_pad = xp.zeros((C, N, H + 2 * padding, W + 2 * padding), dtype=cols_t.dtype)
    for kh in range(KH):          # a loop over kernel offsets only: KH*KW strided adds
        for kw in range(KW):
            dx_pad[:, :, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride] += cols6[:, kh, kw]
    dx = dx_pad[:, :, padding:padding + H, padding:padding + W]
    if padding:
        dx = dx.copy()            # compact, so the layer below reads it in one sweep
    return dx.transpose(1, 0, 2, 3)                                    # (N, C, H, W)


# ======================================================================================
# Layers
# ======================================================================================
class Conv2d(Layer):
    """2-D convolution (cross-correlation, as in every framework).

    x: (N, C_in, H, W) -> out: (N, C_out, OH, OW)
    params["W"]: (C_out, C_in, KH, KW), params["b"]: (C_out,)
    OH = (H + 2*padding - KH) // stride + 1 (OW likewise).

    Forward: cols = im2col(x) (C_in*KH*KW, N*OH*OW); out = W_mat @ cols + b.
    Backward: dW = dout_mat @ cols.T, dcols = W_mat.T @ dout_mat, dx = col2im(dcols).

    On the GPU, im2col and col2im are the CUDA kernels of ``dlcourse.kernels`` (lesson 08);
    set ``layer.use_kernels = False`` (or ``dl.use_kernels(model, False)``) to time the plain
    CuPy version instead.
    """

    use_kernels = True   # on the GPU: im2col/col2im by the hand-written kernels

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride: int = 1,
                 padding: int = 0, dtype=np.float32, seed=None):
        super().__init__()
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        if min(self.in_channels, self.out_channels, *self.kernel_size) < 1:
            raise ValueError(f"Conv2d needs in_channels, out_channels and kernel_size >= 1, got "
                             f"Conv2d({in_channels}, {out_channels}, kernel_size={kernel_size}).")
        self.stride = _single(stride, "stride", "Conv2d")
        self.padding = _single(padding, "padding", "Conv2d")
        if self.stride < 1 or self.padding < 0:
            raise ValueError(f"Conv2d needs stride >= 1 and padding >= 0, got stride={stride}, "
                             f"padding={padding}.")
        KH, KW = self.kernel_size
        dtype = _float_dtype(dtype)
        fan_in = self.in_channels * KH * KW
        Wt = rng(seed).standard_normal((self.out_channels, self.in_channels, KH, KW)) * np.sqrt(2.0 / fan_in)
        self.params = {"W": Wt.astype(dtype), "b": np.zeros(self.out_channels, dtype=dtype)}

    def forward(self, x):
        out = self.forward_no_bias(x)                                 # (F, N*OH*OW)
        out += self.params["b"].reshape(-1, 1)
        return self.as_image(out)

    def forward_no_bias(self, x):
        """W_mat @ im2col(x), without the bias, as the matrix (F, N*OH*OW) (see as_image).
        Caches what backward needs."""
        Wt = self.params["W"]
        check_input(self, x, 4, "(N, C_in, H, W)", params_like=Wt)
        N, C, H, W = x.shape
        F, _, KH, KW = Wt.shape
        if C != self.in_channels:
            hint = (" The channels look last (N, H, W, C): use x.transpose(0, 3, 1, 2)."
                    if x.shape[3] == self.in_channels else "")
            raise ValueError(f"Conv2d(in_channels={self.in_channels}) got x of shape {shape_str(x.shape)}: "
                             f"axis 1 (channels) must be {self.in_channels}.{hint}")
        cols_t = _im2col_t(x, KH, KW, self.stride, self.padding, self.use_kernels)  # (C*KH*KW, N*OH*OW)
        self.cache = (x.shape, cols_t)
        return lowp_matmul(Wt.reshape(F, -1), cols_t)

    def as_image(self, out):
        """The (F, N*OH*OW) output matrix seen as (N, F, OH, OW): a view, no copy."""
        N, _, H, W = self.cache[0]
        F, _, KH, KW = self.params["W"].shape
        OH, OW = output_size(H, W, KH, KW, self.stride, self.padding)
        return out.reshape(F, N, OH, OW).transpose(1, 0, 2, 3)

    def as_matrix(self, dout):
        """The inverse of as_image: (N, F, OH, OW) -> (F, N*OH*OW) (a view when dout is
        channel-major in memory, as the gradients of this library's layers are)."""
        return dout.transpose(1, 0, 2, 3).reshape(self.params["W"].shape[0], -1)

    def backward(self, dout):
        return self.backward_input(self.backward_params(dout))

    def backward_params(self, dout, db=None):
        """Fill grads only (dW: (F, C, KH, KW), db: (F,)); returns dout as (F, N*OH*OW).
        ``db``, when given, is the bias gradient already summed (a fused layer's)."""
        _, cols_t = self._saved()
        Wt = self.params["W"]
        dout_mat = self.as_matrix(dout)                                # (F, N*OH*OW)
        dW = lowp_matmul(cols_t, dout_mat.T).T                         # (F, C*KH*KW)
        self.grads = {"W": dW.reshape(Wt.shape), "b": dout_mat.sum(axis=1) if db is None else db}
        return dout_mat

    def backward_input(self, dout_mat):
        """dx = col2im(W_mat.T @ dout_mat): (N, C, H, W), from dout as (F, N*OH*OW)."""
        x_shape = self._saved()[0]
        Wt = self.params["W"]
        F, C, KH, KW = Wt.shape
        dcols_t = lowp_matmul(Wt.reshape(F, -1).T, dout_mat)           # (C*KH*KW, N*OH*OW)
        return _col2im_t(dcols_t, x_shape, KH, KW, self.stride, self.padding, self.use_kernels)

    def get_config(self):
        return {"in_channels": self.in_channels, "out_channels": self.out_channels,
                "kernel_size": list(self.kernel_size), "stride": self.stride, "padding": self.padding}


class MaxPool2d(Layer):
    """Max over each KH×KW window, slid by ``stride`` (default: the kernel size; one stride
    serves both axes, so a KH×KW window with KH != KW needs it given).

    x: (N, C, H, W) -> out: (N, C, OH, OW), OH = (H - KH) // stride + 1.
    Backward sends each window's gradient to its maximum; with overlapping windows
    (stride < kernel) a pixel can be the maximum of several and its gradients add up.
    On the GPU forward and backward are one CUDA kernel each (``kernels/maxpool.cu``) instead
    of a few array operations per window position; ``dl.use_kernels(model, False)`` runs the
    array code below.
    """

    use_kernels = True

    def __init__(self, kernel_size, stride=None):
        super().__init__()
        self.kernel_size = _pair(kernel_size, "kernel_size")
        KH, KW = self.kernel_size
        if stride is None and KH != KW:
            raise ValueError(f"MaxPool2d(kernel_size={kernel_size}) needs a stride: the default is "
                             f"the kernel size, but a {KH}x{KW} window has two, and one stride "
                             f"serves both axes here. Pass stride=, e.g. MaxPool2d({kernel_size}, "
                             f"stride={min(KH, KW)}).")
        self.stride = _single(stride, "stride", "MaxPool2d") if stride is not None else KH
        if self.stride < 1 or min(self.kernel_size) < 1:
            raise ValueError(f"MaxPool2d needs kernel_size and stride >= 1, got "
                             f"kernel_size={kernel_size}, stride={stride}.")

    def forward(self, x):
        check_input(self, x, 4, "(N, C, H, W)")
        N, C, H, W = x.shape
        KH, KW = self.kernel_size
        s = self.stride
        OH, OW = output_size(H, W, KH, KW, s)
        kernels = gpu_kernels(x, self.use_kernels)
        if kernels is not None and x.dtype in (np.float32, np.float64):
            best, idx = kernels.maxpool_forward(x, KH, KW, s)   # one launch; C-contiguous
            self.cache = (x, idx, True)
            return best
        xp = get_array_module(x)
        # A running maximum over the KH*KW window offsets: each offset (kh, kw) is one strided
        # slice of x holding that position of every window, of the output's shape (N, C, OH, OW).
        best = x[:, :, 0:s * OH:s, 0:s * OW:s].copy(order="K")   # in x's memory layout
        itype = np.int8 if KH * KW <= 127 else np.int32
        idx = xp.zeros_like(best, dtype=itype)          # which offset holds the maximum
        for k in range(1, KH * KW):
            kh, kw = divmod(k, KW)
            v = x[:, :, kh:kh + s * OH:s, kw:kw + s * OW:s]
            better = v > best                             # strict: ties keep the first maximum
            xp.maximum(best, v, out=best)
            # "idx = k where better": k grows, so it is the larger of idx and k*better
            xp.maximum(idx, better.astype(itype) * itype(k), out=idx)
        self.cache = (x, idx, False)          # False: the array code made idx
        return best

    def backward(self, dout):
        x, idx, kernel_made_idx = self._saved()
        N, C, H, W = x.shape
        KH, KW = self.kernel_size
        s = self.stride
        _, _, OH, OW = dout.shape
        xp = get_array_module(dout)
        if kernel_made_idx:          # forward ran the kernel: so does backward (dx in x's layout)
            dx = xp.empty_like(x, dtype=dout.dtype)
            return gpu_kernels(dout).maxpool_backward(dout, idx, dx, KH, KW, s)
        # Windows that tile x exactly (no overlap, nothing left over) write every pixel once.
        tiles = s == KH == KW and s * OH == H and s * OW == W
        dx = (xp.empty_like if tiles else xp.zeros_like)(x, dtype=dout.dtype)   # x's layout
        for k in range(KH * KW):      # loop over window offsets only, never over pixels
            kh, kw = divmod(k, KW)
            target = dx[:, :, kh:kh + s * OH:s, kw:kw + s * OW:s]
            if tiles:
                xp.multiply(dout, idx == k, out=target)   # the gradient of the windows offset k won
            else:
                target += dout * (idx == k)               # overlapping windows add up
        return dx

    def get_config(self):
        return {"kernel_size": list(self.kernel_size), "stride": self.stride}
