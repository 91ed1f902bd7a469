"""The ``dlcourse`` command (also ``python -m dlcourse``).

``dlcourse doctor``
    One screen that says whether this set-up can run the course, and how to fix what is
    missing. Exits 0 when the course can run (the CPU is enough), 1 when something required
    is missing.
``dlcourse train``
    Train a model on a dataset from the command line and print ``test accuracy: 0.xxxx``.
    ``dlcourse train`` alone trains the CNN on the 8x8 digits.
``dlcourse student-notebooks OUTDIR``
    Write the student versions of the notebooks (exercises blanked out) into OUTDIR.

Errors end with one line on stderr and exit status 1 (set ``DLCOURSE_DEBUG=1`` to see the
full traceback); bad arguments exit 2 with argparse's usage message.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from contextlib import contextmanager
from importlib import metadata
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from . import distributed
from .data import POINT_SETS as _POINT_MAKERS

PROG = "dlcourse"
IMAGE_SETS = ("digits", "mnist", "fashion-mnist", "cifar10")
POINT_SETS = tuple(_POINT_MAKERS)          # the 2-D sets: "blobs", "xor", "circles", "spirals"
DATASETS = IMAGE_SETS + POINT_SETS
MODELS = ("perceptron", "mlp", "cnn")

POINTS_N = 1000          # size of a synthetic 2-D set: 600 train / 200 val / 200 test
POINTS_SEED = 0          # the 2-D sets and their split are the same on every run


class CLIError(Exception):
    """A problem to report in one line (exit status 1)."""


# ======================================================================================
# Argument types: a bad value is a usage error (exit 2), not a traceback.
# ======================================================================================
def _number(cast, ok, expected):
    """An argparse type: text -> cast(text), which must satisfy ok; else a usage error that
    says what was expected and what was given."""
    def parse(text):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text}")
        return value
    return parse


_positive_int = _number(int, lambda v: v >= 1, "a positive whole number")
_positive_float = _number(float, lambda v: v > 0 and np.isfinite(v), "a positive number")
_fraction = _number(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
_seed = _number(int, lambda v: v >= 0, "a whole number, 0 or more")


def _int_list(text):
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes separated by commas such as 256,128, "
                                         f"got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes such as 256,128, got {text!r}")
    return values


# ======================================================================================
# The parser
# ======================================================================================
TRAIN_HELP = """\
Train a model and print its accuracy on the test split, as the last line:
`test accuracy: 0.xxxx`. With no options it trains the CNN on the 8x8 digits.

Models:
  perceptron  Rosenblatt's rule (notebook 01). It has one output, so the task must have two
              classes: on the 2-D sets (blobs, xor, circles, spirals) it uses their two
              classes; on the image sets it separates class 0 from class 1 (digit 0 vs
              digit 1, T-shirt vs trouser, airplane vs automobile) and leaves the other
              images out. --epochs is its maximum number of passes; it stops earlier after
              a pass without mistakes. --lr, --optimizer, --batch-size do not apply.
  mlp         Linear-ReLU layers (--hidden, --dropout); images are flattened.
  cnn         conv-BN-ReLU-pool twice, then Linear (--channels, --dropout). Needs images:
              digits, mnist, fashion-mnist or cifar10.

Data: digits ships with scikit-learn (1257 train / 270 val / 270 test). mnist,
fashion-mnist and cifar10 are downloaded once into the folder $DLCOURSE_DATA (default
~/.cache/dlcourse). The 2-D sets have 1000 points split 600/200/200, always the same
(seed 0); --seed sets the model's initial weights, the batch order and dropout.

Defaults not given on the command line depend on the model and dataset:
  digits     cnn: 30 epochs, batch 32, adam lr 3e-3, channels 32,64, dropout 0.25
             mlp: 60 epochs, batch 32, adam lr 1e-3, hidden 256,128, dropout 0.3
  2-D sets   mlp: 100 epochs, batch 32, adam lr 1e-2, hidden 64,64
  mnist, fashion-mnist, cifar10: 5 epochs, batch 64, adam lr 1e-3
  --optimizer sgd: lr 0.05 with momentum 0.9.
The learning rate decays from --lr to 0 along a cosine over the epochs.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="dlcourse: deep learning from first principles on NumPy and CuPy.",
        epilog="Run `dlcourse COMMAND --help` for the options of a command.")
    from . import __version__
    parser.add_argument("--version", action="version", version=f"dlcourse {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    commands.add_parser("doctor", help="check that this set-up can run the course",
                        description="Check Python, NumPy, the GPU (CuPy, driver, CUDA), "
                                    "JupyterLab and the other packages the course uses, and "
                                    "say how to fix each problem found.")

    train = commands.add_parser("train", help="train a model and print its test accuracy",
                                description=TRAIN_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--model", choices=MODELS, default="cnn", help="default: cnn")
    train.add_argument("--dataset", choices=DATASETS, default="digits", help="default: digits")
    train.add_argument("--epochs", type=_positive_int, help="passes over the training data")
    train.add_argument("--batch-size", type=_positive_int, help="samples per step")
    train.add_argument("--lr", type=_positive_float, help="learning rate")
    train.add_argument("--optimizer", choices=("sgd", "adam"),
                       help="default: adam (sgd uses momentum 0.9)")
    train.add_argument("--hidden", type=_int_list, metavar="SIZES",
                       help="mlp hidden layer sizes, comma-separated, e.g. 256,128")
    train.add_argument("--channels", type=_int_list, metavar="C1,C2",
                       help="cnn channels of its two conv layers, e.g. 32,64")
    train.add_argument("--dropout", type=_fraction, help="dropout probability, in [0, 1)")
    train.add_argument("--data-path", metavar="DIR",
                       help="for mnist, fashion-mnist, cifar10: a folder holding the files "
                            "already (no download)")
    train.add_argument("--device", choices=("auto", "cpu", "gpu"),
                       help="auto uses the GPU when one is usable (default: $DLCOURSE_DEVICE, "
                            "or auto when it is unset)")
    train.add_argument("--threads", type=_positive_int,
                       help="BLAS threads on the CPU (default: 1 for digits and the 2-D sets, "
                            "whose small matrix products get slower, not faster, when split "
                            "across threads, above all on a busy machine; else all of them)")
    train.add_argument("--seed", type=_seed, default=0, help="default: 0")
    train.add_argument("--save", metavar="PATH", help="save the trained model (.npz) to PATH")
    train.add_argument("--no-progress", action="store_true",
                       help="no progress bar: print one line per epoch instead")
    train.add_argument("--ranks", type=_positive_int,
                       help="data-parallel training on N processes: runs this command under "
                            "`mpiexec -n N` (--batch-size is per rank). Under mpiexec "
                            "already, leave it out")
    train.set_defaults(usage_error=train.error)   # for the checks done after parsing (main)

    notebooks = commands.add_parser(
        "student-notebooks", help="write the student notebooks (exercises blanked) to OUTDIR",
        description="Write the student versions of the course notebooks into OUTDIR.")
    notebooks.add_argument("outdir", metavar="OUTDIR", help="folder to write into")
    notebooks.add_argument("--source", metavar="DIR",
                           help="folder of the full notebooks (default: ./notebooks, or the "
                                "notebooks folder next to the dlcourse package)")
    return parser


# ======================================================================================
# dlcourse doctor
# ======================================================================================
REQUIRED = [  # (distribution, import name, why)
    ("numpy", "numpy", "arrays on the CPU"),
    ("scikit-learn", "sklearn", "the digits dataset and data splits"),
    ("tqdm", "tqdm", "progress bars"),
    ("matplotlib", "matplotlib", "plots in the notebooks"),
    ("threadpoolctl", "threadpoolctl", "choosing the number of BLAS threads"),
    ("nbformat", "nbformat", "dlcourse student-notebooks"),
]
RECOMMENDED = [  # the "course" extra: pip install -e '.[course]'
    ("jupyterlab", "jupyterlab", "to open the notebooks"),
    ("ipykernel", "ipykernel", "to run Python in the notebooks"),
    ("ipywidgets", "ipywidgets", "sliders and live progress bars in the notebooks"),
]
COURSE_INSTALL = 'python -m pip install -e ".[course]"'   # README's first command, its install
CUPY_DISTS = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
MIN_PYTHON = (3, 10)


def _version_of(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _installed(dist: str, module: str) -> str | None:
    """The version when the package is installed and importable (found), else None."""
    version = _version_of(dist)
    try:
        found = find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return None
    return version or "version unknown"


def doctor(out=None) -> int:
    """Print the set-up report; return 0 when the course can run, 1 when not."""
    out = out or sys.stdout
    from . import __version__, backend

    rows: list[tuple[str, str]] = []     # (mark, text)
    fixes: list[str] = []
    required_missing = False

    def row(mark, text, fix=None):
        rows.append((mark, text))
        if fix:
            fixes.append(fix)

    # -- Python and the required packages ----------------------------------------------
    py = sys.version_info
    python_ok = py[:2] >= MIN_PYTHON
    row("ok" if python_ok else "FAIL", f"Python {platform.python_version()} ({sys.executable})",
        None if python_ok else f"Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer is needed: "
                               f"install a newer Python and make a new virtual environment.")
    required_missing |= not python_ok
    row("ok", f"dlcourse {__version__} ({Path(__file__).resolve().parent})")
    for dist, module, why in REQUIRED:
        version = _installed(dist, module)
        if version is None:
            required_missing = True
            row("FAIL", f"{dist} is missing (needed for {why})", f"pip install {dist}")
        elif dist == "numpy":
            info = backend.device_info("cpu")
            threads = info.get("blas_threads")
            blas = info.get("blas") or "BLAS"
            detail = f"{blas}, {threads} threads" if threads else "BLAS threads unknown"
            row("ok", f"NumPy {version} ({detail}; {info.get('cpu_count')} CPU cores)")
        else:
            row("ok", f"{dist} {version}")
    course_missing = []
    for dist, module, why in RECOMMENDED:
        version = _installed(dist, module)
        if version is None:
            course_missing.append(dist)
            row("warn", f"{dist} is missing ({why})")
        else:
            row("ok", f"{dist} {version}")
    if course_missing:   # one command for all of them: the README's
        fixes.append(f"for the notebooks, run {COURSE_INSTALL} in the course folder (it installs "
                     f"{', '.join(course_missing)})")

    # -- the GPU ------------------------------------------------------------------------
    cupy_dists = [(d, _version_of(d)) for d in CUPY_DISTS]
    cupy_dists = [(d, v) for d, v in cupy_dists if v]
    if len(cupy_dists) > 1:
        names = ", ".join(f"{d} {v}" for d, v in cupy_dists)
        row("warn", f"several CuPy packages are installed ({names})",
            "Keep one: pip uninstall the others, then reinstall the one matching your driver.")
    gpu_ok = backend.gpu_available()
    if gpu_ok:
        info = backend.device_info("gpu")
        row("ok", f"CuPy {info['cupy']}" + (f" ({cupy_dists[0][0]})" if cupy_dists else ""))
        row("ok", f"GPU: {info['name']}, {info['memory_total_gb']} GiB "
                  f"({info['memory_free_gb']} GiB free), compute capability "
                  f"{info['compute_capability']}")
        row("ok", f"CUDA driver supports CUDA {info['driver_version']}; "
                  f"CuPy's CUDA runtime is {info['cuda_runtime_version']}")
    else:
        problem = backend.gpu_problem() or "no GPU"
        smi = _nvidia_smi()
        if smi:   # the driver sees a GPU that CuPy cannot use: say which CuPy fits it
            row("--", f"NVIDIA GPU: {smi['name']}, {smi['memory']}, driver {smi['driver']}"
                      + (f" (supports CUDA {smi['cuda']})" if smi.get("cuda") else ""))
            wheel = _cupy_wheel(smi.get("cuda"))
            if wheel and not cupy_dists:
                problem += f" For this driver: pip install {wheel}"
        if cupy_dists:
            row("warn", f"{cupy_dists[0][0]} {cupy_dists[0][1]} is installed, but the GPU "
                        f"cannot be used", problem)
        else:
            row("--", "CuPy is not installed: the course runs on the CPU (the GPU parts are "
                      "optional)", None)
            fixes.append("(optional, for the GPU parts) " + problem)

    # -- the device the course will use --------------------------------------------------
    # (worked out here rather than with get_device(), which would print its CPU notice, but
    # with backend's own reading of the name, so doctor accepts exactly what a run accepts)
    requested = os.environ.get(backend.ENV_VAR, "auto")
    try:
        name = backend._check_name(requested)
    except ValueError:
        name = None
    unset = f"unset {backend.ENV_VAR} (the default, auto, uses the GPU when it can, else the CPU)"
    if name is None:
        required_missing = True
        row("FAIL", f"{backend.ENV_VAR}={requested!r} is not a device",
            f"Set {backend.ENV_VAR} to auto, cpu or gpu, or {unset}.")
    elif name == "gpu" and not gpu_ok:
        required_missing = True
        row("FAIL", f"{backend.ENV_VAR}={requested} asks for the GPU, which cannot be used",
            f"Make the GPU work (see above), or {unset}.")
    else:
        device = "cpu" if name == "cpu" or not gpu_ok else "gpu"
        row("ok", f"the course will run on the {device.upper()} ({backend.ENV_VAR}={requested})")

    # -- a tiny training step, to prove the library runs -----------------------------------
    if not required_missing:
        try:
            ms = _smoke_test()
            row("ok", f"a small MLP trains on the CPU ({ms:.0f} ms for 20 steps)")
        except Exception as err:   # report, do not crash: this is the doctor
            required_missing = True
            row("FAIL", f"a small training run failed: {type(err).__name__}: {err}",
                "Reinstall dlcourse (pip install -e . in the course folder) and run "
                "`dlcourse doctor` again; if it still fails, report the line above.")

    # -- the report ---------------------------------------------------------------------
    print("dlcourse doctor: can this set-up run the course?\n", file=out)
    for mark, text in rows:
        print(f"  {mark:<4}  {text}", file=out)
    if fixes:
        print("\nTo fix:", file=out)
        for fix in fixes:
            print(f"  - {fix}", file=out)
    print("", file=out)
    if required_missing:
        print("Result: not ready (see FAIL above). Fix it, then run `dlcourse doctor` "
              "again.", file=out)
        return 1
    where = "on the GPU and the CPU" if gpu_ok else "on the CPU (the GPU parts will be skipped)"
    if {"jupyterlab", "ipykernel"} & set(course_missing):
        print(f"Result: ready for `dlcourse train`, not yet for the notebooks (no "
              f"{' or '.join(d for d in ('jupyterlab', 'ipykernel') if d in course_missing)}): "
              f"run {COURSE_INSTALL}. The library runs {where}.", file=out)
        return 0
    print(f"Result: ready. The course runs {where}.", file=out)
    return 0


def _nvidia_smi() -> dict | None:
    """What ``nvidia-smi`` says about the first GPU (works without CuPy), or None."""
    import shutil
    import subprocess
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        query = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True,
                               timeout=10)
        header = subprocess.run([exe], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if query.returncode != 0:
        return None
    return parse_nvidia_smi(query.stdout, header.stdout)


def parse_nvidia_smi(query_csv: str, header: str) -> dict | None:
    """``{"name", "driver", "memory", "cuda"}`` from nvidia-smi's CSV query and its table."""
    import re
    lines = [line for line in query_csv.strip().splitlines() if line.strip()]
    if not lines:
        return None
    parts = [p.strip() for p in lines[0].split(",")]
    if len(parts) < 3:
        return None
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", header or "")
    return {"name": parts[0], "driver": parts[1], "memory": parts[2],
            "cuda": cuda.group(1) if cuda else None}


def _cupy_wheel(cuda: str | None) -> str | None:
    """What to pip install for the CUDA version a driver supports ("12.4" -> the CuPy for
    CUDA 12 with its CUDA libraries: "'cupy-cuda12x[ctk]'"). CuPy 14 dropped CUDA 11: its
    last CuPy is 13, which needs a CUDA 11 toolkit installed beside it."""
    try:
        major = int(str(cuda).split(".")[0])
    except ValueError:
        return None
    if major == 11:
        return "'cupy-cuda11x<14' (and the CUDA 11 toolkit; or update the driver to CUDA 12+)"
    return {12: "'cupy-cuda12x[ctk]'"}.get(major, "'cupy-cuda13x[ctk]'" if major >= 13 else None)


def _smoke_test() -> float:
    from .layers import Sequential
    from .losses import SoftmaxCrossEntropy
    from .models import MLP
    from .optim import SGD
    gen = np.random.default_rng(0)
    X = gen.standard_normal((64, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    model: Sequential = MLP([4, 8, 2], seed=0)
    loss, opt = SoftmaxCrossEntropy(), SGD(model, lr=0.1)
    start = time.perf_counter()
    for _ in range(20):
        loss.forward(model.forward(X), y)
        model.backward(loss.backward())
        opt.step()
    return 1000 * (time.perf_counter() - start)


# ======================================================================================
# dlcourse train
# ======================================================================================
# Options only some models use: given to another model they would be silently ignored.
MODEL_OPTIONS = {"--hidden": ("mlp",), "--channels": ("cnn",), "--dropout": ("mlp", "cnn"),
                 "--batch-size": ("mlp", "cnn"), "--optimizer": ("mlp", "cnn")}


def _options_of_other_models(args) -> str | None:
    """The usage error when options given (not defaults) belong to another model, else None."""
    wrong = [f"{option} ({' and '.join(models)} only)" for option, models in MODEL_OPTIONS.items()
             if args.model not in models and getattr(args, option[2:].replace("-", "_")) is not None]
    if not wrong:
        return None
    them, they = ("it", "it belongs") if len(wrong) == 1 else ("them", "they belong")
    return (f"--model {args.model} does not use {', '.join(wrong)}: leave {them} out, or choose "
            f"the model {they} to.")


def _load_data(name: str, flat: bool, progress: bool, path=None):
    """((X_train, y_train), (X_val, y_val), (X_test, y_test)) as float32 / int64 NumPy."""
    from . import data
    if path is not None and name not in ("mnist", "fashion-mnist", "cifar10"):
        raise CLIError(f"--data-path is for mnist, fashion-mnist and cifar10; {name} needs no files.")
    if name == "digits":
        return tuple(data.load_digits(flat=flat))
    if name in POINT_SETS:
        X, y = data.POINT_SETS[name](POINTS_N, seed=POINTS_SEED)          # already in shuffled order
        a, b = int(0.6 * POINTS_N), int(0.8 * POINTS_N)
        return (X[:a], y[:a]), (X[a:b], y[a:b]), (X[b:], y[b:])
    load = {"mnist": data.load_mnist, "fashion-mnist": data.load_fashion_mnist,
            "cifar10": data.load_cifar10}[name]
    try:
        return tuple(load(flat=flat, progress=progress, path=path))
    except data.DownloadError as err:
        raise CLIError(f"{err} On the command line: --data-path FOLDER.") from None


def _defaults(args) -> dict:
    """Settings for what was not given on the command line (tuned: see TRAIN_HELP)."""
    if args.model == "perceptron":
        d = {"epochs": 100, "lr": 1.0, "batch_size": None}
    elif args.dataset in POINT_SETS:
        d = {"epochs": 100, "batch_size": 32, "lr": 1e-2, "hidden": [64, 64], "dropout": 0.0}
    elif args.dataset == "digits":
        if args.model == "cnn":
            d = {"epochs": 30, "batch_size": 32, "lr": 3e-3, "channels": [32, 64], "dropout": 0.25}
        else:
            d = {"epochs": 60, "batch_size": 32, "lr": 1e-3, "hidden": [256, 128], "dropout": 0.3}
    else:  # mnist, fashion-mnist, cifar10
        d = {"epochs": 5, "batch_size": 64, "lr": 1e-3, "hidden": [256, 128], "dropout": 0.2,
             "channels": [32, 64]}
    if args.optimizer == "sgd":
        d["lr"] = 0.05
    d["optimizer"] = "adam"
    d["threads"] = 1 if args.dataset in ("digits",) + POINT_SETS else None
    for key in ("epochs", "batch_size", "lr", "hidden", "channels", "dropout", "optimizer",
                "threads"):
        given = getattr(args, key)
        if given is not None:
            d[key] = given
    return d


@contextmanager
def _blas_threads(threads):
    """Limit NumPy's BLAS to ``threads`` threads inside the block (None: leave it alone).

    OpenBLAS threads wait for work by spinning; for the small matrix products of the digits
    models, two threads on a machine that is doing anything else can be ten times slower
    than one. threadpoolctl comes with scikit-learn; without it nothing changes.
    """
    if threads is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=threads, user_api="blas"):
        yield


def _binary_subset(split):
    """Keep classes 0 and 1 only (the perceptron's two-class task on a 10-class set)."""
    X, y = split
    keep = y <= 1
    return X[keep].reshape(int(keep.sum()), -1), y[keep]


def _train(args) -> int:
    from . import backend
    from .models import CNN, MLP, Perceptron

    if args.model == "cnn" and args.dataset in POINT_SETS:
        raise CLIError(f"the CNN needs images, but {args.dataset} is a set of 2-D points: "
                       f"use --model mlp (or perceptron), or an image set such as --dataset digits.")
    if args.model == "perceptron" and args.save:
        raise CLIError("--save works for the mlp and cnn models; a Perceptron is two arrays "
                       "(np.savez(path, w=p.w, b=p.b)).")
    if args.channels is not None and len(args.channels) != 2:
        raise CLIError(f"--channels takes two sizes (one per conv layer), e.g. 32,64; got "
                       f"{','.join(map(str, args.channels))}.")
    settings = _defaults(args)
    if (args.ranks or 1) > 1 and not distributed.under_mpiexec():   # lesson 13
        return distributed.relaunch(args.ranks, ["-m", "dlcourse", *args.argv], "--ranks")
    comm = distributed.init()
    if not comm.is_main:                   # one rank speaks
        sys.stdout = open(os.devnull, "w")
    if args.device is not None:            # else $DLCOURSE_DEVICE (auto when unset), as doctor says
        backend.set_device(args.device)
    device = backend.get_device()
    backend.manual_seed(args.seed)

    flat = args.model != "cnn"
    (X_train, y_train), (X_val, y_val), (X_test, y_test) = _load_data(
        args.dataset, flat, not args.no_progress, args.data_path)
    if args.model == "perceptron":
        (X_train, y_train), (X_val, y_val), (X_test, y_test) = (
            _binary_subset(s) for s in ((X_train, y_train), (X_val, y_val), (X_test, y_test)))
        if len(np.unique(y_train)) > 2:
            raise CLIError("the perceptron needs a two-class task.")
        task = " (class 0 vs class 1)" if args.dataset in IMAGE_SETS else ""
        print(f"perceptron on {args.dataset}{task}: {len(X_train)} train / {len(X_test)} test, "
              f"lr {settings['lr']:g}, at most {settings['epochs']} epochs, seed {args.seed}")
        model = Perceptron(X_train.shape[1], lr=settings["lr"], max_epochs=settings["epochs"],
                           seed=args.seed)
        start = time.perf_counter()
        model.fit(X_train, y_train)
        for epoch, mistakes in enumerate(model.errors_, start=1):
            if len(model.errors_) <= 20 or epoch % 10 == 0 or epoch == len(model.errors_):
                print(f"epoch {epoch}: {mistakes} mistakes")
        print(f"trained in {time.perf_counter() - start:.1f} s; validation accuracy: "
              f"{model.score(X_val, y_val):.4f}")
        print(f"test accuracy: {model.score(X_test, y_test):.4f}")
        return 0

    num_classes = int(max(y_train.max(), y_test.max())) + 1
    if args.model == "mlp":
        sizes = [int(np.prod(X_train.shape[1:]))] + list(settings["hidden"]) + [num_classes]
        model = MLP(sizes, dropout=settings["dropout"], seed=args.seed)
        what = f"MLP {sizes}"
    else:
        _, C, H, W = X_train.shape
        model = CNN(C, (H, W), num_classes, channels=settings["channels"], batchnorm=True,
                    dropout=settings["dropout"], seed=args.seed)
        what = f"CNN channels {settings['channels']} with BatchNorm"
    if settings["dropout"]:
        what += f", dropout {settings['dropout']:g}"
    model.to(device)
    with _blas_threads(settings["threads"] if device == "cpu" else None):
        return _fit_and_test(args, settings, model, what, device,
                             (X_train, y_train), (X_val, y_val), (X_test, y_test), comm)


def _fit_and_test(args, settings, model, what, device, train, val, test, comm=None) -> int:
    """Train the MLP or CNN, report each epoch, save it if asked, print the test accuracy.

    Returns 0, or 130 after Ctrl-C (what was trained is still saved when --save was given)."""
    from . import backend
    from .checkpoint import save
    from .losses import SoftmaxCrossEntropy
    from .optim import SGD, Adam
    from .train import TrainingDiverged, evaluate, fit

    (X_train, y_train), (X_val, y_val), (X_test, y_test) = train, val, test
    if settings["optimizer"] == "adam":
        optimizer = Adam(model, lr=settings["lr"])
    else:
        optimizer = SGD(model, lr=settings["lr"], momentum=0.9)
    epochs, batch_size = settings["epochs"], settings["batch_size"]
    print(f"{what} on {args.dataset} ({len(X_train)} train / {len(X_val)} val / "
          f"{len(X_test)} test), {model.num_parameters():,} parameters")
    ranks = f" per rank x {comm.world_size} ranks" if comm is not None and comm.world_size > 1 else ""
    print(f"{settings['optimizer']} lr {settings['lr']:g} (cosine decay), {epochs} epochs, batch {batch_size}{ranks}, "
          f"seed {args.seed}, {backend.describe_device(device)}")

    lr0 = settings["lr"]

    def after_epoch(epoch, history):
        # Cosine schedule: the learning rate glides from lr0 down to 0 at the last epoch.
        # Big steps early to make progress, small ones late to settle: on the digits this
        # is worth about half a point of test accuracy over a constant rate.
        optimizer.lr = lr0 * 0.5 * (1 + math.cos(math.pi * epoch / epochs))
        if args.no_progress:
            print(f"epoch {epoch:3d}/{epochs}: train loss {history.train_loss[-1]:.4f}, "
                  f"val loss {history.val_loss[-1]:.4f}, val accuracy "
                  f"{history.val_accuracy[-1]:.4f} ({history.epoch_time[-1]:.2f} s)", flush=True)

    start = time.perf_counter()
    try:
        history = fit(model, SoftmaxCrossEntropy(), optimizer, X_train, y_train, epochs=epochs,
                      batch_size=batch_size, validation=(X_val, y_val), seed=args.seed,
                      progress=not args.no_progress, callback=after_epoch, comm=comm)
    except TrainingDiverged as err:
        raise CLIError(str(err).replace("err.history", "the history") +
                       " Pass a smaller --lr.") from None
    seconds = time.perf_counter() - start
    note = " (interrupted)" if history.interrupted else ""
    print(f"trained {history.epochs} epochs in {seconds:.1f} s{note}")
    if args.save and (comm is None or comm.is_main):
        path = save(model, args.save)
        print(f"saved the model{' trained so far' if history.interrupted else ''} to {path}")
    if history.interrupted:
        print(f"{PROG} train: interrupted after {history.epochs} of {epochs} epochs (Ctrl-C), so "
              f"no test accuracy.", file=sys.stderr)
        return 130
    result = evaluate(model, X_test, y_test, batch_size=max(batch_size, 256))
    print(f"test accuracy: {result['accuracy']:.4f}")
    return 0


# ======================================================================================
# dlcourse student-notebooks
# ======================================================================================
def _student_notebooks(args) -> int:
    try:
        from .student import write_student_notebooks
    except ModuleNotFoundError as err:
        if err.name not in ("dlcourse.student", f"{__package__}.student"):
            raise
        raise CLIError("student notebooks are not available in this version of dlcourse "
                       "(dlcourse/student.py is missing).") from None
    if args.source is not None:
        source = Path(args.source)
    else:
        candidates = [Path.cwd() / "notebooks", Path(__file__).resolve().parent.parent / "notebooks"]
        source = next((c for c in candidates if c.is_dir()), None)
        if source is None:
            raise CLIError("no notebooks folder found (looked for ./notebooks and next to the "
                           "dlcourse package): pass --source DIR.")
    if not source.is_dir():
        raise CLIError(f"--source {source} is not a folder.")
    written = write_student_notebooks(source, Path(args.outdir))
    count = f"{len(written)} " if isinstance(written, (list, tuple)) else ""
    print(f"wrote {count}student notebooks from {source} to {args.outdir}")
    return 0


# ======================================================================================
# main
# ======================================================================================
# Errors whose message already says what to do: printed without the DLCOURSE_DEBUG hint.
EXPECTED_ERRORS = {"CLIError", "DeviceError", "DownloadError", "ChecksumError", "DataFormatError",
                   "FileNotFoundError", "CheckpointError", "MemoryError"}


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0: success)."""
    parser = build_parser()
    args = parser.parse_args(argv)     # bad arguments: usage + one line, exit 2
    args.argv = list(sys.argv[1:] if argv is None else argv)   # for train --ranks
    if args.command == "train" and (problem := _options_of_other_models(args)):
        args.usage_error(problem)      # the same, for options that belong to another model
    run = {"doctor": lambda a: doctor(), "train": _train,
           "student-notebooks": _student_notebooks}[args.command]
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted.", file=sys.stderr)
        return 130
    except Exception as err:
        if os.environ.get("DLCOURSE_DEBUG"):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        if type(err).__name__ not in EXPECTED_ERRORS:
            message = f"{message} ({type(err).__name__}; set DLCOURSE_DEBUG=1 for the traceback)"
        print(f"{PROG} {args.command}: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
