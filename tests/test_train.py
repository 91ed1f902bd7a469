"""dl.fit, dl.evaluate, dl.confusion_matrix and History, on small synthetic data (fast)."""
import math
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import data
from dlcourse.layers import Linear
from dlcourse.losses import MSELoss, SigmoidCrossEntropy, SoftmaxCrossEntropy
from dlcourse.models import CNN, MLP, Perceptron
from dlcourse.optim import SGD, Adam
from dlcourse.metrics import confusion_matrix
from dlcourse import train as dl_train
from dlcourse.train import History, StopTraining, TrainingDiverged, evaluate, fit


@pytest.fixture(scope="module")
def xor():
    X, y = data.make_xor(300, seed=0)
    return (X[:200], y[:200]), (X[200:], y[200:])


def small_mlp(seed=0, dropout=0.0):
    return MLP([2, 16, 2], dropout=dropout, seed=seed)


def params_of(model):
    return {k: v.copy() for k, v in model.state_dict().items()}


# ======================================================================================
# fit and History
# ======================================================================================
def test_fit_learns_xor_and_fills_history(xor, device):
    (X, y), val = xor
    model = small_mlp().to(device)
    history = fit(model, SoftmaxCrossEntropy(), Adam(model, lr=0.05), X, y, epochs=8,
                  batch_size=32, validation=val, seed=0, progress=False)
    assert isinstance(history, History)
    assert history.epochs == 8
    for name in ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "epoch_time"):
        assert len(getattr(history, name)) == 8, name
    assert len(history.step_loss) == 8 * math.ceil(200 / 32)
    assert history.train_loss[-1] < history.train_loss[0]
    assert history.val_accuracy[-1] > 0.9
    assert all(t > 0 for t in history.epoch_time)
    assert history.stop_reason is None and not history.interrupted
    assert "8 epochs" in repr(history) and "val_accuracy" in repr(history)
    assert len(history.table().splitlines()) == 9
    assert history.as_dict()["val_accuracy"] == history.val_accuracy


def test_validation_metrics_match_evaluate(xor, device):
    (X, y), (Xv, yv) = xor
    model = small_mlp().to(device)
    loss = SoftmaxCrossEntropy()
    history = fit(model, loss, Adam(model, lr=0.05), X, y, epochs=2, batch_size=50,
                  validation=(Xv, yv), progress=False)
    result = evaluate(model, Xv, yv, loss=loss)
    assert history.val_loss[-1] == pytest.approx(result["loss"])
    assert history.val_accuracy[-1] == pytest.approx(result["accuracy"])


def test_without_validation_the_val_lists_stay_empty(xor, device):
    (X, y), _ = xor
    model = small_mlp().to(device)
    history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=2, progress=False)
    assert history.val_loss == [] and history.val_accuracy == [] and history.epochs == 2


def test_float64_data_is_cast_to_the_model_dtype(xor, device):
    (X, y), _ = xor
    model = small_mlp().to(device)
    fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X.astype(np.float64), y, epochs=1,
        progress=False)
    assert all(p.dtype == np.float32 for p in model.params.values())


def test_the_mode_is_train_during_steps_and_restored_after(xor, device):
    (X, y), val = xor
    model = small_mlp(dropout=0.2).to(device).eval()
    modes = []
    fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=1, batch_size=100,
        validation=val, progress=False, on_step=lambda step, loss: modes.append(model.training))
    assert modes == [True, True]
    assert model.training is False            # as it was before fit


def test_progress_bar_runs(xor, capsys, monkeypatch):
    monkeypatch.setattr(dl_train, "_bar_is_seen", lambda: True)     # as on a terminal
    (X, y), val = xor
    model = small_mlp()
    history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=2,
                  validation=val, progress=True)
    assert history.epochs == 2
    assert "epoch 2/2" in capsys.readouterr().err


def test_no_progress_bar_into_a_file_or_a_pipe(xor, capsys, monkeypatch):
    """With standard error in a file (here pytest's capture, not a terminal) and no notebook,
    progress=True draws nothing: every redraw would be a line of the file."""
    (X, y), val = xor
    model = small_mlp()
    fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=2, progress=True)
    assert capsys.readouterr().err == ""
    import types
    kernel = types.SimpleNamespace(get_ipython=lambda: types.SimpleNamespace(kernel=object()))
    monkeypatch.setitem(sys.modules, "IPython", kernel)                # inside a Jupyter kernel
    assert dl_train._bar_is_seen()


def test_seeded_runs_are_bit_for_bit_repeatable(xor):
    (X, y), val = xor
    runs = []
    for _ in range(2):
        model = small_mlp(seed=3, dropout=0.3)   # dropout: the masks must repeat too
        history = fit(model, SoftmaxCrossEntropy(), Adam(model, lr=0.01), X, y, epochs=3,
                      batch_size=16, validation=val, seed=7, progress=False)
        runs.append((params_of(model), history))
    (p1, h1), (p2, h2) = runs
    for k in p1:
        assert np.array_equal(p1[k], p2[k]), k
    assert h1.step_loss == h2.step_loss
    assert h1.val_loss == h2.val_loss and h1.val_accuracy == h2.val_accuracy

    model = small_mlp(seed=3, dropout=0.3)   # another seed: another batch order
    h3 = fit(model, SoftmaxCrossEntropy(), Adam(model, lr=0.01), X, y, epochs=3,
             batch_size=16, seed=8, progress=False)
    assert h3.step_loss != h1.step_loss


def test_seeded_cnn_with_batchnorm_is_repeatable():
    gen = np.random.default_rng(0)
    X = gen.random((40, 1, 8, 8), dtype=np.float32)
    y = gen.integers(0, 3, 40)
    states = []
    for _ in range(2):
        model = CNN(1, 8, 3, channels=(2, 4), batchnorm=True, dropout=0.2, seed=1)
        fit(model, SoftmaxCrossEntropy(), Adam(model, lr=0.01), X, y, epochs=2,
            batch_size=8, seed=0, progress=False)
        states.append(params_of(model))
    for k in states[0]:
        assert np.array_equal(states[0][k], states[1][k]), k


# ======================================================================================
# Stopping: divergence, callbacks, Ctrl-C, out of memory
# ======================================================================================
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_huge_learning_rate_raises_training_diverged(xor, device, to_dev):
    (X, y), _ = xor
    model = small_mlp().to(device)
    with pytest.raises(TrainingDiverged) as info:
        fit(model, SoftmaxCrossEntropy(), SGD(model, lr=1e30), X, y, epochs=3,
            batch_size=20, progress=False)
    err = info.value
    message = str(err)
    assert f"epoch {err.epoch}, step {err.step}" in message
    assert "lr=1e+30" in message and "lr=1e+29" in message   # names lr and suggests lr/10
    assert err.lr == 1e30
    assert isinstance(err.history, History) and err.history.stop_reason == "diverged"
    assert err.history.step_loss and all(math.isfinite(v) for v in err.history.step_loss)
    for k, p in model.params.items():
        assert bool((p == p).all()) and float(abs(p).max()) < np.inf, k
    # the parameters kept are ones whose loss was finite
    assert math.isfinite(SoftmaxCrossEntropy().forward(model.forward(to_dev(X)), to_dev(y)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_divergence_on_the_last_step_of_an_epoch_restores_the_parameters():
    # One step per epoch: that step's loss is finite, but its update makes the
    # parameters infinite, and no later forward pass sees it. (lr=1e300, not just past float32:
    # NumPy 1.x multiplies a Python float with float32 in float64, and 1e39 * g fits again.)
    X = np.array([[1.0, 2.0], [-1.0, 0.5]], dtype=np.float32)
    y = np.array([0, 1])
    model = MLP([2, 2], seed=0)
    before = params_of(model)
    with pytest.raises(TrainingDiverged, match="epoch 1, step 1"):
        fit(model, SoftmaxCrossEntropy(), SGD(model, lr=1e300), X, y, epochs=1,
            batch_size=2, progress=False)
    for k, p in model.state_dict().items():
        assert np.array_equal(p, before[k]), k


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("make_optimizer", [lambda m: SGD(m, lr=0.1, momentum=0.9),
                                            lambda m: Adam(m, lr=0.01)], ids=["momentum", "adam"])
def test_divergence_restores_the_optimizer_state_too(xor, device, xp, make_optimizer):
    (X, y), _ = xor
    model = small_mlp().to(device)
    optimizer = make_optimizer(model)
    before = {}

    def on_step(step, loss):
        if step == 3:   # remember a sane state, then make update 4 overflow to inf
            before.update({k: v.copy() for k, v in optimizer.state.items()})
            optimizer.lr = 1e39

    with pytest.raises(TrainingDiverged, match="epoch 1, step 5"):
        fit(model, SoftmaxCrossEntropy(), optimizer, X, y, epochs=1, batch_size=20,
            on_step=on_step, progress=False)
    assert optimizer.steps == 3
    assert before and optimizer.state.keys() == before.keys()
    for k, buf in optimizer.state.items():
        assert xp.array_equal(buf, before[k]), k
    optimizer.lr = 0.01                           # a learner lowers lr and goes on
    history = fit(model, SoftmaxCrossEntropy(), optimizer, X, y, epochs=1, progress=False)
    assert all(math.isfinite(v) for v in history.step_loss)


def test_a_callback_returning_false_stops_cleanly(xor, device):
    (X, y), _ = xor
    model = small_mlp().to(device)
    seen = []

    def callback(epoch, history):
        seen.append((epoch, history.epochs))
        return epoch < 2

    history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=10,
                  callback=callback, progress=False)
    assert seen == [(1, 1), (2, 2)]
    assert history.epochs == 2 and history.stop_reason == "callback"


def test_stop_training_from_on_step(xor, device):
    (X, y), _ = xor
    model = small_mlp().to(device)
    steps = []

    def on_step(step, loss):
        steps.append(step)
        assert isinstance(loss, float)
        if step == 5:
            raise StopTraining

    history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=10,
                  batch_size=50, on_step=on_step, progress=False)
    assert steps == [1, 2, 3, 4, 5]
    assert history.stop_reason == "callback" and history.epochs == 1
    assert len(history.step_loss) == 5


def test_ctrl_c_keeps_the_history_so_far(xor, capsys):
    (X, y), val = xor
    model = small_mlp()

    def callback(epoch, history):
        if epoch == 2:
            raise KeyboardInterrupt

    history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=10,
                  validation=val, callback=callback, progress=True)
    assert history.interrupted and history.stop_reason == "interrupted"
    assert history.epochs == 2 and len(history.val_accuracy) == 2
    err = capsys.readouterr().err
    assert "interrupted at epoch 2" in err
    assert model.training   # mode restored


def test_ctrl_c_in_the_middle_of_an_update_restores_the_parameters(xor):
    (X, y), _ = xor
    model = small_mlp()

    class Interrupted(SGD):
        def step(self):
            if self.steps == 3:
                self.steps += 1
                before.update(params_of(self.model))
                for p in self.model.params.values():
                    p += 1.0                     # half-way: some change was made ...
                raise KeyboardInterrupt          # ... then Ctrl-C
            super().step()

    before = {}
    history = fit(model, SoftmaxCrossEntropy(), Interrupted(model, lr=0.1), X, y,
                  epochs=3, batch_size=20, progress=False)
    assert history.interrupted and len(history.step_loss) == 3
    for k, p in model.state_dict().items():
        assert np.array_equal(p, before[k]), k


def test_out_of_memory_is_reraised_with_a_batch_size_hint(xor):
    (X, y), _ = xor

    class OutOfMemoryError(Exception):   # stands for cupy.cuda.memory.OutOfMemoryError
        pass

    class Hungry(Linear):
        def forward(self, x):
            raise OutOfMemoryError("Out of memory allocating 1,000,000,000 bytes")

    model = Hungry(2, 2)
    with pytest.raises(MemoryError, match=r"batch_size=64.*batch_size=32"):
        fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, batch_size=64,
            progress=False)


# ======================================================================================
# Bad input speaks to the learner
# ======================================================================================
def test_fit_refuses_the_perceptron_with_a_hint(xor):
    (X, y), _ = xor
    with pytest.raises(TypeError, match=r"model.fit\(X, y\)"):
        fit(Perceptron(2), SoftmaxCrossEntropy(), None, X, y, progress=False)


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size"),
    (dict(epochs=-1), "epochs"),
    (dict(validation=[1, 2, 3]), "validation"),
])
def test_fit_checks_its_arguments(xor, kwargs, match):
    (X, y), _ = xor
    model = small_mlp()
    with pytest.raises((ValueError, TypeError), match=match):
        fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, progress=False, **kwargs)


def test_fit_checks_that_x_and_y_match(xor):
    (X, y), _ = xor
    model = small_mlp()
    with pytest.raises(ValueError, match="200 and 199"):
        fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y[:-1], progress=False)


# ======================================================================================
# evaluate
# ======================================================================================
def test_evaluate_gives_loss_and_accuracy_and_restores_the_mode(xor, device, to_dev):
    (X, y), _ = xor
    model = small_mlp().to(device)
    loss = SoftmaxCrossEntropy()
    result = evaluate(model, X, y, loss=loss, batch_size=7)   # batches of unequal size
    model.eval()
    logits = dl.to_numpy(model.forward(to_dev(X)))
    assert result["n"] == 200
    assert result["loss"] == pytest.approx(SoftmaxCrossEntropy().forward(logits, y), rel=1e-5)
    assert result["accuracy"] == pytest.approx(float((logits.argmax(1) == y).mean()))
    model.train()
    evaluate(model, X, y)
    assert model.training
    assert evaluate(model, X, y)["loss"] is None


def test_evaluate_binary_and_regression(xor):
    (X, y), _ = xor
    model = Linear(2, 1, seed=0)
    result = evaluate(model, X, y, loss=SigmoidCrossEntropy())
    expected = float(((model.forward(X).reshape(-1) > 0) == (y == 1)).mean())
    assert result["accuracy"] == pytest.approx(expected)
    targets = np.random.default_rng(0).standard_normal((200, 1)).astype(np.float32)
    result = evaluate(model, X, targets, loss=MSELoss())
    assert result["accuracy"] is None and result["loss"] > 0


def test_accuracy_with_mse_only_for_one_hot_targets(xor):
    """MSELoss with several outputs: one-hot targets are classification (accuracy), real-valued
    ones are regression (no accuracy, as the docs promise)."""
    (X, y), _ = xor
    model = Linear(2, 3, seed=0)
    real = np.random.default_rng(0).standard_normal((200, 3)).astype(np.float32)
    assert evaluate(model, X, real, loss=MSELoss())["accuracy"] is None
    history = fit(model, MSELoss(), SGD(model, lr=0.01), X, real, epochs=1, progress=False)
    assert history.train_accuracy == [None]
    one_hot = np.eye(3, dtype=np.float32)[y]
    expected = float((model.forward(X).argmax(1) == y).mean())
    assert evaluate(model, X, one_hot, loss=MSELoss())["accuracy"] == pytest.approx(expected)


def test_fit_with_a_sigmoid_loss_reports_binary_accuracy(xor, device):
    (X, y), val = xor
    model = MLP([2, 16, 1], seed=0).to(device)
    history = fit(model, SigmoidCrossEntropy(), Adam(model, lr=0.05), X, y, epochs=10,
                  validation=val, progress=False)
    assert history.val_accuracy[-1] > 0.9


# ======================================================================================
# confusion_matrix
# ======================================================================================
def test_confusion_matrix_rows_are_true_columns_predicted():
    cm = confusion_matrix([0, 0, 1, 2, 2, 2], [0, 1, 1, 2, 0, 2])
    expected = np.array([[1, 1, 0],
                         [0, 1, 0],
                         [1, 0, 2]])
    assert cm.dtype.kind == "i" and np.array_equal(cm, expected)
    assert confusion_matrix([1], [1], num_classes=4).shape == (4, 4)
    assert cm.sum() == 6 and np.trace(cm) == 4


@pytest.mark.parametrize("y_true, y_pred, kwargs, error, match", [
    ([0, 1], [0.0, 1.0], {}, TypeError, "integer"),
    ([0, 1], [0], {}, ValueError, "2 labels but y_pred has 1"),
    ([0, 5], [0, 1], dict(num_classes=3), ValueError, "0..2"),
    ([[1, 0]], [0], {}, ValueError, "argmax"),
])
def test_confusion_matrix_errors(y_true, y_pred, kwargs, error, match):
    with pytest.raises(error, match=match):
        confusion_matrix(np.array(y_true), np.array(y_pred), **kwargs)


# ======================================================================================
# plots (matplotlib without a screen)
# ======================================================================================
def test_plots_draw(xor):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dlcourse.plots import plot_confusion_matrix, plot_history
    (X, y), val = xor
    model = small_mlp()
    history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=2,
                  validation=val, progress=False)
    fig = plot_history(history)
    assert len(fig.axes) == 2
    fig2 = plot_confusion_matrix(confusion_matrix(val[1], model.predict(val[0]), 2),
                                 classes=["a", "b"], normalize=True)
    assert fig2.axes
    plt.close("all")
    with pytest.raises(ValueError, match="square"):
        plot_confusion_matrix(np.zeros((2, 3)))


def test_fit_accepts_an_optimizer_over_part_of_the_model_and_refuses_a_stale_one(xor):
    """Fine-tuning a head: the optimizer's arrays are the model's, whatever their names."""
    (X, y), _ = xor
    model = MLP([2, 8, 2], seed=0)
    head = model.layers[-1]
    body_before = model.layers[0].params["W"].copy()
    fit(model, SoftmaxCrossEntropy(), SGD(head, lr=0.1), X, y, epochs=1, progress=False)
    assert np.array_equal(model.layers[0].params["W"], body_before)      # only the head trained
    rebuilt = MLP([2, 8, 2], seed=0)
    with pytest.raises(ValueError, match="built for a different model"):
        fit(rebuilt, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=1, progress=False)


# ======================================================================================
# fit(clip_norm=...): lesson 04b's gradient clipping, before every optimizer step
# ======================================================================================
def _norm(grads) -> float:
    return math.sqrt(sum(float((dl.to_numpy(g).astype(np.float64) ** 2).sum())
                         for g in grads.values()))


class _Watching(SGD):
    """SGD that writes down the global norm of the gradients it is handed."""

    def step(self):
        self.seen = getattr(self, "seen", []) + [_norm(self.model.grads)]
        super().step()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_clip_norm_clips_what_the_optimizer_gets_and_records_the_norms(xor, device, precision):
    (X, y), _ = xor
    model = small_mlp().to(device)
    opt = _Watching(model, lr=0.5, momentum=0.9)
    history = fit(model, SoftmaxCrossEntropy(), opt, X, y, epochs=3, batch_size=20, seed=0,
                  progress=False, clip_norm=0.3, precision=precision,
                  loss_scaler=dl.LossScaler(init_scale=2.0 ** 12) if precision == "fp16" else None)
    norms = history.grad_norm
    assert 0 < len(norms) == len(opt.seen) <= len(history.step_loss)   # fp16 may skip a step
    assert any(n > 0.3 for n in norms) and any(n < 0.3 for n in norms)
    # the unscaled gradients' norms (lesson 10's loss scale, 4096 here, is divided out first)
    assert max(norms) < 100
    for before, seen in zip(norms, opt.seen):
        assert seen == pytest.approx(min(before, 0.3), rel=1e-4)


def test_clip_norm_changes_nothing_when_the_gradients_stay_below_it(xor):
    (X, y), _ = xor
    runs = []
    for clip_norm in (None, 1e6):
        model = small_mlp()
        history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=2,
                      batch_size=20, seed=0, progress=False, clip_norm=clip_norm)
        runs.append((params_of(model), history))
    (plain, h_plain), (clipped, h_clipped) = runs
    for k in plain:
        assert np.array_equal(plain[k], clipped[k]), k
    assert h_plain.step_loss == h_clipped.step_loss
    assert h_plain.grad_norm == [] and len(h_clipped.grad_norm) == len(h_clipped.step_loss)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_clip_norm_saves_a_run_that_diverges_without_it(xor, device):
    """A deep ReLU MLP with SGD at lr=0.3: a gradient spike throws it to inf without clipping;
    with clip_norm=1 the same run learns XOR."""
    (X, y), _ = xor

    def run(clip_norm):
        model = MLP([2, 32, 32, 32, 32, 2], seed=1).to(device)
        return fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.3, momentum=0.9), X, y,
                   epochs=10, batch_size=20, seed=1, progress=False, clip_norm=clip_norm)

    with pytest.raises(TrainingDiverged):
        run(None)
    history = run(1.0)
    assert all(math.isfinite(v) for v in history.step_loss)
    assert history.train_accuracy[-1] > 0.9
    assert max(history.grad_norm) > 1.0                   # clipping did act


def test_clip_norm_with_two_ranks_equals_one_process_on_the_global_batch():
    """With comm= every rank clips the averaged gradient (after the all-reduce), so two
    simulated ranks of batch B train exactly as one process of batch 2B."""
    from dlcourse import distributed, distributed_jobs
    X, y = distributed_jobs.synthetic()

    def train(comm, batch_size):
        model = MLP([12, 16, 3], seed=0).astype(np.float64)
        history = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.5, momentum=0.9), X, y,
                      epochs=2, batch_size=batch_size, seed=0, progress=False, comm=comm,
                      clip_norm=0.2)
        return model.params, history.grad_norm

    single, single_norms = train(None, 16)
    assert any(n > 0.2 for n in single_norms)
    for params, norms in distributed.simulate(lambda comm, _: train(comm, 8), [0, 1]):
        np.testing.assert_allclose(norms, single_norms, rtol=1e-10)
        for k, p in single.items():
            np.testing.assert_allclose(params[k], p, rtol=1e-10, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("clip_norm,error,words", [
    (0, ValueError, r"fit\(clip_norm=\.\.\.\) must be a finite number in \(0, inf\), got 0"),
    (-1.0, ValueError, r"E\.g\. clip_norm=1\.0"),
    (float("inf"), ValueError, r"fit\(clip_norm=\.\.\.\) must be a finite number"),
    ("1.0", TypeError, r"fit\(clip_norm=\.\.\.\) expects a number"),
    (True, TypeError, r"fit\(clip_norm=\.\.\.\) expects a number"),
])
def test_clip_norm_is_checked(xor, clip_norm, error, words):
    (X, y), _ = xor
    model = small_mlp()
    with pytest.raises(error, match=words):
        fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=1, progress=False,
            clip_norm=clip_norm)


# ======================================================================================
# fit is lesson 04a's loop: the steps lessons 10, 11 and 13 add (precision=, a pruned model,
# comm=) come from their own modules, only when asked for, and leave a plain fit's numbers alone
# ======================================================================================
def _digits(n=200):
    X, y = dl.data.load_digits("train")
    return X[:n], y[:n]


def _fit(model_seed=0, **kwargs):
    X, y = _digits()
    model = dl.MLP([64, 16, 10], dropout=0.2, seed=model_seed)
    history = fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=1e-2), X, y, epochs=2,
                  batch_size=32, seed=1, progress=False, **kwargs)
    return model, history


def test_fp32_without_pruning_or_comm_equals_a_plain_fit_bit_for_bit():
    plain, h_plain = _fit()
    named, h_named = _fit(precision="fp32", loss_scaler=None, comm=None)
    for k, p in plain.state_dict().items():
        assert np.array_equal(p, named.state_dict()[k]), k
    assert h_plain.step_loss == h_named.step_loss
    assert h_named.precision == "fp32" and h_named.loss_scaler is None


def test_one_process_comm_equals_a_plain_fit_bit_for_bit():
    plain, h_plain = _fit()
    single, h_single = _fit(comm=dl.distributed.init("single"))
    for k, p in plain.state_dict().items():
        assert np.array_equal(p, single.state_dict()[k]), k
    assert h_plain.step_loss == h_single.step_loss


def test_a_loss_scaler_in_fp32_is_still_used():
    scaler = dl.LossScaler(init_scale=2.0 ** 8, growth_interval=3)
    _, history = _fit(loss_scaler=scaler)
    assert history.loss_scaler["scale"] > 2.0 ** 8 and len(history.loss_scale) == 14


# Imports dlcourse.train without dlcourse/__init__.py (which imports every module for dl.*),
# trains a tiny model, and prints which lesson modules got imported.
_PROGRAM = textwrap.dedent("""
    import importlib.util, sys
    package = importlib.util.module_from_spec(importlib.util.find_spec("dlcourse"))
    sys.modules["dlcourse"] = package              # the package, its __init__ not run
    from dlcourse.train import fit
    from dlcourse.layers import Linear, ReLU, Sequential
    from dlcourse.losses import SoftmaxCrossEntropy
    from dlcourse.optim import SGD
    import numpy as np
    X = np.random.default_rng(0).normal(size=(40, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    model = Sequential(Linear(4, 8, seed=0), ReLU(), Linear(8, 2, seed=1))
    h = fit(model, SoftmaxCrossEntropy(), SGD(model, lr=0.1), X, y, epochs=2, batch_size=8,
            seed=0, progress=False, ARGS)
    assert h.epochs == 2
    print(sorted(m for m in ("dlcourse.distributed", "dlcourse.precision", "dlcourse.prune")
                 if m in sys.modules))
""")


@pytest.mark.parametrize("args, imported", [
    ("", []),
    ("precision='fp32'", []),
    ("precision='bf16'", ["dlcourse.precision"]),
    ("comm=__import__('dlcourse.distributed').distributed.init('single')", ["dlcourse.distributed"]),
])
def test_a_plain_fit_imports_no_later_lesson(args, imported):
    program = _PROGRAM.replace("ARGS", args)
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(imported)

