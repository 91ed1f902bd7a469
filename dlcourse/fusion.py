"""Fused layers: a Linear or Conv2d and the ReLU after it, done as one layer.

Introduced in notebook ``08_cuda_kernels``. Adding a bias and applying ReLU are elementwise:
a flop or two per number moved, so memory bandwidth sets their speed. As two layers they read
and write the whole activation twice (``z + b``, then ``max(., 0)``); as one they read and
write it once. On the GPU the fused pass is one CUDA kernel (``bias_relu.cu``, forward and
backward, the backward also summing the bias gradient); on the CPU it is the same two NumPy
operations done in place, with no new array.

    fast = dl.fuse(model)          # Linear→ReLU and Conv2d→ReLU pairs become one layer each
    fast.forward(x)                # same numbers as model.forward(x)
    dl.use_kernels(fast, False)    # on the GPU: the plain CuPy code instead of our kernels

``fuse`` shares the layers' parameters (training ``fast`` trains ``model``) and keeps their
names: the ReLU's place holds an :class:`~dlcourse.layers.Identity`, so ``"0.W"`` is still
``"0.W"`` and optimizers, state dicts and checkpoints work with either model.
"""
from __future__ import annotations

from .backend import get_array_module, gpu_kernels
from .conv import Conv2d
from .layers import Identity, Layer, Linear, ReLU, Sequential
from .precision import lowp_matmul   # a @ b, inputs rounded under dl.autocast (lesson 10)

__all__ = ["bias_relu", "bias_relu_backward", "LinearReLU", "Conv2dReLU", "fuse", "use_kernels"]


# ======================================================================================
# The fused operation, with its one branch to the CUDA kernels
# ======================================================================================
def bias_relu(z, b, axis=1, use_kernels=True):
    """y = max(z + b, 0), with b along ``axis`` of z.

    axis=1: z (N, F), b (F,)  — a Linear layer's output, one bias per column;
    axis=0: z (F, M), b (F,)  — Conv2d's output matrix, one bias per row (channel).
    z must be a temporary the caller owns: the CPU path overwrites it and returns it.
    """
    k = gpu_kernels(z, use_kernels)
    if k is not None:
        return (k.bias_relu_forward if axis == 1 else k.bias_relu_rows_forward)(z, b)
    xp = get_array_module(z)
    z += b if axis == 1 else b.reshape(-1, 1)
    return xp.maximum(z, 0, out=z)


def bias_relu_backward(dout, y, axis=1, use_kernels=True):
    """The backward of :func:`bias_relu`: returns (dz, db) with dz = dout * (y > 0) (y's shape)
    and db = dz summed over the axis the bias does not run along (F,)."""
    k = gpu_kernels(dout, use_kernels)
    if k is not None:
        fn = k.bias_relu_backward if axis == 1 else k.bias_relu_rows_backward
        return fn(get_array_module(dout).ascontiguousarray(dout), y)
    dz = dout * (y > 0)
    return dz, dz.sum(axis=1 - axis)


# ======================================================================================
# Fused layers
# ======================================================================================
class _FusedReLU(Layer):
    """A layer (``self.layer``) followed by ReLU. The parameters, gradients and buffers are the
    wrapped layer's own dicts, so the wrapped layer, and any model holding it, sees every update."""

    base: type = Layer          # the kind of layer this one fuses with ReLU
    use_kernels = True          # on the GPU: the fused CUDA kernel

    def __init__(self, layer=None, **config):
        """``LinearReLU(linear)`` wraps an existing layer; ``LinearReLU(**linear_config)`` makes
        a new one (as loading a checkpoint does)."""
        super().__init__()
        if layer is None:
            layer = self.base(**config)
        if type(layer) is not self.base:
            raise TypeError(f"{type(self).__name__} fuses a {self.base.__name__} with the ReLU after "
                            f"it; got {type(layer).__name__}.")
        self.layer = layer

    # The arrays live in the wrapped layer (as a Sequential's live in its layers).
    params = property(lambda self: self.layer.params, lambda self, value: None)
    grads = property(lambda self: self.layer.grads, lambda self, value: None)
    buffers = property(lambda self: self.layer.buffers, lambda self, value: None)

    def _map_arrays(self, fn):
        self.layer._map_arrays(fn)
        self.cache = None
        return self

    def get_config(self):
        return self.layer.get_config()


class LinearReLU(_FusedReLU):
    """``y = max(x @ W + b, 0)``: Linear then ReLU in one layer (made by :func:`fuse`).

    x: (N, in_features) -> y: (N, out_features); params are the Linear's ``W`` and ``b``.
    Forward: z = x @ W (cuBLAS on the GPU), then y = max(z + b, 0) in one pass.
    Backward: dz = dout * (y > 0) and db = dz.sum(axis=0) in one pass; dW = x.T @ dz,
    dx = dz @ W.T as in Linear.
    """

    base = Linear

    def forward(self, x):
        z = self.layer.forward_no_bias(x)                          # x @ W: (N, out_features)
        self.cache = y = bias_relu(z, self.layer.params["b"], 1, self.use_kernels)
        return y

    def backward(self, dout):
        dz = self.backward_params(dout)
        return lowp_matmul(dz, self.layer.params["W"].T)               # dx: (N, in_features)

    def backward_params(self, dout):
        """Fill grads only; returns dz = dL/d(x @ W + b): (N, out_features)."""
        dz, db = bias_relu_backward(dout, self._saved(), 1, self.use_kernels)
        self.layer.backward_params(dz, db)
        return dz


class Conv2dReLU(_FusedReLU):
    """``y = max(conv(x, W) + b, 0)``: Conv2d then ReLU in one layer (made by :func:`fuse`).

    x: (N, C_in, H, W) -> y: (N, C_out, OH, OW); params are the Conv2d's ``W`` and ``b``.
    The convolution's output is the matrix W_mat @ cols of shape (F, N*OH*OW), one row per
    output channel, so here the bias runs along rows (``bias_relu(..., axis=0)``).
    """

    base = Conv2d

    def forward(self, x):
        conv = self.layer
        z = conv.forward_no_bias(x)                                # (F, N*OH*OW)
        self.cache = y = bias_relu(z, conv.params["b"], 0, self.use_kernels)
        return conv.as_image(y)                                    # (N, F, OH, OW), a view

    def backward(self, dout):
        return self.layer.backward_input(self.backward_params(dout))

    def backward_params(self, dout):
        """Fill grads only; returns dz as the matrix (F, N*OH*OW)."""
        conv = self.layer
        dz, db = bias_relu_backward(conv.as_matrix(dout), self._saved(), 0, self.use_kernels)
        return conv.backward_params(conv.as_image(dz), db)


FUSIONS = {Linear: LinearReLU, Conv2d: Conv2dReLU}


# ======================================================================================
# Rewriting a model
# ======================================================================================
def fuse(model: Sequential) -> Sequential:
    """A new Sequential computing the same function as ``model``, with every Linear or Conv2d
    that is directly followed by a ReLU fused with it (:class:`LinearReLU`, :class:`Conv2dReLU`).

    The new model shares ``model``'s layers and parameters; each fused ReLU's place holds an
    Identity so that parameter names stay the same. Pairs with anything between them (a
    BatchNorm2d, a Dropout) are left as they are. ``model`` itself is not changed.
    """
    if not isinstance(model, Sequential):
        raise TypeError(f"fuse takes a Sequential model (dl.MLP, dl.CNN, dl.Sequential), got "
                        f"{type(model).__name__}.")
    layers = list(model.layers)
    for i in range(len(layers) - 1):
        fused = FUSIONS.get(type(layers[i]))
        if fused is not None and type(layers[i + 1]) is ReLU:
            layers[i], layers[i + 1] = fused(layers[i]), Identity()
    return Sequential(*layers).train(model.training)


def use_kernels(model, enabled: bool = True):
    """Let (``enabled=True``, the default) or stop every layer of ``model`` that has a
    hand-written CUDA kernel from using it on the GPU: Conv2d's im2col/col2im, MaxPool2d's
    pooling kernels and the fused layers' bias+ReLU. Without them the same layers run plain
    CuPy code. No effect on the CPU. A loss (dl.SoftmaxCrossEntropy) or an optimizer (dl.SGD,
    dl.Adam) works too: its fused kernel. Returns ``model``."""
    layers = model.layers if isinstance(model, Sequential) else [model]
    for layer in layers:
        for part in (layer, getattr(layer, "layer", None)):
            if part is not None and hasattr(part, "use_kernels"):
                part.use_kernels = bool(enabled)
    return model
