"""What ``dlcourse train`` accepts and what it fills in: its help, the options each model
uses, and the defaults (tuned per model and data set) for what the command line leaves out."""
from __future__ import annotations

from .train_data import POINT_SETS, SIGNAL_SETS, TEXT_SETS

MODELS = ("perceptron", "mlp", "cnn", "transformer", "lstm")
LANGUAGE_MODELS = ("transformer", "lstm")     # they train on text, and only they do
OPTIMIZERS = ("sgd", "adam", "adamw", "rmsprop", "adagrad")


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
  lstm        a character-level dl.RecurrentLM with LSTM layers (--d-model is its hidden
              size, --layers, --context: the window backpropagation runs through), text
              only, reported as the transformer; gradients clipped to norm 1.

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
             lstm: 5 epochs, batch 32, adam lr 1e-2, hidden (--d-model) 128, 1 layer, context 32
  --optimizer sgd: lr 0.05 with momentum 0.9; adagrad: lr 0.02; rmsprop and adamw
  (weight decay 0.01): the lr of adam.
The learning rate decays from --lr to 0 along a cosine over the epochs.
"""


# Options only some models use: given to another model they would be silently ignored.
MODEL_OPTIONS = {"--hidden": ("mlp",), "--channels": ("cnn",), "--dropout": ("mlp", "cnn"),
                 "--batch-size": ("mlp", "cnn", *LANGUAGE_MODELS),
                 "--optimizer": ("mlp", "cnn", *LANGUAGE_MODELS), "--heads": ("transformer",),
                 **{o: LANGUAGE_MODELS for o in ("--d-model", "--layers", "--context")}}


def options_of_other_models(args) -> str | None:
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


def text_needs_transformer(args) -> str | None:
    """The usage error when text goes to another model than the transformer, or back."""
    if (args.model in LANGUAGE_MODELS) != (args.dataset in TEXT_SETS):
        return ("the transformer and the lstm train on characters, and only they do: use "
                "--model transformer with --dataset text (or --model lstm).")
    return None


# The character transformer (lesson 15): 117,000 parameters. On a 2-core CPU its validation
# loss ends far below the unigram baseline in minutes (docs/terminal.md: the figure measured).
TEXT_DEFAULTS = {"epochs": 6, "batch_size": 32, "lr": 3e-3, "d_model": 64, "heads": 4,
                 "layers": 2, "context": 64}
SAMPLE = {"prompt": "The ", "steps": 300, "temperature": 0.8}    # printed after training
# The LSTM on the same text (issue 42), set to train in about the transformer's time on a
# 2-core CPU (docs/terminal.md: both measured side by side).
LSTM_DEFAULTS = {"epochs": 5, "batch_size": 32, "lr": 1e-2, "d_model": 128, "layers": 1,
                 "context": 32}


# MNIST-1D: the CNN slides 1x5 kernels and 1x2 poolings along each 1x40 signal.
MNIST1D_DEFAULTS = {
    "cnn": {"epochs": 20, "batch_size": 32, "lr": 3e-3, "channels": [32, 64], "dropout": 0.1,
            "kernel_size": (1, 5), "pool": (1, 2)},
    "mlp": {"epochs": 30, "batch_size": 32, "lr": 1e-3, "hidden": [256, 128], "dropout": 0.2},
}


def defaults(args) -> dict:
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
    elif args.model == "lstm":
        d = dict(LSTM_DEFAULTS)
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
