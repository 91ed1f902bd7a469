"""ZeRO-1: each rank keeps the optimizer's state for its own shard of the parameters only.

Introduced in notebook ``13b_overlap_sharding_and_recomputation`` (Rajbhandari et al., "ZeRO:
Memory Optimizations Toward Training Trillion Parameter Models", 2020, stage 1). With plain
data parallelism every rank holds all of Adam's m and v: 2 P numbers, on every rank, for P
parameters. But every rank computes the *same* update from the same averaged gradient, so
each could compute one N-th of it and pass the result on::

    flat g (P,) --reduce-scatter--> my shard of the summed g (P_r,)   [half an all-reduce]
    my shard of p (P_r,) <- Adam step with my shard of m, v           [state: 2 P_r numbers]
    my shard of p --all-gather--> every parameter (P,)                [the other half]

The messages are those of one all-reduce (reduce-scatter + all-gather), so the communication
costs the same as lesson 13's; the optimizer's state per rank falls to 1/N. The shards are
``chunk_sizes(P, N)`` long (ragged when N does not divide P). The optimizer inside is any
of ``dl.optim``'s, unchanged: it is handed a one-parameter "model" whose parameter is this
rank's shard, and Adam is elementwise, so its update of a shard is bit for bit its update of
those elements in the whole; ``tests/test_distributed.py`` checks it against unsharded Adam
on real MPI ranks.

``dl.ShardedOptimizer(dl.Adam(model, lr=1e-3), comm)`` in a loop of your own (``step()``
averages the ranks' gradients itself), or ``dl.fit(..., comm=comm, zero=1)``, which wraps the
optimizer it is given and passes each rank's sample count so that uneven shards of a batch
are weighted as in lesson 13.
"""
from __future__ import annotations

import numpy as np

from .backend import get_array_module
from .communicators import Communicator, chunk_sizes
from .flat_buffers import flatten, unflatten

__all__ = ["ShardedOptimizer"]


class _Shard:
    """What an optimizer needs of a model (``params``, ``grads``), for one flat shard."""

    def __init__(self, p, g):
        self.params, self.grads = {"shard": p}, {"shard": g}


class ShardedOptimizer:
    """``optimizer`` (built for ``optimizer.model``) with its state sharded over ``comm``'s
    ranks (ZeRO stage 1). From now on the inner optimizer steps this rank's shard only; its
    ``state`` holds the shard's m and v.

    ``lr``, ``state`` and ``steps`` are the inner optimizer's. :meth:`memory` gives the bytes
    this rank holds.
    """

    def __init__(self, optimizer, comm):
        if isinstance(optimizer, ShardedOptimizer):
            raise TypeError("ShardedOptimizer(optimizer, comm): this optimizer is sharded "
                            "already; pass the optimizer inside it (.inner).")
        model = getattr(optimizer, "model", None)
        if not callable(getattr(optimizer, "step", None)) or not hasattr(model, "params"):
            raise TypeError(f"ShardedOptimizer takes a dlcourse optimizer built for a model, "
                            f"e.g. dl.ShardedOptimizer(dl.Adam(model, lr=1e-3), comm), got "
                            f"{type(optimizer).__name__}.")
        if not isinstance(comm, Communicator):
            raise TypeError(f"ShardedOptimizer(optimizer, comm): comm must come from "
                            f"dl.distributed.init(), got {type(comm).__name__}.")
        params = list(model.params.values())
        if not params:
            raise ValueError(f"ShardedOptimizer: {type(model).__name__} has no parameters.")
        dtypes = {np.dtype(p.dtype).name for p in params}
        if len(dtypes) > 1:
            raise TypeError(f"ShardedOptimizer flattens every parameter into one buffer, so "
                            f"they need one dtype; this model has {sorted(dtypes)}. Cast it "
                            f"with model.astype(...).")
        if optimizer.state:
            raise ValueError("ShardedOptimizer: the optimizer has taken steps already (its "
                             "state is not empty); shard a fresh one.")
        self.inner, self.model, self.comm = optimizer, model, comm
        N, r = comm.world_size, comm.rank
        self.total = sum(p.size for p in params)
        self.sizes = chunk_sizes(self.total, N)                 # ragged when N does not divide
        self.lo = sum(self.sizes[:r])
        self.hi = self.lo + self.sizes[r]
        xp = get_array_module(*params)
        self._flat = xp.empty(self.total, dtype=params[0].dtype)   # gradients, then parameters
        self._shard = _Shard(xp.empty(self.sizes[r], dtype=params[0].dtype), None)
        optimizer.model = self._shard
        self._reduced = False

    # the inner optimizer's settings, read and written through
    lr = property(lambda self: self.inner.lr, lambda self, v: setattr(self.inner, "lr", v))
    state = property(lambda self: self.inner.state,
                     lambda self, v: setattr(self.inner, "state", v))
    steps = property(lambda self: self.inner.steps,
                     lambda self, v: setattr(self.inner, "steps", v))

    def reduce_scatter_gradients(self, scale=None, divisor=None) -> None:
        """This rank's shard of the gradients summed over ranks: the model's gradients (each
        times ``scale``, e.g. the rank's sample count) into one flat buffer,
        ``comm.reduce_scatter``, then divided by ``divisor`` (default: the number of ranks,
        the plain mean). ``dl.fit(zero=1)`` calls it with the counts; :meth:`step` calls it
        when no one did."""
        grads = [self.model.grads[k] for k in self.model.params]
        flatten(grads, out=self._flat, scale=scale)
        mine = self.comm.reduce_scatter(self._flat)
        get_array_module(mine).divide(mine, self.comm.world_size if divisor is None else divisor,
                                      out=mine)
        self._shard.grads["shard"] = mine
        self._reduced = True

    def step(self) -> None:
        """Reduce-scatter the gradients (unless done), step this rank's shard, all-gather."""
        missing = [k for k in self.model.params if k not in self.model.grads]
        if missing:
            raise RuntimeError(f"No gradients for {missing}: call model.backward(...) before step().")
        if not self._reduced:
            self.reduce_scatter_gradients()
        params = list(self.model.params.values())
        flatten(params, out=self._flat)               # this rank's shard of p, as it is now
        self._shard.params["shard"][...] = self._flat[self.lo:self.hi]
        self.inner.step()                             # Adam on P_r elements: 1/N of the state
        full = self.comm.all_gather(self._shard.params["shard"], self.total)
        unflatten(full, params)
        self._reduced = False

    def memory(self) -> dict:
        """Bytes on this rank: ``optimizer_state`` (the shard's m, v, ...), what the same
        optimizer unsharded would hold (``optimizer_state_unsharded``, once it has stepped),
        ``params``, ``grads`` and ``buffers`` (the flat buffer the collectives use)."""
        state = sum(int(v.nbytes) for v in self.inner.state.values())
        per_element = state / self.sizes[self.comm.rank] if self.sizes[self.comm.rank] else 0
        params = sum(int(p.nbytes) for p in self.model.params.values())
        return {"optimizer_state": state,
                "optimizer_state_unsharded": int(round(per_element * self.total)),
                "params": params, "grads": params,
                "buffers": int(self._flat.nbytes + self._shard.params["shard"].nbytes)}
