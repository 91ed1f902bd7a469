"""What :func:`dlcourse.train.fit` and :func:`dlcourse.train.evaluate` accept: the checks of
their arguments, made before any work, each error saying what was given and the likely slip
(a class for an instance, loss and optimizer swapped, an optimizer built for another model,
X and y of different lengths, NaN in the data).

Introduced with ``fit`` in notebook ``04a_mlp_on_digits`` (``clip_norm``: ``04b``).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._validate import model_class_error, number
from .backend import get_array_module, to_numpy
from .schedules import check_schedule


def check_model(model, fn):
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


def check_loss(loss, fn):
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


def check_optimizer(optimizer, model):
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


def check_xy(X, y, fn, name="X, y"):
    if not hasattr(X, "shape") or not hasattr(y, "shape"):
        raise TypeError(f"{fn} expects arrays for {name}, got {type(X).__name__} and "
                        f"{type(y).__name__}. Convert them with np.asarray(...).")
    if len(X) != len(y):
        raise ValueError(f"{fn}: {name} have {len(X)} and {len(y)} samples; they must match. "
                         f"Did you pair X_train with y_val?")
    if len(X) == 0:
        raise ValueError(f"{fn}: {name} are empty (0 samples).")


def check_batch_size(batch_size, fn):
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"{fn}(batch_size=...) must be a positive int, got {batch_size!r}.")
    return int(batch_size)


def check_finite_data(X, fn, name="X"):
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


def check_fit_arguments(model, loss, optimizer, X, y, epochs, batch_size, validation,
                         lr_schedule=None):
    if lr_schedule is not None:
        check_schedule(lr_schedule, optimizer)
    check_model(model, "fit")
    check_loss(loss, "fit")
    check_optimizer(optimizer, model)
    check_xy(X, y, "fit")
    check_batch_size(batch_size, "fit")
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"fit(epochs=...) must be an int >= 0, got {epochs!r}.")
    if validation is not None:
        if not (isinstance(validation, (tuple, list)) and len(validation) == 2):
            raise TypeError("fit(validation=...) takes a pair (X_val, y_val), got "
                            f"{type(validation).__name__}.")
        check_xy(*validation, "fit", "validation=(X_val, y_val)")


def check_clip_norm(clip_norm):
    """``None`` or a finite number > 0, as a float."""
    if clip_norm is None:
        return None
    return number(clip_norm, "fit(clip_norm=...)", "clip_norm=1.0", 0.0, None, low_open=True)

