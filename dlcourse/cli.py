"""The ``dlcourse`` command (also ``python -m dlcourse``).

``dlcourse doctor``
    One screen that says whether this set-up can run the course, and how to fix what is
    missing. Exits 0 when the course can run (the CPU is enough), 1 when something required
    is missing.
``dlcourse train``
    Train a model on a dataset from the command line and print ``test accuracy: 0.xxxx``.
    ``dlcourse train`` alone trains the CNN on the 8x8 digits.
``dlcourse train --model transformer --dataset text`` / ``dlcourse generate MODEL.npz``
    A character-level transformer on the Python documentation (lesson 15): its validation
    loss beside the unigram and bigram baselines, then a sample; ``generate`` continues a prompt.
``dlcourse start`` / ``student-notebooks OUTDIR`` / ``reset LESSON EXERCISE`` / ``solution EXERCISE``
    The learner's own copy of the notebooks (``workspace.py``).
``dlcourse progress``
    The learner's own record, lesson by lesson: exercises passed and tried, hints and
    solutions seen (``check/learner_record.py``; it never leaves the machine).
``dlcourse predict MODEL.npz INPUT``, ``dlcourse export MODEL.npz OUT.onnx``,
``dlcourse serve MODEL.npz``
    Use a saved model: classes and probabilities for inputs, an ONNX file, an HTTP service
    with a draw-a-digit page (notebook 12; export and serve need the ``[serve]`` extra).

Errors end with one line on stderr and exit status 1 (set ``DLCOURSE_DEBUG=1`` to see the
full traceback); bad arguments exit 2 with argparse's usage message.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import distributed
from ._suggest import did_you_mean
from .data import POINT_SETS as _POINT_MAKERS
from .doctor import doctor
from .workspace import add_commands as add_workspace_commands

PROG = "dlcourse"
IMAGE_SETS = ("digits", "mnist", "fashion-mnist", "cifar10")
POINT_SETS = tuple(_POINT_MAKERS)          # the 2-D sets: "blobs", "xor", "circles", "spirals"
SIGNAL_SETS = ("mnist1d",)                 # 1-D signals: a 1xL image for the CNN
TEXT_SETS = ("text",)                      # characters, for the transformer (lesson 15)
DATASETS = IMAGE_SETS + SIGNAL_SETS + POINT_SETS + TEXT_SETS
MODELS = ("perceptron", "mlp", "cnn", "transformer")
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop", "adagrad")

POINTS_N = 1000          # size of a synthetic 2-D set: 600 train / 200 val / 200 test
POINTS_SEED = 0          # the 2-D sets and their split are the same on every run


class CLIError(Exception):
    """A problem to report in one line (exit status 1)."""


# What a file holds, told by its first bytes: a command that writes a file never overwrites one
# of another kind (a trained checkpoint with ONNX bytes) unless --force says so.
_KINDS = ((b"PK\x03\x04", "checkpoint", "a checkpoint (.npz, a zip archive)"),
          (b"PK\x05\x06", "checkpoint", "a checkpoint (.npz, a zip archive)"),
          (b"DLCOURSE-ENCRYPTED", "checkpoint", "an encrypted checkpoint"),
          (b"\x93NUMPY", "array", "a NumPy array (.npy)"),
          (b"\x08", "onnx", "an ONNX model"),
          (b"{", "json", "JSON (a notebook?)"))


def _file_kind(path: Path) -> tuple[str, str]:
    with open(path, "rb") as f:
        head = f.read(32)
    return next(((kind, text) for magic, kind, text in _KINDS if head.startswith(magic)),
                ("other", "something else (not what this command writes)"))


def check_output(option: str, out, inputs=(), expect: str = "", force: bool = False) -> Path:
    """Refuse to write ``out`` when it is one of the command's own ``inputs`` (the same file,
    through any link), a folder, or an existing file of another kind than ``expect`` (unless
    ``force``): the user's files are never destroyed by a slip of the argument order."""
    out = Path(out).expanduser()
    for given in inputs:
        given = Path(given).expanduser()
        same = (out.exists() and given.exists() and os.path.samefile(out, given)) or \
            out.resolve() == given.resolve()
        if same:
            raise CLIError(f"{option} {out} is the file this command reads ({given}): writing it "
                           f"would destroy it. Give another output path.")
    if out.is_dir():
        raise CLIError(f"{option} {out} is a folder; give a file name inside it.")
    if out.exists() and not force:
        kind, text = _file_kind(out)
        if kind != expect:
            raise CLIError(f"{option} {out} exists and holds {text}: refusing to overwrite it "
                           f"with {dict(checkpoint='a checkpoint', onnx='an ONNX model')[expect]}."
                           f" Choose another path, or add --force to replace it.")
    return out


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
class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" (a command, a data set, a model) names the
    closest few choices: ``invalid choice: 'mnsit'. Did you mean 'mnist'?``."""

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            close = did_you_mean(value, action.choices)
            if close:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}.{close}")
        super()._check_value(action, value)


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
  cnn         conv-BN-ReLU-pool twice, then Linear (--channels, --dropout). Needs images
              (digits, mnist, fashion-mnist, cifar10) or signals: on mnist1d each signal is
              a 1x40 image and the CNN slides 1x5 kernels and 1x2 poolings along it.
  transformer a character-level dl.Transformer (--d-model, --heads, --layers, --context),
              text only: it prints the validation loss in nats per character beside the
              unigram and bigram baselines instead of a test accuracy, then a sample.

Data: digits ships with scikit-learn (1257 train / 270 val / 270 test). mnist1d
(Greydanus 2020) is generated from code, seed 42 (3500 train / 500 val / 1000 test). mnist,
fashion-mnist and cifar10 are downloaded once into the folder $DLCOURSE_DATA (default
~/.cache/dlcourse). The 2-D sets have 1000 points split 600/200/200, always the same
(seed 0); --seed sets the model's initial weights, the batch order and dropout. text is
the Python documentation every CPython ships (pydoc_data.topics): the first 90 % of its
characters train, the last 10 % validate.

Defaults not given on the command line depend on the model and dataset:
  digits     cnn: 30 epochs, batch 32, adam lr 3e-3, channels 32,64, dropout 0.25
             mlp: 60 epochs, batch 32, adam lr 1e-3, hidden 256,128, dropout 0.3
  mnist1d    cnn: 20 epochs, batch 32, adam lr 3e-3, channels 32,64, dropout 0.1
             mlp: 30 epochs, batch 32, adam lr 1e-3, hidden 256,128, dropout 0.2
  2-D sets   mlp: 100 epochs, batch 32, adam lr 1e-2, hidden 64,64
  mnist, fashion-mnist, cifar10: 5 epochs, batch 64, adam lr 1e-3
  text       transformer: 6 epochs, batch 32, adam lr 3e-3, d-model 64, 4 heads, 2 layers,
             context 64 (56 s on a 2-core AMD EPYC at a load average of 1.6-5.8:
             docs/terminal.md)
  --optimizer sgd: lr 0.05 with momentum 0.9; adagrad: lr 0.02; rmsprop and adamw
  (weight decay 0.01): the lr of adam.
The learning rate decays from --lr to 0 along a cosine over the epochs.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG, description="dlcourse: deep learning from first principles on NumPy and CuPy.",
        epilog="Run `dlcourse COMMAND --help` for the options of a command.")
    from ._version import __version__
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
    train.add_argument("--optimizer", choices=OPTIMIZERS,
                       help="default: adam (sgd uses momentum 0.9; adamw weight decay 0.01)")
    train.add_argument("--hidden", type=_int_list, metavar="SIZES",
                       help="mlp hidden layer sizes, comma-separated, e.g. 256,128")
    train.add_argument("--channels", type=_int_list, metavar="C1,C2",
                       help="cnn channels of its two conv layers, e.g. 32,64")
    train.add_argument("--dropout", type=_fraction, help="dropout probability, in [0, 1)")
    for option, what in (("--d-model", "transformer width"), ("--heads", "attention heads"),
                         ("--layers", "transformer blocks"), ("--context", "characters seen")):
        train.add_argument(option, type=_positive_int, help=f"{what} (transformer only)")
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
    train.add_argument("--force", action="store_true",
                       help="let --save replace an existing file that is not a checkpoint")
    train.add_argument("--no-progress", action="store_true",
                       help="no progress bar: print one line per epoch instead")
    train.add_argument("--ranks", type=_positive_int,
                       help="data-parallel training on N processes: runs this command under "
                            "`mpiexec -n N` (--batch-size is per rank). Under mpiexec "
                            "already, leave it out")
    train.set_defaults(usage_error=train.error)   # for the checks done after parsing (main)

    add_workspace_commands(commands)   # start, student-notebooks, reset, solution
    _add_progress_command(commands)    # progress: the learner's own record
    _add_deploy_commands(commands)     # predict, export, serve
    _add_generate_command(commands)    # generate (lesson 15)
    return parser


# ======================================================================================
# dlcourse train
# ======================================================================================
# Options only some models use: given to another model they would be silently ignored.
MODEL_OPTIONS = {"--hidden": ("mlp",), "--channels": ("cnn",), "--dropout": ("mlp", "cnn"),
                 "--batch-size": ("mlp", "cnn", "transformer"),
                 "--optimizer": ("mlp", "cnn", "transformer"),
                 **{o: ("transformer",) for o in ("--d-model", "--heads", "--layers", "--context")}}


def _options_of_other_models(args) -> str | None:
    """The usage error when options given (not defaults) belong to another model, else None."""
    def names(models):                     # "mlp and cnn", "mlp, cnn and transformer"
        return " and ".join([", ".join(models[:-1]), models[-1]] if len(models) > 1 else models)
    wrong = [f"{option} ({names(models)} only)" for option, models in MODEL_OPTIONS.items()
             if args.model not in models and getattr(args, option[2:].replace("-", "_")) is not None]
    if not wrong:
        return None
    them, they = ("it", "it belongs") if len(wrong) == 1 else ("them", "they belong")
    return (f"--model {args.model} does not use {', '.join(wrong)}: leave {them} out, or choose "
            f"the model {they} to.")


def _text_needs_transformer(args) -> str | None:
    """The usage error when text goes to another model than the transformer, or back."""
    if (args.model == "transformer") != (args.dataset in TEXT_SETS):
        return ("the transformer trains on characters, and only it does: use --model "
                "transformer with --dataset text.")
    return None


def _load_data(name: str, flat: bool, progress: bool, path=None):
    """((X_train, y_train), (X_val, y_val), (X_test, y_test)) as float32 / int64 NumPy."""
    from . import data
    if path is not None and name not in ("mnist", "fashion-mnist", "cifar10"):
        raise CLIError(f"--data-path is for mnist, fashion-mnist and cifar10; {name} needs no files.")
    if name == "digits":
        return tuple(data.load_digits(flat=flat))
    if name == "mnist1d":
        return tuple(data.load_mnist1d(flat=flat))
    if name in POINT_SETS:
        X, y = data.POINT_SETS[name](POINTS_N, seed=POINTS_SEED)          # already in shuffled order
        a, b = int(0.6 * POINTS_N), int(0.8 * POINTS_N)
        return (X[:a], y[:a]), (X[a:b], y[a:b]), (X[b:], y[b:])
    load = {"mnist": data.load_mnist, "fashion-mnist": data.load_fashion_mnist,
            "cifar10": data.load_cifar10}[name]
    try:
        return tuple(load(flat=flat, progress=progress, path=path))
    except data.DownloadError as err:      # its advice, in the command line's words, once
        from .data.download import OFFLINE_HINT
        message = str(err).replace(OFFLINE_HINT, "--dataset digits needs no download (it "
                                                 "ships with scikit-learn).")
        if "--data-path" not in message:
            message += " On the command line: --data-path FOLDER."
        raise CLIError(message) from None
    except (FileNotFoundError, data.DataFormatError) as err:
        if path is None:
            raise
        message = str(err).replace("leave path=None", "leave out --data-path")
        raise CLIError(f"--data-path {path}: {message}") from None


# The character transformer (lesson 15): 117,000 parameters. On a 2-core CPU its validation
# loss ends far below the unigram baseline in minutes (docs/terminal.md: the figure measured).
TEXT_DEFAULTS = {"epochs": 6, "batch_size": 32, "lr": 3e-3, "d_model": 64, "heads": 4,
                 "layers": 2, "context": 64}
SAMPLE = {"prompt": "The ", "steps": 300, "temperature": 0.8}    # printed after training


# MNIST-1D: the CNN slides 1x5 kernels and 1x2 poolings along each 1x40 signal.
MNIST1D_DEFAULTS = {
    "cnn": {"epochs": 20, "batch_size": 32, "lr": 3e-3, "channels": [32, 64], "dropout": 0.1,
            "kernel_size": (1, 5), "pool": (1, 2)},
    "mlp": {"epochs": 30, "batch_size": 32, "lr": 1e-3, "hidden": [256, 128], "dropout": 0.2},
}


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
    elif args.dataset == "mnist1d":
        d = dict(MNIST1D_DEFAULTS[args.model])
    elif args.model == "transformer":
        d = dict(TEXT_DEFAULTS)
    else:  # mnist, fashion-mnist, cifar10
        d = {"epochs": 5, "batch_size": 64, "lr": 1e-3, "hidden": [256, 128], "dropout": 0.2,
             "channels": [32, 64]}
    d["lr"] = {"sgd": 0.05, "adagrad": 0.02}.get(args.optimizer, d["lr"])
    d["optimizer"] = "adam"
    d["threads"] = 1 if args.dataset in ("digits",) + SIGNAL_SETS + POINT_SETS + TEXT_SETS else None
    for key in ("epochs", "batch_size", "lr", "hidden", "channels", "dropout", "optimizer",
                "threads", "d_model", "heads", "layers", "context"):
        given = getattr(args, key, None)
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


def _stderr_is_terminal() -> bool:
    """Whether the progress bar (on stderr) would be seen redrawn on a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):     # replaced, or closed
        return False


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
    if args.model == "transformer" and (args.ranks or 1) > 1:
        raise CLIError("--ranks (data-parallel training) is for the mlp and cnn models; the "
                       "transformer trains in one process.")
    if args.model == "transformer" and args.data_path is not None:
        raise CLIError("--data-path is for mnist, fashion-mnist and cifar10; text needs no files "
                       "(it ships with Python).")
    if args.model == "perceptron" and args.save:
        raise CLIError("--save works for the mlp and cnn models; a Perceptron is two arrays "
                       "(np.savez(path, w=p.w, b=p.b)).")
    if args.channels is not None and len(args.channels) != 2:
        raise CLIError(f"--channels takes two sizes (one per conv layer), e.g. 32,64; got "
                       f"{','.join(map(str, args.channels))}.")
    if args.save:                          # now, not after minutes of training
        from .checkpoint import check_can_save
        try:
            check_output("--save", check_can_save(args.save), expect="checkpoint",
                         force=args.force)
        except OSError as err:
            problem = (err.strerror if err.errno else str(err)).replace(" (os.makedirs)", "")
            if "path" not in problem:
                problem += ". Choose a path in a folder you can write to."
            raise CLIError(f"--save {args.save}: {problem}") from None
    settings = _defaults(args)
    # A bar redraws itself with hundreds of "\r" updates: in a file or a pipe, one line per
    # epoch says the same. (--no-progress asks for the lines on a terminal too.)
    args.no_progress = args.no_progress or not _stderr_is_terminal()
    if (args.ranks or 1) > 1 and not distributed.under_mpiexec():   # lesson 13
        return distributed.relaunch(args.ranks, ["-m", "dlcourse", *args.argv], "--ranks")
    comm = distributed.init()
    if not comm.is_main:                   # one rank speaks
        sys.stdout = open(os.devnull, "w")
    if args.device is not None:            # else $DLCOURSE_DEVICE (auto when unset), as doctor says
        backend.set_device(args.device)
    device = backend.get_device()
    backend.manual_seed(args.seed)
    if args.model == "transformer":
        with _blas_threads(settings["threads"] if device == "cpu" else None):
            return _train_text(args, settings, device)

    flat = args.model != "cnn"
    (X_train, y_train), (X_val, y_val), (X_test, y_test) = _load_data(
        args.dataset, flat, not args.no_progress, args.data_path)
    if args.model == "perceptron":
        (X_train, y_train), (X_val, y_val), (X_test, y_test) = (
            _binary_subset(s) for s in ((X_train, y_train), (X_val, y_val), (X_test, y_test)))
        if len(np.unique(y_train)) > 2:
            raise CLIError("the perceptron needs a two-class task.")
        task = " (class 0 vs class 1)" if args.dataset not in POINT_SETS else ""
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
        shape = {k: settings[k] for k in ("kernel_size", "pool") if k in settings}
        model = CNN(C, (H, W), num_classes, channels=settings["channels"], batchnorm=True,
                    dropout=settings["dropout"], seed=args.seed, **shape)
        what = f"CNN channels {settings['channels']} with BatchNorm"
        if shape:
            what += f", {'x'.join(map(str, shape['kernel_size']))} kernels"
    if settings["dropout"]:
        what += f", dropout {settings['dropout']:g}"
    model.to(device)
    with _blas_threads(settings["threads"] if device == "cpu" else None):
        return _fit_and_test(args, settings, model, what, device,
                             (X_train, y_train), (X_val, y_val), (X_test, y_test), comm)


def _save(model, path):
    """dl.save, its warning (a signature beside the file that no longer matches) said in one
    line on stderr."""
    import warnings
    from .checkpoint import StaleSignatureWarning, save
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StaleSignatureWarning)
        path = save(model, path)
    for warning in caught:
        if issubclass(warning.category, StaleSignatureWarning):
            print(f"{PROG} train: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
    return path


def _fit_and_test(args, settings, model, what, device, train, val, test, comm=None) -> int:
    """Train the MLP or CNN, report each epoch, save it if asked, print the test accuracy.

    Returns 0, or 130 after Ctrl-C (what was trained is still saved when --save was given)."""
    from . import backend
    from .losses import SoftmaxCrossEntropy
    from . import optim
    from .schedules import cosine_decay, per_epoch
    from .train import TrainingDiverged, evaluate, fit

    (X_train, y_train), (X_val, y_val), (X_test, y_test) = train, val, test
    make = {"sgd": lambda m, lr: optim.SGD(m, lr=lr, momentum=0.9), "adam": optim.Adam,
            "adamw": optim.AdamW, "rmsprop": optim.RMSprop, "adagrad": optim.Adagrad}
    optimizer = make[settings["optimizer"]](model, lr=settings["lr"])
    epochs, batch_size = settings["epochs"], settings["batch_size"]
    print(f"{what} on {args.dataset} ({len(X_train)} train / {len(X_val)} val / "
          f"{len(X_test)} test), {model.num_parameters():,} parameters")
    ranks = f" per rank x {comm.world_size} ranks" if comm is not None and comm.world_size > 1 else ""
    print(f"{settings['optimizer']} lr {settings['lr']:g} (cosine decay), {epochs} epochs, batch {batch_size}{ranks}, "
          f"seed {args.seed}, {backend.describe_device(device)}")

    # Cosine schedule: the learning rate glides from --lr down to 0 at the end. Big steps early
    # to make progress, small ones late to settle: on the digits this is worth about half a
    # point of test accuracy over a constant rate. It changes once per epoch (at whole epochs).
    schedule = per_epoch(cosine_decay(settings["lr"], epochs))

    def after_epoch(epoch, history):
        if args.no_progress:
            print(f"epoch {epoch:3d}/{epochs}: train loss {history.train_loss[-1]:.4f}, "
                  f"val loss {history.val_loss[-1]:.4f}, val accuracy "
                  f"{history.val_accuracy[-1]:.4f} ({history.epoch_time[-1]:.2f} s)", flush=True)

    start = time.perf_counter()
    try:
        history = fit(model, SoftmaxCrossEntropy(), optimizer, X_train, y_train, epochs=epochs,
                      batch_size=batch_size, validation=(X_val, y_val), seed=args.seed,
                      progress=not args.no_progress, callback=after_epoch, lr_schedule=schedule,
                      comm=comm)
    except TrainingDiverged as err:
        raise CLIError(str(err).replace("err.history", "the history") +
                       " Pass a smaller --lr.") from None
    seconds = time.perf_counter() - start
    note = " (interrupted)" if history.interrupted else ""
    print(f"trained {history.epochs} epochs in {seconds:.1f} s{note}")
    if args.save and (comm is None or comm.is_main):
        model.dataset = args.dataset       # kept in the checkpoint: predict --samples reads it
        path = _save(model, args.save)
        print(f"saved the model{' trained so far' if history.interrupted else ''} to {path}")
    if history.interrupted:
        print(f"{PROG} train: interrupted after {history.epochs} of {epochs} epochs (Ctrl-C), so "
              f"no test accuracy.", file=sys.stderr)
        return 130
    result = evaluate(model, X_test, y_test, batch_size=max(batch_size, 256))
    print(f"test accuracy: {result['accuracy']:.4f}")
    return 0


def _train_text(args, settings, device) -> int:
    """The character transformer on the Python documentation: train, report the validation
    loss beside the counting baselines, print a sample, save if asked."""
    from . import backend
    from .data import char_baselines, load_text, text_windows
    from .generate import generate
    from .optim import Adam, AdamW, Adagrad, RMSprop, SGD
    from .schedules import cosine_decay
    from .train import TrainingDiverged, fit
    from .transformer import SequenceCrossEntropy, Transformer

    text = load_text()
    T = settings["context"]
    (X, Y), (X_val, Y_val) = text_windows(text.train, T), text_windows(text.val, T)
    base = char_baselines(text.train, text.val, text.vocab_size)
    try:
        model = Transformer(text.vocab_size, settings["d_model"], settings["heads"],
                            settings["layers"], max_len=T, seed=args.seed, chars=text.vocab.chars)
    except ValueError as err:
        raise CLIError(str(err)) from None
    model.to(device)
    make = {"sgd": lambda m, lr: SGD(m, lr=lr, momentum=0.9), "adam": Adam, "adamw": AdamW,
            "rmsprop": RMSprop, "adagrad": Adagrad}
    optimizer = make[settings["optimizer"]](model, lr=settings["lr"])
    epochs = settings["epochs"]
    print(f"Transformer (d_model {settings['d_model']}, {settings['heads']} heads, "
          f"{settings['layers']} layers, context {T}) on text ({text.source}): "
          f"{len(text.train):,} train / {len(text.val):,} val characters, vocabulary "
          f"{text.vocab_size}, {model.num_parameters():,} parameters")
    print(f"{settings['optimizer']} lr {settings['lr']:g} (cosine decay), {epochs} epochs of "
          f"{len(X):,} windows, batch {settings['batch_size']}, seed {args.seed}, "
          f"{backend.describe_device(device)}")

    def after_epoch(epoch, history):
        if args.no_progress:
            print(f"epoch {epoch:3d}/{epochs}: train loss {history.train_loss[-1]:.4f}, val "
                  f"loss {history.val_loss[-1]:.4f} nats/char ({history.epoch_time[-1]:.1f} s)",
                  flush=True)

    start = time.perf_counter()
    try:
        history = fit(model, SequenceCrossEntropy(), optimizer, X, Y, epochs=epochs,
                      batch_size=settings["batch_size"], validation=(X_val, Y_val),
                      seed=args.seed, progress=not args.no_progress, callback=after_epoch,
                      lr_schedule=cosine_decay(settings["lr"], epochs))
    except TrainingDiverged as err:
        raise CLIError(str(err).replace("err.history", "the history") +
                       " Pass a smaller --lr.") from None
    note = " (interrupted)" if history.interrupted else ""
    print(f"trained {history.epochs} epochs in {time.perf_counter() - start:.1f} s{note}")
    if args.save:
        print(f"saved the model to {_save(model, args.save)}")
    if history.interrupted or not history.val_loss:
        print(f"{PROG} train: interrupted (Ctrl-C), so no validation loss.", file=sys.stderr)
        return 130
    print(f"validation loss: {history.val_loss[-1]:.4f} nats/char; baselines (add-one smoothed "
          f"counts): unigram {base['unigram']:.4f}, bigram {base['bigram']:.4f}")
    ids = generate(model, text.encode(SAMPLE["prompt"]), SAMPLE["steps"],
                   temperature=SAMPLE["temperature"], seed=args.seed)
    print(f"sample (temperature {SAMPLE['temperature']}, seed {args.seed}):\n{text.decode(ids)}")
    return 0


# ======================================================================================
# dlcourse generate (lesson 15)
# ======================================================================================
def _add_generate_command(commands) -> None:
    gen = commands.add_parser(
        "generate", help="continue a prompt with a saved character transformer",
        description="Load a transformer saved by `dlcourse train --model transformer --dataset "
                    "text --save MODEL.npz` and continue --prompt by --steps characters, "
                    "drawn with a key/value cache.")
    gen.add_argument("model", metavar="MODEL.npz")
    gen.add_argument("--prompt", default="The ", help='the text to continue (default: "The ")')
    gen.add_argument("--steps", type=_positive_int, default=300, help="characters to add "
                                                                      "(default: 300)")
    gen.add_argument("--temperature", type=_number(float, lambda v: v >= 0 and np.isfinite(v),
                                                   "a number >= 0"), default=0.8,
                     help="below 1: safer, above 1: wilder, 0: always the likeliest (default 0.8)")
    gen.add_argument("--top-k", type=_positive_int, help="draw only among the k likeliest")
    gen.add_argument("--seed", type=_seed, default=0, help="default: 0")
    _add_protection_options(gen)


def _generate(args) -> int:
    from .checkpoint import load
    from .data import Characters
    from .generate import generate
    model = load(args.model, key=args.key, public_key=args.public_key)
    chars = getattr(model, "chars", None)
    if not chars or not hasattr(model, "step"):
        raise CLIError(f"{args.model} is a {type(model).__name__} without a character "
                       f"vocabulary: generate continues text with a transformer saved by "
                       f"`{PROG} train --model transformer --dataset text --save FILE`.")
    vocab = Characters(chars)
    try:
        prompt = vocab.encode(args.prompt)
    except ValueError as err:
        raise CLIError(f"--prompt: {err}") from None
    if not len(prompt):
        raise CLIError("--prompt is empty: give at least one character to begin with.")
    ids = generate(model, prompt, args.steps, temperature=args.temperature, top_k=args.top_k,
                   seed=args.seed)
    print(vocab.decode(ids))
    return 0


# ======================================================================================
# dlcourse predict / export / serve (notebook 12: from checkpoint to service)
# ======================================================================================
def _shape(text):
    """--input-shape: "64" or "1,8,8" -> (64,) or (1, 8, 8)."""
    try:
        shape = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"expected one sample's shape such as 64 or 1,8,8, "
                                         f"got {text!r}")
    return shape


_port = _number(int, lambda v: 0 < v < 65536, "a port number from 1 to 65535")


def _add_deploy_commands(commands) -> None:
    shape_help = ("one sample's shape, e.g. 64 or 1,8,8 (default: read from the model; needed "
                  "for a Sequential that starts with a Conv2d)")
    predict = commands.add_parser(
        "predict", help="print the classes and probabilities a saved model gives for inputs",
        description="Load MODEL.npz (written by `dlcourse train --save` or dl.save) and print, "
                    "for each input, its class and the class probabilities. INPUT is an .npy "
                    "(or .npz) of inputs shaped like the model's (a batch, flat or as images, "
                    "or one sample), or an image file for the image models (resized to the "
                    "model's input; ink bright, a light background is inverted).")
    predict.add_argument("model", metavar="MODEL.npz")
    predict.add_argument("input", metavar="INPUT", nargs="?",
                         help="inputs to classify; leave out with --samples")
    predict.add_argument("--samples", type=_positive_int, metavar="N",
                         help="instead of INPUT: N test samples of the data set the model was "
                              "trained on (its checkpoint says which; the digits for a model "
                              "that takes 8x8 digits), shown with their true classes")
    predict.add_argument("--text", metavar="PROMPT",
                         help="instead of INPUT, for a language model (the character "
                              "transformer): the text whose next character it predicts")
    predict.add_argument("--input-shape", type=_shape, metavar="SHAPE", help=shape_help)
    predict.add_argument("--top", type=_positive_int, default=3,
                         help="probabilities shown per input, largest first (default: 3)")
    _add_protection_options(predict)

    export = commands.add_parser(
        "export", help="write a saved model as an ONNX file",
        description="Write MODEL.npz as OUT.onnx (evaluation mode, float32, dynamic batch "
                    "axis), check it with onnx.checker and compare onnxruntime's outputs with "
                    "dlcourse's on random inputs. Needs: pip install -e \".[serve]\".")
    export.add_argument("model", metavar="MODEL.npz")
    export.add_argument("out", metavar="OUT.onnx")
    export.add_argument("--input-shape", type=_shape, metavar="SHAPE", help=shape_help)
    export.add_argument("--force", action="store_true",
                        help="replace an existing OUT that is not an ONNX file")
    _add_protection_options(export)

    serve = commands.add_parser(
        "serve", help="serve a saved model over HTTP, with a draw-a-digit page",
        description="Serve MODEL.npz (or an .onnx file) on http://127.0.0.1:PORT/: GET / is a "
                    "page where you draw a digit, GET /health says the service is up, which "
                    "model and which engine it serves, POST /predict takes {\"inputs\": [[...], "
                    "...]} and returns {\"classes\": [...], \"probabilities\": [[...], ...]}. "
                    "The model runs on onnxruntime when it is installed: exported at start and "
                    "refused unless its logits match dl.infer's (to 1e-4 on 8 random inputs). "
                    "Requests that arrive within --batch-window-ms run as one batch. An .onnx "
                    "file is served by onnxruntime as it is, its input shape read from the "
                    "graph; of the checks only --expect-sha256 applies to it (no signature, "
                    "key or digest inside). Needs: pip install -e \".[serve]\".")
    serve.add_argument("model", metavar="MODEL",
                       help="a checkpoint (.npz, from dlcourse train --save or dl.save) or an "
                            "ONNX file (.onnx)")
    serve.add_argument("--engine", choices=("auto", "onnxruntime", "dlcourse"), default="auto",
                       help="what runs the model: onnxruntime (exported and checked at start), "
                            "dlcourse (dl.infer, the course's own), or auto: onnxruntime when "
                            "it is installed (default)")
    serve.add_argument("--batch-window-ms", type=_number(float, lambda v: 0 <= v <= 1000,
                                                         "milliseconds from 0 to 1000"),
                       default=2.0, metavar="MS",
                       help="requests arriving within MS milliseconds run as one batch (at "
                            "most 1024 samples); 0 runs each on its own (default: 2)")
    serve.add_argument("--input-shape", type=_shape, metavar="SHAPE", help=shape_help)
    serve.add_argument("--port", type=_port, default=8000, help="default: 8000")
    serve.add_argument("--host", default="127.0.0.1",
                       help="default: 127.0.0.1, this machine only (0.0.0.0 opens it to the "
                            "network)")
    serve.add_argument("--expect-sha256", metavar="HEX",
                       help="refuse to start unless the model file's SHA-256 (as sha256sum "
                            "prints it) is HEX")
    serve.add_argument("--max-request-bytes", type=_positive_int, default=4 * 2**20,
                       help="largest request body accepted (default: 4 MiB)")
    _add_protection_options(serve)

    keygen = commands.add_parser(
        "keygen", help="write a key pair for signing models, or an AES key for encrypting them",
        description="Write an Ed25519 key pair into DIR: model_signing.key (private, mode 0600: "
                    "signs) and model_signing.pub (public: verifies). With --aes, a 32-byte "
                    "AES-256 key, model.aeskey (mode 0600), for encrypted checkpoints. Never "
                    "overwrites a key. Needs: pip install -e \".[protect]\".")
    keygen.add_argument("dir", metavar="DIR")
    keygen.add_argument("--aes", action="store_true", help="an AES key instead of a key pair")
    keygen.set_defaults(run=_keygen)

    sign = commands.add_parser(
        "sign", help="sign a saved model (writes MODEL.npz.sig beside it)",
        description="Sign the exact bytes of MODEL.npz (encrypted or not) with an Ed25519 "
                    "private key; the signature goes beside it as MODEL.npz.sig. `dlcourse "
                    "serve/predict/export --public-key` and dl.load(path, public_key=...) then "
                    "refuse any file but one this key signed.")
    sign.add_argument("model", metavar="MODEL.npz")
    sign.add_argument("--key", required=True, metavar="PRIVATE_KEY",
                      help="the private key file (model_signing.key from `dlcourse keygen`)")
    sign.set_defaults(run=_sign)


def _add_protection_options(command) -> None:
    command.add_argument("--key", metavar="FILE",
                         help="the AES key file of an encrypted model (default: "
                              "$DLCOURSE_MODEL_KEY); a file, never the key itself")
    command.add_argument("--public-key", metavar="FILE",
                         help="refuse the model unless MODEL.sig is this public key's signature "
                              "of its bytes")


def _keygen(args) -> int:
    from .protect import keygen
    for path in keygen(args.dir, aes=args.aes):
        print(f"wrote {path}" + (" (private: keep it so, mode 0600)"
                                 if path.suffix in (".key", ".aeskey") else " (public)"))
    _warn_if_committable(Path(args.dir).expanduser())
    return 0


def _warn_if_committable(folder: Path) -> None:
    """Warn when ``folder`` lies in a git work tree and git does not ignore it: a private key
    there is one `git add .` away from being published."""
    import subprocess
    folder = folder.resolve()
    root = next((p for p in (folder, *folder.parents) if (p / ".git").exists()), None)
    if root is None:
        return
    try:
        ignored = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(folder)],
                                 capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):      # no git: say it anyway
        ignored = False
    if not ignored:
        print(f"{PROG} keygen: warning: {folder} is inside the git work tree {root}, and git "
              f"does not ignore it: the private key could be committed. Add "
              f"{folder.relative_to(root).as_posix() or '.'}/ to {root / '.gitignore'}, or keep "
              f"keys outside the checkout.", file=sys.stderr)


def _sign(args) -> int:
    from .protect import write_signature
    try:
        data = Path(args.model).read_bytes()            # (closes the file: no ResourceWarning)
    except FileNotFoundError:
        raise FileNotFoundError(f"No model at {args.model}.") from None
    print(f"wrote {write_signature(args.model, data, args.key)}")
    return 0


def _say_verified(args) -> None:
    """After a load with --public-key (which refuses any other file): say whose signature."""
    if args.public_key is not None:
        from .protect import public_key_id, signature_path
        print(f"signature verified: key id {public_key_id(args.public_key)} "
              f"({signature_path(args.model).name})")


def _load_for_inference(args):
    from .checkpoint import load
    from .inference import InputError, check_parameters_finite, fits, input_shape
    model = load(args.model, key=args.key, public_key=args.public_key)
    _say_verified(args)
    try:
        check_parameters_finite(model, args.model)
        if not args.input_shape:
            return model, input_shape(model)
    except InputError as err:
        raise CLIError(str(err)) from None
    shape = tuple(args.input_shape)
    problem = fits(model, shape)
    if problem:
        raise CLIError(f"--input-shape {','.join(map(str, shape))} does not fit this model: "
                       f"{problem}")
    return model, shape


def _test_samples(model, shape, n: int):
    """(x, y): the first n test samples of the data set the model was trained on."""
    name = getattr(model, "dataset", None)
    if name is None and tuple(shape) in ((64,), (1, 8, 8)):
        name = "digits"                          # what a model of 8x8 inputs is trained on
    if name is None or name not in DATASETS or name == "text":
        raise CLIError("this checkpoint does not say which data set it was trained on (only "
                       "`dlcourse train --save` records it): give an INPUT file instead of "
                       "--samples, e.g. one written with np.save('inputs.npy', X[:5]).")
    flat = len(shape) == 1
    (_, _), (_, _), (X, y) = _load_data(name, flat=flat, progress=False)
    return X[:n], y[:n], name


def _predict(args) -> int:
    from .inference import InputError, as_batch, predict_proba, read_inputs, tokens_of
    if sum(given is not None for given in (args.input, args.samples, args.text)) != 1:
        raise CLIError("give either INPUT (a file of inputs), --samples N (N test samples of "
                       "the model's data set) or --text PROMPT (for a language model), one of "
                       "them: e.g. `dlcourse predict cnn.npz --samples 5`.")
    model, shape = _load_for_inference(args)
    try:
        tokens = tokens_of(model, shape)
    except InputError as err:
        raise CLIError(str(err)) from None
    if tokens is not None:
        return _predict_next(args, model, tokens)
    if args.text is not None:
        raise CLIError(f"--text is for a language model (the character transformer); "
                       f"{args.model} is a {type(model).__name__} that classifies inputs of "
                       f"shape {list(shape)}: give INPUT (an .npy) or --samples N.")
    truth, where = None, args.input
    try:
        if args.samples is not None:
            raw, truth, name = _test_samples(model, shape, args.samples)
            where = f"{name} test samples"
        else:
            raw = read_inputs(args.input, shape)
        x = as_batch(raw, shape, single_ok=True)
        classes, probs = predict_proba(model, x)
    except InputError as err:
        raise CLIError(f"{where}: {err}") from None
    top = min(args.top, probs.shape[1])
    print(f"{len(x)} input(s) of shape {list(shape)}{f' ({where})' if truth is not None else ''}"
          f": class, then the {top} largest probabilities")
    for i, (c, p) in enumerate(zip(classes, probs)):
        best = np.argsort(-p, kind="stable")[:top]
        known = f" (true {truth[i]})" if truth is not None else ""
        print(f"{i}: class {c}{known}   " + "  ".join(f"{k}: {p[k]:.4f}" for k in best))
    if truth is not None:
        print(f"{int((classes == truth).sum())} of {len(truth)} right")
    return 0


def _predict_next(args, model, tokens) -> int:
    """predict on a language model: the distribution of the next token after each prompt
    (--text, a .txt file, or an .npy of token ids (N, T) or (T,))."""
    from .inference import InputError, next_token_logits, read_inputs, classes_and_probabilities
    from .fast_inference import infer
    if args.samples is not None:
        raise CLIError(f"{args.model} is a language model: it has no labelled test samples to "
                       f"classify. Give a prompt, `{PROG} predict {args.model} --text \"The "
                       f"\"` (the next character's probabilities), or continue it with "
                       f"`{PROG} generate {args.model} --prompt \"The \"`.")
    try:
        if args.text is not None:
            prompts = [args.text]
        elif Path(args.input).suffix.lower() == ".txt":
            prompts = [Path(args.input).read_text(encoding="utf-8")]
        else:
            prompts = read_inputs(args.input, (tokens.width,))
        rows = tokens.batch(prompts)
    except InputError as err:
        raise CLIError(f"{'--text' if args.text is not None else args.input}: {err}") from None
    logits = next_token_logits(infer(model, np.where(rows < 0, 0, rows)), rows)
    _, probs = classes_and_probabilities(logits)
    top = min(args.top, probs.shape[1])
    name = (lambda k: repr(tokens.chars[k])) if tokens.chars else str
    print(f"{len(rows)} prompt(s) for a language model (vocabulary {tokens.vocab}, context "
          f"{tokens.width}): the {top} likeliest next "
          f"{'characters' if tokens.chars else 'token ids'}")
    for i, (row, p) in enumerate(zip(rows, probs)):
        ids = row[row >= 0]
        shown = repr("".join(tokens.chars[k] for k in ids)) if tokens.chars else str(ids.tolist())
        best = np.argsort(-p, kind="stable")[:top]
        print(f"{i}: {shown[-40:]} -> " + "  ".join(f"{name(k)}: {p[k]:.4f}" for k in best))
    return 0


def _export(args) -> int:
    """Export, check against onnxruntime, and only then write OUT (atomically): a failed
    export or a mismatch leaves no file behind, and an existing OUT stays as it was."""
    from ._io import atomic_write
    from .export import ExportError, require, to_onnx
    from .inference import random_inputs
    out = check_output("OUT", args.out, inputs=[args.model], expect="onnx", force=args.force)
    if not out.parent.is_dir():
        raise CLIError(f"cannot write {out}: the folder {out.parent} does not exist.")
    model, shape = _load_for_inference(args)
    try:
        data = to_onnx(model, shape).SerializeToString()
        ort = require("onnxruntime")
    except (ExportError, ImportError) as err:
        raise CLIError(str(err)) from None
    x = random_inputs(model, shape, 8)      # token ids (int64) for a language model
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    onnx_out = session.run(None, {session.get_inputs()[0].name: x})[0]
    model.eval()
    diff = float(np.abs(onnx_out - np.asarray(model.forward(x))).max())
    if not diff <= 1e-4:
        raise CLIError(f"onnxruntime's outputs differ from dlcourse's by {diff:.2e} (more than "
                       f"1e-4) on the exported model: nothing was written.")
    with atomic_write(out) as f:
        f.write(data)
    kind = " int64 token ids" if x.dtype.kind == "i" else ""
    print(f"wrote {out}: input [N, {', '.join(map(str, shape))}]{kind}; onnxruntime matches "
          f"dlcourse to {diff:.1e} on 8 random inputs")
    return 0


def _serve(args) -> int:
    from .serve import ModelRefused, serve
    try:
        serve(args.model, host=args.host, port=args.port, expect_sha256=args.expect_sha256,
              max_request_bytes=args.max_request_bytes, key=args.key,
              public_key=args.public_key, engine=args.engine,
              batch_window_ms=args.batch_window_ms, shape=args.input_shape)
    except (ModelRefused, ImportError) as err:
        raise CLIError(str(err)) from None
    return 0


# ======================================================================================
# main
# ======================================================================================
# Errors whose message already says what to do: printed without the DLCOURSE_DEBUG hint.
EXPECTED_ERRORS = {"CLIError", "DeviceError", "DownloadError", "ChecksumError", "DataFormatError",
                   "FileNotFoundError", "CheckpointError", "MemoryError", "WorkspaceError",
                   "ProtectionError"}


# ======================================================================================
# dlcourse progress
# ======================================================================================
def _add_progress_command(commands) -> None:
    progress = commands.add_parser(
        "progress", help="your own record: exercises passed and tried, hints and solutions seen",
        description="Show, lesson by lesson, which exercises pass, which you tried, and which "
                    "hints and solutions you saw: your record in the workspace (never uploaded).")
    progress.add_argument("--dir", metavar="DIR",
                          help="the workspace folder (default: the one you are in, "
                               "$DLCOURSE_WORKSPACE, else ~/dlcourse-workspace)")
    progress.set_defaults(run=_progress)


def _progress(args) -> int:
    from .check.learner_record import report
    from .student import lesson_exercises
    from .workspace import record_folder
    print(report(lesson_exercises(), record_folder(args.dir)))
    return 0


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0: success)."""
    parser = build_parser()
    args = parser.parse_args(argv)     # bad arguments: usage + one line, exit 2
    args.argv = list(sys.argv[1:] if argv is None else argv)   # for train --ranks
    if args.command == "train" and (problem := _options_of_other_models(args)
                                    or _text_needs_transformer(args)):
        args.usage_error(problem)      # the same, for options that belong to another model
    run = getattr(args, "run", None) or {"doctor": lambda a: doctor(), "train": _train,
                                         "predict": _predict, "export": _export,
                                         "serve": _serve, "generate": _generate}[args.command]
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
