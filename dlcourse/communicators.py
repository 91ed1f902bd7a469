"""Communicators: how ranks (processes) talk, behind one small interface.

Introduced in notebook ``13_data_parallel``; the non-blocking all-reduce, reduce-scatter and
all-gather come with ``13b_overlap_sharding_and_recomputation``. ``dl.distributed`` re-exports
everything here (``dl.distributed.init()``, ``dl.distributed.simulate``). Four kinds:

* :class:`SingleProcess`: ``world_size == 1``; every collective returns its input.
* :class:`MPICommunicator`: ``mpi4py`` over any MPI (the ``mpich`` wheel gives ``mpiexec``).
  CPU arrays go straight to MPI; GPU arrays are copied through host memory (the PyPI MPI
  builds are not assumed CUDA-aware).
* :class:`NCCLCommunicator`: ``cupyx.distributed`` (NCCL), CuPy arrays, one process per GPU.
  NCCL refuses two ranks on one GPU; ranks and sizes come from ``mpiexec``'s environment.
* :class:`ThreadRank`: ranks simulated by threads in one process (:func:`simulate`), for the
  exercises' checks and for tests without MPI.

A rank that raises stops every rank: the exception is printed with the rank's number and
``MPI_Abort`` ends the job, so the other ranks never wait forever in a collective.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np

from . import backend
from .backend import device_of, to_device, to_numpy
from .mpi_launch import launcher_rank, under_mpiexec

__all__ = ["Communicator", "SingleProcess", "MPICommunicator", "NCCLCommunicator", "ThreadRank",
           "Request", "init", "simulate", "check_same_everywhere", "same_everywhere",
           "chunk_sizes"]

OPS = ("sum", "mean")


def _check_op(op):
    if op not in OPS:
        raise ValueError(f"all_reduce(op=...) must be one of {OPS}, got {op!r}.")


def chunk_sizes(n: int, world_size: int) -> list[int]:
    """The lengths of the ``world_size`` chunks a flat buffer of ``n`` elements is cut into
    (``np.array_split``'s rule: the first ``n % world_size`` chunks one longer): rank r owns
    chunk r in a reduce-scatter, and ZeRO-1's shard r is chunk r of the flat parameters."""
    return [len(c) for c in np.array_split(np.empty(n, np.int8), world_size)]


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

    Lesson 13b adds three collectives, each with a default built from the ones above (correct,
    not fast; MPI overrides them with its own):

    * ``iall_reduce_in_place(buf) -> Request``: the in-place sum *started*; ``request.wait()``
      finishes it (MPI: ``Iallreduce``). The default sums at once and returns a done request.
    * ``reduce_scatter(x) -> chunk``: x flat (P,), the same length on every rank; rank r gets
      chunk r (:func:`chunk_sizes`) of the sum over ranks (MPI: ``Reduce_scatter``).
    * ``all_gather(chunk, total) -> (total,)``: every rank's chunk r, put end to end
      (MPI: ``Allgatherv``). reduce-scatter then all-gather is an all-reduce.
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

    def iall_reduce_in_place(self, buf) -> Request:
        self.all_reduce_in_place(buf)
        return Request()

    def reduce_scatter(self, x):
        total = self._flat_input(x, "reduce_scatter")
        lo, hi = self._bounds(total.size)
        return self.all_reduce(total)[lo:hi].copy()

    def all_gather(self, chunk, total: int):
        lo, hi = self._bounds(total, chunk, "all_gather")
        out = backend.get_array_module(chunk).zeros(total, dtype=chunk.dtype)
        out[lo:hi] = chunk           # the others' places hold 0: the sum over ranks is exact
        self.all_reduce_in_place(out)
        return out

    def _flat_input(self, x, what):
        if x.ndim != 1:
            raise ValueError(f"{what} takes a flat (1-D) buffer, got shape {tuple(x.shape)}: "
                             f"pass x.reshape(-1) (dl.distributed.flatten joins several).")
        return x

    def _bounds(self, total, chunk=None, what=""):
        """(start, stop) of this rank's chunk of a flat buffer of ``total`` elements; with
        ``chunk`` given, checked to have that chunk's length."""
        sizes = chunk_sizes(int(total), self.world_size)
        lo = sum(sizes[:self.rank])
        if chunk is not None and (chunk.ndim != 1 or chunk.size != sizes[self.rank]):
            raise ValueError(f"{what}(chunk, total={total}): rank {self.rank} of "
                             f"{self.world_size} owns {sizes[self.rank]} of the {total} elements "
                             f"(chunk_sizes({total}, {self.world_size}) = {sizes}), but passed "
                             f"a chunk of shape {tuple(chunk.shape)}.")
        return lo, lo + sizes[self.rank]

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


class Request:
    """A collective in flight: ``wait()`` blocks until it is done, ``test()`` says whether it
    is (and, on MPI, lets MPI move it on: without a progress thread MPICH advances a
    non-blocking collective only inside MPI calls). This one is done from the start."""

    def wait(self) -> None:
        pass

    def test(self) -> bool:
        return True


class _MPIRequest(Request):
    def __init__(self, request):
        self.request = request

    def wait(self) -> None:
        self.request.Wait()

    def test(self) -> bool:
        return bool(self.request.Test())


def same_everywhere(comm, values, what: str, names) -> None:
    """Raise the same ValueError on every rank when the ranks passed different ``values``
    (a few numbers: settings, sizes), naming each rank's; one all-reduce, so never a hang in a
    later collective that the ranks would call differently. ``names``: one per value."""
    mine = np.asarray(values, dtype=np.float64).reshape(-1)
    if comm.world_size == 1:
        return
    rows = np.zeros((comm.world_size, mine.size))
    rows[comm.rank] = mine
    rows = to_numpy(comm.all_reduce(rows))
    if (rows == rows[0]).all():
        return
    each = "; ".join(f"rank {r}: " + ", ".join(f"{n}={_number(v)}" for n, v in zip(names, row))
                     for r, row in enumerate(rows))
    raise ValueError(f"{what} must be the same on every rank, but {each}. Start every rank "
                     f"with the same arguments and the same model.")


def _number(v) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:g}"


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

    def reduce_scatter(self, x):
        return self._flat_input(x, "reduce_scatter").copy()

    def all_gather(self, chunk, total: int):
        self._bounds(total, chunk, "all_gather")
        return chunk.copy()


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

    def iall_reduce_in_place(self, buf) -> Request:
        """``Iallreduce`` into ``buf`` (a contiguous CPU array): started, not finished. No
        shape check here (it would be a blocking collective): the caller checks its plan once
        (:func:`same_everywhere`), as fit's overlapped all-reduce does."""
        if device_of(buf) != "cpu" or not buf.flags.c_contiguous:
            return super().iall_reduce_in_place(buf)
        return _MPIRequest(self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM))

    def reduce_scatter(self, x):
        self._flat_input(x, "reduce_scatter")
        self._check(x, "reduce_scatter")
        sizes = chunk_sizes(x.size, self.world_size)
        out = np.empty(sizes[self.rank], dtype=x.dtype)
        self.comm.Reduce_scatter(self._host(x), out, recvcounts=sizes, op=self.MPI.SUM)
        return to_device(out, device_of(x))

    def all_gather(self, chunk, total: int):
        self._bounds(total, chunk, "all_gather")
        sizes = chunk_sizes(int(total), self.world_size)
        out = np.empty(int(total), dtype=chunk.dtype)
        self.comm.Allgatherv(self._host(chunk), [out, sizes])
        return to_device(out, device_of(chunk))

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
        env_rank, env_size = launcher_rank()
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


