"""The learner's workspace (issue 15): ``dlcourse start`` writes the student notebooks into the
learner's own folder and never overwrites one the learner changed; ``dlcourse reset`` puts one
exercise back; ``dlcourse solution`` shows a reference solution only when asked; and the start
command, run as the current user (root in CI containers), serves JupyterLab on a folder with
no solutions."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

from dlcourse import student, workspace  # noqa: E402
from dlcourse.cli import main  # noqa: E402
from dlcourse.student import BEGIN, MANIFEST, exercises, sync_notebooks  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
LESSON = "03_backpropagation"


@pytest.fixture()
def source(tmp_path):
    """A copy of two lessons, standing in for the course (so a test can 'update' it)."""
    folder = tmp_path / "course"
    folder.mkdir()
    for name in ("01_perceptron", LESSON):
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", folder)
    return folder


def _edit(path: Path, index: int, text: str) -> None:
    nb = nbformat.read(path, as_version=4)
    nb.cells[index].source = text
    nbformat.write(nb, path)


def _solution_free(folder: Path) -> None:
    for path in folder.glob("*.ipynb"):
        text = path.read_text(encoding="utf-8")
        assert BEGIN not in text, f"{path.name} holds a solution block"
        assert "dx = dout * (x > 0)" not in text


def test_sync_adds_then_keeps_the_learners_edits_and_writes_updates_beside(source, tmp_path):
    ws = tmp_path / "ws"
    first = sync_notebooks(source, ws)
    assert [what for what, _ in first] == ["added", "added"]
    _solution_free(ws)
    assert json.loads((ws / MANIFEST).read_text())["generated"]
    assert [what for what, _ in sync_notebooks(source, ws)] == ["unchanged", "unchanged"]

    _edit(ws / f"{LESSON}.ipynb", 0, "my notes")                   # the learner's edit
    assert [what for what, _ in sync_notebooks(source, ws)] == ["unchanged", "kept"]
    assert nbformat.read(ws / f"{LESSON}.ipynb", as_version=4).cells[0].source == "my notes"

    for name in ("01_perceptron", LESSON):                         # a new course version
        _edit(source / f"{name}.ipynb", 0, "# Revised lesson")
    done = dict((p.name, what) for what, p in sync_notebooks(source, ws))
    assert done == {"01_perceptron.ipynb": "updated",
                    f"{LESSON}.updated.ipynb": "kept, new version beside"}
    assert nbformat.read(ws / f"{LESSON}.ipynb", as_version=4).cells[0].source == "my notes"
    assert nbformat.read(ws / f"{LESSON}.updated.ipynb",
                         as_version=4).cells[0].source == "# Revised lesson"
    assert [what for what, _ in sync_notebooks(source, ws)] == ["unchanged", "kept"]


def test_a_notebook_the_manifest_does_not_know_is_the_learners(source, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / f"{LESSON}.ipynb").write_text("{}")                      # not ours
    done = {p.name: what for what, p in sync_notebooks(source, ws)}
    assert done[f"{LESSON}.updated.ipynb"] == "kept, new version beside"
    assert (ws / f"{LESSON}.ipynb").read_text() == "{}"


def test_reset_puts_one_exercise_back_and_keeps_the_rest(source, tmp_path, capsys):
    ws = tmp_path / "ws"
    sync_notebooks(source, ws)
    path = ws / f"{LESSON}.ipynb"
    nb = nbformat.read(path, as_version=4)
    relu = next(ex for ex in exercises(nbformat.read(source / path.name, as_version=4))
                if ex.name == "relu_backward")
    start = nb.cells[relu.cell].source
    _edit(path, relu.cell, "def relu_backward(dout, cache):\n    return dout  # my try")
    _edit(path, 0, "my notes")
    assert main(["reset", "03", "relu_backward", "--dir", str(ws), "--source", str(source)]) == 0
    assert "reset relu_backward" in capsys.readouterr().out
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[relu.cell].source == start and nb.cells[0].source == "my notes"
    assert main(["reset", "03", "nope", "--dir", str(ws), "--source", str(source)]) == 1
    assert "has no exercise 'nope'" in capsys.readouterr().err


def test_reset_takes_3_for_03_never_an_updated_copy_and_suggests_names(source, tmp_path,
                                                                      capsys):
    ws = tmp_path / "ws"
    sync_notebooks(source, ws)
    shutil.copy(ws / f"{LESSON}.ipynb", ws / f"{LESSON}.updated.ipynb")   # a newer version
    args = ["--dir", str(ws), "--source", str(source)]
    assert main(["reset", "3", "relu_backward", *args]) == 0
    assert f"{LESSON}.ipynb" in capsys.readouterr().out
    assert main(["reset", "3", "relu_backwrd", *args]) == 1
    err = capsys.readouterr().err
    assert "Did you mean 'relu_backward'" in err and "Its exercises" not in err
    assert main(["reset", "33", "relu_backward", *args]) == 1
    err = capsys.readouterr().err
    assert "no lesson '33'" in err and "the lessons: 01, 03." in err and "updated" not in err
    assert main(["reset", "03_backpropgation", "relu_backward", *args]) == 1
    assert f"Did you mean '{LESSON}'?" in capsys.readouterr().err


@pytest.mark.parametrize("kept", [True, False], ids=["old notebook kept", "old one gone"])
def test_reset_of_a_lesson_that_was_split_says_where_its_content_went(tmp_path, capsys, kept):
    source = tmp_path / "course"
    source.mkdir()
    new = ("04a_mlp_on_digits", "04b_optimizers_and_regularization")
    for name in new:
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", source)
    ws = tmp_path / "ws"
    sync_notebooks(source, ws)
    if kept:                       # the learner's own 04 from before the split, kept as changed
        shutil.copy(source / f"{new[1]}.ipynb", ws / "04_mlp_on_digits.ipynb")
    exercise = dict(student.lesson_exercises(source))[new[1]][0]
    args = ["--dir", str(ws), "--source", str(source)]
    assert main(["reset", "04", exercise, *args]) == 1
    err = capsys.readouterr().err
    assert ("lesson '04' (04_mlp_on_digits) was split (its content is now in 04a_mlp_on_digits "
            "and 04b_optimizers_and_regularization)") in err, err
    assert f"{exercise} is in {new[1]}: dlcourse reset 04b {exercise}" in err, err
    assert "No such file" not in err and "Traceback" not in err
    assert main(["reset", "04", "nope", *args]) == 1
    assert "dlcourse reset 04a EXERCISE" in capsys.readouterr().err
    assert main(["reset", "04b", exercise, *args]) == 0     # the new name works


@pytest.mark.parametrize("old, new, exercise", [
    ("02_loss_and_gradient_descent", ("02a_loss_and_softmax", "02b_gradient_descent"), "hinge_grad"),
    ("06_convolution", ("06a_convolution_and_im2col", "06b_pooling_and_convolution_backward"),
     "conv2d_backward"),
    ("09_playground", ("04d_playground",), "early_stop")], ids=["02", "06", "09"])
def test_issue_39s_split_and_moved_lessons_migrate_an_old_workspace(tmp_path, capsys, old, new,
                                                                     exercise):
    """Issue 39 split 02 and 06 into two sittings each and moved the playground (09) after the
    training lessons (04d): an old workspace's untouched lesson goes, a changed one stays, the
    report says where its content went, and ``reset`` with the old number points to the new."""
    assert student.RENAMED[old] == new
    source = tmp_path / "course"
    source.mkdir()
    for name in new:
        shutil.copy(NOTEBOOKS / f"{name}.ipynb", source)
    older = tmp_path / "older"
    older.mkdir()
    shutil.copy(NOTEBOOKS / f"{new[-1]}.ipynb", older / f"{old}.ipynb")   # as the old course wrote it
    for changed in (False, True):
        ws = tmp_path / f"ws-{changed}"
        sync_notebooks(older, ws)
        if changed:
            _edit(ws / f"{old}.ipynb", 0, "my notes")
        done = {p.name: what for what, p in sync_notebooks(source, ws)}
        assert done[f"{old}.ipynb"] == ("kept, retired" if changed else "retired")
        assert (ws / f"{old}.ipynb").exists() == changed
        workspace._report([(w, ws / n) for n, w in done.items()], ws)
        assert (f"{old}.ipynb is no longer a lesson (its content is now in "
                f"{' and '.join(new)})") in capsys.readouterr().out
    number, holder = old.split("_")[0], new[-1]
    args = ["--dir", str(tmp_path / "ws-True"), "--source", str(source)]
    assert main(["reset", number, exercise, *args]) == 1
    err = capsys.readouterr().err
    assert f"lesson '{number}' ({old}) was {'split' if len(new) > 1 else 'renamed'}" in err, err
    assert f"{exercise} is in {holder}: dlcourse reset {holder.split('_')[0]} {exercise}" in err, err
    assert main(["reset", holder.split("_")[0], exercise, *args]) == 0


def test_solution_only_on_request_and_after_trying(capsys, tmp_path, monkeypatch):
    from dlcourse.check import learner_record
    monkeypatch.delenv(learner_record.SOLUTIONS_ENV, raising=False)
    assert main(["solution", "relu_backward", "--dir", str(tmp_path)]) == 0   # not tried yet:
    assert "dx = dout" not in capsys.readouterr().out                          # no reference
    learner_record.record("relu_backward", "fail", folder=tmp_path)          # issue 37
    learner_record.record("relu_backward", "hint", level=3, folder=tmp_path)
    assert main(["solution", "relu_backward", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "dx = dout * (x > 0)" in out and "03_backpropagation" in out
    assert main(["solution", "no_such_exercise"]) == 1
    assert "The exercises are" in capsys.readouterr().err
    assert main(["solution", "relu_backwrd"]) == 1                 # a typo: the closest few
    err = capsys.readouterr().err
    assert "Did you mean 'relu_backward'" in err and "The exercises are" not in err


def test_student_notebooks_command_keeps_an_edited_notebook(source, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["student-notebooks", str(out), "--source", str(source)]) == 0
    _edit(out / f"{LESSON}.ipynb", 0, "mine")
    assert main(["student-notebooks", str(out), "--source", str(source)]) == 0
    assert "kept your" in capsys.readouterr().out
    assert nbformat.read(out / f"{LESSON}.ipynb", as_version=4).cells[0].source == "mine"


def test_the_notebooks_are_found_in_a_checkout_or_where_a_wheel_puts_them(tmp_path, monkeypatch):
    assert student.notebooks_dir() == NOTEBOOKS
    monkeypatch.setenv("DLCOURSE_NOTEBOOKS", str(tmp_path))
    shutil.copy(NOTEBOOKS / f"{LESSON}.ipynb", tmp_path)
    assert student.notebooks_dir() == tmp_path
    # A wheel installs them as data files under <prefix>/share/dlcourse/notebooks.
    tomllib = pytest.importorskip("tomllib", reason="tomllib is new in Python 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    files = config["tool"]["setuptools"]["data-files"]["share/dlcourse/notebooks"]
    assert files == ["notebooks/*.ipynb"]


def test_jupyter_command_allows_root_only_as_root(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "--allow-root" in workspace.jupyter_command(tmp_path, 9999, browser=False)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    cmd = workspace.jupyter_command(tmp_path, None, browser=True)
    assert "--allow-root" not in cmd and "--no-browser" not in cmd


def test_the_learners_lab_opens_without_nbgrader(tmp_path):
    """Issue 29: the test extra installs nbgrader, which adds its menus and a warning about
    nbgrader_config.py to every JupyterLab; `dlcourse start` turns it off (--nbgrader keeps it)."""
    cmd = workspace.jupyter_command(tmp_path, 9999, browser=False)
    for name in workspace.NBGRADER_SERVER:
        assert f"--ServerApp.jpserver_extensions={name}=False" in cmd
    assert not any("jpserver" in c for c in workspace.jupyter_command(tmp_path, nbgrader=True))
    env = workspace.lab_environment(tmp_path / "cfg", {"JUPYTER_CONFIG_PATH": "/etc/mine"})
    assert env["JUPYTER_CONFIG_PATH"] == os.pathsep.join([str(tmp_path / "cfg"), "/etc/mine"])
    page = json.loads((tmp_path / "cfg" / "labconfig" / "page_config.json").read_text())
    assert page == {"disabledExtensions": {"@jupyter/nbgrader": True}}
    assert workspace.lab_environment(tmp_path / "x", {}, nbgrader=True) == {}
    nbgrader = ROOT / ".venv" / "etc" / "jupyter" / "jupyter_server_config.d" / "nbgrader.json"
    if nbgrader.exists():    # the names we turn off are the ones nbgrader turns on
        enabled = json.loads(nbgrader.read_text())["ServerApp"]["jpserver_extensions"]
        assert set(enabled) == set(workspace.NBGRADER_SERVER)


# A stand-in for JupyterLab: it says it is up, and on SIGTERM or SIGHUP writes which signal
# came and exits, as the lab shuts down its kernels and exits.
STAND_IN = """
import signal, sys, time
def stop(signum, frame):
    open(sys.argv[1], "w").write(str(signum))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGHUP, stop)
open(sys.argv[1] + ".up", "w").write("up")
time.sleep(60)
"""
PARENT = """
import sys
from dlcourse.workspace import run_lab
sys.exit(run_lab([sys.executable, "-c", sys.argv[1], sys.argv[2]]))
"""


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="SIGHUP is POSIX only")
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGHUP"])
def test_stopping_start_stops_the_lab(tmp_path, signum):
    """Issue 29: SIGTERM or SIGHUP to `dlcourse start` reaches the lab, and start waits for it
    (before, the lab was orphaned and kept serving the port)."""
    mark = tmp_path / "got"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, STAND_IN, str(mark)],
                              cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not Path(f"{mark}.up").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"{mark}.up").exists(), "the stand-in did not start"
        parent.send_signal(getattr(signal, signum))       # to start only, not its group
        assert parent.wait(timeout=30) == 0                # the lab's exit status, once it exited
        assert mark.read_text() == str(int(getattr(signal, signum)))
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_serves_jupyterlab_on_a_workspace_without_solutions(tmp_path):
    pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (the course extra)")
    ws, port = tmp_path / "ws", _free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTER_TOKEN": "t0ken"}
    server = subprocess.Popen([sys.executable, "-m", "dlcourse", "start", "--dir", str(ws),
                               "--no-browser", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, answer = time.monotonic() + 120, None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/api", timeout=2) as r:
                    answer = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.5)
        assert answer and "version" in answer, "JupyterLab did not answer on the port"
        with urllib.request.urlopen(f"{base}/lab?token=t0ken", timeout=10) as r:
            page = r.read().decode()
        assert '"disabledExtensions": ["@jupyter/nbgrader"' in page   # no nbgrader menus
        server.send_signal(signal.SIGTERM)            # to `dlcourse start` alone: the lab too
        output, _ = server.communicate(timeout=30)
        with pytest.raises(OSError):                  # nothing serves the port any more
            urllib.request.urlopen(f"{base}/api", timeout=2)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            output, _ = server.communicate()
    assert "nbgrader" not in output.replace("(nbgrader's extensions off)", "")
    assert f"your workspace is {ws.resolve()}" in output
    assert len(list(ws.glob("*.ipynb"))) == len(list(NOTEBOOKS.glob("*.ipynb")))
    _solution_free(ws)


def test_a_renamed_lesson_goes_if_untouched_and_stays_if_changed(source, tmp_path, monkeypatch,
                                                                  capsys):
    """Issue 27 split and renamed lessons: a workspace made by the older course still holds the
    old names. An untouched one is removed (nothing of the learner's is in it), a changed one
    kept, and the report says where its content went."""
    from dlcourse import student, workspace
    monkeypatch.setitem(student.RENAMED, "04_mlp_on_digits", ("04a_mlp_on_digits", "04b_x"))
    monkeypatch.setitem(student.RENAMED, "08c_fusion_and_graphs", ("08d_fusion_and_graphs",))
    old = tmp_path / "old"
    old.mkdir()
    for name in ("04_mlp_on_digits", "08c_fusion_and_graphs"):
        shutil.copy(source / "01_perceptron.ipynb", old / f"{name}.ipynb")
    ws = tmp_path / "ws"
    sync_notebooks(old, ws)                                        # the older course
    _edit(ws / "08c_fusion_and_graphs.ipynb", 0, "my notes")
    (ws / "99_mine.ipynb").write_text((ws / "04_mlp_on_digits.ipynb").read_text())
    done = {p.name: what for what, p in sync_notebooks(source, ws)}  # the new course
    assert done["04_mlp_on_digits.ipynb"] == "retired"
    assert done["08c_fusion_and_graphs.ipynb"] == "kept, retired"
    assert not (ws / "04_mlp_on_digits.ipynb").exists()
    assert nbformat.read(ws / "08c_fusion_and_graphs.ipynb", as_version=4).cells[0].source == \
        "my notes"
    assert (ws / "99_mine.ipynb").exists()                         # not ours: never touched
    workspace._report(list((w, ws / n) for n, w in done.items()), ws)
    out = capsys.readouterr().out
    assert "04_mlp_on_digits.ipynb is no longer a lesson (its content is now in " \
           "04a_mlp_on_digits and 04b_x): removed" in out
    assert "kept as you changed it" in out
    assert [w for w, _ in sync_notebooks(source, ws)] == ["unchanged", "unchanged"]
