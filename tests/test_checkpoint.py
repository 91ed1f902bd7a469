"""dl.save / dl.load: round trips, damaged and altered files, no pickle, atomic writes."""
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest

from dlcourse import backend
from dlcourse import checkpoint as ckpt
from dlcourse import checkpoint_format
from dlcourse.checkpoint import CheckpointError, load, save
from dlcourse.layers import Linear, ReLU, Sequential
from dlcourse.losses import SoftmaxCrossEntropy
from dlcourse.models import CNN, MLP, Perceptron
from dlcourse.optim import Adam
from dlcourse.train import fit


def assert_same_state(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sorted(sa) == sorted(sb)
    for k in sa:
        assert sa[k].dtype == sb[k].dtype, k
        assert np.array_equal(backend.to_numpy(sa[k]), backend.to_numpy(sb[k])), k


@pytest.fixture
def trained_cnn():
    """A CNN with BatchNorm and Dropout after a few steps, so the running statistics
    (buffers) are not their initial values."""
    gen = np.random.default_rng(0)
    X = gen.random((32, 1, 8, 8), dtype=np.float32)
    y = gen.integers(0, 4, 32)
    model = CNN(1, 8, 4, channels=(3, 5), batchnorm=True, dropout=0.2, seed=0)
    fit(model, SoftmaxCrossEntropy(), Adam(model, lr=0.01), X, y, epochs=1, batch_size=8,
        seed=0, progress=False)
    return model, X


def test_mlp_round_trip(tmp_path):
    model = MLP([4, 8, 3], activation="tanh", dropout=0.1, seed=0)
    path = save(model, tmp_path / "mlp.npz")
    assert path == tmp_path / "mlp.npz" and path.is_file()
    loaded = load(path)
    assert type(loaded) is MLP and loaded.get_config() == model.get_config()
    assert_same_state(model, loaded)
    x = np.random.default_rng(1).random((5, 4), dtype=np.float32)
    assert np.array_equal(model.eval().forward(x), loaded.eval().forward(x))
    assert loaded.device == "cpu"


def test_cnn_with_batchnorm_round_trip_keeps_the_buffers(tmp_path, trained_cnn):
    model, X = trained_cnn
    assert not np.all(model.buffers["1.running_mean"] == 0)   # training moved them
    loaded = load(save(model, tmp_path / "cnn.npz"))
    assert type(loaded) is CNN and loaded.get_config() == model.get_config()
    assert_same_state(model, loaded)
    assert np.array_equal(model.eval().forward(X), loaded.eval().forward(X))


def test_plain_sequential_and_float64_round_trip(tmp_path):
    model = Sequential(Linear(3, 4, seed=0), ReLU(), Linear(4, 2, seed=1)).astype(np.float64)
    loaded = load(save(model, tmp_path / "seq.npz"))
    assert type(loaded) is Sequential and len(loaded) == 3
    assert loaded.dtype == np.float64
    assert_same_state(model, loaded)


def test_per_axis_settings_and_init_round_trip(tmp_path):
    """Per-axis stride, padding, kernel and pool sizes and Linear's init are in the config:
    a 1-D CNN and a hand-built Sequential come back as they were saved."""
    from dlcourse.conv import Conv2d, MaxPool2d
    from dlcourse.layers import Flatten
    x = np.random.default_rng(2).standard_normal((3, 1, 1, 12)).astype(np.float32)
    for model in (CNN(1, (1, 12), 3, channels=(2, 3), kernel_size=(1, 3), pool=(1, 2), seed=0),
                  Sequential(Conv2d(1, 2, (1, 5), stride=(1, 2), padding=(0, 2), seed=0),
                             MaxPool2d((1, 2), stride=(1, 1)), Flatten(), Linear(10, 3, init=0.05))):
        loaded = load(save(model, tmp_path / "m.npz"))
        assert [l.get_config() for l in loaded.layers] == [l.get_config() for l in model.layers]
        assert loaded.get_config() == model.get_config()
        assert np.array_equal(model.eval().forward(x), loaded.eval().forward(x))
    assert loaded[0].stride == (1, 2) and loaded[1].stride == (1, 1) and loaded[3].init == 0.05


@pytest.mark.skipif(os.name != "posix", reason="file modes and the umask are POSIX")
def test_a_saved_file_gets_the_usual_permissions(tmp_path):
    """The atomic write must not leave a private (0600) file where a plain write would not."""
    umask = os.umask(0o022)
    try:
        path = save(MLP([3, 2], seed=0), tmp_path / "m.npz")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644


def test_npz_is_added_when_the_path_has_no_suffix(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "model")
    assert path.name == "model.npz" and path.is_file()
    assert isinstance(load(tmp_path / "model"), MLP)


def test_the_file_holds_the_architecture_and_versions(tmp_path):
    path = save(MLP([2, 3, 2], seed=0), tmp_path / "m.npz")
    with zipfile.ZipFile(path) as archive:                     # any zip tool reads it
        meta = json.loads(archive.read(ckpt.META_FILE).decode("utf-8"))
        names = set(archive.namelist())
    from dlcourse import __version__
    assert meta["architecture"] == {"type": "MLP", "config": {"sizes": [2, 3, 2],
                                                              "activation": "relu",
                                                              "dropout": 0.0, "init": "he"}}
    assert meta["format_version"] == 3 < ckpt.FORMAT_VERSION   # 4 only when it holds masks
    assert meta["dlcourse_version"] == __version__
    assert len(meta["sha256"]) == 64
    assert names == {ckpt.META_FILE, ckpt.ARRAYS_FILE}         # two entries, compressed
    assert [entry[:2] for entry in meta["arrays"]] == [["0.W", "<f4"], ["0.b", "<f4"],
                                                       ["2.W", "<f4"], ["2.b", "<f4"]]
    with zipfile.ZipFile(path) as archive:
        assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
    assert save(MLP([2, 3, 2], seed=0), tmp_path / "again.npz").read_bytes() == path.read_bytes()


def _save_format_1(model, path):
    """Write ``model`` as dlcourse wrote checkpoints before issue 19 (format 1): one .npy
    entry per array, the JSON as a NumPy unicode string, not compressed."""
    arrays = {k: backend.to_numpy(a) for k, a in model.state_dict().items()}
    architecture = {"type": type(model).__name__, "config": model.get_config()}
    meta = {"format": ckpt.FORMAT_NAME, "format_version": 1, "dlcourse_version": "0.1.0",
            "architecture": architecture, "sha256": checkpoint_format.digest(architecture, arrays)}
    np.savez(path, **{ckpt.META_KEY: np.array(json.dumps(meta))}, **arrays)
    return path


def test_a_checkpoint_in_the_old_layout_still_loads(tmp_path, trained_cnn):
    for model in (MLP([4, 8, 3], seed=0), trained_cnn[0]):
        old = _save_format_1(model, tmp_path / "old.npz")
        assert_same_state(load(old), model)
        new = save(model, tmp_path / "new.npz")
        assert new.stat().st_size < old.stat().st_size
        assert_same_state(load(new), model)
    arrays = checkpoint_format.read(old)[1]
    arrays["0.W"] = arrays["0.W"] + 1                    # and its digest is still checked
    meta = json.loads(str(np.load(old)[ckpt.META_KEY]))
    np.savez(old, **{ckpt.META_KEY: np.array(json.dumps(meta))}, **arrays)
    with pytest.raises(CheckpointError, match="SHA-256"):
        load(old)


def test_a_small_int8_model_file_is_about_the_size_of_its_arrays(tmp_path):
    """The fixed part (metadata, zip entries) stays small: a quantized digits-size MLP's file
    is under 30 % of the float32 one (issue 19's target)."""
    import dlcourse as dl
    model = MLP([64, 128, 10], seed=0)
    X = np.random.default_rng(0).random((64, 64), dtype=np.float32)
    q = dl.quantize(model, X)
    fp32 = save(model, tmp_path / "f.npz").stat().st_size
    int8 = save(q, tmp_path / "q.npz").stat().st_size
    assert int8 < 0.30 * fp32, (int8, fp32)
    np.testing.assert_array_equal(dl.to_numpy(load(tmp_path / "q.npz").forward(X)),
                                  dl.to_numpy(q.forward(X)))


@pytest.mark.parametrize("version", [3, 2])
def test_a_malformed_index_is_refused_before_copying(tmp_path, version):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    meta, arrays = checkpoint_format.read(path)
    blob = checkpoint_format.pack(meta, arrays)[ckpt.ARRAYS_FILE]
    for index, message in ((None, "malformed"), ([["0.W", "<f4", [10 ** 12]]], "declares"),
                           ([["0.W", "|O", [1]]], "real numbers"), ([["0.W", "<c8", [1]]], "real numbers"),
                           ([["__x", "<f4", [1]]], "reserved"), ([["0.W", "<f4", [-1]]], "shape"),
                           ([["0.W", "<f4", [2, 2]], ["0.b", "<f4", [3]]], "declares")):
        text = json.dumps({**meta, "arrays": index}).encode()
        _write(path, {ckpt.META_FILE: text, ckpt.ARRAYS_FILE: blob}, version)
        with pytest.raises(CheckpointError, match=message):
            load(path)


def test_a_format_2_file_still_loads(tmp_path):
    """Format 2 (dlcourse before this one): the same two parts as .npy uint8 entries."""
    model = MLP([4, 8, 3], seed=0)
    path = save(model, tmp_path / "m.npz")
    meta, arrays = _rewrite(path, version=2)
    with zipfile.ZipFile(path) as archive:
        assert set(archive.namelist()) == {ckpt.META_KEY + ".npy", ckpt.ARRAYS_KEY + ".npy"}
    assert_same_state(load(path), model)
    arrays["0.W"] = arrays["0.W"] + 1                    # and its digest is still checked
    _rewrite(path, arrays=arrays, version=2)
    with pytest.raises(CheckpointError, match="SHA-256"):
        load(path)


def test_an_extra_entry_is_refused(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("notes.txt", b"hello")
    with pytest.raises(CheckpointError, match=r"notes\.txt.*altered"):
        load(path)


# ======================================================================================
# Damaged, altered and unsafe files
# ======================================================================================
def _write(path, entries, version=3, **extra):
    """Write the two entries ``checkpoint_format.pack`` makes as checkpoint format ``version``: 3, the
    zip save() writes; 2, the same parts as two .npy uint8 entries (with ``extra`` arrays
    beside them, which np.savez pickles when they hold objects)."""
    if version == 3:
        with open(path, "wb") as f:
            checkpoint_format.write_zip(f, entries)
        return
    as_npy = {ckpt.META_KEY: np.frombuffer(entries[ckpt.META_FILE], np.uint8),
              ckpt.ARRAYS_KEY: np.frombuffer(entries[ckpt.ARRAYS_FILE], np.uint8)}
    np.savez_compressed(path, **as_npy, **extra)


def _rewrite(path, arrays=None, meta=None, version=3, **extra):
    """Write a checkpoint like save() does, but with whatever arrays and metadata we choose;
    returns the file's (metadata, arrays) before."""
    old_meta, old = checkpoint_format.read(Path(path))
    arrays = old if arrays is None else arrays
    meta = old_meta if meta is None else meta
    _write(path, checkpoint_format.pack(meta, arrays), version, **extra)
    return old_meta, old


def test_a_flipped_byte_is_detected(tmp_path):
    model = MLP([4, 8, 3], seed=0)
    path = save(model, tmp_path / "m.npz")
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as archive:                 # the middle of the arrays' data
        info = archive.getinfo(ckpt.ARRAYS_FILE)
    local = info.header_offset                             # its local header: 30 bytes, name, extra
    name_len, extra_len = (int.from_bytes(raw[local + k:local + k + 2], "little") for k in (26, 28))
    at = local + 30 + name_len + extra_len + info.compress_size // 2
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="damaged"):
        load(path)
    assert path.read_bytes() == bytes(raw)      # loading never changes the file


def test_an_altered_parameter_fails_the_sha256_check(tmp_path):
    path = save(MLP([4, 8, 3], seed=0), tmp_path / "m.npz")
    _, arrays = _rewrite(path)
    arrays["0.W"] = arrays["0.W"].copy()
    arrays["0.W"][0, 0] += 1.0                   # a valid zip, one weight changed
    _rewrite(path, arrays=arrays)
    with pytest.raises(CheckpointError, match="SHA-256"):
        load(path)


def test_an_altered_architecture_fails_the_sha256_check(tmp_path):
    path = save(MLP([4, 8, 3], seed=0), tmp_path / "m.npz")
    meta, _ = _rewrite(path)
    meta["architecture"]["config"]["activation"] = "tanh"
    _rewrite(path, meta=meta)
    with pytest.raises(CheckpointError, match="SHA-256"):
        load(path)


def test_a_truncated_file_is_refused(tmp_path):
    path = save(MLP([4, 8, 3], seed=0), tmp_path / "m.npz")
    raw = path.read_bytes()
    for cut in (len(raw) // 2, len(raw) - 10, 10):
        path.write_bytes(raw[:cut])
        with pytest.raises(CheckpointError, match="damaged or incomplete"):
            load(path)


def test_arrays_that_do_not_fit_the_architecture(tmp_path):
    path = save(MLP([4, 8, 3], seed=0), tmp_path / "m.npz")
    other = MLP([4, 5, 3], seed=0)               # same names, other shapes
    arrays = other.state_dict()
    meta, _ = _rewrite(path)
    meta["sha256"] = checkpoint_format.digest(meta["architecture"], arrays)   # a consistent digest
    _rewrite(path, arrays=arrays, meta=meta)
    with pytest.raises(CheckpointError, match=r"do not fit.*W should have shape \(4, 8\)"):
        load(path)

    del arrays["2.b"]                            # and a missing entry
    meta["sha256"] = checkpoint_format.digest(meta["architecture"], arrays)
    _rewrite(path, arrays=arrays, meta=meta)
    with pytest.raises(CheckpointError, match="do not fit"):
        load(path)


def test_an_unknown_layer_type_is_refused(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    meta, arrays = _rewrite(path)
    meta["architecture"]["type"] = "NoSuchLayer"
    meta["sha256"] = checkpoint_format.digest(meta["architecture"], arrays)
    _rewrite(path, meta=meta)
    with pytest.raises(CheckpointError, match="NoSuchLayer"):
        load(path)


def test_a_pickled_object_array_is_never_loaded(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    _rewrite(path, version=2, evil=np.array([{"x": 1}], dtype=object))   # np.savez pickles it
    with pytest.raises(CheckpointError, match="pickle"):
        load(path)


def test_save_refuses_an_object_array_instead_of_pickling_it(tmp_path):
    model = MLP([2, 2], seed=0)
    model.layers[0].buffers["notes"] = np.array([{"x": 1}], dtype=object)   # a custom layer's
    with pytest.raises(TypeError, match=r"0\.notes \(object\).*pickle"):
        save(model, tmp_path / "m.npz")
    assert os.listdir(tmp_path) == []


def test_files_that_are_not_checkpoints(tmp_path):
    plain = tmp_path / "plain.npz"
    np.savez(plain, w=np.zeros(3))
    with pytest.raises(CheckpointError, match="not a dlcourse checkpoint"):
        load(plain)
    text = tmp_path / "notes.npz"
    text.write_text("hello")
    with pytest.raises(CheckpointError):
        load(text)
    np.save(tmp_path / "weights.npy", np.zeros(3))
    with pytest.raises(FileNotFoundError, match=r"No checkpoint at .*weights\.npz.*Beside it: "
                                                r"weights\.npy \(dl\.load reads the \.npz"):
        load(tmp_path / "weights")
    with pytest.raises(FileNotFoundError, match="No checkpoint"):
        load(tmp_path / "missing.npz")


def test_a_newer_format_asks_for_an_upgrade(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    meta, _ = _rewrite(path)
    meta["format_version"] = ckpt.FORMAT_VERSION + 1
    _rewrite(path, meta=meta)
    with pytest.raises(CheckpointError, match="upgrade dlcourse"):
        load(path)


# ======================================================================================
# Atomic writes
# ======================================================================================
def test_a_failed_save_leaves_the_old_file_untouched(tmp_path, monkeypatch):
    path = save(MLP([4, 8, 3], seed=0), tmp_path / "m.npz")
    original = path.read_bytes()

    def write_then_fail(file, entries):
        file.write(b"PK\x03\x04 half a zip file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "write_zip", write_then_fail)
    with pytest.raises(OSError, match="No space left"):
        save(MLP([4, 16, 3], seed=1), path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["m.npz"]        # no temporary file left behind
    monkeypatch.undo()
    assert isinstance(load(path), MLP)


def test_save_refuses_what_it_cannot_rebuild(tmp_path):
    with pytest.raises(TypeError, match="np.savez"):
        save(Perceptron(2), tmp_path / "p.npz")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save(MLP([2, 2]), tmp_path / "no" / "such" / "folder.npz")
    assert os.listdir(tmp_path) == []


# ======================================================================================
# Devices
# ======================================================================================
@pytest.mark.gpu
def test_gpu_model_saves_and_loads_on_either_device(tmp_path, trained_cnn):
    model, X = trained_cnn
    path = save(model.to("gpu"), tmp_path / "gpu.npz")
    on_cpu = load(path)
    on_gpu = load(path, device="gpu")
    assert on_cpu.device == "cpu" and on_gpu.device == "gpu"
    assert_same_state(on_cpu, on_gpu)
    assert_same_state(model, on_cpu)


# --------------------------------------------------------------------------------------
# Hostile files: refused with CheckpointError before anything large is allocated
# --------------------------------------------------------------------------------------
def _consistent(path, arrays, meta):
    """Rewrite with a digest that matches, so only the check under test can refuse it."""
    meta["sha256"] = checkpoint_format.digest(meta["architecture"], arrays)
    _rewrite(path, arrays=arrays, meta=meta)


def test_complex_arrays_are_refused(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    meta, arrays = _rewrite(path)
    arrays["0.W"] = arrays["0.W"].astype(np.complex64)
    _consistent(path, arrays, meta)
    with pytest.raises(CheckpointError, match=r"0\.W has dtype complex64.*real numbers"):
        load(path)
    model = MLP([2, 2], seed=0)
    model.layers[0].params["W"] = model.layers[0].params["W"].astype(np.complex64)
    with pytest.raises(TypeError, match=r"0\.W \(complex64\).*real numbers"):
        save(model, tmp_path / "c.npz")


def test_extra_keys_in_a_layers_state_are_refused(tmp_path):
    for model in (Linear(3, 2, seed=0), MLP([3, 2], seed=0)):     # one layer, and a Sequential
        path = save(model, tmp_path / "m.npz")
        meta, arrays = _rewrite(path)
        arrays["W_extra" if isinstance(model, Linear) else "0.W_extra"] = np.zeros(2, np.float32)
        _consistent(path, arrays, meta)
        with pytest.raises(CheckpointError, match="entries the model does not.*W_extra"):
            load(path)


def _npy_header(shape, dtype="<f4"):
    """A .npy header declaring `shape`, with no data after it."""
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False,
                                               "shape": shape})
    return buf.getvalue()


@pytest.mark.parametrize("shape", [(10 ** 12,), (100000, 100000, 100000), (3, 2)])
def test_an_array_header_that_lies_about_its_size_is_refused_before_allocating(
        tmp_path, monkeypatch, shape):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    _rewrite(path, version=2)                        # formats 1 and 2 hold .npy entries
    with zipfile.ZipFile(path, "a") as z:            # a tiny entry whose header declares `shape`
        z.writestr("0.huge.npy", _npy_header(shape) + bytes(8))

    def no_allocation(*args, **kwargs):
        raise AssertionError("np.load read the array before the header was checked")
    monkeypatch.setattr(np.lib.format, "read_array", no_allocation)
    with pytest.raises(CheckpointError, match=r"header of 0\.huge declares shape"):
        load(path)


@pytest.mark.parametrize("version", [3, 2])
def test_entries_declaring_more_than_a_checkpoint_may_hold_are_refused(tmp_path, monkeypatch,
                                                                       version):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    _rewrite(path, version=version)
    monkeypatch.setattr(checkpoint_format, "MAX_CHECKPOINT_BYTES", 8)
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda *a: pytest.fail("inflated before the check"))
    with pytest.raises(CheckpointError, match="more than the .* (a checkpoint )?may hold"):
        load(path)


@pytest.mark.parametrize("config_change", [
    {"sizes": [2, 10 ** 6, 10 ** 6, 2]},                # an MLP of 10**12 weights
    {"sizes": [2, 10 ** 12]},
])
def test_a_config_declaring_absurd_sizes_is_refused_before_building(tmp_path, monkeypatch,
                                                                     config_change):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    meta, arrays = _rewrite(path)
    meta["architecture"]["config"].update(config_change)
    _consistent(path, arrays, meta)
    import dlcourse.layer_base

    def no_build(*args, **kwargs):
        raise AssertionError("the model was built from an absurd config")
    monkeypatch.setattr(dlcourse.layer_base, "build_layer", no_build)
    with pytest.raises(CheckpointError, match="far more than the .* values the file holds"):
        load(path)


def test_a_config_nested_absurdly_deep_is_refused(tmp_path):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    meta, arrays = _rewrite(path)
    meta["architecture"]["config"]["extra"] = "DEEP"
    for depth in (40, 100000):                          # past our limit; past json's recursion
        text = json.dumps(meta).replace('"DEEP"', "[" * depth + "1" + "]" * depth)
        _write(path, {ckpt.META_FILE: text.encode(), ckpt.ARRAYS_FILE: b""})
        with pytest.raises(CheckpointError, match="nests deeper than"):
            load(path)


def test_models_of_the_course_still_load(tmp_path, trained_cnn):
    """The size guard leaves real checkpoints alone (a wide MLP, a CNN on 32x32 colour)."""
    for model in (MLP([3072, 512, 512, 512, 10], seed=0), CNN(3, 32, 10, seed=0),
                  trained_cnn[0]):
        assert_same_state(load(save(model, tmp_path / "m.npz")), model)


def test_a_learners_class_named_like_a_library_layer_changes_nothing_dl_load_builds(tmp_path):
    """A notebook class called Linear (or Conv2d), defined after import, neither replaces the
    library's layer in dl.load nor loses its own identity: saved, it comes back as itself."""
    import dlcourse as dl
    path = save(Sequential(dl.Conv2d(1, 2, 3, seed=0), ReLU(), dl.Flatten(),
                           Linear(8, 2, seed=1)), tmp_path / "lib.npz")

    class Linear_(dl.Layer):           # a learner's own layers, with the library's names
        def __init__(self, *args, **kwargs):
            super().__init__()

        def forward(self, x):
            return x

    Mine = type("Linear", (Linear_,), {})
    MyConv = type("Conv2d", (Linear_,), {})
    loaded = load(path)
    assert [type(l) for l in loaded] == [dl.Conv2d, ReLU, dl.Flatten, Linear]
    assert not any(type(l) in (Mine, MyConv) for l in loaded)
    saved = save(Sequential(Mine(), Linear(3, 2, seed=0)), tmp_path / "mine.npz")
    back = load(saved)
    assert type(back[0]) is Mine and type(back[1]) is Linear
    assert MyConv is not None
