"""Atomic writes keep permissions: a file replaced keeps its mode (a private checkpoint stays
private, and its new bytes are never readable by others, even half written), a new file gets
the umask's mode. Checked on dlcourse/_io.py's helper and on every writer that uses it:
checkpoints, downloads and their sidecars, student notebooks."""
import os
import stat
import sys

import nbformat
import pytest

from dlcourse import data
from dlcourse._io import atomic_write
from dlcourse.checkpoint import save
from dlcourse.models import MLP
from dlcourse.student import write_student_notebooks

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_file_gets_the_umask_mode(tmp_path, umask_022):
    with atomic_write(tmp_path / "new.bin") as f:
        f.write(b"x")
    assert mode(tmp_path / "new.bin") == 0o644


@pytest.mark.parametrize("old_mode", [0o600, 0o640, 0o444, 0o664])
def test_a_replaced_file_keeps_its_mode_and_its_bytes_are_never_more_open(tmp_path, umask_022,
                                                                           old_mode):
    path = tmp_path / "private.bin"
    path.write_bytes(b"old")
    os.chmod(path, old_mode)
    with atomic_write(path) as f:
        f.write(b"new")
        f.flush()
        (part,) = [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
        assert mode(part) == old_mode                  # already while being written
    assert path.read_bytes() == b"new" and mode(path) == old_mode


def test_a_failed_write_leaves_the_old_file_and_its_mode(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")
    os.chmod(path, 0o600)
    with pytest.raises(RuntimeError), atomic_write(path) as f:
        f.write(b"half")
        raise RuntimeError("disk full")
    assert path.read_bytes() == b"old" and mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_checkpoint_saved_again_stays_private(tmp_path, umask_022):
    path = save(MLP([2, 2], seed=0), tmp_path / "m.npz")
    assert mode(path) == 0o644
    os.chmod(path, 0o600)
    save(MLP([2, 2], seed=1), path)
    assert mode(path) == 0o600


def test_download_and_its_sidecar_keep_their_modes(tmp_path, umask_022):
    src = tmp_path / "remote.bin"
    src.write_bytes(b"payload" * 100)
    dest = tmp_path / "cache" / "payload.bin"
    data.download(src.as_uri(), dest, progress=False)
    sidecar = dest.with_name(dest.name + ".sha256")
    assert mode(dest) == mode(sidecar) == 0o644
    dest.write_bytes(b"damaged")                       # fetched again over a private file
    os.chmod(dest, 0o600)
    os.chmod(sidecar, 0o600)
    data.download(src.as_uri(), dest, progress=False)
    assert dest.read_bytes() == src.read_bytes()
    assert mode(dest) == 0o600 and mode(sidecar) == 0o600


def test_student_notebooks_written_again_keep_their_mode(tmp_path, umask_022):
    source = tmp_path / "solutions"
    source.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    nbformat.write(nb, source / "01_x.ipynb")
    out = tmp_path / "student"
    (written,) = write_student_notebooks(source, out)
    assert mode(written) == 0o644
    os.chmod(written, 0o600)
    write_student_notebooks(source, out)
    assert mode(out / "01_x.ipynb") == 0o600
