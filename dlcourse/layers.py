"""Layers: each one a forward/backward pair, written as its math.

Introduced in notebook ``03_backpropagation`` (Linear and the activations), used from
``04a_mlp_on_digits`` on (Sequential), ``04b_optimizers_and_regularization`` (Dropout),
``07_training_a_cnn`` (BatchNorm2d) and ``07b_layernorm_and_residual_networks`` (LayerNorm,
GlobalAvgPool2d, Residual).

Every layer follows one contract:

* ``forward(x)`` computes the output and caches exactly what backward needs;
* ``backward(dout)`` takes dL/d(output), returns dL/dx and fills ``grads``;
* ``params`` and ``grads`` are dicts with the same keys, so an optimizer is one loop over
  ``(params[k], grads[k])``.

A layer keeps the dtype it is given (float32 by default, float64 for gradient checks) and
runs on whichever backend its input lives on: ``xp = get_array_module(x)``.

Reading map: here each layer's ``forward``/``backward`` (the math) and its ``check`` (the input
it takes). ``@checked`` (which runs the checks), the ``Layer`` base class (modes, device and
dtype moves, state dicts, configs) and rebuilding from a checkpoint: ``layer_base.py``.
Conv2d, MaxPool2d: ``conv.py`` (lessons 06a-06b); the fused layers: ``fusion.py`` (lesson 08d).
"""
from __future__ import annotations

import numpy as np

from ._validate import float_dtype, number, shape_str, whole_number
from .backend import get_array_module, random_uniform, rng
from .layer_base import Container, Layer, check_init, checked, eval_mode
from .layer_base import build_layer  # noqa: F401  (kept for dlcourse.quantize; lives in layer_base)
from .ops import matmul

# ==== Linear ==========================================================================
class Linear(Layer):
    """Fully connected layer: ``y = x @ W + b``.

    x: (N, in_features)  ->  y: (N, out_features)
    params["W"]: (in_features, out_features), params["b"]: (out_features,)
    Backward: dW = x.T @ dout (in, out), db = dout summed over the batch (out,),
    dx = dout @ W.T (N, in).

    Weights start as normals of standard deviation ``std``, biases at zero; ``init`` picks it:

    * ``"he"`` (default): std = sqrt(2 / in_features). Each output sums in_features products,
      so Var(y) = in_features * Var(W) * E[x²]; ReLU zeroes half of its input, halving E[x²],
      and Var(W) = 2 / in_features keeps the signal's size the same from layer to layer
      (He et al., 2015).
    * ``"xavier"``: std = sqrt(2 / (in_features + out_features)), the compromise between
      keeping the forward signal (1 / in_features) and the backward gradient
      (1 / out_features) the same size, for tanh or sigmoid (Glorot & Bengio, 2010).
    * a positive number: that std itself, e.g. ``init=0.01`` (too small for a deep network:
      the signal shrinks layer by layer) or ``init=1.0`` (too large: it grows).
    """

    input_shape, input_ndim = "(N, in_features)", 2

    def __init__(self, in_features: int, out_features: int, dtype=np.float32, seed=None,
                 init="he"):
        super().__init__()
        self.in_features = whole_number(in_features, "Linear(in_features=...)")
        self.out_features = whole_number(out_features, "Linear(out_features=...)")
        dtype = float_dtype(dtype)
        self.init = init_std = check_init(init)
        if init_std == "he":
            std = np.sqrt(2.0 / self.in_features)
        elif init_std == "xavier":
            std = np.sqrt(2.0 / (self.in_features + self.out_features))
        else:
            std = init_std
        W = rng(seed).standard_normal((self.in_features, self.out_features)) * std
        self.params = {"W": W.astype(dtype), "b": np.zeros(self.out_features, dtype=dtype)}

    @checked
    def forward(self, x):
        """x: (N, in_features) -> x @ W + b: (N, out_features)."""
        out = self.matrix_forward(x)
        out += self.params["b"]
        return out

    @checked
    def backward(self, dout, input_grad: bool = True):
        """dout: (N, out_features) -> dx: (N, in_features); fills grads["W"], grads["b"].
        ``input_grad=False`` skips dx (a model's first layer needs none) and returns None."""
        return self.matrix_backward(dout, dout.sum(axis=0), input_grad)

    def matrix_forward(self, x):
        """z = x @ W: (N, out_features), without the bias (LinearReLU adds its own); caches x."""
        self.cache = x
        return matmul(x, self.params["W"])

    def matrix_backward(self, dz, db, input_grad: bool = True):
        """dz (N, out_features), db (out_features,) -> dx = dz @ W.T; fills grads (dW = x.T @ dz)."""
        x = self.cache
        self.grads = {"W": matmul(x.T, dz), "b": db}
        return matmul(dz, self.params["W"].T) if input_grad else None

    def check(self, x):
        super().check(x)
        if x.shape[1] != self.in_features:
            hint = (f" Does in_features match what comes in: the previous layer's out_features, "
                    f"or the data's {x.shape[1]} features?")
            if x.shape[0] == self.in_features:
                hint += " (Or is x transposed? Then use x.T.)"
            raise ValueError(f"Linear(in_features={self.in_features}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.in_features}.{hint}")

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features,
                "init": self.init}


# ==== Activations =====================================================================
class Identity(Layer):
    """``y = x``; the gradient passes unchanged. Any shape. It holds the place of a layer that
    another has absorbed (``dl.fuse`` puts one where each fused ReLU was)."""

    @checked
    def forward(self, x):
        return x

    @checked
    def backward(self, dout):
        return dout


class ReLU(Layer):
    """``y = max(x, 0)``; the gradient passes where the input was positive. Any shape."""

    input_shape = "(N, ...)"

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        out = xp.maximum(x, 0)
        self.cache = out
        return out

    @checked
    def backward(self, dout):
        out = self.cache
        return dout * (out > 0)


class Sigmoid(Layer):
    """``y = 1 / (1 + exp(-x))``, written as ``(1 + tanh(x/2)) / 2`` so it never overflows.

    dy/dx = y (1 - y). Any shape.
    """

    input_shape = "(N, ...)"

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        out = xp.tanh(x * 0.5)
        out += 1
        out *= 0.5
        self.cache = out
        return out

    @checked
    def backward(self, dout):
        y = self.cache
        return dout * y * (1 - y)


class Tanh(Layer):
    """``y = tanh(x)``; dy/dx = 1 - y². Any shape."""

    input_shape = "(N, ...)"

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        out = xp.tanh(x)
        self.cache = out
        return out

    @checked
    def backward(self, dout):
        y = self.cache
        return dout * (1 - y * y)


ACTIVATIONS = {"relu": ReLU, "sigmoid": Sigmoid, "tanh": Tanh}


# ==== Shape and regularization ========================================================
class Flatten(Layer):
    """(N, d1, d2, ...) -> (N, d1*d2*...), e.g. (N, C, H, W) -> (N, C*H*W)."""

    input_shape = "(N, d1, ...)"

    @checked
    def forward(self, x):
        self.cache = x
        return x.reshape(x.shape[0], -1)

    @checked
    def backward(self, dout):
        x = self.cache
        if x.flags.c_contiguous:
            return dout.reshape(x.shape)
        # Give dx the memory layout of x (a conv output is channel-major): the layers below
        # then read their gradient in the same order as their own arrays.
        dx = get_array_module(dout).empty_like(x, dtype=dout.dtype)
        dx[...] = dout.reshape(x.shape)
        return dx

    def check(self, x):
        super().check(x)
        if x.ndim < 2:
            raise ValueError(f"Flatten expects a batch axis and at least one more, got shape "
                             f"{shape_str(x.shape)}.")


class Dropout(Layer):
    """Inverted dropout: in training, zero each input with probability ``p`` and scale the
    rest by 1/(1-p), so evaluation (the identity) needs no rescaling. Any shape.

    The mask comes from dlcourse's seeded generator (``dl.manual_seed``).
    """

    input_shape = "(N, ...)"

    def __init__(self, p: float = 0.5):
        super().__init__()
        self.p = number(p, "Dropout probability p", "Dropout(0.5)", 0.0, 1.0)

    @checked
    def forward(self, x):
        if not self.training or self.p == 0.0:
            self.cache = None                     # no mask: the identity
            return x
        xp = get_array_module(x)
        keep = random_uniform(xp, x.shape, x.dtype) >= self.p
        mask = keep.astype(x.dtype) / x.dtype.type(1.0 - self.p)
        self.cache = mask
        return x * mask

    @checked
    def backward(self, dout):
        mask = self.cache
        return dout if mask is None else dout * mask

    def get_config(self):
        return {"p": self.p}


# ==== Batch normalization =============================================================
class BatchNorm2d(Layer):
    """Batch normalization over (N, H, W) for each channel.

    x: (N, C, H, W) -> y: (N, C, H, W);  y = gamma * (x - mean) / sqrt(var + eps) + beta
    params["gamma"], params["beta"]: (C,); buffers running_mean, running_var: (C,)

    Training uses the batch's mean and (biased) variance and updates the running statistics
    with ``momentum`` (the running variance is the unbiased one, as in PyTorch); evaluation
    uses the running statistics.
    """

    input_shape, input_ndim = "(N, C, H, W)", 4

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 dtype=np.float32):
        super().__init__()
        C = self.num_features = whole_number(num_features, "BatchNorm2d(num_features=...)")
        self.eps = number(eps, "BatchNorm2d(eps=...)", "eps=1e-5", 0.0, None, low_open=True)
        self.momentum = number(momentum, "BatchNorm2d(momentum=...)", "momentum=0.1", 0.0, 1.0,
                               high_open=False)
        dtype = float_dtype(dtype)
        self.params = {"gamma": np.ones(C, dtype), "beta": np.zeros(C, dtype)}
        self.buffers = {"running_mean": np.zeros(C, dtype), "running_var": np.ones(C, dtype)}

    @checked
    def forward(self, x):
        N, C, H, W = x.shape
        xp = get_array_module(x)
        if self.training:
            mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
            self._update_running_stats(mean, var, M=N * H * W)
        else:
            mean, var = self.buffers["running_mean"], self.buffers["running_var"]
        inv_std = 1.0 / xp.sqrt(var + x.dtype.type(self.eps))
        x_hat = (x - mean.reshape(1, C, 1, 1)) * inv_std.reshape(1, C, 1, 1)
        self.cache = (x_hat, inv_std, self.training)
        return self.params["gamma"].reshape(1, C, 1, 1) * x_hat + self.params["beta"].reshape(1, C, 1, 1)

    @checked
    def backward(self, dout, input_grad: bool = True):
        x_hat, inv_std, training = self.cache
        N, C, H, W = dout.shape
        self.grads = {"gamma": (dout * x_hat).sum(axis=(0, 2, 3)), "beta": dout.sum(axis=(0, 2, 3))}
        if not input_grad:
            return None
        dx_hat = dout * self.params["gamma"].reshape(1, C, 1, 1)
        if not training:   # the statistics are constants
            return dx_hat * inv_std.reshape(1, C, 1, 1)
        # mean and variance depend on x too: dx = (dx_hat - mean(dx_hat) - x_hat*mean(dx_hat*x_hat)) / std
        mean_dxh = dx_hat.mean(axis=(0, 2, 3), keepdims=True)
        mean_dxh_xh = (dx_hat * x_hat).mean(axis=(0, 2, 3), keepdims=True)
        return (dx_hat - mean_dxh - x_hat * mean_dxh_xh) * inv_std.reshape(1, C, 1, 1)

    def _update_running_stats(self, mean, var, M):
        """running = (1 - momentum) running + momentum batch; the variance unbiased (M / (M-1))."""
        m = self.momentum
        self.buffers["running_mean"] = (1 - m) * self.buffers["running_mean"] + m * mean
        self.buffers["running_var"] = (1 - m) * self.buffers["running_var"] + m * var * (M / (M - 1))

    def check(self, x):
        super().check(x)
        if x.shape[1] != self.num_features:
            raise ValueError(f"BatchNorm2d(num_features={self.num_features}) got x of shape "
                             f"{shape_str(x.shape)}: axis 1 must be {self.num_features}.")
        if self.training and x.shape[0] * x.shape[2] * x.shape[3] < 2:
            raise ValueError("BatchNorm2d in training mode needs more than one value per "
                             f"channel, got x of shape {shape_str(x.shape)}. Use a larger "
                             "batch, or call model.eval().")

    def get_config(self):
        return {"num_features": self.num_features, "eps": self.eps, "momentum": self.momentum}


# ==== Layer normalization =============================================================
class LayerNorm(Layer):
    """Layer normalization: each sample normalized over its own last axes (Ba et al., 2016).

    x: (N, ..., *S) -> y: the same shape, S = ``normalized_shape`` (an int D means (D,)):
    y = gamma * (x - mean) / sqrt(var + eps) + beta, mean and (biased) var over the
    len(S) last axes of each sample, one pair per sample (BatchNorm2d: one per channel, over
    the batch). params["gamma"] (ones), params["beta"] (zeros): S. No running statistics: a
    sample's own statistics, in training and in evaluation alike, so one sample alone is fine.
    Backward: BatchNorm's formula with its means taken over the normalized axes instead of the
    batch; dgamma, dbeta are sums over the leading axes (N, ...).
    """

    input_shape = "(N, ..., *normalized_shape)"

    def __init__(self, normalized_shape, eps: float = 1e-5, dtype=np.float32):
        super().__init__()
        shape = (normalized_shape,) if np.isscalar(normalized_shape) else tuple(normalized_shape)
        if not shape:
            raise ValueError("LayerNorm(normalized_shape=...) needs at least one axis, e.g. "
                             "LayerNorm(64) or LayerNorm((C, H, W)); got ().")
        self.normalized_shape = S = tuple(whole_number(s, "LayerNorm(normalized_shape=...)")
                                          for s in shape)
        self.eps = number(eps, "LayerNorm(eps=...)", "eps=1e-5", 0.0, None, low_open=True)
        dtype = float_dtype(dtype)
        self.params = {"gamma": np.ones(S, dtype), "beta": np.zeros(S, dtype)}

    @checked
    def forward(self, x):
        xp = get_array_module(x)
        axes = tuple(range(-len(self.normalized_shape), 0))          # the last len(S) axes
        mean, var = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
        inv_std = 1.0 / xp.sqrt(var + x.dtype.type(self.eps))        # (N, ..., 1, ..., 1)
        x_hat = (x - mean) * inv_std
        self.cache = (x_hat, inv_std)
        return self.params["gamma"] * x_hat + self.params["beta"]

    @checked
    def backward(self, dout, input_grad: bool = True):
        x_hat, inv_std = self.cache
        axes = tuple(range(-len(self.normalized_shape), 0))
        leading = tuple(range(dout.ndim - len(self.normalized_shape)))   # (N, ...)
        self.grads = {"gamma": (dout * x_hat).sum(axis=leading), "beta": dout.sum(axis=leading)}
        if not input_grad:
            return None
        dx_hat = dout * self.params["gamma"]
        # mean and var depend on x: dx = (dx_hat - mean(dx_hat) - x_hat*mean(dx_hat*x_hat)) / std
        mean_dxh = dx_hat.mean(axis=axes, keepdims=True)
        mean_dxh_xh = (dx_hat * x_hat).mean(axis=axes, keepdims=True)
        return (dx_hat - mean_dxh - x_hat * mean_dxh_xh) * inv_std

    def check(self, x):
        super().check(x)
        S = self.normalized_shape
        if x.ndim <= len(S) or tuple(x.shape[-len(S):]) != S:
            what = ("a batch axis first: x[None] for one sample" if tuple(x.shape) == S else
                    f"its last {len(S)} ax{'is' if len(S) == 1 else 'es'} to be {shape_str(S)}")
            raise ValueError(f"LayerNorm(normalized_shape={shape_str(S)}) got x of shape "
                             f"{shape_str(x.shape)}: it needs {what}. normalized_shape names the "
                             f"LAST axes of x, those each sample is normalized over.")

    def get_config(self):
        return {"normalized_shape": list(self.normalized_shape), "eps": self.eps}


class GlobalAvgPool2d(Layer):
    """The mean of each channel over its positions: x (N, C, H, W) -> (N, C).

    Backward: each of the H*W positions weighed 1/(H*W), so each gets dout / (H*W).
    """

    input_shape, input_ndim = "(N, C, H, W)", 4

    @checked
    def forward(self, x):
        self.cache = x.shape
        return x.mean(axis=(2, 3))

    @checked
    def backward(self, dout):
        N, C, H, W = self.cache
        dx = get_array_module(dout).empty((N, C, H, W), dtype=dout.dtype)
        dx[...] = (dout / (H * W)).reshape(N, C, 1, 1)
        return dx


# ==== Sequential ======================================================================
class Sequential(Container):
    """Layers applied one after another; backward runs them in reverse.

    ``params`` and ``grads`` are views keyed ``"<index>.<name>"`` (e.g. ``"0.W"``) over the
    layers' own arrays, so an optimizer that updates them in place updates the layers; state
    dicts, moves and ``predict`` come from ``layer_base.Container``.
    """

    @checked
    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x

    @checked
    def backward(self, dout, input_grad: bool = True):
        """Backpropagate dout through the layers in reverse; returns dL/dx.

        A training step needs the parameters' gradients only: with ``input_grad=False`` the
        first layer with parameters is asked for no dL/dx (as PyTorch does for inputs that need
        no gradient), the layers before it are not run, and backward returns None.
        """
        first = next((i for i, layer in enumerate(self.layers) if layer.params), 0)
        for i in range(len(self.layers) - 1, -1, -1):
            if not input_grad and i == first and self.layers[i].params:
                return self.layers[i].backward(dout, input_grad=False)
            dout = self.layers[i].backward(dout)
        return dout


def unfused_layers(model, what: str, takes: str) -> list:
    """``model.layers`` of a Sequential made of unfused layers, or the TypeError of ``what``
    (``"quantize"``) saying what it takes (``takes``: ``"dl.MLP, dl.CNN, dl.Sequential"``)."""
    layers = getattr(model, "layers", None)
    if not isinstance(model, Sequential) or layers is None:
        raise TypeError(f"{what} takes a Sequential model ({takes}), got "
                        f"{type(model).__name__}.")
    fused = [type(layer).__name__ for layer in layers if hasattr(layer, "layer")]
    if fused:
        raise TypeError(f"{what} takes the unfused model, but this one holds {fused[0]}: pass "
                        f"the model dl.fuse was made from.")
    return layers


class Residual(Container):
    """A residual block (He et al., 2016): ``out = shortcut(x) + block(x)``.

    ``block``: a layer or a Sequential, whose output has the shape of ``shortcut(x)``;
    ``shortcut``: None (the identity, so out = x + block(x)) or a layer, e.g. a 1x1 Conv2d
    and BatchNorm2d where the block changes the number of channels (a projection).
    x: (N, ...) -> out: the block's output shape. Backward: the sum's gradient is dout for
    each term, so dout goes down both paths and dx is the sum of the two: dx = dout +
    block.backward(dout) for the identity. Keys ``"block.*"`` and ``"shortcut.*"``
    (``layer_base.Container``: state dicts, moves, modes, saving).
    """

    layer_names = ("block", "shortcut")

    def __init__(self, block, shortcut=None):
        super().__init__(*[layer for layer in (block, shortcut) if layer is not None])
        self.block, self.shortcut = block, shortcut

    @checked
    def forward(self, x):
        out = self.block.forward(x)
        skip = x if self.shortcut is None else self.shortcut.forward(x)
        if skip.shape != out.shape:
            fix = ("the block must keep x's shape, or give a shortcut that maps x to the "
                   "block's output, e.g. Residual(block, shortcut=Sequential(Conv2d(C_in, "
                   "C_out, 1), BatchNorm2d(C_out)))" if self.shortcut is None else
                   "make the shortcut give the block's output shape")
            raise ValueError(f"Residual: the block's output has shape {shape_str(out.shape)} but "
                             f"the shortcut's ({'x itself' if self.shortcut is None else 'its'}) "
                             f"has {shape_str(skip.shape)}: they are added, so {fix}.")
        return skip + out

    @checked
    def backward(self, dout, input_grad: bool = True):
        """dout -> dx = block.backward(dout) + shortcut.backward(dout) (dout itself for the
        identity); fills the block's and the shortcut's grads. ``input_grad=False``: None."""
        dx = self.block.backward(dout)
        dx_skip = dout if self.shortcut is None else self.shortcut.backward(dout)
        return dx + dx_skip if input_grad else None
