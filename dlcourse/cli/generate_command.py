"""``dlcourse generate MODEL.npz`` (lessons 14b, 15, 15c): continue a prompt with a saved
language model, reading its characters, or the BPE tokenizer saved beside it."""
from __future__ import annotations

import numpy as np

from .common import (PROG, CLIError, add_protection_options, nonnegative_int, number,
                     positive_int, tokenizer_beside)


def add_command(commands) -> None:
    gen = commands.add_parser(
        "generate", help="continue a prompt with a saved character transformer",
        description="Load a language model saved by `dlcourse train --model transformer (or "
                    "lstm) --dataset text --save MODEL.npz` and continue --prompt by --steps "
                    "tokens (characters, or BPE tokens with the MODEL.npz.bpe.json saved "
                    "beside it by --tokenizer bpe), drawn with a key/value cache (the LSTM "
                    "carries its state).")
    gen.add_argument("model", metavar="MODEL.npz")
    gen.add_argument("--prompt", default="The ", help='the text to continue (default: "The ")')
    gen.add_argument("--steps", type=positive_int, default=300,
                     help="tokens to add: characters, or BPE tokens (default: 300)")
    gen.add_argument("--temperature", type=number(float, lambda v: v >= 0 and np.isfinite(v),
                                                   "a number >= 0"), default=0.8,
                     help="below 1: safer, above 1: wilder, 0: always the likeliest (default 0.8)")
    gen.add_argument("--top-k", type=positive_int, help="draw only among the k likeliest")
    gen.add_argument("--top-p", type=number(float, lambda v: 0 < v <= 1, "a number in (0, 1]"),
                     help="draw only among the likeliest holding this much probability "
                          "(nucleus sampling), e.g. 0.9")
    gen.add_argument("--seed", type=nonnegative_int, default=0, help="default: 0")
    add_protection_options(gen)
    gen.set_defaults(run=_generate)


def _generate(args) -> int:
    from ..checkpoint import load
    from ..data import Characters
    from ..generate import generate
    model = load(args.model, key=args.key, public_key=args.public_key)
    tokenizer = tokenizer_beside(args.model, model) if hasattr(model, "step") else None
    chars = getattr(model, "chars", None)
    if (not chars and tokenizer is None) or not hasattr(model, "step"):
        raise CLIError(f"{args.model} is a {type(model).__name__} without a character "
                       f"vocabulary or a tokenizer beside it: generate continues text with a "
                       f"language model saved by `{PROG} train --model transformer --dataset "
                       f"text --save FILE` (with --tokenizer bpe, FILE.bpe.json goes beside it).")
    vocab = tokenizer if tokenizer is not None else Characters(chars)
    try:
        prompt = vocab.encode(args.prompt)
    except ValueError as err:
        raise CLIError(f"--prompt: {err}") from None
    if not len(prompt):
        raise CLIError("--prompt is empty: give at least one character to begin with.")
    ids = generate(model, prompt, args.steps, temperature=args.temperature, top_k=args.top_k,
                   seed=args.seed, top_p=args.top_p)
    print(vocab.decode(ids))
    return 0
