"""`dlcourse start` twice on one workspace (issue 40, item 10): the second says the course is
already open, with the open lab's address, offers to open that one, and starts no second lab
(two servers saving one learner's notebooks); a lock left by a dead process is taken over."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

from dlcourse import cli, lab_lock, workspace as ws


@pytest.fixture
def no_lab(monkeypatch, tmp_path):
    """start's JupyterLab replaced by a record of the calls (and found, installed or not)."""
    calls = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "jupyterlab" else real(name, *a))

    def run_lab(cmd, cwd=None, env=None, stop_timeout=30, on_start=None):
        on_start(4242)
        calls.append(json.loads((cwd / lab_lock.LOCK_NAME).read_text()))
        return 0
    monkeypatch.setattr(ws, "run_lab", run_lab)
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    return calls


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def hold(folder, pid=None, lab_pid=None, **record):
    folder.mkdir(parents=True, exist_ok=True)
    pid = os.getpid() if pid is None else pid
    record = {"pid": pid, "started": lab_lock._start_time(pid),
              "host": lab_lock.socket.gethostname(), "port": None, "lab_pid": lab_pid, **record}
    (folder / lab_lock.LOCK_NAME).write_text(json.dumps(record))


def test_start_holds_the_lock_while_the_lab_runs_and_removes_it_after(tmp_path, no_lab, capsys):
    folder = tmp_path / "ws"
    assert cli.main(["start", "--dir", str(folder), "--no-browser"]) == 0
    assert no_lab[0]["pid"] == os.getpid() and no_lab[0]["lab_pid"] == 4242
    assert not (folder / lab_lock.LOCK_NAME).exists()


def test_a_second_start_says_the_course_is_open_and_where(tmp_path, no_lab, capsys):
    folder = tmp_path / "ws"
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "jpserver-777.json").write_text(json.dumps(
        {"url": "http://localhost:8890/", "token": "abc123", "root_dir": str(folder)}))
    hold(folder, lab_pid=777)
    before = sorted(p.name for p in folder.iterdir())
    assert cli.main(["start", "--dir", str(folder), "--no-browser"]) == 0
    out = capsys.readouterr().out
    assert "already open" in out and "http://localhost:8890/lab?token=abc123" in out
    assert f"process {os.getpid()}" in out and "Ctrl-C" in out
    assert no_lab == []                                  # no second lab
    assert sorted(p.name for p in folder.iterdir()) == before   # nothing written


def test_the_second_start_offers_to_open_the_open_lab(tmp_path, no_lab, monkeypatch, capsys):
    folder = tmp_path / "ws"
    hold(folder, port=8891)
    opened = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt: "")
    monkeypatch.setattr("webbrowser.open", opened.append)
    assert cli.main(["start", "--dir", str(folder)]) == 0
    assert opened == ["http://localhost:8891/lab"] and no_lab == []


@pytest.mark.parametrize("stale", ["dead pid", "pid reused", "garbage"])
def test_a_lock_a_dead_process_left_is_taken_over(tmp_path, no_lab, capsys, stale):
    folder = tmp_path / "ws"
    if stale == "dead pid":
        hold(folder, pid=dead_pid())
    elif stale == "pid reused":             # a live pid, but not the process that wrote it
        if lab_lock._start_time(os.getpid()) is None:
            pytest.skip("process start times are read from /proc (Linux)")
        hold(folder, started="1")
    else:
        folder.mkdir(parents=True)
        (folder / lab_lock.LOCK_NAME).write_text("{not json")
    assert cli.main(["start", "--dir", str(folder), "--no-browser"]) == 0
    assert "already open" not in capsys.readouterr().out
    assert len(no_lab) == 1 and no_lab[0]["pid"] == os.getpid()
    assert not (folder / lab_lock.LOCK_NAME).exists()


def test_the_lock_is_released_when_the_lab_fails(tmp_path, monkeypatch, no_lab):
    def broken(cmd, cwd=None, env=None, stop_timeout=30, on_start=None):
        raise KeyboardInterrupt
    monkeypatch.setattr(ws, "run_lab", broken)
    folder = tmp_path / "ws"
    assert cli.main(["start", "--dir", str(folder), "--no-browser"]) == 130
    assert not (folder / lab_lock.LOCK_NAME).exists()


def test_only_the_first_of_two_locks_is_granted(tmp_path):
    first = lab_lock.LabLock(tmp_path).acquire()
    with pytest.raises(lab_lock.LabAlreadyOpen) as err:
        lab_lock.LabLock(tmp_path).acquire()
    assert err.value.record["pid"] == os.getpid()
    first.release()
    lab_lock.LabLock(tmp_path).acquire().release()
