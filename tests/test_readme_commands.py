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
