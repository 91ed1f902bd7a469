"""The training loop, written once: :func:`fit`, :func:`evaluate`, :func:`confusion_matrix`.

Introduced in notebook ``04_mlp_on_digits``, which first writes the loop by hand::

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
"""
from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from . import backend
from ._validate import check_labels, model_class_error, number, whole_number
from .backend import device_of, get_array_module, to_numpy
from .layers import eval_mode
from .distributed import DataParallel   # fit(comm=...) (lesson 13)
from .precision import Policy   # precision= and loss scaling (lesson 10)
from .prune import keep_pruned   # pruned weights stay zero (lesson 11)

__all__ = ["fit", "evaluate", "confusion_matrix", "History", "TrainingDiverged", "StopTraining"]


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
# History
# ======================================================================================
@dataclass
class History:
    """What happened in :func:`fit`, one entry per completed epoch.

    ``train_loss[e]``: mean loss over epoch e's training batches (in training mode, while the
    parameters were still changing); ``train_accuracy[e]``: accuracy on those same batches;
    ``val_loss[e]``, ``val_accuracy[e]``: on the validation set at the end of epoch e
    (evaluation mode), empty lists without ``validation=``; ``epoch_time[e]``: seconds;
    ``step_loss``: the loss of every step, for a fine-grained plot; ``lr[e]``: the learning
    rate of epoch e's last step, ``step_lr``: of every step (``None`` for an optimizer
    without ``lr``), as set by ``fit(..., lr_schedule=...)`` or left as the optimizer had it.

    ``stop_reason`` is ``None`` when every epoch ran, else ``"callback"``, ``"interrupted"``
    (Ctrl-C) or ``"diverged"``; ``interrupted`` is True after Ctrl-C.
    Accuracies are ``None`` when the task is not classification (e.g. ``MSELoss``).
    """

    train_loss: list = field(default_factory=list)
    train_accuracy: list = field(default_factory=list)
    val_loss: list = field(default_factory=list)
    val_accuracy: list = field(default_factory=list)
    epoch_time: list = field(default_factory=list)
    step_loss: list = field(default_factory=list)
    lr: list = field(default_factory=list)
    step_lr: list = field(default_factory=list)
    stop_reason: str | None = None
    interrupted: bool = False
    precision: str = "fp32"                               # lesson 10: fit(precision=...)
    loss_scaler: dict | None = None                       # its state_dict() after each epoch
    loss_scale: list = field(default_factory=list)        # the loss scale at every step

    @property
    def epochs(self) -> int:
        """How many epochs completed."""
        return len(self.train_loss)

    @property
    def total_time(self) -> float:
        return float(sum(self.epoch_time))

    def as_dict(self) -> dict:
        """Plain lists and numbers (e.g. for ``json.dump``)."""
        return asdict(self)

    def table(self) -> str:
        """One line per epoch: losses, accuracies and time, and the learning rate (of the
        epoch's last step) when it changed during training (``fit(lr_schedule=...)``)."""
        rates = [r for r in self.step_lr if r is not None]
        show_lr = len(set(rates)) > 1
        lines = ["epoch  train_loss  train_acc  val_loss  val_acc   time" + ("        lr" * show_lr)]
        for e in range(self.epochs):
            lr = _get(self.lr, e)
            lines.append(f"{e + 1:5d}  {_fmt(self.train_loss[e], 10)}  "
                         f"{_fmt(_get(self.train_accuracy, e), 9)}  "
                         f"{_fmt(_get(self.val_loss, e), 8)}  {_fmt(_get(self.val_accuracy, e), 7)}"
                         f"  {self.epoch_time[e]:5.2f}s"
                         + (f"  {lr:8.2e}" if show_lr and lr is not None else ""))
        if self.stop_reason:
            lines.append(f"(stopped: {self.stop_reason})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        if not self.epochs:
            return f"History(0 epochs, stop_reason={self.stop_reason!r})"
        last = f"train_loss={self.train_loss[-1]:.4f}"
        if self.val_accuracy and self.val_accuracy[-1] is not None:
            last += f", val_accuracy={self.val_accuracy[-1]:.4f}"
        stop = f", stop_reason={self.stop_reason!r}" if self.stop_reason else ""
        return f"History({self.epochs} epochs, {last}, {self.total_time:.1f} s{stop})"


def _get(values, i):
    return values[i] if i < len(values) else None


def _fmt(value, width):
    return f"{value:{width}.4f}" if value is not None else " " * (width - 1) + "-"


# ======================================================================================
# Accuracy: which kind of task is this?
# ======================================================================================
def _task(loss, out) -> str | None:
    """``"multiclass"``, ``"binary"`` or ``None`` (not classification), from the loss and
    the shape of the model's output (N, K)."""
    name = type(loss).__name__ if loss is not None else None
    if name == "SigmoidCrossEntropy":
        return "binary"
    if name == "SoftmaxCrossEntropy":
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
# Helpers shared by fit and evaluate
# ======================================================================================
def _check_model(model, fn):
    if isinstance(model, type):
        raise model_class_error(model, fn)
    for attr in ("forward", "backward", "params"):
        if not hasattr(model, attr):
            hint = (" The Perceptron learns with its own rule: call model.fit(X, y)."
                    if type(model).__name__ == "Perceptron" else
                    " Pass a dlcourse model such as dl.MLP([...]) or dl.Sequential(...).")
            raise TypeError(f"{fn} needs a model with forward, backward and params, got "
                            f"{type(model).__name__} (it has no {attr}).{hint}")


def _dl(cls) -> str:
    """``"dl."`` for a dlcourse class, so examples read ``dl.SGD(...)``; else nothing."""
    return "dl." if cls.__module__.startswith("dlcourse") else ""


def _check_loss(loss, fn):
    """A loss is an instance with forward and backward: not its class, not the optimizer."""
    if isinstance(loss, type):
        raise TypeError(f"{fn} got the class {loss.__name__} as the loss: pass an instance: "
                        f"{_dl(loss)}{loss.__name__}().")
    if not (hasattr(loss, "forward") and hasattr(loss, "backward")):
        hint = ""
        if hasattr(loss, "step"):
            hint = (" Did you swap loss and optimizer? The order is "
                    "fit(model, loss, optimizer, X, y)." if fn == "fit" else
                    " That is an optimizer: evaluate needs only the loss.")
        raise TypeError(f"{fn} expects a loss such as dl.SoftmaxCrossEntropy() (with forward "
                        f"and backward), got {type(loss).__name__}.{hint}")


def _trains_part_of(target, model) -> bool:
    """Whether every parameter array of ``target`` (what an optimizer was built for) is one of
    ``model``'s: the model itself, dl.fuse(model), or a part of it (a head being fine-tuned),
    whatever the names. A model rebuilt or loaded since has new arrays, and fails this."""
    params = getattr(target, "params", None)
    if not isinstance(params, Mapping):
        return True                  # an optimizer of the learner's own: nothing to compare
    mine = {id(a) for a in model.params.values()}
    return all(id(a) in mine for a in params.values())


def _check_optimizer(optimizer, model):
    """An optimizer instance with step(), built for ``model`` (or for a model sharing its
    parameters, such as the one dl.fuse(model) was made from)."""
    if isinstance(optimizer, type):
        raise TypeError(f"fit got the class {optimizer.__name__} as the optimizer: create it "
                        f"from the model you train: opt = {_dl(optimizer)}{optimizer.__name__}"
                        f"(model, lr=0.01).")
    if not callable(getattr(optimizer, "step", None)):
        hint = (" Did you swap loss and optimizer? The order is fit(model, loss, optimizer, X, y)."
                if hasattr(optimizer, "forward") else "")
        raise TypeError(f"fit expects an optimizer such as dl.SGD(model, lr=0.01) (with "
                        f"step()), got {type(optimizer).__name__}.{hint}")
    target = getattr(optimizer, "model", None)
    if target is not None and target is not model and not _trains_part_of(target, model):
        cls = type(optimizer)
        raise ValueError(f"fit: the optimizer was built for a different model. Create it from "
                         f"the model you train: opt = {_dl(cls)}{cls.__name__}(model, lr=...).")


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


def _check_xy(X, y, fn, name="X, y"):
    if not hasattr(X, "shape") or not hasattr(y, "shape"):
        raise TypeError(f"{fn} expects arrays for {name}, got {type(X).__name__} and "
                        f"{type(y).__name__}. Convert them with np.asarray(...).")
    if len(X) != len(y):
        raise ValueError(f"{fn}: {name} have {len(X)} and {len(y)} samples; they must match. "
                         f"Did you pair X_train with y_val?")
    if len(X) == 0:
        raise ValueError(f"{fn}: {name} are empty (0 samples).")


def _check_batch_size(batch_size, fn):
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{fn}(batch_size=...) must be a positive int, got {batch_size!r}.")
    return int(batch_size)


def _check_finite_data(X, fn, name="X"):
    """A ValueError naming a row of X that holds NaN or inf (float data only): a model's
    answer on it would mean nothing."""
    if not np.issubdtype(X.dtype, np.floating):
        return
    xp = get_array_module(X)
    bad = ~xp.isfinite(X.reshape(len(X), -1)).all(axis=1)
    if bool(bad.any()):
        rows = to_numpy(xp.flatnonzero(bad))
        where = f"row {rows[0]}" if len(rows) == 1 else f"e.g. row {rows[0]}; {len(rows)} rows in all"
        raise ValueError(f"{fn}: {name} contains NaN or inf values ({where}). Fix the data first: "
                         f"~np.isfinite({name}) finds them.")


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
    _check_model(model, "evaluate")
    if loss is not None:
        _check_loss(loss, "evaluate")
    _check_xy(X, y, "evaluate")
    batch_size = _check_batch_size(batch_size, "evaluate")
    _check_finite_data(X, "evaluate")
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
        callback=None, on_step=None, lr_schedule=None, precision: str = "fp32",
        loss_scaler=None, comm=None) -> History:
    """Train ``model`` on ``(X, y)`` with mini-batch gradient descent; return a :class:`History`.

    Args:
        model: a dlcourse model (``forward``, ``backward``, ``params``, ``grads``), e.g.
            ``dl.MLP([64, 128, 10])``. Data go to wherever the model is (``model.to("gpu")``).
        loss: e.g. ``dl.SoftmaxCrossEntropy()``; ``forward(out, yb)`` returns a float and
            ``backward()`` returns d(loss)/d(out).
        optimizer: e.g. ``dl.Adam(model, lr=1e-3)``.
        X: (N, ...) training inputs, NumPy (or CuPy); float arrays are cast to the
            model's dtype one batch at a time.
        y: (N,) integer labels (or the targets the loss takes).
        epochs: passes over the data.
        batch_size: samples per step ``B``; the last batch of an epoch may be smaller.
        validation: ``(X_val, y_val)``, evaluated after every epoch, or ``None``.
        seed: makes the run repeatable: the batch order and the dropout masks are drawn
            from generators seeded with it (``dl.manual_seed(seed)`` is called). On the CPU
            the same seed and the same starting model give bit-for-bit the same result.
        progress: show a progress bar (``tqdm.auto``).
        callback: ``callback(epoch, history)`` after each epoch (``epoch`` counts from 1).
            Returning ``False`` or raising :class:`StopTraining` ends training cleanly.
        on_step: ``on_step(step, loss)`` after each optimizer step (``step`` counts every
            step of the run from 1; ``loss`` is the batch's loss). Same way to stop.
        lr_schedule: ``lr_schedule(epoch) -> lr``, called before every step with the training
            time in epochs (0.0 at the first step, 1.5 halfway through the second epoch); its
            value becomes ``optimizer.lr``. E.g. ``dl.cosine_decay(1e-3, epochs=10)``,
            ``dl.step_decay(0.1, every=5)``, ``dl.linear_warmup(schedule, epochs=1)``
            (``dlcourse/schedules.py``) or any function. ``history.lr`` shows the rates used.
        precision: ``"fp32"``, ``"bf16"`` or ``"fp16"``: the inputs of every matrix product
            are rounded to it, products add up in float32, parameters stay float32
            (``dl.autocast``, lesson 10).
        loss_scaler: a ``dl.LossScaler`` for fp16 (``None``: a default one for fp16, none
            otherwise; ``False``: none). A step with inf/NaN gradients is skipped; the state
            is in ``history.loss_scaler`` and ``history.loss_scale``.
        comm: data-parallel training (lesson 13) with a communicator from
            ``dl.distributed.init()``: rank 0's parameters are copied to every rank, each rank
            takes its ``batch_size`` share of every global batch of ``batch_size * world_size``
            (as in PyTorch's DDP), the gradients are averaged over the global batch and every
            rank takes the same step. Losses and accuracies are over the global batch;
            validation and the progress bar run on rank 0 (the result is sent to all ranks).
            BatchNorm statistics stay per rank; each rank draws its own dropout masks. Every
            rank passes the same X and y.
            ``None``: one process.

    Returns:
        A :class:`History`. After Ctrl-C, the history so far with ``interrupted=True``.

    Raises:
        TrainingDiverged: the loss or the parameters became inf or NaN (see its message).
            The model's parameters and buffers, and the optimizer's state (momentum, Adam's
            moments and step count), are put back to those of the last step whose loss was
            finite (a copy is kept before each update: cheap, O(parameters)). So you can
            lower ``optimizer.lr`` and call ``fit`` again with the same optimizer. When the
            batch itself holds NaN or inf (in X, or in float targets y), the message says so
            and names a row, instead of blaming the learning rate.
        MemoryError: the GPU (or computer) ran out of memory; the message suggests a batch size.
    """
    _check_fit_arguments(model, loss, optimizer, X, y, epochs, batch_size, validation, lr_schedule)
    amp = Policy(precision, loss_scaler)              # fp32, or bf16/fp16 products (lesson 10)
    dp = DataParallel(comm, model, seed)              # lesson 13; a no-op for one process
    run = _Run(model, loss, optimizer, X, y, epochs, batch_size, dp.seed,
               progress and dp.is_main, lr_schedule, dp)
    try:
        for epoch in range(1, epochs + 1):
            model.train()
            for step, (xb, yb) in run.batches(epoch):
                with amp.autocast():
                    out = model.forward(xb)
                value = loss.forward(out, yb)
                run.check_loss(value, xb, yb)         # inf or NaN: undo, and say why
                with amp.autocast():
                    model.backward(amp.scale(loss.backward()))
                value, n = dp.average_gradients(value, len(xb))   # global batch: (loss, size)
                with run.update():                    # a snapshot first, to undo it
                    run.set_lr()                      # lr_schedule, if given
                    if amp.should_step(model):        # False: fp16 gradients overflowed, skip
                        optimizer.step()
                        keep_pruned(model)            # pruned weights stay zero (lesson 11)
                run.after_step(value, n, out, yb, on_step)
            amp.record(run.history)
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
    return run.history


def _check_fit_arguments(model, loss, optimizer, X, y, epochs, batch_size, validation,
                         lr_schedule=None):
    if lr_schedule is not None and not callable(lr_schedule):
        raise TypeError(f"fit(lr_schedule=...) takes a function of the epoch, e.g. "
                        f"dl.cosine_decay(1e-3, epochs=10) or lambda epoch: 0.01; got "
                        f"{type(lr_schedule).__name__}.")
    if lr_schedule is not None and not hasattr(optimizer, "lr"):
        raise TypeError(f"fit(lr_schedule=...) sets optimizer.lr, but {type(optimizer).__name__} "
                        f"has no lr.")
    _check_model(model, "fit")
    _check_loss(loss, "fit")
    _check_optimizer(optimizer, model)
    _check_xy(X, y, "fit")
    _check_batch_size(batch_size, "fit")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"fit(epochs=...) must be an int >= 0, got {epochs!r}.")
    if validation is not None:
        if not (isinstance(validation, (tuple, list)) and len(validation) == 2):
            raise TypeError("fit(validation=...) takes a pair (X_val, y_val), got "
                            f"{type(validation).__name__}.")
        _check_xy(*validation, "fit", "validation=(X_val, y_val)")


class _Run:
    """What fit keeps track of around its loop: the batches (moved to the model's device and
    cast to its dtype), the seeded batch order, the snapshot that undoes a step gone to inf or
    NaN, the running loss and accuracy of the epoch, the History, the progress bar, and the
    hooks. Each method is one thing the loop does."""

    def __init__(self, model, loss, optimizer, X, y, epochs, batch_size, seed, progress,
                 lr_schedule, dp):
        self.model, self.loss, self.optimizer, self.X, self.y = model, loss, optimizer, X, y
        self.lr_schedule, self.dp = lr_schedule, dp
        self.epochs, self.batch_size = epochs, int(batch_size)
        self.device, self.dtype = _model_device(model), _model_dtype(model)
        if seed is not None:                           # dropout masks (and CuPy's generator),
            backend.manual_seed(dp.dropout_seed)       # each rank its own (lesson 13)
        self.order_rng = backend.rng(seed) if seed is not None else None   # one order per epoch
        self.steps = self.dp.steps(len(X), self.batch_size)   # ceil(N / B) for one process
        self.history = History()
        self.bar = _progress_bar(progress, epochs * self.steps)
        self.was_training = getattr(model, "training", True)
        self.epoch = self.step = self.global_step = 0
        self.snapshot = None                           # model and optimizer at the last finite loss
        self.in_update = False

    def batches(self, epoch):
        """(step, (xb, yb)) over the epoch's shuffled batches, xb in the model's dtype."""
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
            yield self.step, (_prepare(xb, self.dtype), yb)

    def check_loss(self, value, xb, yb):
        if not math.isfinite(value):
            if self.snapshot is not None:             # undo the update that led here
                _restore(self.model, self.optimizer, self.snapshot)
            raise _diverged(self.history, self.epoch, self.step, self.steps, self.optimizer,
                            f"the loss is {value}", _bad_data(self.X, self.y, xb, yb))

    @contextlib.contextmanager
    def update(self):
        """Around optimizer.step(): a snapshot before it, and a mark while it runs (Ctrl-C
        half-way through an update restores the snapshot)."""
        self.snapshot = _snapshot(self.model, self.optimizer)
        self.in_update = True
        yield
        self.in_update = False

    def set_lr(self):
        """optimizer.lr = lr_schedule(the training time in epochs), checked."""
        if self.lr_schedule is None:
            return
        t = (self.epoch - 1) + (self.step - 1) / self.steps
        self.optimizer.lr = number(self.lr_schedule(t), f"fit(lr_schedule=...) at epoch {t:g}",
                                   "a learning rate such as 0.01", 0.0, None, low_open=True)

    def after_step(self, value, n, out, yb, on_step):
        """``value``: the loss over the (global) batch of ``n`` samples."""
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
        self.tally.correct = dp.total(self.tally.correct)
        history.train_accuracy.append(self.tally.accuracy(seen))
        history.lr.append(getattr(self.optimizer, "lr", None))
        if validation is not None:
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


def _progress_bar(progress: bool, total: int):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:   # tqdm is a dependency, but a bare environment should still train
        return None
    return tqdm(total=total, unit="step", leave=True, dynamic_ncols=True)


# ======================================================================================
# confusion_matrix
# ======================================================================================
def confusion_matrix(y_true, y_pred, num_classes: int | None = None) -> np.ndarray:
    """Counts of (true class, predicted class) pairs: ``cm[i, j]`` is how many samples of
    class ``i`` were predicted as class ``j``. Rows are true classes, columns predictions;
    the diagonal holds the right answers.

    y_true, y_pred: (N,) integer labels (NumPy or CuPy; the result is NumPy).
    num_classes: ``K``; by default one more than the largest label seen.
    Returns an int64 array (K, K).
    """
    t, p = to_numpy(y_true), to_numpy(y_pred)
    for name, a in (("y_true", t), ("y_pred", p)):
        if a.ndim != 1:
            hint = " Use .argmax(axis=1) to turn scores or one-hot rows into labels." if a.ndim == 2 else ""
            raise ValueError(f"confusion_matrix expects {name} of shape (N,), got {a.shape}.{hint}")
        if a.size and not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"confusion_matrix expects integer labels, but {name} has dtype "
                            f"{a.dtype}. Convert with {name}.astype(np.int64), or take "
                            f".argmax(axis=1) of scores.")
    if len(t) != len(p):
        raise ValueError(f"confusion_matrix: y_true has {len(t)} labels but y_pred has {len(p)}.")
    t, p = t.astype(np.int64), p.astype(np.int64)
    seen = int(max(t.max(initial=-1), p.max(initial=-1))) + 1
    K = seen if num_classes is None else whole_number(num_classes, "confusion_matrix(num_classes=...)")
    if min(t.min(initial=0), p.min(initial=0)) < 0 or seen > K:
        raise ValueError(f"confusion_matrix(num_classes={K}) needs labels in 0..{K - 1}, got "
                         f"values from {min(t.min(initial=0), p.min(initial=0))} to {seen - 1}.")
    return np.bincount(K * t + p, minlength=K * K).reshape(K, K)
