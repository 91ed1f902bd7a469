"""File formats: IDX (MNIST, Fashion-MNIST) and CIFAR-10 binary, read with NumPy alone.

Introduced in notebook ``07_training_a_cnn`` (where MNIST and CIFAR-10 are mentioned as the
next step after the 8x8 digits). No pickle, no framework: each reader checks the header
against the bytes that follow and says what is wrong with a damaged file. A gzipped file is
inflated only as far as its header declares (never more than ``max_bytes``), so a small
hostile ``.gz`` cannot fill the memory before the size check.
"""
from __future__ import annotations

import os
import zlib

import numpy as np

__all__ = ["DataFormatError", "read_idx", "read_cifar10_bin", "read_bytes", "CIFAR10_RECORD",
           "CIFAR10_BATCH_SIZE", "MAX_IDX_BYTES"]

# IDX header: 2 zero bytes, 1 byte type code, 1 byte number of dimensions, then one
# big-endian uint32 per dimension, then the data, big-endian, C order.
_IDX_DTYPES = {0x08: np.dtype("u1"), 0x09: np.dtype("i1"), 0x0B: np.dtype(">i2"),
               0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}

#: The most data bytes :func:`read_idx` accepts from a header by default (1 GiB; MNIST's
#: largest file holds 47 MB).
MAX_IDX_BYTES = 1 << 30

CIFAR10_RECORD = 1 + 3 * 32 * 32    # 1 label byte, then 1024 red, 1024 green, 1024 blue
CIFAR10_BATCH_SIZE = 10000          # images in each official batch file


class DataFormatError(ValueError):
    """A data file is not what it should be (wrong header, wrong size, bad labels)."""


def read_bytes(source) -> tuple[bytes, str]:
    """All bytes of a path, a binary file object, or bytes; plus a name for messages."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), "<bytes>"
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            return f.read(), str(source)
    if hasattr(source, "read"):
        data = source.read()
        if not isinstance(data, bytes):
            raise TypeError("read_idx/read_cifar10_bin need a file opened in binary mode "
                            "('rb'), got a text file.")
        return data, getattr(source, "name", "<file object>")
    raise TypeError(f"Expected a path, a binary file object or bytes, got "
                    f"{type(source).__name__}.")


class _Reader:
    """Read a file's bytes in order, inflating gzip (detected from the magic bytes ``1f 8b``,
    not the name) only as far as asked: ``read(n)`` returns at most ``n`` bytes."""

    def __init__(self, data: bytes, name: str):
        self.name = name
        self._gzip = data[:2] == b"\x1f\x8b"
        self._pending = data
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if self._gzip else None

    def _damaged(self, why):
        return DataFormatError(f"{self.name} is a damaged gzip file ({why}). The download was "
                               f"probably cut short: delete it and load again.")

    def read(self, n: int) -> bytes:
        if not self._gzip:
            out, self._pending = self._pending[:n], self._pending[n:]
            return out
        parts, got = [], 0
        while got < n:
            if self._inflate.eof:                       # a member ended: another may follow
                if not self._inflate.unused_data:
                    break
                self._pending = self._inflate.unused_data
                self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            if not self._pending:
                raise self._damaged("it ends before its compressed stream does")
            try:
                chunk = self._inflate.decompress(self._pending, n - got)
            except zlib.error as err:
                raise self._damaged(err) from None
            self._pending = self._inflate.unconsumed_tail
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)


def read_idx(source, *, max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Read an IDX file (the MNIST format), gzipped or not.

    Args:
        source: a path, a binary file object, or the bytes themselves. Gzip is detected
            from the content (magic bytes ``1f 8b``), not from the file name.
        max_bytes: refuse a header that declares more data bytes than this (checked before
            the data is inflated).

    Returns:
        A NumPy array of the shape and type the header declares, in native byte order:
        e.g. ``uint8 (60000, 28, 28)`` for MNIST images, ``uint8 (60000,)`` for labels.

    Raises:
        DataFormatError: the header is wrong, or the data is shorter or longer than
            the header promises.
    """
    data, name = read_bytes(source)
    reader = _Reader(data, name)
    start = reader.read(4)
    if len(start) < 4 or start[0] != 0 or start[1] != 0:
        raise DataFormatError(f"{name} is not an IDX file: it should start with two zero "
                              f"bytes, then a type code and a number of dimensions, but it "
                              f"starts with {start.hex(' ') or 'nothing'}. Is it an MNIST "
                              f"file, and is it complete?")
    code, ndim = start[2], start[3]
    if code not in _IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in _IDX_DTYPES)
        raise DataFormatError(f"{name}: unknown IDX type code 0x{code:02X} (known: {known}).")
    dtype = _IDX_DTYPES[code]
    dims = reader.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise DataFormatError(f"{name} is truncated: its header declares {ndim} dimensions "
                              f"({4 + 4 * ndim} header bytes) but the file ends after "
                              f"{4 + len(dims)}.")
    shape = tuple(int(d) for d in np.frombuffer(dims, dtype=">u4", count=ndim))
    expected = int(np.prod(shape, dtype=object)) * dtype.itemsize   # exact: no overflow
    if expected > max_bytes:
        raise DataFormatError(f"{name}: its header declares shape {shape} of {dtype.name}, "
                              f"{expected} data bytes, more than the {max_bytes} allowed "
                              f"(max_bytes). The file is damaged or not an MNIST-style file; "
                              f"if it is real, pass a larger max_bytes.")
    body = reader.read(expected)
    if len(body) != expected or reader.read(1):
        what = "truncated" if len(body) < expected else "longer than its header says"
        found = f"{len(body)} follow" if len(body) < expected else "more follow"
        raise DataFormatError(f"{name} is {what}: the header declares shape {shape} of "
                              f"{dtype.name}, i.e. {expected} data bytes, but {found}. "
                              f"A cut-short download is the usual cause: delete the file "
                              f"and load again.")
    array = np.frombuffer(body, dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="))        # a writable, native-order copy


def read_cifar10_bin(source) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 binary batch (e.g. ``data_batch_1.bin``): no pickle involved.

    Each record is 3073 bytes: the label (0..9), then the 32x32 red plane, the green
    plane and the blue plane, each row by row.

    Args:
        source: a path, a binary file object, or bytes.

    Returns:
        ``images`` uint8 ``(N, 3, 32, 32)`` and ``labels`` int64 ``(N,)``.
    """
    data, name = read_bytes(source)
    if len(data) == 0 or len(data) % CIFAR10_RECORD:
        raise DataFormatError(f"{name} is not a CIFAR-10 binary batch: its size, {len(data)} "
                              f"bytes, should be a positive multiple of {CIFAR10_RECORD} "
                              f"(1 label byte + 3072 pixel bytes per image; a full batch is "
                              f"{CIFAR10_BATCH_SIZE} images). The file may be cut short, or be "
                              f"the python (pickle) version: dlcourse reads "
                              f"cifar-10-binary.tar.gz.")
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, CIFAR10_RECORD)   # (N, 3073)
    labels = records[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise DataFormatError(f"{name}: found label {labels.max()}, but CIFAR-10 labels are "
                              f"0..9. Is this a CIFAR-100 file (2 label bytes per record)?")
    images = records[:, 1:].reshape(-1, 3, 32, 32).copy()                       # (N, C, H, W)
    return images, labels
