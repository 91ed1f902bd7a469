"""Collectives built by hand on a ring, from ``sendrecv`` alone, and their α-β cost.

Introduced in notebook ``13_data_parallel`` (the ring all-reduce, its exercise, bit-exact
against MPI's ``Allreduce`` on 2 ranks) and split in ``13b_overlap_sharding_and_recomputation``
into its two halves, which ZeRO-1 uses on their own::

    all-reduce = reduce-scatter + all-gather

    reduce-scatter   N-1 steps: each rank ends with chunk r of the sum   (each sends (N-1)/N)
    all-gather       N-1 steps: each rank ends with every rank's chunk   (each sends (N-1)/N)

A flat buffer of P elements is cut into N chunks by ``np.array_split``'s rule
(:func:`dlcourse.communicators.chunk_sizes`: ragged when N does not divide P); rank r owns
chunk r, as with MPI's ``Reduce_scatter`` and ``Allgatherv``, so the hand-written ring and
MPI's agree chunk for chunk (``tests/test_distributed.py`` checks it on real MPI ranks).
Rank r sends only to r+1 and receives only from r-1. ``comm`` is any communicator with
``rank``, ``world_size`` and ``sendrecv`` (``dl.distributed``).
"""
from __future__ import annotations

from .backend import get_array_module

__all__ = ["ring_reduce_scatter", "ring_all_gather", "ring_all_reduce", "ring_cost"]


def ring_reduce_scatter(comm, x):
    """Rank r's chunk of the sum of x over all ranks, on a ring. x: (P,) flat, the same P
    everywhere (unchanged); returns (P_r,), P_r = ``chunk_sizes(P, N)[r]``.

    Step s = 0..N-2: rank r sends its running chunk (r-s-1) mod N to r+1, receives chunk
    (r-s-2) mod N from r-1 and adds its own x's part to it. Chunk c starts at rank c+1 and
    goes round, one rank per step, gathering one more term each time; after N-1 steps it is
    back at rank c with all N terms.
    """
    N, r = comm.world_size, comm.rank
    xp = get_array_module(x)
    chunks = [c.copy() for c in xp.array_split(x.reshape(-1), N)]    # copies: x stays
    right, left = (r + 1) % N, (r - 1) % N
    for s in range(N - 1):
        send, recv = (r - s - 1) % N, (r - s - 2) % N
        incoming = xp.empty_like(chunks[recv])
        comm.sendrecv(chunks[send], right, incoming, left)
        chunks[recv] += incoming                       # the running sum, one term more
    return chunks[r]


def ring_all_gather(comm, chunk, total: int):
    """Every rank's chunk, end to end, on a ring: (P,) with P = ``total``. ``chunk``: this
    rank's (P_r,), ``chunk_sizes(P, N)[r]`` elements.

    Step s = 0..N-2: rank r passes chunk (r-s) mod N to r+1 and receives chunk (r-s-1) mod N
    from r-1, copying (not adding) it into its place.
    """
    N, r = comm.world_size, comm.rank
    xp = get_array_module(chunk)
    out = xp.empty(int(total), dtype=chunk.dtype)
    chunks = xp.array_split(out, N)                     # views into out
    if chunk.shape != chunks[r].shape:
        raise ValueError(f"ring_all_gather(chunk, total={total}): rank {r} of {N} owns "
                         f"{chunks[r].size} elements, got a chunk of shape {tuple(chunk.shape)}.")
    chunks[r][...] = chunk
    right, left = (r + 1) % N, (r - 1) % N
    for s in range(N - 1):
        comm.sendrecv(chunks[(r - s) % N], right, chunks[(r - s - 1) % N], left)
    return out


def ring_all_reduce(comm, x):
    """The sum of x over all ranks, with a ring: reduce-scatter, then all-gather.

    x: any shape (unchanged); returns a new array of x's shape. 2(N-1) messages; each rank
    sends 2(N-1)/N of the buffer in all, whatever N is: the all-reduce's bandwidth cost no
    longer grows with the number of ranks (the α-β model, :func:`ring_cost`).
    """
    mine = ring_reduce_scatter(comm, x.reshape(-1))
    return ring_all_gather(comm, mine, x.size).reshape(x.shape)


def ring_cost(nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """The α-β model of a ring all-reduce, in seconds: 2(N-1) messages, each paying the
    latency ``alpha`` (s), and 2(N-1)/N of the buffer per rank over bandwidth ``beta`` (B/s).
    A reduce-scatter or an all-gather alone is half of it."""
    N = world_size
    return 2 * (N - 1) * alpha + 2 * (N - 1) / N * nbytes / beta
