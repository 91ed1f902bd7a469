"""Saving and loading models: :func:`save` and :func:`load`.

Introduced in notebook ``04a_mlp_on_digits`` (save the trained MLP) and used again in
``07_training_a_cnn``.

A checkpoint is one ``.npz`` file, a zip archive (deflated) of two entries:

* ``__dlcourse__.json``: the metadata, UTF-8 JSON: the architecture
  (``{"type": "MLP", "config": model.get_config()}``), the dlcourse version, the format
  version, a SHA-256 digest, and the index of the arrays (``[name, dtype, shape]`` each);
* ``__arrays__.bin``: every parameter and buffer, under the model's ``state_dict()`` names
  (``"0.W"``, ...), their bytes one after the other in the index's order (little-endian,
  C order), always from NumPy arrays, so a model saved from the GPU loads on a CPU-only
  machine.

Any zip tool lists it and ``unzip -p model.npz __dlcourse__.json`` prints what it holds. Two
entries and no per-entry headers keep the fixed part small, so a small model's file is about
the size of its arrays (an int8 model's file under 30 % of its float32 one's). Older formats
still load: 2 (the same two parts, each wrapped as a ``.npy`` uint8 array) and 1 (dlcourse
before issue 19: one ``.npy`` entry per array and the JSON as a NumPy unicode string).

Why this format:

* **No pickle.** Files are read with ``np.load(..., allow_pickle=False)``, so opening a
  checkpoint can never run code; the model is rebuilt from JSON with ``layer_base.build_layer``
  (the library's own layer classes first: a class of yours named ``Linear`` changes nothing).
* **Checked.** The digest covers the architecture and every array's name, dtype, shape and
  bytes, in sorted order. A truncated or altered file raises :class:`CheckpointError`.
* **Atomic.** The file is written to a temporary file in the same folder, then moved over the
  old one with ``os.replace``: a crash or a full disk never leaves half a checkpoint, and the
  previous file stays as it was; a file saved again keeps its permissions.
* **Bounded.** Before anything is inflated or allocated, the sizes the zip entries declare
  are checked (at most ``MAX_CHECKPOINT_BYTES`` in all, the metadata at most
  ``MAX_META_BYTES``), the index must add up to the arrays entry exactly, only real or integer
  arrays are accepted, and the architecture must be shallow, small JSON whose sizes fit the
  arrays the file holds. (Formats 1 and 2: every ``.npy`` header is read and checked first.)

The bytes are written and read (and checked) by ``checkpoint_format.py``; this module turns a
model into its metadata and arrays and back (signatures and encryption: ``protect.py``).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from ._io import atomic_write, check_writable
from .backend import to_numpy
from .checkpoint_format import (ARRAY_KINDS, FORMAT_NAME, FORMAT_VERSION, MASK_PREFIX,
                                MAX_CHECKPOINT_BYTES, MAX_META_BYTES, CheckpointError, digest,
                                pack, read, write_zip)
from .checkpoint_format import (ARRAYS_FILE, ARRAYS_KEY, MAX_CONFIG_DEPTH,  # noqa: F401
                                META_FILE, META_KEY)   # the format's names, read here too

__all__ = ["save", "load", "load_bytes", "check_can_save", "CheckpointError", "FORMAT_VERSION",
           "MAX_CHECKPOINT_BYTES", "StaleSignatureWarning"]


def _version() -> str:
    from ._version import __version__
    return __version__


def _architecture(model) -> dict:
    from .layer_base import Layer, layer_type
    if not isinstance(model, Layer):
        hint = (" A Perceptron is two arrays: save them with np.savez(path, w=p.w, b=p.b)."
                if type(model).__name__ == "Perceptron" else "")
        raise TypeError(f"dl.save expects a dlcourse model (a Layer such as dl.MLP, dl.CNN or "
                        f"dl.Sequential), got {type(model).__name__}.{hint}")
    architecture = {"type": layer_type(model), "config": model.get_config()}
    try:
        json.dumps(architecture)
    except TypeError as err:
        raise TypeError(f"{type(model).__name__}.get_config() must return plain JSON values "
                        f"(numbers, strings, lists, dicts) so the model can be rebuilt: {err}.") from None
    return architecture


def _npz_path(path) -> Path:
    """The checkpoint file ``path`` names, ``.npz`` added when it has no suffix (``"cnn"`` is
    ``cnn.npz``, even beside a folder ``cnn/``). A folder (a path ending in ``/``, or one the
    file name itself names) is refused: a checkpoint is a file."""
    text = os.fspath(path)
    given = Path(path).expanduser()
    npz = given if given.suffix else given.with_suffix(".npz")
    slash = text.endswith(("/", os.sep))
    if slash or npz.is_dir():
        folder = text if slash else os.fspath(npz) + "/"
        what = "is a folder" if npz.is_dir() or given.is_dir() else "names a folder (it ends in /)"
        raise IsADirectoryError(f"{folder} {what}; give a file name inside it, "
                                f"e.g. {folder}model.npz")
    return npz


def save(model, path, *, sign_with=None, encrypt_with=None) -> Path:
    """Save ``model``'s architecture, parameters and buffers to ``path`` (an ``.npz`` file).

    ``".npz"`` is added when the path has no suffix; a folder (``"ckpts/"``) is refused with
    IsADirectoryError, as a checkpoint is one file. The write is atomic: if anything fails,
    an existing file at ``path`` is left untouched. Returns the path written.

    ``encrypt_with=KEYFILE`` writes it encrypted (AES-256-GCM); ``sign_with=PRIVATE_KEY`` writes
    an Ed25519 signature of the file's bytes beside it, ``path + ".sig"`` (both at once:
    encrypted, then the encrypted bytes signed). See ``protect.py``; needs the ``protect`` extra.

    Example::

        dl.save(model, "mlp_digits.npz")
        model = dl.load("mlp_digits.npz")
    """
    architecture = _architecture(model)
    arrays = {name: to_numpy(a) for name, a in model.state_dict().items()}   # GPU -> NumPy copies
    bad = [name for name in arrays if name.startswith("__")]   # META_KEY among them
    if bad:
        raise ValueError(f"State names may not start with '__' (reserved), got {bad}.")
    objects = [f"{name} ({a.dtype})" for name, a in arrays.items() if a.dtype.hasobject]
    if objects:   # np.savez would pickle them, and load refuses pickles
        raise TypeError(f"Cannot save {', '.join(objects)}: a checkpoint holds numeric arrays "
                        f"only (an object array would need pickle, which dl.load refuses). "
                        f"Store numbers in the layer's params or buffers, and settings in its "
                        f"get_config().")
    odd = [f"{name} ({a.dtype})" for name, a in arrays.items()
           if a.dtype.kind not in ARRAY_KINDS and not a.dtype.hasobject]
    if odd:
        raise TypeError(f"Cannot save {', '.join(odd)}: a checkpoint holds real numbers only "
                        f"(float, int or bool arrays). A complex parameter is not something "
                        f"dlcourse's layers make; convert it (a.real, or np.stack([a.real, "
                        f"a.imag])) first.")
    from .prune import masks_of
    masks = {MASK_PREFIX + name: m for name, m in masks_of(model).items()}
    arrays.update(masks)              # a pruned model stays pruned when it is loaded again
    meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION if masks else 3,
            "dlcourse_version": _version(), "architecture": architecture,
            "sha256": digest(architecture, arrays)}
    shape = getattr(model, "sample_shape", None)
    if shape:                      # one sample's shape, when training or calibration told it
        meta["sample_shape"] = [int(s) for s in shape]
    if isinstance(getattr(model, "dataset", None), str):   # `dlcourse train --save` says which
        meta["dataset"] = model.dataset

    path = _save_target(path)
    signed_before = _signed_digest(path) if sign_with is None else None
    if sign_with is None and encrypt_with is None:
        with atomic_write(path) as f:  # readers see the old file or the new one, never half
            write_zip(f, pack(meta, arrays))
        _warn_if_signature_stale(path, signed_before)
        return path
    from . import protect
    buffer = io.BytesIO()
    write_zip(buffer, pack(meta, arrays))
    data = buffer.getvalue()
    if encrypt_with is not None:
        data = protect.encrypt(data, encrypt_with)
    signature = protect.sign_bytes(data, sign_with) if sign_with is not None else None
    with atomic_write(path) as f:
        f.write(data)
    if signature is not None:      # after the file: a crash between leaves it unverifiable
        with atomic_write(protect.signature_path(path)) as f:
            f.write(signature)
    _warn_if_signature_stale(path, signed_before)
    return path


def _signed_digest(path: Path) -> str | None:
    """The SHA-256 of the file at ``path`` when a signature (``path.sig``) lies beside it."""
    from .protect import signature_path
    if not (signature_path(path).exists() and path.is_file()):
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _warn_if_signature_stale(path: Path, signed_before: str | None) -> None:
    """Warn when ``path`` was saved over bytes its ``.sig`` signed and now differs from them:
    the signature no longer matches (a load with ``public_key`` will refuse the file)."""
    if signed_before is None or hashlib.sha256(path.read_bytes()).hexdigest() == signed_before:
        return
    import warnings
    from .protect import PRIVATE_NAME, signature_path
    warnings.warn(f"{path} was saved again, and {signature_path(path).name} beside it signed "
                  f"its previous bytes: that signature no longer matches, so a load with a "
                  f"public key (dlcourse serve/predict --public-key) will refuse the model. "
                  f"Sign it again: dlcourse sign {path} --key {PRIVATE_NAME} (or dl.save(..., "
                  f"sign_with=KEY)).", StaleSignatureWarning, stacklevel=3)


class StaleSignatureWarning(UserWarning):
    """A model was saved over a signed file: its ``.sig`` no longer matches it."""


def _check_config_sizes(path: Path, config, arrays: dict) -> None:
    """Refuse a config whose sizes are far beyond what the file's arrays could be: every
    layer's arrays come from the config, so building from an absurd one would allocate
    gigabytes before load_state_dict noticed the mismatch. Bound: 64x the number of values
    the file holds (at least 64 x 2**16), for each integer, for the product of the integers
    of one dict (Linear's in x out) and for the two largest of one list (an image size)."""
    held = sum(int(a.size) for a in arrays.values())
    bound = 64 * max(held, 1 << 16)

    def sizes(value):
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            yield value, value
        elif isinstance(value, dict):
            ints = [v for v in value.values() if isinstance(v, int) and not isinstance(v, bool)]
            yield int(np.prod([max(v, 1) for v in ints], dtype=object)), ints
            for v in value.values():
                yield from sizes(v)
        elif isinstance(value, list):
            ints = sorted(v for v in value if isinstance(v, int) and not isinstance(v, bool))
            yield int(np.prod([max(v, 1) for v in ints[-2:]], dtype=object)), ints[-2:]
            for v in value:
                yield from sizes(v)

    for size, what in sizes(config):
        if size > bound:
            raise CheckpointError(f"{path}: the saved config declares sizes {what} (a layer of "
                                  f"about {size} values), far more than the {held} values the "
                                  f"file holds. Building it would allocate that much memory; "
                                  f"the file is damaged or was not written by dl.save.")


def _save_target(path) -> Path:
    """The file :func:`save` writes for ``path``, once its folder is known to exist."""
    path = _npz_path(path)
    folder = path.parent
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise FileNotFoundError(f"Cannot save to {path}: the folder {folder} {what}. "
                                f"Create it first (os.makedirs) or choose another path.")
    return path


def check_can_save(path) -> Path:
    """Check now, before any training, that :func:`save` could write ``path``; return the
    file it would write (``.npz`` added when there is no suffix). Raises the error save
    would raise (FileNotFoundError, IsADirectoryError, PermissionError), naming ``path``.
    Nothing is left behind."""
    target = _save_target(path)
    check_writable(target)
    return target


def load(path, device: str | None = None, *, key=None, public_key=None):
    """Rebuild a model saved by :func:`save`, with its parameters and buffers.

    Args:
        path: the ``.npz`` file (``".npz"`` is added when the path has no suffix).
        device: ``"cpu"``, ``"gpu"`` or ``"auto"``; ``None`` (default) puts the model on the
            CPU, like a model you just built. A checkpoint saved from either device loads
            on either.
        key: for an encrypted checkpoint, its AES key file (``None``: ``$DLCOURSE_MODEL_KEY``).
        public_key: the signer's public key file: the model loads only if ``path + ".sig"`` is
            that key's signature of the file's bytes (the bytes verified are the bytes loaded).

    Returns:
        The model, in training mode (call ``model.eval()`` before predicting if it has
        Dropout or BatchNorm; :func:`dl.evaluate` does this for you). An int8 model
        (``dl.quantize``), which can only predict, comes back in evaluation mode.

    Raises:
        CheckpointError: the file is truncated, altered (SHA-256 mismatch), holds a pickled
        array, comes from a newer format, or its arrays do not fit its architecture.
        protect.ProtectionError: a signature or a key that does not fit (the message says which).
    """
    path = _npz_path(path)
    data = None
    if key is not None or public_key is not None or _starts_encrypted(path):
        data = _read_bytes(path)
    return load_bytes(path, data, device, key=key, public_key=public_key)


def _starts_encrypted(path: Path) -> bool:
    from .protect import MAGIC
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False                 # read reports a missing or unreadable file


def _read_bytes(path: Path) -> bytes:
    """The whole file, once its size is known to be one a checkpoint may have."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > MAX_CHECKPOINT_BYTES + MAX_META_BYTES:
                raise CheckpointError(f"{path} is {size} bytes, more than a checkpoint may be.")
            return f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"No checkpoint at {path}: check the path "
                                f"(the current folder is {Path.cwd()}).") from None


def load_bytes(path, data: bytes | None, device: str | None = None, *, key=None,
               public_key=None):
    """:func:`load` on ``data``, the bytes already read from ``path`` (``None``: read the
    file): the signature, if asked for, and the decryption work on exactly these bytes."""
    from .layer_base import build_layer

    path = Path(path)
    if data is not None:
        from . import protect
        if public_key is not None:
            protect.verify_bytes(data, path, public_key)
        if protect.is_encrypted(data):
            data = protect.decrypt(data, key, name=str(path))
        elif key is not None:
            raise protect.ProtectionError(f"{path} is not encrypted, but a key was given: "
                                          f"is this the file you meant?")
    meta, arrays = read(path, data)
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format version {version!r}, but this "
                              f"dlcourse ({_version()}) reads up to version {FORMAT_VERSION}. "
                              f"It was saved by dlcourse {meta.get('dlcourse_version')}: "
                              f"upgrade dlcourse (pip install -U dlcourse).")
    architecture = meta.get("architecture")
    if not (isinstance(architecture, dict) and isinstance(architecture.get("type"), str)
            and isinstance(architecture.get("config"), dict)):
        raise CheckpointError(f"{path}: the architecture entry is missing or malformed "
                              f"(expected {{'type': ..., 'config': {{...}}}}).")
    if digest(architecture, arrays) != meta.get("sha256"):
        raise CheckpointError(f"{path} failed its SHA-256 check: its arrays or architecture "
                              f"are not the ones that were saved (the file was altered or "
                              f"damaged). Save the model again, or copy the file again.")

    _check_config_sizes(path, architecture["config"], arrays)
    kind = architecture["type"]
    try:
        model = build_layer(kind, architecture["config"])
    except Exception as err:   # unknown layer type, or a config the constructor rejects
        raise CheckpointError(f"{path}: cannot rebuild a {kind} from the saved config "
                              f"({type(err).__name__}: {err}). If it is your own Layer class, "
                              f"define (import) it before loading.") from None
    floats = {a.dtype for a in arrays.values() if np.issubdtype(a.dtype, np.floating)}
    if len(floats) == 1:       # models are built in float32; a float64 model stays float64
        (dtype,) = floats
        if model.dtype is not None and model.dtype != dtype:
            model.astype(dtype)
    masks = {name[len(MASK_PREFIX):]: arrays.pop(name) for name in list(arrays)
             if name.startswith(MASK_PREFIX)}
    extra = sorted(set(arrays) - set(model.state_dict()))
    if extra:
        raise CheckpointError(f"{path}: the saved arrays do not fit the saved {kind} "
                              f"architecture: it has entries the model does not ({extra}).")
    try:
        model.load_state_dict(arrays)
    except (KeyError, ValueError) as err:
        message = err.args[0] if err.args else str(err)
        raise CheckpointError(f"{path}: the saved arrays do not fit the saved {kind} "
                              f"architecture: {message}") from None
    shape = meta.get("sample_shape")
    if isinstance(shape, list) and 0 < len(shape) <= 8 and all(
            isinstance(s, int) and not isinstance(s, bool) and 0 < s < 2**31 for s in shape):
        model.sample_shape = tuple(shape)
    if isinstance(meta.get("dataset"), str) and len(meta["dataset"]) <= 64:
        model.dataset = meta["dataset"]
    if masks:
        from .prune import set_masks
        try:
            set_masks(model, masks)
        except (KeyError, ValueError) as err:
            raise CheckpointError(f"{path}: {err.args[0] if err.args else err}") from None
    if device is not None:
        model.to(device)
    if any(getattr(layer, "inference_only", False) for layer in getattr(model, "layers", [model])):
        model.eval()           # e.g. its BatchNorm on the running statistics, as when quantized
    return model
