"""The plumbing under every layer: the ``Layer`` base class, the input checks, containers,
and rebuilding a layer from its saved config. Nothing here is a layer's math.

Introduced with ``dlcourse/layers.py`` in notebook ``03_backpropagation``; a learner reads
``layers.py`` and ``conv.py`` for the math and comes here only to see what the base class
provides:

* :class:`Layer`: ``params``/``grads``/``buffers``, train/eval mode, moves to another device or
  dtype (``to``, ``astype``), state dicts (``state_dict``, ``load_state_dict``), the config that
  rebuilds a layer (``get_config``), and :meth:`Layer.clear_cache`;
* :func:`checked`: the decorator written on each library layer's ``forward`` and ``backward``;
* :class:`Container`: what a model made of layers shares (Sequential, lesson 04a);
* :func:`build_layer`: a layer or model rebuilt from a checkpoint's JSON (lesson 12);
* :func:`kernels_for`: the one hook through which a layer asks for a hand-written GPU kernel
  (``dlcourse.kernels`` plugs itself in; on the CPU the answer is always None).

**Why a decorator for the checks.** The checks a layer needs are declared in one place per
layer (``input_shape``, ``input_ndim``, and its own ``check`` method), and ``@checked`` on
its ``forward`` and ``backward`` runs them. The decorator is written where it applies, so what
runs is what the class says: a learner's own ``MyConv.forward`` is exactly what runs, unchecked
unless the learner writes ``@checked`` above it too. The alternative, ``Layer.__call__``
checking before ``forward`` and Sequential calling ``layer(x)``, would hide nothing either, but
a ``layer.forward(x)`` called directly (as every notebook does) would skip the checks, and
backward has no call to hang its check on. The cost of the decorator: one line per method,
and a subclass that overrides ``forward`` without it gives up the friendly errors.

**Rebuilding.** A checkpoint names each layer by its class name (``"Linear"``). The library's
own classes (defined in a ``dlcourse`` module) always win: a learner's class called ``Linear``
does not change what ``dl.load`` builds. A learner's own class is found by its name among the
subclasses of :class:`Layer` defined so far (as before); one whose name a library layer has
is saved under its module-qualified name.
"""
from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Mapping

import numpy as np

from ._suggest import did_you_mean
from ._validate import check_input, float_dtype, number, shape_str, whole_number
from .backend import device_of, get_array_module, to_device

__all__ = ["Layer", "Container", "checked", "check_init", "check_state", "eval_mode", "build_layer",
           "layer_type", "kernels_for", "plug_in_kernels", "every_layer"]


# ======================================================================================
# The checks, written on each library layer's forward and backward
# ======================================================================================
def checked(method):
    """``@checked`` above ``forward(self, x)``: first ``self.check(x)``, and the output's shape
    is remembered. Above ``backward(self, dout)``: first a check that forward ran and that dout
    has its output's shape."""
    if method.__name__ == "forward":
        @functools.wraps(method)
        def forward(self, x, *args, **kwargs):
            self.check(x)
            out = method(self, x, *args, **kwargs)
            self.out_shape = getattr(out, "shape", None)
            return out
        return forward

    @functools.wraps(method)
    def backward(self, dout, *args, **kwargs):
        name, want = type(self).__name__, getattr(self, "out_shape", None)
        if want is None and getattr(self, "cache", None) is None:   # (a forward without
            raise RuntimeError(                                      # @checked keeps a cache)
                f"{name}.backward() needs forward() first: it uses what forward saved. Call "
                f"out = layer.forward(x), then layer.backward(dout) with dout shaped like out.")
        got = getattr(dout, "shape", None)
        if want is not None and got != want:       # shapes are tuples, on NumPy and on CuPy
            given = shape_str(got) if got is not None else f"a {type(dout).__name__}"
            raise ValueError(f"{name}.backward got dout of shape {given}; it must match the "
                             f"forward output, {shape_str(want)} (dout is dL/d(out), one number "
                             f"per number forward returned).")
        return method(self, dout, *args, **kwargs)
    return backward


# ======================================================================================
# The base class
# ======================================================================================
class Layer:
    """Base class: parameters, gradients, train/eval mode, device and dtype moves, saving.

    A layer declares the input it takes: ``input_shape`` (letters, e.g. ``"(N, C, H, W)"``;
    None: nothing is checked, as for a container) and ``input_ndim`` (the ranks it takes; None:
    any). ``check(x)`` refuses what the layer cannot take (not an array, not floating-point, the
    wrong rank, another dtype or device than the parameters); a layer that needs more (Linear:
    the last axis is ``in_features``) adds it in its own ``check``. ``@checked`` runs it.
    """

    training = True
    input_shape: str | None = None
    input_ndim = None                # an int, a tuple of ints, or None for any rank

    def __init__(self):
        self.params: dict = {}
        self.grads: dict = {}
        self.buffers: dict = {}   # state that is saved but not trained (BatchNorm's running stats)
        self.clear_cache()

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

    def clear_cache(self):
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
        self.clear_cache()
        return self

    def to(self, device: str):
        """Move parameters to ``"cpu"`` or ``"gpu"``. Returns the layer."""
        return self.map_arrays(lambda a: to_device(a, device))

    def astype(self, dtype):
        """Cast parameters to ``dtype`` (e.g. ``np.float64`` for a gradient check): a
        floating-point type, since training moves the weights by fractions."""
        try:
            dtype = float_dtype(dtype)
        except TypeError:          # also what np.dtype() cannot read: "fp32", a list, ...
            given = np.dtype(dtype).name if _is_dtype(dtype) else repr(dtype)
            raise TypeError(f"{type(self).__name__}.astype(dtype) takes a floating-point type "
                            f"(np.float32, np.float64 or np.float16), got {given}: a model's "
                            f"weights are real numbers that training moves by fractions, and "
                            f"integer weights cannot. For an int8 model for inference use "
                            f"dl.quantize(model, X_calibration).") from None
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
        name, known = type(self).__name__, [*self.params, *self.buffers]
        unknown = [k for k in state if k not in known]
        if unknown:          # a misspelt key would otherwise be skipped without a word
            raise KeyError(f"{name}: the state has entries this layer does not: {unknown}."
                           f"{did_you_mean(unknown[0], known)} Its entries are "
                           f"{_some(known)} (from layer.state_dict()).")
        for group in (self.params, self.buffers):
            for k in group:
                if k not in state:
                    raise KeyError(f"{name}: the state has no entry {k!r}; its entries "
                                   f"are {_some(known)}.")
                value = _state_array(name, k, state[k])
                if tuple(value.shape) != tuple(group[k].shape):
                    raise ValueError(f"{name}: {k} should have shape "
                                     f"{shape_str(group[k].shape)}, the state has "
                                     f"{shape_str(value.shape)}.")
                group[k][...] = to_device(value, device_of(group[k]))   # casts the dtype

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def check_init(init):
    """Linear's ``init`` checked: "he", "xavier", or a positive std (a float)."""
    if isinstance(init, str):
        if init.lower() in ("he", "xavier"):
            return init.lower()
        raise ValueError(f"Linear(init=...) must be 'he' (for ReLU), 'xavier' (for tanh or "
                         f"sigmoid) or a positive number, the weights' standard deviation "
                         f"(e.g. init=0.01); got {init!r}.")
    return number(init, "Linear(init=...)", "init='he', init='xavier' or init=0.01", 0.0,
                  None, low_open=True)


def _is_dtype(dtype) -> bool:
    try:
        np.dtype(dtype)
        return True
    except TypeError:
        return False


def _some(names, n: int = 12) -> str:
    """A list of names for a message: all of them, or the first ``n`` and how many in all."""
    names = list(names)
    return str(names) if len(names) <= n else f"{str(names[:n])[:-1]}, ...] ({len(names)} in all)"


def _state_array(layer_name, key, value):
    """One entry of a state dict as an array: an array as it is, a list of numbers (from
    ``.tolist()``, or JSON) as a NumPy array; anything else refused, naming the entry."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        array = value
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError):      # ragged lists
            array = None
    if array is None or array.dtype.kind not in "biuf":
        raise TypeError(f"{layer_name}: the state's {key!r} must be an array of numbers (as "
                        f"model.state_dict() gives), got {type(value).__name__}"
                        f"{'' if array is None else f' of dtype {array.dtype}'}. Convert it "
                        f"with np.asarray(..., dtype=np.float32).")
    return array


def check_state(layer, state):
    """Refuse a ``state`` that is not a dict of arrays (a path, say), naming the fix."""
    if not isinstance(state, Mapping):            # a dict, or np.load's NpzFile
        hint = (" To read a checkpoint written by dl.save, use model = dl.load(path)."
                if isinstance(state, (str, os.PathLike)) else "")
        raise TypeError(f"{type(layer).__name__}.load_state_dict takes a dict of arrays (from "
                        f"model.state_dict()), got {type(state).__name__}.{hint}")


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


# ======================================================================================
# Containers: a model made of layers (Sequential's plumbing)
# ======================================================================================
class Container(Layer):
    """Layers in ``self.layers``: ``params``, ``grads`` and ``buffers`` are views keyed
    ``"<name>.<key>"`` (e.g. ``"0.W"``) over the layers' own arrays, so an optimizer that
    updates them in place updates the layers; modes, moves and state dicts reach every layer.

    A layer's name is its index (Sequential: ``"0"``, ``"1"``, ...), or, for a container that
    names its layers in ``layer_names`` (Residual: ``("block", "shortcut")``, attributes that
    hold a layer or None), that name: ``"block.0.W"``. A container inside a container nests
    the names: ``"3.block.0.W"``."""

    layer_names: tuple | None = None   # None: the layers are named by their index

    def __init__(self, *layers):
        # No Layer.__init__: a container's params, grads and buffers live in its layers.
        self.clear_cache()
        if len(layers) == 1 and isinstance(layers[0], (list, tuple)):
            layers = tuple(layers[0])
        for i, layer in enumerate(layers):
            if not isinstance(layer, Layer):
                raise TypeError(f"{type(self).__name__} takes layers, but item {i} is "
                                f"{type(layer).__name__}.{_not_a_layer_hint(layer)}")
        self.layers = list(layers)

    def named_layers(self) -> list:
        """``[(name, layer), ...]``: each layer with the prefix of its keys (see the class)."""
        if self.layer_names is None:
            return [(str(i), layer) for i, layer in enumerate(self.layers)]
        return [(name, getattr(self, name)) for name in self.layer_names
                if getattr(self, name) is not None]

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
        return {f"{name}.{k}": v for name, layer in self.named_layers()
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
        self.clear_cache()
        return self

    def state_dict(self):
        return {f"{name}.{k}": v for name, layer in self.named_layers()
                for k, v in layer.state_dict().items()}

    def load_state_dict(self, state):
        check_state(self, state)
        known = list(self.state_dict())
        extra = sorted(set(state) - set(known), key=str)
        if extra:          # a misspelt key would otherwise be skipped without a word
            raise KeyError(f"The state has entries this model does not: {extra}."
                           f"{did_you_mean(extra[0], known)} The model's entries are "
                           f"{_some(known)} (from model.state_dict()).")
        for name, layer in self.named_layers():
            prefix = f"{name}."
            try:
                layer.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
            except (KeyError, ValueError, TypeError) as err:
                raise type(err)(f"layer {name} ({type(layer).__name__}, keys {prefix}*): "
                                f"{err.args[0] if err.args else err}") from None

    def get_config(self):
        """Sequential: ``{"layers": [spec, ...]}``; a container with ``layer_names``:
        ``{name: spec or None, ...}``; each spec ``{"type": ..., "config": ...}``."""
        if self.layer_names is None:
            return {"layers": [_spec(layer) for layer in self.layers]}
        return {name: _spec(getattr(self, name)) for name in self.layer_names}

    @classmethod
    def from_config(cls, config):
        if cls.layer_names is None:
            return cls(*[_build(spec) for spec in config["layers"]])
        return cls(**{name: _build(spec) for name, spec in config.items()})

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, i):
        return self.layers[i]

    def __iter__(self):
        return iter(self.layers)

    def __repr__(self):
        inner = "\n".join(f"  ({name}): {layer!r}".replace("\n", "\n  ")
                          for name, layer in self.named_layers())
        return f"{type(self).__name__}(\n{inner}\n)"


def _spec(layer):
    return None if layer is None else {"type": layer_type(layer), "config": layer.get_config()}


def _build(spec):
    return None if spec is None else build_layer(spec["type"], spec["config"])


def every_layer(model):
    """Every layer of ``model``, depth first: a container's layers (and theirs, as a Residual's
    block inside a Sequential) and the layer inside a fused one; a single layer (or a loss, an
    optimizer) is its own only layer."""
    for layer in getattr(model, "layers", [model]):
        yield layer
        inner = getattr(layer, "layer", None)
        if inner is not None:
            yield inner
        if isinstance(layer, Container):
            yield from every_layer(layer)


def _not_a_layer_hint(item) -> str:
    if isinstance(item, type) and issubclass(item, Layer):
        return (f" Did you pass the class (dl.{item.__name__}) instead of an instance "
                f"(dl.{item.__name__}(...))?")
    if isinstance(item, (list, tuple)):
        return (" Pass the layers one after another, Sequential(a, b, c), or as one list, "
                "Sequential([a, b, c]), not several lists.")
    return " Each item must be a layer such as dl.Linear(64, 10) or dl.ReLU()."


# ======================================================================================
# Rebuilding a layer from its name and config (checkpoints)
# ======================================================================================
def _subclasses(cls=Layer):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _is_library(cls) -> bool:
    return cls.__module__.split(".")[0] == "dlcourse"


def _qualified(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def layer_type(layer) -> str:
    """The name a checkpoint gives ``layer`` (or its class): the class name, or, for a class
    of the learner's that has a library layer's name, its module-qualified name."""
    cls = layer if isinstance(layer, type) else type(layer)
    if _is_library(cls):
        return cls.__name__
    taken = any(_is_library(c) and c.__name__ == cls.__name__ for c in _subclasses())
    return _qualified(cls) if taken else cls.__name__


def find_layer_class(type_name: str) -> type:
    """The class a checkpoint's ``type_name`` names: a library layer of that name first (no
    class of the learner's can replace one), else a class of the learner's, by its
    module-qualified name or its name."""
    classes = list(_subclasses())
    for match in (lambda c: _is_library(c) and c.__name__ == type_name,
                  lambda c: _qualified(c) == type_name,
                  lambda c: c.__name__ == type_name):
        found = [c for c in classes if match(c)]
        if found:
            return found[-1]                      # the latest definition (a re-run cell)
    raise ValueError(f"Unknown layer type {type_name!r}; known: "
                     f"{sorted({c.__name__ for c in classes})}.")


def build_layer(type_name: str, config: dict) -> Layer:
    """Rebuild a layer (or a model) from its type name and ``get_config()``."""
    cls = find_layer_class(type_name)
    if type_name in ("Sequential", "Residual"):     # their configs hold their layers' configs
        return cls.from_config(config)
    return cls(**config)


# ======================================================================================
# The one hook to the hand-written GPU kernels
# ======================================================================================
_kernel_lookup = [None]     # dlcourse.kernels.kernels_for, once dlcourse.kernels is imported


def plug_in_kernels(lookup) -> None:
    """Called by ``dlcourse.kernels`` when it is imported: ``lookup(x, enabled, **checks)``
    answers :func:`kernels_for`."""
    _kernel_lookup[0] = lookup


def kernels_for(x, enabled=True, **checks):
    """The hand-written kernels (the ``dlcourse.kernels`` module) when one can take ``x``,
    else None: always None on the CPU. ``dlcourse.kernels.kernels_for`` decides it."""
    lookup = _kernel_lookup[0]
    return None if lookup is None else lookup(x, enabled, **checks)
