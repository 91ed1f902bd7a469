"""ONNX export checked against onnxruntime (every model the course trains, fused models, a
model with Dropout and BatchNorm in evaluation mode), and the `dlcourse predict` and
`dlcourse export` commands."""
import subprocess
import sys

import numpy as np
import pytest

import dlcourse as dl
from dlcourse.export import IR_VERSION, OPSET, ExportError, export_onnx, register_exporter

onnx = pytest.importorskip("onnx", reason="ONNX export needs onnx: pip install -e '.[serve]'")
ort = pytest.importorskip("onnxruntime", reason="needs onnxruntime: pip install -e '.[serve]'")


def _trained_batchnorm(model, image_size=(8, 8)):
    """Give BatchNorm layers running statistics that are not 0 and 1 (a few training passes)."""
    gen = np.random.default_rng(1)
    model.train()
    for _ in range(3):
        model.forward((gen.standard_normal((16, 1, *image_size)) * 2 + 0.5).astype(np.float32))
    return model


MODELS = {  # name -> (model maker, one sample's shape)
    "mlp": (lambda: dl.MLP([64, 32, 10], seed=0), (64,)),
    "mlp-dropout": (lambda: dl.MLP([64, 16, 16, 10], dropout=0.5, seed=0), (64,)),
    "mlp-tanh": (lambda: dl.MLP([64, 16, 10], activation="tanh", seed=0), (64,)),
    "mlp-sigmoid-1-output": (lambda: dl.MLP([2, 8, 1], activation="sigmoid", seed=0), (2,)),
    "cnn": (lambda: dl.CNN(1, (8, 8), 10, channels=(4, 8), dropout=0.25, seed=0), (1, 8, 8)),
    "cnn-batchnorm": (lambda: _trained_batchnorm(dl.CNN(1, (8, 8), 10, channels=(4, 8),
                                                        batchnorm=True, seed=0)), (1, 8, 8)),
    "cnn-rgb-stride": (lambda: dl.Sequential(dl.Conv2d(3, 4, 3, stride=2, padding=1, seed=0),
                                             dl.ReLU(), dl.MaxPool2d(2), dl.Flatten(),
                                             dl.Linear(4 * 4 * 4, 5, seed=1)), (3, 16, 16)),
    # MNIST-1D's CNN: a 1x40 signal, 1x5 kernels, 1x2 pooling (per-axis sizes)
    "cnn-mnist1d": (lambda: _trained_batchnorm(dl.CNN(1, (1, 40), 10, channels=(4, 8),
                                                      batchnorm=True, kernel_size=(1, 5),
                                                      pool=(1, 2), seed=0), (1, 40)), (1, 1, 40)),
    "conv-per-axis": (lambda: dl.Sequential(dl.Conv2d(2, 3, (3, 2), stride=(2, 1),
                                                      padding=(1, 0), seed=0),
                                            dl.ReLU(), dl.MaxPool2d((2, 1)), dl.Flatten(),
                                            dl.Linear(3 * 1 * 5, 4, seed=1)), (2, 6, 6)),
    # lesson 07b: LayerNorm (LayerNormalization), Residual (its branches, then Add), ResNet
    "mlp-layernorm": (lambda: _random_affine(dl.Sequential(
        dl.Linear(64, 16, seed=0), dl.LayerNorm(16), dl.ReLU(), dl.Linear(16, 10, seed=1))), (64,)),
    "layernorm-tuple": (lambda: _random_affine(dl.Sequential(
        dl.LayerNorm((1, 8, 8)), dl.Conv2d(1, 2, 3, seed=0), dl.LayerNorm((6, 6)), dl.Flatten(),
        dl.Linear(2 * 6 * 6, 4, seed=1))), (1, 8, 8)),
    "residual-mlp": (lambda: dl.Sequential(
        dl.Linear(64, 16, seed=0), dl.ReLU(),
        dl.Residual(dl.Sequential(dl.Linear(16, 16, seed=1), dl.ReLU(), dl.Linear(16, 16, seed=2))),
        dl.Residual(dl.Linear(16, 8, seed=3), shortcut=dl.Linear(16, 8, seed=4)),
        dl.Linear(8, 10, seed=5)), (64,)),
    "residual-alone": (lambda: dl.Residual(dl.Sequential(dl.Linear(5, 5, seed=0), dl.Tanh())), (5,)),
    "resnet": (lambda: _trained_batchnorm(dl.ResNet(1, 10, widths=(4, 8), blocks=(1, 1), seed=0)),
               (1, 8, 8)),
}

FUSES = {"mlp", "mlp-dropout", "cnn", "cnn-rgb-stride", "conv-per-axis",
         "residual-mlp"}   # the others have no Linear/Conv2d->ReLU (at the top level)


def _random_affine(model):
    """LayerNorm's gamma and beta away from 1 and 0, so the export must carry them."""
    gen = np.random.default_rng(2)
    for layer in model.layers:
        if isinstance(layer, dl.LayerNorm):
            for k, p in layer.params.items():
                p[...] = gen.standard_normal(p.shape) * 0.5 + (k == "gamma")
    return model


def onnx_outputs(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input": x})[0]


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("name", list(MODELS))
def test_onnxruntime_matches_dlcourse(name, fused, tmp_path):
    make, shape = MODELS[name]
    model = make()
    if fused:
        model = dl.fuse(model)
        fusions = any(isinstance(l, (dl.LinearReLU, dl.Conv2dReLU)) for l in model.layers)
        assert fusions == (name in FUSES)
    model.train()                               # exported as in evaluation mode all the same
    path = export_onnx(model, tmp_path / "m.onnx", shape)
    proto = onnx.load(str(path))
    onnx.checker.check_model(proto, full_check=True)
    assert proto.ir_version == IR_VERSION and proto.opset_import[0].version == OPSET
    assert model.training, "export must give the model back in the mode it had"
    x = np.random.default_rng(0).standard_normal((7,) + shape).astype(np.float32)
    model.eval()
    expected = dl.to_numpy(model.forward(x))
    for batch in (x, x[:1]):                    # the batch axis is dynamic
        np.testing.assert_allclose(onnx_outputs(path, batch), expected[:len(batch)],
                                   atol=1e-5, rtol=1e-5)


def test_layernorm_residual_and_pooling_export_as_their_onnx_nodes(tmp_path):
    """LayerNorm is one LayerNormalization over the last axes, a Residual its branches and an
    Add (the identity shortcut reads the block's input), GlobalAvgPool2d a GlobalAveragePool."""
    make, shape = MODELS["layernorm-tuple"]
    proto = onnx.load(str(export_onnx(make(), tmp_path / "ln.onnx", shape)))
    norms = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    axes = [onnx.helper.get_attribute_value(a) for n in norms for a in n.attribute if a.name == "axis"]
    assert axes == [-3, -2]
    make, shape = MODELS["resnet"]
    proto = onnx.load(str(export_onnx(make(), tmp_path / "resnet.onnx", shape)))
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("Add") == 2 and ops.count("GlobalAveragePool") == 1
    identity_add = next(n for n in proto.graph.node if n.op_type == "Add")
    block_input = next(n for n in proto.graph.node if n.name.startswith("3.block.0."))
    assert identity_add.input[0] == block_input.input[0]      # x + block(x)
    assert any(n.name.startswith("5.shortcut.0.") for n in proto.graph.node)   # the projection


def test_a_model_on_either_device_exports(device, tmp_path):
    model = dl.CNN(1, (8, 8), 10, channels=(4, 8), batchnorm=True, seed=0).to(device)
    path = export_onnx(model, tmp_path / "m.onnx", (1, 8, 8))
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    model.eval()
    expected = dl.to_numpy(model.forward(dl.to_device(x, device)))
    np.testing.assert_allclose(onnx_outputs(path, x), expected, atol=1e-5)


def test_a_layer_without_an_onnx_pattern_is_named(tmp_path):
    class Swish(dl.Layer):
        def forward(self, x):
            return x / (1 + np.exp(-x))

    model = dl.Sequential(dl.Linear(4, 3, seed=0), Swish())
    with pytest.raises(ExportError, match=r"cannot export Swish to ONNX.*register_exporter"):
        export_onnx(model, tmp_path / "m.onnx", (4,))
    assert not (tmp_path / "m.onnx").exists()


def test_register_exporter_adds_a_layer_type(tmp_path):
    class Double(dl.Layer):
        def forward(self, x):
            return 2 * x

    @register_exporter(Double)
    def _double(layer, g, x):
        return g.node("Mul", [x, g.weight("two", np.array(2.0))])

    model = dl.Sequential(dl.Linear(4, 3, seed=0), Double())
    path = export_onnx(model, tmp_path / "m.onnx", (4,))
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(onnx_outputs(path, x), model.forward(x), atol=1e-6)


@pytest.mark.parametrize("shape, words", [((63,), "does not take samples of shape"),
                                          ((0,), "positive sizes"), ("abc", "one sample")])
def test_a_wrong_input_shape_says_so(shape, words, tmp_path):
    with pytest.raises(ExportError, match=words):
        export_onnx(dl.MLP([64, 10], seed=0), tmp_path / "m.onnx", shape)


# ======================================================================================
# dlcourse predict / dlcourse export
# ======================================================================================
def cli(*args):
    return subprocess.run([sys.executable, "-m", "dlcourse", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A CNN checkpoint for 8x8 images and some test digits."""
    folder = tmp_path_factory.mktemp("cli")
    model = dl.CNN(1, (8, 8), 10, channels=(4, 8), batchnorm=True, seed=0)
    path = dl.save(_trained_batchnorm(model), folder / "cnn.npz")
    X = dl.data.load_digits("test", flat=False)[0][:3]
    return path, X, folder


def test_predict_cli_prints_classes_and_probabilities(saved):
    path, X, folder = saved
    np.save(folder / "x.npy", X)
    r = cli("predict", path, folder / "x.npy", "--top", "2")
    assert r.returncode == 0, r.stderr
    classes, probs = dl.inference.predict_proba(dl.load(path), X)
    lines = r.stdout.strip().splitlines()[1:]
    assert len(lines) == 3
    for line, c, p in zip(lines, classes, probs):
        assert f"class {c} " in line and f"{c}: {p[c]:.4f}" in line
    flat = folder / "flat.npz"
    np.savez(flat, X=X.reshape(3, 64))                   # flat inputs work too
    assert cli("predict", path, flat, "--top", "2").stdout == r.stdout


def test_predict_cli_reads_an_image(saved):
    from PIL import Image
    path, X, folder = saved
    # a dark digit on white, 4x larger than the model's input: inverted and resized
    picture = ((1 - np.kron(X[0, 0], np.ones((4, 4)))) * 255).astype(np.uint8)
    Image.fromarray(picture).save(folder / "digit.png")
    r = cli("predict", path, folder / "digit.png")
    assert r.returncode == 0, r.stderr
    expected = int(dl.inference.predict_proba(dl.load(path), X[:1])[0][0])
    assert f"0: class {expected} " in r.stdout


def test_predict_cli_wrong_shape_is_one_line(saved):
    path, X, folder = saved
    np.save(folder / "bad.npy", np.zeros((2, 5), np.float32))
    r = cli("predict", path, folder / "bad.npy")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "(N, 1, 8, 8)" in r.stderr and "(2, 5)" in r.stderr


def test_export_cli_writes_a_checked_onnx_file(saved):
    path, X, folder = saved
    out = folder / "cnn.onnx"
    r = cli("export", path, out)
    assert r.returncode == 0, r.stderr
    assert "onnxruntime matches dlcourse" in r.stdout
    model = dl.load(path).eval()
    np.testing.assert_allclose(onnx_outputs(out, X), model.forward(X), atol=1e-5)


def test_the_onnx_benchmark_times_the_same_model(benchmark_script, tmp_path):
    bench = benchmark_script("onnx_inference")
    run_dl, run_ort, diff = bench.engines("cnn", 2, 1, tmp_path)
    assert diff < 1e-5
    np.testing.assert_allclose(run_ort()[0], run_dl(), atol=1e-5)
