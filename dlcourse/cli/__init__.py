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

One module per family of commands: ``course_commands.py`` (doctor, start, student-notebooks,
reset, solution, progress), ``train_command.py`` (with ``train_settings.py``, its options and
defaults, and ``train_data.py``, the data sets it knows), ``deploy_commands.py`` (predict,
export, serve), ``protect_commands.py`` (keygen, sign), ``generate_command.py``; what they
share (the one-line errors, the argument types) is in ``common.py``.
"""
from __future__ import annotations

import argparse
import sys

from . import course_commands, deploy_commands, generate_command, protect_commands, train_command
from .common import EXPECTED_ERRORS, PROG, CLIError, Parser, check_output, run_command
from .train_data import (DATASETS, IMAGE_SETS, POINT_SETS, POINTS_N, POINTS_SEED, SIGNAL_SETS,
                         TEXT_SETS)
from .train_settings import (MNIST1D_DEFAULTS, MODEL_OPTIONS, MODELS, OPTIMIZERS, SAMPLE,
                             TEXT_DEFAULTS, TRAIN_HELP, options_of_other_models,
                             text_needs_transformer)

__all__ = ["main", "build_parser", "PROG", "CLIError", "EXPECTED_ERRORS", "check_output",
           "DATASETS", "IMAGE_SETS", "POINT_SETS", "SIGNAL_SETS", "TEXT_SETS", "POINTS_N",
           "POINTS_SEED", "MODELS", "OPTIMIZERS", "MODEL_OPTIONS", "TRAIN_HELP", "TEXT_DEFAULTS",
           "SAMPLE", "MNIST1D_DEFAULTS"]


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG, description="dlcourse: deep learning from first principles on NumPy and CuPy.",
        epilog="Run `dlcourse COMMAND --help` for the options of a command.")
    from .._version import __version__
    parser.add_argument("--version", action="version", version=f"dlcourse {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True

    course_commands.add_doctor_command(commands)      # doctor
    train_command.add_command(commands)               # train
    course_commands.add_commands(commands)   # start, student-notebooks, reset, solution; progress
    deploy_commands.add_commands(commands)            # predict, export, serve
    protect_commands.add_commands(commands)           # keygen, sign
    generate_command.add_command(commands)            # generate (lesson 15)
    return parser


def main(argv=None) -> int:
    """Run the command line; returns the exit status (0: success)."""
    parser = build_parser()
    args = parser.parse_args(argv)     # bad arguments: usage + one line, exit 2
    args.argv = list(sys.argv[1:] if argv is None else argv)   # for train --ranks
    if args.command == "train" and (problem := options_of_other_models(args)
                                    or text_needs_transformer(args)):
        args.usage_error(problem)      # the same, for options that belong to another model
    return run_command(args.run, args)
