"""``dlcourse train``: train a model on a data set and print ``test accuracy: 0.xxxx`` (the
character transformer, lesson 15: its validation loss beside the counting baselines)."""
from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import contextmanager

import numpy as np

from .. import distributed
from .common import (PROG, CLIError, check_output, fraction, int_list, nonnegative_int,
                     positive_float, positive_int)
from .train_data import DATASETS, POINT_SETS, binary_subset, load_data
from .train_settings import LANGUAGE_MODELS, MODELS, OPTIMIZERS, SAMPLE, TRAIN_HELP, defaults


def add_command(commands) -> None:
    train = commands.add_parser("train", help="train a model and print its test accuracy",
                                description=TRAIN_HELP,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--model", choices=MODELS, default="cnn", help="default: cnn")
    train.add_argument("--dataset", choices=DATASETS, default="digits", help="default: digits")
    train.add_argument("--epochs", type=positive_int, help="passes over the training data")
    train.add_argument("--batch-size", type=positive_int, help="samples per step")
    train.add_argument("--lr", type=positive_float, help="learning rate")
    train.add_argument("--optimizer", choices=OPTIMIZERS,
                       help="default: adam (sgd uses momentum 0.9; adamw weight decay 0.01)")
    train.add_argument("--hidden", type=int_list, metavar="SIZES",
                       help="mlp hidden layer sizes, comma-separated, e.g. 256,128")
    train.add_argument("--channels", type=int_list, metavar="C1,C2",
                       help="cnn channels of its two conv layers, e.g. 32,64")
    train.add_argument("--dropout", type=fraction, help="dropout probability, in [0, 1)")
    for option, what in (("--d-model", "transformer width, lstm hidden size"),
                         ("--heads", "attention heads (transformer only)"),
                         ("--layers", "transformer blocks or lstm layers"),
                         ("--context", "characters seen (lstm: backpropagated through)")):
        train.add_argument(option, type=positive_int, help=what)
    train.add_argument("--tokenizer", choices=("char", "bpe"), default="char",
                       help="text only: characters (default), or byte-level BPE trained on the "
                            "training text (dl.data.BPETokenizer); losses also in nats per byte")
    train.add_argument("--vocab", type=positive_int, default=512,
                       help="--tokenizer bpe: ids in all, 256 bytes + merges (default: 512)")
    train.add_argument("--data-path", metavar="DIR",
                       help="for mnist, fashion-mnist, cifar10: a folder holding the files "
                            "already (no download)")
    train.add_argument("--device", choices=("auto", "cpu", "gpu"),
                       help="auto uses the GPU when one is usable (default: $DLCOURSE_DEVICE, "
                            "or auto when it is unset)")
    train.add_argument("--threads", type=positive_int,
                       help="BLAS threads on the CPU (default: 1 for digits and the 2-D sets, "
                            "whose small matrix products get slower, not faster, when split "
                            "across threads, above all on a busy machine; else all of them)")
    train.add_argument("--seed", type=nonnegative_int, default=0, help="default: 0")
    train.add_argument("--save", metavar="PATH", help="save the trained model (.npz) to PATH")
    train.add_argument("--force", action="store_true",
                       help="let --save replace an existing file that is not a checkpoint")
    train.add_argument("--no-progress", action="store_true",
                       help="no progress bar: print one line per epoch instead")
    train.add_argument("--ranks", type=positive_int,
                       help="data-parallel training on N processes: runs this command under "
                            "`mpiexec -n N` (--batch-size is per rank). Under mpiexec "
                            "already, leave it out")
    train.set_defaults(usage_error=train.error)   # for the checks done after parsing (main)
    train.set_defaults(run=_train)


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


def _train(args) -> int:
    from .. import backend
    from .. import train as train_module
    from ..models import CNN, MLP, Perceptron

    if args.model == "cnn" and args.dataset in POINT_SETS:
        raise CLIError(f"the CNN needs images, but {args.dataset} is a set of 2-D points: "
                       f"use --model mlp (or perceptron), or an image set such as --dataset digits.")
    if args.model in LANGUAGE_MODELS and (args.ranks or 1) > 1:
        raise CLIError(f"--ranks (data-parallel training) is for the mlp and cnn models; the "
                       f"{args.model} trains in one process.")
    if args.model in LANGUAGE_MODELS and args.data_path is not None:
        raise CLIError("--data-path is for mnist, fashion-mnist and cifar10; text needs no files "
                       "(it ships with Python).")
    if args.tokenizer == "bpe" and args.model != "transformer":
        raise CLIError(f"--tokenizer bpe is for --model transformer --dataset text; the "
                       f"{args.model} reads {'characters' if args.model == 'lstm' else 'numbers'}.")
    if args.model == "perceptron" and args.save:
        raise CLIError("--save works for the mlp and cnn models; a Perceptron is two arrays "
                       "(np.savez(path, w=p.w, b=p.b)).")
    if args.channels is not None and len(args.channels) != 2:
        raise CLIError(f"--channels takes two sizes (one per conv layer), e.g. 32,64; got "
                       f"{','.join(map(str, args.channels))}.")
    if args.save:                          # now, not after minutes of training
        from ..checkpoint import check_can_save
        try:
            check_output("--save", check_can_save(args.save), expect="checkpoint",
                         force=args.force)
        except OSError as err:
            problem = (err.strerror if err.errno else str(err)).replace(" (os.makedirs)", "")
            if "path" not in problem:
                problem += ". Choose a path in a folder you can write to."
            raise CLIError(f"--save {args.save}: {problem}") from None
    settings = defaults(args)
    # A bar redraws itself with hundreds of "\r" updates: in a file or a pipe, one line per
    # epoch says the same. (--no-progress asks for the lines on a terminal too.)
    args.no_progress = args.no_progress or not train_module._bar_is_seen()
    if (args.ranks or 1) > 1 and not distributed.under_mpiexec():   # lesson 13
        return distributed.relaunch(args.ranks, ["-m", "dlcourse", *args.argv], "--ranks")
    comm = distributed.init()
    if not comm.is_main:                   # one rank speaks
        sys.stdout = open(os.devnull, "w")
    if args.device is not None:            # else $DLCOURSE_DEVICE (auto when unset), as doctor says
        backend.set_device(args.device)
    device = backend.get_device()
    backend.manual_seed(args.seed)
    if args.model in LANGUAGE_MODELS:
        with _blas_threads(settings["threads"] if device == "cpu" else None):
            return _train_text(args, settings, device)

    flat = args.model != "cnn"
    (X_train, y_train), (X_val, y_val), (X_test, y_test) = load_data(
        args.dataset, flat, not args.no_progress, args.data_path)
    if args.model == "perceptron":
        (X_train, y_train), (X_val, y_val), (X_test, y_test) = (
            binary_subset(s) for s in ((X_train, y_train), (X_val, y_val), (X_test, y_test)))
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
    from ..checkpoint import StaleSignatureWarning, save
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
    from .. import backend
    from ..losses import SoftmaxCrossEntropy
    from .. import optim
    from ..schedules import cosine_decay, per_epoch
    from ..train import TrainingDiverged, evaluate, fit

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


def _bpe_text(vocab: int):
    """The text as BPE ids (dl.data.load_text_bpe), with the tokenizer's training time printed."""
    from ..data.bpe import load_text_bpe
    if vocab < 256:
        raise CLIError(f"--vocab {vocab}: a byte-level BPE vocabulary holds the 256 bytes before "
                       f"any merge, so --vocab must be at least 256 (e.g. --vocab 512).")
    text = load_text_bpe(vocab)
    tok = text.vocab
    print(f"BPE tokenizer: {len(tok.merges)} merges trained on the training text in "
          f"{tok.train_seconds:.2f} s; {len(text.train):,} train / {len(text.val):,} val tokens")
    return text


def _train_text(args, settings, device) -> int:
    """The character transformer on the Python documentation: train, report the validation
    loss beside the counting baselines, print a sample, save if asked."""
    from .. import backend
    from ..data import char_baselines, load_text, text_windows
    from ..data.bpe import nats_per_byte
    from ..generate import generate
    from ..optim import Adam, AdamW, Adagrad, RMSprop, SGD
    from ..schedules import cosine_decay
    from ..train import TrainingDiverged, fit
    from ..recurrent import RecurrentLM
    from ..transformer import SequenceCrossEntropy, Transformer

    text = load_text() if args.tokenizer == "char" else _bpe_text(args.vocab)
    unit = "char" if args.tokenizer == "char" else "token"
    T = settings["context"]
    (X, Y), (X_val, Y_val) = text_windows(text.train, T), text_windows(text.val, T)
    base = char_baselines(text.train, text.val, text.vocab_size)
    lstm = args.model == "lstm"
    try:
        model = RecurrentLM(text.vocab_size, settings["d_model"], settings["layers"], "lstm",
                            seed=args.seed, chars=text.vocab.chars) if lstm else \
            Transformer(text.vocab_size, settings["d_model"], settings["heads"],
                        settings["layers"], max_len=T, seed=args.seed,
                        chars=getattr(text.vocab, "chars", None))
    except ValueError as err:
        raise CLIError(str(err)) from None
    model.to(device)
    make = {"sgd": lambda m, lr: SGD(m, lr=lr, momentum=0.9), "adam": Adam, "adamw": AdamW,
            "rmsprop": RMSprop, "adagrad": Adagrad}
    optimizer = make[settings["optimizer"]](model, lr=settings["lr"])
    epochs = settings["epochs"]
    what = (f"RecurrentLM (LSTM, hidden {settings['d_model']}, {settings['layers']} layers, "
            f"context {T}, gradients clipped to norm 1)" if lstm else
            f"Transformer (d_model {settings['d_model']}, {settings['heads']} heads, "
            f"{settings['layers']} layers, context {T})")
    print(f"{what} on text ({text.source}): "
          f"{len(text.train):,} train / {len(text.val):,} val "
          f"{'characters' if unit == 'char' else 'tokens'}, vocabulary "
          f"{text.vocab_size}, {model.num_parameters():,} parameters")
    print(f"{settings['optimizer']} lr {settings['lr']:g} (cosine decay), {epochs} epochs of "
          f"{len(X):,} windows, batch {settings['batch_size']}, seed {args.seed}, "
          f"{backend.describe_device(device)}")

    def after_epoch(epoch, history):
        if args.no_progress:
            print(f"epoch {epoch:3d}/{epochs}: train loss {history.train_loss[-1]:.4f}, val "
                  f"loss {history.val_loss[-1]:.4f} nats/{unit} ({history.epoch_time[-1]:.1f} s)",
                  flush=True)

    start = time.perf_counter()
    try:
        history = fit(model, SequenceCrossEntropy(), optimizer, X, Y, epochs=epochs,
                      batch_size=settings["batch_size"], validation=(X_val, Y_val),
                      seed=args.seed, progress=not args.no_progress, callback=after_epoch,
                      lr_schedule=cosine_decay(settings["lr"], epochs),
                      clip_norm=1.0 if lstm else None)
    except TrainingDiverged as err:
        raise CLIError(str(err).replace("err.history", "the history") +
                       " Pass a smaller --lr.") from None
    note = " (interrupted)" if history.interrupted else ""
    print(f"trained {history.epochs} epochs in {time.perf_counter() - start:.1f} s{note}")
    if args.save:
        print(f"saved the model to {_save(model, args.save)}")
        if args.tokenizer == "bpe":
            print(f"saved its tokenizer to {text.vocab.save(str(args.save) + '.bpe.json')}")
    if history.interrupted or not history.val_loss:
        print(f"{PROG} train: interrupted (Ctrl-C), so no validation loss.", file=sys.stderr)
        return 130
    print(f"validation loss: {history.val_loss[-1]:.4f} nats/{unit}; baselines (add-one smoothed "
          f"counts): unigram {base['unigram']:.4f}, bigram {base['bigram']:.4f}")
    per_byte = [nats_per_byte(v, text.val, text) for v in
                (history.val_loss[-1], base["unigram"], base["bigram"])]
    print(f"per byte of text (comparable across --tokenizer): validation {per_byte[0]:.4f} "
          f"nats/byte; unigram {per_byte[1]:.4f}, bigram {per_byte[2]:.4f}")
    ids = generate(model, text.encode(SAMPLE["prompt"]), SAMPLE["steps"],
                   temperature=SAMPLE["temperature"], seed=args.seed)
    print(f"sample (temperature {SAMPLE['temperature']}, seed {args.seed}):\n{text.decode(ids)}")
    return 0
