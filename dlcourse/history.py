"""What :func:`dlcourse.fit` returns: a :class:`History` of the run, one entry per epoch.

Introduced in notebook ``04a_mlp_on_digits`` with ``dl.fit``; ``dl.plots.plot_history`` draws it.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["History"]


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

    ``grad_norm``: with ``fit(..., clip_norm=...)`` (lesson 04b), the gradients' global norm
    before clipping, at every step that updated the parameters.

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
    grad_norm: list = field(default_factory=list)         # lesson 04b: fit(clip_norm=...)
    stop_reason: str | None = None
    interrupted: bool = False
    precision: str = "fp32"                               # lesson 10: fit(precision=...)
    loss_scaler: dict | None = None                       # its state_dict() after each epoch
    loss_scale: list = field(default_factory=list)        # the loss scale at every step
    bucket_timeline: list = field(default_factory=list)   # lesson 13b: fit(overlap=True)

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
