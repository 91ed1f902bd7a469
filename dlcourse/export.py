"""Exporting a model to ONNX, so other tools can run it: :func:`export_onnx`.

Introduced in notebook ``12_checkpoint_to_service``. ONNX is a file format for a computation
graph: nodes (``Gemm``, ``Conv``, ``Relu``, ...) reading and writing named tensors, and the
weights stored beside them ("initializers"). Any ONNX runtime (onnxruntime, TensorRT, a
browser's) can then run the model without dlcourse.

The graph is written by hand with the ``onnx`` package's helper API, one node pattern per
layer type, looked up in :data:`EXPORTERS`:

=================  ====================================================================
dlcourse layer     ONNX nodes
=================  ====================================================================
Linear             ``Gemm(x, W, b)``; W is stored (in, out), so ``transB=0``
Conv2d             ``Conv(x, W, b)`` with ``kernel_shape``, ``strides``, ``pads``
MaxPool2d          ``MaxPool`` (floor mode, as dlcourse)
ReLU/Sigmoid/Tanh  ``Relu`` / ``Sigmoid`` / ``Tanh``
Flatten            ``Flatten(axis=1)``
BatchNorm2d        ``BatchNormalization`` with the running statistics (evaluation mode)
LayerNorm          ``LayerNormalization`` over the last axes (``axis = -len(normalized_shape)``)
GlobalAvgPool2d    ``GlobalAveragePool`` (N, C, 1, 1) then ``Flatten(axis=1)``
Dropout, Identity  nothing: the identity in evaluation mode
LinearReLU         ``Gemm`` then ``Relu`` (the fused layers of ``dl.fuse``)
Conv2dReLU         ``Conv`` then ``Relu``
Sequential         its layers, one after another (MLP, CNN and ResNet are Sequentials)
Residual           its block and its shortcut (or x itself), then ``Add``
Embedding          ``Gather(W, ids)``                              (lessons 15-16)
PositionalEmbed.   ``Add`` of ``W[:T]`` (``Shape``, ``Slice``: T is read from x)
GELU               the tanh form from ``Mul``, ``Add``, ``Tanh`` (opset 17 has no Gelu)
MultiHeadAttn.     ``MatMul`` + ``Add`` per projection, ``Reshape``/``Transpose`` into heads,
                   ``MatMul``, ``Mul`` by 1/sqrt(d), the causal mask (``Trilu``) added,
                   ``Softmax``, ``MatMul``, heads merged, output projection
FeedForward        ``MatMul`` + ``Add``, GELU, ``MatMul`` + ``Add``
RMSNorm            x / ``Sqrt``(``ReduceMean``(x·x) + eps) · g (opset 17 has no
                   RMSNormalization; it came in opset 23)
SwiGLU             ``MatMul`` ×2, x·``Sigmoid``(x) · up, ``MatMul``
MHA, rope=True     as above, q and k turned first: angles from ``Range`` over T, ``Cos``,
                   ``Sin``, the pairs as ``Reshape`` + ``Slice``, ``Mul``/``Sub``/``Add``,
                   ``Concat``
Transformer        ``Gather``, the blocks (Sequentials of Residuals), ``LayerNormalization``,
                   the head as ``MatMul`` + ``Add``; its input is int64 token ids (N, T)
RNN, LSTM          ``Transpose`` to time-first, ONNX's ``RNN`` / ``LSTM`` (gates reordered
                   i, f, g, o -> i, o, f, c; no initial state: it starts at zeros), back
RecurrentLM        ``Gather``, its RNN/LSTM layers, the head as ``MatMul`` + ``Add``
=================  ====================================================================

A new layer type (the int8 layers of quantization, say) adds its own pattern with
:func:`register_exporter`; a layer with no pattern is refused, naming it.

    dl.export_onnx(model, "cnn.onnx", input_shape=(1, 8, 8))   # one sample's shape
    # onnxruntime.InferenceSession("cnn.onnx").run(None, {"input": x})[0] == model's logits

The graph has one input ``"input"`` of shape ``(N, *input_shape)`` with a dynamic batch axis
``N``, and one output ``"logits"``. The IR version and opset are set explicitly (a newer
``onnx`` could otherwise write a file an older onnxruntime refuses).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ._io import atomic_write
from .backend import to_device, to_numpy
from .conv import Conv2d, MaxPool2d
from .fusion import Conv2dReLU, LinearReLU
from .inference import InputError, check_parameters_finite
from .layers import (BatchNorm2d, Dropout, Flatten, GlobalAvgPool2d, Identity, Layer, LayerNorm,
                     Linear, ReLU, Residual, Sequential, Sigmoid, Tanh)
from .shapes import as_pair
from .attention import MultiHeadAttention
from .transformer import GELU, GELU_A, GELU_C, Embedding, FeedForward, PositionalEmbedding, Transformer
from .modern_block import ROPE_BASE, RMSNorm, SwiGLU
from .recurrent import LSTM, RNN, RecurrentLM

__all__ = ["export_onnx", "register_exporter", "EXPORTERS", "ExportError", "OnnxGraph",
           "OPSET", "IR_VERSION", "INPUT_NAME", "OUTPUT_NAME", "CHARS_KEY", "require"]

OPSET = 17          # the ONNX operator set the nodes follow
IR_VERSION = 9      # the file format version: onnxruntime >= 1.15 reads it
INPUT_NAME, OUTPUT_NAME = "input", "logits"
CHARS_KEY = "dlcourse.chars"   # metadata: the characters a language model's ids stand for


class ExportError(ValueError):
    """The model cannot be written as ONNX (a layer with no ONNX pattern, a bad input shape)."""


def require(module: str):
    """Import ``onnx`` or ``onnxruntime``, or say how to install them (they are optional)."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{module} is not installed; ONNX export and the prediction service "
                          f"are optional parts of dlcourse: python -m pip install -e "
                          f"\".[serve]\" (or pip install onnx onnxruntime).") from None


class OnnxGraph:
    """The graph being written: nodes, initializers (weights) and fresh tensor names.

    An exporter adds to it and returns the name of the tensor its layer outputs::

        W = g.weight("W", layer.params["W"])       # an initializer, float32 unless told
        y = g.node("Gemm", [x, W, b])              # a node; returns its output's name
    """

    def __init__(self):
        self.onnx = require("onnx")
        self.nodes, self.initializers = [], []
        self._used: set[str] = {INPUT_NAME}
        self.prefix = ""             # "3." while layer 3 of a Sequential is exported

    def name(self, base: str) -> str:
        """A tensor name not used yet, starting with the current layer's prefix."""
        name, i = f"{self.prefix}{base}", 1
        while name in self._used:
            name, i = f"{self.prefix}{base}_{i}", i + 1
        self._used.add(name)
        return name

    def weight(self, base: str, array, dtype=np.float32) -> str:
        """Store ``array`` (NumPy or CuPy) as an initializer; returns its name. ``dtype=None``
        keeps the array's own dtype (int8 weights and their zero points, for instance)."""
        array = np.asarray(to_numpy(array))
        if dtype is not None:
            array = array.astype(dtype)
        name = self.name(base)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], outputs: int = 1, **attributes):
        """Add one node; returns its output name (a list of names when ``outputs`` > 1)."""
        names = [self.name(op.lower()) for _ in range(outputs)]
        self.nodes.append(self.onnx.helper.make_node(op, inputs, names, name=self.name(op),
                                                     **attributes))
        return names[0] if outputs == 1 else names


EXPORTERS: dict[type, callable] = {}   # layer class -> fn(layer, graph, x_name) -> output name


def register_exporter(*layer_types):
    """Decorator: ``fn(layer, graph, x) -> y`` writes ``layer``'s nodes into ``graph``
    (an :class:`OnnxGraph`) reading tensor ``x``, and returns the name of its output.

    The exact class is looked up (a subclass of Linear that computes something else must
    register its own pattern); Sequential's subclasses (MLP, CNN, ...) export as Sequential.
    """
    def add(fn):
        for layer_type in layer_types:
            EXPORTERS[layer_type] = fn
        return fn
    return add


def _exporter(layer):
    fn = EXPORTERS.get(type(layer))
    if fn is None and isinstance(layer, Sequential):
        fn = EXPORTERS[Sequential]
    if fn is None:
        known = ", ".join(sorted(t.__name__ for t in EXPORTERS))
        raise ExportError(f"cannot export {type(layer).__name__} to ONNX: no ONNX pattern is "
                          f"registered for it (layers that export: {known}). Write one with "
                          f"@dl.export.register_exporter({type(layer).__name__}), or replace the "
                          f"layer.")
    return fn


# ======================================================================================
# One pattern per layer type
# ======================================================================================
@register_exporter(Sequential)
def _sequential(model, g, x):
    outer = g.prefix
    for i, layer in enumerate(model.layers):
        g.prefix = f"{outer}{i}."
        x = _exporter(layer)(layer, g, x)
    g.prefix = outer
    return x


@register_exporter(Linear)
def _linear(layer, g, x):
    # y = x @ W + b: Gemm computes alpha * A @ B + beta * C; W is (in, out) already.
    return g.node("Gemm", [x, g.weight("W", layer.params["W"]), g.weight("b", layer.params["b"])],
                  transB=0)


@register_exporter(Conv2d)
def _conv2d(layer, g, x):
    F, C, KH, KW = layer.params["W"].shape
    (ph, pw) = as_pair(layer.padding)              # per axis (h, w); ONNX pads: begins, then ends
    return g.node("Conv", [x, g.weight("W", layer.params["W"]), g.weight("b", layer.params["b"])],
                  kernel_shape=[KH, KW], strides=list(as_pair(layer.stride)), pads=[ph, pw, ph, pw])


@register_exporter(MaxPool2d)
def _maxpool2d(layer, g, x):
    return g.node("MaxPool", [x], kernel_shape=list(as_pair(layer.kernel_size)),
                  strides=list(as_pair(layer.stride)))


@register_exporter(ReLU, Sigmoid, Tanh)
def _activation(layer, g, x):
    return g.node(type(layer).__name__.capitalize(), [x])    # Relu, Sigmoid, Tanh


@register_exporter(Flatten)
def _flatten(layer, g, x):
    return g.node("Flatten", [x], axis=1)


@register_exporter(Dropout, Identity)
def _identity(layer, g, x):
    return x                           # evaluation mode: nothing to compute


@register_exporter(BatchNorm2d)
def _batchnorm2d(layer, g, x):
    # Evaluation mode: y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta
    inputs = [g.weight(k, a) for k, a in (("gamma", layer.params["gamma"]),
                                          ("beta", layer.params["beta"]),
                                          ("running_mean", layer.buffers["running_mean"]),
                                          ("running_var", layer.buffers["running_var"]))]
    return g.node("BatchNormalization", [x] + inputs, epsilon=layer.eps)


@register_exporter(LayerNorm)
def _layernorm(layer, g, x):
    # y = gamma * (x - mean) / sqrt(var + eps) + beta over the last len(normalized_shape) axes
    return g.node("LayerNormalization", [x, g.weight("gamma", layer.params["gamma"]),
                                         g.weight("beta", layer.params["beta"])],
                  axis=-len(layer.normalized_shape), epsilon=layer.eps)


@register_exporter(GlobalAvgPool2d)
def _global_avg_pool(layer, g, x):
    return g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)   # (N, C, 1, 1) -> (N, C)


@register_exporter(Residual)
def _residual(layer, g, x):
    # out = shortcut(x) + block(x): both branches read x, then one Add
    outer = g.prefix
    g.prefix = f"{outer}block."
    out = _exporter(layer.block)(layer.block, g, x)
    g.prefix = f"{outer}shortcut."
    skip = x if layer.shortcut is None else _exporter(layer.shortcut)(layer.shortcut, g, x)
    g.prefix = outer
    return g.node("Add", [skip, out])


@register_exporter(LinearReLU, Conv2dReLU)
def _fused_relu(layer, g, x):
    # A fused layer computes exactly its wrapped layer (``layer.layer``) then ReLU.
    inner = layer.layer
    return g.node("Relu", [_exporter(inner)(inner, g, x)])


# -- attention and the transformer (lessons 15-16): x is (N, T, D), so Linear maps are
#    MatMul + Add (Gemm takes 2-D inputs only) -------------------------------------------
def _matmul_add(g, x, W, b, prefix=""):
    """x @ W + b (b None: x @ W alone, a layer without bias)."""
    y = g.node("MatMul", [x, g.weight(f"{prefix}W", W)])
    return y if b is None else g.node("Add", [y, g.weight(f"{prefix}b", b)])


def _constant(g, base, value, dtype=np.float32):
    return g.weight(base, np.asarray(value, dtype=dtype), dtype=None)


@register_exporter(Embedding)
def _embedding(layer, g, x):
    return g.node("Gather", [g.weight("W", layer.params["W"]), x], axis=0)


@register_exporter(PositionalEmbedding)
def _positional(layer, g, x):
    # x + W[:T], T = x.shape[1], read from x so any T <= max_len runs
    T = g.node("Slice", [g.node("Shape", [x]), _constant(g, "one", [1], np.int64),
                         _constant(g, "two", [2], np.int64)])
    rows = g.node("Slice", [g.weight("W", layer.params["W"]), _constant(g, "zero", [0], np.int64),
                            T, _constant(g, "axis0", [0], np.int64)])
    return g.node("Add", [x, rows])


@register_exporter(GELU)
def _gelu(layer, g, x):
    # 0.5 x (1 + tanh(c (x + a x^3)))
    x3 = g.node("Mul", [g.node("Mul", [x, x]), x])
    u = g.node("Mul", [g.node("Add", [x, g.node("Mul", [x3, _constant(g, "a", GELU_A)])]),
                       _constant(g, "c", GELU_C)])
    one_plus_t = g.node("Add", [g.node("Tanh", [u]), _constant(g, "one", 1.0)])
    return g.node("Mul", [g.node("Mul", [x, _constant(g, "half", 0.5)]), one_plus_t])


@register_exporter(FeedForward)
def _feedforward(layer, g, x):
    h = _matmul_add(g, x, layer.fc1.params["W"], layer.fc1.params["b"], "fc1.")
    h = _gelu(layer.act, g, h)
    return _matmul_add(g, h, layer.fc2.params["W"], layer.fc2.params["b"], "fc2.")


@register_exporter(MultiHeadAttention)
def _multi_head_attention(layer, g, x):
    p, H = layer.params, layer.heads
    d = layer.d_model // H
    heads_shape = _constant(g, "heads_shape", [0, 0, H, d], np.int64)     # 0: keep N, T

    def heads(name, perm):          # (N, T, D) -> (N, T, H, d) -> transposed by perm
        y = _matmul_add(g, x, p[f"W{name}"], p.get(f"b{name}"), name)
        return g.node("Transpose", [g.node("Reshape", [y, heads_shape])], perm=perm)
    q, kT, v = heads("q", [0, 2, 1, 3]), heads("k", [0, 2, 3, 1]), heads("v", [0, 2, 1, 3])
    if layer.rope:                  # turn q and k (N, H, T, d) by their positions
        q = _rope(g, q, x, d)
        kT = g.node("Transpose", [_rope(g, g.node("Transpose", [kT], perm=[0, 1, 3, 2]), x, d)],
                    perm=[0, 1, 3, 2])
    scores = g.node("Mul", [g.node("MatMul", [q, kT]), _constant(g, "scale", 1 / np.sqrt(d))])
    if layer.causal:                # add -1e9 above the diagonal: exp() makes those weights 0
        T = g.node("Slice", [g.node("Shape", [x]), _constant(g, "one", [1], np.int64),
                             _constant(g, "two", [2], np.int64)])
        ones = g.node("ConstantOfShape", [g.node("Concat", [T, T], axis=0)],
                      value=g.onnx.numpy_helper.from_array(np.ones(1, np.float32)))
        above = g.node("Sub", [_constant(g, "one_f", 1.0), g.node("Trilu", [ones], upper=0)])
        scores = g.node("Add", [scores, g.node("Mul", [above, _constant(g, "minus_big", -1e9)])])
    a = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])        # (N, H, T, d)
    merged = g.node("Reshape", [g.node("Transpose", [a], perm=[0, 2, 1, 3]),
                                _constant(g, "model_shape", [0, 0, layer.d_model], np.int64)])
    return _matmul_add(g, merged, p["Wo"], p.get("bo"), "o")


def _rope(g, y, x, d):
    """dl.rope of y (N, H, T, d), T read from x (N, T, D): the angles t·θ_i computed in the
    graph (Range, Cos, Sin), so any T runs; the pairs (y[2i], y[2i+1]) as a last axis of 2."""
    T = g.node("Slice", [g.node("Shape", [x]), _constant(g, "one", [1], np.int64),
                         _constant(g, "two", [2], np.int64)])
    T = g.node("Squeeze", [T])                                                 # a scalar
    t = g.node("Cast", [g.node("Range", [_constant(g, "zero_i", 0, np.int64), T,
                                         _constant(g, "one_i", 1, np.int64)])], to=1)  # float
    theta = ROPE_BASE ** (-np.arange(0, d, 2, dtype=np.float64) / d)                   # (d/2,)
    angles = g.node("Mul", [g.node("Unsqueeze", [t, _constant(g, "axis1", [1], np.int64)]),
                            g.weight("theta", theta)])                                 # (T, d/2)
    last = _constant(g, "last", [-1], np.int64)
    cos, sin = (g.node("Unsqueeze", [g.node(op, [angles]), last]) for op in ("Cos", "Sin"))
    pairs = g.node("Reshape", [y, _constant(g, "pairs", [0, 0, 0, d // 2, 2], np.int64)])
    x0, x1 = (g.node("Slice", [pairs, _constant(g, f"from{i}", [i], np.int64),
                               _constant(g, f"to{i}", [i + 1], np.int64), last]) for i in (0, 1))
    y0 = g.node("Sub", [g.node("Mul", [x0, cos]), g.node("Mul", [x1, sin])])
    y1 = g.node("Add", [g.node("Mul", [x0, sin]), g.node("Mul", [x1, cos])])
    return g.node("Reshape", [g.node("Concat", [y0, y1], axis=-1),
                              _constant(g, "head_shape", [0, 0, 0, d], np.int64)])


@register_exporter(RMSNorm)
def _rmsnorm(layer, g, x):
    # g · x / sqrt(mean(x²) + eps) over the last axis
    ms = g.node("ReduceMean", [g.node("Mul", [x, x])], axes=[-1], keepdims=1)
    rms = g.node("Sqrt", [g.node("Add", [ms, _constant(g, "eps", layer.eps)])])
    return g.node("Mul", [g.node("Div", [x, rms]), g.weight("g", layer.params["g"])])


@register_exporter(SwiGLU)
def _swiglu(layer, g, x):
    p = layer.params
    a = _matmul_add(g, x, p["W_gate"], None, "gate.")
    b = _matmul_add(g, x, p["W_up"], None, "up.")
    h = g.node("Mul", [g.node("Mul", [a, g.node("Sigmoid", [a])]), b])
    return _matmul_add(g, h, p["W_down"], None, "down.")


@register_exporter(Transformer)
def _transformer(model, g, x):
    outer = g.prefix
    for name in ("embedding", "position", "blocks", "norm"):
        layer = getattr(model, name)
        g.prefix = f"{outer}{name}."
        x = _exporter(layer)(layer, g, x)
    g.prefix = f"{outer}head."
    x = _matmul_add(g, x, model.head.params["W"], model.head.params["b"])
    g.prefix = outer
    return x


@register_exporter(RNN, LSTM)
def _recurrent(layer, g, x):
    # ONNX's RNN/LSTM are time-first: X (T, N, D) -> Y (T, 1, N, H); W (1, G·H, D),
    # R (1, G·H, H), B (1, 2·G·H) = [input bias, recurrent bias]. Its LSTM gates are i, o, f, c.
    p, H = layer.params, layer.hidden
    order = [0, 3, 1, 2] if isinstance(layer, LSTM) else [0]           # ours: i, f, g, o

    def onnx_gates(a):              # (..., G·H) -> the gate blocks in ONNX's order
        return np.concatenate([to_numpy(a)[..., k * H:(k + 1) * H] for k in order], axis=-1)
    W, R = onnx_gates(p["Wx"]).T[None], onnx_gates(p["Wh"]).T[None]
    B = np.concatenate([onnx_gates(p["b"]), np.zeros(len(order) * H)])[None]
    xt = g.node("Transpose", [x], perm=[1, 0, 2])
    y = g.node(type(layer).__name__, [xt, g.weight("W", W), g.weight("R", R), g.weight("B", B)],
               hidden_size=H)
    y = g.node("Squeeze", [y, _constant(g, "axis1", [1], np.int64)])      # (T, N, H)
    return g.node("Transpose", [y], perm=[1, 0, 2])


@register_exporter(RecurrentLM)
def _recurrent_lm(model, g, x):
    outer = g.prefix
    g.prefix = f"{outer}embedding."
    x = _embedding(model.embedding, g, x)
    for i, layer in enumerate(model.rnn.layers):
        g.prefix = f"{outer}rnn.{i}."
        x = _recurrent(layer, g, x)
    g.prefix = f"{outer}head."
    x = _matmul_add(g, x, model.head.params["W"], model.head.params["b"])
    g.prefix = outer
    return x


# ======================================================================================
# The model
# ======================================================================================
def _input_shape(input_shape) -> tuple[int, ...]:
    if isinstance(input_shape, (str, bytes)):      # "64" would be read as (6, 4)
        raise ExportError(f"input_shape must be one sample's shape as numbers, e.g. (64,) or "
                          f"(1, 8, 8), not the text {input_shape!r}.")
    if isinstance(input_shape, (int, np.integer)):
        input_shape = (input_shape,)
    try:
        sizes = list(input_shape)
        if any(isinstance(s, (bool, np.bool_)) or float(s) != int(s) for s in sizes):
            raise ValueError
        shape = tuple(int(s) for s in sizes)
    except (TypeError, ValueError, OverflowError):
        raise ExportError(f"input_shape must be one sample's shape, e.g. (64,) for an MLP on "
                          f"the digits or (1, 8, 8) for a CNN, got {input_shape!r}.") from None
    if not shape or min(shape) < 1:
        raise ExportError(f"input_shape must be one sample's shape (positive sizes, no batch "
                          f"axis), e.g. (64,) or (1, 8, 8); got {input_shape!r}.")
    return shape


def to_onnx(model: Layer, input_shape):
    """The model as an in-memory ``onnx.ModelProto`` (see :func:`export_onnx`)."""
    onnx = require("onnx")
    helper = onnx.helper
    shape = _input_shape(input_shape)
    try:                   # a NaN weight would give an ONNX file that answers NaN to everything
        check_parameters_finite(model)
    except InputError as err:
        raise ExportError(str(err)) from None
    # Run the model once on a sample first: a shape that does not fit fails here, with the
    # layer's own error message, instead of in some other tool later.
    was_training = model.training
    model.eval()
    try:
        in_dtype = np.dtype(getattr(model, "input_dtype", None) or model.dtype or np.float32)
        sample = to_device(np.zeros((1,) + shape, dtype=in_dtype), model.device)
        y = model.forward(sample)
    except (ValueError, TypeError) as err:
        raise ExportError(f"the model does not take samples of shape {shape} (input_shape, "
                          f"without the batch axis): {err}") from None
    finally:
        model.train(was_training)
    g = OnnxGraph()
    out = _exporter(model)(model, g, INPUT_NAME)
    if out == INPUT_NAME:                  # a model that computes nothing: still a valid graph
        out = g.node("Identity", [out])
    g.nodes[-1].output[0] = OUTPUT_NAME    # the last node writes the graph's output
    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        g.nodes, f"dlcourse_{type(model).__name__}",
        [helper.make_tensor_value_info(INPUT_NAME, onnx.TensorProto.INT64 if in_dtype.kind in "iu"
                                       else f32, ["N", *shape])],
        [helper.make_tensor_value_info(OUTPUT_NAME, f32, ["N", *to_numpy(y).shape[1:]])],
        initializer=g.initializers)
    from ._version import __version__
    proto = helper.make_model(graph, producer_name="dlcourse", producer_version=__version__,
                              opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = IR_VERSION
    if isinstance(getattr(model, "chars", None), str):   # so a service can read text prompts
        helper.set_model_props(proto, {CHARS_KEY: model.chars})
    onnx.checker.check_model(proto, full_check=True)     # types and shapes inferred and checked
    return proto


def export_onnx(model: Layer, path, input_shape) -> Path:
    """Write ``model`` as an ONNX file at ``path``; returns the path.

    Args:
        model: a dlcourse model (dl.MLP, dl.CNN, a Sequential of exportable layers, a model
            from ``dl.fuse``), on the CPU or the GPU. It is exported as in evaluation mode (Dropout does nothing,
            BatchNorm uses its running statistics), in float32.
        path: the ``.onnx`` file to write (atomically: a failure leaves any old file as is).
        input_shape: ONE sample's shape, without the batch axis: ``(64,)`` for an MLP on the
            flat digits, ``(1, 8, 8)`` for a CNN on 8x8 images, ``(T,)`` for a ``dl.Transformer``
            (whose input is int64 token ids: a model's ``input_dtype`` says so). The batch
            axis is dynamic.

    Raises:
        ExportError: a layer has no ONNX pattern (it is named), the model does not take
            samples of ``input_shape``, or its parameters hold NaN or infinity (nothing is
            written).
        ImportError: the ``onnx`` package is not installed (``pip install -e ".[serve]"``).
    """
    proto = to_onnx(model, input_shape)
    path = Path(path).expanduser()
    if not path.parent.is_dir():
        raise FileNotFoundError(f"Cannot write {path}: the folder {path.parent} does not exist.")
    with atomic_write(path) as f:
        f.write(proto.SerializeToString())
    return path
