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
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format   # formats 1 and 2

from ._io import atomic_write, check_writable
from .backend import to_numpy

__all__ = ["save", "load", "load_bytes", "check_can_save", "CheckpointError", "FORMAT_VERSION",
           "MAX_CHECKPOINT_BYTES", "StaleSignatureWarning"]

FORMAT_NAME = "dlcourse-checkpoint"
FORMAT_VERSION = 4                 # 4: may hold pruning masks; without them a file is 3
MASK_PREFIX = "__mask__."          # a pruning mask's array: MASK_PREFIX + the weight's name
META_FILE = "__dlcourse__.json"    # the metadata and the arrays' index
ARRAYS_FILE = "__arrays__.bin"     # every array's bytes, one after the other
META_KEY = "__dlcourse__"          # formats 1 and 2: the same parts as .npy entries
ARRAYS_KEY = "__arrays__"          # (format 2 only)

#: The most bytes the arrays of one checkpoint may declare (inflated), all together.
MAX_CHECKPOINT_BYTES = 1 << 31
#: The most bytes the JSON metadata may take, and how deep its config may nest.
MAX_META_BYTES = 1 << 20
MAX_CONFIG_DEPTH = 16
#: dtype kinds a checkpoint may hold: float, signed and unsigned int, bool (never complex).
_ARRAY_KINDS = "fiub"


class CheckpointError(ValueError):
    """A checkpoint file is damaged, altered, or does not fit the model it describes."""


def _version() -> str:
    from ._version import __version__
    return __version__


def _digest(architecture: dict, arrays: dict) -> str:
    """SHA-256 over the architecture (canonical JSON) and, for each array in sorted name
    order, its name, dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(json.dumps(architecture, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\n{name}|{a.dtype.str}|{a.shape}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


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


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")   # an .npz is a zip (the second: an empty one)


def _check_is_npz(path: Path, head: bytes | None = None) -> None:
    """Refuse a file that is not a zip archive, as np.load would tell by its first bytes
    (it would return a .npy file's array, or try to unpickle anything else)."""
    if head is None:
        try:
            with open(path, "rb") as f:
                head = f.read(6)
        except FileNotFoundError:
            return                # _read says "No checkpoint at ..."
    if len(head) < 4 or head.startswith(_ZIP_MAGIC):
        return                    # a zip, or too short to tell: _read reports the damage
    what = " It holds one NumPy array (np.save writes .npy files)." if head == b"\x93NUMPY" else ""
    raise CheckpointError(f"{path} is not a dlcourse checkpoint (not an .npz archive).{what} "
                          f"dl.load reads files written by dl.save(model, \"name.npz\").")


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
           if a.dtype.kind not in _ARRAY_KINDS and not a.dtype.hasobject]
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
            "sha256": _digest(architecture, arrays)}
    shape = getattr(model, "sample_shape", None)
    if shape:                      # one sample's shape, when training or calibration told it
        meta["sample_shape"] = [int(s) for s in shape]
    if isinstance(getattr(model, "dataset", None), str):   # `dlcourse train --save` says which
        meta["dataset"] = model.dataset

    path = _save_target(path)
    signed_before = _signed_digest(path) if sign_with is None else None
    if sign_with is None and encrypt_with is None:
        with atomic_write(path) as f:  # readers see the old file or the new one, never half
            _write_zip(f, _pack(meta, arrays))
        _warn_if_signature_stale(path, signed_before)
        return path
    from . import protect
    buffer = io.BytesIO()
    _write_zip(buffer, _pack(meta, arrays))
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


def _write_zip(f, entries: dict) -> None:
    """A zip of ``entries`` (file name -> bytes), each deflated (level 9) and dated
    1980-01-01 (the same model gives the same bytes), with no zip64 fields (a checkpoint's
    entries stay far below 4 GiB)."""
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(info, data, compresslevel=9)


def _pack(meta: dict, arrays: dict) -> dict:
    """The two entries of a checkpoint: the metadata with the arrays' index as UTF-8 JSON,
    and the arrays' bytes one after the other (little-endian, C order)."""
    index, parts = [], []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<") if a.dtype.itemsize > 1
                                 else a.dtype)
        index.append([name, a.dtype.str, list(a.shape)])
        parts.append(a.tobytes())
    text = json.dumps({**meta, "arrays": index}, separators=(",", ":"))
    return {META_FILE: text.encode("utf-8"), ARRAYS_FILE: b"".join(parts)}


def _index(path: Path, meta: dict, size: int) -> list:
    """The arrays a checkpoint's index names, as (name, dtype, shape, bytes), checked (names,
    real dtypes, shapes, and sizes that add up to ``size``, the arrays entry's bytes, exactly)
    before anything is read or copied."""
    def bad(why):
        return CheckpointError(f"{path}: the index of its arrays is malformed ({why}). "
                               f"The file is damaged or was not written by dl.save.")

    index = meta.get("arrays")
    if not isinstance(index, list):
        raise bad("expected a list of [name, dtype, shape]")
    entries, total = [], 0
    for item in index:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and isinstance(item[1], str) and isinstance(item[2], list)):
            raise bad(f"an entry is {str(item)[:80]}, not [name, dtype, shape]")
        name, dtype_text, shape = item
        reserved = name.startswith("__") and not name.startswith(MASK_PREFIX)
        if reserved or any(name == e[0] for e in entries):
            raise bad(f"the name {name!r} is reserved or repeated")
        try:
            dtype = np.dtype(dtype_text)
        except TypeError:
            raise bad(f"{name} has dtype {dtype_text!r}") from None
        if dtype.str != dtype_text or dtype.kind not in _ARRAY_KINDS or dtype.hasobject:
            what = dtype if dtype.str == dtype_text else dtype_text
            raise CheckpointError(f"{path}: the array {name} has dtype {what}; a "
                                  f"checkpoint holds real numbers only (float, int, bool). "
                                  f"It was not written by dl.save.")
        if len(shape) > 32 or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                      for n in shape):
            raise bad(f"{name} has shape {str(shape)[:80]}")
        nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
        total += nbytes
        if total > size:                       # stop before a huge shape is ever allocated
            break
        entries.append((name, dtype, tuple(shape), nbytes))
    if total != size:
        raise CheckpointError(f"{path} is damaged or incomplete: its index declares "
                              f"{total} bytes of arrays, but the arrays entry holds {size}.")
    return entries


def _unpack(entries: list, blob) -> dict:
    """The arrays of a checked index (:func:`_index`), cut from ``blob`` (bytes) and copied."""
    arrays, start = {}, 0
    for name, dtype, shape, nbytes in entries:
        arrays[name] = np.frombuffer(blob, dtype=dtype, count=nbytes // dtype.itemsize,
                                     offset=start).reshape(shape).copy()
        start += nbytes
    return arrays


def _check_members(path: Path, source) -> None:
    """Read each entry's ``.npy`` header (a few hundred bytes) and refuse, before np.load
    inflates or allocates anything, an entry whose header declares more or fewer bytes than
    its zip entry holds, a total beyond ``MAX_CHECKPOINT_BYTES``, or a dtype that is not
    real numbers (the metadata entry is UTF-8 bytes, or text in format 1; the arrays entry of
    format 2 is bytes)."""
    with zipfile.ZipFile(_rewound(source)) as archive:
        infos = archive.infolist()
        total = sum(info.file_size for info in infos)
        if total > MAX_CHECKPOINT_BYTES:
            raise CheckpointError(f"{path}: its entries declare {total} bytes in all, more "
                                  f"than the {MAX_CHECKPOINT_BYTES} a checkpoint may hold. The "
                                  f"file is damaged or was not written by dl.save.")
        for info in infos:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            with archive.open(info) as f:
                version = npy_format.read_magic(f)
                read_header = (npy_format.read_array_header_1_0 if version == (1, 0)
                               else npy_format.read_array_header_2_0)
                shape, _, dtype = read_header(f)
                header_bytes = f.tell()
            if dtype.hasobject:
                raise CheckpointError(f"{path} holds a pickled (object) array ({name}). "
                                      f"dlcourse checkpoints never do, and unpickling can run "
                                      f"code: refusing to load it.")
            allowed = {META_KEY: "Uu", ARRAYS_KEY: "u"}.get(name, _ARRAY_KINDS)
            if dtype.kind not in allowed or (name in (META_KEY, ARRAYS_KEY)
                                             and dtype.kind == "u" and dtype.itemsize != 1):
                raise CheckpointError(f"{path}: the array {name} has dtype {dtype}; a "
                                      f"checkpoint holds real numbers only (float, int, bool). "
                                      f"It was not written by dl.save.")
            declared = int(np.prod(shape, dtype=object)) * dtype.itemsize + header_bytes
            limit = MAX_META_BYTES if name == META_KEY else MAX_CHECKPOINT_BYTES
            if declared != info.file_size or declared > limit:
                raise CheckpointError(f"{path} is damaged or incomplete: the header of {name} "
                                      f"declares shape {shape} of {dtype} ({declared} bytes "
                                      f"with its header), but its entry holds "
                                      f"{info.file_size} bytes.")


def _depth(value, level: int = 0) -> int:
    """How deep lists and dicts nest in a JSON value (iterative checks stop early)."""
    if level > MAX_CONFIG_DEPTH + 3:
        return level
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


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


def _rewound(source):
    """A path as it is, or an in-memory file back at its start (read again from the top)."""
    if isinstance(source, io.BytesIO):
        source.seek(0)
    return source


def _read(path: Path, data: bytes | None = None) -> tuple[dict, dict]:
    """The metadata and arrays of a checkpoint, refusing anything that needs pickle: read from
    ``path``, or from ``data``, the bytes already read from it (and verified)."""
    _check_is_npz(path, None if data is None else data[:6])
    source = path if data is None else io.BytesIO(data)
    try:
        with zipfile.ZipFile(_rewound(source)) as archive:
            names = {info.filename for info in archive.infolist()}
            if META_FILE in names:
                return _read_zip(path, archive, names)
        return _read_npz(path, source)               # formats 1 and 2
    except CheckpointError:
        raise
    except FileNotFoundError:
        folder = path.parent
        near = sorted(p.name for p in folder.iterdir() if p.stem == path.stem) if folder.is_dir() else []
        also = (f" Beside it: {', '.join(near)} (dl.load reads the .npz files dl.save writes)."
                if near else "")
        raise FileNotFoundError(f"No checkpoint at {path}: check the path "
                                f"(the current folder is {Path.cwd()}).{also}") from None
    except ValueError as err:
        if "pickle" in str(err).lower():
            raise CheckpointError(f"{path} holds a pickled (object) array. dlcourse checkpoints "
                                  f"never do, and unpickling can run code: refusing to load it.") from None
        raise CheckpointError(f"{path} is not a readable checkpoint ({err}). It may be "
                              f"truncated (an interrupted copy?) or not an .npz file.") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, KeyError) as err:
        raise CheckpointError(f"{path} is damaged or incomplete ({type(err).__name__}: "
                              f"{err}). It may be truncated (an interrupted copy or download), "
                              f"altered, or not an .npz file at all. Save or copy it again.") from None


def _read_zip(path: Path, archive: zipfile.ZipFile, names: set) -> tuple[dict, dict]:
    """Format 3: the JSON, then the arrays' bytes, each entry's declared size checked before
    it is inflated (zipfile checks each entry's CRC as it reads)."""
    if names != {META_FILE, ARRAYS_FILE}:
        raise CheckpointError(f"{path}: a checkpoint holds the entries {META_FILE} and "
                              f"{ARRAYS_FILE} only; this one has {sorted(names)}. It was altered.")
    meta_info, arrays_info = archive.getinfo(META_FILE), archive.getinfo(ARRAYS_FILE)
    for info, limit in ((meta_info, MAX_META_BYTES), (arrays_info, MAX_CHECKPOINT_BYTES)):
        if info.file_size > limit:
            raise CheckpointError(f"{path}: its entry {info.filename} declares "
                                  f"{info.file_size} bytes, more than the {limit} it may hold. "
                                  f"The file is damaged or was not written by dl.save.")
    meta = _metadata(path, archive.read(META_FILE))
    entries = _index(path, meta, arrays_info.file_size)
    return meta, _unpack(entries, archive.read(ARRAYS_FILE))


def _read_npz(path: Path, source) -> tuple[dict, dict]:
    """Formats 1 and 2, through np.load, once every .npy header has been checked."""
    _check_members(path, source)
    with np.load(_rewound(source), allow_pickle=False) as npz:
        names = list(npz.files)
        if META_KEY not in names:
            raise CheckpointError(f"{path} is an .npz file but not a dlcourse checkpoint "
                                  f"(it has no {META_FILE} entry). Was it written by dl.save?")
        meta_text = npz[META_KEY]
        arrays = {name: npz[name] for name in names if name != META_KEY}
    meta = _metadata(path, bytes(meta_text) if meta_text.dtype == np.uint8 else str(meta_text))
    if meta_text.dtype == np.uint8 or ARRAYS_KEY in arrays:        # format 2: two entries
        if set(arrays) != {ARRAYS_KEY}:
            raise CheckpointError(f"{path}: a format-2 checkpoint holds the entries "
                                  f"{META_KEY!r} and {ARRAYS_KEY!r} only; this one also has "
                                  f"{sorted(set(arrays) - {ARRAYS_KEY})}. It was altered.")
        blob = arrays[ARRAYS_KEY]
        arrays = _unpack(_index(path, meta, blob.size), blob.tobytes())
    return meta, arrays


def _metadata(path: Path, text) -> dict:
    """The metadata dict from the JSON entry (bytes, or str in format 1), checked."""
    try:
        meta = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{path}: the metadata entry is not UTF-8 text ({err}).") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: the metadata entry is not valid JSON ({err}).") from None
    except RecursionError:
        meta = None
    if meta is None or _depth(meta) > MAX_CONFIG_DEPTH + 3:   # meta > architecture > config
        raise CheckpointError(f"{path}: the metadata entry nests deeper than "
                              f"{MAX_CONFIG_DEPTH} levels; no dlcourse model's config does. "
                              f"The file is damaged or was not written by dl.save.")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{path} is not a dlcourse checkpoint (its metadata has no "
                              f"format {FORMAT_NAME!r}).")
    return meta


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
        return False                 # _read reports a missing or unreadable file


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
    meta, arrays = _read(path, data)
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
    if _digest(architecture, arrays) != meta.get("sha256"):
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
