"""Flat buffers and buckets: many gradient arrays sent as a few messages.

Introduced in notebook ``13_data_parallel`` (one all-reduce per bucket instead of one per
parameter: each message pays the latency α once) and used again in
``13b_overlap_sharding_and_recomputation`` by the overlapped all-reduce (``overlap.py``) and
ZeRO-1 (``zero.py``), which cut one flat buffer of every gradient into shards.
"""
from __future__ import annotations

from .backend import get_array_module

__all__ = ["BUCKET_BYTES", "flatten", "unflatten", "buckets"]

BUCKET_BYTES = 25 * 2**20      # PyTorch DDP's default bucket: 25 MiB


def flatten(arrays, xp=None, out=None, scale=None):
    """One 1-D buffer holding every array of the list, one after another (times ``scale``
    if given). ``out``: a buffer to fill, at least as long, instead of a new one."""
    xp = xp or get_array_module(*arrays)
    if out is None:
        flat = xp.concatenate([a.reshape(-1) for a in arrays]) if arrays else xp.zeros(0)
        return flat if scale is None else flat * scale
    offset = 0
    for a in arrays:
        part = out[offset:offset + a.size].reshape(a.shape)
        xp.multiply(a, 1 if scale is None else scale, out=part)   # one pass: copy and scale
        offset += a.size
    return out


def unflatten(buffer, arrays, divisor=None) -> None:
    """Copy ``buffer`` back into ``arrays`` (in place, divided by ``divisor`` if given), in
    the order :func:`flatten` used."""
    xp = get_array_module(buffer)
    offset = 0
    for a in arrays:
        part = buffer[offset:offset + a.size].reshape(a.shape)
        if divisor is None:
            a[...] = part
        else:
            xp.divide(part, divisor, out=a)
        offset += a.size


def buckets(arrays, max_bytes: int = BUCKET_BYTES):
    """The arrays cut into consecutive groups of at most ``max_bytes`` each (an array larger
    than that gets a group of its own). Each group is all-reduced as one message."""
    groups, current, size = [], [], 0
    for a in arrays:
        if current and size + a.nbytes > max_bytes:
            groups.append(current)
            current, size = [], 0
        current.append(a)
        size += a.nbytes
    if current:
        groups.append(current)
    return groups
