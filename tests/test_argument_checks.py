"""Every argument of the APIs added after the core layers is checked as the core layers' are
(issue 28, items 7 and 10): the type, the range and finiteness, with an error that names the
argument and the value the user gave, and says what would do."""
import numpy as np
import pytest

import dlcourse as dl


@pytest.mark.parametrize("kwargs, error, words", [
    ({"init_scale": float("inf")}, ValueError, "init_scale=...) must be a finite number"),
    ({"init_scale": 0.0}, ValueError, "init_scale"),
    ({"init_scale": "1"}, TypeError, "init_scale=...) expects a number"),
    ({"growth_interval": "x"}, TypeError, "growth_interval=...) must be a whole number"),
    ({"growth_interval": 2.5}, TypeError, "got 2.5"),
    ({"growth_interval": 0}, ValueError, "growth_interval"),
    ({"growth_factor": 1.0}, ValueError, "growth_factor"),
    ({"backoff_factor": 1.0}, ValueError, "backoff_factor"),
    ({"backoff_factor": float("nan")}, ValueError, "backoff_factor"),
])
def test_loss_scaler_arguments(kwargs, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        dl.LossScaler(**kwargs)


def test_a_valid_loss_scaler_is_as_before():
    s = dl.LossScaler(init_scale=8, growth_interval=np.int64(3))
    assert s.scale == 8.0 and s.growth_interval == 3 and isinstance(s.growth_interval, int)


# ---- item 6: calibration data is checked before any work ------------------------------------
@pytest.fixture(scope="module")
def mlp():
    return dl.MLP([64, 16, 10], seed=0)


@pytest.mark.parametrize("make, kwargs, error, words", [
    (lambda X: np.where(np.arange(len(X))[:, None] == 7, np.nan, X), {}, ValueError,
     "NaN or infinity in 1 sample.*row 7"),
    (lambda X: np.where(np.arange(len(X))[:, None] == 3, np.inf, X), {}, ValueError, "row 3"),
    (lambda X: X[:0], {}, ValueError, "non-empty"),
    (lambda X: X[:, :32], {}, ValueError, r"samples of shape \(32,\)"),
    (lambda X: X.astype(str), {}, TypeError, "numbers"),
    (lambda X: X, {"batch_size": 0}, ValueError, r"batch_size=...\) must be a whole number"),
])
def test_quantize_refuses_bad_calibration_data_before_any_work(mlp, make, kwargs, error, words):
    X = np.random.default_rng(0).random((20, 64)).astype(np.float32)
    with pytest.raises(error, match=words):
        dl.quantize(mlp, make(X), **kwargs)


# ---- item 7: the schedule, gradual pruning and the export shape ------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda m: dl.pruning_schedule(2.0, 3), r"pruning_schedule\(sparsity=...\).*got 2.0"),
    (lambda m: dl.prune_gradually(m, 1.2, lambda model, step: None),
     r"prune_gradually\(sparsity=...\).*got 1.2"),
])
def test_pruning_arguments_name_the_value_given(mlp, call, words):
    with pytest.raises(ValueError, match=words):
        call(mlp)


@pytest.mark.parametrize("shape, words", [((64.5,), "64.5"), ("64", "not the text '64'"),
                                          ((True,), "True"), ((0,), "positive")])
def test_export_input_shape_is_checked(mlp, shape, words):
    pytest.importorskip("onnx", reason="export needs onnx: pip install -e '.[serve]'")
    with pytest.raises(dl.ExportError, match=words):
        dl.export.to_onnx(mlp, shape)


# ---- item 8: pruning masks persist -----------------------------------------------------------
def test_pruned_weights_stay_zero_in_a_hand_written_loop():
    (X, y), _, _ = dl.data.load_digits()
    model = dl.MLP([64, 32, 10], seed=0)
    dl.prune(model, 0.8)
    loss, opt = dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=1e-2)
    for xb, yb in dl.data.batches(X, y, 64, seed=0):          # docs/library.md's manual loop
        loss.forward(model.forward(xb), yb)
        model.backward(loss.backward())
        opt.step()
    assert dl.sparsity(model)["total"] == pytest.approx(0.8, abs=1e-3)


def test_a_saved_pruned_model_stays_pruned_when_it_is_fine_tuned(tmp_path):
    import json
    import zipfile
    (X, y), _, _ = dl.data.load_digits()
    model = dl.MLP([64, 32, 10], seed=0)
    dl.prune(model, 0.7)
    path = dl.save(model, tmp_path / "pruned.npz")
    with zipfile.ZipFile(path) as z:
        assert json.loads(z.read("__dlcourse__.json"))["format_version"] == 4
    loaded = dl.load(path)
    dl.fit(loaded, dl.SoftmaxCrossEntropy(), dl.SGD(loaded, lr=0.1, momentum=0.9), X, y,
           epochs=1, progress=False, seed=0)
    assert dl.sparsity(loaded)["total"] == pytest.approx(0.7, abs=1e-3)
    unpruned = dl.save(dl.MLP([4, 2], seed=0), tmp_path / "plain.npz")
    with zipfile.ZipFile(unpruned) as z:                        # older readers still read it
        assert json.loads(z.read("__dlcourse__.json"))["format_version"] == 3


# ---- item 4: the sample shape travels, so an int8 model can be served --------------------------
def test_fit_and_quantize_record_the_sample_shape_and_a_checkpoint_keeps_it(tmp_path):
    from dlcourse.inference import input_shape
    (X, y), _, _ = dl.data.load_digits(flat=False)
    model = dl.Sequential(dl.Conv2d(1, 4, 3, padding=1), dl.ReLU(), dl.Flatten(),
                          dl.Linear(4 * 64, 10))
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=1e-2), X, y, epochs=1,
           progress=False)
    q = dl.quantize(model, X[:64])
    loaded = dl.load(dl.save(q, tmp_path / "int8.npz"))
    assert input_shape(loaded) == (1, 8, 8) == input_shape(model)
