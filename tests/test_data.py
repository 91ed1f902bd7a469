"""Tests for dlcourse.data (the package: synthetic, splits, datasets, formats, download,
batching). No network: downloads use file:// URLs of files made here, or a patched urlopen.
Array tests take the ``xp`` fixture of conftest.py and run on NumPy and CuPy."""
import gzip
import hashlib
import importlib
import io
import struct
import sys
import tarfile
from pathlib import Path
from urllib.error import HTTPError, URLError

import numpy as np
import pytest

from dlcourse import backend
from dlcourse import data
from dlcourse.data import batching

# dl.data.download is the function (public API); its module is reached through sys.modules.
download_module = importlib.import_module("dlcourse.data.download")
formats_module = importlib.import_module("dlcourse.data.formats")


# --------------------------------------------------------------------------------------
# Helpers: tiny files in the real formats.
# --------------------------------------------------------------------------------------
_IDX_CODES = {"uint8": 0x08, "int8": 0x09, "int16": 0x0B, "int32": 0x0C, "float32": 0x0D,
              "float64": 0x0E}


def idx_bytes(a: np.ndarray) -> bytes:
    header = struct.pack(">BBBB", 0, 0, _IDX_CODES[a.dtype.name], a.ndim)
    header += struct.pack(f">{a.ndim}I", *a.shape)
    return header + a.astype(a.dtype.newbyteorder(">")).tobytes()


def cifar_bytes(images: np.ndarray, labels: np.ndarray) -> bytes:
    """images uint8 (N, 3, 32, 32), labels (N,) -> CIFAR-10 binary records."""
    records = np.concatenate([labels.astype(np.uint8)[:, None],
                              images.reshape(len(images), -1)], axis=1)
    return records.tobytes()


def sha256_of(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def balanced_labels(n, k=10):
    return np.arange(n, dtype=np.uint8) % k


def write_mnist_folder(folder: Path, n_train=60, n_test=20, seed=0):
    """Four MNIST-format files (images gzipped, labels plain); returns the raw arrays."""
    g = np.random.default_rng(seed)
    raw = {
        "train_images": g.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": balanced_labels(n_train),
        "test_images": g.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": balanced_labels(n_test),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for key, arr in raw.items():
        name = data.MNIST_FILES[key].filename                 # e.g. train-images-idx3-ubyte.gz
        if "images" in key:
            (folder / name).write_bytes(gzip.compress(idx_bytes(arr)))
        else:
            (folder / name[:-3]).write_bytes(idx_bytes(arr))  # unzipped form
    return raw


# --------------------------------------------------------------------------------------
# load_digits
# --------------------------------------------------------------------------------------
def test_digits_split_sizes_dtypes_ranges():
    ds = data.load_digits()
    assert ds.X_train.shape == (1257, 64) and ds.X_val.shape == (270, 64)
    assert ds.X_test.shape == (270, 64)
    assert [len(ds.y_train), len(ds.y_val), len(ds.y_test)] == [1257, 270, 270]
    for X, y in ds:
        assert X.dtype == np.float32 and y.dtype == np.int64
        assert X.min() >= 0.0 and X.max() <= 1.0
        assert set(np.unique(y)) <= set(range(10))
    assert ds.X_train.max() == 1.0                           # 16/16 occurs
    assert ds.classes == tuple("0123456789") and ds.num_classes == 10
    assert "1257" in repr(ds)


def test_digits_is_deterministic_and_split_arg_matches():
    a, b = data.load_digits(), data.load_digits()
    for s in ("train", "val", "test"):
        np.testing.assert_array_equal(a.split(s)[0], b.split(s)[0])
        X, y = data.load_digits(s)
        np.testing.assert_array_equal(X, a.split(s)[0])
        np.testing.assert_array_equal(y, a.split(s)[1])


def test_digits_splits_are_disjoint_and_cover_everything():
    from sklearn.datasets import load_digits as sk
    full = sk()
    rows_full = np.column_stack([full.data / 16.0, full.target]).astype(np.float32)
    ds = data.load_digits()
    rows_split = np.concatenate([np.column_stack([X, y]).astype(np.float32) for X, y in ds])
    # Same multiset of (image, label) rows: each sample is in exactly one split.
    sort = lambda r: r[np.lexsort(r.T[::-1])]               # noqa: E731
    np.testing.assert_array_equal(sort(rows_split), sort(rows_full))


def test_digits_split_is_stratified():
    ds = data.load_digits()
    for y, n in ((ds.y_val, 270), (ds.y_test, 270)):
        counts = np.bincount(y, minlength=10)
        assert counts.sum() == n and counts.min() >= 25 and counts.max() <= 29


def test_digits_image_form():
    X, y = data.load_digits("train", flat=False)
    assert X.shape == (1257, 1, 8, 8)
    np.testing.assert_array_equal(X.reshape(1257, 64), data.load_digits("train")[0])


def test_digits_bad_split_name():
    with pytest.raises(ValueError, match="'train', 'val', 'test'"):
        data.load_digits("validation")


# --------------------------------------------------------------------------------------
# Synthetic 2-D sets
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [data.make_blobs, data.make_xor, data.make_circles,
                                  data.make_spirals])
def test_synthetic_shapes_dtypes_seeding(make):
    X, y = make(101, seed=3)
    assert X.shape == (101, 2) and X.dtype == np.float32
    assert y.shape == (101,) and y.dtype == np.int64
    assert set(np.unique(y)) == {0, 1}
    assert abs(int((y == 0).sum()) - int((y == 1).sum())) <= 1     # balanced
    X2, y2 = make(101, seed=3)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    X3, _ = make(101, seed=4)
    assert not np.array_equal(X, X3)
    assert not (np.all(y[:50] == 0) or np.all(y[:50] == 1))          # shuffled, not sorted


def test_synthetic_seed_none_follows_manual_seed():
    backend.manual_seed(7)
    a = data.make_spirals(50)
    backend.manual_seed(7)
    b = data.make_spirals(50)
    np.testing.assert_array_equal(a[0], b[0])


def test_blobs_are_separated_by_the_documented_line():
    for seed in range(5):
        X, y = data.make_blobs(400, seed=seed)
        s = (X @ np.array([1.0, 1.0])) / np.sqrt(2)       # signed distance to x0 + x1 = 0
        assert np.all((2 * y - 1) * s >= 0.5 - 1e-5)        # right side, margin 0.5


def test_blobs_not_separable_overlap():
    X, y = data.make_blobs(400, separable=False, seed=0)
    s = X @ np.array([1.0, 1.0])
    assert np.any((2 * y - 1) * s < 0)                    # the line now misclassifies some


def test_xor_labels_follow_the_signs():
    X, y = data.make_xor(200, noise=0.1, seed=0)
    np.testing.assert_array_equal(y, (np.sign(X[:, 0]) != np.sign(X[:, 1])).astype(np.int64))


def test_circles_inner_class_is_inside():
    X, y = data.make_circles(400, noise=0.0, factor=0.4, seed=0)
    r = np.linalg.norm(X, axis=1)
    np.testing.assert_allclose(r[y == 0], 1.0, atol=1e-6)
    np.testing.assert_allclose(r[y == 1], 0.4, atol=1e-6)


def test_spirals_three_classes():
    X, y = data.make_spirals(300, classes=3, seed=0)
    assert np.bincount(y).tolist() == [100, 100, 100]
    assert np.abs(X).max() <= 1.0 + 1e-6


@pytest.mark.parametrize("kwargs, first_rows, first_labels", [
    ({}, [[6.675857548543718e-06, 0.02684563584625721],
          [0.10073741525411606, -0.7245743870735168],
          [-0.48648810386657715, 0.227166548371315]], [0, 0, 1, 1, 1, 1]),
    ({"n": 300, "classes": 3}, [[0.0022002155892550945, 0.04034408926963806],
                                [0.05180185288190842, -0.0747062936425209],
                                [-0.258573442697525, 0.15800991654396057]], [0, 1, 2, 1, 2, 1]),
])
def test_spirals_default_turns_keep_the_points_of_earlier_versions(kwargs, first_rows,
                                                                   first_labels):
    # Values recorded before turns= existed: stored notebook outputs depend on them.
    X, y = data.make_spirals(**kwargs, seed=0)
    np.testing.assert_array_equal(X[:3], np.array(first_rows, dtype=np.float32))
    assert y[:6].tolist() == first_labels


@pytest.mark.parametrize("turns", [0.25, 2 / np.pi, 1.5, 3])
def test_spirals_turns_set_the_angle_each_arm_sweeps(turns):
    X, y = data.make_spirals(400, noise=0.0, turns=turns, seed=0)
    for k in (0, 1):
        arm = X[y == k].astype(np.float64)
        arm = arm[np.argsort(np.hypot(arm[:, 0], arm[:, 1]))][1:]   # out from the centre,
        r = np.hypot(arm[:, 0], arm[:, 1])                           # minus r=0 (no angle)
        theta = np.unwrap(np.arctan2(arm[:, 0], arm[:, 1]))          # x = r sin, y = r cos
        swept = theta[-1] - theta[0]
        np.testing.assert_allclose(swept, 2 * np.pi * turns * (r[-1] - r[0]), atol=1e-4)


@pytest.mark.parametrize("turns", [0, -1.0, float("nan"), float("inf"), "2", None, True])
def test_spirals_bad_turns_say_what_is_expected(turns):
    with pytest.raises(ValueError, match="positive finite number") as info:
        data.make_spirals(10, turns=turns)
    assert f"got {turns!r}" in str(info.value) and "turns=1.5" in str(info.value)


@pytest.mark.parametrize("call, match", [
    (lambda: data.make_blobs(0), "n >= 2"),
    (lambda: data.make_xor(10, noise=-1), "noise"),
    (lambda: data.make_circles(10, factor=2), "factor"),
    (lambda: data.make_spirals(10, classes=1), "classes"),
])
def test_synthetic_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------------------
# IDX parser
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [False, True])
def test_read_idx_images_and_labels(tmp_path, gz):
    g = np.random.default_rng(0)
    images = g.integers(0, 256, (5, 4, 3), dtype=np.uint8)
    labels = np.array([3, 1, 4, 1, 5], dtype=np.uint8)
    for arr, name in ((images, "img"), (labels, "lab")):
        raw = idx_bytes(arr)
        path = tmp_path / (name + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(raw) if gz else raw)
        for source in (path, str(path), open(path, "rb"), path.read_bytes()):
            out = data.read_idx(source)
            assert out.dtype == np.uint8 and out.shape == arr.shape
            np.testing.assert_array_equal(out, arr)
            if hasattr(source, "close"):
                source.close()


@pytest.mark.parametrize("dtype", ["int16", "int32", "float32", "float64"])
def test_read_idx_big_endian_types(dtype):
    arr = (np.arange(12).reshape(3, 4) - 5).astype(dtype)
    out = data.read_idx(idx_bytes(arr))
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, arr)


def test_read_idx_truncated(tmp_path):
    raw = idx_bytes(np.zeros((4, 28, 28), dtype=np.uint8))
    path = tmp_path / "cut"
    path.write_bytes(raw[:-10])
    with pytest.raises(data.DataFormatError, match=r"truncated.*\(4, 28, 28\)"):
        data.read_idx(path)


def test_read_idx_truncated_gzip():
    zipped = gzip.compress(idx_bytes(np.zeros((4, 28, 28), dtype=np.uint8)))
    with pytest.raises(data.DataFormatError, match="damaged gzip"):
        data.read_idx(zipped[: len(zipped) // 2])


def test_read_idx_wrong_magic_and_bad_codes():
    with pytest.raises(data.DataFormatError, match="not an IDX file"):
        data.read_idx(b"PK\x03\x04 this is a zip")
    with pytest.raises(data.DataFormatError, match="unknown IDX type code 0x07"):
        data.read_idx(b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00")
    with pytest.raises(data.DataFormatError, match="longer than its header"):
        data.read_idx(idx_bytes(np.zeros(3, dtype=np.uint8)) + b"extra")


def test_read_idx_rejects_text_files(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(idx_bytes(np.zeros(3, dtype=np.uint8)))
    with open(path) as f, pytest.raises(TypeError, match="binary mode"):
        data.read_idx(f)


# --------------------------------------------------------------------------------------
# CIFAR-10 binary reader
# --------------------------------------------------------------------------------------
def test_read_cifar10_bin(tmp_path):
    g = np.random.default_rng(0)
    images = g.integers(0, 256, (7, 3, 32, 32), dtype=np.uint8)
    labels = np.array([0, 9, 3, 3, 1, 2, 5])
    path = tmp_path / "data_batch_1.bin"
    path.write_bytes(cifar_bytes(images, labels))
    X, y = data.read_cifar10_bin(path)
    assert X.shape == (7, 3, 32, 32) and X.dtype == np.uint8
    assert y.dtype == np.int64
    np.testing.assert_array_equal(X, images)
    np.testing.assert_array_equal(y, labels)
    # The layout really is label, then the red plane, green, blue, row by row:
    raw = path.read_bytes()
    assert raw[0] == 0 and raw[1 + 1024 + 2 * 32 + 5] == images[0, 1, 2, 5]


def test_read_cifar10_bin_errors():
    one = cifar_bytes(np.zeros((1, 3, 32, 32), np.uint8), np.array([1]))
    with pytest.raises(data.DataFormatError, match="multiple of 3073"):
        data.read_cifar10_bin(one[:-1])
    with pytest.raises(data.DataFormatError, match="multiple of 3073"):
        data.read_cifar10_bin(b"")
    with pytest.raises(data.DataFormatError, match="labels are 0..9"):
        data.read_cifar10_bin(b"\x0c" + one[1:])


# --------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path):
    """A 'remote' file reachable by a file:// URL."""
    content = b"dlcourse test payload\n" * 1000
    src = tmp_path / "remote" / "payload.bin"
    src.parent.mkdir()
    src.write_bytes(content)
    return src.as_uri(), content


@pytest.fixture
def count_urlopen(monkeypatch):
    calls = []
    real = download_module.urlopen

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(download_module, "urlopen", counting)
    return calls


def leftovers(folder: Path):
    return [p.name for p in folder.iterdir() if p.name.endswith(".part")]


def test_download_good_checksum(tmp_path, served):
    url, content = served
    dest = tmp_path / "cache" / "sub" / "payload.bin"
    out = data.download(url, dest, sha256=sha256_of(content), progress=True)
    assert out == dest and dest.read_bytes() == content
    assert (dest.parent / "payload.bin.sha256").read_text().split() == \
        [sha256_of(content), "payload.bin"]
    assert leftovers(dest.parent) == []


def test_download_bad_checksum_leaves_nothing(tmp_path, served):
    url, content = served
    dest = tmp_path / "cache" / "payload.bin"
    with pytest.raises(data.ChecksumError, match="SHA-256") as err:
        data.download(url, dest, sha256="0" * 64, progress=False)
    assert "nothing was saved" in str(err.value)
    assert not dest.parent.exists()         # nothing, not even the cache folder it made
    with pytest.raises(data.ChecksumError, match="MD5"):
        data.download(url, dest, md5="0" * 32, progress=False)
    assert not dest.exists()


def test_download_failure_leaves_existing_file_untouched(tmp_path, served, monkeypatch):
    url, content = served
    dest = tmp_path / "payload.bin"
    dest.write_bytes(b"old bytes")
    with pytest.raises(data.ChecksumError):          # old file fails, new download fails too
        data.download(url, dest, sha256="1" * 64, progress=False)
    assert dest.read_bytes() == b"old bytes" and leftovers(tmp_path) == []

    def offline(*args, **kwargs):
        raise URLError("no network")
    monkeypatch.setattr(download_module, "urlopen", offline)
    with pytest.raises(data.DownloadError):
        data.download(url, dest, sha256=sha256_of(content), progress=False)
    assert dest.read_bytes() == b"old bytes"


def test_download_reuses_verified_file(tmp_path, served, count_urlopen):
    url, content = served
    dest = tmp_path / "payload.bin"
    for _ in range(3):
        data.download(url, dest, sha256=sha256_of(content), progress=False)
    assert len(count_urlopen) == 1


def test_download_redownloads_a_damaged_file(tmp_path, served, count_urlopen, capsys):
    url, content = served
    dest = tmp_path / "payload.bin"
    data.download(url, dest, sha256=sha256_of(content), progress=False)
    dest.write_bytes(content[:100])                  # e.g. damaged on disk
    data.download(url, dest, sha256=sha256_of(content), progress=False)
    assert dest.read_bytes() == content and len(count_urlopen) == 2
    assert "cannot be reused" in capsys.readouterr().err


def test_download_md5_only_records_sha256(tmp_path, served, count_urlopen):
    url, content = served
    dest = tmp_path / "payload.bin"
    data.download(url, dest, md5=hashlib.md5(content).hexdigest(), progress=False)
    assert (tmp_path / "payload.bin.sha256").read_text().split()[0] == sha256_of(content)
    data.download(url, dest, md5=hashlib.md5(content).hexdigest(), progress=False)
    assert len(count_urlopen) == 1                   # reused, checked by the recorded SHA-256
    dest.write_bytes(b"tampered")
    data.download(url, dest, md5=hashlib.md5(content).hexdigest(), progress=False)
    assert len(count_urlopen) == 2 and dest.read_bytes() == content


def test_download_md5_is_checked_even_after_an_unchecked_download(tmp_path, served,
                                                                    count_urlopen):
    """A sidecar written after a download with no checksum must not stand in for a later
    md5=: the caller's MD5 is checked, and a file that fails it is downloaded again."""
    url, content = served
    remote = tmp_path / "remote" / "payload.bin"            # where `served` put it
    md5 = hashlib.md5(content).hexdigest()
    dest = tmp_path / "payload.bin"
    remote.write_bytes(b"tampered")
    data.download(url, dest, progress=False)             # no checksum: sidecar of "tampered"
    remote.write_bytes(content)
    assert data.download(url, dest, md5=md5, progress=False).read_bytes() == content
    assert len(count_urlopen) == 2
    dest.write_bytes(b"tampered")                         # file and sidecar changed together
    (tmp_path / "payload.bin.sha256").write_text(f"{sha256_of(b'tampered')}  payload.bin\n")
    assert data.download(url, dest, md5=md5, progress=False).read_bytes() == content
    assert len(count_urlopen) == 3


class _CutShortReply(io.BytesIO):
    """What urlopen returns when the server announces `announced` bytes, sends `body`,
    and closes the connection: reads end early, with no error."""
    def __init__(self, body: bytes, announced: int):
        super().__init__(body)
        self.headers = {"Content-Length": str(announced)}


@pytest.mark.parametrize("with_sha256", [False, True])
def test_download_cut_short_is_an_error_not_a_file(tmp_path, monkeypatch, with_sha256):
    content = b"x" * 5000
    monkeypatch.setattr(download_module, "urlopen", lambda *a, **k: _CutShortReply(content[:1200], 5000))
    kwargs = {"sha256": sha256_of(content)} if with_sha256 else {}
    dest = tmp_path / "f.gz"
    with pytest.raises(data.DownloadError, match="closed after 1200 of 5000 bytes") as err:
        data.download("https://example.invalid/f.gz", dest, progress=False, **kwargs)
    assert not isinstance(err.value, data.ChecksumError)   # not "a different file"
    assert "run again" in str(err.value)
    assert list(tmp_path.iterdir()) == []                  # no file, no sidecar, no .part


def test_download_offline_names_load_digits(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")
    monkeypatch.setattr(download_module, "urlopen", offline)
    dest = tmp_path / "x.gz"
    with pytest.raises(data.DownloadError) as err:
        data.download("https://example.invalid/x.gz", dest, progress=False)
    message = str(err.value)
    assert "offline" in message and "load_digits()" in message
    assert not dest.exists() and leftovers(tmp_path) == []


def test_download_http_error(tmp_path, monkeypatch):
    def not_found(request, *args, **kwargs):
        raise HTTPError(request.full_url, 404, "Not Found", {}, None)
    monkeypatch.setattr(download_module, "urlopen", not_found)
    with pytest.raises(data.DownloadError, match="HTTP 404"):
        data.download("https://example.invalid/x.gz", tmp_path / "x.gz", progress=False)


def test_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("DLCOURSE_DATA", str(tmp_path / "mine"))
    assert data.data_dir() == tmp_path / "mine"
    monkeypatch.delenv("DLCOURSE_DATA")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert data.data_dir() == tmp_path / "xdg" / "dlcourse"
        monkeypatch.delenv("XDG_CACHE_HOME")
        assert data.data_dir() == Path.home() / ".cache" / "dlcourse"


# --------------------------------------------------------------------------------------
# MNIST / Fashion-MNIST / CIFAR-10 loaders on tiny local files
# --------------------------------------------------------------------------------------
def test_load_mnist_from_path(tmp_path):
    raw = write_mnist_folder(tmp_path / "mnist")
    ds = data.load_mnist(path=tmp_path / "mnist", val_size=10)
    assert ds.X_train.shape == (50, 1, 28, 28) and ds.X_val.shape == (10, 1, 28, 28)
    assert ds.X_test.shape == (20, 1, 28, 28)
    assert ds.X_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert 0.0 <= ds.X_train.min() and ds.X_train.max() <= 1.0
    np.testing.assert_allclose(ds.X_test[:, 0], raw["test_images"] / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_test, raw["test_labels"])
    np.testing.assert_array_equal(np.bincount(ds.y_val), np.ones(10))   # stratified
    # train + val is the whole official training set
    both = np.concatenate([ds.X_train, ds.X_val])[:, 0]
    assert sorted(map(bytes, (both * 255).round().astype(np.uint8))) == \
        sorted(map(bytes, raw["train_images"]))
    # same split every time, and the split= / flat= forms agree
    X_val, y_val = data.load_mnist("val", path=tmp_path / "mnist", val_size=10, flat=True)
    assert X_val.shape == (10, 784)
    np.testing.assert_array_equal(X_val, ds.X_val.reshape(10, -1))
    np.testing.assert_array_equal(y_val, ds.y_val)


def test_load_mnist_test_split_does_not_need_train_files(tmp_path):
    write_mnist_folder(tmp_path)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte"):
        (tmp_path / name).unlink()
    X, y = data.load_mnist("test", path=tmp_path)
    assert X.shape == (20, 1, 28, 28)


def test_load_mnist_clear_errors(tmp_path):
    write_mnist_folder(tmp_path)
    with pytest.raises(ValueError, match="val_size=5000 .* 60 training images"):
        data.load_mnist(path=tmp_path)                       # the default needs real MNIST
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels-idx1-ubyte.gz"):
        data.load_mnist(path=tmp_path, val_size=10)
    # swapped files
    folder = tmp_path / "swapped"
    raw = write_mnist_folder(folder)
    (folder / "train-labels-idx1-ubyte").write_bytes(idx_bytes(raw["train_labels"][:-1]))
    with pytest.raises(data.DataFormatError, match="60 images"):
        data.load_mnist(path=folder, val_size=10)


def test_load_mnist_downloads_into_the_cache(tmp_path, monkeypatch, count_urlopen):
    """The whole download path, against file:// copies of tiny files (no network)."""
    remote = tmp_path / "remote"
    write_mnist_folder(remote)
    for key, r in data.MNIST_FILES.items():
        path = remote / r.filename
        if not path.exists():                                # labels were written unzipped
            path.write_bytes(gzip.compress((remote / r.filename[:-3]).read_bytes()))
        fake = r._replace(url=path.as_uri(), sha256=sha256_of(path.read_bytes()), md5="")
        monkeypatch.setitem(data.MNIST_FILES, key, fake)
    monkeypatch.setenv("DLCOURSE_DATA", str(tmp_path / "cache"))
    ds = data.load_mnist(val_size=10, progress=False)
    assert ds.X_train.shape == (50, 1, 28, 28)
    assert sorted(p.name for p in (tmp_path / "cache" / "mnist").glob("*.gz")) == \
        sorted(r.filename for r in data.MNIST_FILES.values())
    assert len(count_urlopen) == 4
    data.load_mnist(val_size=10, progress=False)
    assert len(count_urlopen) == 4                           # reused, not downloaded again


def test_load_mnist_offline_message(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise URLError("no network")
    monkeypatch.setattr(download_module, "urlopen", offline)
    monkeypatch.setenv("DLCOURSE_DATA", str(tmp_path))
    with pytest.raises(data.DownloadError) as err:
        data.load_mnist(progress=False)
    assert "load_digits()" in str(err.value) and "path=" in str(err.value)
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",   # all four,
                 "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):    # for one folder
        assert name in str(err.value)
    assert "--data-path" in str(err.value)
    assert not any((tmp_path / "mnist").glob("*.gz"))


def test_load_fashion_mnist_from_path(tmp_path):
    write_mnist_folder(tmp_path)
    ds = data.load_fashion_mnist(path=tmp_path, val_size=10)
    assert ds.name == "fashion_mnist" and ds.classes[9] == "Ankle boot"
    assert ds.X_train.shape == (50, 1, 28, 28)


def write_cifar_folder(folder: Path, per_batch=6, n_test=8):
    g = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    for i, name in enumerate(names):
        n = n_test if name == "test_batch.bin" else per_batch
        images = g.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
        labels = (np.arange(n) + i * per_batch) % 10
        (folder / name).write_bytes(cifar_bytes(images, labels))
    return names


def test_load_cifar10_from_folder_and_tarball(tmp_path):
    names = write_cifar_folder(tmp_path / "cifar-10-batches-bin")
    ds = data.load_cifar10(path=tmp_path, val_size=10)      # finds the subfolder
    assert ds.X_train.shape == (20, 3, 32, 32) and ds.X_val.shape == (10, 3, 32, 32)
    assert ds.X_test.shape == (8, 3, 32, 32) and ds.X_train.dtype == np.float32
    assert ds.y_test.dtype == np.int64 and ds.classes[0] == "airplane"
    X, _ = data.read_cifar10_bin(tmp_path / "cifar-10-batches-bin" / "test_batch.bin")
    np.testing.assert_allclose(ds.X_test, X / 255.0, rtol=1e-6)

    tarball = tmp_path / "cifar-10-binary.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        for name in names:
            tar.add(tmp_path / "cifar-10-batches-bin" / name, f"cifar-10-batches-bin/{name}")
    from_tar = data.load_cifar10(path=tarball, val_size=10, flat=True)
    assert from_tar.X_train.shape == (20, 3072)
    np.testing.assert_array_equal(from_tar.X_test.reshape(-1, 3, 32, 32), ds.X_test)
    np.testing.assert_array_equal(from_tar.y_train, ds.y_train)


def test_load_cifar10_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="cifar-10-binary.tar.gz"):
        data.load_cifar10(path=tmp_path)


# --------------------------------------------------------------------------------------
# Standardizer, one_hot, batches
# --------------------------------------------------------------------------------------
def test_standardizer_fits_on_train_only(xp):
    g = np.random.default_rng(0)
    X_train = g.normal(3.0, 2.0, (200, 5)).astype(np.float32)
    X_train[:, 4] = 0.0                                       # a constant pixel
    X_test = g.normal(3.0, 2.0, (50, 5)).astype(np.float32)
    X_train, X_test = xp.asarray(X_train), xp.asarray(X_test)
    s = data.Standardizer().fit(X_train)
    Z = s.transform(X_train)
    assert Z.dtype == xp.float32 and Z.shape == X_train.shape
    assert float(xp.abs(Z[:, :4].mean(axis=0)).max()) < 1e-5
    assert float(xp.abs(Z[:, :4].std(axis=0) - 1).max()) < 1e-4
    assert float(xp.abs(Z[:, 4]).max()) == 0.0
    # test data uses the *training* statistics, and the constant pixel is not blown up
    Zt = s.transform(X_test)
    expected = (X_test[:, :4] - X_train[:, :4].mean(axis=0)) / X_train[:, :4].std(axis=0)
    assert float(xp.abs(Zt[:, :4] - expected).max()) < 1e-4
    assert float(xp.abs(Zt[:, 4] - X_test[:, 4]).max()) < 1e-6
    assert float(xp.abs(s.inverse_transform(Zt) - X_test).max()) < 1e-4
    assert float(xp.abs(data.Standardizer().fit_transform(X_train) - Z).max()) == 0.0


def test_standardizer_images_and_errors(xp):
    X = xp.asarray(np.random.default_rng(0).random((10, 1, 8, 8), dtype=np.float32))
    s = data.Standardizer()
    with pytest.raises(RuntimeError, match="before fit"):
        s.transform(X)
    s.fit(X)
    assert s.mean_.shape == (1, 8, 8)
    with pytest.raises(ValueError, match=r"flat vs image"):
        s.transform(X.reshape(10, 64))
    with pytest.raises(ValueError, match="reshape"):
        data.Standardizer().fit(xp.ones(5))


def test_standardizer_cpu_fit_gpu_transform():
    if not backend.gpu_available():
        pytest.skip(f"no usable GPU: {backend.gpu_problem()}")
    cp = backend.require_cupy()
    X = np.random.default_rng(0).random((20, 3), dtype=np.float32)
    s = data.Standardizer().fit(X)
    out = s.transform(cp.asarray(X))
    assert backend.device_of(out) == "gpu"
    np.testing.assert_allclose(cp.asnumpy(out), s.transform(X), rtol=1e-6)


def test_one_hot(xp):
    out = data.one_hot(xp.asarray([2, 0, 1, 2]), 3)
    assert out.shape == (4, 3) and out.dtype == xp.float32
    np.testing.assert_array_equal(backend.to_numpy(out),
                                  [[0, 0, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    assert data.one_hot(xp.zeros(0, dtype=xp.int64), 4).shape == (0, 4)


def test_one_hot_errors(xp):
    assert data.one_hot([1, 0], 2).tolist() == [[0, 1], [1, 0]]
    with pytest.raises(ValueError, match=r"0\.\.2, but found labels from 1 to 3"):
        data.one_hot(xp.array([1, 3]), 3)
    with pytest.raises(ValueError, match="from -1"):
        data.one_hot(xp.array([-1, 0]), 3)
    with pytest.raises(TypeError, match="integer class indices.*float"):
        data.one_hot(xp.array([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match=r"shape \(N,\)"):
        data.one_hot(xp.eye(3, dtype=xp.int64), 3)
    with pytest.raises(ValueError, match="positive int"):
        data.one_hot(xp.array([0]), 0)


def test_batches_cover_every_sample_once(xp):
    X = xp.arange(103 * 2, dtype=xp.float32).reshape(103, 2)
    y = xp.arange(103)
    seen, sizes = [], []
    for xb, yb in data.batches(X, y, 10, seed=0):
        assert backend.device_of(xb) == backend.device_of(X)   # device=None: stays put
        np.testing.assert_array_equal(backend.to_numpy(xb[:, 0]),
                                      2 * backend.to_numpy(yb))  # rows stay paired
        seen.append(backend.to_numpy(yb))
        sizes.append(len(yb))
    seen = np.concatenate(seen)
    assert sorted(seen) == list(range(103)) and sizes == [10] * 10 + [3]
    assert not np.array_equal(seen, np.arange(103))            # shuffled


def test_batches_seeded_unseeded_and_in_order(xp):
    X, y = xp.zeros((50, 3)), xp.arange(50)
    order = lambda **kw: np.concatenate([backend.to_numpy(yb)                           # noqa
                                         for _, yb in data.batches(X, y, 8, **kw)])
    np.testing.assert_array_equal(order(seed=1), order(seed=1))
    assert not np.array_equal(order(seed=1), order(seed=2))
    backend.manual_seed(0)
    assert not np.array_equal(order(), order())                # a new order each epoch
    np.testing.assert_array_equal(order(shuffle=False), np.arange(50))


def test_batches_drop_last(xp):
    X, y = xp.zeros((23, 1)), xp.arange(23)
    sizes = [len(yb) for _, yb in data.batches(X, y, 5, drop_last=True, seed=0)]
    assert sizes == [5, 5, 5, 5]
    sizes = [len(yb) for _, yb in data.batches(X, y, 5, shuffle=False, drop_last=True)]
    assert sizes == [5, 5, 5, 5]
    assert list(data.batches(X[:3], y[:3], 5, drop_last=True)) == []


def test_batches_device_none_never_asks_for_the_default(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("to_device must not be called when device=None")
    monkeypatch.setattr(batching, "to_device", boom)
    for xb, _ in data.batches(np.zeros((5, 2)), np.arange(5), 2):
        assert isinstance(xb, np.ndarray)


def test_batches_moves_to_the_requested_device(xp):
    X, y = xp.ones((6, 2), dtype=xp.float32), xp.arange(6)
    for xb, yb in data.batches(X, y, 4, device="cpu"):
        assert isinstance(xb, np.ndarray) and isinstance(yb, np.ndarray)
    if backend.gpu_available():
        for xb, yb in data.batches(X, y, 4, device="gpu"):
            assert backend.device_of(xb) == "gpu" and backend.device_of(yb) == "gpu"


@pytest.mark.parametrize("batch_size", [0, -3, 2.5, True, "8"])
def test_batches_bad_batch_size(xp, batch_size):
    with pytest.raises(ValueError, match="positive int"):
        data.batches(xp.zeros((4, 1)), xp.arange(4), batch_size)


def test_batches_length_mismatch_is_reported_at_the_call(xp):
    with pytest.raises(ValueError, match="X has 4 samples but y has 3"):
        data.batches(xp.zeros((4, 1)), xp.arange(3), 2)        # no iteration needed


def test_known_checksums_are_well_formed():
    remotes = [*data.MNIST_FILES.values(), *data.FASHION_MNIST_FILES.values(), data.CIFAR10_FILE]
    for r in remotes:
        assert r.url.endswith("/" + r.filename) and r.url.startswith(("https://", "http://"))
        assert len(r.sha256) == 64 and int(r.sha256, 16) >= 0
        assert len(r.md5) == 32 and int(r.md5, 16) >= 0
        assert r.size > 0
    assert len({r.sha256 for r in remotes}) == len(remotes)


# --------------------------------------------------------------------------------------
# Bad input is refused with a sentence, never looped on, truncated or turned into NaN
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: data.make_blobs(10, margin=100), "margin"),          # looped forever before
    (lambda: data.make_blobs(10, margin=float("nan")), "margin"),  # looped forever before
    (lambda: data.make_blobs(10, margin=-1), "margin"),
    (lambda: data.make_blobs(10, separable="no"), "separable"),
    (lambda: data.make_xor(8, noise=float("inf")), "finite"),
    (lambda: data.make_xor(8, noise="0.3"), "finite"),
    (lambda: data.make_circles(8, factor=float("nan")), "factor"),
    (lambda: data.make_circles(8, factor="0.5"), "factor"),
    (lambda: data.make_spirals(8, noise=float("nan")), "noise"),
    (lambda: data.make_blobs(8, seed=-1), "seed"),
    (lambda: data.make_xor(8, seed=2.5), "seed"),
])
def test_synthetic_arguments_are_validated_before_drawing(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_blobs_largest_margin_still_terminates():
    X, y = data.make_blobs(50, margin=data.synthetic.MAX_BLOB_MARGIN, seed=0)
    assert float(np.abs(X @ np.array([1.0, 1.0]) / np.sqrt(2)).min()) >= 2.0 - 1e-6


@pytest.mark.parametrize("dtype", ["int64", "uint8", "bool"])
def test_standardizer_on_integers_returns_floats(xp, dtype):
    X = xp.asarray(np.array([[0, 1], [1, 0], [0, 0], [1, 1]]).astype(dtype))
    s = data.Standardizer().fit(X)
    Z = s.transform(X)
    assert Z.dtype == xp.float32                       # was truncated to integers
    assert float(xp.abs(Z.mean(axis=0)).max()) < 1e-6
    assert float(xp.abs(Z.std(axis=0) - 1).max()) < 1e-5
    back = s.inverse_transform(Z)
    assert float(xp.abs(back - X.astype(xp.float32)).max()) < 1e-5


def test_standardizer_names_a_nan_column(xp):
    X = xp.ones((6, 4), dtype=xp.float32)
    X[2, 3] = xp.nan
    with pytest.raises(ValueError, match=r"1 feature\(s\).*NaN.*index \[3\]"):
        data.Standardizer().fit(X)
    images = xp.zeros((3, 1, 2, 2), dtype=xp.float32)
    images[0, 0, 1, 0] = xp.inf
    with pytest.raises(ValueError, match=r"index \[\(0, 1, 0\)\]"):
        data.Standardizer().fit(images)


@pytest.mark.parametrize("eps", [-1, float("nan"), float("inf"), "1e-6"])
def test_standardizer_bad_eps(eps):
    with pytest.raises(ValueError, match="eps"):
        data.Standardizer(eps=eps)


def test_standardizer_takes_lists_or_says_what_it_needs():
    s = data.Standardizer().fit([[1.0, 2.0], [3.0, 4.0]])
    assert s.transform([[2.0, 3.0]]).tolist() == [[0.0, 0.0]]
    with pytest.raises(TypeError, match="NumPy or CuPy array"):
        data.Standardizer().fit("X_train")


def test_batches_accepts_lists(xp):
    X, y = [[float(i)] for i in range(5)], list(range(5))
    got = list(data.batches(X, y, 2, shuffle=False))
    assert [yb.tolist() for _, yb in got] == [[0, 1], [2, 3], [4]]
    assert got[0][0].shape == (2, 1) and isinstance(got[0][0], np.ndarray)
    xb, yb = next(iter(data.batches(xp.asarray(np.array(X)), y, 5, shuffle=False)))
    assert backend.device_of(xb) == backend.device_of(xp.zeros(1)) and len(yb) == 5


@pytest.mark.parametrize("X, y, error, match", [
    ({"a": 1}, [0], TypeError, "NumPy or CuPy array"),
    (np.zeros((2, 1)), 7, TypeError, "NumPy or CuPy array"),
    ([[1, 2], [3]], [0, 1], ValueError, "not rectangular"),
    (np.float32(3.0), [0], ValueError, "shape \\(N, ...\\)"),
])
def test_batches_says_what_it_needs(X, y, error, match):
    with pytest.raises(error, match=match):
        data.batches(X, y, 2)


# --------------------------------------------------------------------------------------
# Decompression bounded by the header; downloads that cannot be checked are not trusted
# --------------------------------------------------------------------------------------
def test_read_idx_gzip_is_inflated_only_as_far_as_the_header_declares(monkeypatch):
    """A tiny gzip of 64 MiB of zeros behind a header declaring 3 bytes: refused after
    inflating a few bytes past the declared size, not after inflating everything."""
    header = struct.pack(">BBBBI", 0, 0, 0x08, 1, 3)
    bomb = gzip.compress(header + bytes(64 << 20), compresslevel=9)
    assert len(bomb) < 100_000
    inflated = []
    real = formats_module.zlib.decompressobj

    class Counting:
        def __init__(self, *args):
            self._d = real(*args)

        def decompress(self, data, max_length=0):
            out = self._d.decompress(data, max_length)
            inflated.append(len(out))
            return out

        def __getattr__(self, name):
            return getattr(self._d, name)
    monkeypatch.setattr(formats_module.zlib, "decompressobj", Counting)
    with pytest.raises(data.DataFormatError, match="longer than its header"):
        data.read_idx(bomb)
    assert sum(inflated) <= 4 + 4 + 3 + 1


def test_read_idx_refuses_an_absurd_declared_size_before_inflating():
    header = struct.pack(">BBBB3I", 0, 0, 0x0E, 3, 60000, 60000, 60000)   # 1.7 PB
    with pytest.raises(data.DataFormatError, match="more than the .* allowed"):
        data.read_idx(gzip.compress(header + bytes(100)))
    small = idx_bytes(np.arange(6, dtype=np.uint8).reshape(2, 3))
    with pytest.raises(data.DataFormatError, match="max_bytes"):
        data.read_idx(small, max_bytes=5)
    assert data.read_idx(gzip.compress(small), max_bytes=6).shape == (2, 3)


def test_read_idx_multi_member_gzip_and_corrupt_stream():
    raw = idx_bytes(np.arange(12, dtype=np.uint8).reshape(3, 4))
    two = gzip.compress(raw[:10]) + gzip.compress(raw[10:])
    np.testing.assert_array_equal(data.read_idx(two), np.arange(12).reshape(3, 4))
    bad = bytearray(gzip.compress(raw))
    bad[-8] ^= 0xFF                                    # the CRC no longer matches
    with pytest.raises(data.DataFormatError, match="damaged gzip"):
        data.read_idx(bytes(bad))


def test_cifar_archive_member_declaring_too_much_is_refused(tmp_path):
    archive = tmp_path / "cifar-10-binary.tar.gz"
    payload = cifar_bytes(np.zeros((1, 3, 32, 32), np.uint8), np.array([1]))
    with tarfile.open(archive, "w:gz") as tar:
        for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
        info = tarfile.TarInfo("cifar-10-batches-bin/test_batch.bin")   # a later, huge one
        info.size = 10001 * 3073
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    with pytest.raises(data.DataFormatError, match="declares 30733073 bytes"):
        data.load_cifar10("test", path=archive)


def test_download_without_a_digest_does_not_bless_a_file_already_there(tmp_path, served,
                                                                      count_urlopen, capsys):
    url, content = served
    dest = tmp_path / "payload.bin"
    dest.write_bytes(b"corrupt, put there by something else")
    assert data.download(url, dest, progress=False).read_bytes() == content
    assert len(count_urlopen) == 1 and "cannot be told from a damaged file" in \
        capsys.readouterr().err
    data.download(url, dest, progress=False)        # now recorded: reused, not fetched again
    assert len(count_urlopen) == 1


# --------------------------------------------------------------------------------------
# MNIST-1D: generated from code, seeded, offline
# --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mnist1d_set():
    return data.load_mnist1d()


def test_mnist1d_split_sizes_dtypes_and_shapes(mnist1d_set):
    d = mnist1d_set
    assert d.name == "mnist1d" and d.num_classes == 10
    sizes = {s: len(d.split(s)[1]) for s in ("train", "val", "test")}
    assert sizes == data.MNIST1D_SIZES == {"train": 3500, "val": 500, "test": 1000}
    for X, y in d:
        assert X.dtype == np.float32 and X.shape[1:] == (40,)
        assert y.dtype == np.int64 and set(np.unique(y)) == set(range(10))
        assert np.isfinite(X).all()
    X, y = data.load_mnist1d("train", flat=False)        # a 1x40 image with one channel
    assert X.shape == (3500, 1, 1, 40)
    np.testing.assert_array_equal(X.reshape(3500, 40), d.X_train)
    np.testing.assert_array_equal(y, d.y_train)
    X_val, _ = data.load_mnist1d("val", val_size=0)
    assert len(X_val) == 0 and len(data.load_mnist1d("train", val_size=0)[1]) == 4000


def test_mnist1d_returns_copies(mnist1d_set):
    X, _ = data.load_mnist1d("test")
    X[:] = 0
    assert np.abs(data.load_mnist1d("test")[0]).sum() > 0
    np.testing.assert_array_equal(data.load_mnist1d("test")[0], mnist1d_set.X_test)


def test_mnist1d_is_generated_offline_with_its_seed_and_restores_global_state(
        mnist1d_set, monkeypatch):
    """Another seed generates a new set without the network, pickle or the package's download
    path; NumPy's and Python's global random state are as they were."""
    import pickle
    import random

    import mnist1d.data

    def forbidden(*args, **kwargs):
        raise AssertionError("load_mnist1d must not download or unpickle")
    monkeypatch.setattr(mnist1d.data, "get_dataset", forbidden)
    monkeypatch.setattr(mnist1d.data, "from_pickle", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(download_module, "urlopen", forbidden)
    np.random.seed(123)
    random.seed(123)
    expected = np.random.get_state()[1].copy(), random.getstate()
    X, y = data.load_mnist1d("test", seed=1)
    assert (np.random.get_state()[1] == expected[0]).all() and random.getstate() == expected[1]
    assert X.shape == (1000, 40) and not np.array_equal(X, mnist1d_set.X_test)


@pytest.mark.parametrize("kwargs, match", [
    ({"seed": -1}, "seed"), ({"seed": 1.5}, "seed"), ({"split": "validation"}, "split"),
    ({"val_size": 4000}, "val_size"),
])
def test_mnist1d_bad_arguments(mnist1d_set, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        data.load_mnist1d(**kwargs)
