"""What runs the model behind ``dlcourse serve``: onnxruntime, or dlcourse's own ``dl.infer``.

Introduced in notebook ``12_checkpoint_to_service``. ``dl.infer`` is the course's engine, written
to be read (lesson 12 measures it against onnxruntime and explains the difference); a service
runs on the engine people deploy with. So ``dlcourse serve`` chooses (``--engine``):

``auto``         onnxruntime when ``onnx`` and ``onnxruntime`` are installed, else dlcourse
                 (the default)
``onnxruntime``  the checkpoint exported to ONNX in memory (``export.to_onnx``) and run by an
                 ``onnxruntime.InferenceSession``; an error if they are not installed
``dlcourse``     ``dl.infer``, the course's own forward pass for inference

An export is trusted only once checked, as ``dlcourse export`` checks it: at start,
onnxruntime's logits and ``dl.infer``'s are compared on :data:`VERIFY_SAMPLES` random inputs,
and the service refuses to start when the largest absolute difference is over
:data:`VERIFY_TOLERANCE` (float32 sums in another order differ in the last digits, a wrong
export by far more). An ``.onnx`` file is served by onnxruntime as it is: its input shape is
read from the graph, and there is no checkpoint to compare it with; but its first output must
be class scores, one float row per input: at start it runs on a batch of
:data:`OUTPUT_CHECK_SAMPLES` samples and is refused unless that output is float
(N, classes) with N rows (not one row for any batch, not int64 labels, not 1-D).

An :class:`Engine` is a name, one sample's shape and a function from a batch
``(N, *input_shape)`` of float32 to logits ``(N, K)``; :meth:`Engine.predict` turns logits into
classes and probabilities the way :func:`dlcourse.inference.predict_proba` does. A language
model's engine (:func:`language_engine`) takes rows of token ids ``(N, T)`` instead (padded with
``inference.PAD``), and its logits are those of each row's next token: ``(N, vocab)``.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..backend import to_numpy
from ..export import CHARS_KEY, ExportError, require, to_onnx
from ..fast_inference import infer
from ..inference import (PAD, Tokens, classes_and_probabilities, next_token_logits,
                         random_inputs, tokens_of)

__all__ = ["ENGINES", "VERIFY_SAMPLES", "VERIFY_TOLERANCE", "OUTPUT_CHECK_SAMPLES", "Engine",
           "EngineError", "check_class_scores",
           "dlcourse_engine", "onnxruntime_engine",
           "onnxruntime_available", "exported_engine", "engine_for_checkpoint",
           "engine_for_onnx", "language_engine"]

ENGINES = ("auto", "onnxruntime", "dlcourse")
VERIFY_SAMPLES = 8          # random inputs in [0, 1) on which the two engines must agree
VERIFY_TOLERANCE = 1e-4     # largest |difference| of the logits allowed (dlcourse export's bar)
OUTPUT_CHECK_SAMPLES = 3    # the batch an .onnx file is tried on at start: N inputs, N rows


class EngineError(ValueError):
    """The chosen engine cannot serve this model (the message says why and what to do)."""


@dataclass(frozen=True)
class Engine:
    """``name`` ("onnxruntime" or "dlcourse"), ``input_shape`` (one sample's), ``logits``
    (batch -> (N, K)) and ``note``: how it was chosen or checked, for the start-up line.
    ``tokens``: for a language model, what it reads (``inference.Tokens``); else None."""
    name: str
    input_shape: tuple
    logits: Callable
    note: str = ""
    tokens: Tokens | None = None

    def predict(self, x):
        """``(classes, probabilities)`` for the batch ``x`` (N, *input_shape)."""
        return classes_and_probabilities(self.logits(x))


def dlcourse_engine(model, shape, note: str = "") -> Engine:
    """The course's own engine: ``dl.infer(model, x)`` (evaluation mode, nothing kept for
    backward; thread-safe, one call at a time)."""
    return Engine("dlcourse", tuple(shape), lambda x: to_numpy(infer(model, x)), note)


def onnxruntime_available() -> bool:
    """True when both ``onnx`` (to export) and ``onnxruntime`` (to run) can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def _session(data: bytes, what: str):
    ort = require("onnxruntime")
    try:
        options = ort.SessionOptions()
        # onnxruntime's threads spin between calls by default: a service's calls come and go,
        # and spinning threads take the cores that parse the next requests.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as err:             # onnxruntime's own types (InvalidProtobuf, Fail, ...)
        raise EngineError(f"onnxruntime cannot load {what}: {' '.join(str(err).split())}") from None


def onnxruntime_engine(session, shape, note: str = "") -> Engine:
    """An ``onnxruntime.InferenceSession`` with one input of shape (N, *shape): float32, or
    int64 token ids."""
    name = session.get_inputs()[0].name
    dtype = np.int64 if session.get_inputs()[0].type == "tensor(int64)" else np.float32
    def logits(x):
        return session.run(None, {name: np.ascontiguousarray(x, dtype=dtype)})[0]
    return Engine("onnxruntime", tuple(shape), logits, note)


def exported_engine(model, shape) -> Engine:
    """``model`` exported to ONNX in memory and run by onnxruntime, after its logits agreed
    with ``dl.infer``'s on :data:`VERIFY_SAMPLES` random inputs (EngineError otherwise)."""
    shape = tuple(shape)
    engine = onnxruntime_engine(_session(to_onnx(model, shape).SerializeToString(),
                                         "the exported model"), shape)
    x = random_inputs(model, shape, VERIFY_SAMPLES)       # token ids for a language model
    with np.errstate(invalid="ignore"):
        diff = float(np.abs(engine.logits(x) - to_numpy(infer(model, x))).max())
    if not diff <= VERIFY_TOLERANCE:       # NaN fails too
        raise EngineError(f"onnxruntime's logits differ from dl.infer's by {diff:.2e} (more "
                          f"than {VERIFY_TOLERANCE:g}) on {VERIFY_SAMPLES} random inputs: the "
                          f"ONNX export is wrong for this model, so it is not served. Serve it "
                          f"with --engine dlcourse, and report the model's layers.")
    return replace(engine, note=f"exported to ONNX; its logits match dl.infer's to {diff:.1e} "
                                f"on {VERIFY_SAMPLES} random inputs")


def language_engine(engine: Engine, tokens: Tokens) -> Engine:
    """``engine`` of a language model (ids (N, T) -> logits (N, T, vocab)) as the engine the
    service runs: rows of ids with :data:`~dlcourse.inference.PAD` after each prompt -> the
    logits of each prompt's next token, (N, vocab)."""
    every_position = engine.logits

    def logits(rows):
        rows = np.asarray(rows).astype(np.int64)
        return next_token_logits(every_position(np.where(rows == PAD, 0, rows)), rows)
    return replace(engine, logits=logits, tokens=tokens)


def engine_for_checkpoint(model, shape, choice: str = "auto") -> Engine:
    """The engine ``choice`` (one of :data:`ENGINES`) for a loaded checkpoint. ``auto`` falls
    back to dlcourse, saying why, when onnxruntime is missing or a layer has no ONNX pattern;
    a mismatch between the engines is refused whatever the choice. A language model's engine
    reads prompts and gives the next token's logits (:func:`language_engine`)."""
    tokens = tokens_of(model, shape)      # None unless a language model
    engine = _engine_for_checkpoint(model, shape, choice)
    return engine if tokens is None else language_engine(engine, tokens)


def _engine_for_checkpoint(model, shape, choice: str) -> Engine:
    if choice not in ENGINES:
        raise EngineError(f"--engine must be one of {', '.join(ENGINES)}, got {choice!r}.")
    if choice == "dlcourse":
        return dlcourse_engine(model, shape, "chosen with --engine dlcourse")
    if not onnxruntime_available():
        if choice == "onnxruntime":
            raise EngineError("--engine onnxruntime needs onnx and onnxruntime: python -m pip "
                              "install -e \".[serve]\" (or leave --engine out to serve with "
                              "dlcourse's own engine).")
        return dlcourse_engine(model, shape, "onnxruntime is not installed (python -m pip "
                                             "install -e \".[serve]\")")
    try:
        return exported_engine(model, shape)
    except ExportError as err:
        if choice == "onnxruntime":
            raise EngineError(f"--engine onnxruntime: this model cannot be exported: {err}") \
                from None
        return dlcourse_engine(model, shape, f"no ONNX export for this model ({err})")


def engine_for_onnx(data: bytes, what: str = "the .onnx file") -> Engine:
    """onnxruntime on an ONNX model's bytes; one sample's shape is read from the graph's
    input, which must be float32 with a dynamic batch axis and fixed sizes after it."""
    session = _session(data, what)
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise EngineError(f"{what} has {len(inputs)} inputs; the service feeds one (a batch).")
    dims, kind = list(inputs[0].shape), inputs[0].type
    if kind == "tensor(int64)" and len(dims) == 2:   # token ids: a language model's export
        return _onnx_language_engine(session, dims, what)
    if kind != "tensor(float)":
        raise EngineError(f"{what} takes {kind}; the service sends float32 (tensor(float)), "
                          f"or int64 token ids (N, T) to a language model.")
    rest = dims[1:]
    if not dims or not all(isinstance(d, int) and d > 0 for d in rest):
        raise EngineError(f"{what}'s input has the shape {dims}: the service needs a batch axis "
                          f"and fixed sizes after it, such as ['N', 1, 8, 8].")
    if isinstance(dims[0], int):
        raise EngineError(f"{what}'s input has a fixed batch size {dims[0]} (shape {dims}): the "
                          f"service sends batches of any size; export with a dynamic first "
                          f"axis (dl.export_onnx and dlcourse export write one).")
    engine = onnxruntime_engine(session, tuple(rest), f"{what}, input {dims} read from the graph")
    outputs = [o.name for o in session.get_outputs()]
    which = (f"output {outputs[0]!r}" if len(outputs) == 1 else
             f"first output {outputs[0]!r} (of {len(outputs)}: {', '.join(map(repr, outputs))}; "
             f"the service reads the first)")
    check_class_scores(engine, f"{what}'s {which}")
    return engine


def check_class_scores(engine: Engine, what: str) -> None:
    """Refuse an engine whose logits, on a batch of :data:`OUTPUT_CHECK_SAMPLES` all-zero
    samples, are not float class scores (N, classes) with one row per input."""
    n = OUTPUT_CHECK_SAMPLES
    try:
        y = np.asarray(engine.logits(np.zeros((n,) + engine.input_shape, np.float32)))
    except Exception as err:             # onnxruntime's own types
        raise EngineError(f"{what} cannot be computed for a batch of {n} all-zero samples of "
                          f"shape {list(engine.input_shape)}: {' '.join(str(err).split())}") \
            from None
    if y.dtype.kind != "f":
        why = (f"{y.dtype} numbers are labels or ids, not scores: the service would take them "
               f"for logits")
    elif y.ndim != 2:
        why = f"a {y.ndim}-D output has no row of scores per input"
    elif y.shape[0] != n:
        why = (f"{y.shape[0]} row(s) for {n} inputs: callers would get another input's answer, "
               f"or none")
    elif y.shape[1] < 2:
        why = "one score per input is not a choice between classes (softmax over it is always 1)"
    else:
        return
    raise EngineError(f"{what} is {y.dtype} of shape {list(y.shape)} for a batch of {n} inputs, "
                      f"and the service needs float class scores of shape (N, classes), one row "
                      f"per input: {why}. Export the model's logits as its first output "
                      f"(dl.export_onnx and dlcourse export write them, named 'logits').")


def _onnx_language_engine(session, dims, what: str) -> Engine:
    """An exported language model: int64 ids (N, T) in, logits (N, T, vocab) out; its
    characters are read from the file's metadata when ``dl.export_onnx`` stored them."""
    out = list(session.get_outputs()[0].shape)
    if not isinstance(dims[1], int) or len(out) != 3 or not isinstance(out[2], int):
        raise EngineError(f"{what} takes int64 {dims} and gives {out}: a language model's "
                          f"export takes ids ['N', T] and gives logits ['N', T, vocab], T and "
                          f"vocab fixed (dlcourse export writes one).")
    chars = session.get_modelmeta().custom_metadata_map.get(CHARS_KEY) or None
    if chars is not None and len(chars) != out[2]:
        chars = None                     # not the model's own: read ids only
    engine = onnxruntime_engine(session, (dims[1],),
                                f"{what}, token ids {dims} read from the graph")
    return language_engine(engine, Tokens(out[2], chars, dims[1]))
