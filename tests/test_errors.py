"""Bad input gets an error that names what was expected and what was given."""
import numpy as np
import pytest

import dlcourse as dl


def test_linear_wrong_width_suggests_flatten():
    with pytest.raises(ValueError, match=r"Linear\(in_features=64\) got x of shape \(32, 65\).*must be 64"):
        dl.Linear(64, 10).forward(np.zeros((32, 65), np.float32))


def test_linear_wrong_rank_names_flatten():
    with pytest.raises(ValueError, match=r"\(N, in_features\).*\(2, 1, 8, 8\).*Flatten"):
        dl.Linear(64, 10).forward(np.zeros((2, 1, 8, 8), np.float32))


def test_single_sample_without_batch_axis():
    with pytest.raises(ValueError, match=r"x\[None\]"):
        dl.Linear(3, 2).forward(np.zeros(3, np.float32))


def test_integers_into_linear():
    with pytest.raises(TypeError, match=r"floating-point input, got dtype int64.*astype\(np.float32\)"):
        dl.Linear(3, 2).forward(np.zeros((4, 3), dtype=np.int64))


def test_float64_into_float32_model():
    with pytest.raises(TypeError, match=r"float32 parameters but got x of dtype float64"):
        dl.MLP([3, 4, 2]).forward(np.zeros((4, 3)))


def test_conv_wrong_channels_and_rank():
    conv = dl.Conv2d(3, 4, 3)
    with pytest.raises(ValueError, match=r"axis 1 \(channels\) must be 3"):
        conv.forward(np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"\(N, C_in, H, W\).*flat images"):
        conv.forward(np.zeros((2, 64), np.float32))


def test_kernel_larger_than_image():
    with pytest.raises(ValueError, match=r"5×5 window does not fit in the 3×3 input"):
        dl.Conv2d(1, 1, 5).forward(np.zeros((1, 1, 3, 3), np.float32))


def test_bad_layer_arguments():
    with pytest.raises(ValueError, match="Dropout probability"):
        dl.Dropout(1.5)
    with pytest.raises(ValueError, match="stride"):
        dl.Conv2d(1, 1, 3, stride=0)
    with pytest.raises(TypeError, match="instead of an instance"):
        dl.Sequential(dl.Linear(2, 2), dl.ReLU)
    with pytest.raises(ValueError, match="activation"):
        dl.MLP([2, 3, 1], activation="swish")
    with pytest.raises(ValueError, match="learning rate"):
        dl.SGD(dl.Linear(2, 2), lr=0)


@pytest.mark.parametrize("make,words", [
    (lambda: dl.Conv2d(1, 4, 0), r"kernel_size >= 1, got Conv2d\(1, 4, kernel_size=0\)"),
    (lambda: dl.Conv2d(0, 4, 3), r"in_channels, out_channels and kernel_size >= 1"),
    (lambda: dl.Conv2d(1, 4, 3, stride=(1, 2, 3)), r"Conv2d\(stride=...\) must be an int or a pair \(h, w\)"),
    (lambda: dl.Conv2d(1, 4, 3, padding=(1, -1)), r"Conv2d\(padding=...\) must be a whole number >= 0"),
    (lambda: dl.MaxPool2d(2, stride=(2, 0)), r"MaxPool2d needs kernel_size and stride >= 1"),
    (lambda: dl.CNN(1, (1, 40), kernel_size=(1, 4)), r"CNN\(kernel_size=...\) must be odd"),
    (lambda: dl.CNN(1, (1, 40)), r"at least 4×4 \(two 2×2 poolings\), got 1×40.*pool=\(1, 2\)"),
])
def test_conv_and_pool_sizes_say_what_is_wrong(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_stride_and_padding_are_kept_per_axis():
    conv = dl.Conv2d(1, 2, (1, 5), stride=(1, 2), padding=[0, 2])
    assert (conv.kernel_size, conv.stride, conv.padding) == ((1, 5), (1, 2), (0, 2))
    assert conv.get_config()["stride"] == [1, 2] and conv.get_config()["padding"] == [0, 2]
    assert dl.Conv2d(1, 2, 3, stride=2, padding=1).stride == (2, 2)
    assert dl.MaxPool2d((2, 2), stride=(2, 1)).stride == (2, 1)
    assert dl.MaxPool2d((1, 3)).stride == (1, 3)          # the default: the kernel size


@pytest.mark.parametrize("labels,words", [
    (np.array([0, 1, 10]), r"labels must be in \[0, 9\].*from 0 to 10"),
    (np.array([0, -1, 2]), r"from -1 to 2"),
    (np.array([0.0, 1.0, 2.0]), r"integer class labels, got dtype float64"),
    (np.array([0, 1]), r"labels of shape \(3,\)"),
    (np.eye(10)[[0, 1, 2]].astype(np.int64), r"argmax\(axis=1\)"),
])
def test_bad_labels(labels, words):
    with pytest.raises((ValueError, TypeError), match=words):
        dl.SoftmaxCrossEntropy().forward(np.zeros((3, 10), np.float32), labels)


def test_loss_backward_before_forward():
    with pytest.raises(RuntimeError, match="forward"):
        dl.SoftmaxCrossEntropy().backward()


def test_step_before_backward():
    model = dl.MLP([2, 3, 2])
    with pytest.raises(RuntimeError, match="backward"):
        dl.SGD(model, lr=0.1).step()


def test_sigmoid_targets_out_of_range():
    with pytest.raises(ValueError, match=r"targets in \[0, 1\].*-1/\+1"):
        dl.SigmoidCrossEntropy().forward(np.zeros(3), np.array([-1, 1, 1]))


def test_perceptron_labels():
    with pytest.raises(ValueError, match="labels 0 and 1"):
        dl.Perceptron(2).fit(np.zeros((3, 2)), np.array([-1, 1, 1]))


@pytest.mark.gpu
def test_gpu_array_into_cpu_model_and_back():
    x = dl.to_device(np.zeros((2, 3), np.float32), "gpu")
    with pytest.raises(ValueError, match=r"parameters are on the cpu but x is on the gpu.*model.to\('gpu'\)"):
        dl.Linear(3, 2).forward(x)
    with pytest.raises(ValueError, match=r"parameters are on the gpu but x is on the cpu"):
        dl.Linear(3, 2).to("gpu").forward(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"logits are on the gpu but labels on the cpu"):
        dl.SoftmaxCrossEntropy().forward(x, np.array([0, 1]))


# --------------------------------------------------------------------------------------
# fit, evaluate, optimizers and checkpoints: the arguments a learner mixes up
# --------------------------------------------------------------------------------------
def _data(n=40):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 4)).astype(np.float32), rng.integers(0, 3, n)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_in_the_data_is_blamed_not_the_learning_rate():
    X, y = _data()
    X[17, 2] = np.nan
    model = dl.MLP([4, 8, 3], seed=0)
    with pytest.raises(dl.TrainingDiverged, match=r"fit: the batch at epoch 1, step \d+ contains "
                       r"NaN values in X \(row 17\).*np.isnan\(X\).any\(axis=1\) finds the rows"
                       ) as info:
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1), X, y, batch_size=8,
               progress=False)
    assert "learning rate" not in str(info.value)
    images = np.ones((6, 1, 2, 2), np.float32)
    images[[1, 4], 0, 1, 0] = np.inf
    model = dl.Sequential(dl.Flatten(), dl.Linear(4, 3))
    with pytest.raises(dl.TrainingDiverged, match=r"inf values in X \(e.g. row 1; 2 rows in all\)"
                       r".*~np.isfinite\(X\).all\(axis=\(1, 2, 3\)\)"):
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model), images, y[:6], progress=False)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_in_regression_targets_is_named():
    X, _ = _data()
    targets = np.zeros((40, 3), np.float32)
    targets[5, 0] = np.nan
    model = dl.MLP([4, 3], seed=0)
    with pytest.raises(dl.TrainingDiverged, match=r"NaN values in y \(row 5\)"):
        dl.fit(model, dl.MSELoss(), dl.SGD(model), X, targets, progress=False)


def test_an_optimizer_built_for_another_model():
    X, y = _data()
    model, other = dl.MLP([4, 8, 3], seed=0), dl.MLP([4, 8, 3], seed=1)
    with pytest.raises(ValueError, match=r"optimizer was built for a different model.*"
                       r"opt = dl.SGD\(model, lr=...\)"):
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(other), X, y, progress=False)
    # dl.fuse(model) shares model's parameter arrays: an optimizer for either trains both
    dl.fit(dl.fuse(model), dl.SoftmaxCrossEntropy(), dl.SGD(model), X, y, epochs=1,
           progress=False)


@pytest.mark.parametrize("call,error,words", [
    (lambda m, X, y: dl.fit(m, dl.SoftmaxCrossEntropy, dl.SGD(m), X, y),
     TypeError, r"class SoftmaxCrossEntropy as the loss: pass an instance: dl.SoftmaxCrossEntropy\(\)"),
    (lambda m, X, y: dl.evaluate(m, X, y, loss=dl.SoftmaxCrossEntropy),
     TypeError, r"pass an instance: dl.SoftmaxCrossEntropy\(\)"),
    (lambda m, X, y: dl.fit(m, dl.SGD(m), dl.SoftmaxCrossEntropy(), X, y),
     TypeError, r"got SGD. Did you swap loss and optimizer\?"),
    (lambda m, X, y: dl.fit(m, dl.SoftmaxCrossEntropy(), dl.Adam, X, y),
     TypeError, r"class Adam as the optimizer.*opt = dl.Adam\(model, lr=0.01\)"),
    (lambda m, X, y: dl.fit(dl.MLP, dl.SoftmaxCrossEntropy(), dl.SGD(m), X, y),
     TypeError, r"class MLP, not a model: create the model first, e.g. model = dl.MLP\(\[64, 128, 10\]\)"),
    (lambda m, X, y: dl.SGD(dl.MLP, lr=0.1), TypeError, r"SGD\(model, ...\) got the class MLP.*dl.MLP\("),
    (lambda m, X, y: dl.Adam(dl.CNN), TypeError, r"Adam\(model, ...\) got the class CNN.*dl.CNN\("),
], ids=["fit-loss-class", "evaluate-loss-class", "swapped", "optimizer-class", "model-class",
        "SGD-model-class", "Adam-model-class"])
def test_classes_and_swapped_arguments(call, error, words):
    X, y = _data()
    with pytest.raises(error, match=words):
        call(dl.MLP([4, 8, 3], seed=0), X, y)


@pytest.mark.parametrize("make,words", [
    (lambda m: dl.SGD(m, lr="fast"), r"SGD\(lr=...\) expects a number, e.g. lr=0.01; got 'fast'"),
    (lambda m: dl.SGD(m, lr=None), r"expects a number, e.g. lr=0.01; got None"),
    (lambda m: dl.Adam(m, lr="1e-3"), r"Adam\(lr=...\) expects a number"),
    (lambda m: dl.SGD(m, momentum="0.9"), r"SGD\(momentum=...\) expects a number, e.g. momentum=0.9"),
    (lambda m: dl.Adam(m, betas=0.9), r"takes a pair \(beta1, beta2\), e.g. betas=\(0.9, 0.999\); got 0.9"),
    (lambda m: dl.Adam(m, betas=(0.9, None)), r"Adam\(betas=...\) expects a number"),
], ids=["lr-str", "lr-None", "Adam-lr-str", "momentum-str", "betas-float", "betas-None"])
def test_optimizer_settings_of_the_wrong_type(make, words):
    with pytest.raises(TypeError, match=words):
        make(dl.MLP([4, 3]))


def test_load_refuses_what_is_not_an_npz_archive(tmp_path):
    np.save(tmp_path / "weights.npy", np.zeros(3))
    (tmp_path / "notes.txt").write_text("not a checkpoint at all\n")
    for name in ("weights.npy", "notes.txt"):
        with pytest.raises(dl.CheckpointError, match=rf"{name} is not a dlcourse checkpoint "
                           r"\(not an .npz archive\).*dl.save\(model, \"name.npz\"\)"):
            dl.load(tmp_path / name)


def test_save_and_load_refuse_a_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = dl.MLP([2, 2], seed=0)
    (tmp_path / "runs").mkdir()
    (tmp_path / "odd.npz").mkdir()                                  # a folder with a file's name
    for path in ("ckpts/", "runs/", str(tmp_path / "runs") + "/", "odd.npz", "odd"):
        with pytest.raises(IsADirectoryError, match=r"/ is a folder|/ names a folder"):
            dl.save(model, path)
    with pytest.raises(IsADirectoryError, match=r"runs/ is a folder; give a file name inside "
                       r"it, e.g. runs/model.npz"):
        dl.load("runs/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.npz", "runs"]   # nothing written
    assert dl.save(model, "runs/model").name == "model.npz"         # .npz still added
    assert dl.load("runs/model").get_config() == model.get_config()
    assert dl.save(model, "runs").name == "runs.npz"                # a file beside the folder,
    assert dl.load("runs").get_config() == model.get_config()       # as a name without a suffix


def test_more_shape_and_label_mistakes_get_their_fix():
    conv = dl.Conv2d(1, 4, 3)
    with pytest.raises(ValueError, match=r"batch axis: x\[None\].*channel axis: x\[:, None\]"):
        conv.forward(np.zeros((2, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"channels look last.*x\.transpose\(0, 3, 1, 2\)"):
        conv.forward(np.zeros((2, 8, 8, 1), np.float32))
    with pytest.raises(ValueError, match=r"one output.*dl\.SigmoidCrossEntropy\(\)"):
        dl.SoftmaxCrossEntropy().forward(np.zeros((3, 1), np.float32), np.array([0, 1, 1]))
    with pytest.raises(TypeError, match=r"item 0 is list.*Sequential\(\[a, b, c\]\)"):
        dl.Sequential([dl.Linear(2, 2)], [dl.ReLU()])
    with pytest.raises(TypeError, match=r"class \(dl\.ReLU\) instead of an instance"):
        dl.Sequential(dl.Linear(2, 2), dl.ReLU)


# --------------------------------------------------------------------------------------
# Nothing silently wrong (issue 18): a dout of the wrong shape, sizes that are not whole
# numbers, hyperparameters out of range, bad data for evaluate / predict, and bad loss input
# are errors that say so, never a broadcast gradient, a truncated size or a NaN.
# --------------------------------------------------------------------------------------
DOUT_CASES = {   # name: (layer, x's shape)
    "ReLU": (lambda: dl.ReLU(), (2, 3)), "Tanh": (lambda: dl.Tanh(), (2, 3)),
    "Sigmoid": (lambda: dl.Sigmoid(), (2, 3)), "Identity": (lambda: dl.Identity(), (2, 3)),
    "Dropout": (lambda: dl.Dropout(0.5), (2, 3)), "Dropout in eval": (lambda: dl.Dropout(0.5).eval(), (2, 3)),
    "Flatten": (lambda: dl.Flatten(), (2, 1, 2, 2)),
    "BatchNorm2d": (lambda: dl.BatchNorm2d(2), (2, 2, 3, 3)),
    "MaxPool2d": (lambda: dl.MaxPool2d(2), (1, 1, 4, 4)),
    "Conv2d": (lambda: dl.Conv2d(1, 2, 3), (1, 1, 4, 4)),
    "Linear": (lambda: dl.Linear(3, 2), (2, 3)),
    "LinearReLU": (lambda: dl.fuse(dl.MLP([3, 4, 2])).layers[0], (2, 3)),
    "Conv2dReLU": (lambda: dl.fuse(dl.CNN(1, (4, 4), 3, channels=(2, 2))).layers[0], (1, 1, 4, 4)),
    "MLP": (lambda: dl.MLP([3, 4, 2]), (2, 3)),
}


@pytest.mark.parametrize("name", DOUT_CASES)
def test_backward_refuses_a_dout_of_the_wrong_shape(name, device, to_dev):
    make, shape = DOUT_CASES[name]
    layer = make().to(device)
    out = layer.forward(to_dev(np.ones(shape, np.float32)))
    for wrong in (out.shape[:-1] + (out.shape[-1] + 1,), (out.shape[0] + 1,) + tuple(out.shape[1:]),
                  out.shape[1:]):
        with pytest.raises(ValueError, match=rf"backward got dout of shape .*must match the forward "
                                             rf"output, \({out.shape[0]}, "):
            layer.backward(to_dev(np.ones(wrong, np.float32)))
    with pytest.raises(ValueError, match=r"got dout of shape a float"):
        layer.backward(1.0)


@pytest.mark.parametrize("make, words", [
    (lambda: dl.Linear(2.7, 3), r"Linear\(in_features=\.\.\.\) must be a whole number >= 1, got 2\.7"),
    (lambda: dl.Linear(4, float("nan")), r"out_features=\.\.\.\) must be a whole number >= 1, got nan"),
    (lambda: dl.Linear(True, 3), r"got True \(bool\)"),
    (lambda: dl.Linear(0, 3), r"in_features=\.\.\.\) must be a whole number >= 1, got 0"),
    (lambda: dl.Conv2d(1, 2, 2.5), r"Conv2d\(kernel_size=\.\.\.\) must be a whole number"),
    (lambda: dl.Conv2d(1.5, 2, 3), r"Conv2d\(in_channels=\.\.\.\)"),
    (lambda: dl.Conv2d(1, 2, 3, stride=1.5), r"Conv2d\(stride=\.\.\.\) must be a whole number >= 1"),
    (lambda: dl.Conv2d(1, 2, 3, padding=-1), r"Conv2d\(padding=\.\.\.\) must be a whole number >= 0"),
    (lambda: dl.Conv2d(1, 2, (3, 2.5)), r"kernel_size=\.\.\.\) must be a whole number"),
    (lambda: dl.MaxPool2d(2.5), r"MaxPool2d\(kernel_size=\.\.\.\)"),
    (lambda: dl.MaxPool2d(2, stride=True), r"MaxPool2d\(stride=\.\.\.\).*True"),
    (lambda: dl.BatchNorm2d(2.5), r"BatchNorm2d\(num_features=\.\.\.\)"),
    (lambda: dl.CNN(image_size=27.5), r"CNN\(image_size=\.\.\.\) must be a whole number"),
    (lambda: dl.CNN(channels=(8, 2.7)), r"CNN\(channels=\.\.\.\)"),
    (lambda: dl.CNN(num_classes=float("nan")), r"out_features=\.\.\.\).*nan"),
    (lambda: dl.MLP([4, float("nan"), 2]), r"whole-number layer sizes"),
    (lambda: dl.Perceptron(2.5), r"Perceptron\(n_features=\.\.\.\)"),
])
def test_sizes_are_whole_numbers_never_truncated(make, words):
    with pytest.raises((TypeError, ValueError), match=words):
        make()


@pytest.mark.parametrize("make, words", [
    (lambda: dl.BatchNorm2d(2, eps=-1e-5), r"BatchNorm2d\(eps=\.\.\.\) must be a finite number in \(0, inf\)"),
    (lambda: dl.BatchNorm2d(2, eps=0), r"BatchNorm2d\(eps=\.\.\.\)"),
    (lambda: dl.BatchNorm2d(2, momentum=5), r"BatchNorm2d\(momentum=\.\.\.\) must be a finite number in \[0, 1\]"),
    (lambda: dl.BatchNorm2d(2, momentum=float("nan")), r"momentum"),
    (lambda: dl.Dropout(float("nan")), r"Dropout probability p must be a finite number in \[0, 1\)"),
    (lambda: dl.Dropout(-0.1), r"Dropout probability"),
    (lambda: dl.SGD(dl.Linear(2, 2), lr=float("inf")), r"learning rate must be a finite number > 0, got lr=inf"),
    (lambda: dl.SGD(dl.Linear(2, 2), lr=float("nan")), r"learning rate"),
    (lambda: dl.SGD(dl.Linear(2, 2), lr=0.1, weight_decay=float("nan")), r"SGD\(weight_decay=\.\.\.\)"),
    (lambda: dl.SGD(dl.Linear(2, 2), lr=0.1, weight_decay=-1), r"SGD\(weight_decay=\.\.\.\)"),
    (lambda: dl.SGD(dl.Linear(2, 2), lr=0.1, momentum=float("nan")), r"SGD\(momentum=\.\.\.\)"),
    (lambda: dl.Adam(dl.Linear(2, 2), eps=-1e-8), r"Adam\(eps=\.\.\.\) must be a finite number in \(0, inf\)"),
    (lambda: dl.Adam(dl.Linear(2, 2), betas=(0.9, float("nan"))), r"Adam\(betas=\.\.\.\)"),
    (lambda: dl.Adam(dl.Linear(2, 2), weight_decay=float("inf")), r"Adam\(weight_decay=\.\.\.\)"),
    (lambda: dl.Perceptron(2, lr=float("nan")), r"Perceptron\(lr=\.\.\.\)"),
])
def test_hyperparameters_are_finite_and_in_range(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_evaluate_and_predict_refuse_what_fit_refuses(device, to_dev):
    model = dl.MLP([3, 4, 2], seed=0).to(device)
    X = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    y = np.array([0, 1, 0, 1, 0, 1])
    assert dl.evaluate(model, X, y)["accuracy"] is not None
    with pytest.raises(ValueError, match=r"evaluate: labels must be in \[0, 1\].*from 0 to 2"):
        dl.evaluate(model, X, np.array([0, 1, 2, 1, 0, 1]))
    with pytest.raises(TypeError, match=r"evaluate expects integer class labels, got dtype float64"):
        dl.evaluate(model, X, y.astype(np.float64))
    bad = X.copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"evaluate: X contains NaN or inf values \(row 4\)"):
        dl.evaluate(model, bad, y)
    with pytest.raises(ValueError, match=r"batch_size"):
        dl.evaluate(model, X, y, batch_size=0)
    with pytest.raises(ValueError, match=r"MLP\.predict: x contains NaN or inf"):
        model.predict(to_dev(bad))
    with pytest.raises(ValueError, match=r"predict\(batch_size=\.\.\.\) must be a whole number >= 1"):
        model.predict(to_dev(X), batch_size=0)
    with pytest.raises(TypeError, match=r"floating-point input"):
        model.predict(to_dev(y.reshape(2, 3)))
    with pytest.raises(TypeError, match=r"confusion_matrix\(num_classes=\.\.\.\) must be a whole number"):
        dl.confusion_matrix(y, y, num_classes=2.5)


def test_losses_refuse_an_empty_batch_nan_and_complex_targets(device, to_dev):
    with pytest.raises(ValueError, match=r"SoftmaxCrossEntropy got logits of shape \(0, 3\): an empty batch"):
        dl.SoftmaxCrossEntropy().forward(to_dev(np.zeros((0, 3), np.float32)), to_dev(np.zeros(0, np.int64)))
    with pytest.raises(ValueError, match=r"MSELoss got predictions of shape \(0,\): an empty batch"):
        dl.MSELoss().forward(to_dev(np.zeros(0, np.float32)), to_dev(np.zeros(0, np.float32)))
    with pytest.raises(ValueError, match=r"SigmoidCrossEntropy got logits of shape \(0, 1\)"):
        dl.SigmoidCrossEntropy().forward(to_dev(np.zeros((0, 1), np.float32)), to_dev(np.zeros(0)))
    with pytest.raises(ValueError, match=r"SigmoidCrossEntropy: the targets contain NaN"):
        dl.SigmoidCrossEntropy().forward(to_dev(np.zeros(3, np.float32)), to_dev(np.array([0, np.nan, 1])))
    with pytest.raises(TypeError, match=r"SigmoidCrossEntropy expects real-valued targets.*complex128"):
        dl.SigmoidCrossEntropy().forward(to_dev(np.zeros(2, np.float32)), to_dev(np.array([0, 1j])))
    with pytest.raises(TypeError, match=r"MSELoss expects real-valued targets.*complex"):
        dl.MSELoss().forward(to_dev(np.zeros(2, np.float32)), to_dev(np.array([0, 1 + 1j])))
    with pytest.raises(TypeError, match=r"integer class labels, got dtype complex"):
        dl.SoftmaxCrossEntropy().forward(to_dev(np.zeros((2, 3), np.float32)), to_dev(np.array([0, 1j])))
