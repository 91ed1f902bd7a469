"""Lesson 07b's library part: LayerNorm, GlobalAvgPool2d, Residual and the ResNet. Forward
values, gradient checks in float64, saving and loading nested containers, training on the
digits, what dl.infer / prune / fuse / quantize / layer_stats do with them, the errors, and
parity with PyTorch's LayerNorm where PyTorch is installed. Each test runs on NumPy and on CuPy
(or its stand-in); export to ONNX is tested in test_export.py."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse.layer_base import every_layer

TOL = 1e-6


def randn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def with_random_affine(layer, seed=3):
    """gamma and beta away from 1 and 0, so that their gradients and their use are checked."""
    gen = np.random.default_rng(seed)
    layer.params["gamma"][...] = 1 + 0.5 * gen.standard_normal(layer.params["gamma"].shape)
    layer.params["beta"][...] = 0.5 * gen.standard_normal(layer.params["beta"].shape)
    return layer


# --------------------------------------------------------------------------------------
# LayerNorm: the forward values
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("normalized_shape, x_shape", [(6, (5, 6)), ((6,), (2, 3, 6)),
                                                       ((3, 4, 5), (2, 3, 4, 5)),
                                                       ((4, 5), (2, 3, 4, 5))])
def test_layernorm_gives_each_sample_mean_0_and_variance_1_over_the_last_axes(
        normalized_shape, x_shape, device, to_dev):
    ln = dl.LayerNorm(normalized_shape).astype(np.float64).to(device)
    x = to_dev(randn(*x_shape) * 3 + 2)
    y = dl.to_numpy(ln.forward(x))
    S = ln.normalized_shape
    axes = tuple(range(-len(S), 0))
    assert ln.params["gamma"].shape == S and ln.params["beta"].shape == S
    np.testing.assert_allclose(y.mean(axis=axes), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=axes), 1, atol=1e-4)          # var / (var + eps)
    # then gamma and beta, one per normalized position
    with_random_affine(ln)
    gamma, beta = dl.to_numpy(ln.params["gamma"]), dl.to_numpy(ln.params["beta"])
    np.testing.assert_allclose(dl.to_numpy(ln.forward(x)), gamma * y + beta, atol=1e-12)


def test_layernorm_has_no_running_statistics_and_takes_one_sample(device, to_dev):
    """Each sample is normalized by its own statistics: training and evaluation agree, a
    sample's output does not depend on the others in its batch, and a batch of one is fine
    (BatchNorm2d refuses it in training)."""
    ln = with_random_affine(dl.LayerNorm(8)).to(device)
    assert ln.buffers == {}
    x = to_dev(randn(4, 8).astype(np.float32))
    train = dl.to_numpy(ln.forward(x))
    np.testing.assert_array_equal(dl.to_numpy(ln.eval().forward(x)), train)
    alone = dl.to_numpy(ln.train().forward(x[1:2]))
    np.testing.assert_allclose(alone, train[1:2], atol=1e-6)
    assert ln.forward(x).dtype == np.float32 and dl.device_of(ln.forward(x)) == device


def test_global_avg_pool_is_the_mean_of_each_channel(device, to_dev):
    x = randn(2, 3, 4, 5)
    out = dl.GlobalAvgPool2d().forward(to_dev(x))
    assert out.shape == (2, 3)
    np.testing.assert_allclose(dl.to_numpy(out), x.mean(axis=(2, 3)), atol=1e-12)


def test_residual_adds_the_block_to_its_shortcut(device, to_dev):
    block = dl.Sequential(dl.Linear(4, 4, seed=0), dl.Tanh()).to(device).astype(np.float64)
    x = to_dev(randn(3, 4))
    expected = dl.to_numpy(x) + dl.to_numpy(block.forward(x))
    np.testing.assert_allclose(dl.to_numpy(dl.Residual(block).forward(x)), expected, atol=1e-12)
    proj = dl.Linear(4, 4, seed=1).to(device).astype(np.float64)
    expected = dl.to_numpy(proj.forward(x)) + dl.to_numpy(block.forward(x))
    np.testing.assert_allclose(dl.to_numpy(dl.Residual(block, proj).forward(x)), expected,
                               atol=1e-12)


# --------------------------------------------------------------------------------------
# Gradient checks in float64: every parameter and the input
# --------------------------------------------------------------------------------------
def _conv_bn_block(c_in, c_out, seed):
    return dl.Sequential(dl.Conv2d(c_in, c_out, 3, padding=1, seed=seed), dl.BatchNorm2d(c_out),
                         dl.ReLU(), dl.Conv2d(c_out, c_out, 3, padding=1, seed=seed + 1),
                         dl.BatchNorm2d(c_out))


CASES = {
    "layernorm_int": (lambda: with_random_affine(dl.LayerNorm(7)), (4, 7)),
    "layernorm_int_3d": (lambda: with_random_affine(dl.LayerNorm(5)), (2, 3, 5)),
    "layernorm_tuple_chw": (lambda: with_random_affine(dl.LayerNorm((2, 3, 4))), (3, 2, 3, 4)),
    "layernorm_tuple_hw": (lambda: with_random_affine(dl.LayerNorm((3, 4))), (2, 2, 3, 4)),
    "layernorm_eval": (lambda: with_random_affine(dl.LayerNorm((3, 4))).eval(), (2, 2, 3, 4)),
    "global_avg_pool": (lambda: dl.GlobalAvgPool2d(), (2, 3, 4, 5)),
    "residual_identity": (lambda: dl.Residual(dl.Sequential(
        dl.Linear(5, 6, seed=0), dl.Tanh(), dl.Linear(6, 5, seed=1))), (4, 5)),
    "residual_projection": (lambda: dl.Residual(dl.Sequential(dl.Linear(5, 3, seed=0), dl.Tanh()),
                                                shortcut=dl.Linear(5, 3, seed=1)), (4, 5)),
    "residual_conv_identity": (lambda: dl.Residual(_conv_bn_block(2, 2, 0)), (2, 2, 4, 4)),
    "residual_conv_projection": (lambda: dl.Residual(_conv_bn_block(2, 3, 0), dl.Sequential(
        dl.Conv2d(2, 3, 1, seed=5), dl.BatchNorm2d(3))), (2, 2, 4, 4)),
    "residual_nested": (lambda: dl.Residual(dl.Sequential(
        dl.Linear(4, 4, seed=0), dl.LayerNorm(4), dl.Tanh(),
        dl.Residual(dl.Sequential(dl.Linear(4, 4, seed=1), dl.Sigmoid()))), dl.Linear(4, 4, seed=2)),
        (3, 4)),
    "resnet": (lambda: dl.ResNet(1, 3, widths=(2, 3), blocks=(1, 1), seed=0), (2, 1, 5, 5)),
    "resnet_1d": (lambda: dl.ResNet(1, 3, widths=(2,), blocks=(2,), kernel_size=(1, 3), seed=0),
                  (2, 1, 1, 7)),
}


@pytest.mark.parametrize("case", CASES)
def test_gradcheck(case, to_dev):
    make, shape = CASES[case]
    err = dl.gradcheck(make(), to_dev(randn(*shape)))
    assert err < TOL, f"{case}: relative error {err:.2e}"


def test_gradcheck_catches_a_layernorm_backward_that_forgets_the_statistics(to_dev, capsys):
    """Treating mean and var as constants (BatchNorm's evaluation backward) is wrong here."""
    class ConstantStats(dl.LayerNorm):
        def backward(self, dout, input_grad=True):
            x_hat, inv_std = self.cache
            lead = tuple(range(dout.ndim - 1))
            self.grads = {"gamma": (dout * x_hat).sum(axis=lead), "beta": dout.sum(axis=lead)}
            return dout * self.params["gamma"] * inv_std
    assert dl.gradcheck(ConstantStats(6), to_dev(randn(4, 6))) > 1e-2
    assert "analytic" in capsys.readouterr().out


def test_residual_backward_sends_dout_down_both_paths(device, to_dev):
    """The identity's share of dx is dout itself: a block that outputs zeros (its weights 0)
    passes dout through unchanged, the reason a deep residual network trains."""
    block = dl.Linear(4, 4)
    block.params["W"][...] = 0
    res = dl.Residual(block).to(device)
    x, dout = to_dev(randn(3, 4).astype(np.float32), randn(3, 4, seed=1).astype(np.float32))
    res.forward(x)
    np.testing.assert_allclose(dl.to_numpy(res.backward(dout)), dl.to_numpy(dout), atol=1e-7)
    np.testing.assert_allclose(dl.to_numpy(res.grads["block.W"]),
                               dl.to_numpy(x).T @ dl.to_numpy(dout), atol=1e-5)


def test_input_grad_false_reaches_a_residual_and_a_layernorm_first(device, to_dev):
    for model in (dl.Sequential(dl.Residual(dl.Linear(4, 4, seed=0)), dl.Linear(4, 2, seed=1)),
                  dl.Sequential(dl.LayerNorm(4), dl.Linear(4, 2, seed=1))):
        model.to(device).astype(np.float64)
        x = to_dev(randn(3, 4))
        dout = to_dev(randn(3, 2, seed=1))
        model.forward(x)
        model.backward(dout)
        full = {k: dl.to_numpy(v) for k, v in model.grads.items()}
        model.forward(x)
        assert model.backward(dout, input_grad=False) is None
        assert all(np.allclose(full[k], dl.to_numpy(v)) for k, v in model.grads.items())


# --------------------------------------------------------------------------------------
# Containers: names, modes, moves, saving and loading
# --------------------------------------------------------------------------------------
def _nested():
    """A Residual inside a Sequential inside a Residual, with BatchNorm deep inside."""
    inner = dl.Residual(dl.Sequential(dl.Conv2d(2, 2, 3, padding=1, seed=1), dl.BatchNorm2d(2)))
    return dl.Sequential(
        dl.Conv2d(1, 2, 3, padding=1, seed=0),
        dl.Residual(dl.Sequential(inner, dl.ReLU(), dl.Conv2d(2, 3, 1, seed=2)),
                    shortcut=dl.Conv2d(2, 3, 1, seed=3)),
        dl.GlobalAvgPool2d(), dl.LayerNorm(3), dl.Linear(3, 4, seed=4))


def test_a_nested_residual_names_its_arrays_and_round_trips_through_save_and_load(
        device, to_dev, tmp_path):
    model = _nested().to(device)
    x = to_dev(randn(5, 1, 6, 6).astype(np.float32))
    for _ in range(2):
        model.forward(x)                          # running statistics that are not 0 and 1
    keys = set(model.state_dict())
    assert {"1.block.0.block.0.W", "1.block.0.block.1.running_var", "1.shortcut.W",
            "3.gamma", "4.W"} <= keys
    assert set(model.params) <= keys and set(model.params) == set(model.grads) | set(model.params)
    path = dl.save(model, tmp_path / "nested")
    loaded = dl.load(path, device=device)
    assert repr(loaded) == repr(model)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(dl.to_numpy(loaded.state_dict()[k]), dl.to_numpy(v))
    model.eval(), loaded.eval()
    np.testing.assert_array_equal(dl.to_numpy(loaded.forward(x)), dl.to_numpy(model.forward(x)))


def test_modes_moves_and_every_layer_reach_inside_residuals(device):
    model = _nested()
    inner_bn = model.layers[1].block.layers[0].block.layers[1]
    assert inner_bn in list(every_layer(model))
    model.eval()
    assert not inner_bn.training
    model.train()
    assert inner_bn.training
    model.to(device).astype(np.float64)
    assert dl.device_of(inner_bn.params["gamma"]) == device
    assert all(dl.device_of(p) == device and p.dtype == np.float64 for p in model.params.values())
    model.to("cpu")
    assert model.device == "cpu"


def test_a_resnet_round_trips_and_its_optimizer_updates_the_blocks(device, to_dev, tmp_path):
    model = dl.ResNet(1, 10, widths=(4, 8), blocks=(1, 1), image_size=(8, 8), seed=0).to(device)
    assert "3.block.0.W" in model.params and "5.shortcut.0.W" in model.params
    x, y = to_dev(randn(6, 1, 8, 8).astype(np.float32), np.arange(6) % 10)
    before = dl.to_numpy(model.params["5.block.3.W"]).copy()
    loss, opt = dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1)
    loss.forward(model.forward(x), y)
    model.backward(loss.backward())
    opt.step()
    assert not np.allclose(dl.to_numpy(model.params["5.block.3.W"]), before)
    loaded = dl.load(dl.save(model, tmp_path / "resnet.npz"), device=device)
    assert type(loaded) is dl.ResNet and loaded.get_config() == model.get_config()
    model.eval(), loaded.eval()
    np.testing.assert_array_equal(dl.to_numpy(loaded.forward(x)), dl.to_numpy(model.forward(x)))


def test_the_same_seed_gives_the_same_resnet():
    a, b = (dl.ResNet(1, 10, seed=5) for _ in range(2))
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.params["0.W"], dl.ResNet(1, 10, seed=6).params["0.W"])


# --------------------------------------------------------------------------------------
# Training on the digits
# --------------------------------------------------------------------------------------
def test_a_tiny_resnet_learns_a_few_digits(device):
    X, y = dl.data.load_digits("train", flat=False)
    X, y = X[:160], y[:160]
    model = dl.ResNet(1, 10, widths=(8, 16), blocks=(1, 1), seed=0).to(device)
    history = dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=1e-2), X, y, epochs=5,
                     batch_size=16, seed=0, progress=False)
    assert history.train_loss[-1] < 0.5 * history.train_loss[0], history.train_loss
    assert dl.evaluate(model, X, y)["accuracy"] > 0.8


# --------------------------------------------------------------------------------------
# The other tools on models that hold these layers
# --------------------------------------------------------------------------------------
def _trained_resnet(device):
    model = dl.ResNet(1, 10, widths=(4, 8), blocks=(1, 1), seed=0).to(device)
    for s in range(2):                     # BatchNorm statistics that are not 0 and 1
        model.forward(dl.to_device(randn(16, 1, 8, 8, seed=s).astype(np.float32) + 0.5, device))
    return model


def test_infer_gives_forwards_numbers(device, to_dev):
    x = to_dev(randn(37, 1, 8, 8).astype(np.float32))
    for model in (_trained_resnet(device),
                  dl.Sequential(dl.Flatten(), with_random_affine(dl.LayerNorm(64)),
                                dl.Linear(64, 10, seed=0), dl.ReLU(),
                                dl.Residual(dl.Linear(10, 10, seed=1))).to(device)):
        expected = dl.to_numpy(model.eval().forward(x))
        model.train()
        for batch_size, workers in ((None, None), (8, 2)):
            out = dl.infer(model, x, batch_size=batch_size, workers=workers)
            np.testing.assert_allclose(dl.to_numpy(out), expected, atol=1e-5, rtol=1e-5)
        assert model.training


def test_prune_reaches_the_convolutions_inside_residual_blocks(device, to_dev):
    model = _trained_resnet(device)
    dl.prune(model, 0.5)
    report = dl.sparsity(model)
    assert {"3.block.0.W", "3.block.3.W", "5.shortcut.0.W", "8.W"} <= set(report)
    assert report["total"] == pytest.approx(0.5, abs=1e-3)
    X, y = to_dev(randn(16, 1, 8, 8).astype(np.float32), np.arange(16) % 10)
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1), X, y, epochs=1,
           batch_size=8, progress=False)          # fit keeps the pruned weights at zero
    assert dl.sparsity(model)["total"] == pytest.approx(0.5, abs=1e-3)


def test_layer_stats_has_a_row_per_block(device, to_dev):
    model = _trained_resnet(device)
    rows = dl.layer_stats(model, to_dev(randn(8, 1, 8, 8).astype(np.float32)),
                          to_dev(np.arange(8) % 10))
    assert [r["layer"] for r in rows][3:6] == ["3 Residual", "4 ReLU", "5 Residual"]
    assert all(r["grad_std"] > 0 for r in rows)


def test_fuse_goes_inside_residual_blocks(device, to_dev):
    model = dl.Sequential(dl.Linear(6, 6, seed=0), dl.ReLU(),
                          dl.Residual(dl.Sequential(dl.Linear(6, 6, seed=1), dl.ReLU(),
                                                    dl.Linear(6, 6, seed=2)))).to(device)
    fused = dl.fuse(model)
    assert isinstance(fused.layers[2].block.layers[0], dl.LinearReLU)
    assert set(fused.params) == set(model.params)
    x = to_dev(randn(4, 6).astype(np.float32))
    np.testing.assert_allclose(dl.to_numpy(fused.forward(x)), dl.to_numpy(model.forward(x)),
                               atol=1e-6)
    resnet = _trained_resnet(device).eval()
    x = to_dev(randn(4, 1, 8, 8).astype(np.float32))
    np.testing.assert_allclose(dl.to_numpy(dl.fuse(resnet).eval().forward(x)),
                               dl.to_numpy(resnet.forward(x)), atol=1e-6)


def test_quantize_refuses_a_model_with_residual_blocks_and_takes_layernorm():
    with pytest.raises(TypeError, match=r"layer 3 is a Residual.*would stay float32"):
        dl.quantize(dl.ResNet(1, 10, widths=(4,), blocks=(1,), seed=0),
                    randn(8, 1, 8, 8).astype(np.float32))
    model = dl.Sequential(dl.Linear(8, 8, seed=0), with_random_affine(dl.LayerNorm(8)),
                          dl.Linear(8, 3, seed=1))
    X = randn(32, 8).astype(np.float32)
    q = dl.quantize(model, X)
    assert isinstance(q.layers[1], dl.LayerNorm)
    np.testing.assert_allclose(q.forward(X), model.forward(X), atol=0.1)


# --------------------------------------------------------------------------------------
# Errors that say what to do
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("make, shape, words", [
    (lambda: dl.LayerNorm(6), (4, 5), r"LayerNorm\(normalized_shape=\(6,\)\) got x of shape "
                                      r"\(4, 5\): it needs its last 1 axis to be \(6,\)"),
    (lambda: dl.LayerNorm((3, 4)), (2, 4, 3), r"its last 2 axes to be \(3, 4\).*LAST axes"),
    (lambda: dl.LayerNorm((3, 4)), (3, 4), r"a batch axis first: x\[None\]"),
    (lambda: dl.GlobalAvgPool2d(), (2, 3), r"expects x of shape \(N, C, H, W\)"),
    (lambda: dl.Residual(dl.Linear(4, 3)), (2, 4),
     r"block's output has shape \(2, 3\) but the shortcut's \(x itself\) has \(2, 4\).*shortcut="),
    (lambda: dl.ResNet(1, 10, image_size=(8, 8)), (2, 1, 7, 7), r"built for 8×8 images"),
])
def test_bad_inputs_say_what_is_wrong(make, shape, words):
    with pytest.raises(ValueError, match=words):
        make().forward(np.zeros(shape, np.float32))


@pytest.mark.parametrize("make, error, words", [
    (lambda: dl.LayerNorm(()), ValueError, "at least one axis"),
    (lambda: dl.LayerNorm(0), ValueError, "whole number >= 1"),
    (lambda: dl.LayerNorm(2.5), TypeError, "whole number"),
    (lambda: dl.LayerNorm(4, eps=0), ValueError, "eps"),
    (lambda: dl.Residual(dl.Linear), TypeError, r"the class \(dl.Linear\) instead of an instance"),
    (lambda: dl.Residual(dl.Linear(2, 2), shortcut="identity"), TypeError, "takes layers"),
    (lambda: dl.ResNet(1, 10, widths=(8, 16), blocks=(2,)), ValueError, "one width and one block"),
    (lambda: dl.ResNet(1, 10, kernel_size=2), ValueError, "must be odd"),
])
def test_bad_arguments_say_what_is_wrong(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_backward_before_forward_says_so():
    for layer, shape in ((dl.LayerNorm(3), (2, 3)), (dl.GlobalAvgPool2d(), (2, 3)),
                         (dl.Residual(dl.Linear(3, 3)), (2, 3))):
        with pytest.raises(RuntimeError, match=r"backward\(\) needs forward\(\) first"):
            layer.backward(np.ones(shape, np.float32))


# --------------------------------------------------------------------------------------
# PyTorch parity: LayerNorm's forward and backward equal torch.nn.LayerNorm's
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape, normalized_shape", [((5, 7), (7,)), ((3, 2, 4, 5), (2, 4, 5)),
                                                       ((3, 2, 4, 5), (4, 5))])
def test_layernorm_equals_pytorchs(x_shape, normalized_shape, device, to_dev):
    torch = pytest.importorskip("torch", reason="the PyTorch parity test needs PyTorch: "
                                                "pip install torch")
    x, dout = randn(*x_shape) * 2 + 1, randn(*x_shape, seed=1)
    ours = with_random_affine(dl.LayerNorm(normalized_shape)).astype(np.float64).to(device)
    theirs = torch.nn.LayerNorm(normalized_shape, eps=1e-5, dtype=torch.float64)
    with torch.no_grad():
        theirs.weight.copy_(torch.from_numpy(dl.to_numpy(ours.params["gamma"])))
        theirs.bias.copy_(torch.from_numpy(dl.to_numpy(ours.params["beta"])))
    xt = torch.tensor(x, requires_grad=True)
    yt = theirs(xt)
    yt.backward(torch.from_numpy(dout))
    y = ours.forward(to_dev(x))
    dx = ours.backward(to_dev(dout))
    np.testing.assert_allclose(dl.to_numpy(y), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(dx), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(ours.grads["gamma"]), theirs.weight.grad.numpy(),
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(dl.to_numpy(ours.grads["beta"]), theirs.bias.grad.numpy(),
                               rtol=1e-9, atol=1e-12)
