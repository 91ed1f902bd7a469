"""The gradients' all-reduce overlapped with backward: buckets sent as soon as they are full.

Introduced in notebook ``13b_overlap_sharding_and_recomputation``; made by
``dl.fit(..., comm=comm, overlap=True, bucket_mb=...)``. Lesson 13's all-reduce waits for the
whole backward pass, then sends every gradient. But backward finishes the *last* layer first:
its gradients are final while the first layers are still being computed. So, as PyTorch's DDP
does with its hooks::

    backward, last layer first:   L4 done   L3 done   L2 done   L1 done | wait  step
    buckets (bucket_mb):          [--- bucket 0 ---]  [--- bucket 1 ------]
    communication:                      Iallreduce(b0) ......  Iallreduce(b1) ..|

* :func:`bucket_plan` groups the layers, in backward order, into buckets of about
  ``bucket_mb`` (a bucket closes as soon as it holds at least that much, PyTorch's rule;
  ``bucket_mb=0``: one bucket per layer). Layers are never split.
* When the last layer of a bucket has finished its backward, the bucket's gradients are
  copied (times this rank's sample count) into its flat buffer and a **non-blocking**
  all-reduce (``MPI_Iallreduce``) is started at once; the backward pass goes on.
* After backward, :meth:`OverlappedAllReduce.wait` waits for each bucket in turn (the loss
  and the sample count follow in a tiny one of their own), and divides by the global count:
  the same sums and the same division as the blocking path, so on 2 ranks (a + b, one order)
  the result is bit for bit the blocking one's.
* Each step's ``ready`` (last gradient in), ``start`` (the all-reduce handed to MPI) and
  ``end`` (first seen finished) times of every bucket, from the start of backward, go to
  ``timeline``: the lesson draws compute and communication on one axis from them.

**What it buys on CPU MPI.** MPICH has no progress thread by default: a started
``Iallreduce`` moves only while some rank is inside an MPI call. So after every layer's
backward this module calls ``test()`` on the buckets in flight (one cheap MPI call), which
lets MPI push the messages along between layers; the timeline shows how far that gets.
On 2 processes on 2 cores the compute of both ranks fills the cores, so overlap can hide
latency but not buy cores: see ``benchmarks/data_parallel.py`` for the measured figures.
"""
from __future__ import annotations

import time
from collections import deque

import numpy as np

from .backend import get_array_module, to_numpy
from .communicators import same_everywhere
from .flat_buffers import flatten, unflatten
from .layers import Sequential

__all__ = ["bucket_plan", "OverlappedAllReduce", "predicted_end"]


def bucket_plan(nbytes, bucket_bytes: float) -> list[list[int]]:
    """Which layers' gradients go in which bucket, in the order backward finishes them.

    nbytes: (L,) each layer's gradient bytes, in *forward* order (0: a layer without
    parameters, in no bucket). Returns buckets, first sent first, each a list of layer
    indices in backward order: walking from the last layer down, a layer joins the open
    bucket, which closes as soon as it holds ``>= bucket_bytes``; what is left at the end is
    the last bucket. ``bucket_bytes = 0``: one bucket per layer with gradients.
    E.g. nbytes = [400, 0, 40, 0, 80], bucket_bytes = 100 -> [[4, 2], [0]].
    """
    plan, current, size = [], [], 0
    for i in range(len(nbytes) - 1, -1, -1):
        if nbytes[i] == 0:
            continue
        current.append(i)
        size += nbytes[i]
        if size >= bucket_bytes:
            plan.append(current)
            current, size = [], 0
    if current:
        plan.append(current)
    return plan


def predicted_end(ready, nbytes, cost) -> list[float]:
    """When each bucket's all-reduce would end if started at its ``ready`` time, one at a time
    (a bucket waits for the one before it: one network, one ring): ``end_b = max(ready_b,
    end_{b-1}) + cost(nbytes_b)``, ``cost`` e.g. ``lambda n: ring_cost(n, 2, alpha, beta)``."""
    ends, last = [], -np.inf
    for t, n in zip(ready, nbytes):
        last = max(t, last) + cost(n)
        ends.append(last)
    return ends


class OverlappedAllReduce:
    """Bucketed, non-blocking all-reduce of ``model``'s gradients, started from inside
    backward. ``install()`` wraps the backward of ``model`` and of each of its top-level
    layers (a Sequential's; any other model is one layer) for the length of a ``fit``;
    ``remove()`` puts them back. ``wait(loss, count)`` after backward returns the global
    batch's ``(mean loss, sample count)`` and leaves the averaged gradients in ``model.grads``.
    """

    def __init__(self, model, comm, bucket_bytes: float, keep_steps: int = 1000):
        self.model, self.comm, self.bucket_bytes = model, comm, bucket_bytes
        self.units = list(model.layers) if isinstance(model, Sequential) else [model]
        self.plan = None               # bucket_plan over the units, made at the first step
        self.timeline = deque(maxlen=keep_steps)    # one dict per step (see the module)
        self._wrapped = []
        self._step = None

    # -- wrapping backward ----------------------------------------------------------------
    def install(self) -> None:
        targets = [(self.model, self._model_backward)]
        if self.units != [self.model]:
            targets += [(unit, self._unit_backward(i)) for i, unit in enumerate(self.units)]
        for obj, make in targets:
            self._wrapped.append((obj, obj.__dict__.get("backward")))
            obj.backward = make(obj.backward)

    def remove(self) -> None:
        for obj, before in reversed(self._wrapped):
            if before is None:
                del obj.backward
            else:
                obj.backward = before
        self._wrapped = []

    def _model_backward(self, backward):
        def wrapped(dout, *args, **kwargs):
            self._begin(dout)
            dx = backward(dout, *args, **kwargs)
            if self.units == [self.model]:
                self._layer_done(0)
            self._step["backward_end"] = self._now()
            return dx
        return wrapped

    def _unit_backward(self, i):
        def make(backward):
            def wrapped(dout, *args, **kwargs):
                dx = backward(dout, *args, **kwargs)
                self._layer_done(i)
                return dx
            return wrapped
        return make

    # -- during backward --------------------------------------------------------------------
    def _now(self) -> float:
        return time.perf_counter() - self._t0

    def _begin(self, dout) -> None:
        """Backward starts: the sample count (dout's first axis) scales this rank's share."""
        if self._step is not None and self._step.get("waited") is False:
            raise RuntimeError("fit(overlap=True): a second backward pass began before the "
                               "first one's all-reduce was waited for.")
        self._t0 = time.perf_counter()
        self.count = int(dout.shape[0])
        self._step = {"backward_end": None, "waited": False, "buckets": []}
        self._pending = []

    def _make_plan(self) -> None:
        nbytes = [sum(p.nbytes for p in unit.params.values()) for unit in self.units]
        self.plan = bucket_plan(nbytes, self.bucket_bytes)
        self.closes = {bucket[-1]: b for b, bucket in enumerate(self.plan)}
        params = [p for unit in self.units for p in unit.params.values()]
        dtype = params[0].dtype
        xp = get_array_module(*params)
        self.buffers = [xp.empty(sum(p.size for i in bucket for p in self.units[i].params.values()),
                                 dtype=dtype) for bucket in self.plan]
        self.bytes = [int(b.nbytes) for b in self.buffers]
        self.tail = xp.empty(2, dtype=dtype)           # [loss * count, count]
        same_everywhere(self.comm, [len(self.plan), sum(p.size for p in params),
                                    np.dtype(dtype).num, self.bucket_bytes],
                        "fit(overlap=True): the gradient buckets",
                        ["buckets", "gradient elements", "dtype number", "bucket_bytes"])

    def _grads(self, b) -> list:
        return [g for i in self.plan[b] for g in self.units[i].grads.values()]

    def _layer_done(self, i) -> None:
        ready = self._now()
        if self.plan is None:
            self._make_plan()
        b = self.closes.get(i)
        if b is not None:                      # the bucket's last layer: send it now
            flatten(self._grads(b), out=self.buffers[b], scale=self.count)
            request = self.comm.iall_reduce_in_place(self.buffers[b])
            record = {"bucket": b, "layers": list(self.plan[b]), "bytes": self.bytes[b],
                      "ready": ready, "start": self._now(), "end": None}
            self._step["buckets"].append(record)
            self._pending.append((request, record))
        self._progress()

    def _progress(self) -> None:
        """One ``test()`` per bucket in flight: MPI moves them on, and the first time one is
        seen finished is its ``end``."""
        for request, record in self._pending:
            if record["end"] is None and request.test():
                record["end"] = self._now()

    # -- after backward ---------------------------------------------------------------------
    def wait(self, loss: float, count: int) -> tuple[float, int]:
        if self._step is None or self._step["waited"] is not False:
            raise RuntimeError("fit(overlap=True): no backward pass to wait for (the model's "
                               "backward must run between two steps).")
        if count != self.count:
            raise RuntimeError(f"fit(overlap=True): backward saw {self.count} samples (dout's "
                               f"first axis) but the step has {count}.")
        self.tail[...] = self.tail.dtype.type(loss * count), count
        tail = self.comm.iall_reduce_in_place(self.tail)
        for request, record in self._pending:
            request.wait()
            if record["end"] is None:
                record["end"] = self._now()
        tail.wait()
        loss_sum, n = (float(v) for v in to_numpy(self.tail))
        for b in range(len(self.plan)):
            unflatten(self.buffers[b], self._grads(b), divisor=n)   # g = sum_r(count_r g_r) / n
        self._step["waited"] = self._now()
        self.timeline.append(self._step)
        return loss_sum / n, int(round(n))
