"""Learning-rate schedules: the learning rate as a function of how far training has gone.

Introduced in notebook ``04b_optimizers_and_regularization`` (optimizers and schedules
compared). A schedule is any function ``lr = schedule(epoch)`` of the training time counted in
epochs, a fraction: 0.0 at the first step, 1.5 halfway through the second epoch.
:func:`dlcourse.fit` calls it before every optimizer step and sets ``optimizer.lr``;
``history.lr`` records the rate used.

    sched = dl.linear_warmup(dl.cosine_decay(1e-3, epochs=20), epochs=2)
    dl.fit(model, loss, opt, X, y, epochs=20, lr_schedule=sched)

* :func:`step_decay`:    lr * gamma ** floor(epoch / every)   (a staircase)
* :func:`cosine_decay`:  min_lr + (lr - min_lr) * (1 + cos(pi * epoch / epochs)) / 2
* :func:`linear_warmup`: schedule(epoch) * (start + (1 - start) * epoch / epochs) for the
  first ``epochs``, then schedule(epoch): small steps while Adam's moments and BatchNorm's
  statistics are still noisy.
* :func:`per_epoch`:     schedule(floor(epoch)): one rate per epoch, changed at whole epochs.

Any function of the epoch will do (``lr_schedule=lambda epoch: 0.01 / (1 + epoch)``).
"""
from __future__ import annotations

import math

from ._validate import number

__all__ = ["step_decay", "cosine_decay", "linear_warmup", "per_epoch", "constant",
           "check_schedule", "lr_at"]


def _lr(lr, fn):
    return number(lr, f"{fn}(lr=...)", "lr=0.01", 0.0, None, low_open=True)


def _epochs(epochs, fn, name="epochs"):
    return number(epochs, f"{fn}({name}=...)", f"{name}=10", 0.0, None, low_open=True)


def constant(lr: float):
    """lr at every epoch (what fit does without a schedule)."""
    lr = _lr(lr, "constant")
    return lambda epoch: lr


def step_decay(lr: float, every: float, gamma: float = 0.1):
    """lr * gamma ** floor(epoch / every): multiply the rate by ``gamma`` every ``every``
    epochs (PyTorch's StepLR). E.g. ``step_decay(0.1, every=10)``: 0.1, then 0.01 from epoch
    10, 0.001 from epoch 20."""
    lr, every = _lr(lr, "step_decay"), _epochs(every, "step_decay", "every")
    gamma = number(gamma, "step_decay(gamma=...)", "gamma=0.1", 0.0, 1.0, low_open=True,
                   high_open=False)
    return lambda epoch: lr * gamma ** math.floor(epoch / every)


def cosine_decay(lr: float, epochs: float, min_lr: float = 0.0):
    """min_lr + (lr - min_lr) * (1 + cos(pi * epoch / epochs)) / 2, then min_lr after
    ``epochs``: big steps early to make progress, small ones late to settle (Loshchilov &
    Hutter, SGDR, 2017; PyTorch's CosineAnnealingLR)."""
    lr, epochs = _lr(lr, "cosine_decay"), _epochs(epochs, "cosine_decay")
    min_lr = number(min_lr, "cosine_decay(min_lr=...)", "min_lr=0.0", 0.0, lr, high_open=False)

    def schedule(epoch):
        return min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * min(epoch / epochs, 1.0)))
    return schedule


def linear_warmup(schedule, epochs: float, start: float = 0.1):
    """``schedule`` (a schedule, or a number for a constant rate) scaled by a factor that grows
    linearly from ``start`` to 1 over the first ``epochs`` (PyTorch's LinearLR)."""
    if not callable(schedule):
        schedule = constant(schedule)
    epochs = _epochs(epochs, "linear_warmup")
    start = number(start, "linear_warmup(start=...)", "start=0.1", 0.0, 1.0, low_open=True,
                   high_open=False)
    return lambda epoch: schedule(epoch) * (start + (1 - start) * min(epoch / epochs, 1.0))


def per_epoch(schedule):
    """``schedule`` held for a whole epoch: its value at the epoch's start, schedule(floor(epoch))
    (``dlcourse train``'s cosine changes once per epoch, not at every step)."""
    return lambda epoch: schedule(math.floor(epoch))


# What dl.fit(lr_schedule=...) calls: the check of the argument, then the rate at each step.
def check_schedule(schedule, optimizer) -> None:
    """A TypeError unless ``schedule`` is a function and ``optimizer`` has an ``lr`` to set."""
    if not callable(schedule):
        raise TypeError(f"fit(lr_schedule=...) takes a function of the epoch, e.g. "
                        f"dl.cosine_decay(1e-3, epochs=10) or lambda epoch: 0.01; got "
                        f"{type(schedule).__name__}.")
    if not hasattr(optimizer, "lr"):
        raise TypeError(f"fit(lr_schedule=...) sets optimizer.lr, but {type(optimizer).__name__} "
                        f"has no lr.")


def lr_at(schedule, epoch: float) -> float:
    """``schedule(epoch)``, checked to be a learning rate > 0."""
    return number(schedule(epoch), f"fit(lr_schedule=...) at epoch {epoch:g}",
                  "a learning rate such as 0.01", 0.0, None, low_open=True)
