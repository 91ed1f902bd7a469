"""Layers: each one a forward/backward pair.

Introduced in notebook ``03_backpropagation`` (Linear and the activations), used from
``04_mlp_on_digits`` on (Dropout, Sequential) and ``07_training_a_cnn`` (BatchNorm2d).

Every layer follows one contract:

* ``forward(x)`` computes the output and caches exactly what backward needs;
* ``backward(dout)`` takes dL/d(output), returns dL/dx and fills ``grads``;
* ``params`` and ``grads`` are dicts with the same keys, so an optimizer is one loop over
  ``(params[k], grads[k])``.

A layer keeps the dtype it is given (float32 by default, float64 for gradient checks) and
runs on whichever backend its input lives on: ``xp = get_array_module(x)``.
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping

import numpy as np

from ._validate import check_input, float_dtype, number, shape_str, whole_number
from .backend import device_of, get_array_module, random_uniform, rng, to_device
from .ops import matmul

LAYERS: dict[str, type] = {}   # name -> class, so a checkpoint can rebuild a model


class Layer:
    """Base class: parameters, gradients, train/eval mode, device and dtype moves, and the
    checks every layer shares, so that a layer's own ``forward`` and ``backward`` are its math.

    Before a layer's ``forward`` runs, the base class calls ``self.check(x)``: it refuses what
    the layer cannot take (not an array, not floating-point, the wrong rank, another dtype or
    device than the parameters), from the layout the layer declares in ``input_shape``
    (letters, e.g. ``"(N, C, H, W)"``) and ``input_ndim`` (the ranks it takes; None: any). A
    layer that needs more (Linear: the last axis is ``in_features``) adds it in its own
    ``check``. Before ``backward`` runs, the base class checks that forward ran and that
    ``dout`` has the shape of forward's output.
    """

    training = True
    input_shape: str | None = None   # None: the base class checks nothing (a container)
    input_ndim = None                # an int, a tuple of ints, or None for any rank

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        LAYERS[cls.__name__] = cls
        if "forward" in cls.__dict__:
            cls.forward = _checked_forward(cls.__dict__["forward"])
        if "backward" in cls.__dict__:
            cls.backward = _checked_backward(cls.__dict__["backward"])

    def __init__(self):
        self.params: dict = {}
        self.grads: dict = {}
        self.buffers: dict = {}   # state that is saved but not trained (BatchNorm's running stats)
        self.forgot()

    def __call__(self, x):
        return self.forward(x)

    def forward(self, x):
        raise NotImplementedError

    def backward(self, dout):
        raise NotImplementedError

    def check(self, x):
        """Refuse an input that ``forward`` cannot take, saying what it needs."""
        if self.input_shape is not None:
            first = next(iter(self.params.values()), None)
            check_input(self, x, self.input_ndim, self.input_shape, params_like=first)

    def forgot(self):
        """Drop what forward saved (a move to another device or dtype makes it stale)."""
        self.cache = None
        self.out_shape = None     # the shape of forward's output: what dout must have

    # -- modes ----------------------------------------------------------------------------
    def train(self, mode: bool = True):
        """Training mode (Dropout drops, BatchNorm uses batch statistics)."""
        self.training = mode
        return self

    def eval(self):
        """Evaluation mode (Dropout is the identity, BatchNorm uses running statistics)."""
        return self.train(False)

    # -- where and in which precision the parameters live ---------------------------------
    def map_arrays(self, fn):
        """Replace every parameter and buffer ``a`` by ``fn(a)``; gradients and caches go."""
        self.params = {k: fn(v) for k, v in self.params.items()}
        self.buffers = {k: fn(v) for k, v in self.buffers.items()}
        self.grads = {}
        self.forgot()
        return self

    def to(self, device: str):
        """Move parameters to ``"cpu"`` or ``"gpu"``. Returns the layer."""
        return self.map_arrays(lambda a: to_device(a, device))

    def astype(self, dtype):
        """Cast parameters to ``dtype`` (e.g. ``np.float64`` for a gradient check)."""
        return self.map_arrays(lambda a: a.astype(dtype))

    @property
    def device(self) -> str:
        arrays = list(self.params.values()) + list(self.buffers.values())
        return device_of(arrays[0]) if arrays else "cpu"

    @property
    def dtype(self):
        arrays = list(self.params.values())
        return arrays[0].dtype if arrays else None

    def num_parameters(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    # -- saving and rebuilding ------------------------------------------------------------
    def get_config(self) -> dict:
        """The constructor arguments that rebuild this layer (saved in checkpoints)."""
        return {}

    def state_dict(self) -> dict:
        """Every array to save: parameters and buffers (the layer's own arrays, not copies:
        training changes them in place, so copy them to keep a snapshot)."""
        return {**self.params, **self.buffers}

    def load_state_dict(self, state: dict) -> None:
        """Copy ``state``'s arrays into this layer's, in place: each keeps its device and dtype,
        and the layer never shares an array with the caller (``best.load_state_dict(
        model.state_dict())`` keeps a snapshot that training ``model`` does not change)."""
        check_state(self, state)
        for group in (self.params, self.buffers):
            for k in group:
                if k not in state:
                    raise KeyError(f"{type(self).__name__}: the state has no entry {k!r}.")
                if tuple(state[k].shape) != tuple(group[k].shape):
                    raise ValueError(f"{type(self).__name__}: {k} should have shape "
                                     f"{shape_str(group[k].shape)}, the state has "
                                     f"{shape_str(state[k].shape)}.")
                group[k][...] = to_device(state[k], device_of(group[k]))   # casts the dtype

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _checked_forward(forward):
    """forward, after ``self.check(x)``; remembers the output's shape for backward's check."""
    @functools.wraps(forward)
    def checked(self, x, *args, **kwargs):
        self.check(x)
        out = forward(self, x, *args, **kwargs)
        self.out_shape = getattr(out, "shape", None)
        return out
    return checked


def _checked_backward(backward):
    """backward, after checking that forward ran and that dout has its output's shape."""
    @functools.wraps(backward)
    def checked(self, dout, *args, **kwargs):
        name = type(self).__name__
        want = getattr(self, "out_shape", None)
        if want is None:
            raise RuntimeError(f"{name}.backward() needs forward() first: it uses what forward "
                               f"saved. Call out = layer.forward(x), then layer.backward(dout) "
                               f"with dout shaped like out.")
        got = getattr(dout, "shape", None)
        if got != want:                # shapes are tuples, on NumPy and on CuPy
            given = shape_str(got) if got is not None else f"a {type(dout).__name__}"
            raise ValueError(f"{name}.backward got dout of shape {given}; it must match the "
                             f"forward output, {shape_str(want)} (dout is dL/d(out), one number "
                             f"per number forward returned).")
        return backward(self, dout, *args, **kwargs)
    return checked


def check_state(layer, state):
    """Refuse a ``state`` that is not a dict of arrays (a path, say), naming the fix."""
    if not isinstance(state, Mapping):            # a dict, or np.load's NpzFile
        hint = (" To read a checkpoint written by dl.save, use model = dl.load(path)."
                if isinstance(state, (str, os.PathLike)) else "")
        raise TypeError(f"{type(layer).__name__}.load_state_dict takes a dict of arrays (from "
                        f"model.state_dict()), got {type(state).__name__}.{hint}")


# ======================================================================================
# Linear
# ======================================================================================
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
    INITS = ("he", "xavier")

    def __init__(self, in_features: int, out_features: int, dtype=np.float32, seed=None,
                 init="he"):
        super().__init__()
        self.in_features = whole_number(in_features, "Linear(in_features=...)")
        self.out_features = whole_number(out_features, "Linear(out_features=...)")
        dtype = float_dtype(dtype)
        self.init = init_std = self._init(init)
        if init_std == "he":
            std = np.sqrt(2.0 / self.in_features)
        elif init_std == "xavier":
            std = np.sqrt(2.0 / (self.in_features + self.out_features))
        else:
            std = init_std
        W = rng(seed).standard_normal((self.in_features, self.out_features)) * std
        self.params = {"W": W.astype(dtype), "b": np.zeros(self.out_features, dtype=dtype)}

    def forward(self, x):
        """x: (N, in_features) -> x @ W + b: (N, out_features)."""
        out = matmul(x, self.params["W"])
        out += self.params["b"]
        self.cache = x
        return out

    def backward(self, dout, input_grad: bool = True):
        """dout: (N, out_features) -> dx: (N, in_features); fills grads["W"], grads["b"].
        ``input_grad=False`` skips dx (a model's first layer needs none) and returns None."""
        x = self.cache
        self.grads = {"W": matmul(x.T, dout), "b": dout.sum(axis=0)}
        return matmul(dout, self.params["W"].T) if input_grad else None

    def check(self, x):
        super().check(x)
        if x.shape[1] != self.in_features:
            hint = (f" Does in_features match what comes in: the previous layer's out_features, "
                    f"or the data's {x.shape[1]} features?")
            if x.shape[0] == self.in_features:
                hint += " (Or is x transposed? Then use x.T.)"
            raise ValueError(f"Linear(in_features={self.in_features}) got x of shape "
                             f"{shape_str(x.shape)}: the last axis must be {self.in_features}.{hint}")

    @classmethod
    def _init(cls, init):
        """``init`` checked: "he", "xavier", or a positive std (a float)."""
        if isinstance(init, str):
            if init.lower() in cls.INITS:
                return init.lower()
            raise ValueError(f"Linear(init=...) must be 'he' (for ReLU), 'xavier' (for tanh or "
                             f"sigmoid) or a positive number, the weights' standard deviation "
                             f"(e.g. init=0.01); got {init!r}.")
        return number(init, "Linear(init=...)", "init='he', init='xavier' or init=0.01", 0.0,
                      None, low_open=True)

    def get_config(self):
        return {"in_features": self.in_features, "out_features": self.out_features,
                "init": self.init}


# ======================================================================================
# Activations
# ======================================================================================
class Identity(Layer):
    """``y = x``; the gradient passes unchanged. Any shape. It holds the place of a layer that
    another has absorbed (``dl.fuse`` puts one where each fused ReLU was)."""

    def forward(self, x):
        return x

    def backward(self, dout):
        return dout


class ReLU(Layer):
    """``y = max(x, 0)``; the gradient passes where the input was positive. Any shape."""

    input_shape = "(N, ...)"

    def forward(self, x):
        xp = get_array_module(x)
        out = xp.maximum(x, 0)
        self.cache = out
        return out

    def backward(self, dout):
        out = self.cache
        return dout * (out > 0)


class Sigmoid(Layer):
    """``y = 1 / (1 + exp(-x))``, written as ``(1 + tanh(x/2)) / 2`` so it never overflows.

    dy/dx = y (1 - y). Any shape.
    """

    input_shape = "(N, ...)"

    def forward(self, x):
        xp = get_array_module(x)
        out = xp.tanh(x * 0.5)
        out += 1
        out *= 0.5
        self.cache = out
        return out

    def backward(self, dout):
        y = self.cache
        return dout * y * (1 - y)


class Tanh(Layer):
    """``y = tanh(x)``; dy/dx = 1 - y². Any shape."""

    input_shape = "(N, ...)"

    def forward(self, x):
        xp = get_array_module(x)
        out = xp.tanh(x)
        self.cache = out
        return out

    def backward(self, dout):
        y = self.cache
        return dout * (1 - y * y)


ACTIVATIONS = {"relu": ReLU, "sigmoid": Sigmoid, "tanh": Tanh}


# ======================================================================================
# Shape and regularization
# ======================================================================================
class Flatten(Layer):
    """(N, d1, d2, ...) -> (N, d1*d2*...), e.g. (N, C, H, W) -> (N, C*H*W)."""

    input_shape = "(N, d1, ...)"

    def forward(self, x):
        self.cache = x
        return x.reshape(x.shape[0], -1)

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

    def forward(self, x):
        if not self.training or self.p == 0.0:
            self.cache = None                     # no mask: the identity
            return x
        xp = get_array_module(x)
        keep = random_uniform(xp, x.shape, x.dtype) >= self.p
        mask = keep.astype(x.dtype) / x.dtype.type(1.0 - self.p)
        self.cache = mask
        return x * mask

    def backward(self, dout):
        mask = self.cache
        return dout if mask is None else dout * mask

    def get_config(self):
        return {"p": self.p}


# ======================================================================================
# Batch normalization
# ======================================================================================
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


# ======================================================================================
# Sequential
# ======================================================================================
@contextlib.contextmanager
def eval_mode(model):
    """``with eval_mode(model):`` runs the block with the model in evaluation mode (Dropout
    passes everything through, BatchNorm uses its running statistics), then puts back the mode
    the model had, even if the block fails. A model without modes (no ``eval``) is left as is."""
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        yield model
    finally:
        if hasattr(model, "train"):
            model.train(was_training)


class Sequential(Layer):
    """Layers applied one after another; backward runs them in reverse.

    ``params`` and ``grads`` are views keyed ``"<index>.<name>"`` (e.g. ``"0.W"``) over the
    layers' own arrays, so an optimizer that updates them in place updates the layers.
    """

    def __init__(self, *layers):
        # No Layer.__init__: a Sequential's params, grads and buffers live in its layers.
        self.forgot()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                if isinstance(layer, type) and issubclass(layer, Layer):
                    hint = (f" Did you pass the class (dl.{layer.__name__}) instead of an "
                            f"instance (dl.{layer.__name__}(...))?")
                elif isinstance(layer, (list, tuple)):
                    hint = (" Pass the layers one after another, Sequential(a, b, c), or as one "
                            "list, Sequential([a, b, c]), not several lists.")
                else:
                    hint = " Each item must be a layer such as dl.Linear(64, 10) or dl.ReLU()."
                raise TypeError(f"Sequential takes layers, but item {i} is "
                                f"{type(layer).__name__}.{hint}")
        self.layers = list(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer.forward(x)
        return x

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

    def predict(self, x, batch_size: int = 1024):
        """Class indices for x, in evaluation mode, on x's device (restores the mode)."""
        batch_size = whole_number(batch_size, "predict(batch_size=...)")
        check_input(self, x)
        xp = get_array_module(x)
        if x.size and not bool(xp.isfinite(x).all()):
            raise ValueError(f"{type(self).__name__}.predict: x contains NaN or inf values; a "
                             f"prediction from them would mean nothing. Fix the data first: "
                             f"~np.isfinite(x) finds them.")
        with eval_mode(self):
            out = [self.forward(x[i:i + batch_size]).argmax(axis=1) for i in range(0, len(x), batch_size)]
            return xp.concatenate(out) if out else xp.zeros(0, dtype=np.int64)

    def _gather(self, attr):
        return {f"{i}.{k}": v for i, layer in enumerate(self.layers)
                for k, v in getattr(layer, attr).items()}

    params = property(lambda self: self._gather("params"))
    grads = property(lambda self: self._gather("grads"))
    buffers = property(lambda self: self._gather("buffers"))

    def train(self, mode: bool = True):
        self.training = mode
        for layer in self.layers:
            layer.train(mode)
        return self

    def map_arrays(self, fn):   # so Layer.to and Layer.astype reach every layer
        for layer in self.layers:
            layer.map_arrays(fn)
        self.forgot()
        return self

    def state_dict(self):
        return {f"{i}.{k}": v for i, layer in enumerate(self.layers)
                for k, v in layer.state_dict().items()}

    def load_state_dict(self, state):
        check_state(self, state)
        expected = set(self.state_dict())
        extra = set(state) - expected
        if extra:
            raise KeyError(f"The state has entries this model does not: {sorted(extra)}.")
        for i, layer in enumerate(self.layers):
            prefix = f"{i}."
            try:
                layer.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
            except (KeyError, ValueError) as err:
                raise type(err)(f"layer {i} ({type(layer).__name__}, keys {prefix}*): "
                                f"{err.args[0] if err.args else err}") from None

    def get_config(self):
        return {"layers": [{"type": type(l).__name__, "config": l.get_config()} for l in self.layers]}

    @classmethod
    def from_config(cls, config):
        return cls(*[build_layer(spec["type"], spec["config"]) for spec in config["layers"]])

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, i):
        return self.layers[i]

    def __iter__(self):
        return iter(self.layers)

    def __repr__(self):
        inner = "\n".join(f"  ({i}): {layer!r}" for i, layer in enumerate(self.layers))
        return f"{type(self).__name__}(\n{inner}\n)"


def build_layer(type_name: str, config: dict) -> Layer:
    """Rebuild a layer (or a model) from its class name and ``get_config()``."""
    if type_name not in LAYERS:
        raise ValueError(f"Unknown layer type {type_name!r}; known: {sorted(LAYERS)}.")
    cls = LAYERS[type_name]
    if hasattr(cls, "from_config") and type_name == "Sequential":
        return cls.from_config(config)
    return cls(**config)
