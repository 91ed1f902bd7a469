"""Lessons 10-11b: number formats and mixed precision (dl.autocast, fit(precision=...),
dl.LossScaler), int8 post-training quantization (dl.quantize) and integer-only requantization
(11a), magnitude pruning (dl.prune), the sensitivity scan and channel pruning (11b)."""
import functools
import json
import math
import zipfile

import ml_dtypes
import numpy as np
import pytest

import dlcourse as dl
from dlcourse import precision
from dlcourse.quantize import dequantize_array, quantize_array, symmetric_scale


# ======================================================================================
# Number formats
# ======================================================================================
def test_bf16_bit_rounding_equals_ml_dtypes():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 5000),
                        np.array([0, -0.0, np.inf, -np.inf, np.nan, 3.4e38, 1e-40, 1 + 2**-8,
                                  1 + 3 * 2**-8], np.float32)]).astype(np.float32)
    with np.errstate(over="ignore"):
        got = precision.round_bf16_bits(x)
    want = x.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_round_to(xp, to_dev):
    x = to_dev(np.array([1 + 2**-9, 1 + 2**-12, 70000.0, 1e-8, 3e-8], np.float32))
    bf = dl.to_numpy(precision.round_to("bf16", x))
    assert bf[0] == 1.0 and bf[2] == 70144.0 and bf[3] > 0          # bf16: float32's range
    with np.errstate(over="ignore"):
        h = dl.to_numpy(precision.round_to("fp16", x))
    assert h[1] == 1.0 and np.isinf(h[2]) and h[3] == 0.0 and h[4] == 2.0**-24   # fp16 range
    assert precision.round_to("fp32", x) is x
    with pytest.raises(ValueError, match="Unknown number format"):
        precision.round_to("fp12", x)


def test_finite_range_matches_numpy_and_ml_dtypes():
    for fmt, dtype in (("fp16", np.float16), ("bf16", ml_dtypes.bfloat16),
                       ("fp8_e4m3", ml_dtypes.float8_e4m3fn), ("fp8_e5m2", ml_dtypes.float8_e5m2),
                       ("fp32", np.float32)):
        info = ml_dtypes.finfo(dtype)
        r = precision.finite_range(fmt)
        assert r["max"] == float(info.max) and r["min_normal"] == float(info.tiny), fmt
        assert r["eps"] == float(info.eps), fmt


def test_lowp_matmul_is_rounded_inputs_times_in_float32(xp, to_dev):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((5, 7)).astype(np.float32), rng.standard_normal((7, 3)).astype(np.float32)
    A, B = to_dev(a, b)
    with dl.autocast("bf16"):
        got = dl.to_numpy(precision.lowp_matmul(A, B))
    ref = (a.astype(ml_dtypes.bfloat16).astype(np.float64) @ b.astype(ml_dtypes.bfloat16).astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)   # only the summation order differs
    assert got.dtype == np.float32 and precision.current_format() == "fp32"
    assert not np.allclose(got, a @ b, rtol=1e-4, atol=1e-4)      # it did round


def test_autocast_reaches_every_layer_forward_and_backward():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 1, 6, 6)).astype(np.float32)
    model = dl.Sequential(dl.Conv2d(1, 3, 3, seed=0), dl.ReLU(), dl.Flatten(), dl.Linear(48, 5, seed=1))
    out32 = model.forward(x)
    model.backward(np.ones_like(out32))
    g32 = {k: v.copy() for k, v in model.grads.items()}
    with dl.autocast("fp16"):
        out16 = model.forward(x)
        model.backward(np.ones_like(out16))
    assert out16.dtype == np.float32 and not np.array_equal(out16, out32)
    np.testing.assert_allclose(out16, out32, rtol=1e-2, atol=1e-2)
    for k in g32:
        assert model.grads[k].dtype == np.float32
        np.testing.assert_allclose(model.grads[k], g32[k], rtol=2e-2, atol=2e-2)
    fused = dl.fuse(model)
    with dl.autocast("bf16"):
        assert np.array_equal(fused.forward(x), model.forward(x))


# ======================================================================================
# Loss scaling
# ======================================================================================
def test_loss_scaler_rules():
    s = dl.LossScaler(init_scale=8.0, growth_interval=3)
    assert [s.update(False) for _ in range(2)] == [True, True] and s.scale == 8.0
    assert s.update(False) and s.scale == 16.0 and s.clean_steps == 0      # 3 clean: x2
    assert s.update(False) and s.clean_steps == 1
    assert s.update(True) is False                                           # inf: skip
    assert s.scale == 8.0 and s.clean_steps == 0 and s.skipped == 1          # halved, restart
    assert s.scales == [8.0, 8.0, 8.0, 16.0, 16.0]
    assert s.state_dict()["scale"] == 8.0
    with pytest.raises(ValueError, match="backoff_factor"):
        dl.LossScaler(backoff_factor=2.0)


def test_loss_scaler_unscale_finds_inf():
    s = dl.LossScaler(init_scale=4.0)
    grads = {"W": np.array([4.0, 8.0], np.float32)}
    assert s.unscale(grads) is False and grads["W"].tolist() == [1.0, 2.0]
    assert s.unscale({"W": np.array([np.inf], np.float32)}) is True


class _TinyLoss(dl.MSELoss):
    """MSE times 1e-7: every gradient falls below half of fp16's smallest subnormal (6e-8)."""

    def forward(self, out, y):
        return super().forward(out, y) * 1e-7

    def backward(self):
        return super().backward() * np.float32(1e-7)


def _regression(n=256):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((n, 8)).astype(np.float32)
    y = (X @ rng.standard_normal((8, 1))).astype(np.float32) * 0.1
    return X, y


@pytest.mark.parametrize("scaler, learns", [(False, False), (None, True)])
def test_fp16_gradients_underflow_without_loss_scaling(scaler, learns):
    X, y = _regression()
    model = dl.Sequential(dl.Linear(8, 1, seed=0))
    before = model.params["0.W"].copy()
    h = dl.fit(model, _TinyLoss(), dl.SGD(model, lr=2e6), X, y, epochs=3, batch_size=64, seed=0,
               progress=False, precision="fp16", loss_scaler=scaler)
    changed = not np.array_equal(model.params["0.W"], before)
    assert changed == learns
    if learns:
        assert h.train_loss[-1] < 0.5 * h.train_loss[0]
        assert h.loss_scaler["scale"] > 1 and len(h.loss_scale) == 12 and h.precision == "fp16"
    else:
        assert h.train_loss[-1] == pytest.approx(h.train_loss[0], rel=1e-6)   # stalled: grads are 0
        assert (model.params["0.b"] == 0).all()


def test_fp16_overflow_skips_the_step_and_halves_the_scale():
    X, y = _regression(64)
    model = dl.Sequential(dl.Linear(8, 1, seed=0))
    scaler = dl.LossScaler(init_scale=2.0 ** 40, growth_interval=1000)   # scaled grads overflow
    h = dl.fit(model, dl.MSELoss(), dl.SGD(model, lr=0.05), X, y, epochs=1, batch_size=16,
               seed=0, progress=False, precision="fp16", loss_scaler=scaler)
    assert scaler.skipped >= 1 and scaler.scale < 2.0 ** 40
    assert h.loss_scale[0] == 2.0 ** 40 and h.loss_scale[1] == 2.0 ** 39
    assert np.isfinite(model.params["0.W"]).all()


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
def test_mixed_precision_trains_the_mlp_like_fp32(fmt):
    (X, y), _, (Xt, yt) = dl.data.load_digits("train"), None, dl.data.load_digits("test")
    acc = {}
    for p in ("fp32", fmt):
        model = dl.MLP([64, 32, 10], seed=0)
        h = dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1, momentum=0.9), X, y,
                   epochs=3, seed=0, progress=False, precision=p)
        assert h.precision == p and model.dtype == np.float32             # float32 masters
        acc[p] = dl.evaluate(model, Xt, yt)["accuracy"]
    assert acc["fp32"] > 0.85 and abs(acc[fmt] - acc["fp32"]) <= 0.03


def test_fit_rejects_unknown_precision():
    model = dl.MLP([4, 2])
    X, y = np.zeros((4, 4), np.float32), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match="Unknown number format 'int8'"):
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model), X, y, precision="int8", progress=False)
    with pytest.raises(TypeError, match="loss_scaler"):
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model), X, y, precision="fp16",
               loss_scaler=1024.0, progress=False)


# ======================================================================================
# Quantization
# ======================================================================================
def test_quantize_array_roundtrip_and_scale(xp, to_dev):
    x = to_dev(np.array([[-2.0, 0.5, 1.0], [0.0, 0.01, -0.02]], np.float32))
    s = symmetric_scale(x)
    assert float(s) == pytest.approx(2.0 / 127)
    q = quantize_array(x, s)
    assert q.dtype == np.int8 and int(q.min()) == -127
    assert float(xp.abs(dequantize_array(q, s) - x).max()) <= float(s) / 2 + 1e-7
    s_row = symmetric_scale(x, axis=0)
    assert s_row.shape == (2,) and float(s_row[1]) == pytest.approx(0.02 / 127)


@functools.lru_cache(maxsize=None)       # trained once, shared by the tests (not changed by them)
def _digits_model(kind):
    flat = kind == "mlp"
    (X, y), (Xv, yv), (Xt, yt) = (dl.data.load_digits(s, flat=flat) for s in ("train", "val", "test"))
    model = (dl.MLP([64, 64, 10], seed=0) if flat
             else dl.CNN(image_size=8, channels=(8, 16), seed=0))
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=3e-3), X, y, epochs=4, seed=0,
           progress=False)
    return model, X, Xt, yt


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_integer_path_equals_float_reference_of_the_same_rounding(kind):
    model, X, Xt, _ = _digits_model(kind)
    qmodel = dl.quantize(model, X[:256])
    x = Xt[:50]
    for layer in qmodel.layers:
        if isinstance(layer, (dl.QuantLinear, dl.QuantConv2d)):
            B = layer.buffers
            got = layer.forward(x)
            # float reference: dequantized input and weights, multiplied in float64
            wq = B["W_q"].astype(np.float64)
            if isinstance(layer, dl.QuantLinear):
                xq = quantize_array(x, B["x_scale"]).astype(np.float64) * B["x_scale"]
                ref = xq @ (wq * B["W_scale"]) + B["b"]
            else:
                F = wq.shape[0]
                cols = dl.im2col(x, *layer.kernel_size, layer.stride, layer.padding)
                xq = quantize_array(cols, B["x_scale"]).astype(np.float64) * B["x_scale"]
                ref = (xq @ (wq.reshape(F, -1) * B["W_scale"].reshape(-1, 1)).T + B["b"])
                N, _, OH, OW = got.shape
                ref = ref.reshape(N, OH, OW, F).transpose(0, 3, 1, 2)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
            assert got.dtype == np.float32
        x = layer.forward(x)


def test_a_loaded_int8_model_is_ready_to_predict(tmp_path):
    """An int8 model cannot train, so dl.load returns it in evaluation mode: its BatchNorm
    uses the running statistics, not the statistics of whatever batch comes in."""
    model = dl.CNN(1, (8, 8), 10, channels=(4, 8), batchnorm=True, seed=0)
    X = np.random.default_rng(0).random((32, 1, 8, 8), dtype=np.float32)
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1), X, np.arange(32) % 10,
           epochs=1, batch_size=8, seed=0, progress=False)   # running statistics != batch's
    q = dl.quantize(model, X)
    back = dl.load(dl.save(q, tmp_path / "q.npz"))
    assert not back.training and not any(layer.training for layer in back.layers)
    np.testing.assert_array_equal(back.forward(X[:5]), q.forward(X[:5]))
    assert dl.load(dl.save(model, tmp_path / "f.npz")).training     # a float model: as documented


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_quantized_model_keeps_accuracy_saves_int8_and_loads(kind, tmp_path):
    model, X, Xt, yt = _digits_model(kind)
    acc = dl.evaluate(model, Xt, yt)["accuracy"]
    for per_channel in (True, False):
        qmodel = dl.quantize(model, X[:256], per_channel=per_channel)
        qacc = dl.evaluate(qmodel, Xt, yt)["accuracy"]
        assert abs(qacc - acc) <= 0.02, (acc, qacc)
    path = dl.save(qmodel, tmp_path / "q.npz")
    with zipfile.ZipFile(path) as z:                     # the file's index: the weights are int8
        index = json.loads(z.read("__dlcourse__.json"))["arrays"]
    assert [f"{len(qmodel) - 1}.W_q", "|i1"] in [entry[:2] for entry in index]
    back = dl.load(path)
    np.testing.assert_array_equal(back.forward(Xt[:20]), qmodel.forward(Xt[:20]))
    assert back.layers[-1].buffers["W_q"].dtype == np.int8
    with pytest.raises(RuntimeError, match="inference"):
        back.backward(np.ones((20, 10), np.float32))


def test_quantized_1d_cnn_integer_path_per_output_channel(device, to_dev, tmp_path):
    """The MNIST-1D CNN's layout, tiny and untrained: (1, 5) kernels, (0, 2) padding, (1, 2)
    pooling, BatchNorm. Each output channel of a (F, C, 1, 5) kernel gets its own scale, and
    every int8 layer equals the float64 product of its dequantized input and weights."""
    model = dl.CNN(2, (1, 12), 3, channels=(4, 6), batchnorm=True, kernel_size=(1, 5),
                   pool=(1, 2), seed=0)
    conv = model.layers[0]
    conv.params["W"] *= (2.0 ** np.arange(4, dtype=np.float32)).reshape(4, 1, 1, 1)
    model.to(device).eval()
    X = to_dev(np.random.default_rng(0).standard_normal((16, 2, 1, 12)).astype(np.float32))
    qmodel = dl.quantize(model, X)
    q = qmodel.layers[0]
    assert q.kernel_size == [1, 5] and q.padding == [0, 2]
    np.testing.assert_allclose(dl.to_numpy(q.buffers["W_scale"]),
                               np.abs(dl.to_numpy(conv.params["W"])).max(axis=(1, 2, 3)) / 127,
                               rtol=1e-6)
    x = X
    for layer in qmodel.layers:
        if isinstance(layer, (dl.QuantLinear, dl.QuantConv2d)):
            B = {k: dl.to_numpy(v).astype(np.float64) for k, v in layer.buffers.items()}
            got = dl.to_numpy(layer.forward(x))
            inputs = dl.to_numpy(x)
            if isinstance(layer, dl.QuantConv2d):
                inputs = dl.im2col(inputs, *layer.kernel_size, layer.stride, layer.padding)
            x_deq = np.clip(np.rint(inputs / B["x_scale"]), -127, 127) * B["x_scale"]
            if isinstance(layer, dl.QuantLinear):
                ref = x_deq @ (B["W_q"] * B["W_scale"]) + B["b"]
            else:
                F = B["W_q"].shape[0]
                W = B["W_q"].reshape(F, -1) * B["W_scale"].reshape(-1, 1)        # (F, C*1*5)
                N, _, OH, OW = got.shape
                ref = (x_deq @ W.T + B["b"]).reshape(N, OH, OW, F).transpose(0, 3, 1, 2)
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        x = layer.forward(x)
    logits = dl.to_numpy(model.forward(X))                # int8 activations: close, not equal
    np.testing.assert_allclose(dl.to_numpy(x), logits, atol=0.05 * np.abs(logits).max())
    back = dl.load(dl.save(qmodel, tmp_path / "q1d.npz")).eval()    # load: training mode (BN)
    np.testing.assert_array_equal(back.forward(dl.to_numpy(X)), dl.to_numpy(qmodel.forward(X)))


def test_quantize_errors():
    model = dl.MLP([4, 3])
    with pytest.raises(TypeError, match="unfused"):
        dl.quantize(dl.fuse(dl.MLP([4, 3, 2])), np.ones((2, 4), np.float32))
    with pytest.raises(ValueError, match="calibration"):
        dl.quantize(model, np.ones((0, 4), np.float32))
    with pytest.raises(TypeError, match="Sequential"):
        dl.quantize(dl.Linear(4, 3), np.ones((2, 4), np.float32))


def test_quantize_on_the_device(device, to_dev):
    model = dl.MLP([6, 5, 3], seed=0).to(device)
    X = to_dev(np.random.default_rng(0).standard_normal((20, 6)).astype(np.float32))
    q = dl.quantize(model, X)
    assert q.device == device and dl.device_of(q.forward(X)) == device
    np.testing.assert_allclose(dl.to_numpy(q.forward(X)), dl.to_numpy(model.forward(X)), atol=0.1)


# ======================================================================================
# Pruning
# ======================================================================================
def test_prune_global_and_layer():
    model = dl.MLP([20, 30, 10], seed=0)
    W0, W1 = (model.params[k].copy() for k in ("0.W", "2.W"))
    dl.prune(model, 0.5, scope="layer")
    report = dl.sparsity(model)
    assert report["0.W"] == pytest.approx(0.5) and report["2.W"] == pytest.approx(0.5)
    kept = model.params["0.W"] != 0
    assert np.abs(W0[kept]).min() >= np.abs(W0[~kept]).max()           # smallest ones went
    model = dl.MLP([20, 30, 10], seed=0)
    dl.prune(model, 0.8)
    report = dl.sparsity(model)
    assert report["total"] == pytest.approx(0.8, abs=1e-3)
    threshold = np.abs(np.concatenate([W0.ravel(), W1.ravel()]))
    assert report["0.W"] != report["2.W"]                                 # one global threshold
    assert np.abs(model.params["0.W"][model.params["0.W"] != 0]).min() >= np.sort(threshold)[int(0.8 * threshold.size) - 1]
    with pytest.raises(ValueError, match="fraction"):
        dl.prune(model, 80)
    with pytest.raises(ValueError, match="scope"):
        dl.prune(model, 0.5, scope="channel")


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_fit_keeps_pruned_weights_at_zero(optimizer, device):
    X, y = dl.data.load_digits("train")
    model = dl.Sequential(dl.Conv2d(1, 4, 3, padding=1, seed=0), dl.ReLU(), dl.Flatten(),
                          dl.Linear(256, 10, seed=1)).to(device)
    dl.prune(model, 0.7)
    zero = {k: dl.to_numpy(p) == 0 for k, p in model.params.items() if k.endswith("W")}
    opt = dl.SGD(model, lr=0.05, momentum=0.9) if optimizer == "sgd" else dl.Adam(model, lr=1e-2)
    dl.fit(dl.fuse(model), dl.SoftmaxCrossEntropy(), opt, X.reshape(-1, 1, 8, 8)[:300], y[:300],
           epochs=2, seed=0, progress=False)
    for k, z in zero.items():
        W = dl.to_numpy(model.params[k])
        assert (W[z] == 0).all() and (W[~z] != 0).mean() > 0.99
    assert dl.sparsity(model)["total"] == pytest.approx(0.7, abs=1e-3)


def test_pruning_schedule_is_cubic_and_ends_at_the_target():
    assert dl.pruning_schedule(0.8, 4) == pytest.approx([0.4625, 0.7, 0.7875, 0.8])
    assert dl.pruning_schedule(0.9, 1) == [0.9]
    with pytest.raises(ValueError, match="steps"):
        dl.pruning_schedule(0.8, 0)


def test_prune_gradually_reaches_the_sparsity_and_pruned_weights_stay_zero(device):
    X, y = dl.data.load_digits("train")
    model = dl.MLP([64, 32, 10], seed=0).to(device)
    seen, zeros = [], {}

    def fine_tune(m, step):
        now = {k: dl.to_numpy(p) == 0 for k, p in m.params.items() if k.endswith("W")}
        for k, z in zeros.items():                    # what an earlier cut pruned is still zero
            assert (now[k] >= z).all()
        zeros.update(now)
        seen.append(dl.sparsity(m)["total"])
        dl.fit(m, dl.SoftmaxCrossEntropy(), dl.Adam(m, lr=1e-2), X[:300], y[:300], epochs=1,
               seed=step, progress=False)
        for k, z in now.items():                      # and fit kept this cut's zeros
            assert (dl.to_numpy(m.params[k])[z] == 0).all()

    assert dl.prune_gradually(model, 0.8, fine_tune, steps=3) is model
    assert seen == pytest.approx(dl.pruning_schedule(0.8, 3), abs=1e-3)
    assert dl.sparsity(model)["total"] == pytest.approx(0.8, abs=1e-3)
    with pytest.raises(TypeError, match="fine_tune"):
        dl.prune_gradually(model, 0.9, fine_tune=None)


# ======================================================================================
# Which layers to prune how much (lesson 11b): per-layer sparsities, the sensitivity scan
# ======================================================================================
def test_prune_takes_one_sparsity_per_layer():
    model = dl.CNN(image_size=8, channels=(4, 8), seed=0)
    W7 = model.params["7.W"].copy()
    assert dl.prune(model, {"0.W": 0.25, "3.W": 0.75}) is model
    report = dl.sparsity(model)
    assert report["0.W"] == pytest.approx(0.25, abs=0.02) and report["3.W"] == pytest.approx(0.75)
    assert report["7.W"] == 0 and np.array_equal(model.params["7.W"], W7)   # not named: as it was
    assert not hasattr(model.layers[7], "masks")
    with pytest.raises(KeyError, match="name no prunable weight"):
        dl.prune(model, {"1.W": 0.5})
    with pytest.raises(ValueError, match="fraction"):
        dl.prune(model, {"0.W": 1.5})


def test_prune_sensitivity_prunes_one_layer_at_a_time_and_puts_it_back(device, to_dev):
    X, y = dl.data.load_digits("val", flat=False)
    model = dl.CNN(image_size=8, channels=(4, 8), seed=0).to(device)
    dl.prune(model, {"3.W": 0.5})                  # an earlier mask stays as it was
    before = {k: dl.to_numpy(v).copy() for k, v in model.params.items()}
    mask = dl.to_numpy(model.layers[3].masks["W"]).copy()
    table = dl.prune_sensitivity(model, to_dev(X[:100]), y[:100], sparsities=[0, 0.5, 0.99])
    assert list(table) == ["0.W", "3.W", "7.W"] and all(list(r) == [0.0, 0.5, 0.99] for r in table.values())
    dense = float((dl.to_numpy(model.predict(to_dev(X[:100]))) == y[:100]).mean())
    assert all(row[0.0] == pytest.approx(dense) for row in table.values())
    assert all(row[0.99] < dense for row in table.values())          # pruning one layer hurts
    for k, v in model.params.items():                                 # put back, weights and masks
        np.testing.assert_array_equal(dl.to_numpy(v), before[k])
    np.testing.assert_array_equal(dl.to_numpy(model.layers[3].masks["W"]), mask)
    assert not hasattr(model.layers[0], "masks") and not hasattr(model.layers[7], "masks")
    # one layer alone at 0.99 = that layer pruned by dl.prune, the others dense
    alone = dl.CNN(image_size=8, channels=(4, 8), seed=0).to(device)
    alone.load_state_dict(model.state_dict())
    dl.prune(alone, {"0.W": 0.99})
    assert table["0.W"][0.99] == pytest.approx(
        float((dl.to_numpy(alone.predict(to_dev(X[:100]))) == y[:100]).mean()))


def test_choose_sparsities_gives_each_layer_the_largest_within_the_drop():
    table = {"0.W": {0.0: 0.90, 0.5: 0.89, 0.7: 0.80, 0.9: 0.5},
             "3.W": {0.0: 0.90, 0.5: 0.90, 0.7: 0.895, 0.9: 0.88},
             "7.W": {0.0: 0.90, 0.5: 0.70, 0.7: 0.60, 0.9: 0.3}}
    assert dl.choose_sparsities(table, max_drop=0.01) == {"0.W": 0.5, "3.W": 0.7, "7.W": 0.0}
    assert dl.choose_sparsities(table, max_drop=0.05) == {"0.W": 0.5, "3.W": 0.9, "7.W": 0.0}
    with pytest.raises(ValueError, match="sparsity 0"):
        dl.choose_sparsities({"0.W": {0.5: 0.9}})


def test_prune_sensitivity_and_choose_sparsities_name_what_is_wrong():
    X, y = dl.data.load_digits("val")
    model = dl.MLP([64, 16, 10], seed=0)
    with pytest.raises(ValueError, match=r"one label per sample of X: X has 50 samples, y has "
                                         r"shape \(49,\)"):
        dl.prune_sensitivity(model, X[:50], y[:49])
    with pytest.raises(ValueError, match=r"shape \(50, 1\).*y\.ravel\(\)"):
        dl.prune_sensitivity(model, X[:50], y[:50, None])
    table = {"0.W": {0.0: 0.90, 0.5: 0.89}}
    for max_drop in (float("nan"), -0.01, 2.0):
        with pytest.raises(ValueError, match=rf"choose_sparsities\(max_drop=\.\.\.\) must be a "
                                             rf"finite number in \[0, 1\], got {max_drop!r}.*"
                                             rf"max_drop=0\.01"):
            dl.choose_sparsities(table, max_drop=max_drop)
    with pytest.raises(TypeError, match="max_drop"):
        dl.choose_sparsities(table, max_drop="0.01")
    assert dl.choose_sparsities(table, max_drop=0) == {"0.W": 0.0}


# ======================================================================================
# Channel pruning (lesson 11b): the model really shrinks
# ======================================================================================
def test_channels_to_keep_takes_the_largest_l1_norms_in_order(xp, to_dev):
    from dlcourse.prune import channels_to_keep
    W = np.zeros((5, 2, 1, 2), np.float32)
    W[:, 0, 0, 0] = [1.0, -3.0, 0.5, 2.0, -0.1]
    W[:, 1, 0, 1] = [1.5, 0.0, -0.2, 0.0, 0.1]       # L1: 2.5, 3, 0.7, 2, 0.2
    kept = channels_to_keep(to_dev(W), 3)
    assert dl.device_of(kept) == dl.device_of(to_dev(W))
    assert dl.to_numpy(kept).tolist() == [0, 1, 3]
    assert dl.to_numpy(channels_to_keep(to_dev(W), 5)).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="whole number from 1 to 5"):
        channels_to_keep(W, 0)


def _zero_the_weakest(model, i, keep, batchnorm=False):
    """Zero the filters (and bias, and BatchNorm output) of all but the ``keep`` channels of
    largest L1 norm of Conv2d ``i``: removing them must change nothing."""
    from dlcourse.prune import channels_to_keep
    xp = dl.get_array_module(model.params[f"{i}.W"])
    F = model.layers[i].out_channels
    gone = np.setdiff1d(np.arange(F), dl.to_numpy(channels_to_keep(model.params[f"{i}.W"], keep)))
    gone = xp.asarray(gone)
    model.params[f"{i}.W"][gone] *= 0.01            # still the smallest L1 norms ...
    if batchnorm:                                    # ... and BatchNorm's output is 0
        model.params[f"{i + 1}.gamma"][gone] = 0
        model.params[f"{i + 1}.beta"][gone] = 0
    else:
        model.params[f"{i}.W"][gone] = 0
        model.params[f"{i}.b"][gone] = 0


@pytest.mark.parametrize("batchnorm", [False, True], ids=["plain", "batchnorm"])
def test_the_pruned_model_equals_the_original_where_the_removed_channels_were_zero(
        batchnorm, device, to_dev):
    rng = np.random.default_rng(0)
    x = to_dev(rng.standard_normal((6, 1, 8, 8)).astype(np.float32))
    model = dl.CNN(image_size=8, channels=(6, 8), batchnorm=batchnorm, seed=0).to(device)
    if batchnorm:                                    # running statistics that are not 0 and 1
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.01), dl.to_numpy(x),
               np.arange(6) % 10, epochs=2, batch_size=3, seed=0, progress=False)
    convs = [i for i, l in enumerate(model.layers) if isinstance(l, dl.Conv2d)]
    for i, keep, next_in in ((convs[0], 4, "in_channels"), (convs[1], 3, "in_features")):
        _zero_the_weakest(model, i, keep, batchnorm)
        model.eval()
        small = dl.prune_channels(model, i, keep=keep)
        assert small.layers[i].out_channels == keep and small.params[f"{i}.W"].shape[0] == keep
        if batchnorm:
            assert small.layers[i + 1].num_features == keep
            assert small.buffers[f"{i + 1}.running_var"].shape == (keep,)
        following = next(l for l in small.layers[i + 1:] if isinstance(l, (dl.Conv2d, dl.Linear)))
        assert getattr(following, next_in) == (keep if next_in == "in_channels" else keep * 2 * 2)
        assert small.num_parameters() < model.num_parameters()
        assert small.device == device and not small.training
        np.testing.assert_allclose(dl.to_numpy(small.forward(x)), dl.to_numpy(model.forward(x)),
                                   rtol=1e-5, atol=1e-5)
        model.train()


def test_a_channel_pruned_model_trains_saves_loads_and_exports(tmp_path):
    X, y = dl.data.load_digits("train", flat=False)
    model = dl.CNN(image_size=8, channels=(8, 16), seed=0)
    small = dl.prune_channels(dl.prune_channels(model, 0, keep=4), "3.W", keep=6)
    assert [l.out_channels for l in small.layers if isinstance(l, dl.Conv2d)] == [4, 6]
    assert small.layers[7].in_features == 6 * 2 * 2
    assert model.layers[0].out_channels == 8                     # the original is not changed
    dl.fit(small, dl.SoftmaxCrossEntropy(), dl.Adam(small, lr=1e-2), X[:200], y[:200], epochs=1,
           seed=0, progress=False)
    big, little = dl.save(model, tmp_path / "big.npz"), dl.save(small, tmp_path / "small.npz")
    assert little.stat().st_size < big.stat().st_size
    back = dl.load(little)
    np.testing.assert_array_equal(back.forward(X[:20]), small.eval().forward(X[:20]))
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    path = dl.export_onnx(small, tmp_path / "small.onnx", input_shape=(1, 8, 8))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: X[:20]})[0]
    np.testing.assert_allclose(got, small.forward(X[:20]), rtol=1e-4, atol=1e-4)


def test_prune_channels_errors():
    model = dl.CNN(image_size=8, channels=(4, 8), seed=0)
    with pytest.raises(ValueError, match="index of a Conv2d"):
        dl.prune_channels(model, 1, keep=2)
    with pytest.raises(ValueError, match="index of a Conv2d"):
        dl.prune_channels(model, "conv", keep=2)
    with pytest.raises(ValueError, match="whole number from 1 to 4"):
        dl.prune_channels(model, 0, keep=5)
    with pytest.raises(TypeError, match="Sequential"):
        dl.prune_channels(dl.Conv2d(1, 4, 3), 0, keep=2)
    with pytest.raises(TypeError, match="unfused"):
        dl.prune_channels(dl.fuse(model), 0, keep=2)
    last = dl.Sequential(dl.Conv2d(1, 4, 3, seed=0), dl.ReLU())
    with pytest.raises(ValueError, match="model's output"):
        dl.prune_channels(last, 0, keep=2)
    with pytest.raises(TypeError, match=r"cannot cut through layer 2 \(MaxPool2d\)"):
        dl.prune_channels(dl.Sequential(dl.Conv2d(1, 4, 3), dl.Flatten(), dl.MaxPool2d(2)), 0, 2)


# ======================================================================================
# Asymmetric int8 and integer-only requantization (lesson 11a)
# ======================================================================================
def test_asymmetric_params_put_zero_on_an_integer_and_use_the_whole_range(xp, to_dev):
    from dlcourse.quantize import asymmetric_params, dequantize_affine, quantize_affine
    x = to_dev(np.linspace(0.0, 2.0, 101).astype(np.float32))          # all >= 0, like a ReLU
    s, z = asymmetric_params(x)
    assert z == -128 and s == pytest.approx(2.0 / 255)
    q = quantize_affine(x, s, z)
    assert q.dtype == np.int8 and int(q.min()) == -128 and int(q.max()) == 127
    assert float(abs(dl.to_numpy(dequantize_affine(q, s, z)) - dl.to_numpy(x)).max()) <= s / 2 + 1e-6
    s, z = asymmetric_params(to_dev(np.array([-1.0, 3.0], np.float32)))
    assert s == pytest.approx(4.0 / 255) and z == round(-128 + 1.0 / s)
    assert int(quantize_affine(to_dev(np.zeros(1, np.float32)), s, z)[0]) == z   # 0 is exact
    assert asymmetric_params(np.zeros(3)) == (1.0, -128)
    s, z = asymmetric_params(np.array([0.0, 1.0]), qmin=0, qmax=255)
    assert z == 0 and quantize_affine(np.array([1.0]), s, z, 0, 255).dtype == np.uint8


@pytest.mark.parametrize("bad, words", [(np.inf, r"\[-1\.0, inf\]: 1 of its 3 values.* inf"),
                                        (-np.inf, r"\[-inf, 2\.0\]: 1 of its 3"),
                                        (np.nan, r"\[nan, nan\]: 1 of its 3 .*NaN")],
                         ids=["inf", "-inf", "nan"])
def test_asymmetric_params_and_the_scale_refuse_non_finite_ranges(xp, to_dev, bad, words):
    from dlcourse.quantize import asymmetric_params, symmetric_scale
    x = np.array([-1.0, 2.0, bad], np.float32)
    if bad == -np.inf:
        x[0] = 2.0
    with pytest.raises(ValueError, match=words + r".*x\[np\.isfinite\(x\)\]"):
        asymmetric_params(to_dev(x))
    with pytest.raises(ValueError, match="symmetric_scale: 1 of the 3 values of x are NaN or "
                                         "infinite"):
        symmetric_scale(to_dev(x))
    with pytest.raises(ValueError, match="x is empty"):
        asymmetric_params(to_dev(np.zeros(0, np.float32)))


@pytest.mark.parametrize("M, M0, shift", [(0.5, 2 ** 30, 0), (0.75, 3 * 2 ** 29, 0),
                                          (0.0123, 1690499128, 6), (2.0 ** -20, 2 ** 30, 19),
                                          (0.25 - 2.0 ** -40, 2 ** 30, 1),    # rounds up to 0.25
                                          (1 - 2.0 ** -40, 2 ** 31 - 1, 0)])  # and stays below 1
def test_fixed_point_multiplier(M, M0, shift):
    from dlcourse.quantize import fixed_point_multiplier
    got = fixed_point_multiplier(M)
    assert got == (M0, shift)
    assert 2 ** 30 <= got[0] < 2 ** 31
    assert got[0] * 2.0 ** -31 * 2.0 ** -got[1] == pytest.approx(M, rel=2 ** -30)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        fixed_point_multiplier(1.5)


def test_requantize_is_the_float_rescale_within_one_step_and_exact_away_from_ties(xp, to_dev):
    from dlcourse.quantize import requantize
    rng = np.random.default_rng(0)
    for M, z, width in ((0.0123, 5, 20000), (0.00731, -7, 40000), (0.75, 3, 150), (3.1e-6, 0, 2 ** 28)):
        acc = rng.integers(-width, width, 20000).astype(np.int32)
        got = dl.to_numpy(requantize(to_dev(acc), M, z)).astype(np.int64)
        exact = M * acc.astype(np.float64)
        want = np.clip(np.floor(exact + 0.5) + z, -128, 127)
        assert got.dtype == np.int64 and np.abs(got - want).max() <= 1
        shift = max(0, -int(np.frexp(M)[1]))
        window = (0.5 * 2.0 ** -shift if shift else 0) + 1e-6
        away = np.abs(exact - np.floor(exact) - 0.5) > window
        np.testing.assert_array_equal(got[away], want[away])
        assert (got != want).mean() < 0.02
    assert requantize(to_dev(np.array([1000, 12000, -12000, -1000], np.int32)), 0.0123, 5).dtype == np.int8
    assert dl.to_numpy(requantize(to_dev(np.array([1000, 12000, -12000, -1000], np.int32)), 0.0123, 5)).tolist() == [17, 127, -128, -7]


def test_the_integer_only_layer_matches_the_float_rescaled_path():
    """A Linear with an asymmetric int8 input, symmetric int8 weights and an int32 bias: the
    integer-only output equals the float rescale of the same accumulators within one step, and
    dl.quantize's layer (symmetric input, float rescale) to within a few steps."""
    from dlcourse.quantize import (asymmetric_params, quantize_affine, requantize)
    X, y = dl.data.load_digits("train")
    model = dl.MLP([64, 32, 10], seed=0)
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=1e-2), X, y, epochs=3, seed=0,
           progress=False)
    W, b = model.params["0.W"], model.params["0.b"]
    s_x, z_x = asymmetric_params(X)
    s_w = float(symmetric_scale(W))
    W_q, b_q = quantize_array(W, np.float32(s_w)), np.rint(b / (s_x * s_w)).astype(np.int32)
    s_y, z_y = asymmetric_params(X @ W + b)
    acc = (quantize_affine(X, s_x, z_x).astype(np.int32) - z_x) @ W_q.astype(np.int32) + b_q
    y_int = requantize(acc, s_x * s_w / s_y, z_y).astype(np.int64)
    y_float = quantize_affine(acc * (s_x * s_w), s_y, z_y).astype(np.int64)
    assert np.abs(y_int - y_float).max() <= 1 and (y_int == y_float).mean() > 0.99
    q = dl.quantize(model, X, per_channel=False).layers[0].forward(X)
    assert np.abs(y_int - quantize_affine(q, s_y, z_y).astype(np.int64)).max() <= 3


# ======================================================================================
# The exercise checks name the mistake (dl.check.loss_scale_step, quantize_symmetric,
# magnitude_mask)
# ======================================================================================
def _scale_never_skips(scale, clean, found_inf, interval):
    if found_inf:
        return scale / 2, 0, True
    return (scale * 2, 0, True) if clean + 1 == interval else (scale, clean + 1, True)


def _scale_grows_one_late(scale, clean, found_inf, interval):
    if found_inf:
        return scale / 2, 0, False
    return (scale * 2, 0, True) if clean == interval else (scale, clean + 1, True)


def _scale_no_reset(scale, clean, found_inf, interval):
    if found_inf:
        return scale / 2, clean, False
    return (scale * 2, 0, True) if clean + 1 == interval else (scale, clean + 1, True)


def _quantize_by_max(x):
    s = x.max() / 127
    return np.clip(np.rint(x / s), -127, 127).astype(np.int8), s


def _quantize_truncates(x):
    s = np.abs(x).max() / 127
    return (x / s).astype(np.int8), s


def _quantize_255(x):
    s = np.abs(x).max() / 255
    return np.clip(np.rint(x / s), -127, 127).astype(np.int8), s


def _quantize_float(x):
    s = np.abs(x).max() / 127
    return np.rint(x / s), s


def _mask_inverted(w, sparsity):
    k = int(round(sparsity * w.size))
    m = np.zeros(w.size, bool)
    m[np.argsort(np.abs(w), axis=None)[:k]] = True
    return m.reshape(w.shape)


def _mask_signed(w, sparsity):
    k = int(round(sparsity * w.size))
    m = np.ones(w.size, bool)
    m[np.argsort(w, axis=None)[:k]] = False
    return m.reshape(w.shape)


def _mask_keeps_sparsity(w, sparsity):
    k = int(round((1 - sparsity) * w.size))
    m = np.ones(w.size, bool)
    m[np.argsort(np.abs(w), axis=None)[:k]] = False
    return m.reshape(w.shape)


def _mask_truncates(w, sparsity):
    k = int(sparsity * w.size)
    m = np.ones(w.size, bool)
    m[np.argsort(np.abs(w), axis=None)[:k]] = False
    return m.reshape(w.shape)


def _mask_rounds_up(w, sparsity):
    k = int(np.ceil(sparsity * w.size - 1e-9))
    m = np.ones(w.size, bool)
    m[np.argsort(np.abs(w), axis=None)[:k]] = False
    return m.reshape(w.shape)


def _mask_by_library(w, sparsity):
    layer = dl.Linear(w.size, 1)
    layer.params["W"][...] = w.reshape(-1, 1)
    dl.prune(dl.Sequential(layer), sparsity, scope="layer")
    return layer.masks["W"].reshape(w.shape)


def _scale_fixed_interval(scale, clean, found_inf, interval):
    if found_inf:
        return scale / 2, 0, False
    return (scale * 2, 0, True) if clean + 1 == 3 or clean + 1 == 2000 else (scale, clean + 1, True)


def _scale_by_library(scale, clean, found_inf, interval):
    scaler = dl.LossScaler(init_scale=scale, growth_interval=interval)
    scaler.clean_steps = clean
    take = scaler.update(found_inf)
    return scaler.scale, scaler.clean_steps, take


def _quantize_by_library(x):
    from dlcourse.quantize import quantize_array, symmetric_scale
    s = symmetric_scale(x)
    return quantize_array(x, s), s


def _right_scale_step(scale, clean, found_inf, interval):
    if found_inf:
        return scale / 2, 0, False
    return (scale * 2, 0, True) if clean + 1 == interval else (scale, clean + 1, True)


def _not_implemented(*args):
    raise NotImplementedError("HINT: the rule")


def _requantize_with(acc, M, z_y, rounding=True, zero_point=True, saturate=True, wide=True):
    """The integer path with one of its parts left out (the typical mistakes)."""
    n = 0
    while M * 2 ** n < 0.5:
        n += 1
    M0 = int(round(M * 2 ** (31 + n)))
    p = (acc.astype(np.int64) if wide else acc) * M0
    if rounding:
        high = np.where(p >= 0, (p + 2 ** 30) >> 31, -((-p + 2 ** 30) >> 31))
        half = (1 << n) >> 1
        out = np.where(high >= 0, (high + half) >> n, -((-high + half) >> n))
    else:
        out = (p >> 31) >> n
    out = out + (z_y if zero_point else 0)
    return (np.clip(out, -128, 127) if saturate else out).astype(np.int8)


def _requantize_right(acc, M, z_y):
    return _requantize_with(acc, M, z_y)


def _requantize_truncates(acc, M, z_y):
    return _requantize_with(acc, M, z_y, rounding=False)


def _requantize_no_zero_point(acc, M, z_y):
    return _requantize_with(acc, M, z_y, zero_point=False)


def _requantize_no_saturation(acc, M, z_y):
    return _requantize_with(acc, M, z_y, saturate=False)


def _requantize_int32(acc, M, z_y):
    return _requantize_with(acc, M, z_y, wide=False)


def _requantize_float_out(acc, M, z_y):
    return np.clip(np.floor(M * acc.astype(np.float64) + 0.5) + z_y, -128, 127)


def _requantize_int64_out(acc, M, z_y):
    return _requantize_with(acc, M, z_y).astype(np.int64)


def _requantize_float_unseen(acc, M, z_y):
    """Float arithmetic on a plain copy of acc (the wrapper cannot see it): the case where M0's
    31 bits decide the rounding catches it."""
    a = np.asarray(acc, dtype=np.float64)
    return np.clip(np.rint(M * a) + z_y, -128, 127).astype(np.int8)


def _requantize_float_division(acc, M, z_y):
    n = -math.frexp(M)[1]
    M0 = round(M * 2 ** (31 + n))
    return np.clip(np.rint(acc.astype(np.int64) * M0 / 2 ** (31 + n)) + z_y, -128,
                   127).astype(np.int8)


def _requantize_int32_cast(acc, M, z_y):
    """int32 overflow where acc is cast to int32 first: the int64 retry cannot fix it."""
    return _requantize_with(acc.astype(np.int32), M, z_y, wide=False)


def _requantize_one_rounding(acc, M, z_y):
    """Correct, written differently: frexp, one rounding of the whole product (ties up)."""
    m, e = math.frexp(M)
    M0, n = int(round(m * 2 ** 31)), -e
    if M0 == 2 ** 31:
        M0, n = M0 // 2, n - 1
    p = np.int64(M0) * acc.astype(np.int64)
    return np.clip(((p + (1 << (30 + n))) >> (31 + n)) + z_y, -128, 127).astype(np.int8)


def _requantize_floor_division(acc, M, z_y):
    """Correct, written differently: M0 cut (not rounded), // with the sign handled."""
    n = 0
    while M * 2 ** n < 0.5:
        n += 1
    M0, d = int(M * 2 ** (31 + n)), 2 ** (31 + n)
    p = acc.astype("int64") * M0
    out = np.where(p >= 0, (p + d // 2) // d, -((-p + d // 2) // d))
    return np.minimum(np.maximum(out + z_y, -128), 127).astype(np.int8)


def _requantize_python_ints(acc, M, z_y):
    """Correct, written differently: a loop over Python integers."""
    n = 0
    while M * 2 ** n < 0.5:
        n += 1
    M0, d = round(M * 2 ** (31 + n)), 1 << (31 + n)
    out = []
    for a in acc.reshape(-1).tolist():
        q = (abs(a * M0) + d // 2) // d
        out.append(max(-128, min(127, (q if a >= 0 else -q) + z_y)))
    return np.array(out, np.int8).reshape(acc.shape)


def _requantize_by_library(acc, M, z_y):
    from dlcourse.quantize import requantize
    return requantize(acc, M, z_y)


def _pair(choose=None, unsorted=False, cut_b1=True, bn_cut=("gamma", "beta", "running_mean",
                                                                 "running_var"),
          conv2="inputs", cut_b2=False):
    """An answer to prune_conv_pair, right by default; each argument puts one mistake in."""
    def prune_conv_pair(conv1, bn, conv2_, keep):
        W1 = conv1["W"]
        F = W1.shape[0]
        norms = (choose or (lambda W: np.abs(W).reshape(F, -1).sum(axis=1)))(W1)
        kept = np.argsort(-norms, kind="stable")[:keep]
        kept = kept if unsorted else np.sort(kept)
        W2 = {"inputs": lambda: conv2_["W"][:, kept], "outputs": lambda: conv2_["W"][kept],
              "none": lambda: conv2_["W"]}[conv2]()
        return ({"W": W1[kept], "b": conv1["b"][kept] if cut_b1 else conv1["b"]},
                {k: v[kept] if k in bn_cut else v for k, v in bn.items()},
                {"W": W2, "b": conv2_["b"][kept] if cut_b2 else conv2_["b"]})
    return prune_conv_pair


def _pair_in_loops(conv1, bn, conv2, keep):
    """Right, written differently: the mean |w| in float64 (the same order as the sum), one
    channel at a time, indices as a list of Python ints, float64 copies returned."""
    F = len(conv1["W"])
    scores = [float(np.mean(np.abs(conv1["W"][f].astype(np.float64)))) for f in range(F)]
    kept = sorted(sorted(range(F), key=lambda f: -scores[f])[:keep])
    W2 = np.stack([conv2["W"][:, f] for f in kept], axis=1).astype(np.float64)
    return ({"W": conv1["W"][kept].astype(np.float64),
             "b": np.array([float(conv1["b"][f]) for f in kept])},
            {name: np.array([bn[name][f] for f in kept]) for name in bn},
            {"W": W2, "b": np.array(list(conv2["b"]))})


def _pair_by_library(conv1, bn, conv2, keep):
    from dlcourse.prune import channels_to_keep
    kept = channels_to_keep(conv1["W"], keep)
    return ({"W": conv1["W"][kept], "b": conv1["b"][kept]}, {k: v[kept] for k, v in bn.items()},
            {"W": conv2["W"][:, kept], "b": conv2["b"]})


def _abs_flat(W):
    return np.abs(W).reshape(len(W), -1)


@pytest.mark.parametrize("wrong, expected", [
    (_pair(choose=lambda W: np.sqrt((W.reshape(len(W), -1) ** 2).sum(axis=1))), ["ABSOLUTE values", "L2"]),
    (_pair(choose=lambda W: _abs_flat(W).max(axis=1)), ["L-infinity", "not the largest one"]),
    (_pair(choose=lambda W: W.reshape(len(W), -1).sum(axis=1)), ["take absolute values before summing"]),
    (_pair(choose=lambda W: -_abs_flat(W).sum(axis=1)), ["LARGEST norm"]),
    (_pair(unsorted=True), ["in another order", "increasing order"]),
    (_pair(cut_b1=False), ["conv1's b has shape (5,)", "a removed filter's bias goes with it"]),
    (_pair(bn_cut=()), ["bn's gamma has shape (5,)", "EACH of its four arrays"]),
    (_pair(bn_cut=("gamma", "beta")), ["bn's running_mean has shape (5,)", "running mean and variance too"]),
    (_pair(conv2="outputs"), ["cut along its OUTPUT channels", "INPUT axis"]),
    (_pair(conv2="none"), ["still has shape (3, 5, 1, 1)", "must lose the input channels"]),
    (_pair(cut_b2=True), ["conv2's b has 2 entries", "leave it whole"]),
    (_pair_by_library, ["dl.prune.channels_to_keep", "library's own"]),
], ids=["l2", "linf", "signed", "smallest", "unsorted", "b1", "bn", "bn_stats", "axis0", "conv2",
        "b2", "library"])
def test_prune_conv_pair_names_the_mistake(wrong, expected):
    with pytest.raises(dl.check.ExerciseError) as info:
        dl.check.prune_conv_pair(wrong)
    for text in expected:
        assert text in str(info.value), str(info.value)


def test_prune_conv_pair_passes_the_right_answer_and_one_written_differently(capsys):
    dl.check.prune_conv_pair(_pair())
    dl.check.prune_conv_pair(_pair_in_loops)
    assert capsys.readouterr().out.count("\u2713") == 2


@pytest.mark.parametrize("checker, wrong, expected", [
    ("loss_scale_step", _scale_never_skips, ["take_step is True, expected False", "skipped"]),
    ("loss_scale_step", _scale_grows_one_late, ["expected 2048", "count this step first"]),
    ("loss_scale_step", _scale_no_reset, ["clean_steps is 2", "starts again at 0"]),
    ("loss_scale_step", _not_implemented, ["not implemented yet: HINT: the rule"]),
    ("quantize_symmetric", _quantize_by_max, ["MAGNITUDE", "largest absolute value"]),
    ("quantize_symmetric", _quantize_255, ["dividing by 255"]),
    ("quantize_symmetric", _quantize_truncates, ["NEAREST integer", "cuts the fraction off"]),
    ("quantize_symmetric", _quantize_float, ["dtype float32, expected int8", "8-bit integers"]),
    ("magnitude_mask", _mask_inverted, ["other way round"]),
    ("magnitude_mask", _mask_signed, ["magnitude, |w|"]),
    ("magnitude_mask", _mask_keeps_sparsity, ["fraction to REMOVE"]),
    # holes closed (issue 26): a count that must be rounded, a growth interval of 1 and 5
    ("magnitude_mask", _mask_truncates, ["sparsity=0.33", "NEAREST whole number (7)"]),
    ("magnitude_mask", _mask_rounds_up, ["sparsity=0.42", "rounding up overshoots"]),
    ("loss_scale_step", _scale_fixed_interval, ["growth_interval=1", "it changes from case"]),
    # the library's own versions are refused
    ("loss_scale_step", _scale_by_library, ["it calls dl.LossScaler", "library's own"]),
    ("quantize_symmetric", _quantize_by_library, ["dl.quantize.symmetric_scale", "library's own"]),
    ("magnitude_mask", _mask_by_library, ["it calls dl.Linear", "library's own"]),
    # lesson 11a: integer-only requantization
    ("requantize", _requantize_truncates, ["round, do not truncate", "expected -7, got -8"]),
    ("requantize", _requantize_no_zero_point, ["zero point z_y", "expected 17, got 12"]),
    ("requantize", _requantize_no_saturation, ["saturate", "wraps around", "expected 127, got -103"]),
    ("requantize", _requantize_int32, ["overflow", "int64"]),
    ("requantize", _requantize_float_out, ["integer arithmetic only", "float64"]),
    ("requantize", _requantize_int64_out, ["dtype int64, expected int8"]),
    # the rule "integer arithmetic only", and an overflow named as one (issue 37)
    ("requantize", _requantize_float_division, ["np.divide", "integer arithmetic only"]),
    ("requantize", _requantize_float_unseen, ["integer arithmetic only", "acc = 34",
                                              "M0 keeps 31 bits"]),
    ("requantize", _requantize_int32_cast, ["overflow", "np.multiply on int32", "int64"]),
    ("requantize", _not_implemented, ["not implemented yet: HINT: the rule"]),
    ("requantize", _requantize_by_library, ["dl.quantize.requantize", "library's own"]),
])
def test_checks_name_the_mistake(checker, wrong, expected):
    with pytest.raises(dl.check.ExerciseError) as info:
        getattr(dl.check, checker)(wrong)
    for text in expected:
        assert text in str(info.value), str(info.value)


def test_checks_pass_the_right_answers(capsys):
    dl.check.loss_scale_step(_right_scale_step)

    def quantize_symmetric(x):
        s = np.abs(x).max() / 127
        return np.clip(np.rint(x / s), -127, 127).astype(np.int8), s

    def magnitude_mask(w, sparsity):
        return _mask_keeps_sparsity(w, 1 - sparsity)

    dl.check.quantize_symmetric(quantize_symmetric)
    dl.check.magnitude_mask(magnitude_mask)
    dl.check.requantize(_requantize_right)
    for written_differently in (_requantize_one_rounding, _requantize_floor_division,
                                _requantize_python_ints):
        dl.check.requantize(written_differently)
    assert capsys.readouterr().out.count("\u2713") == 7


def test_a_cast_leaves_the_int8_weights_int8():
    """astype(float64) on a quantized model casts its scales and biases, never W_q (the hook
    was named _map_arrays and never called before)."""
    q = dl.quantize(dl.MLP([4, 8, 3], seed=0),
                    np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32))
    q.astype(np.float64)
    for layer in q.layers:
        if isinstance(layer, dl.QuantLinear):
            assert layer.buffers["W_q"].dtype == np.int8
            assert layer.buffers["W_scale"].dtype == np.float64
