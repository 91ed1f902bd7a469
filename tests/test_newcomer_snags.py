"""The small snags of a newcomer's hour (issue 40, item 14): a data set named in capitals gets a
"did you mean", a failed download leaves no empty cache folder, the progress bar keeps out of
files, doctor's GPU advice is the README's command, the draw page has an icon, and every time
docs/terminal.md gives says the machine and the load it was measured on."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dlcourse as dl
from dlcourse import backend, cli

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("given, meant", [("MNIST", "mnist"), ("Fashion-MNIST", "fashion-mnist"),
                                          ("CIFAR10", "cifar10")])
def test_a_data_set_in_capitals_gets_did_you_mean(given, meant, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--dataset", given])
    assert exit_.value.code == 2
    assert f"invalid choice: {given!r}. Did you mean {meant!r}" in capsys.readouterr().err


def test_a_failed_offline_download_leaves_no_empty_cache_folder(tmp_path, monkeypatch):
    import importlib
    download = importlib.import_module("dlcourse.data.download")

    def offline(*args, **kwargs):
        raise download.URLError("no network")
    monkeypatch.setattr(download, "urlopen", offline)
    cache = tmp_path / "cache" / "dlcourse"
    monkeypatch.setenv("DLCOURSE_DATA", str(cache))
    with pytest.raises(dl.data.DownloadError):
        dl.data.load_mnist(progress=False)
    assert list(tmp_path.iterdir()) == []                 # neither cache/ nor its subfolders
    kept = tmp_path / "mine"                              # a folder that was there stays
    kept.mkdir()
    monkeypatch.setenv("DLCOURSE_DATA", str(kept))
    with pytest.raises(dl.data.DownloadError):
        dl.data.load_mnist(progress=False)
    assert kept.is_dir() and list(kept.iterdir()) == []


def test_the_progress_bar_is_quiet_when_stderr_is_not_a_terminal(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "DLCOURSE_DEVICE": "cpu"}
    with open(tmp_path / "err.txt", "w") as err:
        r = subprocess.run([sys.executable, "-m", "dlcourse", "train", "--model", "mlp",
                            "--dataset", "xor", "--epochs", "3"], stdout=subprocess.PIPE,
                           stderr=err, text=True, env=env, timeout=120)
    assert r.returncode == 0
    assert "\r" not in (tmp_path / "err.txt").read_text()
    assert [line for line in r.stdout.splitlines() if line.startswith("epoch ")] != []
    assert re.search(r"^epoch +3/3: train loss", r.stdout, re.MULTILINE)


def test_doctors_gpu_advice_is_the_readmes_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    command = 'python -m pip install -e ".[gpu]"'
    assert command in readme
    advice = backend._FIXES["missing"]
    assert command in advice and "'dlcourse[gpu]'" not in advice


@pytest.mark.parametrize("name", ["draw.html", "prompt.html"])
def test_the_service_pages_have_an_icon_of_their_own(name):
    from importlib import resources
    page = resources.files("dlcourse.serve").joinpath(name).read_text(encoding="utf-8")
    icon = re.search(r'<link rel="icon" href="([^"]+)">', page)
    assert icon and icon.group(1).startswith("data:image/svg+xml,")   # no /favicon.ico request


def test_every_documented_time_names_its_machine_and_load():
    """Each sentence of docs/terminal.md that gives a time says on what machine and under
    what load it was measured (or that the load was not recorded)."""
    text = " ".join((REPO / "docs" / "terminal.md").read_text(encoding="utf-8").split())
    sentences = re.split(r"(?<=\.)\s+(?=[A-Z`])", text)
    timed = [s for s in sentences if re.search(r"\b\d+(\.\d+)?(–\d+(\.\d+)?)? s\b", s)]
    assert timed
    for sentence in timed:
        assert re.search(r"load (average|were not recorded)", sentence), sentence
        assert re.search(r"\d-core (AMD EPYC|CPU)", sentence), sentence
    for figure in ("about 7 s", "in 56 s", "in 15.4 s"):
        assert any(figure in sentence for sentence in timed), figure
