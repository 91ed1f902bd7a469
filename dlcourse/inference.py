"""Using a trained model on new inputs: what it takes, reading inputs from files, and the
class probabilities it gives (the forward pass itself is :func:`dlcourse.infer`). Shared by
``dlcourse predict``, ``dlcourse serve`` and notebook ``12_checkpoint_to_service``.

    shape = input_shape(model)                 # one sample's shape: (64,) or (1, 8, 8)
    x = as_batch(read_inputs("x.npy", shape), shape)
    classes, probs = predict_proba(model, x)   # (N,), (N, K)

A language model (``dl.Transformer``, lesson 15) takes token ids, not numbers to classify:
``tokens_of(model)`` says what it reads (its vocabulary, its characters, its context), and
``tokens.batch(["The ", [5, 7]])`` turns prompts (text or ids) into the int64 rows its
engines take; the answer for each prompt is the distribution of the next token.
"""
from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass

import numpy as np

from ._validate import shape_str
from .backend import to_device, to_numpy
from .conv import Conv2d
from .fast_inference import infer
from .layers import Layer, Linear, Sequential
from .losses import softmax

__all__ = ["InputError", "input_shape", "as_batch", "read_inputs", "read_image",
           "predict_proba", "classes_and_probabilities", "check_parameters_finite", "fits",
           "IMAGE_SUFFIXES", "Tokens", "tokens_of", "random_inputs", "next_token_logits", "PAD"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".pgm", ".tif", ".tiff", ".webp")


class InputError(ValueError):
    """Inputs that do not fit the model (shape, type, non-finite values); the message says
    what was expected."""


def input_shape(model: Layer) -> tuple[int, ...]:
    """One sample's shape for ``model``, without the batch axis.

    The shape ``dl.fit`` trained it on or ``dl.quantize`` calibrated it with, when recorded
    (``model.sample_shape``, kept by ``dl.save``); else from the architecture: dl.MLP([64, ...])
    -> (64,); dl.CNN(1, (8, 8)) -> (1, 8, 8); a Sequential starting with a Linear ->
    (in_features,). A Sequential starting with a Conv2d does not say its image size:
    that is an InputError asking for it.
    """
    recorded = getattr(model, "sample_shape", None)              # fit, quantize, dl.load
    if recorded:
        return tuple(int(s) for s in recorded)
    config = model.get_config()
    if "sizes" in config:                                       # MLP
        return (int(config["sizes"][0]),)
    if "image_size" in config and "in_channels" in config:       # CNN
        return (int(config["in_channels"]), *map(int, config["image_size"]))
    if "vocab" in config and "max_len" in config:                # Transformer: (T,) token ids
        return (int(config["max_len"]),)
    first = model.layers[0] if isinstance(model, Sequential) and model.layers else model
    first = getattr(first, "layer", first)                       # a fused layer's Linear/Conv2d
    if isinstance(first, Linear):
        return (first.in_features,)
    if isinstance(first, Conv2d):
        raise InputError(f"this model starts with a Conv2d({first.in_channels}, ...), which "
                         f"takes images of any size: give the image shape (C, H, W), e.g. "
                         f"--input-shape {first.in_channels},8,8.")
    raise InputError(f"cannot tell what shape of input this {type(model).__name__} takes: give "
                     f"it, e.g. --input-shape 64 or --input-shape 1,8,8.")


def check_parameters_finite(model: Layer, name="the model") -> None:
    """Refuse a model whose parameters or buffers hold NaN or infinity (a checkpoint saved while
    training diverged): it could not predict anything. The error names each array."""
    bad = []
    for key, a in model.state_dict().items():
        a = to_numpy(a)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            layer, _, param = key.rpartition(".")
            where = f"layer {layer}'s {param}" if layer else param
            bad.append(f"{where} ({int((~np.isfinite(a)).sum())} of {a.size} values)")
    if bad:
        raise InputError(f"{name} has parameters that are not finite numbers (NaN or infinity): "
                         f"{'; '.join(bad)}. It cannot predict anything: it was probably saved "
                         f"while training diverged. Retrain it (a smaller learning rate), or use "
                         f"an earlier checkpoint.")


def fits(model: Layer, shape) -> str:
    """'' when ``model`` takes samples of ``shape``; else what went wrong (the layer's error)."""
    was_training = model.training
    model.eval()
    try:
        dtype = getattr(model, "input_dtype", None) or np.float32   # token ids: int64
        infer(model, to_device(np.zeros((1,) + tuple(shape), dtype), model.device))
        return ""
    except (ValueError, TypeError) as err:
        return " ".join(str(err).split())
    finally:
        model.train(was_training)


def as_batch(x, shape, single_ok: bool = False) -> np.ndarray:
    """``x`` as a float32 batch (N, *shape), or an InputError saying what was expected.

    Accepted: (N, *shape); flat samples (N, prod(shape)); one-channel images without their
    channel axis (N, H, W) when shape is (1, H, W); with ``single_ok``, one sample ``shape``.
    Refused: anything not made of numbers (strings, booleans, ragged lists), non-finite values.
    """
    shape = tuple(shape)
    want = f"(N, {', '.join(map(str, shape))})"
    if len(shape) > 1:
        want += f" or flat (N, {int(np.prod(shape))})"
    try:
        a = np.asarray(x)
    except (ValueError, OverflowError, TypeError) as err:
        if "maximum number of dim" in str(err):
            raise InputError(f"inputs must be shaped {want}; these nest deeper than NumPy's "
                             f"{_max_dims()} axes.") from None
        raise InputError(f"inputs must be a rectangular array of numbers shaped {want}; the "
                         f"rows have different lengths.") from None
    if a.dtype.kind == "O" and _all_ints(a):
        raise InputError(f"inputs must be numbers shaped {want} that fit in float32; some are "
                         f"integers too large for any NumPy number type (such as 2**64).")
    if a.dtype.kind not in "iuf":
        what = {"b": "booleans", "U": "strings", "S": "bytes", "O": "a ragged or mixed list"}
        raise InputError(f"inputs must be numbers shaped {want}, got "
                         f"{what.get(a.dtype.kind, a.dtype)}.")
    if single_ok and a.shape in (shape, (int(np.prod(shape)),)):
        a = a.reshape((1,) + shape)
    n = a.shape[0] if a.ndim else 0
    if a.ndim == 0 or n == 0:
        raise InputError(f"inputs must be a non-empty batch shaped {want}, got shape "
                         f"{shape_str(a.shape)}.")
    if a.shape[1:] == shape:
        pass
    elif a.ndim == 2 and a.shape[1] == int(np.prod(shape)):
        a = a.reshape((n,) + shape)
    elif len(shape) == 3 and shape[0] == 1 and a.shape[1:] == shape[1:]:
        a = a[:, None]
    else:
        hint = ""
        if a.shape in (shape, (int(np.prod(shape)),)):
            hint = " That is ONE sample: wrap it in a list, a batch of one."
        raise InputError(f"inputs must be shaped {want} for this model, got shape "
                         f"{shape_str(a.shape)}.{hint}")
    a = a.astype(np.float32)
    if not np.isfinite(a).all():
        bad = int((~np.isfinite(a)).sum())
        raise InputError(f"inputs must be finite numbers; {bad} value(s) are NaN or infinite "
                         f"(or too large for float32).")
    return a


def _max_dims() -> int:
    return 64 if int(np.__version__.split(".")[0]) >= 2 else 32


def _all_ints(a: np.ndarray) -> bool:
    """An object array of Python ints (some too large for int64/uint64), not a ragged list."""
    return a.size > 0 and all(type(v) is int for v in a.flat)


def read_image(path, shape) -> np.ndarray:
    """An image file as one sample shaped ``shape`` = (C, H, W): resized to H×W, values in
    [0, 1] with the ink bright, as in the course's digits and MNIST (a dark drawing on a light
    background is inverted)."""
    from PIL import Image, UnidentifiedImageError     # Pillow comes with matplotlib
    if len(shape) != 3 or shape[0] not in (1, 3):
        raise InputError(f"an image file needs a model that takes images (C, H, W) with 1 or 3 "
                         f"channels; this one takes {shape_str(shape)}. Give an .npy of inputs.")
    C, H, W = shape
    try:
        with Image.open(path) as img:
            img = img.convert("L" if C == 1 else "RGB").resize((W, H), Image.Resampling.BOX)
    except (UnidentifiedImageError, OSError) as err:
        raise InputError(f"cannot read {path} as an image ({err}).") from None
    a = np.asarray(img, dtype=np.float32) / 255.0
    a = a[None] if C == 1 else a.transpose(2, 0, 1)               # (C, H, W)
    if a.mean() > 0.5:                                            # light background: invert
        a = 1.0 - a
    return a


def read_inputs(path, shape) -> np.ndarray:
    """The inputs stored in ``path``: an ``.npy`` array, an ``.npz`` holding one array (or
    one named ``X``, ``x`` or ``inputs``), or an image file (one sample, for image models)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No input file at {path}.")
    suffix = path.suffix.lower()
    if suffix in IMAGE_SUFFIXES:
        return read_image(path, shape)[None]
    if suffix not in (".npy", ".npz"):
        raise InputError(f"{path}: expected an .npy or .npz of inputs, or an image "
                         f"({', '.join(IMAGE_SUFFIXES)}).")
    try:
        data = np.load(path, allow_pickle=False)       # never unpickle
    except ValueError as err:
        if "pickle" in str(err):
            raise InputError(f"{path} cannot be read without pickle ({err}); save plain number "
                             f"arrays with np.save.") from None
        raise InputError(f"{path} is damaged or incomplete ({err}): write it again with "
                         f"np.save.") from None
    if suffix == ".npy":
        return data
    with data:
        names = list(data.files)
        name = next((n for n in ("X", "x", "inputs") if n in names), None)
        if name is None and len(names) == 1:
            name = names[0]
        if name is None:
            raise InputError(f"{path} holds {names}: name the inputs X (np.savez(path, X=...)) "
                             f"or store only them.")
        return data[name]


def predict_proba(model: Layer, x, batch_size: int | None = None):
    """``(classes, probabilities)`` for the batch ``x``: (N,) int64 and (N, K) float64 NumPy.

    The model runs in evaluation mode through :func:`dlcourse.infer` (its mode is put back
    after; ``batch_size``: samples per chunk, None lets infer choose). K outputs give a softmax
    over K classes; one output is a two-class model whose probability is its sigmoid.
    """
    return classes_and_probabilities(infer(model, x, batch_size))


def classes_and_probabilities(logits):
    """``(classes, probabilities)``: (N,) int64 and (N, K) float64 NumPy from (N, K) logits of
    any engine. K outputs give a softmax over K classes; one output is a two-class model whose
    probability is its sigmoid. Logits that overflow give NaN rows (the service answers 422)."""
    logits = to_numpy(logits).astype(np.float64)
    if logits.shape[1] == 1:
        with np.errstate(over="ignore"):
            p1 = 1.0 / (1.0 + np.exp(-logits[:, 0]))
        probs = np.stack([1.0 - p1, p1], axis=1)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            probs = to_numpy(softmax(logits))
    return probs.argmax(axis=1).astype(np.int64), probs


# ======================================================================================
# Language models: prompts (text or token ids) in, the next token's distribution out
# ======================================================================================
PAD = -1      # fills a token row after its prompt (the engines read each row's last real id)


@dataclass(frozen=True)
class Tokens:
    """What a language model reads: ids in ``[0, vocab)``, the characters they stand for
    (``chars[i]`` is id i; None when the model does not carry them), ``width``, the positions
    one row holds (the model's context: a longer prompt keeps its last ``width``), and, for a
    model trained on BPE ids, its ``tokenizer`` (``dl.data.BPETokenizer``: text in, ids out)."""
    vocab: int
    chars: str | None
    width: int
    tokenizer: object = None

    def reads_text(self) -> bool:
        return bool(self.chars) or self.tokenizer is not None

    def text(self, ids) -> str | None:
        """The text a row of ids stands for (its characters, or the BPE tokens decoded
        together, so that a character split over two tokens comes back whole), or None."""
        if self.chars:
            return "".join(self.chars[i] for i in ids)
        return self.tokenizer.decode(ids) if self.tokenizer is not None else None

    def texts(self, ids) -> list:
        """The text each id stands for (a character, or a BPE token's), or None."""
        if self.chars:
            return [self.chars[i] for i in ids]
        if self.tokenizer is not None:
            return [self.tokenizer.decode([int(i)]) for i in ids]
        return None

    def expected(self) -> str:
        text = ("text made of the model's characters, or " if self.chars else
                "text, or " if self.tokenizer is not None else "")
        return (f"each prompt {text}a list of token ids, whole numbers in [0, {self.vocab - 1}] "
                f"(the last {self.width} are read)")

    def batch(self, prompts) -> np.ndarray:
        """``prompts`` (a list of texts or of id lists, an int array (N, T), or one text) as
        int64 rows (N, width): each prompt's last ``width`` ids, then :data:`PAD`. InputError
        when a prompt is empty, not text or whole numbers, or outside the vocabulary."""
        if isinstance(prompts, str) or (isinstance(prompts, np.ndarray) and prompts.ndim == 1):
            prompts = [prompts]
        if isinstance(prompts, np.ndarray):
            prompts = list(prompts)
        if not isinstance(prompts, (list, tuple)) or not prompts:
            given = ("an empty list" if isinstance(prompts, (list, tuple))
                     else type(prompts).__name__)
            raise InputError(f"give a non-empty list of prompts, {self.expected()}; got "
                             f"{given}.")
        rows = np.full((len(prompts), self.width), PAD, np.int64)
        for i, prompt in enumerate(prompts):
            ids = self._ids(prompt, i)[-self.width:]
            rows[i, :len(ids)] = ids
        return rows

    def _ids(self, prompt, i: int) -> np.ndarray:
        where = f"prompt {i}"
        if isinstance(prompt, str) and self.tokenizer is not None:
            ids = np.asarray(self.tokenizer.encode(prompt), np.int64)
        elif isinstance(prompt, str):
            if self.chars is None:
                raise InputError(f"{where} is text, but this model does not carry its "
                                 f"characters: give token ids in [0, {self.vocab - 1}].")
            unknown = sorted({c for c in prompt if c not in self.chars})
            if unknown:
                raise InputError(f"{where} has characters the model never saw: "
                                 f"{''.join(unknown)!r}. Use characters of its training text.")
            ids = np.array([self.chars.index(c) for c in prompt], np.int64)
        else:
            try:
                a = np.asarray(prompt)
            except (ValueError, TypeError, OverflowError):      # ragged, mixed
                a = np.asarray(None)
            whole = a.dtype.kind in "iu" or (a.dtype.kind == "f" and bool(
                np.isfinite(a).all() and (a == np.round(a)).all()))
            if a.ndim != 1 or not whole:
                raise InputError(f"{where} must be text or a flat list of whole numbers (token "
                                 f"ids), got {prompt!r:.60}.")
            if a.size and (a.min() < 0 or a.max() >= self.vocab):
                raise InputError(f"{where}: token ids must be in [0, {self.vocab - 1}] for a "
                                 f"vocabulary of {self.vocab}, got values from {a.min():g} to "
                                 f"{a.max():g}.")
            ids = a.astype(np.int64)
        if not ids.size:
            raise InputError(f"{where} is empty: give at least one character (or token id).")
        return ids


def tokens_of(model, shape=None) -> Tokens | None:
    """What ``model`` reads when it is a language model (int token ids in, one row of logits
    per position out: ``dl.Transformer``), else None. ``shape``: one sample's shape, (T,)."""
    dtype = getattr(model, "input_dtype", None)
    if dtype is None or np.dtype(dtype).kind not in "iu":
        return None
    config = model.get_config()
    if not config.get("causal", True):
        raise InputError(f"this {type(model).__name__} is not causal (causal=False): each "
                         f"position sees the ones after it, so it does not predict a next "
                         f"token. Serve or predict with a causal language model.")
    width = int((shape or input_shape(model))[0])
    return Tokens(int(config["vocab"]), getattr(model, "chars", None) or None, width)


def random_inputs(model, shape, n: int, seed: int = 0) -> np.ndarray:
    """``n`` random samples ``model`` takes: floats in [0, 1), or token ids for a language
    model (to compare two engines, or an export with its model)."""
    gen = np.random.default_rng(seed)
    dtype = getattr(model, "input_dtype", None)
    if dtype is not None and np.dtype(dtype).kind in "iu":
        return gen.integers(0, int(model.get_config()["vocab"]), (n,) + tuple(shape), np.int64)
    return gen.random((n,) + tuple(shape), dtype=np.float32)


def next_token_logits(logits, rows) -> np.ndarray:
    """(N, vocab) from a language model's (N, T, vocab) logits on ``rows`` (N, T) padded with
    :data:`PAD`: the logits at each row's last real id. A causal model's position t sees
    positions 0..t only, so the padding after a prompt changes nothing before it."""
    logits, rows = to_numpy(logits), np.asarray(rows)
    last = (rows != PAD).sum(axis=1) - 1
    return logits[np.arange(len(rows)), last]
