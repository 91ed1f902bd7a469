"""Data-parallel training: one model per process, the gradients summed across processes.

Introduced in notebook ``13_data_parallel``. Every rank (process) holds the whole model and
takes its own shard of every global batch; after the backward pass the gradients are summed
across ranks (an *all-reduce*) and averaged, so every rank takes the same optimizer step and
the replicas stay identical::

    comm = dl.distributed.init()              # MPI under `mpiexec -n N`; one process: trivial
    dl.fit(model, loss, opt, X, y, batch_size=64, seed=0, comm=comm)   # 64 per rank

Notebook ``13b_overlap_sharding_and_recomputation`` adds two ways to run the same step::

    dl.fit(..., comm=comm, overlap=True, bucket_mb=1)   # all-reduce during backward (overlap.py)
    dl.fit(..., comm=comm, zero=1)                      # Adam's state sharded (zero.py, ZeRO-1)

This module is the face of ``dl.distributed``: the communicators (``communicators.py``), the
launcher (``mpi_launch.py``), the ring collectives (``collectives.py``) and the flat buffers
(``flat_buffers.py``) are re-exported here, each name where lesson 13 put it. Here live the
data-parallel step itself and :class:`DataParallel`, what ``dl.fit(comm=...)`` adds to the
loop: parameters broadcast from rank 0 at the start; one shared batch order (each rank draws
its own dropout masks); the gradients flattened into a few buffers (*buckets*), made once and
each all-reduced in place every step; evaluation and progress on rank 0 only.
BatchNorm is **not** synchronised: each rank normalises with its own shard's statistics and
keeps its own running averages (rank 0's are the ones evaluated and saved).
"""
from __future__ import annotations

import numpy as np

from . import backend
from ._validate import number
from .backend import get_array_module, to_numpy
from .collectives import ring_all_gather, ring_all_reduce, ring_cost, ring_reduce_scatter
from .communicators import (Communicator, MPICommunicator, NCCLCommunicator, Request,
                            SingleProcess, ThreadRank, check_same_everywhere, chunk_sizes, init,
                            same_everywhere, simulate)
from .flat_buffers import BUCKET_BYTES, buckets, flatten, unflatten
from .mpi_launch import (MPIEXEC_ARGS, launch_env, mpiexec_command, mpiexec_flags, mpiexec_path,
                         relaunch, under_mpiexec)
from .mpi_launch import RANK_VARS as _RANK_VARS   # noqa: F401 - lesson 13's name, kept here
from .overlap import OverlappedAllReduce
from .zero import ShardedOptimizer

__all__ = ["Communicator", "SingleProcess", "MPICommunicator", "NCCLCommunicator", "init",
           "ring_all_reduce", "shard", "shards", "flatten", "unflatten", "buckets",
           "broadcast_parameters", "gradient_buffers", "average_gradients", "DataParallel",
           "mpiexec_command",
           "launch_env", "relaunch", "under_mpiexec", "mpiexec_path", "mpiexec_flags", "MPIEXEC_ARGS", "ring_cost", "BUCKET_BYTES", "simulate", "ThreadRank",
           # lesson 13b
           "Request", "ring_reduce_scatter", "ring_all_gather", "chunk_sizes", "same_everywhere",
           "check_same_everywhere", "ShardedOptimizer", "OVERLAP_BUCKET_MB", "ZERO_STAGES"]

OVERLAP_BUCKET_MB = 1.0   # PyTorch's 25 MB, scaled to the course's models: the MLP's 2.7 MB in 3
ZERO_STAGES = (0, 1)      # 0: every rank holds all of the optimizer's state; 1: ZeRO-1


# ======================================================================================
# Sharding the data
# ======================================================================================
def _check_rank(rank, world_size):
    for name, v in (("rank", rank), ("world_size", world_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"batches({name}=...) must be an int, got {v!r}.")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"batches(rank={rank}, world_size={world_size}): world_size must be "
                         f">= 1 and rank in 0..world_size-1. Pass comm.rank and comm.world_size.")


def shard(indices, rank: int, world_size: int):
    """Rank ``rank``'s part of one global batch of ``indices`` (G,): a contiguous slice of
    G // world_size samples, the first G % world_size ranks taking one more."""
    _check_rank(rank, world_size)
    return np.array_split(np.asarray(indices), world_size)[rank]


def shards(order, batch_size: int, rank: int, world_size: int, drop_last: bool = False):
    """This rank's index array for each global batch of ``batch_size * world_size`` samples
    of ``order`` (N,). Every rank computes the same global order and takes its own part.
    A last global batch with fewer samples than ranks is left out (a rank would get none)."""
    _check_rank(rank, world_size)
    G, N = batch_size * world_size, len(order)
    stop = N - N % G if drop_last else N
    return [shard(order[start:start + G], rank, world_size)
            for start in range(0, stop, G) if min(G, N - start) >= world_size]



# ======================================================================================
# Data-parallel training
# ======================================================================================
def broadcast_parameters(model, comm: Communicator) -> None:
    """Rank 0's parameters and buffers copied into every rank's model (in place)."""
    if comm.world_size == 1:
        return
    arrays = list(model.state_dict().values()) if hasattr(model, "state_dict") \
        else list(model.params.values())
    for group in buckets(arrays):
        unflatten(comm.broadcast(flatten(group), root=0), group)


def gradient_buffers(model, bucket_bytes: int = BUCKET_BYTES) -> list:
    """One flat buffer per bucket of the model's gradients, the last with two more entries
    (the loss and the sample count ride along). Made once and reused every step: a fresh
    2.7 MB array each step costs more than the all-reduce itself (the OS maps new memory
    page by page), and the copies into it are the only other work."""
    grads = list(model.grads.values())
    xp = get_array_module(*grads)
    groups = buckets(grads, bucket_bytes)
    return [xp.empty(size, dtype=group[0].dtype) for size, group in zip(_sizes(groups), groups)]


def _sizes(groups) -> list:
    """The length of each bucket's buffer: its gradients' sizes, + 2 in the last one."""
    return [sum(g.size for g in group) + 2 * (k == len(groups) - 1) for k, group in enumerate(groups)]


def average_gradients(model, comm: Communicator, count: int, loss: float = 0.0,
                      bucket_bytes: int = BUCKET_BYTES, buffers=None) -> tuple[float, int]:
    """Replace every rank's gradients by their average over the global batch; in place.

    Each rank computed the mean gradient over its own ``count`` samples. The global mean is
    sum_r(count_r * g_r) / sum_r(count_r): equal to one process's gradient on the whole
    global batch even when the shards differ in size. The counts and the ranks' losses ride
    in the last bucket, so one step costs one all-reduce per bucket and nothing more.
    ``buffers``: from :func:`gradient_buffers`, reused step after step (``None``: new ones).

    Returns ``(global mean loss, global batch size)``.
    """
    if comm.world_size == 1:
        return loss, count
    grads = list(model.grads.values())
    groups = buckets(grads, bucket_bytes)
    if buffers is None:
        buffers = gradient_buffers(model, bucket_bytes)
    elif [b.size for b in buffers] != _sizes(groups):
        raise ValueError(f"average_gradients(buffers=...): buffers of sizes {[b.size for b in buffers]}, "
                         f"but these gradients need {_sizes(groups)}. Make them from this model with "
                         f"gradient_buffers(model) (again, if its parameters changed).")
    for group, buf in zip(groups, buffers):
        flatten(group, out=buf, scale=count)          # buf = [count * g for g in group]
    last = buffers[-1]
    last[-2:] = last.dtype.type(loss * count), count  # the last bucket: + [loss * count, count]
    for buf in buffers:
        comm.all_reduce_in_place(buf)                  # the sum over ranks
    loss_sum, n = (float(v) for v in to_numpy(last[-2:]))
    for group, buf in zip(groups, buffers):
        unflatten(buf, group, divisor=n)               # g = sum_r(count_r * g_r) / n
    return loss_sum / n, int(round(n))


class DataParallel:
    """What ``dl.fit(..., comm=comm)`` adds to the training loop, one method per place:
    the parameters broadcast and one seed shared (here), this rank's ``shard`` of each global
    batch and the ``steps`` per epoch, ``average_gradients`` after each backward pass, and
    ``total``/``share`` for the epoch's accuracy and validation.

    With ``comm=None`` (or one process) every method is a no-op.

    Lesson 13b's options (:func:`check_options`): ``overlap=True`` all-reduces buckets of
    about ``bucket_mb`` MB during backward (:class:`OverlappedAllReduce`, its per-step
    timeline in ``history.bucket_timeline``); ``zero=1`` reduce-scatters the gradients and
    lets :meth:`sharded` wrap the optimizer in a :class:`ShardedOptimizer`.
    """

    def __init__(self, comm: Communicator | None, model, seed: int | None, overlap: bool = False,
                 bucket_mb=None, zero: int = 0):
        self.comm = comm if comm is not None else SingleProcess()
        if not isinstance(self.comm, Communicator):
            raise TypeError(f"fit(comm=...) takes a communicator from dl.distributed.init(), "
                            f"got {type(comm).__name__}.")
        self.model = model
        self.buffers = None          # the gradients' flat buffers, made at the first step
        self.overlap, self.bucket_mb, self.zero = check_options(overlap, bucket_mb, zero)
        same_everywhere(self.comm, [self.overlap, self.bucket_mb, self.zero],
                        "fit(overlap=, bucket_mb=, zero=)", ["overlap", "bucket_mb", "zero"])
        broadcast_parameters(model, self.comm)
        self.seed = self._shared_seed(seed)
        self.reducer = self.optimizer = None
        if self.overlap and self.comm.world_size > 1:
            self.reducer = OverlappedAllReduce(model, self.comm, self.bucket_mb * 2**20)
            self.reducer.install()                         # until close()

    def sharded(self, optimizer):
        """The optimizer fit steps: with ``zero=1`` a :class:`ShardedOptimizer` around it
        (its state from now on this rank's shard only), else the optimizer itself."""
        if self.zero == 1 and not isinstance(optimizer, ShardedOptimizer):
            optimizer = ShardedOptimizer(optimizer, self.comm)
        self.optimizer = optimizer
        return optimizer

    def close(self) -> None:
        """After fit: the model's own backward back (overlap=True)."""
        if self.reducer is not None:
            self.reducer.remove()

    def record(self, history) -> None:
        """After each epoch: the overlapped all-reduce's timeline, one entry per step."""
        if self.reducer is not None:
            history.bucket_timeline = list(self.reducer.timeline)

    @property
    def is_main(self) -> bool:
        return self.comm.is_main

    def _shared_seed(self, seed):
        """One seed on every rank (so one batch order): rank 0's, drawn if none was given."""
        if self.comm.world_size == 1:
            return seed
        mine = seed if seed is not None else int(backend.rng().integers(2**31))
        return int(self.comm.broadcast(np.asarray([mine], dtype=np.int64))[0])

    @property
    def dropout_seed(self):
        """This rank's seed for the dropout masks: the seed itself for one process; with
        several ranks one made from (seed, rank), so that ranks, which hold different samples,
        do not all drop the same units of their i-th sample."""
        if self.seed is None or self.comm.world_size == 1:
            return self.seed
        return int(np.random.SeedSequence([self.seed, self.comm.rank]).generate_state(1)[0])

    @property
    def shard(self) -> dict:
        """The keyword arguments that make ``dl.data.batches`` yield this rank's shards."""
        return {} if self.comm.world_size == 1 else \
            {"rank": self.comm.rank, "world_size": self.comm.world_size}

    def steps(self, N: int, batch_size: int) -> int:
        """Steps per epoch: global batches of batch_size * world_size samples."""
        W = self.comm.world_size
        if W == 1:
            return -(-N // batch_size)
        if N < W:
            raise ValueError(f"fit(comm=...): {N} training samples cannot be shared by {W} "
                             f"ranks (each needs at least one). Use more data or fewer ranks.")
        lengths = np.zeros(W, np.int64)
        lengths[self.comm.rank] = N
        lengths = to_numpy(self.comm.all_reduce(lengths)).astype(np.int64)
        if (lengths != lengths[0]).any():
            each = ", ".join(f"rank {r}: {int(n)}" for r, n in enumerate(lengths))
            raise ValueError(f"fit(comm=...) needs the same training data on every rank (each "
                             f"takes its own shard of every global batch), but the ranks passed "
                             f"different numbers of samples ({each}). Load the same data on "
                             f"every rank; fit shards it.")
        return len(shards(np.arange(N), batch_size, 0, W))

    def average_gradients(self, loss: float, count: int) -> tuple[float, int]:
        if self.reducer is not None:                     # started during backward
            return self.reducer.wait(loss, count)
        if self.zero == 1 and self.comm.world_size > 1:
            return self._reduce_scatter(loss, count)
        if self.comm.world_size > 1 and (self.buffers is None or [b.size for b in self.buffers]
                                         != _sizes(buckets(list(self.model.grads.values())))):
            self.buffers = gradient_buffers(self.model)          # once per fit
        return average_gradients(self.model, self.comm, count, loss, buffers=self.buffers)

    def _reduce_scatter(self, loss, count):
        """ZeRO-1: the loss and the count summed (two numbers), then this rank's shard of the
        gradients, sum_r(count_r g_r) / n: lesson 13's average, one N-th of it per rank."""
        dtype = next(iter(self.model.params.values())).dtype
        tail = get_array_module(*self.model.params.values()).asarray([loss * count, count],
                                                                     dtype=dtype)
        self.comm.all_reduce_in_place(tail)
        loss_sum, n = (float(v) for v in to_numpy(tail))
        if not isinstance(self.optimizer, ShardedOptimizer):
            raise RuntimeError("fit(zero=1): the optimizer was not sharded (DataParallel."
                               "sharded(optimizer) makes the one fit steps).")
        self.optimizer.reduce_scatter_gradients(scale=count, divisor=n)
        return loss_sum / n, int(round(n))

    def total(self, value):
        """A count summed over ranks (e.g. the right predictions of an epoch)."""
        if self.comm.world_size == 1:
            return value
        return float(self.comm.all_reduce(np.asarray([float(value)]), "sum")[0])

    def share(self, result: dict) -> dict:
        """Rank 0's evaluation result ({"loss", "accuracy", ...}) on every rank, so callbacks
        decide the same everywhere (None travels as NaN)."""
        if self.comm.world_size == 1:
            return result
        keys = ("loss", "accuracy")
        mine = [np.nan if (result or {}).get(k) is None else float(result[k]) for k in keys]
        got = self.comm.broadcast(np.asarray(mine, dtype=np.float64))
        return {k: (None if np.isnan(v) else float(v)) for k, v in zip(keys, got)}


def check_options(overlap, bucket_mb, zero) -> tuple[bool, float, int]:
    """fit's ``overlap``, ``bucket_mb`` and ``zero``, checked: ``(overlap, bucket MB, stage)``."""
    if not isinstance(overlap, (bool, np.bool_)):
        raise TypeError(f"fit(overlap=...) is True or False, got {overlap!r}.")
    if bucket_mb is not None and not overlap:
        raise ValueError("fit(bucket_mb=...) sizes the buckets of the overlapped all-reduce: "
                         "pass overlap=True with it (without it, lesson 13's all-reduce sends "
                         "buckets of BUCKET_BYTES after backward).")
    bucket_mb = OVERLAP_BUCKET_MB if bucket_mb is None else number(
        bucket_mb, "fit(bucket_mb=...)", "bucket_mb=1 (MB; 0: one bucket per layer)", 0.0)
    if isinstance(zero, bool) or not isinstance(zero, (int, np.integer)) or zero not in ZERO_STAGES:
        more = (" Stages 2 and 3 (sharding the gradients, then the parameters) are not built "
                "here." if isinstance(zero, (int, np.integer)) and zero in (2, 3) else "")
        raise ValueError(f"fit(zero=...) is the ZeRO stage, 0 (off) or 1 (the optimizer's "
                         f"state sharded over the ranks), got {zero!r}.{more}")
    if zero and overlap:
        raise ValueError("fit(zero=1) and overlap=True do not go together here: ZeRO-1 "
                         "reduce-scatters the gradients after backward. Choose one.")
    return bool(overlap), bucket_mb, int(zero)
