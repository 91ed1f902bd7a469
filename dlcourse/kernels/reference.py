"""NumPy references: what every CUDA kernel in ``dlcourse.kernels`` must compute.

Each function here is written for clarity, not speed, and runs on the CPU (NumPy arrays in,
NumPy arrays out; CuPy arrays are copied to the host first). The tests check each GPU kernel
against its reference on random inputs of awkward sizes, and check the references themselves
against hand-computed cases and identities on every machine.

===========================  ======================================  ===============
reference                    kernel(s)                               source
===========================  ======================================  ===============
matmul                       matmul_naive / _coalesced / _tiled /    matmul_*.cu
                             _regblock
matmul_fp16                  matmul_wmma (FP16 in, FP32 out)         matmul_wmma.cu
bias_relu_forward_ref        bias_relu_forward                       bias_relu.cu
bias_relu_backward_ref       bias_relu_backward                      bias_relu.cu
bias_relu_rows_forward_ref   bias_relu_rows_forward                  bias_relu.cu
bias_relu_rows_backward_ref  bias_relu_rows_backward                 bias_relu.cu
softmax_cross_entropy_ref    softmax_cross_entropy                   softmax_cross_entropy.cu
im2col_ref, col2im_ref       im2col, col2im                          im2col.cu
maxpool_forward_ref,         maxpool_forward, maxpool_backward       maxpool.cu
maxpool_backward_ref
sgd_momentum_update_ref      sgd_momentum_update                     optimizers.cu
adam_update_ref              adam_update                             optimizers.cu
flash_attention_fp16         flash_attention_wmma (FP16 in, FP32     flash_attention_wmma.cu
                             out)
===========================  ======================================  ===============
"""
from __future__ import annotations

import numpy as np

from ..backend import to_numpy
from ..shapes import output_size

__all__ = ["matmul", "matmul_loops", "bias_relu_forward_ref", "bias_relu_backward_ref",
           "bias_relu_rows_forward_ref", "bias_relu_rows_backward_ref",
           "softmax_cross_entropy_ref", "im2col_ref", "col2im_ref", "maxpool_forward_ref",
           "maxpool_backward_ref", "sgd_momentum_update_ref",
           "adam_update_ref", "flash_attention_fp16"]


# --------------------------------------------------------------------------------------
# Matrix multiply
# --------------------------------------------------------------------------------------
def matmul(A, B):
    """C = A @ B. A: (M, K), B: (K, N) -> C: (M, N), in float64 for an accurate reference
    (then cast back to A's dtype)."""
    A, B = to_numpy(A), to_numpy(B)
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(A.dtype)


def matmul_fp16(A, B):
    """C = A @ B as the tensor cores compute it: A (M, K) and B (K, N) rounded to float16, the
    products (exact in float32) summed in float32. Returns C (M, N) float32."""
    A16, B16 = (to_numpy(x).astype(np.float16) for x in (A, B))
    return A16.astype(np.float32) @ B16.astype(np.float32)


def matmul_loops(A, B):
    """C = A @ B as the three loops every matmul kernel parallelizes: what one CUDA thread
    of matmul_naive.cu does is the body of the two outer loops. For tiny matrices only."""
    A, B = to_numpy(A), to_numpy(B)
    M, K = A.shape
    _, N = B.shape
    C = np.zeros((M, N), dtype=np.float64)
    for i in range(M):            # on the GPU: one thread per (i, j) ...
        for j in range(N):
            acc = 0.0
            for k in range(K):    # ... each running this loop
                acc += float(A[i, k]) * float(B[k, j])
            C[i, j] = acc
    return C.astype(A.dtype)


# --------------------------------------------------------------------------------------
# Bias + ReLU
# --------------------------------------------------------------------------------------
def bias_relu_forward_ref(x, b):
    """y = max(x + b, 0). x: (N, F), b: (F,) -> y: (N, F)."""
    x, b = to_numpy(x), to_numpy(b)
    return np.maximum(x + b, 0).astype(x.dtype)


def bias_relu_backward_ref(dout, y):
    """dx = dout * (y > 0), db = dx.sum(axis=0). dout, y: (N, F) -> dx: (N, F), db: (F,)."""
    dout, y = to_numpy(dout), to_numpy(y)
    dx = np.where(y > 0, dout, 0).astype(dout.dtype)
    return dx, dx.sum(axis=0, dtype=np.float64).astype(dout.dtype)


def bias_relu_rows_forward_ref(x, b):
    """y = max(x + b[:, None], 0): the bias along rows. x: (F, M), b: (F,) -> y: (F, M)."""
    x, b = to_numpy(x), to_numpy(b)
    return bias_relu_forward_ref(x.T, b).T.copy()


def bias_relu_rows_backward_ref(dout, y):
    """dx = dout * (y > 0), db = dx.sum(axis=1). dout, y: (F, M) -> dx: (F, M), db: (F,)."""
    dx_t, db = bias_relu_backward_ref(to_numpy(dout).T, to_numpy(y).T)
    return dx_t.T.copy(), db


# --------------------------------------------------------------------------------------
# Softmax cross-entropy
# --------------------------------------------------------------------------------------
def softmax_cross_entropy_ref(logits, labels):
    """Mean cross-entropy of softmax(logits) against integer labels, and its gradient.

    logits: (N, C), labels: (N,) ints in [0, C) -> (loss: float, dlogits: (N, C)), where
    loss = mean_n [log sum_c exp(z[n, c]) - z[n, y[n]]] and dlogits = (softmax(z) - onehot) / N.
    Stable: the row maximum is subtracted before exp.
    """
    z, labels = to_numpy(logits), to_numpy(labels)
    N, C = z.shape
    rows = np.arange(N)
    shifted = z - z.max(axis=1, keepdims=True)                  # stable: row max subtracted
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[rows, labels].mean()
    dlogits = np.exp(log_p)
    dlogits[rows, labels] -= 1
    return float(loss), (dlogits / N).astype(z.dtype)


# --------------------------------------------------------------------------------------
# im2col / col2im
# --------------------------------------------------------------------------------------
def im2col_ref(x, KH, KW, stride=1, padding=0):
    """Unfold every KH x KW window of x into a row.

    x: (N, C, H, W) -> cols: (N*OH*OW, C*KH*KW), OH = (H + 2*padding - KH) // stride + 1, with
    cols[(n*OH + oh)*OW + ow, (c*KH + kh)*KW + kw] = x_padded[n, c, oh*stride + kh, ow*stride + kw].

    One loop over the KH*KW kernel offsets: offset (kh, kw) of every window, for all n, c, oh,
    ow at once, is the strided slice x_padded[:, :, kh : kh + stride*OH : stride, kw : ...].
    """
    x = to_numpy(x)
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    x_pad = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    cols = np.empty((N, OH, OW, C, KH, KW), dtype=x.dtype)    # rows (n, oh, ow), cols (c, kh, kw)
    for kh in range(KH):
        for kw in range(KW):
            patch = x_pad[:, :, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride]
            cols[:, :, :, :, kh, kw] = patch.transpose(0, 2, 3, 1)   # (N, C, OH, OW) -> (N, OH, OW, C)
    return cols.reshape(N * OH * OW, C * KH * KW)


def col2im_ref(cols, x_shape, KH, KW, stride=1, padding=0):
    """The adjoint of :func:`im2col_ref`: add every entry of cols back to where it came from.

    cols: (N*OH*OW, C*KH*KW), x_shape = (N, C, H, W) -> dx: (N, C, H, W). Overlapping windows
    add up; entries that came from the padding are dropped.
    """
    cols = to_numpy(cols)
    N, C, H, W = x_shape
    OH, OW = output_size(H, W, KH, KW, stride, padding)
    cols6 = cols.reshape(N, OH, OW, C, KH, KW)
    dx_pad = np.zeros((N, C, H + 2 * padding, W + 2 * padding), dtype=cols.dtype)
    for kh in range(KH):
        for kw in range(KW):
            dx_pad[:, :, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride] += \
                cols6[:, :, :, :, kh, kw].transpose(0, 3, 1, 2)      # (N, OH, OW, C) -> (N, C, OH, OW)
    return dx_pad[:, :, padding:padding + H, padding:padding + W].copy()


# --------------------------------------------------------------------------------------
# Max pooling
# --------------------------------------------------------------------------------------
def maxpool_forward_ref(x, KH, KW, stride):
    """The maximum of every KH x KW window of x, slid by stride, and where it was.

    x: (N, C, H, W) -> (out, idx), both (N, C, OH, OW), OH = (H - KH) // stride + 1:
    out = the window's maximum, idx = kh * KW + kw of its first occurrence (row-major order).
    """
    x = to_numpy(x)
    N, C, H, W = x.shape
    OH, OW = output_size(H, W, KH, KW, stride)
    windows = np.empty((N, C, OH, OW, KH * KW), dtype=x.dtype)   # last axis: (kh, kw)
    for kh in range(KH):
        for kw in range(KW):
            windows[..., kh * KW + kw] = x[:, :, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride]
    idx = windows.argmax(axis=-1)                                # the first maximum
    return np.take_along_axis(windows, idx[..., None], axis=-1)[..., 0], idx.astype(np.int32)


def maxpool_backward_ref(dout, idx, x_shape, KH, KW, stride):
    """dx: x_shape = (N, C, H, W), the sum of dout over the windows whose maximum was at each
    pixel (dout, idx: (N, C, OH, OW), idx as maxpool_forward_ref returns it)."""
    dout, idx = to_numpy(dout), to_numpy(idx)
    OH, OW = dout.shape[2:]
    dx = np.zeros(x_shape, dtype=dout.dtype)
    for kh in range(KH):
        for kw in range(KW):
            dx[:, :, kh:kh + stride * OH:stride, kw:kw + stride * OW:stride] += \
                dout * (idx == kh * KW + kw)
    return dx


# --------------------------------------------------------------------------------------
# Optimizer updates (the kernels update in place; these return new arrays)
# --------------------------------------------------------------------------------------
def sgd_momentum_update_ref(p, grad, v, lr, momentum, weight_decay=0.0):
    """One SGD-with-momentum step: returns (new p, new v), all of p's shape and dtype.
    g = grad + weight_decay * p;  v = momentum * v + g;  p = p - lr * v."""
    p, grad, v = to_numpy(p), to_numpy(grad), to_numpy(v)
    g = grad + weight_decay * p
    v = momentum * v + g
    return p - lr * v, v


def adam_update_ref(p, grad, m, v, b1, b2, step_size, eps, weight_decay=0.0):
    """One Adam step with the bias corrections already in step_size and eps: returns
    (new p, new m, new v). g = grad + weight_decay * p;  m = b1 m + (1 - b1) g;
    v = b2 v + (1 - b2) g²;  p = p - step_size * m / (sqrt(v) + eps)."""
    p, grad, m, v = to_numpy(p), to_numpy(grad), to_numpy(m), to_numpy(v)
    g = grad + weight_decay * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return p - step_size * (m / (np.sqrt(v) + eps)), m, v


# --------------------------------------------------------------------------------------
# Attention on the tensor cores
# --------------------------------------------------------------------------------------
def flash_attention_fp16(q, k, v, causal=False):
    """out = softmax(q kᵀ / sqrt(d)) v as flash_attention_wmma computes it: q, k, v (B, T, d)
    rounded to float16, everything after in float32 (the kernel's products are exact in FP32
    and summed in FP32; it rounds P to FP16 too, which this reference does not: the tests'
    tolerance is that rounding). causal: row i sees keys j <= i. Returns out (B, T, d) float32."""
    q, k, v = (to_numpy(x).astype(np.float16).astype(np.float32) for x in (q, k, v))
    B, T, d = q.shape
    if T == 0:
        return np.zeros((B, 0, d), dtype=np.float32)
    s = (q @ k.transpose(0, 2, 1)) * np.float32(1 / np.sqrt(d))       # (B, T, T)
    if causal:
        s = np.where(np.tril(np.ones((T, T), dtype=bool)), s, np.float32(-np.inf))
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v).astype(np.float32)
