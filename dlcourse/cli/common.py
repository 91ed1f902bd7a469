"""What every ``dlcourse`` command shares: the one-line error (``CLIError``) and how any error
is reported (one line on stderr, exit status 1; ``DLCOURSE_DEBUG=1`` for the traceback), the
argument types (a bad value is a usage error, exit 2), the parser that suggests the closest
choice, the options of a protected model, and the guard that never overwrites a user's file.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from .._suggest import did_you_mean

PROG = "dlcourse"


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
def number(cast, ok, expected):
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


positive_int = number(int, lambda v: v >= 1, "a positive whole number")
positive_float = number(float, lambda v: v > 0 and np.isfinite(v), "a positive number")
fraction = number(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
nonnegative_int = number(int, lambda v: v >= 0, "a whole number, 0 or more")


def int_list(text):
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
class Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" (a command, a data set, a model) names the
    closest few choices: ``invalid choice: 'mnsit'. Did you mean 'mnist'?``."""

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            close = did_you_mean(value, action.choices)
            if close:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}.{close}")
        super()._check_value(action, value)


def add_protection_options(command) -> None:
    command.add_argument("--key", metavar="FILE",
                         help="the AES key file of an encrypted model (default: "
                              "$DLCOURSE_MODEL_KEY); a file, never the key itself")
    command.add_argument("--public-key", metavar="FILE",
                         help="refuse the model unless MODEL.sig is this public key's signature "
                              "of its bytes")


# ======================================================================================
# Reporting errors
# ======================================================================================
# Errors whose message already says what to do: printed without the DLCOURSE_DEBUG hint.
EXPECTED_ERRORS = {"CLIError", "DeviceError", "DownloadError", "ChecksumError", "DataFormatError",
                   "FileNotFoundError", "CheckpointError", "MemoryError", "WorkspaceError",
                   "ProtectionError"}


def run_command(run, args) -> int:
    """``run(args)``, its errors said in one line on stderr: exit status 1 (130 after Ctrl-C)."""
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


def tokenizer_beside(model_path, model):
    """The BPE tokenizer `dlcourse train --tokenizer bpe --save MODEL.npz` wrote beside the
    model (``MODEL.npz.bpe.json``), or None when there is none (JSON only: nothing in it runs);
    a CLIError when it is not the model's."""
    from ..data.bpe import BPETokenizer
    try:
        return BPETokenizer.beside(model_path, model.get_config().get("vocab", -1))
    except ValueError as err:
        raise CLIError(str(err)) from None
