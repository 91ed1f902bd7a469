"""The learner's own record (issue 37): checks run, hints and solutions seen, kept in the
workspace (``dlcourse/check/learner_record.py``), shown by ``dl.check.progress()`` and
``dlcourse progress``, and deciding when ``dlcourse solution`` shows a reference."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

import dlcourse as dl
from dlcourse import _io
from dlcourse.check import hints, learner_record
from dlcourse.cli import main
from dlcourse.student import MANIFEST


@pytest.fixture
def ws(tmp_path, monkeypatch):
    """A workspace folder that ``dlcourse start`` made (its manifest), the current folder;
    $DLCOURSE_WORKSPACE unset, solutions not turned off."""
    (tmp_path / MANIFEST).write_text('{"generated": {}}\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(learner_record.ENV, raising=False)
    monkeypatch.delenv(learner_record.SOLUTIONS_ENV, raising=False)
    learner_record.forget()
    yield tmp_path
    learner_record.forget()


def _wrong(dout, cache):
    return dout * (cache >= 0)


def _right(dout, cache):
    return dout * (cache > 0)


def _read(ws):
    return json.loads((ws / learner_record.FILE).read_text())["exercises"]


def test_the_workspace_is_found_from_its_manifest_or_the_variable(ws, tmp_path_factory,
                                                                  monkeypatch):
    (ws / "sub").mkdir()
    monkeypatch.chdir(ws / "sub")
    assert learner_record.workspace() == ws                 # the nearest folder above
    other = tmp_path_factory.mktemp("elsewhere")
    monkeypatch.setenv(learner_record.ENV, str(other))
    assert learner_record.record_path() == other / learner_record.FILE
    monkeypatch.delenv(learner_record.ENV)
    monkeypatch.chdir(other)
    assert learner_record.workspace() is None and learner_record.record_path() is None


def test_a_check_records_a_failed_run_once_and_a_pass_under_the_exercise(ws, capsys):
    def my_relu(dout, cache):                                # the learner's own name for it
        return _wrong(dout, cache)
    with pytest.raises(dl.check.ExerciseError):
        dl.check.relu_backward(my_relu)
    assert _read(ws)["relu_backward"] == {"fails": 1}
    dl.check.relu_backward(_right)
    assert learner_record.entry("relu_backward") == {"fails": 1, "passes": 1, "hint": 0,
                                                     "solutions": 0}
    assert "never uploaded" in json.loads((ws / learner_record.FILE).read_text())["about"]


def test_the_record_is_written_atomically_and_keeps_its_mode(ws, monkeypatch):
    written = []
    real = _io.atomic_write

    def spy(path, *args, **kwargs):
        written.append(path)
        return real(path, *args, **kwargs)
    monkeypatch.setattr(learner_record, "atomic_write", spy)
    dl.check.hint("relu_backward")
    path = ws / learner_record.FILE
    assert written == [path]
    os.chmod(path, 0o600)                                   # the learner made it private
    dl.check.hint("relu_backward")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert [p.name for p in ws.iterdir() if p.name.endswith(".part")] == []
    assert _read(ws)["relu_backward"]["hint"] == 2


def test_a_damaged_record_reads_as_empty_and_is_rewritten(ws):
    (ws / learner_record.FILE).write_text("{not json")
    assert learner_record.entry("relu_backward")["hint"] == 0
    assert dl.check.hint("relu_backward").startswith("Hint 1 of")
    assert _read(ws)["relu_backward"]["hint"] == 1


def test_progress_shows_passed_tried_hints_and_solutions_per_lesson(ws, capsys):
    with pytest.raises(dl.check.ExerciseError):
        dl.check.relu_backward(_wrong)
    for _ in range(len(hints.HINTS["relu_backward"]) + 1):
        dl.check.hint("relu_backward")
    dl.check.solution("relu_backward")
    dl.check.hint("softmax", 2)
    with pytest.raises(dl.check.ExerciseError):
        dl.check.linear_backward(lambda dout, cache: (dout, dout, dout))
    dl.check.linear_forward(lambda x, W, b: (x @ W + b, (x, W)))
    capsys.readouterr()
    text = dl.check.progress()
    assert text == capsys.readouterr().out.rstrip("\n")
    lines = text.splitlines()
    assert str(ws / learner_record.FILE) in lines[0]
    assert "03_backpropagation: 1 of 3 passed" in lines
    row = {line[4:].split()[0]: line for line in lines if line.startswith("  ")}
    assert "passed" in row["linear_forward"]
    assert "tried (1 failed run)" in row["linear_backward"]
    assert "hints seen: 3" in row["relu_backward"] and "solution seen" in row["relu_backward"]
    assert "not tried" in row["softmax"] and "hints seen: 2" in row["softmax"]
    assert lines[-1].startswith("In all: 1 of ")
    assert main(["progress"]) == 0                        # the same record from the terminal
    assert capsys.readouterr().out.strip() == text


def test_dlcourse_solution_waits_for_an_attempt_and_the_last_hint(ws, capsys, monkeypatch):
    reference = "dx = dout * (x > 0)"
    assert main(["solution", "relu_backward", "--dir", str(ws)]) == 0   # says what to do first
    out = capsys.readouterr().out
    assert reference not in out and "run its check on an answer of your own" in out
    with pytest.raises(dl.check.ExerciseError):
        dl.check.relu_backward(_wrong)
    for _ in range(len(hints.HINTS["relu_backward"]) + 1):
        dl.check.hint("relu_backward")
    monkeypatch.setenv(learner_record.SOLUTIONS_ENV, "off")       # a graded class
    assert main(["solution", "relu_backward"]) == 0
    out = capsys.readouterr().out
    assert "turned off" in out and reference not in out
    monkeypatch.delenv(learner_record.SOLUTIONS_ENV)
    capsys.readouterr()
    assert main(["solution", "relu_backward"]) == 0
    assert reference in capsys.readouterr().out
    assert learner_record.entry("relu_backward")["solutions"] == 1


def test_progress_reads_no_notebook_format_library():
    """A lookup the learner makes often: the notebooks are read as JSON, not with nbformat."""
    code = ("import sys, io, contextlib, dlcourse as dl\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    dl.check.progress()\n"
            "print('nbformat' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "DLCOURSE_WORKSPACE": ""})
    assert out.stdout.strip() == "False", out.stderr


def test_a_pass_recorded_in_an_earlier_session_shows_the_derivation(ws, monkeypatch, capsys):
    from dlcourse.check import harness
    monkeypatch.setattr(harness, "_passed", set())           # a new kernel
    with pytest.raises(dl.check.ExerciseError, match="shown once your answer passes"):
        dl.check.derivation("softmax_ce_grad")
    learner_record.record("softmax_ce_grad", "pass")          # passed yesterday
    assert dl.check.derivation("softmax_ce_grad")
