"""Checks for lesson 09 (the playground).

==========================  ===============================================================
check                       your function
==========================  ===============================================================
:func:`decision_grid`       ``(model, X, resolution, pad) -> probs (R, R, K)``
:func:`early_stop`          ``(target) -> callback(epoch, history)``
:func:`mlp_parameter_count` ``(sizes) -> int``
==========================  ===============================================================

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` saying which case failed, what was expected, what came back and the likely
mistake. (No ipywidgets needed.)
"""
from __future__ import annotations

import numpy as np

from ..backend import to_numpy
from ..models import MLP
from ..train import History, StopTraining
from .basics import ExerciseError   # one ExerciseError for every check in the course

__all__ = ["decision_grid", "early_stop", "mlp_parameter_count", "ExerciseError"]


def _decision_grid(model, X, resolution, pad):
    # imported here: the playground module brings matplotlib, which `import dlcourse` should not
    from ..widgets.playground import decision_grid
    return decision_grid(model, X, resolution=resolution, pad=pad)


def _name(fn) -> str:
    return getattr(fn, "__name__", "your function")


def _call(fn, case: str, *args):
    try:
        return fn(*args)
    except NotImplementedError as err:
        hint = str(err).strip()
        raise ExerciseError(f"{_name(fn)} is not implemented yet" + (f": {hint}" if hint else ".")
                            ) from None
    except ExerciseError:
        raise
    except Exception as err:
        raise ExerciseError(f"{_name(fn)} raised {type(err).__name__} on {case}: {err}") from err


def decision_grid(fn) -> None:
    """Check ``fn(model, X, resolution, pad)`` against :func:`dlcourse.widgets.decision_grid`:
    it must return the class probabilities (R, R, K) on the grid, row ``i`` at the ``i``-th
    y value from the bottom, column ``j`` at the ``j``-th x value from the left."""
    gen = np.random.default_rng(0)
    cases = [(MLP([2, 5, 3], activation="tanh", seed=0), 4, 0.5),
             (MLP([2, 8, 2], activation="relu", seed=1), 7, 0.0),
             (MLP([2, 4, 4, 4], activation="sigmoid", seed=2), 5, 1.0)]
    for model, R, pad in cases:
        X = (gen.standard_normal((12, 2)) * [2.0, 0.5]).astype(np.float32)   # wider than tall
        K = model.sizes[-1]
        case = f"an MLP {model.sizes} with resolution={R}, pad={pad}"
        got = _call(fn, case, model, X, R, pad)
        if got is None:
            raise ExerciseError(f"{_name(fn)} returned None on {case}: did you forget the "
                                f"`return`?")
        if isinstance(got, tuple):
            raise ExerciseError(f"{_name(fn)} returned a tuple on {case}; return only the "
                                f"probabilities, an array (R, R, K) = ({R}, {R}, {K}).")
        got = np.asarray(to_numpy(got), dtype=np.float64)
        expected, _ = _decision_grid(model, X, resolution=R, pad=pad)   # the library's
        if got.shape != expected.shape:
            hint = ""
            if got.shape == (R * R, K):
                hint = " Reshape the (R*R, K) probabilities to (R, R, K)."
            elif got.shape == (K, R, R):
                hint = " The class axis goes last: (R, R, K)."
            raise ExerciseError(f"{_name(fn)} on {case} returned shape {got.shape}, expected "
                                f"{expected.shape}.{hint}")
        if np.allclose(got, expected, atol=1e-5):
            continue
        if not np.allclose(got.sum(axis=-1), 1.0, atol=1e-4):
            raise ExerciseError(f"{_name(fn)} on {case}: the values at each grid point do "
                                f"not sum to 1 (they sum to {got.sum(axis=-1).ravel()[0]:.4f} "
                                f"at the first point). Return probabilities: apply softmax "
                                f"to the logits (dl.softmax).")
        if np.allclose(got, expected.transpose(1, 0, 2), atol=1e-5):
            raise ExerciseError(f"{_name(fn)} on {case}: rows and columns are swapped. Row "
                                f"i must be the i-th y value and column j the j-th x value: "
                                f"gx, gy = np.meshgrid(xs, ys) gives gx[i, j] = xs[j] and "
                                f"gy[i, j] = ys[i].")
        if np.allclose(got, expected[::-1], atol=1e-5):
            raise ExerciseError(f"{_name(fn)} on {case}: the grid is upside down: row 0 must "
                                f"be the SMALLEST y (imshow with origin='lower').")
        diff = np.abs(got - expected)
        i, j, k = np.unravel_index(int(diff.argmax()), diff.shape)
        raise ExerciseError(f"{_name(fn)} on {case}: at grid row {i}, column {j}, class {k} "
                            f"expected probability {expected[i, j, k]:.5f}, got "
                            f"{got[i, j, k]:.5f}. Does the grid span X.min(axis=0) - pad to "
                            f"X.max(axis=0) + pad with np.linspace(..., resolution) in each "
                            f"direction, and is the model in evaluation mode?")
    print(f"{_name(fn)}: all {len(cases)} checks pass.")


def _history(val_accuracy):
    h = History()
    for acc in val_accuracy:
        h.train_loss.append(0.5)
        h.train_accuracy.append(acc)
        h.val_loss.append(0.5)
        h.val_accuracy.append(acc)
        h.epoch_time.append(0.0)
    return h


def _stops(callback, epoch, history, fn) -> bool:
    try:
        return callback(epoch, history) is False
    except StopTraining:
        return True
    except NotImplementedError as err:
        hint = str(err).strip()
        raise ExerciseError(f"{_name(fn)} is not implemented yet" + (f": {hint}" if hint else ".")
                            ) from None


def early_stop(fn) -> None:
    """Check ``fn(target)``: it returns a ``callback(epoch, history)`` for
    :func:`dlcourse.train.fit` that stops training (returns ``False`` or raises
    ``StopTraining``) as soon as the validation accuracy reaches ``target``, and lets it go on
    otherwise -- also when there is no validation accuracy."""
    cases = [(0.9, [0.5, 0.8, 0.91, 0.95], 3),
             (0.75, [0.75], 1),                      # reaching the target exactly counts
             (0.99, [0.6, 0.97, 0.98], None),        # never reached: never stop
             (0.5, [], None)]                        # no validation: never stop
    for target, accs, stop_at in cases:
        callback = _call(fn, f"target={target}", target)
        if not callable(callback):
            raise ExerciseError(f"{_name(fn)}({target}) returned {type(callback).__name__}; "
                                f"it must return a function callback(epoch, history).")
        if not accs:
            h = History()
            h.train_loss.append(0.5)
            h.epoch_time.append(0.0)
            try:
                stopped = _stops(callback, 1, h, fn)
            except (IndexError, TypeError) as err:
                raise ExerciseError(f"The callback of {_name(fn)}({target}) crashed on a "
                                    f"history without validation (history.val_accuracy == "
                                    f"[]): {type(err).__name__}: {err}. Check that the list "
                                    f"is not empty first.") from err
            if stopped:
                raise ExerciseError(f"The callback of {_name(fn)}({target}) stopped a run "
                                    f"without validation data; with nothing to compare, let "
                                    f"training go on.")
            continue
        for epoch in range(1, len(accs) + 1):
            h = _history(accs[:epoch])
            try:
                stopped = _stops(callback, epoch, h, fn)
            except ExerciseError:
                raise
            except Exception as err:
                raise ExerciseError(f"The callback of {_name(fn)}({target}) raised "
                                    f"{type(err).__name__} at epoch {epoch}: {err}") from err
            should = stop_at is not None and epoch >= stop_at
            if stopped and not should:
                raise ExerciseError(
                    f"The callback of {_name(fn)}({target}) stopped at epoch {epoch}, where "
                    f"the validation accuracy is {accs[epoch - 1]} < {target}. Compare the "
                    f"LAST entry, history.val_accuracy[-1], with the target.")
            if should and not stopped:
                raise ExerciseError(
                    f"The callback of {_name(fn)}({target}) did not stop at epoch {epoch}, "
                    f"where the validation accuracy is {accs[epoch - 1]} >= {target}. Return "
                    f"False (or raise StopTraining) to stop; None or True go on.")
            if should:
                break
    print(f"{_name(fn)}: all {len(cases)} checks pass.")


def mlp_parameter_count(fn) -> None:
    """Check ``fn(sizes)``: the number of weights and biases of ``dl.MLP(sizes)``."""
    cases = [[2, 1], [2, 4, 2], [2, 8, 8, 3], [64, 32, 32, 10]]
    for sizes in cases:
        expected = MLP(sizes).num_parameters()
        got = _call(fn, f"sizes={sizes}", list(sizes))
        if got is None:
            raise ExerciseError(f"{_name(fn)}({sizes}) returned None: did you forget the "
                                f"`return`?")
        if got == expected:
            continue
        pairs = list(zip(sizes[:-1], sizes[1:]))
        if got == sum(a * b for a, b in pairs):
            hint = " That is the weights only: each layer also has one bias per output."
        elif got == sum(a * b + a for a, b in pairs):
            hint = " A layer has one bias per OUTPUT unit (d_out), not per input."
        else:
            hint = " Each Linear(d_in, d_out) has d_in * d_out weights and d_out biases."
        raise ExerciseError(f"{_name(fn)}({sizes}) returned {got}, expected {expected}.{hint}")
    print(f"{_name(fn)}: all {len(cases)} checks pass.")
