"""The checkpoint file format (``checkpoint.py`` describes it and why): the bytes of
``(metadata, arrays)`` written as a zip of two entries, and read back from it (formats 1 to 4)
with every size, name and dtype checked before anything is inflated or allocated. This module
knows files and bytes, not models: ``checkpoint.py``'s :func:`save` and :func:`load` turn a
model into its metadata and arrays and back.
"""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
import zlib
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format   # formats 1 and 2

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
ARRAY_KINDS = "fiub"


class CheckpointError(ValueError):
    """A checkpoint file is damaged, altered, or does not fit the model it describes."""


def digest(architecture: dict, arrays: dict) -> str:
    """SHA-256 over the architecture (canonical JSON) and, for each array in sorted name
    order, its name, dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(json.dumps(architecture, sort_keys=True).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\n{name}|{a.dtype.str}|{a.shape}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# ======================================================================================
# Writing
# ======================================================================================
def write_zip(f, entries: dict) -> None:
    """A zip of ``entries`` (file name -> bytes), each deflated (level 9) and dated
    1980-01-01 (the same model gives the same bytes), with no zip64 fields (a checkpoint's
    entries stay far below 4 GiB)."""
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, data in entries.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(info, data, compresslevel=9)


def pack(meta: dict, arrays: dict) -> dict:
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


# ======================================================================================
# Reading, every size checked first
# ======================================================================================
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")   # an .npz is a zip (the second: an empty one)


def _check_is_npz(path: Path, head: bytes | None = None) -> None:
    """Refuse a file that is not a zip archive, as np.load would tell by its first bytes
    (it would return a .npy file's array, or try to unpickle anything else)."""
    if head is None:
        try:
            with open(path, "rb") as f:
                head = f.read(6)
        except FileNotFoundError:
            return                # read says "No checkpoint at ..."
    if len(head) < 4 or head.startswith(_ZIP_MAGIC):
        return                    # a zip, or too short to tell: read reports the damage
    what = " It holds one NumPy array (np.save writes .npy files)." if head == b"\x93NUMPY" else ""
    raise CheckpointError(f"{path} is not a dlcourse checkpoint (not an .npz archive).{what} "
                          f"dl.load reads files written by dl.save(model, \"name.npz\").")


def _rewound(source):
    """A path as it is, or an in-memory file back at its start (read again from the top)."""
    if isinstance(source, io.BytesIO):
        source.seek(0)
    return source


def read(path: Path, data: bytes | None = None) -> tuple[dict, dict]:
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
        if dtype.str != dtype_text or dtype.kind not in ARRAY_KINDS or dtype.hasobject:
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
            allowed = {META_KEY: "Uu", ARRAYS_KEY: "u"}.get(name, ARRAY_KINDS)
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

