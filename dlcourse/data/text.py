"""Text for a character-level model, with no download: the Python documentation.

Introduced in notebook ``15_attention`` (the tiny transformer) and used by ``dlcourse train
--model transformer --dataset text``. Every CPython ships the text of its ``help()`` topics in
the module ``pydoc_data.topics`` (PSF licence): about 79 topics, 460 KB (Python 3.10) to
510 KB (3.13) of English prose and code with about 104 distinct characters. It differs from
one Python version to the next, so a number computed on it is pinned to that version (the
lessons print theirs, and the tests compare properties, not contents).

* :func:`load_text` returns a :class:`TextData`: the characters as ``int64`` ids, split once
  and for all into the first 90 % (train) and the last 10 % (validation) of the text, the
  vocabulary (:class:`Characters`, id ``i`` is the ``i``-th character in sorted order) and
  ``encode`` / ``decode``.
* :func:`text_windows` cuts ids into inputs and targets for next-character prediction:
  ``X`` (N, T) and ``Y`` (N, T), ``Y`` being ``X`` moved on by one character.
* :func:`char_baselines`: what a model must beat, in nats per character on the validation
  text: the unigram model (each character's frequency in the training text) and the bigram
  model (the frequency of each character after the one before), both with add-one (Laplace)
  smoothing, so a character or a pair never seen in training costs a finite amount.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["Characters", "TextData", "load_text", "text_windows", "char_baselines",
           "TEXT_VAL_FRACTION"]

TEXT_VAL_FRACTION = 0.1      # the last 10 % of the text is the validation split


class Characters:
    """A character vocabulary: ``chars[i]`` is the character with id ``i``.

    ``encode("text")`` -> int64 ids (n,); ``decode(ids)`` -> str (any integer array, list, or
    a CuPy array). ``len(vocab)`` is the number of ids."""

    def __init__(self, chars: str):
        if not isinstance(chars, str) or len(set(chars)) != len(chars) or not chars:
            raise ValueError(f"Characters expects a non-empty str of distinct characters, got "
                             f"{chars!r:.80}.")
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        unknown = sorted(set(text) - self.index.keys())
        if unknown:
            raise ValueError(f"{len(unknown)} character(s) of the text are not in the "
                             f"vocabulary of {len(self)}: {''.join(unknown)!r:.60}. Leave them "
                             f"out (the vocabulary: the characters of the training text).")
        return np.fromiter((self.index[c] for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids) -> str:
        ids = np.asarray(ids.get() if hasattr(ids, "get") else ids).reshape(-1)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise ValueError(f"ids must be in [0, {len(self) - 1}], got values from "
                             f"{int(ids.min())} to {int(ids.max())}.")
        return "".join(self.chars[i] for i in ids.tolist())

    def __repr__(self) -> str:
        return f"Characters({len(self)}: {self.chars[:40]!r}...)"


@dataclass(eq=False)
class TextData:
    """Ids of a text split into train and validation, with its vocabulary.

    ``train``: int64 (n_train,), ``val``: int64 (n_val,); ``vocab``: :class:`Characters`;
    ``source``: where the text came from (with the Python version)."""

    train: np.ndarray
    val: np.ndarray
    vocab: Characters
    source: str

    def encode(self, text: str) -> np.ndarray:
        return self.vocab.encode(text)

    def decode(self, ids) -> str:
        return self.vocab.decode(ids)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return (f"TextData({self.source!r}, train={len(self.train):,} chars, "
                f"val={len(self.val):,} chars, vocab={self.vocab_size})")


@functools.lru_cache(maxsize=1)
def _python_docs() -> str:
    from pydoc_data.topics import topics    # in the standard library of every CPython
    return "\n".join(topics[name] for name in sorted(topics))


def load_text() -> TextData:
    """The Python documentation's ``help()`` topics as character ids, split 90 % / 10 %.

    The topics are joined in the sorted order of their names; the first 90 % of the
    characters are ``train``, the last 10 % ``val`` (a contiguous piece, so no sentence is
    on both sides except the one at the cut). The vocabulary is every character of the whole
    text, sorted. Nothing is random and nothing is downloaded: on one Python version the
    result is always the same.

    Example::

        text = dl.data.load_text()
        text.train[:20], text.decode(text.train[:20])   # ids, and 'The "assert" stateme'
    """
    import sys
    raw = _python_docs()
    vocab = Characters("".join(sorted(set(raw))))
    ids = vocab.encode(raw)
    cut = int(round(len(ids) * (1 - TEXT_VAL_FRACTION)))
    version = ".".join(map(str, sys.version_info[:3]))
    return TextData(ids[:cut], ids[cut:], vocab, f"pydoc_data.topics, Python {version}")


def text_windows(ids, T: int, stride: int | None = None):
    """Inputs and next-character targets: ``X[i] = ids[s : s + T]`` and
    ``Y[i] = ids[s + 1 : s + T + 1]`` with ``s = i * stride`` (default ``stride = T``: windows side by side, each character a
    target once). ids: (n,) integers -> X, Y: (N, T), N = (n - T - 1) // stride + 1."""
    ids = np.asarray(ids)
    stride = T if stride is None else stride
    if ids.ndim != 1 or T < 1 or stride < 1 or len(ids) < T + 1:
        raise ValueError(f"text_windows needs a 1-D array of at least T + 1 = {T + 1} ids and "
                         f"T, stride >= 1; got shape {ids.shape}, T={T}, stride={stride}.")
    starts = np.arange(0, len(ids) - T, stride)
    rows = starts[:, None] + np.arange(T + 1)                  # (N, T + 1)
    chunks = ids[rows]
    return chunks[:, :-1], chunks[:, 1:]


def char_baselines(train, val, vocab_size: int) -> dict:
    """Validation cross-entropy, in nats per character, of two counting models fitted on
    ``train`` with add-one (Laplace) smoothing:

    * ``"unigram"``: p(c) = (count(c) + 1) / (n + V), averaged over every character of val;
    * ``"bigram"``: p(c | a) = (count(a, c) + 1) / (count(a) + V), averaged over val's
      n_val - 1 pairs of neighbours (a, c).

    train, val: int ids (n,), (n_val,); V = ``vocab_size``."""
    train, val, V = np.asarray(train), np.asarray(val), int(vocab_size)
    counts = np.bincount(train, minlength=V).astype(np.float64)
    unigram = -np.log((counts[val] + 1) / (len(train) + V)).mean()
    pairs = np.zeros((V, V))
    np.add.at(pairs, (train[:-1], train[1:]), 1)
    row = pairs.sum(axis=1)
    bigram = -np.log((pairs[val[:-1], val[1:]] + 1) / (row[val[:-1]] + V)).mean()
    return {"unigram": float(unigram), "bigram": float(bigram)}
