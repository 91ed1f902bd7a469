"""Checks for lesson 04d (the playground).

==========================  ===============================================================
check                       your function
==========================  ===============================================================
:func:`decision_grid`       ``(model, X, resolution, pad) -> probs (R, R, K)``
:func:`early_stop`          ``(target) -> callback(epoch, history)``
:func:`mlp_parameter_count` ``(sizes) -> int``
==========================  ===============================================================

Each check runs your function on several cases and prints one line when all pass, or raises
``ExerciseError`` saying which case failed, what was expected, what came back and the likely
mistake, as every check in the course does (the machinery is ``check/harness.py``'s). (No
ipywidgets needed.) While a check runs the learner's function the library is closed
(``dl.widgets.decision_grid``, the parameter counts and the rest: ``seal.py``), except the
model that decision_grid is handed to ask for its predictions.
"""
from __future__ import annotations

import numpy as np

from ..models import MLP
from ..train import History, StopTraining
from .harness import (ExerciseError, call, check_wrapper, expect_shape, expect_unchanged, fail,
                      passed, to_array, to_number)

__all__ = ["decision_grid", "early_stop", "mlp_parameter_count", "ExerciseError"]


# decision_grid is handed a model to ask for its predictions: the model (its layers and the
# softmax over its logits) is open; the grid is the learner's. The library is closed otherwise.
_GRID_OPENS = ["dlcourse.layer_base", "dlcourse.layers", "dlcourse.models", "dlcourse.conv",
               "dlcourse.losses.softmax"]


def _decision_grid(model, X, resolution, pad):
    # imported here: the playground module brings matplotlib, which `import dlcourse` should not
    __tracebackhide__ = True
    from ..widgets.playground import decision_grid
    return decision_grid(model, X, resolution=resolution, pad=pad)


def decision_grid(fn) -> None:
    """Check ``fn(model, X, resolution, pad)`` against :func:`dlcourse.widgets.decision_grid`:
    it must return the class probabilities (R, R, K) on the grid, row ``i`` at the ``i``-th
    y value from the bottom, column ``j`` at the ``j``-th x value from the left, leave X as it
    was and give the model back in training mode (it is in training mode when passed)."""
    __tracebackhide__ = True
    gen = np.random.default_rng(0)
    cases = [(MLP([2, 5, 3], activation="tanh", seed=0), 4, 0.5),
             (MLP([2, 8, 2], activation="relu", seed=1), 7, 0.0),
             (MLP([2, 4, 4, 4], activation="sigmoid", seed=2), 5, 1.0),
             (MLP([2, 16, 3], dropout=0.5, seed=3), 4, 0.5)]   # in training mode, with Dropout
    for model, R, pad in cases:
        X = (gen.standard_normal((12, 2)) * [2.0, 0.5]).astype(np.float32)   # wider than tall
        K = model.sizes[-1]
        case = f"an MLP {model.sizes} with resolution={R}, pad={pad}"
        was_training = model.training
        X_given = X.copy()
        got = call(fn, model, X_given, R, pad, case=case, opens=_GRID_OPENS)
        if was_training and not model.training:
            fail(fn, case, "the model was in training mode when passed, and your function left it "
                           "in evaluation mode: training it afterwards would run with Dropout "
                           "switched off (and BatchNorm on its running statistics).",
                 "put the model back in training mode once the grid is computed (or let "
                 "`with dl.layers.eval_mode(model):` do the switching for you).")
        expect_unchanged(fn, case, [("X", X, X_given)])
        if isinstance(got, tuple):
            fail(fn, case, "it returned a tuple.",
                 f"return only the probabilities, an array (R, R, K) = ({R}, {R}, {K}).")
        got = to_array(got, fn, case, "the result").astype(np.float64)
        expected, _ = _decision_grid(model, X, resolution=R, pad=pad)   # the library's
        hint = None
        if got.shape == (R * R, K):
            hint = "reshape the (R*R, K) probabilities to (R, R, K)."
        elif got.shape == (K, R, R):
            hint = "the class axis goes last: (R, R, K)."
        expect_shape(got, expected.shape, fn, case, "the result", hint)
        if np.allclose(got, expected, atol=1e-5):
            continue
        if not np.allclose(got.sum(axis=-1), 1.0, atol=1e-4):
            fail(fn, case, f"the values at each grid point do not sum to 1 (they sum to "
                           f"{got.sum(axis=-1).ravel()[0]:.4f} at the first point).",
                 "return probabilities: the model gives logits, which softmax turns into "
                 "probabilities that sum to 1.")
        if np.allclose(got, expected.transpose(1, 0, 2), atol=1e-5):
            fail(fn, case, "rows and columns are swapped: row i must be the i-th y value and "
                           "column j the j-th x value.",
                 "meshgrid's first grid varies along the columns (the x values) and its second "
                 "along the rows (the y values): which order do you pass xs and ys in?")
        if np.allclose(got, expected[::-1], atol=1e-5):
            fail(fn, case, "the grid is upside down: row 0 must be the SMALLEST y.",
                 "build the rows from ys increasing (imshow then uses origin='lower').")
        if model.dropout:
            fail(fn, case, "only this model has Dropout (and it is in training mode): your "
                           "forward pass most likely dropped random hidden units.",
                 "predict in evaluation mode: switch the model to it before the forward pass "
                 "(and back to training mode after), or use `with dl.layers.eval_mode(model):`.")
        diff = np.abs(got - expected)
        i, j, k = np.unravel_index(int(diff.argmax()), diff.shape)
        fail(fn, case, f"at grid row {i}, column {j}, class {k} the probability should be "
                       f"{expected[i, j, k]:.5f}, got {got[i, j, k]:.5f}.",
             "does the grid span the box of X widened by pad on every side, with `resolution` "
             "evenly spaced values in each direction, and is the model in evaluation mode?")
    passed(fn, len(cases))


def _history(val_accuracy, train_accuracy=1.0, val_loss=0.5):
    """A History with these validation accuracies. The training accuracy differs from them
    (1.0 by default: a network that fits its training set), so reading the wrong one shows."""
    __tracebackhide__ = True
    h = History()
    for acc in val_accuracy:
        h.train_loss.append(0.5)
        h.train_accuracy.append(train_accuracy)
        h.val_loss.append(val_loss)
        h.val_accuracy.append(acc)
        h.epoch_time.append(0.0)
    return h


def _stops(callback, epoch, history, fn, case) -> bool:
    """Whether the learner's callback stops training at this epoch (False, or StopTraining)."""
    __tracebackhide__ = True

    @check_wrapper(callback)
    def run():
        __tracebackhide__ = True
        try:
            return callback(epoch, history) is False
        except StopTraining:
            return True
    run.__name__ = getattr(fn, "__name__", "early_stop")   # errors name the learner's function
    return call(run, case=case,
                on_error="the callback is called after every epoch with (epoch, history); read "
                         "the error above.")


def early_stop(fn) -> None:
    """Check ``fn(target)``: it returns a ``callback(epoch, history)`` for
    :func:`dlcourse.train.fit` that stops training (returns ``False`` or raises
    ``StopTraining``) as soon as the validation accuracy reaches ``target``, and lets it go on
    otherwise -- also when there is no validation accuracy. The histories' training accuracy
    is 1.0 throughout, so a callback that reads it instead stops too early."""
    __tracebackhide__ = True
    cases = [(0.9, [0.5, 0.8, 0.91, 0.95], 3),
             (0.75, [0.75], 1),                      # reaching the target exactly counts
             (0.99, [0.6, 0.97, 0.98], None),        # never reached: never stop
             (0.5, [], None)]                        # no validation: never stop
    for target, accs, stop_at in cases:
        case = f"target={target}, validation accuracies {accs}"
        callback = call(fn, target, case=case)
        if not callable(callback):
            fail(fn, case, f"it returned a {type(callback).__name__}.",
                 "return a function callback(epoch, history).")
        if not accs:
            h = History()
            h.train_loss.append(0.5)
            h.train_accuracy.append(1.0)
            h.epoch_time.append(0.0)
            if _stops(callback, 1, h, fn, case + " (no validation accuracy: an empty list)"):
                fail(fn, case, "its callback stopped a run without validation data.",
                     "with nothing to compare, let training go on (check that there is a "
                     "validation accuracy at all before comparing).")
            continue
        for epoch in range(1, len(accs) + 1):
            stopped = _stops(callback, epoch, _history(accs[:epoch]), fn, f"{case}, epoch {epoch}")
            should = stop_at is not None and epoch >= stop_at
            def probe(what, **history):   # would the callback stop on this other history?
                __tracebackhide__ = True
                return _stops(callback, epoch, _history(**history), fn,
                              f"{case}, epoch {epoch}, {what}")
            if stopped and not should:
                fix = "compare the LAST validation accuracy (the latest epoch's) with the target."
                if not probe("training accuracy 0", val_accuracy=accs[:epoch], train_accuracy=0.0):
                    fix = ("the TRAINING accuracy (1.0 here) reached the target, not the "
                           "validation accuracy: early stopping watches the data the model does "
                           "not train on, the history's list of validation accuracies.")
                elif not probe("validation accuracy 1.0", val_accuracy=accs[:epoch - 1] + [1.0]):
                    fix = ("it stops while the accuracy is below the target and goes on once it "
                           "is reached: swap the returns (False stops, True goes on).")
                fail(fn, case, f"its callback stopped at epoch {epoch}, where the validation "
                               f"accuracy is {accs[epoch - 1]} < {target}.", fix)
            if should and not stopped:
                fix = ("to stop fit, the callback answers False (or raises StopTraining); an "
                       "answer of None or True lets training go on.")
                if accs[epoch - 1] == target and probe(
                        f"accuracy {target + 0.01:g}",
                        val_accuracy=accs[:epoch - 1] + [target + 0.01]):
                    fix = "reaching the target counts: compare with >=, not >."
                elif probe("validation loss 0", val_accuracy=accs[:epoch], val_loss=0.0):
                    fix = ("it reacts to the validation LOSS (it stopped once we made "
                           "history.val_loss 0); the target is an accuracy: compare the "
                           "latest validation accuracy with it.")
                elif probe("every entry at the target", val_accuracy=[accs[epoch - 1]] * epoch):
                    fix = ("it stopped once EVERY entry reached the target, so it reads an "
                           "earlier epoch's: the latest is the LAST entry of the list.")
                fail(fn, case, f"its callback did not stop at epoch {epoch}, where the "
                               f"validation accuracy is {accs[epoch - 1]} >= {target}.", fix)
            if should:
                break
    passed(fn, len(cases))


def mlp_parameter_count(fn) -> None:
    """Check ``fn(sizes)``: the number of weights and biases of ``dl.MLP(sizes)``, one
    ``Linear(d_in, d_out)`` per pair of neighbouring sizes, each with a weight matrix and a bias
    vector. (Counted here, not by building an MLP: that would draw from the learner's random
    generator.)"""
    __tracebackhide__ = True
    cases = [[2, 1], [2, 4, 2], [2, 8, 8, 3], [64, 32, 32, 10]]
    for sizes in cases:
        pairs = list(zip(sizes[:-1], sizes[1:]))
        expected = sum(d_in * d_out + d_out for d_in, d_out in pairs)
        case = f"sizes={sizes}"
        got = to_number(call(fn, list(sizes), case=case),
                        fn, case, "the count")
        if got == expected:
            continue
        if got == sum(a * b for a, b in pairs):
            hint = "that is the weights only: each layer also has one bias per output."
        elif got == sum(a * b + a for a, b in pairs):
            hint = "a layer has one bias per OUTPUT unit (d_out), not per input."
        else:
            hint = ("each Linear(d_in, d_out) has a (d_in, d_out) weight matrix and one bias "
                    "per output: count both for every layer.")
        fail(fn, case, f"it returned {got:g}, expected {expected}.", hint)
    passed(fn, len(cases))


# Deeper hint levels of this module's exercises (level 1 is the `# HINT:` line in the
# exercise's cell): name -> [level 2, level 3, ...]; dl.check.hint(name) shows them one
# at a time. Words, shapes, questions, pseudo-code with blanks: never solution code.
HINTS: dict[str, list[str]] = {
    'decision_grid': [
        ("the grid's first axis runs over the second coordinate (as meshgrid gives it); put the "
         'model back in training mode afterwards'),
        ("Pseudo-code: xs = R evenly spaced values from (smallest x - pad) to (largest x + pad), "
         "ys likewise for the second coordinate; two (R, R) grids from them (which one varies "
         "along the rows?); points = the two grids flattened, side by side, (R*R, 2); the model "
         "in evaluation mode on the points, softmax, training mode again; reshape. Where to look: "
         "the text above the exercise (section 4) and help(dl.widgets.decision_grid)."),
    ],
    'early_stop': [
        ("The validation accuracies are a list in the history, one entry per epoch so far, and "
         "empty when there is no validation data; the latest is its last entry. Reaching the "
         "target exactly counts."),
        ("Pseudo-code: if there is a validation accuracy and the latest one ___ target, answer "
         "___ (stop); otherwise answer ___ (go on). Where to look: section 5 (how a hook ends "
         "fit) and the exercise text."),
    ],
    'mlp_parameter_count': [
        ("A weight matrix of shape (d_in, d_out) holds rows times columns numbers; the bias holds "
         "one number per output unit. Add both for each layer; the loop adds up the layers."),
        ("Pseudo-code: total += ___ (the weights) + ___ (the biases). Check by hand: sizes [2, 1] "
         "has 3 parameters, [2, 4, 2] has 22. Where to look: lesson 04a's Linear layer (its W and "
         "b) and the exercise text."),
    ],
}

# What would give each answer away: no first-level hint (the `# HINT:` line, the raise text of
# the learner's copy) may contain one of these (tests/test_hints.py; case and spaces ignored).
ANSWER_TOKENS: dict[str, list[str]] = {
    'decision_grid': ['np.linspace', 'np.meshgrid(xs, ys)', 'np.c_', 'np.column_stack',
        'model.eval()'],
    'early_stop': ['>= target', 'return False', 'return True', 'val_accuracy[-1]'],
    'mlp_parameter_count': ['d_in * d_out', 'd_in*d_out', '(d_in + 1) * d_out', '+ d_out',
        'plus d_out'],
}
