"""Layers, losses and models: gradient checks in float64, fast against naive, dtypes,
determinism. Each test runs on NumPy and (where a GPU is present) CuPy."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse import conv

TOL = 1e-6


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# --------------------------------------------------------------------------------------
# Gradient checks: every layer and loss, in float64
# --------------------------------------------------------------------------------------
LAYER_CASES = {
    "linear": (lambda: dl.Linear(5, 3), (4, 5)),
    "relu": (lambda: dl.ReLU(), (4, 6)),
    "sigmoid": (lambda: dl.Sigmoid(), (4, 6)),
    "tanh": (lambda: dl.Tanh(), (4, 6)),
    "flatten": (lambda: dl.Flatten(), (2, 3, 4, 2)),
    "dropout": (lambda: dl.Dropout(0.4), (5, 7)),
    "dropout_eval": (lambda: dl.Dropout(0.4).eval(), (5, 7)),
    "batchnorm_train": (lambda: dl.BatchNorm2d(3), (4, 3, 5, 6)),
    "batchnorm_eval": (lambda: dl.BatchNorm2d(3).eval(), (4, 3, 5, 6)),
    "conv_3x3": (lambda: dl.Conv2d(3, 4, 3), (2, 3, 6, 6)),
    "conv_stride_pad": (lambda: dl.Conv2d(2, 3, 3, stride=2, padding=1), (2, 2, 7, 9)),
    "conv_rect_kernel": (lambda: dl.Conv2d(2, 2, (2, 3), stride=1, padding=2), (1, 2, 5, 4)),
    "conv_1x1": (lambda: dl.Conv2d(3, 2, 1), (2, 3, 4, 5)),
    "conv_per_axis": (lambda: dl.Conv2d(2, 3, (2, 3), stride=(1, 2), padding=(2, 1)), (2, 2, 5, 7)),
    "conv_1d": (lambda: dl.Conv2d(2, 3, (1, 5), stride=(1, 2), padding=(0, 2)), (2, 2, 1, 11)),
    "maxpool_2": (lambda: dl.MaxPool2d(2), (2, 3, 6, 8)),
    "maxpool_overlap": (lambda: dl.MaxPool2d(3, stride=1), (2, 2, 6, 5)),
    "maxpool_overlap_s2": (lambda: dl.MaxPool2d(3, stride=2), (2, 2, 7, 9)),
    "maxpool_rect": (lambda: dl.MaxPool2d((2, 3), stride=1), (1, 2, 5, 6)),
    "maxpool_leftover": (lambda: dl.MaxPool2d(2), (1, 2, 5, 7)),
    "maxpool_per_axis": (lambda: dl.MaxPool2d((2, 3), stride=(1, 2)), (1, 2, 5, 8)),
    "maxpool_1d": (lambda: dl.MaxPool2d((1, 2)), (2, 3, 1, 9)),
    "maxpool_eval": (lambda: dl.MaxPool2d(3, stride=2).eval(), (2, 2, 7, 9)),
    "mlp": (lambda: dl.MLP([6, 5, 4, 3], activation="tanh", dropout=0.2), (4, 6)),
    "cnn_bn": (lambda: dl.CNN(1, (8, 8), 5, channels=(3, 4), batchnorm=True), (3, 1, 8, 8)),
    "cnn_1d": (lambda: dl.CNN(1, (1, 12), 3, channels=(2, 3), batchnorm=True, kernel_size=(1, 3),
                              pool=(1, 2)), (3, 1, 1, 12)),
    # lesson 07b (more cases in test_norm_residual.py)
    "layernorm": (lambda: dl.LayerNorm(6), (4, 6)),
    "layernorm_tuple": (lambda: dl.LayerNorm((2, 3, 4)), (3, 2, 3, 4)),
    "global_avg_pool": (lambda: dl.GlobalAvgPool2d(), (2, 3, 4, 5)),
    "residual": (lambda: dl.Residual(dl.Sequential(dl.Linear(5, 5), dl.Tanh())), (4, 5)),
    "residual_projection": (lambda: dl.Residual(dl.Linear(5, 3), shortcut=dl.Linear(5, 3)), (4, 5)),
    "resnet": (lambda: dl.ResNet(1, 3, widths=(2, 3), blocks=(1, 1), seed=0), (2, 1, 5, 5)),
}


@pytest.mark.parametrize("case", LAYER_CASES)
def test_layer_gradcheck(case, to_dev):
    make, shape = LAYER_CASES[case]
    err = dl.gradcheck(make(), to_dev(randn(*shape)))
    assert err < TOL, f"{case}: relative error {err:.2e}"


def test_gradcheck_catches_a_wrong_backward(to_dev, capsys):
    class BadReLU(dl.ReLU):
        def backward(self, dout):
            return dout   # forgets the mask
    err = dl.gradcheck(BadReLU(), to_dev(randn(4, 5)))
    assert err > 1e-2
    assert "analytic" in capsys.readouterr().out


LOSS_CASES = {
    "softmax_ce": (dl.SoftmaxCrossEntropy, lambda: (randn(6, 4), np.array([0, 3, 2, 1, 1, 0]))),
    "sigmoid_ce": (dl.SigmoidCrossEntropy, lambda: (randn(6), np.array([0, 1, 1, 0, 0, 1]))),
    "sigmoid_ce_col": (dl.SigmoidCrossEntropy, lambda: (randn(5, 1), np.array([0., 1., 1., 0., 1.]))),
    "mse": (dl.MSELoss, lambda: (randn(5, 3), randn(5, 3, seed=1))),
}


@pytest.mark.parametrize("case", LOSS_CASES)
def test_loss_gradcheck(case, to_dev):
    cls, make = LOSS_CASES[case]
    logits, target = make()
    err = dl.gradcheck(cls(), to_dev(logits), to_dev(target))
    assert err < TOL, f"{case}: relative error {err:.2e}"


# --------------------------------------------------------------------------------------
# Fast against naive
# --------------------------------------------------------------------------------------
CONV_GEOMETRIES = [  # (N, C, H, W, F, KH, KW, stride, padding)
    (2, 3, 7, 7, 4, 3, 3, 1, 0),
    (2, 3, 7, 9, 2, 3, 3, 2, 1),
    (1, 2, 6, 5, 3, 2, 4, 1, 2),
    (3, 1, 8, 8, 2, 5, 5, 3, 2),
    (2, 2, 4, 4, 3, 4, 4, 1, 0),
    (2, 3, 6, 9, 2, 3, 2, (2, 1), (1, 0)),      # per-axis stride and padding
    (3, 2, 1, 12, 4, 1, 5, (1, 2), (0, 2)),     # a 1-D signal as a 1xL image
]


@pytest.mark.parametrize("geom", CONV_GEOMETRIES)
def test_conv_im2col_matches_naive(geom, to_dev, xp):
    N, C, H, W, F, KH, KW, s, p = geom
    layer = dl.Conv2d(C, F, (KH, KW), stride=s, padding=p).astype(np.float64).to(
        "gpu" if xp is not np else "cpu")
    layer.params["b"] = to_dev(randn(F, seed=3))
    x = to_dev(randn(N, C, H, W, seed=1))
    out = layer.forward(x)
    ref = conv.conv2d_forward_naive(x, layer.params["W"], layer.params["b"], s, p)
    assert out.shape == ref.shape
    assert xp.allclose(out, ref, atol=1e-12)
    dout = to_dev(randn(*out.shape, seed=2))
    dx = layer.backward(dout)
    rdx, rdW, rdb = conv.conv2d_backward_naive(dout, x, layer.params["W"], s, p)
    assert xp.allclose(dx, rdx, atol=1e-12)
    assert xp.allclose(layer.grads["W"], rdW, atol=1e-12)
    assert xp.allclose(layer.grads["b"], rdb, atol=1e-12)


@pytest.mark.parametrize("kernel,stride", [(2, None), (3, 1), (3, 2), ((2, 3), 1), (2, 3),
                                           ((2, 3), None), ((3, 2), (1, 2)), ((1, 2), (1, 1))])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_maxpool_matches_naive(kernel, stride, training, to_dev, xp):
    """In evaluation mode forward skips where the maxima are; backward still finds them."""
    x = to_dev(randn(2, 3, 8, 7, seed=4))
    pool = dl.MaxPool2d(kernel, stride).train(training)
    KH, KW = pool.kernel_size
    out = pool.forward(x)
    assert xp.array_equal(out, conv.maxpool_forward_naive(x, KH, KW, pool.stride))
    dout = to_dev(randn(*out.shape, seed=5))
    assert xp.allclose(pool.backward(dout), conv.maxpool_backward_naive(dout, x, KH, KW, pool.stride))


def test_maxpool_ties_send_the_gradient_to_one_place(to_dev, xp):
    pool = dl.MaxPool2d(2)
    pool.forward(to_dev(np.zeros((1, 1, 4, 4))))          # every window is a tie
    dx = pool.backward(to_dev(np.ones((1, 1, 2, 2))))
    assert float(dx.sum()) == 4.0 and float(dx[0, 0, 0, 0]) == 1.0


@pytest.mark.parametrize("stride,padding", [(2, 1), ((2, 1), (0, 1))])
def test_im2col_col2im_are_adjoint(stride, padding, to_dev, xp):
    x = to_dev(randn(2, 3, 6, 5))
    cols = dl.im2col(x, 3, 2, stride=stride, padding=padding)
    c = to_dev(randn(*cols.shape, seed=1))
    lhs = float((cols * c).sum())
    rhs = float((x * dl.col2im(c, x.shape, 3, 2, stride=stride, padding=padding)).sum())
    assert abs(lhs - rhs) < 1e-9 * max(1.0, abs(lhs))


def test_im2col_layout(to_dev, xp):
    x = to_dev(np.arange(2 * 1 * 3 * 3, dtype=np.float64).reshape(2, 1, 3, 3))
    cols = dl.im2col(x, 2, 2)
    assert cols.shape == (2 * 2 * 2, 1 * 2 * 2)
    assert xp.array_equal(cols[0], to_dev(np.array([0., 1., 3., 4.])))
    assert xp.array_equal(cols[7], to_dev(np.array([13., 14., 16., 17.])))


# --------------------------------------------------------------------------------------
# Losses: values and stability
# --------------------------------------------------------------------------------------
def test_softmax_cross_entropy_value(to_dev):
    logits = np.array([[2.0, 1.0, 0.1], [0.5, 2.5, 0.3]])
    labels = np.array([0, 1])
    expected = -np.mean(np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True))[[0, 1], labels])
    loss = dl.SoftmaxCrossEntropy().forward(to_dev(logits), to_dev(labels))
    assert isinstance(loss, float) and abs(loss - expected) < 1e-12


@pytest.mark.parametrize("scale", [1e3, 1e5, 1e30])
def test_softmax_cross_entropy_is_stable_for_huge_logits(scale, to_dev, xp):
    logits = to_dev(np.array([[1.0, -1.0, 0.5], [0.2, 0.1, -3.0]], dtype=np.float32) * scale)
    crit = dl.SoftmaxCrossEntropy()
    loss = crit.forward(logits, to_dev(np.array([0, 2])))
    grad = crit.backward()
    assert np.isfinite(loss) and bool(xp.isfinite(grad).all())
    assert abs(loss - (0 + 3.2 * scale) / 2) <= 1e-5 * scale     # row 2: 0.2s - (-3s)


def test_sigmoid_cross_entropy_stable(to_dev, xp):
    crit = dl.SigmoidCrossEntropy()
    loss = crit.forward(to_dev(np.array([1e4, -1e4, 0.0])), to_dev(np.array([0, 1, 1])))
    assert abs(loss - (1e4 + 1e4 + np.log(2)) / 3) < 1e-6
    assert bool(xp.isfinite(crit.backward()).all())


# --------------------------------------------------------------------------------------
# dtype, device, determinism
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_preserved(dtype, device, to_dev):
    model = dl.CNN(1, (8, 8), 4, batchnorm=True, dtype=dtype).to(device)
    x = to_dev(randn(3, 1, 8, 8).astype(dtype))
    out = model.forward(x)
    crit = dl.SoftmaxCrossEntropy()
    crit.forward(out, to_dev(np.array([0, 1, 2])))
    dx = model.backward(crit.backward())
    assert out.dtype == dtype and dx.dtype == dtype
    assert all(g.dtype == dtype for g in model.grads.values())
    opt = dl.Adam(model, lr=1e-3)
    opt.step()
    assert all(p.dtype == dtype for p in model.params.values())


def test_default_dtype_is_float32():
    assert dl.Linear(3, 2).params["W"].dtype == np.float32
    assert dl.MLP([3, 4, 2]).dtype == np.float32


def test_same_seed_same_model_and_training(device, to_dev):
    def run():
        dl.manual_seed(123)
        model = dl.MLP([6, 8, 3], dropout=0.3).to(device)
        opt = dl.SGD(model, lr=0.1, momentum=0.9)
        crit = dl.SoftmaxCrossEntropy()
        x, y = to_dev(randn(10, 6).astype(np.float32), np.arange(10) % 3)
        losses = []
        for _ in range(3):
            losses.append(crit.forward(model.forward(x), y))
            model.backward(crit.backward())
            opt.step()
        return losses, {k: dl.to_numpy(v) for k, v in model.params.items()}
    (l1, p1), (l2, p2) = run(), run()
    assert l1 == l2
    assert all(np.array_equal(p1[k], p2[k]) for k in p1)


def test_model_seed_argument_is_independent_of_global_state():
    a = dl.MLP([4, 5, 2], seed=7)
    dl.manual_seed(99)
    b = dl.MLP([4, 5, 2], seed=7)
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)


def test_load_state_dict_copies_into_the_models_own_arrays(device, to_dev, xp):
    """The "keep the best model" pattern: a loaded state is copied, never shared, so training
    one model leaves the other as it was; each array keeps its device and dtype."""
    model, best = (dl.MLP([4, 5, 3], seed=s).to(device) for s in (0, 1))
    before = {k: id(v) for k, v in best.params.items()}
    best.load_state_dict(model.state_dict())
    assert {k: id(v) for k, v in best.params.items()} == before      # same arrays, new values
    kept = {k: dl.to_numpy(v).copy() for k, v in best.params.items()}
    x, y = to_dev(randn(8, 4).astype(np.float32)), to_dev(np.arange(8) % 3)
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.5), x, y, epochs=2, batch_size=4,
           progress=False)
    assert not np.allclose(dl.to_numpy(model.params["0.W"]), kept["0.W"])   # model trained
    for k, v in best.params.items():
        assert np.array_equal(dl.to_numpy(v), kept[k]), k                   # best untouched
    best.load_state_dict({k: dl.to_numpy(v).astype(np.float64) for k, v in model.state_dict().items()})
    assert best.params["0.W"].dtype == np.float32 and dl.device_of(best.params["0.W"]) == device
    assert np.array_equal(dl.to_numpy(best.params["0.W"]), dl.to_numpy(model.params["0.W"]))


def test_model_moves_between_devices(device, to_dev, xp):
    model = dl.CNN(1, (8, 8), 3).to(device)
    assert model.device == device
    assert all(dl.device_of(p) == device for p in model.params.values())
    out = model.forward(to_dev(randn(2, 1, 8, 8).astype(np.float32)))
    assert dl.device_of(out) == device
    model.to("cpu")
    assert model.device == "cpu"


def test_input_grad_false_skips_only_the_input_gradient(to_dev, device):
    model = dl.CNN(1, (8, 8), 3, seed=0).to(device).astype(np.float64)
    x = to_dev(randn(2, 1, 8, 8))
    out = model.forward(x)
    dout = to_dev(randn(*out.shape, seed=1))
    model.backward(dout)
    full = {k: dl.to_numpy(v) for k, v in model.grads.items()}
    model.forward(x)
    assert model.backward(dout, input_grad=False) is None
    assert all(np.allclose(full[k], dl.to_numpy(v)) for k, v in model.grads.items())


# --------------------------------------------------------------------------------------
# Train / eval behaviour
# --------------------------------------------------------------------------------------
def test_dropout_train_and_eval(to_dev, xp):
    drop = dl.Dropout(0.5)
    x = to_dev(np.ones((200, 50)))
    out = drop.forward(x)
    kept = float((out != 0).mean())
    assert 0.4 < kept < 0.6 and set(np.unique(dl.to_numpy(out))) <= {0.0, 2.0}
    drop.eval()
    assert xp.array_equal(drop.forward(x), x)


def test_batchnorm_running_statistics(to_dev, xp, device):
    bn = dl.BatchNorm2d(2, momentum=0.5).astype(np.float64).to(device)
    x = to_dev(randn(8, 2, 4, 4) * 3 + 5)
    out = bn.forward(x)
    assert xp.allclose(out.mean(axis=(0, 2, 3)), 0, atol=1e-10)
    assert xp.allclose(out.var(axis=(0, 2, 3)), 1, atol=1e-3)
    m = x.mean(axis=(0, 2, 3))
    assert xp.allclose(bn.buffers["running_mean"], 0.5 * m)
    bn.eval()
    before = bn.buffers["running_mean"].copy()
    bn.forward(x)
    assert xp.array_equal(before, bn.buffers["running_mean"])


def test_perceptron_learns_separable_data_and_fails_on_xor():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 2))
    y = (X @ np.array([2.0, -1.0]) + 0.3 > 0).astype(int)
    p = dl.Perceptron(2, seed=0).fit(X, y)
    assert p.score(X, y) == 1.0 and p.errors_[-1] == 0
    Xx = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float)
    yx = np.array([0, 1, 1, 0])
    px = dl.Perceptron(2, max_epochs=50, seed=0).fit(Xx, yx)
    assert px.score(Xx, yx) < 1.0 and min(px.errors_) > 0
    again = px.fit(X, y)                  # fitting again starts from w = 0, like a new model
    assert np.array_equal(again.w, p.w) and again.b == p.b and again.errors_ == p.errors_


def test_optimizers_reduce_a_quadratic(device, to_dev):
    for make in (lambda m: dl.SGD(m, lr=0.1), lambda m: dl.SGD(m, lr=0.05, momentum=0.9, weight_decay=1e-4),
                 lambda m: dl.Adam(m, lr=0.05), lambda m: dl.AdamW(m, lr=0.05),
                 lambda m: dl.Adagrad(m, lr=0.5), lambda m: dl.RMSprop(m, lr=0.02),
                 lambda m: dl.RMSprop(m, lr=0.01, momentum=0.9)):
        model = dl.Linear(3, 1).to(device).astype(np.float64)
        x = to_dev(randn(32, 3))
        y = x @ to_dev(np.array([[1.0], [-2.0], [0.5]]))
        crit, opt = dl.MSELoss(), make(model)
        first = crit.forward(model.forward(x), y)
        for _ in range(200):
            crit.forward(model.forward(x), y)
            model.backward(crit.backward())
            opt.step()
        assert crit.forward(model.forward(x), y) < 0.01 * first


def test_linear_init_sets_the_weights_std():
    """"he" is the default and draws the same weights as before init= existed; "xavier" and a
    number set the std; MLP passes init to every Linear and keeps it in its config."""
    he = dl.Linear(400, 300, seed=3).params["W"]
    expected = np.random.default_rng(3).standard_normal((400, 300)) * np.sqrt(2 / 400)
    np.testing.assert_array_equal(he, expected.astype(np.float32))
    assert np.array_equal(dl.Linear(400, 300, seed=3, init="he").params["W"], he)
    assert dl.Linear(400, 300, init="xavier", seed=0).params["W"].std() == pytest.approx(
        np.sqrt(2 / 700), rel=0.02)
    assert dl.Linear(400, 300, init=0.01, seed=0).params["W"].std() == pytest.approx(0.01, rel=0.02)
    mlp = dl.MLP([5, 4, 3], init="xavier", seed=0)
    assert mlp[0].init == mlp[2].init == "xavier" and mlp.get_config()["init"] == "xavier"
    assert dl.Linear(2, 2, init="He").get_config()["init"] == "he"


@pytest.mark.parametrize("init,error,words", [
    ("kaiming", ValueError, r"Linear\(init=...\) must be 'he' \(for ReLU\), 'xavier'.*got 'kaiming'"),
    (0, ValueError, r"Linear\(init=...\) must be a finite number in \(0, inf\), got 0"),
    (float("inf"), ValueError, r"Linear\(init=...\) must be a finite number"),
    (None, TypeError, r"Linear\(init=...\) expects a number, e.g. init='he'"),
])
def test_linear_init_says_what_is_wrong(init, error, words):
    with pytest.raises(error, match=words):
        dl.MLP([3, 2], init=init)


def test_sgd_matches_the_formula():
    model = dl.Linear(2, 1).astype(np.float64)
    W0 = model.params["W"].copy()
    model.grads = {"W": np.ones_like(W0), "b": np.ones(1)}
    opt = dl.SGD(model, lr=0.1, momentum=0.9)
    opt.step()
    opt.step()    # v = 1, then 1.9: W = W0 - 0.1*(1 + 1.9)
    assert np.allclose(model.params["W"], W0 - 0.29)


def test_eval_mode_switches_and_restores_the_mode():
    from dlcourse.layers import eval_mode
    model = dl.MLP([3, 4, 2], dropout=0.5, seed=0)
    x = np.ones((5, 3), np.float32)
    with eval_mode(model):
        assert not model.training and not model[1].training
        np.testing.assert_array_equal(model.forward(x), model.forward(x))   # no Dropout now
    assert model.training and model[1].training
    model.eval()
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError("the block fails")
    assert not model.training, "the mode it had before, also after a failure"
    with eval_mode(plain := object()) as same:   # no modes: left as it is
        assert same is plain


# --------------------------------------------------------------------------------------
# Learner mistakes get errors that say what to do (more in test_errors.py)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("make,shape", [
    (lambda: dl.Linear(4, 3), (2, 3)), (lambda: dl.ReLU(), (2, 3)), (lambda: dl.Tanh(), (2, 3)),
    (lambda: dl.Conv2d(1, 2, 3), (1, 2, 4, 4)), (lambda: dl.MaxPool2d(2), (1, 1, 2, 2)),
    (lambda: dl.BatchNorm2d(2), (2, 2, 3, 3)), (lambda: dl.MLP([4, 5, 3]), (2, 3)),
    (lambda: dl.LayerNorm(3), (2, 3)), (lambda: dl.Residual(dl.Linear(3, 3)), (2, 3)),
    (lambda: dl.fuse(dl.MLP([4, 5, 3])).layers[0], (2, 5)),                  # a LinearReLU
    (lambda: dl.fuse(dl.CNN(1, (4, 4), 3, channels=(2, 2))).layers[0], (1, 2, 4, 4)),  # Conv2dReLU
])
def test_backward_before_forward_says_so(make, shape):
    with pytest.raises(RuntimeError, match=r"backward\(\) needs forward\(\) first"):
        make().backward(np.ones(shape, np.float32))


def test_linear_shape_mistakes_get_the_likely_fix():
    layer = dl.Linear(64, 10)
    with pytest.raises(ValueError, match=r"the data's 100 features\? \(Or is x transposed\? "
                                         r"Then use x\.T\.\)"):
        layer.forward(np.zeros((64, 100), np.float32))
    with pytest.raises(ValueError, match=r"previous layer's out_features, or the data's 32 "
                                         r"features\?$"):
        layer.forward(np.zeros((8, 32), np.float32))
    layer.forward(np.zeros((4, 64), np.float32))
    with pytest.raises(ValueError, match=r"dout of shape \(4, 7\); it must match the forward "
                                         r"output, \(4, 10\)"):
        layer.backward(np.zeros((4, 7), np.float32))


def test_model_construction_and_input_mistakes():
    with pytest.raises(TypeError, match=r"list of whole-number layer sizes.*dl\.MLP\(\[64, 128, 10\]\)"):
        dl.MLP(64)
    with pytest.raises(TypeError, match="whole-number"):
        dl.MLP([64, 32.5, 10])
    assert dl.MLP(np.array([4, 3])).sizes == [4, 3]
    with pytest.raises(ValueError, match=r"built for 28×28 images but got 8×8.*image_size=\(8, 8\)"):
        dl.CNN().forward(np.zeros((2, 1, 8, 8), np.float32))
    with pytest.raises(TypeError, match=r"takes a dict of arrays.*got str.*dl\.load"):
        dl.MLP([4, 3]).load_state_dict("model.npz")
    with pytest.raises(ValueError, match=r"That is a column: flatten it with labels\.ravel\(\)"):
        dl.SoftmaxCrossEntropy().forward(np.zeros((3, 4), np.float32), np.zeros((3, 1), np.int64))


def test_layer_stats_show_vanishing_signals_and_dead_units(device, to_dev):
    """Through a deep ReLU MLP the activations' std shrinks by about sqrt(2 * 100) * 0.01 per
    layer with init=0.01, and holds with He; a ReLU behind a very negative bias is all dead;
    the gradients are those backward computes."""
    X = to_dev(randn(64, 100).astype(np.float32))
    y = to_dev(np.arange(64) % 10)
    small = dl.layer_stats(dl.MLP([100] * 6 + [10], init=0.01, seed=0).to(device), X, y)
    he = dl.layer_stats(dl.MLP([100] * 6 + [10], seed=0).to(device), X, y)
    relu_std = lambda rows: [r["std"] for r in rows if r["layer"].endswith("ReLU")]
    assert relu_std(small)[-1] < 1e-4 * relu_std(small)[0]
    assert 0.3 < relu_std(he)[-1] / relu_std(he)[0] < 3
    assert [r["layer"] for r in he[:3]] == ["0 Linear", "1 ReLU", "2 Linear"]
    assert he[0]["dead"] == 0.0 and small[-1]["grad_std"] > 0
    model = dl.MLP([100, 20, 10], seed=0).to(device)
    model[0].params["b"][:] = -100.0
    rows = dl.layer_stats(model, X, y)
    assert rows[1]["dead"] == 1.0 and rows[1]["grad_std"] is not None
    assert dl.layer_stats(model, X)[1]["grad_std"] is None


def test_layer_stats_wants_a_sequential():
    with pytest.raises(TypeError, match="layer_stats takes a Sequential model"):
        dl.layer_stats(dl.Linear(2, 2), np.zeros((1, 2), np.float32))


def test_a_learners_subclass_runs_exactly_its_own_forward():
    """No hidden wrapping: a subclass's forward is the function that runs, and backward after
    it still works (the dout check trusts a forward that kept a cache)."""
    class MyReLU(dl.ReLU):
        def forward(self, x):
            self.cache = np.maximum(x, 0)
            return self.cache

    assert MyReLU.forward is MyReLU.__dict__["forward"]
    assert not any("__init_subclass__" in vars(c) for c in dl.Layer.__mro__[:-1])   # not object
    layer = MyReLU()
    x = np.array([[-1.0, 2.0]], np.float32)
    np.testing.assert_array_equal(layer.backward(np.ones_like(layer.forward(x))), [[0, 1]])
