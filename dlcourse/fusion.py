"""Fused layers: a Linear or Conv2d and the ReLU after it, done as one layer.

Introduced in notebook ``08d_fusion_and_graphs``. Adding a bias and applying ReLU are elementwise:
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

Reading map (lesson 08d): :func:`bias_relu` and its backward (the one thing fusion adds),
then ``LinearReLU`` and ``Conv2dReLU``: each runs its wrapped layer's own matrix steps
(``Linear``'s product, ``Conv2d.matrix_forward`` / ``matrix_backward`` in ``conv.py``) around
them. The CUDA kernels are ``kernels/fused.py`` (``bias_relu.cu``).
"""
from __future__ import annotations

from . import kernels
from .backend import get_array_module
from .conv import Conv2d, as_matrix
from .kernels import use_kernels
from .layer_base import Layer, checked
from .layers import Identity, Linear, ReLU, Residual, Sequential

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
    k = kernels.kernels_for(z, use_kernels, same_dtype=(b,))
    if k is not None:
        return (k.bias_relu_forward if axis == 1 else k.bias_relu_rows_forward)(z, b)
    xp = get_array_module(z)
    z += b if axis == 1 else b.reshape(-1, 1)
    return xp.maximum(z, 0, out=z)


def bias_relu_backward(dout, y, axis=1, use_kernels=True):
    """The backward of :func:`bias_relu`: returns (dz, db) with dz = dout * (y > 0) (y's shape)
    and db = dz summed over the axis the bias does not run along (F,)."""
    k = kernels.kernels_for(dout, use_kernels, same_dtype=(y,))
    if k is not None:
        fn = k.bias_relu_backward if axis == 1 else k.bias_relu_rows_backward
        return fn(get_array_module(dout).ascontiguousarray(dout), y)
    dz = dout * (y > 0)
    return dz, dz.sum(axis=1 - axis)


# ======================================================================================
# Fused layers
# ======================================================================================
class FusedReLU(Layer):
    """A layer (``self.layer``) followed by ReLU. The parameters, gradients and buffers are the
    wrapped layer's own dicts, so the wrapped layer, and any model holding it, sees every update."""

    base: type = Layer          # the kind of layer this one fuses with ReLU
    use_kernels = True          # on the GPU: the fused CUDA kernel

    def __init__(self, layer=None, **config):
        """``LinearReLU(linear)`` wraps an existing layer; ``LinearReLU(**linear_config)`` makes
        a new one (as loading a checkpoint does)."""
        # No Layer.__init__: the arrays live in the wrapped layer (as a Sequential's in its layers).
        self.clear_cache()
        if layer is None:
            layer = self.base(**config)
        if type(layer) is not self.base:
            raise TypeError(f"{type(self).__name__} fuses a {self.base.__name__} with the ReLU after "
                            f"it; got {type(layer).__name__}.")
        self.layer = layer

    params = property(lambda self: self.layer.params)
    buffers = property(lambda self: self.layer.buffers)

    @property
    def grads(self):
        return self.layer.grads

    @grads.setter
    def grads(self, value):    # backward fills the wrapped layer's grads
        self.layer.grads = value

    def check(self, x):
        self.layer.check(x)    # the wrapped layer's checks: its layout, its sizes

    def map_arrays(self, fn):
        self.layer.map_arrays(fn)
        self.clear_cache()
        return self

    def get_config(self):
        return self.layer.get_config()


class LinearReLU(FusedReLU):
    """``y = max(x @ W + b, 0)``: Linear then ReLU in one layer (made by :func:`fuse`).

    x: (N, in_features) -> y: (N, out_features); params are the Linear's ``W`` and ``b``.
    Linear's own matrix steps make z = x @ W (cuBLAS on the GPU); then y = max(z + b, 0) in
    one pass. Backward: dz = dout * (y > 0) and db = dz.sum(axis=0) in one pass, then Linear's
    matrix backward (dW = x.T @ dz, dx = dz @ W.T).
    """

    base = Linear

    @checked
    def forward(self, x):
        z = self.layer.matrix_forward(x)                                  # (N, out_features)
        y = bias_relu(z, self.params["b"], 1, self.use_kernels)
        self.cache = y
        return y

    @checked
    def backward(self, dout, input_grad: bool = True):
        dz, db = bias_relu_backward(dout, self.cache, 1, self.use_kernels)   # (N, out), (out,)
        return self.layer.matrix_backward(dz, db, input_grad)


class Conv2dReLU(FusedReLU):
    """``y = max(conv(x, W) + b, 0)``: Conv2d then ReLU in one layer (made by :func:`fuse`).

    x: (N, C, H, W) -> y: (N, F, OH, OW); params are the Conv2d's ``W`` and ``b``.
    Conv2d's own matrix steps make z = W_mat @ cols (F, N*OH*OW), one row per output channel,
    so here the bias runs along rows (``bias_relu(..., axis=0)``); backward hands dz and db to
    Conv2d's matrix backward.
    """

    base = Conv2d

    @checked
    def forward(self, x):
        z = self.layer.matrix_forward(x)                                  # (F, N*OH*OW)
        y = bias_relu(z, self.params["b"], 0, self.use_kernels)
        self.cache = y
        return self.layer.as_image(y, x.shape)                            # (N, F, OH, OW)

    @checked
    def backward(self, dout, input_grad: bool = True):
        dz, db = bias_relu_backward(as_matrix(dout), self.cache, 0,
                                    self.use_kernels)                      # (F, N*OH*OW), (F,)
        return self.layer.matrix_backward(dz, db, input_grad)


FUSIONS = {Linear: LinearReLU, Conv2d: Conv2dReLU}


# ======================================================================================
# Rewriting a model
# ======================================================================================
def fuse(model: Sequential) -> Sequential:
    """A new Sequential computing the same function as ``model``, with every Linear or Conv2d
    that is directly followed by a ReLU fused with it (:class:`LinearReLU`, :class:`Conv2dReLU`),
    also inside residual blocks (a Residual gives a new Residual of its fused branches).

    The new model shares ``model``'s layers and parameters; each fused ReLU's place holds an
    Identity so that parameter names stay the same. Pairs with anything between them (a
    BatchNorm2d, a Dropout) are left as they are. ``model`` itself is not changed.
    """
    if isinstance(model, Residual):
        branches = [fuse(b) if isinstance(b, (Sequential, Residual)) else b
                    for b in (model.block, model.shortcut)]
        return Residual(*branches).train(model.training)
    if not isinstance(model, Sequential):
        raise TypeError(f"fuse takes a Sequential model (dl.MLP, dl.CNN, dl.Sequential) or a "
                        f"Residual, got {type(model).__name__}.")
    layers = [fuse(l) if isinstance(l, (Sequential, Residual)) else l for l in model.layers]
    for i in range(len(layers) - 1):
        fused = FUSIONS.get(type(layers[i]))
        if fused is not None and type(layers[i + 1]) is ReLU:
            layers[i], layers[i + 1] = fused(layers[i]), Identity()
    return Sequential(*layers).train(model.training)
