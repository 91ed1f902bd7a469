"""The older surfaces held to the core layers' standard (issue 28, item 10): a factory or helper
given the wrong type, a value out of range or a non-finite number says which argument, what it
got and the likely fix; never a NumPy or Python internal error, never a silently wrong number.

Each test names the case of the issue it covers; each failed on the code before the fix.
"""
import importlib

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli, data
from dlcourse.conv import im2col
from dlcourse.student import write_student_notebooks

playground_module = importlib.import_module("dlcourse.widgets.playground")


# --------------------------------------------------------------------------------------
# Models: CNN(channels=16), MLP(activation=['relu']), model.astype(np.int32)
# --------------------------------------------------------------------------------------
def test_cnn_channels_an_int_where_a_pair_is_expected():
    # was: TypeError "'int' object is not iterable"
    with pytest.raises(TypeError, match=r"CNN\(channels=\.\.\.\) takes two channel counts "
                                        r"\(c1, c2\).*got 16\. E\.g\. channels=\(16, 32\), or "
                                        r"channels=\(16, 16\)"):
        dl.CNN(channels=16)
    with pytest.raises(TypeError, match=r"got '16'"):
        dl.CNN(channels="16")
    with pytest.raises(ValueError, match=r"two channel counts.*got \[8, 16, 32\]"):
        dl.CNN(channels=[8, 16, 32])
    with pytest.raises(TypeError, match=r"CNN\(channels=\.\.\.\) must be a whole number"):
        dl.CNN(channels=(8, 2.5))
    assert dl.CNN(channels=np.array([4, 8]), image_size=8).channels == [4, 8]


@pytest.mark.parametrize("activation, error", [(["relu"], TypeError), (None, TypeError),
                                               ("gelu", ValueError)])
def test_mlp_activation_must_be_one_name(activation, error):
    # was: TypeError "unhashable type: 'list'"
    with pytest.raises(error, match=r"MLP\(activation=\.\.\.\) takes one name, one of "
                                    r"\['relu', 'sigmoid', 'tanh'\].*got "
                                    + repr(activation).replace("[", r"\[").replace("]", r"\]")
                                    + r"\. E\.g\. activation='relu'"):
        dl.MLP([4, 3, 2], activation=activation)


@pytest.mark.parametrize("dtype", [np.int32, "int8", bool, "fp32"])
def test_astype_refuses_a_dtype_that_is_not_floating(dtype):
    # was: accepted; forward then said "Convert the data with x.astype(np.int32)"
    model = dl.MLP([4, 3, 2], seed=0)
    before = {k: v.copy() for k, v in model.state_dict().items()}
    with pytest.raises(TypeError, match=r"MLP\.astype\(dtype\) takes a floating-point type "
                                        r"\(np\.float32, np\.float64 or np\.float16\), got "
                                        r".*dl\.quantize"):
        model.astype(dtype)
    assert all(v.dtype == np.float32 and np.array_equal(v, before[k])
               for k, v in model.state_dict().items()), "a refused cast changes nothing"
    assert model.astype(np.float64).dtype == np.float64


# --------------------------------------------------------------------------------------
# load_state_dict: lists, unknown keys
# --------------------------------------------------------------------------------------
def test_load_state_dict_takes_lists_of_numbers():
    # was: AttributeError "'list' object has no attribute 'shape'"
    model, other = dl.MLP([4, 3, 2], seed=0), dl.MLP([4, 3, 2], seed=1)
    other.load_state_dict({k: v.tolist() for k, v in model.state_dict().items()})
    for k, v in model.state_dict().items():
        assert other.state_dict()[k].dtype == np.float32
        np.testing.assert_array_equal(other.state_dict()[k], v)


def test_load_state_dict_refuses_what_is_not_numbers_naming_the_entry():
    layer = dl.Linear(2, 3)
    with pytest.raises(TypeError, match=r"Linear: the state's 'W' must be an array of numbers "
                                        r".*got str.*np\.asarray"):
        layer.load_state_dict({"W": "weights", "b": np.zeros(3)})
    with pytest.raises(TypeError, match=r"layer 0 \(Linear, keys 0\.\*\): Linear: the state's "
                                        r"'W' must be an array of numbers.*got list"):
        dl.MLP([2, 3]).load_state_dict({"0.W": [[1.0, 2.0, 3.0], [4.0]], "0.b": [0.0] * 3})


def test_load_state_dict_refuses_an_unknown_key_naming_the_known_ones():
    # was: a layer skipped an entry it did not know without a word
    layer = dl.Linear(2, 3)
    W = layer.params["W"].copy()
    with pytest.raises(KeyError, match=r"Linear: the state has entries this layer does not: "
                                       r"\['bias'\]\. Its entries are "
                                       r"\['W', 'b'\]"):
        layer.load_state_dict({"W": np.ones((2, 3)), "b": np.zeros(3), "bias": np.zeros(3)})
    np.testing.assert_array_equal(layer.params["W"], W)    # refused before anything is copied
    with pytest.raises(KeyError, match=r"entries this model does not: \['0\.bias'\]\. Did you "
                                       r"mean '0\.b'\? The model's entries are \['0\.W', '0\.b'"):
        model = dl.MLP([4, 3, 2], seed=0)
        model.load_state_dict({**model.state_dict(), "0.bias": np.zeros(3)})
    with pytest.raises(KeyError, match=r"\.\.\.\] \(62 in all\)"):   # a long list is cut
        dl.ResNet().load_state_dict({"x": np.zeros(1)})


# --------------------------------------------------------------------------------------
# softmax given a list
# --------------------------------------------------------------------------------------
def test_softmax_takes_a_list_as_a_learner_expects():
    # was: AttributeError "'list' object has no attribute 'max'"
    p = dl.softmax([2.0, 1.0, 0.1])
    np.testing.assert_allclose(p, np.exp([2.0, 1.0, 0.1]) / np.exp([2.0, 1.0, 0.1]).sum())
    np.testing.assert_allclose(dl.softmax([[1, 2], [3, 3]]), [[0.26894142, 0.73105858],
                                                              [0.5, 0.5]])
    np.testing.assert_allclose(np.exp(dl.log_softmax((0.0, 0.0))), [0.5, 0.5])


@pytest.mark.parametrize("logits, error, match", [
    ("2 1 0", TypeError, r"softmax expects an array of scores \(logits\).*got str"),
    (None, TypeError, r"got NoneType"),
    ([[1.0], [2.0, 3.0]], TypeError, r"not a rectangular list of numbers"),
    (["a", "b"], TypeError, r"got \['a', 'b'\]: not a rectangular list of numbers"),
    (np.array(["a", "b"]), TypeError, r"real-valued scores.*dtype <U1"),
    (np.float32(2.0), ValueError, r"needs at least one class there; got shape \(\)"),
    ([], ValueError, r"got shape \(0,\)"),
])
def test_softmax_refuses_what_has_no_scores(logits, error, match):
    with pytest.raises(error, match=match):
        dl.softmax(logits)


# --------------------------------------------------------------------------------------
# im2col on a 2-D array
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, hint", [((5, 5), r"\(2-D\)\. One one-channel image \(H, W\) "
                                                  r"is x\[None, None\]"),
                                         ((1, 5, 5), r"\(3-D\)\. One image \(C, H, W\) is "
                                                     r"x\[None\]")])
def test_im2col_says_how_to_make_images(shape, hint):
    # was: ValueError "not enough values to unpack (expected 4, got 2)"
    with pytest.raises(ValueError, match=r"im2col expects images of shape \(N, C, H, W\) "
                                         r"\(4-D\), got shape .*" + hint):
        im2col(np.zeros(shape, np.float32), 3, 3)
    assert im2col(np.zeros((1, 1) + shape[-2:], np.float32), 3, 3).shape == (9, 9)


def test_im2col_checks_its_sizes():
    x = np.zeros((1, 1, 5, 5), np.float32)
    with pytest.raises(TypeError, match=r"im2col expects an array of images.*got list"):
        im2col(x.tolist(), 3, 3)
    with pytest.raises(TypeError, match=r"im2col\(KH=\.\.\.\) must be a whole number >= 1, "
                                        r"got 2\.5"):
        im2col(x, 2.5, 3)
    with pytest.raises(ValueError, match=r"im2col\(stride=\.\.\.\) must be a whole number >= 1"):
        im2col(x, 3, 3, stride=0)


# --------------------------------------------------------------------------------------
# DLCOURSE_DATA pointing at a file
# --------------------------------------------------------------------------------------
def test_data_folder_that_is_a_file_is_named(monkeypatch, tmp_path):
    # was: NotADirectoryError "[Errno 20] Not a directory: '.../README.md/mnist'"
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    monkeypatch.setenv("DLCOURSE_DATA", str(a_file))
    with pytest.raises(data.DownloadError, match=r"DLCOURSE_DATA is set to .*notes\.txt, which "
                                                 r"is not a folder: .*unset it"):
        data.load_mnist(progress=False)
    monkeypatch.setenv("DLCOURSE_DATA", str(a_file / "sub"))
    with pytest.raises(data.DownloadError, match=r"\(it would be inside the file .*notes\.txt\)"):
        data.data_dir()
    monkeypatch.setenv("DLCOURSE_DATA", str(tmp_path / "new" / "folder"))
    assert data.data_dir() == tmp_path / "new" / "folder"       # not there yet: fine


def test_data_folder_that_is_a_file_on_the_command_line(monkeypatch, tmp_path, capsys):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    monkeypatch.setenv("DLCOURSE_DATA", str(a_file))
    assert cli.main(["train", "--dataset", "mnist", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert "DLCOURSE_DATA is set to" in err and "DLCOURSE_DEBUG" not in err and "\n" not in err


# --------------------------------------------------------------------------------------
# Standardizer and batches (fixed before this issue was filed: held here as well)
# --------------------------------------------------------------------------------------
def test_standardizer_computes_integer_data_in_floating_point():
    X = np.array([[1, 2], [3, 5], [6, 9]])
    Z = data.Standardizer().fit_transform(X)
    assert Z.dtype == np.float32
    np.testing.assert_allclose(Z, (X - X.mean(0)) / X.std(0), rtol=1e-6)
    np.testing.assert_allclose(data.Standardizer().fit_transform(X.tolist()), Z, rtol=1e-6)


def test_batches_take_python_lists_of_floats():
    got = list(data.batches([0.5, 1.5, 2.5], [0.0, 1.0, 1.0], 2, shuffle=False))
    assert [xb.tolist() for xb, _ in got] == [[0.5, 1.5], [2.5]]
    assert [yb.tolist() for _, yb in got] == [[0.0, 1.0], [1.0]]


# --------------------------------------------------------------------------------------
# Perceptron.fit on NaN data
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_perceptron_refuses_data_that_is_not_finite(bad):
    # was: fit "trained" (a NaN compares False, so the sample counted as right)
    X = np.array([[0.0, 1.0], [1.0, 2.0], [bad, 0.0]])
    perceptron = dl.Perceptron(2)
    with pytest.raises(ValueError, match=r"Perceptron got X with NaN or inf values \(first in "
                                         r"row 2\).*~np\.isfinite\(X\)"):
        perceptron.fit(X, np.array([0, 1, 1]))
    with pytest.raises(ValueError, match=r"first in row 2"):
        perceptron.predict(X)


# --------------------------------------------------------------------------------------
# playground(units=4.5)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("settings, words", [
    (dict(units=4.5), r"units must be a whole number from 1 to 64 .*got 4\.5"),
    (dict(hidden_layers=1.5), r"hidden_layers must be a whole number from 0 to 6 .*got 1\.5"),
    (dict(epochs=float("nan")), r"epochs must be a whole number.*got nan"),
    (dict(seed=True), r"seed must be a whole number.*got True"),
])
def test_playground_refuses_a_fraction_where_a_slider_takes_whole_numbers(settings, words):
    # was: units=4.5 became 4 without a word (the integer slider rounds it down)
    pytest.importorskip("ipywidgets", reason="the playground needs ipywidgets (the course "
                                             "extra: pip install -e '.[course]')")
    with pytest.raises(ValueError, match=words):
        dl.widgets.playground(**settings)
    panel = dl.widgets.playground(units=8.0, epochs=np.int64(5))
    assert panel.controls["units"].value == 8 and panel.controls["epochs"].value == 5


def test_playground_build_model_refuses_a_fraction():
    with pytest.raises(TypeError, match=r"build_model\(units=\.\.\.\) must be a whole number "
                                        r">= 1, got 4\.5"):
        playground_module.build_model(2, 2, 1, 4.5)
    with pytest.raises(ValueError, match=r"build_model\(hidden_layers=\.\.\.\) must be a whole "
                                         r"number >= 0, got -1"):
        playground_module.build_model(2, 2, -1, 4)
    assert playground_module.build_model(2, 3, 2, 4.0).sizes == [2, 4, 4, 3]


# --------------------------------------------------------------------------------------
# student-notebooks: every error names its file
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, reason", [
    (b'{"cells": [\n', "NotJSONError"),
    (b"\xff\xfe", "UnicodeDecodeError"),
    (b'{"cells": 5, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "TypeError"),
])
def test_student_notebooks_name_a_notebook_that_cannot_be_read(tmp_path, capsys, content,
                                                               reason):
    # was: "Notebook does not appear to be JSON", "'int' object is not iterable", ... (no file)
    source = tmp_path / "src"
    source.mkdir()
    (source / "03_damaged.ipynb").write_bytes(content)
    with pytest.raises(ValueError, match=r"03_damaged\.ipynb is not a notebook that can be "
                                         rf"read \({reason}: .*Restore it"):
        write_student_notebooks(source, tmp_path / "out")
    assert not (tmp_path / "out").exists(), "nothing is written when one notebook fails"
    assert cli.main(["student-notebooks", str(tmp_path / "out"), "--source", str(source)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dlcourse student-notebooks: error: ") and "03_damaged.ipynb" in err
    assert "DLCOURSE_DEBUG" not in err and "\n" not in err


def test_student_notebooks_name_an_output_folder_that_is_a_file(tmp_path, capsys):
    # was: "[Errno 17] File exists: '...'" (FileExistsError; set DLCOURSE_DEBUG=1 ...)
    source = tmp_path / "src"
    source.mkdir()
    (source / "00_x.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, '
                                       '"nbformat_minor": 5}')
    a_file = tmp_path / "afile"
    a_file.write_text("mine")
    with pytest.raises(NotADirectoryError, match=r"The output folder .*afile is not a folder: "):
        write_student_notebooks(source, a_file)
    with pytest.raises(NotADirectoryError, match=r"afile.sub is not a folder \(it would be "
                                                 r"inside the file .*afile\)"):
        write_student_notebooks(source, a_file / "sub")
    assert a_file.read_text() == "mine"
    assert cli.main(["student-notebooks", str(a_file), "--source", str(source)]) == 1
    err = capsys.readouterr().err.strip()
    assert "afile is not a folder" in err and "DLCOURSE_DEBUG" not in err


# --------------------------------------------------------------------------------------
# fit(seed='a'), confusion_matrix with one huge label
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed, error", [("a", TypeError), (2.5, TypeError), (True, TypeError),
                                         (float("nan"), TypeError), (-1, ValueError)])
def test_fit_seed_must_be_a_whole_number(seed, error):
    # was: TypeError "SeedSequence expects int or sequence of ints for entropy not a" (or,
    # for True, a run seeded with 1)
    model = dl.MLP([4, 2], seed=0)
    X, y = np.zeros((8, 4), np.float32), np.zeros(8, np.int64)
    with pytest.raises(error, match=r"fit\(seed=\.\.\.\) must be a whole number >= 0, got "
                                    + repr(seed).replace(".", r"\.")):
        dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1), X, y, epochs=1,
               seed=seed, progress=False)
    history = dl.fit(model, dl.SoftmaxCrossEntropy(), dl.SGD(model, lr=0.1), X, y, epochs=1,
                     seed=np.int64(3), progress=False)
    assert len(history.train_loss) == 1


@pytest.mark.parametrize("y_true, y_pred, which", [([0, 1], [0, 10**12], "y_pred"),
                                                   ([0, 10**6], [0, 1], "y_true")])
def test_confusion_matrix_refuses_a_table_too_large_naming_the_label(y_true, y_pred, which):
    # was: OverflowError "Python int too large to convert to C long", or an attempt to
    # allocate 8 TB for a 10**6 x 10**6 table
    huge = max(y_true + y_pred)
    with pytest.raises(ValueError, match=rf"confusion_matrix: {which} holds the label {huge}, so "
                                         rf"the table would have {huge + 1} classes.*0\.\.K-1"):
        dl.confusion_matrix(np.array(y_true), np.array(y_pred))
    with pytest.raises(ValueError, match=r"num_classes=1000001"):
        dl.confusion_matrix(np.array([0, 1]), np.array([1, 0]), num_classes=10**6 + 1)
    assert dl.confusion_matrix(np.array([0, 2]), np.array([2, 2])).tolist() == [
        [0, 0, 1], [0, 0, 0], [0, 0, 1]]
