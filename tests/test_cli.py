"""The `dlcourse` command: doctor, train, student-notebooks, and its errors (never a traceback)."""
import os
import re
import subprocess
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from dlcourse import backend, cli, doctor
from dlcourse import train as dl_train
from dlcourse.cli import train_command, train_settings

REPO = Path(__file__).resolve().parents[1]
ACCURACY_LINE = re.compile(r"^test accuracy: [01]\.\d{4}$")


def run_module(*args, env=None):
    """`python -m dlcourse ARGS` in a fresh interpreter, as a learner would type it."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "DLCOURSE_DEVICE": "cpu", **(env or {})}
    environment.pop("DLCOURSE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "dlcourse", *args], capture_output=True,
                          text=True, env=environment, cwd=REPO, timeout=120)


def last_line(text):
    return text.strip().splitlines()[-1]


# ======================================================================================
# doctor
# ======================================================================================
def test_doctor_runs_and_says_ready(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for word in ("Python", "NumPy", "threads", "scikit-learn", "jupyterlab", "ipywidgets",
                 "matplotlib", "tqdm", "Result: ready"):
        assert word in out, word
    assert ("GPU:" in out) == backend.gpu_available()


@pytest.mark.parametrize("setting", ["tpu", " cpu"])   # " cpu": a run refuses it too
def test_doctor_fails_on_a_bad_device_setting(capsys, monkeypatch, setting):
    monkeypatch.setenv("DLCOURSE_DEVICE", setting)
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "DLCOURSE_DEVICE" in out and "not ready" in out
    monkeypatch.setattr(backend, "_requested", None)        # read the env var, as a run does
    with pytest.raises(backend.DeviceError):
        backend.get_device()


def test_doctor_reports_a_missing_required_package(capsys, monkeypatch):
    real = doctor.installed
    monkeypatch.setattr(doctor, "installed",
                        lambda dist, module: None if dist == "tqdm" else real(dist, module))
    assert cli.main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "tqdm is missing" in out and "pip install tqdm" in out


def test_doctor_is_not_ready_for_the_notebooks_without_jupyterlab(capsys, monkeypatch):
    real = doctor.installed            # the rest counts as installed, whatever this env has
    monkeypatch.setattr(doctor, "installed", lambda dist, module: None if dist in
                        ("jupyterlab", "ipywidgets") else real(dist, module) or "9.9 (stand-in)")
    assert cli.main(["doctor"]) == 0                      # the library itself works
    out = capsys.readouterr().out
    assert "jupyterlab is missing" in out and "ipywidgets is missing" in out
    assert 'python -m pip install -e ".[course]" in the course folder (it installs jupyterlab, ' \
           'ipywidgets)' in out
    assert "Result: ready for `dlcourse train`, not yet for the notebooks (no jupyterlab)" in out
    assert "Result: ready. " not in out


def test_doctor_through_python_dash_m():
    result = run_module("doctor")
    assert result.returncode == 0, result.stderr
    assert "Result: ready" in result.stdout


# ======================================================================================
# train
# ======================================================================================
def test_train_mlp_on_xor_prints_the_test_accuracy():
    result = run_module("train", "--model", "mlp", "--dataset", "xor", "--epochs", "2",
                        "--no-progress")
    assert result.returncode == 0, result.stderr
    assert ACCURACY_LINE.match(last_line(result.stdout)), result.stdout
    assert "epoch   2/2" in result.stdout
    assert "Traceback" not in result.stderr


def test_short_runs_on_digits_already_reach_90_percent(capsys):
    for model in ("mlp", "cnn"):
        assert cli.main(["train", "--model", model, "--epochs", "3", "--no-progress",
                         "--device", "cpu"]) == 0
        line = last_line(capsys.readouterr().out)
        assert ACCURACY_LINE.match(line), line
        assert float(line.split()[-1]) > 0.9, (model, line)


def test_train_defaults_are_the_cnn_on_digits():
    args = cli.build_parser().parse_args(["train"])
    assert (args.model, args.dataset, args.device) == ("cnn", "digits", None)  # None: $DLCOURSE_DEVICE
    settings = train_settings.defaults(args)
    assert settings["channels"] == [32, 64] and settings["epochs"] == 30
    assert settings["optimizer"] == "adam"


def test_train_on_mnist1d_builds_a_cnn_for_1x40_signals(capsys):
    args = cli.build_parser().parse_args(["train", "--dataset", "mnist1d"])
    settings = train_settings.defaults(args)
    assert settings["kernel_size"] == (1, 5) and settings["pool"] == (1, 2)
    assert cli.main(["train", "--dataset", "mnist1d", "--epochs", "1", "--channels", "4,8",
                     "--no-progress", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "1x5 kernels, dropout 0.1 on mnist1d (3500 train / 500 val / 1000 test)" in out
    assert ACCURACY_LINE.match(last_line(out))


@pytest.mark.parametrize("optimizer", ["adamw", "rmsprop", "adagrad"])
def test_train_takes_the_new_optimizers(optimizer, capsys):
    assert cli.main(["train", "--model", "mlp", "--dataset", "xor", "--epochs", "2",
                     "--optimizer", optimizer, "--no-progress", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert f"{optimizer} lr" in out and ACCURACY_LINE.match(last_line(out))


def test_train_follows_dlcourse_device_unless_device_is_given(monkeypatch, capsys):
    monkeypatch.setattr(backend, "_requested", None)             # as in a fresh `dlcourse train`
    monkeypatch.setattr(backend, "_probe_result", (None, "No GPU here (test)."))
    monkeypatch.setenv("DLCOURSE_DEVICE", "gpu")                 # doctor says FAIL: so must train
    args = ["train", "--model", "mlp", "--dataset", "xor", "--epochs", "1", "--no-progress"]
    assert cli.main(args) == 1
    assert "A GPU was asked for" in capsys.readouterr().err
    assert cli.main(args + ["--device", "cpu"]) == 0              # the option wins over the variable
    assert "CPU:" in capsys.readouterr().out


def test_ctrl_c_saves_what_was_trained_and_exits_130(tmp_path, monkeypatch, capsys):
    from dlcourse import optim
    from dlcourse.checkpoint import load
    real_step, steps = optim.Adam.step, []

    def step(self, *args, **kwargs):                              # Ctrl-C in the second epoch
        steps.append(1)
        if len(steps) == 25:
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)
    monkeypatch.setattr(optim.Adam, "step", step)
    path = tmp_path / "partial.npz"
    assert cli.main(["train", "--model", "mlp", "--dataset", "xor", "--epochs", "3",
                     "--no-progress", "--device", "cpu", "--save", str(path)]) == 130
    captured = capsys.readouterr()
    assert f"saved the model trained so far to {path}" in captured.out
    assert "test accuracy" not in captured.out
    assert "interrupted after 1 of 3 epochs" in captured.err
    assert load(path).sizes == [2, 64, 64, 2]


def test_perceptron_on_blobs_and_on_digits(capsys):
    assert cli.main(["train", "--model", "perceptron", "--dataset", "blobs", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert last_line(out) == "test accuracy: 1.0000"        # separable: it converges
    assert cli.main(["train", "--model", "perceptron", "--dataset", "digits", "--epochs", "5",
                     "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "class 0 vs class 1" in out
    assert float(last_line(out).split()[-1]) > 0.95


def test_train_saves_a_loadable_model(tmp_path, capsys):
    from dlcourse.checkpoint import load
    from dlcourse.models import MLP
    path = tmp_path / "spirals.npz"
    assert cli.main(["train", "--model", "mlp", "--dataset", "spirals", "--epochs", "1",
                     "--hidden", "8", "--optimizer", "sgd", "--no-progress", "--device", "cpu",
                     "--save", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"saved the model to {path}" in out and ACCURACY_LINE.match(last_line(out))
    model = load(path)
    assert isinstance(model, MLP) and model.sizes == [2, 8, 2]


def test_train_progress_bar_goes_to_stderr(capsys, monkeypatch):
    monkeypatch.setattr(dl_train, "_bar_is_seen", lambda: True)   # a bar on a terminal only
    assert cli.main(["train", "--model", "mlp", "--dataset", "circles", "--epochs", "2",
                     "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "epoch 2/2" in captured.err
    assert ACCURACY_LINE.match(last_line(captured.out))


# ======================================================================================
# Errors: one line, no traceback
# ======================================================================================
@pytest.mark.parametrize("args", [
    ["train", "--model", "transformer"],
    ["train", "--dataset", "imagenet"],
    ["train", "--epochs", "0"],
    ["train", "--epochs", "three"],
    ["train", "--lr", "-1"],
    ["train", "--batch-size", "1.5"],
    ["train", "--hidden", "12,x"],
    ["fly"],
    [],
])
def test_bad_arguments_exit_2_without_a_traceback(args, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and "Traceback" not in err


@pytest.mark.parametrize("option, value, message", [
    ("--epochs", "0", "expected a positive whole number, got 0"),
    ("--epochs", "three", "expected a positive whole number, got 'three'"),
    ("--lr", "inf", "expected a positive number, got inf"),
    ("--dropout", "1", "expected a number in [0, 1), got 1"),
    ("--dropout", "x", "expected a number in [0, 1), got 'x'"),
    ("--seed", "-1", "expected a whole number, 0 or more, got -1"),
])
def test_bad_numbers_say_what_was_expected_and_given(option, value, message, capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", option, value])
    assert f"argument {option}: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--model", "cnn", "--hidden", "999"], "--model cnn does not use --hidden (mlp only): "
                                            "leave it out, or choose the model it belongs to."),
    (["--model", "mlp", "--channels", "8,16"], "--model mlp does not use --channels (cnn only)"),
    (["--model", "perceptron", "--hidden", "8", "--dropout", "0.1", "--batch-size", "8",
      "--optimizer", "sgd", "--channels", "8,16"],
     "--model perceptron does not use --hidden (mlp only), --channels (cnn only), --dropout "
     "(mlp and cnn only), --batch-size (mlp, cnn, transformer and lstm only), --optimizer "
     "(mlp, cnn, transformer and lstm only): "
     "leave them out"),
])
def test_options_of_another_model_are_a_usage_error(args, message, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["train", *args])
    assert info.value.code == 2
    assert f"dlcourse train: error: {message}" in capsys.readouterr().err


def test_bad_arguments_through_python_dash_m():
    result = run_module("train", "--model", "nope")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args, words", [
    (["train", "--model", "cnn", "--dataset", "xor"], "needs images"),
    (["train", "--model", "perceptron", "--save", "p.npz"], "--save works"),
    (["train", "--channels", "8,16,32"], "two sizes"),
])
def test_runtime_errors_are_one_line_on_stderr(args, words, capsys):
    assert cli.main(args) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("dlcourse train: error:")


def test_runtime_error_through_python_dash_m():
    result = run_module("train", "--model", "cnn", "--dataset", "spirals")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unexpected_errors_are_one_line_too(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("the disk\nis on fire")
    monkeypatch.setattr(train_command, "load_data", broken)
    assert cli.main(["train", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("dlcourse train: error: the disk is on fire (RuntimeError; set "
                   "DLCOURSE_DEBUG=1 for the traceback)")
    monkeypatch.setenv("DLCOURSE_DEBUG", "1")
    with pytest.raises(RuntimeError):
        cli.main(["train", "--device", "cpu"])


def test_divergence_is_reported_in_one_line(capsys):
    with np.errstate(all="ignore"):
        code = cli.main(["train", "--model", "mlp", "--dataset", "blobs", "--optimizer", "sgd",
                         "--lr", "1e30", "--epochs", "3", "--no-progress", "--device", "cpu"])
    assert code == 1
    err = capsys.readouterr().err.strip()
    assert "diverged at epoch" in err and "--lr" in err and "\n" not in err


@pytest.mark.skipif(backend.gpu_available(), reason="checks the message when there is no GPU")
def test_asking_for_a_missing_gpu_is_one_line(capsys):
    assert cli.main(["train", "--device", "gpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("dlcourse train: error: A GPU was asked for") and "\n" not in err


# ======================================================================================
# student-notebooks
# ======================================================================================
def test_student_notebooks_writes_and_a_missing_source_is_one_line(tmp_path, capsys):
    # The workspace behaviour (edits kept, reset, start) is tested in tests/test_workspace.py.
    source = tmp_path / "full"
    source.mkdir()
    shutil.copy(Path(__file__).resolve().parent.parent / "notebooks" / "01_perceptron.ipynb",
                source)
    assert cli.main(["student-notebooks", str(tmp_path / "out"), "--source", str(source)]) == 0
    assert (tmp_path / "out" / "01_perceptron.ipynb").exists()
    assert "wrote 1 student notebooks" in capsys.readouterr().out
    assert cli.main(["student-notebooks", str(tmp_path / "out"),
                     "--source", str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err.strip()
    assert "is not a folder" in err and "\n" not in err


def test_offline_download_error_is_one_line_with_a_hint(monkeypatch, capsys):
    from dlcourse import data

    def offline(**kwargs):
        raise data.DownloadError("Could not download train-images-idx3-ubyte.gz (no network).")
    monkeypatch.setattr(data, "load_mnist", offline)
    assert cli.main(["train", "--model", "mlp", "--dataset", "mnist", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("dlcourse train: error: Could not download train-images-idx3-ubyte.gz "
                   "(no network). On the command line: --data-path FOLDER.")
    assert cli.main(["train", "--data-path", "somewhere", "--device", "cpu"]) == 1
    assert "needs no files" in capsys.readouterr().err


def test_the_offline_advice_is_given_once_in_the_command_lines_words(monkeypatch, capsys,
                                                                     tmp_path):
    """Issue 29: the download error already names --data-path (and dl.data.load_digits)."""
    import importlib
    download = importlib.import_module("dlcourse.data.download")   # the module, not the function

    def offline(url, *args, **kwargs):
        raise download.URLError("no network")
    monkeypatch.setattr(download, "urlopen", offline)
    monkeypatch.setenv("DLCOURSE_DATA", str(tmp_path))
    assert cli.main(["train", "--model", "mlp", "--dataset", "mnist", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("--data-path") == 1 and "--dataset digits needs no download" in err
    assert "dl.data" not in err and "\n" not in err


def test_a_misspelled_command_or_dataset_gets_the_closest_names(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["strat"])
    assert exit_.value.code == 2
    assert "invalid choice: 'strat'. Did you mean 'start'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "--dataset", "mnsit"])
    err = capsys.readouterr().err
    assert "Did you mean 'mnist'" in err and "'spirals'" not in err.splitlines()[-1]
    with pytest.raises(SystemExit):
        cli.main(["train", "--dataset", "zzz"])          # nothing close: the whole list
    assert "choose from 'digits'" in capsys.readouterr().err


def test_small_sets_train_with_one_blas_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    args = cli.build_parser().parse_args(["train"])
    assert train_settings.defaults(args)["threads"] == 1
    args = cli.build_parser().parse_args(["train", "--dataset", "mnist", "--threads", "2"])
    assert train_settings.defaults(args)["threads"] == 2
    args = cli.build_parser().parse_args(["train", "--dataset", "cifar10"])
    assert train_settings.defaults(args)["threads"] is None
    with train_command._blas_threads(1):
        blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
        assert all(p["num_threads"] == 1 for p in blas)


def test_nvidia_smi_output_is_understood():
    query = "NVIDIA GeForce RTX 3060, 550.54.14, 12288 MiB\n"
    header = "| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4     |"
    assert doctor.parse_nvidia_smi(query, header) == {
        "name": "NVIDIA GeForce RTX 3060", "driver": "550.54.14", "memory": "12288 MiB",
        "cuda": "12.4"}
    assert doctor.parse_nvidia_smi("", header) is None
    assert doctor.cupy_wheel("12.4") == "'cupy-cuda12x[ctk]'"
    assert doctor.cupy_wheel("13.0") == "'cupy-cuda13x[ctk]'"
    assert "cupy-cuda11x<14" in doctor.cupy_wheel("11.8")
    assert doctor.cupy_wheel(None) is None


# ======================================================================================
# train --save is checked before training; errors name the user's path, in CLI words
# ======================================================================================
@pytest.fixture
def no_training(monkeypatch):
    """Fail the test if training starts: the checks must come first."""
    from dlcourse import train

    def fit(*args, **kwargs):
        raise AssertionError("training started before --save was checked")
    monkeypatch.setattr(train, "fit", fit)


@pytest.mark.parametrize("where, words", [
    ("missing/m.npz", "the folder .*missing does not exist"),
    ("a_file/m.npz", "the folder .*a_file is a file, not a folder"),
    ("folder/", "is a folder; give a file name inside it"),
])
def test_save_path_is_checked_before_training(tmp_path, no_training, capsys, where, words):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "folder").mkdir()
    target = f"{tmp_path}/{where}"
    assert cli.main(["train", "--model", "mlp", "--dataset", "xor", "--device", "cpu",
                     "--save", target]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"dlcourse train: error: --save {target}: ")
    assert re.search(words, err) and ".part" not in err and "os.makedirs" not in err


@pytest.mark.skipif(sys.platform == "win32" or os.geteuid() == 0,
                    reason="permission bits (root may write anywhere)")
def test_save_into_a_read_only_folder_is_refused_before_training(tmp_path, no_training, capsys):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    assert cli.main(["train", "--model", "mlp", "--dataset", "xor", "--device", "cpu",
                     "--save", str(folder / "m.npz")]) == 1
    err = capsys.readouterr().err
    assert f"cannot write {folder / 'm.npz'}: Permission denied" in err and ".part" not in err


def test_a_write_error_names_the_users_file_not_the_temporary_one(tmp_path, monkeypatch):
    """Whatever stops the temporary file beside PATH from being created, the error names PATH
    (the check before training and the save itself share the helper)."""
    from dlcourse import _io
    from dlcourse.checkpoint import check_can_save, save
    from dlcourse.models import MLP

    def refuse(path, private=False):
        raise PermissionError(13, "Permission denied", str(path) + ".hidden.part")
    monkeypatch.setattr(_io, "_create_beside", refuse)
    target = tmp_path / "m.npz"
    for attempt in (lambda: check_can_save(target), lambda: save(MLP([2, 2]), target)):
        with pytest.raises(PermissionError) as info:
            attempt()
        assert str(target) in str(info.value) and ".part" not in str(info.value)


def test_data_path_errors_speak_command_line(tmp_path, capsys):
    assert cli.main(["train", "--model", "mlp", "--dataset", "mnist", "--device", "cpu",
                     "--data-path", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dlcourse train: error: --data-path {tmp_path}: ")
    assert "leave out --data-path" in err and "path=None" not in err
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"not an idx file at all")
    for name in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / name).write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    assert cli.main(["train", "--model", "mlp", "--dataset", "mnist", "--device", "cpu",
                     "--data-path", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert f"--data-path {tmp_path}: " in err and "train-images-idx3-ubyte" in err
    assert len(err.splitlines()) == 1
