"""Data-parallel training: one model per process, the gradients summed across processes.

Introduced in notebook ``13_data_parallel``. Every rank (process) holds the whole model and
takes its own shard of every global batch; after the backward pass the gradients are summed
across ranks (an *all-reduce*) and averaged, so every rank takes the same optimizer step and
the replicas stay identical::

    comm = dl.distributed.init()              # MPI under `mpiexec -n N`; one process: trivial
    dl.fit(model, loss, opt, X, y, batch_size=64, seed=0, comm=comm)   # 64 per rank

A communicator has one small interface and three kinds:

* :class:`SingleProcess`: ``world_size == 1``; every collective returns its input.
* :class:`MPICommunicator`: ``mpi4py`` over any MPI (the ``mpich`` wheel gives ``mpiexec``).
  CPU arrays go straight to MPI; GPU arrays are copied through host memory (the PyPI MPI
  builds are not assumed CUDA-aware).
* :class:`NCCLCommunicator`: ``cupyx.distributed`` (NCCL), CuPy arrays, one process per GPU.
  NCCL refuses two ranks on one GPU; ranks and sizes come from ``mpiexec``'s environment.

What data-parallel training adds to the loop (:class:`DataParallel`, made by ``dl.fit(comm=...)``):
parameters broadcast from rank 0 at the start; one shared batch order (each rank draws its own
dropout masks); the gradients flattened into a few buffers (*buckets*), made once and each
all-reduced in place every step; evaluation and progress on rank 0 only.
BatchNorm is **not** synchronised: each rank normalises with its own shard's statistics and
keeps its own running averages (rank 0's are the ones evaluated and saved).

A rank that raises stops every rank: the exception is printed with the rank's number and
``MPI_Abort`` ends the job, so the other ranks never wait forever in a collective.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np

from . import backend
from .backend import device_of, get_array_module, to_device, to_numpy

__all__ = ["Communicator", "SingleProcess", "MPICommunicator", "NCCLCommunicator", "init",
           "ring_all_reduce", "shard", "shards", "flatten", "unflatten", "buckets",
           "broadcast_parameters", "gradient_buffers", "average_gradients", "DataParallel",
           "mpiexec_command",
           "launch_env", "relaunch", "under_mpiexec", "mpiexec_path", "mpiexec_flags", "MPIEXEC_ARGS", "ring_cost", "BUCKET_BYTES", "simulate", "ThreadRank"]

OPS = ("sum", "mean")
BUCKET_BYTES = 25 * 2**20      # PyTorch DDP's default bucket: 25 MiB


def _check_op(op):
    if op not in OPS:
        raise ValueError(f"all_reduce(op=...) must be one of {OPS}, got {op!r}.")


# ======================================================================================
# Communicators
# ======================================================================================
class Communicator:
    """The interface: ``rank``, ``world_size``, ``all_reduce``, ``broadcast``, ``barrier``,
    and ``sendrecv`` (the point-to-point step a ring all-reduce is built from).

    ``all_reduce(x, op)`` returns a new array on x's device: the elementwise sum (or mean)
    of x over all ranks; ``all_reduce_in_place(buf)`` sums into ``buf`` itself.
    ``broadcast(x, root)`` returns root's x on every rank (a new array
    of x's shape, dtype and device). ``sendrecv(send, dest, recv, source)`` sends ``send`` to
    rank ``dest`` and fills ``recv`` (contiguous, in place) from rank ``source``, at once.
    """

    rank = 0
    world_size = 1
    name = "single"

    def all_reduce(self, x, op: str = "sum"):
        raise NotImplementedError

    def all_reduce_in_place(self, buf) -> None:
        """``buf`` (contiguous) replaced by its sum over all ranks, with no new array: what
        training does every step. MPI and NCCL reduce into the buffer itself."""
        buf[...] = self.all_reduce(buf, "sum")

    def broadcast(self, x, root: int = 0):
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def sendrecv(self, send, dest: int, recv, source: int) -> None:
        raise NotImplementedError

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that prints, evaluates and saves."""
        return self.rank == 0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(rank={self.rank}, world_size={self.world_size})"


# --------------------------------------------------------------------------------------
# Every rank must pass the same shape and dtype to a collective. MPI would otherwise abort with
# its own internals ("Message truncated") or, for one size and two shapes, sum in memory order
# without a word. So the arrays' descriptions travel first: a few integers, next to the payload.
# --------------------------------------------------------------------------------------
_META_SIZE = 10                # ndim, the dtype's number, up to 8 axes (-1 beyond the last)
_DTYPES = {np.dtype(t).num: np.dtype(t) for t in
           ("f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1")}


def _meta(x) -> np.ndarray:
    m = np.full(_META_SIZE, -1, np.int64)
    m[0], m[1] = x.ndim, np.dtype(x.dtype).num
    shape = x.shape
    if x.ndim > _META_SIZE - 2:                         # the last axes as one: still compared
        shape = (*shape[:_META_SIZE - 3], int(np.prod(shape[_META_SIZE - 3:])))
    m[2:2 + len(shape)] = shape
    return m


def _described(row) -> str:
    ndim = int(row[0])
    shape = tuple(int(s) for s in row[2:2 + min(ndim, _META_SIZE - 2)])
    dtype = _DTYPES.get(int(row[1]), f"dtype #{int(row[1])}")
    return f"shape {shape} {dtype}"


def check_same_everywhere(rows: np.ndarray, what: str) -> None:
    """``rows``: every rank's :func:`_meta` (rank order). Raise, on every rank alike, a
    ValueError naming what each rank passed when they differ."""
    if (rows == rows[0]).all():
        return
    each = "; ".join(f"rank {r} passed {_described(row)}" for r, row in enumerate(rows))
    raise ValueError(f"{what} needs the same shape and dtype on every rank, but {each}. Each "
                     f"rank must pass its own copy of the same array (the same model's "
                     f"gradients, a buffer made the same way on every rank).")


class SingleProcess(Communicator):
    """One process, no one to talk to: every collective returns (a copy of) its input."""

    def all_reduce(self, x, op: str = "sum"):
        _check_op(op)
        return x.copy()

    def all_reduce_in_place(self, buf) -> None:
        pass                      # the sum over one rank is buf itself

    def broadcast(self, x, root: int = 0):
        return x.copy()

    def barrier(self) -> None:
        pass

    def sendrecv(self, send, dest, recv, source) -> None:
        recv[...] = send          # the only peer is this process


class MPICommunicator(Communicator):
    """MPI through mpi4py. NumPy arrays go to MPI as buffers; CuPy arrays through the host."""

    name = "mpi"

    def __init__(self, mpi_comm=None):
        MPI = _mpi()
        self.MPI = MPI
        self.comm = mpi_comm if mpi_comm is not None else MPI.COMM_WORLD
        self.rank, self.world_size = self.comm.Get_rank(), self.comm.Get_size()
        if self.world_size > 1:
            _abort_on_uncaught_exception(self)

    def _host(self, x) -> np.ndarray:
        return np.ascontiguousarray(to_numpy(x))

    def _check(self, x, what: str) -> None:
        if self.world_size > 1:
            rows = np.empty((self.world_size, _META_SIZE), np.int64)
            self.comm.Allgather(_meta(x), rows)
            check_same_everywhere(rows, what)

    def all_reduce(self, x, op: str = "sum"):
        _check_op(op)
        self._check(x, "all_reduce")
        send = self._host(x)
        out = np.empty_like(send)
        self.comm.Allreduce(send, out, op=self.MPI.SUM)
        if op == "mean":
            out /= self.world_size
        return to_device(out, device_of(x))

    def all_reduce_in_place(self, buf) -> None:
        if device_of(buf) != "cpu" or not buf.flags.c_contiguous:
            return super().all_reduce_in_place(buf)       # through a host copy
        self._check(buf, "all_reduce_in_place")
        self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def broadcast(self, x, root: int = 0):
        self._check(x, "broadcast")
        buf = self._host(x).copy()
        self.comm.Bcast(buf, root=root)
        return to_device(buf, device_of(x))

    def barrier(self) -> None:
        self.comm.Barrier()

    def sendrecv(self, send, dest, recv, source) -> None:
        host = recv if device_of(recv) == "cpu" else np.empty(recv.shape, recv.dtype)
        if not host.flags.c_contiguous:
            raise ValueError("sendrecv: the receive buffer must be contiguous (a slice of a "
                             "flat array is; a column of a matrix is not).")
        self.comm.Sendrecv(self._host(send), dest=dest, recvbuf=host, source=source)
        if host is not recv:
            recv[...] = to_device(host, "gpu")

    def abort(self, code: int = 1) -> None:
        self.comm.Abort(code)


class NCCLCommunicator(Communicator):
    """NCCL through ``cupyx.distributed``: CuPy arrays, one process per GPU.

    ``rank`` and ``world_size`` default to those ``mpiexec`` gives (read from its environment,
    no MPI needed); rank 0 runs cupyx's rendezvous server (``host``, ``port``; default
    127.0.0.1:13333, so one machine). NumPy arrays are moved to the GPU first.
    """

    name = "nccl"

    def __init__(self, rank: int | None = None, world_size: int | None = None,
                 host: str | None = None, port: int | None = None):
        cupy = backend.require_cupy()
        env_rank, env_size = _launcher_rank()
        self.rank = env_rank if rank is None else int(rank)
        self.world_size = env_size if world_size is None else int(world_size)
        gpus = cupy.cuda.runtime.getDeviceCount()
        if self.world_size > gpus:
            raise backend.DeviceError(
                f"NCCL needs one GPU per rank: {self.world_size} ranks but {gpus} GPU(s) "
                f"visible (NCCL refuses two ranks on one GPU). Start fewer ranks, or use "
                f"backend='mpi', which copies GPU arrays through the host.")
        cupy.cuda.Device(self.rank % gpus).use()
        self.cupy = cupy
        dist = backend.require_cupyx_distributed()
        self.nccl = dist.init_process_group(self.world_size, self.rank, backend="nccl",
                                            host=host, port=port)
        if self.world_size > 1:
            _abort_on_uncaught_exception(self)

    def _gpu(self, x):
        return self.cupy.ascontiguousarray(to_device(x, "gpu"))

    def _check(self, x, what: str) -> None:
        if self.world_size > 1:
            rows = self.cupy.zeros((self.world_size, _META_SIZE), np.int64)
            rows[self.rank] = self.cupy.asarray(_meta(x))
            self.nccl.all_reduce(rows, rows, "sum")       # each rank fills its own row
            check_same_everywhere(to_numpy(rows), what)

    def all_reduce(self, x, op: str = "sum"):
        _check_op(op)
        self._check(x, "all_reduce")
        send = self._gpu(x)
        out = self.cupy.empty_like(send)
        self.nccl.all_reduce(send, out, "sum")
        if op == "mean":
            out /= self.world_size
        return out if device_of(x) == "gpu" else to_numpy(out)

    def all_reduce_in_place(self, buf) -> None:
        if device_of(buf) != "gpu" or not buf.flags.c_contiguous:
            return super().all_reduce_in_place(buf)
        self._check(buf, "all_reduce_in_place")
        self.nccl.all_reduce(buf, buf, "sum")           # NCCL reduces in place

    def broadcast(self, x, root: int = 0):
        buf = self._gpu(x).copy()
        self.nccl.broadcast(buf, root)
        return buf if device_of(x) == "gpu" else to_numpy(buf)

    def barrier(self) -> None:
        self.nccl.barrier()

    def sendrecv(self, send, dest, recv, source) -> None:
        send = self._gpu(send)
        out = recv if device_of(recv) == "gpu" else self.cupy.empty(recv.shape, recv.dtype)
        if dest == source:                   # two ranks: one paired exchange
            self.nccl.send_recv(send, out, dest)
        elif self.rank % 2 == 0:             # even ranks send first, odd ranks receive first:
            self.nccl.send(send, dest)       # blocking sends around a ring cannot all wait
            self.nccl.recv(out, source)
        else:
            self.nccl.recv(out, source)
            self.nccl.send(send, dest)
        if out is not recv:
            recv[...] = to_numpy(out)

    def abort(self, code: int = 1) -> None:
        os._exit(code)                       # mpiexec then stops the other ranks


class ThreadRank(Communicator):
    """One rank of a group simulated with threads in one process (see :func:`simulate`):
    real message passing through queues, for exercises and tests without MPI."""

    name = "threads"

    def __init__(self, rank, group):
        self.rank, self.world_size, self._group = rank, group.size, group

    def all_reduce(self, x, op: str = "sum"):
        _check_op(op)
        slots = self._group.exchange(self.rank, x)
        check_same_everywhere(np.stack([_meta(s) for s in slots]), "all_reduce")
        total = sum(slots[1:], slots[0].copy())
        return total / self.world_size if op == "mean" else total

    def broadcast(self, x, root: int = 0):
        return self._group.exchange(self.rank, x)[root].copy()

    def barrier(self) -> None:
        self._group.barrier.wait()

    def sendrecv(self, send, dest, recv, source) -> None:
        self._group.queues[self.rank, dest].put(send.copy())
        recv[...] = self._group.queues[source, self.rank].get(timeout=self._group.timeout)


class _ThreadGroup:
    def __init__(self, size, timeout):
        import queue
        import threading
        self.size, self.timeout = size, timeout
        self.barrier = threading.Barrier(size, timeout=timeout)
        self.queues = {(a, b): queue.Queue() for a in range(size) for b in range(size)}
        self.slots = [None] * size

    def exchange(self, rank, x):
        """Every rank's x, in rank order (a copy of the list, taken between two barriers)."""
        self.slots[rank] = x.copy()
        self.barrier.wait()
        got = list(self.slots)
        self.barrier.wait()
        return got


def simulate(fn, inputs, timeout: float = 20.0):
    """Run ``fn(comm, inputs[r])`` as ranks r = 0..N-1 (N = len(inputs)), one thread each;
    return their results in rank order. An exception on any rank is raised here (naming the
    rank); a rank that waits longer than ``timeout`` seconds for a message raises too."""
    import threading
    group = _ThreadGroup(len(inputs), timeout)
    results, errors = [None] * len(inputs), [None] * len(inputs)

    def body(r):
        try:
            results[r] = fn(ThreadRank(r, group), inputs[r])
        except BaseException as err:   # noqa: BLE001 - handed to the caller below
            errors[r] = err
            group.barrier.abort()      # the others stop waiting
    threads = [threading.Thread(target=body, args=(r,), daemon=True) for r in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout * 3)
    first = next(((r, e) for r, e in enumerate(errors) if e is not None
                  and not isinstance(e, threading.BrokenBarrierError)), None)
    if first is None:
        first = next(((r, e) for r, e in enumerate(errors) if e is not None), None)
    if first is not None:
        r, err = first
        raise RuntimeError(f"rank {r} of {len(inputs)} failed: {type(err).__name__}: {err}") \
            from err
    if any(t.is_alive() for t in threads):
        raise RuntimeError(f"the simulated ranks did not finish in {timeout * 3:g} s: a "
                           f"sendrecv without its partner?")
    return results


def _mpi():
    """mpi4py's MPI module, or an ImportError that says how to install it."""
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise ImportError(f"dl.distributed needs mpi4py and an MPI library ({err}). Install "
                          f"both with pip: pip install 'dlcourse[distributed]' (mpi4py and "
                          f"the mpich wheel, which brings mpiexec).") from err
    return MPI


# Environment variables the launchers set: MPICH/Hydra (PMI_*), Open MPI, Slurm.
_RANK_VARS = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
              ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def _launcher_rank() -> tuple[int, int]:
    """(rank, world_size) from mpiexec's (or srun's) environment; (0, 1) outside one."""
    for rank, size in _RANK_VARS:
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def under_mpiexec() -> bool:
    """Whether this process was started by mpiexec (or srun)."""
    return any(rank in os.environ for rank, _ in _RANK_VARS)


def init(backend_name: str | None = None, **kwargs) -> Communicator:
    """The communicator for this process.

    ``backend_name``: ``None`` (MPI when started by ``mpiexec``, else :class:`SingleProcess`),
    ``"mpi"``, ``"nccl"`` (GPUs; ``kwargs`` go to :class:`NCCLCommunicator`) or ``"single"``.
    """
    if backend_name is None:
        backend_name = "mpi" if under_mpiexec() else "single"
    if backend_name == "single":
        return SingleProcess()
    if backend_name == "mpi":
        return MPICommunicator(**kwargs)
    if backend_name == "nccl":
        return NCCLCommunicator(**kwargs)
    raise ValueError(f"dl.distributed.init(backend_name=...) must be None, 'mpi', 'nccl' or "
                     f"'single', got {backend_name!r}.")


def _abort_on_uncaught_exception(comm) -> None:
    """An uncaught exception on one rank prints it with the rank's number, then aborts the
    whole job: without this the other ranks would wait forever in their next collective."""
    previous = sys.excepthook

    def hook(kind, value, tb):
        if issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)
        else:
            text = "".join(traceback.format_exception(kind, value, tb))
            print(f"{text}dl.distributed: rank {comm.rank} of {comm.world_size} failed with "
                  f"{kind.__name__}: {value}. Stopping all ranks.", file=sys.stderr, flush=True)
        sys.stdout.flush()
        # mpiexec forwards each rank's output through a helper process that the abort kills:
        # a moment first, or the message above can be lost (seen on a busy machine)
        time.sleep(1.0)
        comm.abort(1)

    sys.excepthook = hook


# ======================================================================================
# Ring all-reduce, by hand (the lesson's exercise; the reference for its check)
# ======================================================================================
def ring_all_reduce(comm: Communicator, x):
    """The sum of x over all ranks, with a ring: reduce-scatter, then all-gather.

    x: any shape; the flat buffer is cut into N chunks (N = world_size). Rank r sends to
    r+1 and receives from r-1. Reduce-scatter, N-1 steps: at step s rank r sends chunk
    (r-s) mod N and adds what arrives into chunk (r-s-1) mod N; afterwards rank r holds
    the full sum of chunk (r+1) mod N. All-gather, N-1 steps: rank r sends chunk (r+1-s)
    mod N and overwrites chunk (r-s) mod N with what arrives. Each rank sends
    2(N-1)/N of the buffer in all, whatever N is.
    """
    N, r = comm.world_size, comm.rank
    xp = get_array_module(x)
    flat = xp.array(x, copy=True).reshape(-1)
    chunks = xp.array_split(flat, N)                  # views into flat
    right, left = (r + 1) % N, (r - 1) % N
    for s in range(N - 1):                            # reduce-scatter
        i = (r - s - 1) % N
        incoming = xp.empty_like(chunks[i])
        comm.sendrecv(chunks[(r - s) % N], right, incoming, left)
        chunks[i] += incoming
    for s in range(N - 1):                            # all-gather
        comm.sendrecv(chunks[(r + 1 - s) % N], right, chunks[(r - s) % N], left)
    return flat.reshape(x.shape)


def ring_cost(nbytes: float, world_size: int, alpha: float, beta: float) -> float:
    """The α-β model of a ring all-reduce, in seconds: 2(N-1) messages, each paying the
    latency ``alpha`` (s), and 2(N-1)/N of the buffer per rank over bandwidth ``beta`` (B/s)."""
    N = world_size
    return 2 * (N - 1) * alpha + 2 * (N - 1) / N * nbytes / beta


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
# Flat buffers and buckets
# ======================================================================================
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
    """

    def __init__(self, comm: Communicator | None, model, seed: int | None):
        self.comm = comm if comm is not None else SingleProcess()
        if not isinstance(self.comm, Communicator):
            raise TypeError(f"fit(comm=...) takes a communicator from dl.distributed.init(), "
                            f"got {type(comm).__name__}.")
        self.model = model
        self.buffers = None          # the gradients' flat buffers, made at the first step
        broadcast_parameters(model, self.comm)
        self.seed = self._shared_seed(seed)

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
        if self.comm.world_size > 1 and (self.buffers is None or [b.size for b in self.buffers]
                                         != _sizes(buckets(list(self.model.grads.values())))):
            self.buffers = gradient_buffers(self.model)          # once per fit
        return average_gradients(self.model, self.comm, count, loss, buffers=self.buffers)

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


# ======================================================================================
# Launching: mpiexec, found and configured in one place
# ======================================================================================
# Hydra (MPICH's mpiexec) needs no flags as root nor on 2 cores: no binding by default and
# oversubscription is allowed. "-launcher fork" starts the ranks as local processes, never ssh.
# (Given only to Hydra.) Open MPI's mpiexec, what a GPU server often has, refuses to start as
# root without "--allow-run-as-root" (seen on the lent H100 machine, 2026-11-26) and, on fewer
# cores than ranks, without "--oversubscribe": OPEN_MPI_ARGS, given only to Open MPI.
MPIEXEC_ARGS = ("-launcher", "fork")
OPEN_MPI_ARGS = ("--oversubscribe",)
OPEN_MPI_ROOT_ARGS = ("--allow-run-as-root",)


def mpiexec_path() -> str | None:
    """The ``mpiexec`` of this Python's environment (the mpich wheel's), else on PATH."""
    here = os.path.dirname(sys.executable)
    return shutil.which("mpiexec", path=here) or shutil.which("mpiexec")


def launch_env(threads: int = 1, env=None) -> dict:
    """The environment for ranks: ``threads`` BLAS threads each (two ranks with two threads
    each on two cores fight for them)."""
    env = dict(os.environ if env is None else env)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def mpiexec_command(ranks: int, argv) -> list[str]:
    """``[mpiexec, -n, ranks, *flags, *argv]``, or a RuntimeError saying how to install it."""
    path = mpiexec_path()
    if path is None:
        raise RuntimeError("mpiexec was not found. Install MPI with pip: pip install "
                           "'dlcourse[distributed]' (the mpich wheel brings mpiexec).")
    return [path, "-n", str(int(ranks)), *mpiexec_flags(path), *argv]


@functools.lru_cache(maxsize=None)
def mpiexec_flags(path: str) -> tuple[str, ...]:
    """The flags ``path`` (an mpiexec) needs to start local ranks: Hydra's, Open MPI's, or none."""
    if os.path.exists(os.path.join(os.path.dirname(path), "mpiexec.hydra")):
        return MPIEXEC_ARGS
    try:   # Open MPI's says "mpiexec (Open MPI) 5.0.3" or, before 5, "mpiexec (OpenRTE) 4.1.6"
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        return OPEN_MPI_ARGS + (OPEN_MPI_ROOT_ARGS if root else ())
    return ()


def relaunch(ranks: int, python_args, drop_option: str) -> int:
    """Run ``python *python_args`` on ``ranks`` MPI ranks (one BLAS thread each), without
    ``drop_option`` and its value (``--ranks N``); return mpiexec's exit status."""
    args, skip = [], False
    for a in python_args:
        if skip:
            skip = False
        elif a == drop_option:
            skip = True
        elif not a.startswith(drop_option + "="):
            args.append(a)
    return subprocess.call(mpiexec_command(ranks, [sys.executable, *args]), env=launch_env(1))
