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
read from the graph, and there is no checkpoint to compare it with.

An :class:`Engine` is a name, one sample's shape and a function from a batch
``(N, *input_shape)`` of float32 to logits ``(N, K)``; :meth:`Engine.predict` turns logits into
classes and probabilities the way :func:`dlcourse.inference.predict_proba` does.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..backend import to_numpy
from ..export import ExportError, require, to_onnx
from ..fast_inference import infer
from ..inference import classes_and_probabilities

__all__ = ["ENGINES", "VERIFY_SAMPLES", "VERIFY_TOLERANCE", "Engine", "EngineError",
           "dlcourse_engine", "onnxruntime_engine",
           "onnxruntime_available", "exported_engine", "engine_for_checkpoint",
           "engine_for_onnx"]

ENGINES = ("auto", "onnxruntime", "dlcourse")
VERIFY_SAMPLES = 8          # random inputs in [0, 1) on which the two engines must agree
VERIFY_TOLERANCE = 1e-4     # largest |difference| of the logits allowed (dlcourse export's bar)


class EngineError(ValueError):
    """The chosen engine cannot serve this model (the message says why and what to do)."""


@dataclass(frozen=True)
class Engine:
    """``name`` ("onnxruntime" or "dlcourse"), ``input_shape`` (one sample's), ``logits``
    (batch -> (N, K)) and ``note``: how it was chosen or checked, for the start-up line."""
    name: str
    input_shape: tuple
    logits: Callable
    note: str = ""

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
    """An ``onnxruntime.InferenceSession`` with one float input of shape (N, *shape)."""
    name = session.get_inputs()[0].name
    def logits(x):
        return session.run(None, {name: np.ascontiguousarray(x, dtype=np.float32)})[0]
    return Engine("onnxruntime", tuple(shape), logits, note)


def exported_engine(model, shape) -> Engine:
    """``model`` exported to ONNX in memory and run by onnxruntime, after its logits agreed
    with ``dl.infer``'s on :data:`VERIFY_SAMPLES` random inputs (EngineError otherwise)."""
    shape = tuple(shape)
    engine = onnxruntime_engine(_session(to_onnx(model, shape).SerializeToString(),
                                         "the exported model"), shape)
    x = np.random.default_rng(0).random((VERIFY_SAMPLES,) + shape, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        diff = float(np.abs(engine.logits(x) - to_numpy(infer(model, x))).max())
    if not diff <= VERIFY_TOLERANCE:       # NaN fails too
        raise EngineError(f"onnxruntime's logits differ from dl.infer's by {diff:.2e} (more "
                          f"than {VERIFY_TOLERANCE:g}) on {VERIFY_SAMPLES} random inputs: the "
                          f"ONNX export is wrong for this model, so it is not served. Serve it "
                          f"with --engine dlcourse, and report the model's layers.")
    return replace(engine, note=f"exported to ONNX; its logits match dl.infer's to {diff:.1e} "
                                f"on {VERIFY_SAMPLES} random inputs")


def engine_for_checkpoint(model, shape, choice: str = "auto") -> Engine:
    """The engine ``choice`` (one of :data:`ENGINES`) for a loaded checkpoint. ``auto`` falls
    back to dlcourse, saying why, when onnxruntime is missing or a layer has no ONNX pattern;
    a mismatch between the engines is refused whatever the choice."""
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
    if kind != "tensor(float)":
        raise EngineError(f"{what} takes {kind}; the service sends float32 (tensor(float)).")
    rest = dims[1:]
    if not dims or not all(isinstance(d, int) and d > 0 for d in rest):
        raise EngineError(f"{what}'s input has the shape {dims}: the service needs a batch axis "
                          f"and fixed sizes after it, such as ['N', 1, 8, 8].")
    if isinstance(dims[0], int):
        raise EngineError(f"{what}'s input has a fixed batch size {dims[0]} (shape {dims}): the "
                          f"service sends batches of any size; export with a dynamic first "
                          f"axis (dl.export_onnx and dlcourse export write one).")
    return onnxruntime_engine(session, tuple(rest), f"{what}, input {dims} read from the graph")
