"""The steps later lessons add around :func:`dlcourse.fit`'s loop, lesson 04a's.

``fit`` reads as lesson 04a's loop; where a later lesson changes a step, the loop calls a hook
of :class:`StepHooks` by name, and the hook does nothing unless that lesson's argument is used::

    with hooks.autocast():                              # lesson 10: bf16/fp16 products
        out = model.forward(xb)
        value = loss.forward(out, yb)
        model.backward(hooks.scale(loss.backward()))    # lesson 10: the loss scale
    value, n = hooks.average_gradients(value, len(xb))  # lesson 13: over every rank's batch
    if hooks.should_step(model):                        # lesson 10: skip an fp16 overflow
        optimizer.step()                                # (lesson 11b: it keeps pruned zeros)

Each hook is an object made by its lesson's module (``precision.Policy``,
``distributed.DataParallel``), imported only when fit's arguments ask for it: a plain ``fit``
imports none of them. The loop is notebook ``04a_mlp_on_digits``'s; the hooks come with
``10_number_formats_and_mixed_precision`` and ``13_data_parallel``. Lesson ``11b_pruning``
needs no hook: every optimizer's ``step`` keeps a pruned model's zeros (``optim.py``).
"""
from __future__ import annotations

import contextlib

__all__ = ["StepHooks", "OneProcess"]


class OneProcess:
    """What ``fit`` asks of lesson 13's ``DataParallel`` (the seed, this rank's share of the
    batches, steps per epoch, totals over ranks), answered for one process: no import of
    ``distributed.py``, and ``fit`` keeps one path."""

    is_main, shard = True, {}

    def __init__(self, seed):
        self.seed = self.dropout_seed = seed

    def steps(self, N: int, batch_size: int) -> int:
        return -(-N // batch_size)                       # ceil(N / batch_size)

    def total(self, value):
        return value

    def sharded(self, optimizer):
        return optimizer

    def share(self, result):
        return result


class StepHooks:
    """The steps later lessons add around lesson 04a's. Each is an object from its lesson's
    module with some of these methods; where none has one, nothing happens there:

    ``autocast()``                    a context around forward, loss and backward (lesson 10)
    ``scale(dout) -> dout``           the loss's gradient, before backward (lesson 10)
    ``average_gradients(loss, n)``    -> the global batch's (loss, n) (lesson 13)
    ``should_step(model) -> bool``    False skips this update (lesson 10: fp16 overflowed)
    ``record(history)``               after each epoch (lesson 10: the loss scaler's state)
    """

    def __init__(self, steps=(), data_parallel=None):
        self.steps, self.data_parallel = list(steps), data_parallel or OneProcess(None)

    @classmethod
    def for_fit(cls, model, precision, loss_scaler, comm, seed, parallel=None) -> StepHooks:
        """The steps fit's arguments ask for, each module imported only then. ``parallel``:
        lesson 13b's ``{"overlap", "bucket_mb", "zero"}``, given only with ``comm``."""
        parallel = parallel or {}
        defaults = {"overlap": False, "bucket_mb": None, "zero": 0}
        given = {k: v for k, v in parallel.items()
                 if not (v is defaults[k] or (type(v) is int and v == defaults[k]))}
        if given and comm is None:
            given = ", ".join(f"{k}={v!r}" for k, v in given.items())
            raise ValueError(f"fit({given}) changes how the ranks share the gradients: it "
                             f"needs comm=dl.distributed.init() (under mpiexec -n N).")
        if parallel.get("zero") and precision != "fp32":
            raise ValueError("fit(zero=1) with precision=... is not built here: the loss "
                             "scaler reads every gradient, and with ZeRO-1 a rank holds one "
                             "shard of them. Use precision='fp32'.")
        steps, data_parallel = [], OneProcess(seed)
        if precision != "fp32" or (loss_scaler is not None and loss_scaler is not False):
            from .precision import Policy                             # lesson 10
            steps.append(Policy(precision, loss_scaler))
        if comm is not None:
            from .distributed import DataParallel                     # lesson 13
            data_parallel = DataParallel(comm, model, seed, **parallel)
            steps.append(data_parallel)
        return cls(steps, data_parallel)

    def _each(self, name):
        return [getattr(s, name) for s in self.steps if hasattr(s, name)]

    @contextlib.contextmanager
    def autocast(self):
        with contextlib.ExitStack() as stack:
            for autocast in self._each("autocast"):
                stack.enter_context(autocast())
            yield

    def scale(self, dout):
        for scale in self._each("scale"):
            dout = scale(dout)
        return dout

    def average_gradients(self, value, n):
        for average in self._each("average_gradients"):
            value, n = average(value, n)
        return value, n

    def should_step(self, model) -> bool:
        return all([should_step(model) for should_step in self._each("should_step")])

    def record(self, history):
        for record in self._each("record"):
            record(history)

    def close(self):
        """After fit, however it ended (lesson 13b: the model's own backward back)."""
        for close in self._each("close"):
            close()
