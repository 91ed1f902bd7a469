"""The playground and the CNN explorer, driven headlessly: set widget values, click buttons,
check that training ran and that the picture changed. No browser, no kernel needed
(tests/test_browser.py does the real-browser check)."""
import subprocess
import sys
import time

import numpy as np
import pytest

import dlcourse as dl
from dlcourse.train import TrainingDiverged

pytest.importorskip("ipywidgets")
from dlcourse import widgets  # noqa: E402

# Small, quick settings shared by the tests (each run is well under a second on a CPU).
QUICK = dict(dataset="xor", hidden_layers=1, units=4, activation="tanh", lr=0.03,
             optimizer="Adam", batch_size=16, epochs=30, seed=0)


@pytest.fixture
def panel():
    return widgets.Playground(**QUICK, blocking=True)


# --------------------------------------------------------------------------------------
# Imports
# --------------------------------------------------------------------------------------
def test_import_dlcourse_does_not_import_ipywidgets():
    code = ("import sys, dlcourse, dlcourse.widgets; "
            "assert 'ipywidgets' not in sys.modules, 'ipywidgets was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------------------
def test_decision_grid_matches_the_model_point_by_point():
    model = dl.MLP([2, 5, 3], activation="tanh", seed=0)
    X = np.array([[-1.0, -2.0], [3.0, 1.0]], dtype=np.float32)
    probs, extent = widgets.decision_grid(model, X, resolution=7, pad=0.5)
    assert probs.shape == (7, 7, 3)
    assert extent == (-1.5, 3.5, -2.5, 1.5)
    assert np.allclose(probs.sum(axis=-1), 1.0)
    xs, ys = np.linspace(-1.5, 3.5, 7), np.linspace(-2.5, 1.5, 7)
    i, j = 5, 2                                      # row i is y = ys[i], column j is x = xs[j]
    point = np.array([[xs[j], ys[i]]], dtype=np.float32)
    expected = dl.softmax(model.forward(point).astype(np.float64))[0]
    assert np.allclose(probs[i, j], expected, atol=1e-6)
    assert model.training                            # the mode is restored


def test_decision_grid_sigmoid_model_and_bad_input():
    model = dl.Linear(2, 1, seed=0)                  # one logit: p(class 1) = sigmoid
    probs, _ = widgets.decision_grid(model, np.zeros((3, 2), np.float32), resolution=4)
    assert probs.shape == (4, 4, 2) and np.allclose(probs.sum(-1), 1)
    with pytest.raises(ValueError, match="points in the plane"):
        widgets.decision_grid(model, np.zeros((3, 64)))


def test_panels_give_a_model_its_input_in_its_dtype_on_its_device():
    from dlcourse.widgets._common import model_input
    points = np.zeros((3, 2))                        # float64, as np.linspace makes them
    x = model_input(dl.MLP([2, 3], seed=0), points)
    assert x.dtype == np.float32 and dl.backend.device_of(x) == "cpu"
    assert model_input(dl.MLP([2, 3], seed=0).astype("float64"), points).dtype == np.float64
    assert model_input(dl.Linear(2, 1, seed=0), points.tolist()).dtype == np.float32


def test_probability_image_is_rgb_and_white_where_unsure():
    probs = np.array([[[0.5, 0.5], [1.0, 0.0]]])     # (1, 2, K=2)
    img = widgets.probability_image(probs)
    assert img.shape == (1, 2, 3) and img.min() >= 0 and img.max() <= 1
    assert np.allclose(img[0, 0], 1.0)               # unsure: white
    assert not np.allclose(img[0, 1], 1.0)           # sure: coloured


def test_load_dataset_and_parameter_count():
    for name in widgets.DATASETS:
        d = widgets.load_dataset(name)
        assert d.X_train.dtype == np.float32 and d.y_train.dtype == np.int64
        assert len(d.X_train) == len(d.y_train) and d.num_classes >= 2
    assert widgets.load_dataset("digits").num_features == 64
    sizes = [2, 8, 8, 3]
    assert widgets.count_parameters(sizes) == dl.MLP(sizes).num_parameters()
    with pytest.raises(ValueError, match="Unknown dataset"):
        widgets.load_dataset("mnist-2d")


# --------------------------------------------------------------------------------------
# The playground panel
# --------------------------------------------------------------------------------------
def test_train_button_trains_and_redraws(panel):
    before = panel.image.value
    assert before[:8] == b"\x89PNG\r\n\x1a\n"
    panel.train_button.click()                       # blocking=True: trains right here
    h = panel.history
    assert panel.error is None, panel.error
    assert h.epochs == QUICK["epochs"] and h.stop_reason is None
    assert h.train_loss[-1] < 0.5 * h.train_loss[0]
    assert h.val_accuracy[-1] > 0.9                  # one hidden layer solves XOR
    assert panel.image.value != before               # the boundary and the curves were drawn
    assert panel.train_button.description == "Train"
    assert "Done" in panel.status.value and f"{QUICK['epochs']} epochs" in panel.status.value
    assert panel.model.sizes == [2, 4, 2]


def test_xor_without_hidden_layer_stays_near_chance(panel):
    panel.set(hidden_layers=0)
    h = panel.train(blocking=True)
    assert h.val_accuracy[-1] < 0.75                 # a line cannot separate XOR
    assert "no better than guessing" in panel.status.value


def test_diverging_learning_rate_is_shown_in_red_and_the_button_resets(panel):
    panel.set(optimizer="SGD", lr=100.0, activation="relu")
    assert panel.controls["lr"].value == pytest.approx(100.0)
    panel.train_button.click()
    assert isinstance(panel.error, TrainingDiverged)
    assert "diverged" in panel.status.value and "lr=100" in panel.status.value
    assert "dlcourse-status-error" in panel.status.value        # red
    assert panel.train_button.description == "Train" and not panel.running
    assert not panel.controls["lr"].disabled                    # the controls work again
    # and the panel still works afterwards
    panel.set(optimizer="Adam", lr=0.03, activation="tanh")
    panel.train_button.click()
    assert panel.error is None and "Done" in panel.status.value


def test_unexpected_error_is_shown_with_traceback_not_swallowed(panel, monkeypatch):
    def broken(config=None):
        raise RuntimeError("something broke")
    monkeypatch.setattr(panel, "build_model", broken)
    panel.train_button.click()
    assert isinstance(panel.error, RuntimeError)
    assert "RuntimeError: something broke" in panel.status.value
    assert "<details>" in panel.status.value                    # the traceback, folded
    assert panel.train_button.description == "Train" and not panel.running


def test_stop_button_stops_a_background_run():
    panel = widgets.Playground(**{**QUICK, "epochs": 500})      # blocking=False: a thread
    panel.train_button.click()
    try:
        assert panel.running and panel.train_button.description == "Stop"
        deadline = time.monotonic() + 30
        while (panel.history is None or panel.history.epochs < 2) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert panel.history is not None and panel.history.epochs >= 2
        panel.train_button.click()                              # now it is the Stop button
        h = panel.wait(timeout=30)
    finally:
        panel.stop()
        panel.wait(timeout=30)
    assert not panel.running and panel.train_button.description == "Train"
    assert h.stop_reason == "callback" and 2 <= h.epochs < 500
    assert "Stopped" in panel.status.value


def test_train_or_set_while_running_is_refused(panel):
    panel.running = True
    assert panel.train(blocking=True) is None
    assert "Already training" in panel.status.value
    with pytest.raises(RuntimeError, match="stop it first"):
        panel.set(units=8)


def test_changing_the_dataset_redraws_and_digits_train(panel):
    panel.train(blocking=True)
    trained = panel.image.value
    panel.controls["dataset"].value = "digits"
    assert panel.history is None and panel.model is None
    preview = panel.image.value
    assert preview != trained
    assert "64 → 4 → 10" in panel.architecture.value
    panel.set(units=16, epochs=3, batch_size=64)
    h = panel.train(blocking=True)
    assert h.epochs == 3 and h.val_accuracy[-1] > 0.7
    assert panel.image.value != preview
    assert all(t.get_text() for t in panel.mosaic_texts)     # each digit got a prediction


def test_set_unknown_control_and_display_helpers(panel):
    with pytest.raises(KeyError, match="no control named 'layers'"):
        panel.set(layers=2)
    assert panel.snapshot().data == panel.image.value
    assert "Playground(dataset='xor'" in repr(panel)
    assert isinstance(widgets.playground(dataset="circles"), widgets.Playground)


@pytest.mark.parametrize("settings,words", [
    (dict(dataset="mnist2"), r"dataset must be one of \['blobs', 'xor'.*got 'mnist2'"),
    (dict(units=100), r"units must be a whole number from 1 to 64 .*got 100"),
    (dict(batch_size=50), r"batch_size must be one of \[1, 2, 4"),
    (dict(lr="fast"), r"lr must be a number from 0.0001 to 1000"),
])
def test_settings_a_control_cannot_show_are_refused(panel, settings, words):
    """A slider would clamp 100 units to 64 without a word, and a dropdown would raise a trait
    error about its options: say what the control takes instead."""
    with pytest.raises(ValueError, match=words):
        widgets.playground(**settings)
    with pytest.raises(ValueError, match=words):
        panel.set(**settings)
    assert widgets.playground(units=np.int64(8)).controls["units"].value == 8


# --------------------------------------------------------------------------------------
# The CNN explorer
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def explorer():
    return widgets.CNNExplorer(epochs=2, seed=0)


def test_cnn_explorer_shows_filters_maps_and_prediction(explorer):
    assert explorer.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert widgets.conv_filters(explorer.model).shape == (8, 1, 3, 3)
    maps = widgets.feature_maps(explorer.model, explorer.images[0])
    assert [m.shape for _, m in maps] == [(8, 8, 8), (16, 4, 4)]
    assert maps[0][0] == "conv 1 + ReLU" and (maps[0][1] >= 0).all()
    outputs = widgets.layer_outputs(explorer.model, explorer.images[0])
    first = dl.to_device(explorer.images[:1], explorer.model.device)   # the model may be on a GPU
    logits = dl.to_numpy(explorer.model.forward(first))[0]
    assert np.allclose(outputs[-1][1], logits, atol=1e-5)
    assert explorer.accuracy > 0.5
    assert "predicted" in explorer.status.value


def test_cnn_explorer_index_changes_the_picture(explorer):
    explorer.index.value = 0
    first = explorer.image.value
    explorer.index.value = 1
    assert explorer.image.value != first
    assert "Image 1" in explorer.status.value
    wrong = np.flatnonzero(explorer.predictions != explorer.labels)
    if len(wrong):
        i = explorer.next_mistake()
        assert i in wrong and explorer.index.value == i and "wrong" in explorer.status.value


def test_cnn_explorer_rejects_a_model_for_other_images():
    model = dl.CNN(in_channels=1, image_size=(28, 28), channels=(4, 8), seed=0)
    with pytest.raises(ValueError, match="pass images=X"):
        widgets.CNNExplorer(model=model)
    with pytest.raises(ValueError, match="flat"):
        widgets.CNNExplorer(model=model, images=np.zeros((3, 784), np.float32))


# --------------------------------------------------------------------------------------
# The lesson's exercise checks
# --------------------------------------------------------------------------------------
def _grid_by_hand(model, X, R, pad):
    """The exercise's decision grid, written out (the library's own is refused in the check)."""
    xs = np.linspace(X[:, 0].min() - pad, X[:, 0].max() + pad, R)
    ys = np.linspace(X[:, 1].min() - pad, X[:, 1].max() + pad, R)
    points = np.stack([a.ravel() for a in np.meshgrid(xs, ys)], axis=1).astype(np.float32)
    return dl.to_numpy(dl.softmax(model.forward(points))).reshape(R, R, -1)


def test_exercise_checks_accept_solutions_and_explain_mistakes(capsys):
    from dlcourse import check

    def by_hand(model, X, R, pad):
        with dl.layers.eval_mode(model):
            return _grid_by_hand(model, X, R, pad)
    check.decision_grid(by_hand)
    with pytest.raises(AssertionError, match="rows and columns are swapped"):
        check.decision_grid(lambda m, X, R, pad: by_hand(m, X, R, pad).transpose(1, 0, 2))
    with pytest.raises(AssertionError, match="library's own version"):
        check.decision_grid(lambda m, X, R, pad: widgets.decision_grid(m, X, R, pad)[0])

    def forgets_eval(model, X, R, pad):       # the grid from a training-mode forward
        return _grid_by_hand(model, X, R, pad)
    with pytest.raises(AssertionError, match=r"(?s)only this model has Dropout.*evaluation mode"):
        check.decision_grid(forgets_eval)

    def stays_in_eval(model, X, R, pad):      # right numbers, but the model is not put back
        model.eval()
        return _grid_by_hand(model, X, R, pad)
    with pytest.raises(AssertionError, match=r"(?s)left it in evaluation mode.*likely fix: put "
                                             r"the model back in training mode .*"
                                             r"`with dl\.layers\.eval_mode\(model\):`"):
        check.decision_grid(stays_in_eval)

    check.decision_grid(by_hand)              # the context manager puts the mode back itself

    def moves_X(model, X, R, pad):
        probs = by_hand(model, X, R, pad)
        X -= X.mean(axis=0)
        return probs
    with pytest.raises(AssertionError, match="changed its input X in place"):
        check.decision_grid(moves_X)

    def early_stop(target):
        return lambda epoch, h: not (h.val_accuracy and h.val_accuracy[-1] >= target)
    check.early_stop(early_stop)
    with pytest.raises(AssertionError, match=r"(?s)did not stop at epoch 1.*"
                                             r"likely fix: reaching the target counts: compare "
                                             r"with >=, not >\."):
        check.early_stop(lambda target: lambda epoch, h: not (h.val_accuracy
                                                               and h.val_accuracy[-1] > target))
    with pytest.raises(AssertionError, match=r"(?s)did not stop at epoch 3.*"
                                             r"likely fix: to stop fit, the callback answers "
                                             r"False \(or raises StopTraining"):
        check.early_stop(lambda target: lambda epoch, h: None)   # never stops

    # The histories' training accuracy (1.0) differs from the validation accuracy, so a callback
    # reading the wrong quantity is told which one it read.
    wrong_quantity = [
        (lambda t: lambda e, h: not (h.train_accuracy and h.train_accuracy[-1] >= t),
         r"stopped at epoch 1.*likely fix: the TRAINING accuracy \(1\.0 here\) reached the target"),
        (lambda t: lambda e, h: not (h.val_loss and h.val_loss[-1] <= 1 - t),
         r"did not stop at epoch 3.*likely fix: it reacts to the validation LOSS"),
        (lambda t: lambda e, h: not (h.val_accuracy and h.val_accuracy[0] >= t),
         r"did not stop at epoch 3.*likely fix: it stopped once EVERY entry reached the target.*"
         r"the LAST entry"),
        (lambda t: lambda e, h: bool(h.val_accuracy and h.val_accuracy[-1] >= t),
         r"stopped at epoch 1.*likely fix: .*swap the returns"),
    ]
    for wrong, message in wrong_quantity:
        with pytest.raises(AssertionError, match="(?s)" + message):
            check.early_stop(wrong)

    check.mlp_parameter_count(count_parameters)
    with pytest.raises(AssertionError, match="the function passed is dl.widgets"):
        check.mlp_parameter_count(widgets.count_parameters)    # the library's, as the answer
    with pytest.raises(AssertionError, match="library's own version"):
        check.mlp_parameter_count(lambda s: dl.MLP(s, seed=0).num_parameters())
    with pytest.raises(AssertionError, match="weights only"):
        check.mlp_parameter_count(lambda s: sum(a * b for a, b in zip(s[:-1], s[1:])))

    def not_yet(sizes):
        raise NotImplementedError("d_in * d_out weights and d_out biases")
    with pytest.raises(AssertionError, match="not implemented yet: d_in"):
        check.mlp_parameter_count(not_yet)
    with pytest.raises(AssertionError, match=r"(?s)crashes raised IndexError.*epoch 1.*"
                                             r"likely fix: the callback"):
        def crashes(target):
            return lambda epoch, h: h.val_accuracy[5]
        check.early_stop(crashes)
    out = capsys.readouterr().out   # the success line every check in the course prints
    assert "\u2713 early_stop: all 4 cases pass (NumPy)." in out and "all 4 cases pass" in out


def count_parameters(sizes):
    """A learner's count (the library's own, passed as the answer, is refused)."""
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def test_parameter_count_check_leaves_the_learners_random_generator_alone(capsys):
    from dlcourse import backend, check
    for sizes in ([2, 1], [2, 4, 2], [2, 8, 8, 3], [64, 32, 32, 10]):   # its closed form is dl.MLP's
        assert widgets.count_parameters(sizes) == dl.MLP(sizes, seed=0).num_parameters()
    dl.manual_seed(0)
    untouched = backend.rng().random()
    dl.manual_seed(0)
    check.mlp_parameter_count(count_parameters)
    assert backend.rng().random() == untouched
    out = capsys.readouterr().out
    assert "\u2713 count_parameters: all 4 cases pass (NumPy)." in out


# --------------------------------------------------------------------------------------
# A redraw during training never runs the model being trained
# --------------------------------------------------------------------------------------
def test_a_redraw_while_training_never_runs_the_model_being_trained(panel, monkeypatch):
    """Deterministic: the training thread is held between a training forward and its
    backward while the interface thread redraws (as a click or a resize would). The redraw
    must not run the live model (it would overwrite the caches backward needs, or flip it to
    evaluation mode), and the run must end exactly as one that nobody redrew."""
    import threading
    main = threading.current_thread()
    mid_step, go_on = threading.Event(), threading.Event()
    calls = []                                   # (model, thread) of every forward

    real_build = panel.build_model

    def build(config=None):
        model = real_build(config)
        real_forward = model.forward

        def forward(x, *args, **kwargs):
            out = real_forward(x, *args, **kwargs)
            here = threading.current_thread()
            calls.append((model, here))
            if here is not main and model.training and len(calls) > 5 and not mid_step.is_set():
                mid_step.set()                   # between this forward and its backward
                assert go_on.wait(30)
            return out
        model.forward = forward
        return model
    monkeypatch.setattr(panel, "build_model", build)
    panel.redraw_interval = 1e9                  # the training thread itself draws only at the end
    panel.train(blocking=False)
    try:
        assert mid_step.wait(30), "training never reached a step"
        png = panel.redraw()                     # from the interface thread, mid-step
    finally:
        go_on.set()
        panel.wait(60)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert panel.error is None, panel.error
    assert not [1 for model, thread in calls if model is panel.model and thread is main]
    undisturbed = widgets.Playground(**QUICK, blocking=True).train()
    assert panel.history.train_loss == undisturbed.train_loss
    assert panel.shown_model is not panel.model                 # the picture's own copy...
    for name, value in panel.model.state_dict().items():        # ...holding the final weights
        np.testing.assert_array_equal(dl.to_numpy(panel.shown_model.state_dict()[name]),
                                      dl.to_numpy(value))
