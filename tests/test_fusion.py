"""dl.fuse and the fused layers: the same function as the unfused model, on every backend (on
the GPU that means the fused CUDA kernels against plain CuPy code)."""
import numpy as np
import pytest

import dlcourse as dl


MODELS = {   # name -> (a function that makes the model, the input shape)
    "mlp": (lambda: dl.MLP([12, 16, 16, 5], seed=1), (7, 12)),
    "mlp-dropout": (lambda: dl.MLP([12, 16, 5], dropout=0.3, seed=1), (7, 12)),
    "cnn": (lambda: dl.CNN(in_channels=2, image_size=(8, 12), num_classes=5,
                           channels=(3, 4), seed=1), (3, 2, 8, 12)),
    "cnn-batchnorm": (lambda: dl.CNN(in_channels=1, image_size=8, num_classes=5,
                                     channels=(3, 4), batchnorm=True, seed=1), (3, 1, 8, 8)),
    "conv-stride": (lambda: dl.Sequential(dl.Conv2d(2, 3, (3, 2), stride=2, seed=1), dl.ReLU(),
                                          dl.Flatten(), dl.Linear(3 * 3 * 4, 5, seed=2)),
                    (4, 2, 7, 8)),
}


def _step(model, x, labels, input_grad=True):
    """Forward, loss, backward with the same Dropout mask every time; returns what a step makes."""
    dl.manual_seed(3)
    loss = dl.SoftmaxCrossEntropy()
    logits = model.forward(x)
    value = loss.forward(logits, labels)
    dx = model.backward(loss.backward(), input_grad=input_grad)
    return dl.to_numpy(logits), value, None if dx is None else dl.to_numpy(dx), \
        {k: dl.to_numpy(g) for k, g in model.grads.items()}


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("input_grad", [True, False])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_fused_model_computes_what_the_model_computes(name, input_grad, dtype, tol, device, to_dev):
    make, shape = MODELS[name]
    model = make().astype(dtype).to(device)
    fused = dl.fuse(model)
    rng = np.random.default_rng(0)
    x = to_dev(rng.standard_normal(shape).astype(dtype))
    labels = to_dev(rng.integers(0, 5, shape[0]))
    want = _step(model, x, labels, input_grad)
    got = _step(fused, x, labels, input_grad)
    np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol)
    assert got[1] == pytest.approx(want[1], rel=tol)
    if input_grad:
        np.testing.assert_allclose(got[2], want[2], rtol=tol, atol=tol)
    else:
        assert got[2] is None
    assert sorted(got[3]) == sorted(want[3]), "fusing keeps the parameter names"
    for k in want[3]:
        np.testing.assert_allclose(got[3][k], want[3][k], rtol=tol, atol=tol, err_msg=k)


def test_fuse_rewrites_only_adjacent_pairs():
    cnn = dl.fuse(dl.CNN(channels=(2, 3), seed=0))
    assert [type(layer).__name__ for layer in cnn] == [
        "Conv2dReLU", "Identity", "MaxPool2d", "Conv2dReLU", "Identity", "MaxPool2d", "Flatten", "Linear"]
    bn = dl.fuse(dl.CNN(channels=(2, 3), batchnorm=True, seed=0))
    assert not any(isinstance(layer, dl.Conv2dReLU) for layer in bn), "BatchNorm sits in between"
    tanh = dl.fuse(dl.MLP([4, 5, 3], activation="tanh", seed=0))
    assert [type(layer).__name__ for layer in tanh] == ["Linear", "Tanh", "Linear"]


@pytest.mark.parametrize("layer, shape", [
    (lambda: dl.LinearReLU(dl.Linear(6, 4, seed=0)), (5, 6)),
    (lambda: dl.Conv2dReLU(dl.Conv2d(2, 3, 3, padding=1, seed=0)), (2, 2, 5, 6)),
    (lambda: dl.Conv2dReLU(dl.Conv2d(2, 3, (2, 3), stride=2, seed=0)), (2, 2, 7, 7)),
])
def test_fused_layer_gradcheck(layer, shape, to_dev):
    layer = layer()
    layer.params["b"][:] = 0.1      # most pre-activations away from ReLU's kink
    x = to_dev(np.random.default_rng(1).standard_normal(shape))
    assert dl.gradcheck(layer, x) < 1e-6


def test_fused_layers_share_the_parameters(device, to_dev):
    """Training the fused model trains the original one: the same arrays, the same names."""
    model = dl.MLP([6, 8, 3], seed=0)
    fused = dl.fuse(model)
    fused.to(device)                          # moves the wrapped layers, so model moved too
    assert model.device == device
    assert fused.params.keys() == model.params.keys()
    assert all(fused.params[k] is model.params[k] for k in model.params)
    opt = dl.SGD(model, lr=0.5)               # an optimizer made for the original model
    x = to_dev(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))
    before = dl.to_numpy(model.params["0.W"]).copy()
    _step(fused, x, to_dev(np.array([0, 1, 2, 0])))
    opt.step()
    assert not np.array_equal(dl.to_numpy(model.params["0.W"]), before)
    fused.astype(np.float64)
    assert model.dtype == np.float64


def test_fused_model_checkpoints(tmp_path):
    model = dl.CNN(channels=(2, 3), seed=0)
    fused = dl.fuse(model)
    x = np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32)
    dl.save(fused, tmp_path / "fused.npz")
    again = dl.load(tmp_path / "fused.npz")
    assert isinstance(again[0], dl.Conv2dReLU)
    np.testing.assert_array_equal(again.forward(x), model.forward(x))
    fresh = dl.fuse(dl.CNN(channels=(2, 3), seed=1))
    fresh.load_state_dict(model.state_dict())   # the same names: states move either way
    np.testing.assert_array_equal(fresh.forward(x), model.forward(x))


def test_use_kernels_switch(device, to_dev):
    """use_kernels(False) reaches Conv2d, the fused layers, the loss and the optimizers; results
    do not change."""
    model = dl.CNN(channels=(2, 3), seed=0).to(device)
    fused = dl.fuse(model)
    x = to_dev(np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32))
    with_kernels = dl.to_numpy(fused.forward(x))
    assert dl.use_kernels(fused, False) is fused
    assert fused[0].use_kernels is False and fused[0].layer.use_kernels is False
    assert model[0].use_kernels is False, "the wrapped Conv2d is the model's own"
    np.testing.assert_allclose(dl.to_numpy(fused.forward(x)), with_kernels, rtol=1e-5, atol=1e-6)
    dl.use_kernels(model)
    assert model[0].use_kernels is True and dl.Conv2d.use_kernels is True
    for other in (dl.SoftmaxCrossEntropy(), dl.SGD(model, momentum=0.9), dl.Adam(model)):
        assert other.use_kernels is True and dl.use_kernels(other, False) is other
        assert other.use_kernels is False and type(other).use_kernels is True


OPTIMIZERS = {   # Adam's eps: a conv bias before BatchNorm has a gradient that is zero but for
    # rounding, and Adam divides a gradient by its own size: with eps=1e-8, rounding noise of
    # 1e-17 (sums taken in another order by the kernels) would move that bias by up to lr.
    "SGD": lambda model: dl.SGD(model, lr=0.1, momentum=0.9, weight_decay=0.01),
    "Adam": lambda model: dl.Adam(model, lr=0.01, eps=1e-3, weight_decay=0.01),
}


def _train(model, loss, opt, x, labels, steps=2):
    """A few training steps (the same Dropout masks every time); returns the losses, the first
    step's logits and dL/dx, and the parameters at the end, as NumPy arrays."""
    values, first = [], None
    for _ in range(steps):
        dl.manual_seed(3)
        logits = model.forward(x)
        values.append(loss.forward(logits, labels))
        dx = model.backward(loss.backward())
        first = first or (dl.to_numpy(logits), dl.to_numpy(dx))
        opt.step()
    return values, first, {k: dl.to_numpy(p) for k, p in model.params.items()}


def check_kernels_in_training(name, fused, optimizer, to_dev, tol=1e-12):
    """Train a MODELS model (float64) with every hand-written kernel on (im2col/col2im in
    Conv2d, bias+ReLU in the fused layers, the softmax cross-entropy, the optimizer's update)
    and with none: the losses, the first logits and dL/dx, and every parameter after two steps
    must agree. (Also run on the emulated kernels: test_kernel_emulation.py.)"""
    make, shape = MODELS[name]
    rng = np.random.default_rng(0)
    x, labels = to_dev(rng.standard_normal(shape), rng.integers(0, 5, shape[0]))
    runs = []
    for enabled in (False, True):
        model = make().astype(np.float64).to(dl.device_of(x))
        model = dl.fuse(model) if fused else model
        loss, opt = dl.SoftmaxCrossEntropy(), OPTIMIZERS[optimizer](model)
        for part in (model, loss, opt):
            dl.use_kernels(part, enabled)
        runs.append(_train(model, loss, opt, x, labels))
    (want_loss, want_first, want_params), (got_loss, got_first, got_params) = runs
    assert got_loss == pytest.approx(want_loss, rel=tol)
    for got, want in zip(got_first, want_first):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    for k in want_params:
        np.testing.assert_allclose(got_params[k], want_params[k], rtol=tol, atol=tol, err_msg=k)


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("fused", [False, True], ids=["model", "dl.fuse(model)"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_kernels_in_training_match_the_array_code(name, fused, optimizer, to_dev):
    check_kernels_in_training(name, fused, optimizer, to_dev)


def test_fusion_errors_speak_to_a_learner():
    with pytest.raises(TypeError, match="Sequential model"):
        dl.fuse(dl.Linear(3, 4))
    with pytest.raises(TypeError, match="fuses a Linear with the ReLU after it; got Conv2d"):
        dl.LinearReLU(dl.Conv2d(1, 2, 3))
    with pytest.raises(TypeError, match="in_features"):
        dl.LinearReLU()
