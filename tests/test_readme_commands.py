"""A newcomer's first hour (issue 29, item 1): `dlcourse predict` can be tried without making an
input file (--samples), and the README's terminal lines run as written, top to bottom."""
import subprocess
import sys

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli


def dlcourse(*args, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "dlcourse", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A CNN saved by `dlcourse train --save` (which records its data set)."""
    folder = tmp_path_factory.mktemp("readme")
    r = dlcourse("train", "--epochs", "2", "--save", "cnn.npz", "--no-progress", cwd=folder)
    assert r.returncode == 0, r.stderr
    return folder / "cnn.npz"


def test_predict_samples_shows_test_samples_with_their_true_classes(trained):
    r = dlcourse("predict", trained, "--samples", "5")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert "(digits test samples)" in lines[0] and len(lines) == 7
    assert all("(true " in line for line in lines[1:6]) and lines[-1].endswith("of 5 right")
    assert dl.load(trained).dataset == "digits"


def test_predict_takes_input_or_samples_not_both_not_neither(trained, tmp_path, capsys):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 8, 8), np.float32))
    for argv in (["predict", str(trained)], ["predict", str(trained), str(x), "--samples", "2"]):
        assert cli.main(argv) == 1
        assert "either INPUT" in capsys.readouterr().err


def test_a_model_that_does_not_say_its_data_asks_for_an_input(tmp_path, capsys):
    path = dl.save(dl.MLP([2, 8, 2], seed=0), tmp_path / "points.npz")   # 2-D points, no record
    assert cli.main(["predict", str(path), "--samples", "3"]) == 1
    assert "does not say which data set" in capsys.readouterr().err


def _first_steps() -> list[str]:
    """The README's first-steps block: its command lines, comments stripped."""
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- first-steps -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def _port_free(port: int) -> bool:
    import socket
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def test_the_readme_first_steps_run_as_written_top_to_bottom(tmp_path):
    """Each line in order, in one empty folder, as a newcomer would type them; the service is
    left running until it says where to draw, then stopped with Ctrl-C."""
    import shlex
    import signal
    import time

    from dlcourse.serve.loadtest import free_port
    pytest.importorskip("onnxruntime", reason="the README's export line needs the serve extra")
    lines = _first_steps()
    assert [shlex.split(line)[:2] for line in lines] == [
        ["dlcourse", "doctor"], ["dlcourse", "train"], ["dlcourse", "predict"],
        ["dlcourse", "export"], ["dlcourse", "serve"]]
    for line in lines:
        args = shlex.split(line)[1:]
        if args[0] != "serve":
            r = dlcourse(*args, cwd=tmp_path)
            assert r.returncode == 0, (line, r.stdout[-2000:], r.stderr[-2000:])
            continue
        if not _port_free(8000):        # the README's default port, taken on this machine
            args += ["--port", str(free_port())]
        proc = subprocess.Popen([sys.executable, "-m", "dlcourse", *args], cwd=tmp_path,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            seen, deadline = "", time.monotonic() + 120
            while "draw a digit at" not in seen and time.monotonic() < deadline:
                out = proc.stdout.readline()
                if not out and proc.poll() is not None:
                    break
                seen += out
            assert "draw a digit at" in seen, seen
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert (tmp_path / "cnn.npz").is_file() and (tmp_path / "cnn.onnx").is_file()
