"""The training loop, written once: :func:`fit` and :func:`evaluate` (the confusion matrix is
``metrics.py``).

Introduced in notebook ``04a_mlp_on_digits``, which first writes the loop by hand::

    for epoch in range(epochs):
        for xb, yb in dl.data.batches(X, y, batch_size):
            logits = model.forward(xb)          # (B, K)
            L = loss.forward(logits, yb)        # a Python float
            model.backward(loss.backward())     # fills model.grads
            optimizer.step()                    # updates model.params in place

and then shows that :func:`fit` is that loop plus the things a real run needs:

* data moved to the model's device and cast to its dtype, one batch at a time;
* ``model.train()`` while training, ``model.eval()`` while evaluating (the mode is restored);
* a :class:`History` of per-epoch losses, accuracies and times;
* a progress bar (``tqdm.auto``: a widget in notebooks, text in terminals);
* a non-finite loss stops the run with :class:`TrainingDiverged`, the model keeping its last
  parameters whose loss was finite;
* Ctrl-C stops cleanly and returns the history so far (``history.interrupted`` is True);
* ``callback(epoch, history)`` after each epoch and ``on_step(step, loss)`` after each step;
  either may stop training by returning ``False`` or raising :class:`StopTraining`;
* a seed that makes a CPU run repeatable bit for bit.

Notebook ``04b_optimizers_and_regularization`` adds a learning-rate schedule (``lr_schedule=``)
and gradient clipping (``clip_norm=``: :func:`dlcourse.optim.clip_grad_norm` before every
optimizer step).

Later lessons put steps around this loop, each made by its own module and imported only
when it is asked for (``dlcourse/step_hooks.py`` lists where each acts): lesson 10's
``precision=`` (``dlcourse/precision.py``) and lesson 13's ``comm=``
(``dlcourse/distributed.py``). Lesson 11b's pruned weights stay zero through every optimizer's
``step`` (``dlcourse/optim.py``), here or in a loop of your own.
"""
from __future__ import annotations

import contextlib
import math
import sys
import time

import numpy as np

from . import backend
from ._validate import check_labels, whole_number
from .backend import device_of, get_array_module, to_numpy
from .fit_arguments import (check_batch_size, check_clip_norm, check_finite_data,
                            check_fit_arguments, check_loss, check_model, check_xy)
from .history import History
from .layers import eval_mode
from .optim import clip_grad_norm
from .schedules import lr_at
from .step_hooks import StepHooks

__all__ = ["fit", "evaluate", "History", "TrainingDiverged", "StopTraining"]


class StopTraining(Exception):
    """Raise it from a ``callback`` or ``on_step`` hook to end :func:`fit` cleanly."""


class TrainingDiverged(RuntimeError):
    """The loss (or a parameter) became inf or NaN.

    Attributes: ``history`` (the :class:`History` so far), ``epoch`` and ``step`` (1-based,
    the step counted within its epoch), ``lr`` (the optimizer's learning rate, if it has one).
    The model and the optimizer are put back to their state at the last step whose loss was
    finite, so you can lower ``optimizer.lr`` and call :func:`fit` again.
    """

    def __init__(self, message, history, epoch, step, lr=None):
        super().__init__(message)
        self.history, self.epoch, self.step, self.lr = history, epoch, step, lr


# ======================================================================================
# Accuracy: which kind of task is this?
# ======================================================================================
def _task(loss, out) -> str | None:
    """``"multiclass"``, ``"binary"`` or ``None`` (not classification), from the loss and
    the shape of the model's output (N, K)."""
    name = type(loss).__name__ if loss is not None else None
    if name == "SigmoidCrossEntropy":
        return "binary"
    if name in ("SoftmaxCrossEntropy", "MulticlassHingeLoss"):
        return "multiclass"
    if name is None:   # evaluate(loss=None): guess from the output
        if out.ndim == 2 and out.shape[1] > 1:
            return "multiclass"
        return "binary"
    # another loss (MSELoss): accuracy only for one-hot targets (_Tally checks the first batch)
    return "multiclass" if out.ndim == 2 and out.shape[1] > 1 else None


def _correct(task, out, y):
    """The number of right predictions in a batch, as a 0-d array on out's device
    (not a Python int: converting would wait for the GPU at every step)."""
    if task == "multiclass":
        pred = out.argmax(axis=1)
        if y.ndim == 2 and y.shape == out.shape:      # one-hot targets
            y = y.argmax(axis=1)
        elif y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
            return None
        return (pred == y).sum()
    if task == "binary":
        pred = out.reshape(-1) > 0                     # logit > 0  <=>  probability > 0.5
        return (pred == (y.reshape(-1) > 0.5)).sum()
    return None


def _one_hot(y) -> bool:
    """Whether every row of y (N, K) is a one-hot vector (one 1, the rest 0). Asked once, on
    the first batch: on a GPU the answer waits for it."""
    xp = get_array_module(y)
    return bool(xp.all((y == 0) | (y == 1)) and xp.all(y.sum(axis=1) == 1))


class _Tally:
    """Right predictions counted over batches; the task is found from the first batch."""

    def __init__(self, loss):
        self.loss, self.task, self.correct = loss, "unknown", 0

    def add(self, out, y):
        if self.task == "unknown":
            self.task = _task(self.loss, out)
            if self.task == "multiclass" and y.ndim == 2 and not _one_hot(y):
                self.task = None          # real-valued targets (regression): no accuracy
        if self.task is not None:
            c = _correct(self.task, out, y)
            if c is None:
                self.task = None
            else:
                self.correct = self.correct + c   # stays on the device until accuracy() reads it

    def accuracy(self, n):
        return int(self.correct) / n if self.task is not None else None


# ======================================================================================
# Helpers shared by fit and evaluate (the checks of their arguments: fit_arguments.py)
# ======================================================================================


def _model_device(model) -> str:
    if hasattr(model, "device"):
        return model.device
    arrays = list(model.params.values())
    return device_of(arrays[0]) if arrays else "cpu"


def _model_dtype(model):
    dtype = getattr(model, "dtype", None)
    if dtype is None:
        arrays = list(model.params.values())
        dtype = arrays[0].dtype if arrays else None
    return dtype


def _prepare(xb, dtype):
    """Cast a float batch to the model's float dtype (learners often pass float64).
    Integer data is left alone, so the layer's error about it can speak."""
    if dtype is not None and np.issubdtype(xb.dtype, np.floating) and xb.dtype != dtype:
        return xb.astype(dtype)
    return xb


def _check_class_labels(loss, y, out, fn):
    """Once the first batch shows a classifier with K outputs: y (N,) must be integer labels
    in [0, K), or the accuracy would count against labels no output can match."""
    if _task(loss, out) == "multiclass" and y.ndim == 1:
        check_labels(fn, y, len(y), out.shape[1])


def _is_out_of_memory(err) -> bool:
    """CuPy's OutOfMemoryError (matched by name: this module never imports CuPy) or NumPy's
    MemoryError."""
    return isinstance(err, MemoryError) or any(
        c.__name__ == "OutOfMemoryError" for c in type(err).__mro__)


def _out_of_memory(err, batch_size, where):
    device = "GPU" if "cupy" in type(err).__module__ else "computer"
    smaller = max(1, batch_size // 2)
    return MemoryError(f"The {device} ran out of memory {where} with batch_size={batch_size}. "
                       f"Try a smaller batch, e.g. batch_size={smaller}, or a smaller model. "
                       f"({type(err).__name__}: {err})")


# ======================================================================================
# evaluate
# ======================================================================================
def evaluate(model, X, y, loss=None, batch_size: int = 256) -> dict:
    """Loss and accuracy of ``model`` on ``(X, y)``, in evaluation mode (the mode is restored).

    X: (N, ...) NumPy or CuPy array (moved batch by batch to the model's device);
    y: (N,) integer labels (or targets the loss accepts).

    Returns ``{"loss": float or None, "accuracy": float or None, "n": N}``: ``loss`` is
    ``None`` when no loss is given; ``accuracy`` is ``None`` when the task is not
    classification (e.g. ``MSELoss`` on real-valued targets: with several outputs, only targets
    whose rows are one-hot count as classes, so soft or smoothed labels give ``None`` too).
    Binary models (one output) are scored by ``logit > 0``.
    """
    check_model(model, "evaluate")
    if loss is not None:
        check_loss(loss, "evaluate")
    check_xy(X, y, "evaluate")
    batch_size = check_batch_size(batch_size, "evaluate")
    check_finite_data(X, "evaluate")
    from .data import batches

    device, dtype = _model_device(model), _model_dtype(model)
    total_loss, tally = 0.0, _Tally(loss)
    try:
        with eval_mode(model):
            for i, (xb, yb) in enumerate(batches(X, y, batch_size, shuffle=False, device=device)):
                out = model.forward(_prepare(xb, dtype))
                if i == 0:
                    _check_class_labels(loss, y, out, "evaluate")
                if loss is not None:
                    total_loss += loss.forward(out, yb) * len(xb)
                tally.add(out, yb)
    except Exception as err:
        if _is_out_of_memory(err):
            raise _out_of_memory(err, batch_size, "in evaluate") from err
        raise
    N = len(X)
    return {"loss": total_loss / N if loss is not None else None,
            "accuracy": tally.accuracy(N),
            "n": N}


# ======================================================================================
# fit
# ======================================================================================
def _snapshot(model, optimizer) -> tuple:
    """A copy of every parameter and buffer of the model, and of the optimizer's state
    (``optimizer.state``: momentum, Adam's moments; ``optimizer.steps``: the step count that
    Adam's bias correction uses): O(number of parameters), far cheaper than a forward pass
    over a batch."""
    state = model.state_dict() if hasattr(model, "state_dict") else model.params
    params = {k: v.copy() for k, v in state.items()}
    buffers = {k: v.copy() for k, v in getattr(optimizer, "state", {}).items()}
    return params, buffers, getattr(optimizer, "steps", None)


def _restore(model, optimizer, snapshot) -> None:
    params, buffers, steps = snapshot
    if hasattr(model, "load_state_dict"):
        model.load_state_dict(params)
    else:
        for k, p in model.params.items():
            p[...] = params[k]
    if hasattr(optimizer, "state"):
        optimizer.state = buffers   # buffers made after the snapshot go: they start again at 0
    if steps is not None:
        optimizer.steps = steps


def _all_finite(model) -> bool:
    for p in model.params.values():
        xp = get_array_module(p)
        if not bool(xp.isfinite(p).all()):
            return False
    return True


def _bad_data(X, y, xb, yb) -> str | None:
    """What is wrong with the batch (xb, yb) of (X, y), if it holds NaN or inf: the words
    that follow "the batch ... " in the error, naming a row of X (or y) and how to find them
    all. None if the batch is finite. Reads the batch's values, so it runs only after the loss
    became non-finite, never at every step."""
    for name, batch, full in (("X", xb, X), ("y", yb, y)):
        if not np.issubdtype(batch.dtype, np.floating):
            continue                            # integer labels cannot be NaN
        xp = get_array_module(batch)
        nan, inf = bool(xp.isnan(batch).any()), bool(xp.isinf(batch).any())
        if not (nan or inf):
            continue
        kind = "NaN and inf" if nan and inf else "NaN" if nan else "inf"
        xp = get_array_module(full)
        rows = to_numpy(xp.flatnonzero(~xp.isfinite(full.reshape(len(full), -1)).all(axis=1)))
        where = ""
        if len(rows) == 1:
            where = f" (row {rows[0]})"
        elif len(rows) > 1:
            where = f" (e.g. row {rows[0]}; {len(rows)} rows in all)"
        axes = 1 if full.ndim == 2 else tuple(range(1, full.ndim))   # one answer per row
        if kind == "NaN":
            finder = f"np.isnan({name})" + (f".any(axis={axes})" if full.ndim > 1 else "")
        else:
            finder = f"~np.isfinite({name})" + (f".all(axis={axes})" if full.ndim > 1 else "")
        return (f"contains {kind} values in {name}{where}. Fix the data before training: "
                f"{finder} finds the rows.")
    return None


def _diverged(history, epoch, step, steps, optimizer, what, bad_data=None):
    lr = getattr(optimizer, "lr", None)
    history.stop_reason = "diverged"
    restored = ("The model and the optimizer are back to their state at the last step whose "
                "loss was finite; the history so far is in err.history.")
    if bad_data is not None:   # not the learning rate's fault
        message = f"fit: the batch at epoch {epoch}, step {step} {bad_data} {restored}"
        return TrainingDiverged(message, history, epoch, step, lr)
    advice = (f"The learning rate lr={lr:g} is probably too large: try lr={lr / 10:g}."
              if lr is not None else "Try a smaller learning rate.")
    message = (f"Training diverged at epoch {epoch}, step {step} of {steps}: {what}. {advice} "
               f"{restored}")
    return TrainingDiverged(message, history, epoch, step, lr)


def _keep_going(result) -> bool:
    return result is not False


def fit(model, loss, optimizer, X, y, *, epochs: int = 10, batch_size: int = 64,
        validation=None, seed: int | None = None, progress: bool = True,
        callback=None, on_step=None, lr_schedule=None, clip_norm=None, precision: str = "fp32",
        loss_scaler=None, comm=None, overlap: bool = False, bucket_mb=None,
        zero: int = 0) -> History:
    """Train ``model`` on ``(X, y)`` with mini-batch gradient descent; return a :class:`History`.

    Lesson 04a's loop (the module's docstring), run ``epochs`` times over shuffled batches.

    Args:
        model: e.g. ``dl.MLP([64, 128, 10])``, with ``forward``, ``backward``, ``params`` and
            ``grads``. Data go to wherever the model is (``model.to("gpu")``).
        loss: e.g. ``dl.SoftmaxCrossEntropy()``; ``forward(out, yb)`` returns a float and
            ``backward()`` returns d(loss)/d(out).
        optimizer: e.g. ``dl.Adam(model, lr=1e-3)``.
        X: (N, ...) training inputs, NumPy or CuPy; float batches are cast to the model's dtype.
        y: (N,) integer labels (or the targets the loss takes).
        epochs: passes over the data.
        batch_size: samples per step ``B``; the last batch of an epoch may be smaller.
        validation: ``(X_val, y_val)``, evaluated after every epoch, or ``None``.
        seed: seeds the batch order and the dropout masks (``dl.manual_seed(seed)``): on the
            CPU the same seed and the same starting model give bit-for-bit the same result.
        progress: show a progress bar (``tqdm.auto``) where someone sees it redrawn: in a
            notebook, or on a terminal; with standard error going into a file or a pipe, none
            (each redraw would be a line of the file).
        callback: ``callback(epoch, history)`` after each epoch (from 1); returning ``False``
            or raising :class:`StopTraining` ends training cleanly.
        on_step: ``on_step(step, loss)`` after each step (counted over the run, from 1); same.
        lr_schedule: ``lr_schedule(t) -> lr`` sets ``optimizer.lr`` before every step, ``t``
            the training time in epochs (0.0, ..., 1.5 halfway through the second epoch), e.g.
            ``dl.cosine_decay(1e-3, epochs=10)`` (``dlcourse/schedules.py``).
        clip_norm: lesson 04b: before every optimizer step, scale the gradients so that their
            global norm (over all parameters together) is at most ``clip_norm``
            (:func:`dlcourse.optim.clip_grad_norm`, as PyTorch's ``clip_grad_norm_``); the
            norm before clipping of every step that updated goes to ``history.grad_norm``.
            With ``precision=`` and ``comm=`` it clips the unscaled, averaged gradients.
            ``None``: no clipping.
        precision, loss_scaler: lesson 10: ``"bf16"`` or ``"fp16"`` matrix products with
            float32 parameters; ``loss_scaler``: a ``dl.LossScaler`` (``None``: one for fp16;
            ``False``: none), its state in ``history.loss_scaler`` (``dlcourse/precision.py``).
        comm: lesson 13: data-parallel training with a communicator from
            ``dl.distributed.init()``: ``batch_size`` samples per rank, gradients averaged
            over the global batch, validation on rank 0; every rank passes the same X and y
            (``dlcourse/distributed.py``: BatchNorm, dropout). ``None``: one process.
        overlap, bucket_mb, zero: lesson 13b, with ``comm``: ``overlap=True`` starts each
            bucket's all-reduce (about ``bucket_mb`` MB; 0: one per layer) during backward,
            its timeline in ``history.bucket_timeline`` (``dlcourse/overlap.py``); ``zero=1``
            shards the optimizer's state over the ranks (``dlcourse/zero.py``).

    A model pruned with ``dl.prune`` (lesson 11b) keeps its pruned weights at zero (the
    optimizer's step does it). What lessons 10 and 13 add to the loop are the ``hooks`` it calls
    (``dlcourse/step_hooks.py``).

    Returns:
        A :class:`History`. After Ctrl-C, the history so far with ``interrupted=True``.

    Raises:
        TrainingDiverged: the loss or the parameters became inf or NaN. The model and the
            optimizer's state are put back to those of the last step whose loss was finite
            (a copy is kept before each update), so you can lower ``optimizer.lr`` and call
            ``fit`` again. A batch holding NaN or inf is named, instead of the learning rate.
        MemoryError: the GPU (or computer) ran out of memory; the message suggests a batch size.
    """
    check_fit_arguments(model, loss, optimizer, X, y, epochs, batch_size, validation, lr_schedule)
    clip_norm = check_clip_norm(clip_norm)
    seed = None if seed is None else whole_number(seed, "fit(seed=...)", minimum=0)
    model.sample_shape = tuple(X.shape[1:])     # kept by dl.save: predict and serve read it
    if zero and clip_norm is not None:
        raise ValueError("fit(zero=1) with clip_norm=... is not built here: the global norm "
                         "needs every gradient, and with ZeRO-1 a rank holds one shard of them.")
    hooks = StepHooks.for_fit(model, precision, loss_scaler, comm, seed,  # none in lesson 04a
                              {"overlap": overlap, "bucket_mb": bucket_mb, "zero": zero})
    optimizer = hooks.data_parallel.sharded(optimizer)     # zero=1: its state sharded (13b)
    run = _Run(model, loss, optimizer, X, y, epochs, batch_size, progress, lr_schedule,
               hooks.data_parallel, clip_norm)
    try:
        for epoch in range(1, epochs + 1):
            model.train()
            for xb, yb in run.batches(epoch):
                with hooks.autocast():
                    out = model.forward(xb)                               # (B, K)
                    value = run.finite(loss.forward(out, yb), xb, yb)     # a Python float
                    model.backward(hooks.scale(loss.backward()))          # fills model.grads
                value, n = hooks.average_gradients(value, len(xb))
                with run.update():                        # sets the lr; a snapshot, to undo it
                    if hooks.should_step(model):
                        run.clip_gradients()                      # clip_norm=: lesson 04b
                        optimizer.step()                                  # updates model.params
                run.record(value, n, out, yb, on_step)    # history, progress bar, on_step
            hooks.record(run.history)
            run.end_epoch(validation, callback)
    except StopTraining:
        run.history.stop_reason = "callback"
    except KeyboardInterrupt:
        run.interrupted()
    except Exception as err:
        if _is_out_of_memory(err):
            raise _out_of_memory(err, run.batch_size, f"at epoch {run.epoch}, step {run.step}") from err
        raise
    finally:
        run.close()
        hooks.close()
    return run.history


class _Run:
    """What fit keeps track of around its loop: the batches (moved to the model's device and
    cast to its dtype), the seeded batch order, the snapshot that undoes a step gone to inf or
    NaN, the running loss and accuracy of the epoch, the History, the progress bar, and the
    hooks. Each method is one thing the loop does. ``dp``: lesson 13's DataParallel (with
    ``fit(comm=...)``), which shares the seed and the batches among ranks, else
    ``step_hooks.OneProcess``."""

    def __init__(self, model, loss, optimizer, X, y, epochs, batch_size, progress, lr_schedule,
                 dp, clip_norm=None):
        self.model, self.loss, self.optimizer, self.X, self.y = model, loss, optimizer, X, y
        self.lr_schedule, self.dp, self.clip_norm = lr_schedule, dp, clip_norm
        self.epochs, self.batch_size = epochs, int(batch_size)
        self.device, self.dtype = _model_device(model), _model_dtype(model)
        seed = dp.seed                                 # fit's (with comm=: rank 0's, everywhere)
        if seed is not None:                           # dropout masks (and CuPy's generator),
            backend.manual_seed(dp.dropout_seed)       # each rank its own (lesson 13)
        self.order_rng = backend.rng(seed) if seed is not None else None   # one order per epoch
        self.steps = dp.steps(len(X), self.batch_size)   # ceil(N / B) for one process
        self.history = History()
        self.bar = _progress_bar(progress and dp.is_main, epochs * self.steps)
        self.was_training = getattr(model, "training", True)
        self.epoch = self.step = self.global_step = 0
        self.snapshot = None                           # model and optimizer at the last finite loss
        self.in_update = False

    def batches(self, epoch):
        """(xb, yb) over the epoch's shuffled batches (this rank's share of each, with
        ``comm=``), xb in the model's dtype; counts ``self.step``."""
        from .data import batches
        self.epoch, self.start = epoch, time.perf_counter()
        self.loss_sum, self.seen, self.tally = 0.0, 0, _Tally(self.loss)
        order_seed = int(self.order_rng.integers(2**32)) if self.order_rng is not None else None
        if self.bar is not None:
            self.bar.set_description(f"epoch {epoch}/{self.epochs}", refresh=False)
        for self.step, (xb, yb) in enumerate(batches(self.X, self.y, self.batch_size, shuffle=True,
                                                     seed=order_seed, device=self.device,
                                                     **self.dp.shard), start=1):
            self.global_step += 1
            yield _prepare(xb, self.dtype), yb

    def finite(self, value, xb, yb) -> float:
        """``value``, the batch's loss, if it is finite; else undo the last update and raise
        TrainingDiverged, saying why."""
        if not math.isfinite(value):
            if self.snapshot is not None:             # undo the update that led here
                _restore(self.model, self.optimizer, self.snapshot)
            raise _diverged(self.history, self.epoch, self.step, self.steps, self.optimizer,
                            f"the loss is {value}", _bad_data(self.X, self.y, xb, yb))
        return value

    @contextlib.contextmanager
    def update(self):
        """Around optimizer.step(): a snapshot before it, the learning rate set, and a mark
        while it runs (Ctrl-C half-way through an update restores the snapshot)."""
        self.snapshot = _snapshot(self.model, self.optimizer)
        self.in_update = True
        self.set_lr()
        yield
        self.in_update = False

    def set_lr(self):
        """optimizer.lr = lr_schedule(the training time in epochs), checked."""
        if self.lr_schedule is not None:
            t = (self.epoch - 1) + (self.step - 1) / self.steps    # the training time, in epochs
            self.optimizer.lr = lr_at(self.lr_schedule, t)

    def clip_gradients(self):
        """With ``clip_norm``: the gradients' global norm capped at it, the norm they had
        recorded in ``history.grad_norm``."""
        if self.clip_norm is not None:
            self.history.grad_norm.append(clip_grad_norm(self.model, self.clip_norm))

    def record(self, value, n, out, yb, on_step):
        """``value``: the loss over the batch of ``n`` samples (the global batch, with
        ``comm=``): into the History and the progress bar; then ``on_step``."""
        self.loss_sum, self.seen = self.loss_sum + value * n, self.seen + n
        self.tally.add(out, yb)
        self.history.step_loss.append(value)
        self.history.step_lr.append(getattr(self.optimizer, "lr", None))
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss {self.loss_sum / self.seen:.4f}" + _val_text(self.history),
                                     refresh=False)
            self.bar.update(1)
        if on_step is not None and not _keep_going(on_step(self.global_step, value)):
            raise StopTraining

    def end_epoch(self, validation, callback):
        history, seen, dp = self.history, self.seen, self.dp
        # The last update of the epoch has not been through a forward pass yet.
        if not _all_finite(self.model):
            _restore(self.model, self.optimizer, self.snapshot)
            raise _diverged(history, self.epoch, self.step, self.steps, self.optimizer,
                            "a parameter became inf or NaN")
        history.train_loss.append(self.loss_sum / seen)
        self.tally.correct = dp.total(self.tally.correct)   # lesson 13: over every rank
        history.train_accuracy.append(self.tally.accuracy(seen))
        history.lr.append(getattr(self.optimizer, "lr", None))
        if validation is not None:         # with comm=, rank 0 evaluates and shares the result
            result = dp.share(evaluate(self.model, *validation, loss=self.loss,
                                       batch_size=self.batch_size) if dp.is_main else None)
            history.val_loss.append(result["loss"])
            history.val_accuracy.append(result["accuracy"])
        backend.synchronize()              # GPU work is queued: wait before reading the clock
        history.epoch_time.append(time.perf_counter() - self.start)
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss {history.train_loss[-1]:.4f}" + _val_text(history))
        if callback is not None and not _keep_going(callback(self.epoch, history)):
            raise StopTraining

    def interrupted(self):
        if self.in_update and self.snapshot is not None:   # stopped half-way through an update
            _restore(self.model, self.optimizer, self.snapshot)
        self.history.stop_reason, self.history.interrupted = "interrupted", True
        self.close_bar()
        print(f"Training interrupted at epoch {self.epoch}, step {self.step}: returning the "
              f"history of the {self.history.epochs} completed epoch(s).", file=sys.stderr)

    def close_bar(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def close(self):
        self.close_bar()
        self.model.train(self.was_training)


def _val_text(history) -> str:
    parts = ""
    if history.val_loss and history.val_loss[-1] is not None:
        parts += f", val_loss {history.val_loss[-1]:.4f}"
    if history.val_accuracy and history.val_accuracy[-1] is not None:
        parts += f", val_acc {history.val_accuracy[-1]:.4f}"
    return parts


def _bar_is_seen() -> bool:
    """Whether a progress bar would be seen redrawn: in a Jupyter kernel (a widget), or with
    standard error on a terminal. Not when it goes into a file, a pipe or a test's capture."""
    shell = sys.modules.get("IPython")
    if shell is not None:
        try:
            if getattr(shell.get_ipython(), "kernel", None) is not None:
                return True
        except Exception:  # noqa: BLE001 - an IPython that cannot say: fall back on the terminal
            pass
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):     # replaced, or closed
        return False


def _progress_bar(progress: bool, total: int):
    if not progress or not _bar_is_seen():
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:   # tqdm is a dependency, but a bare environment should still train
        return None
    return tqdm(total=total, unit="step", leave=True, dynamic_ncols=True)
