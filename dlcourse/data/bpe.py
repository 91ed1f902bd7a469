"""A byte-level BPE tokenizer trained from scratch (as GPT-2's, and CS336's assignment 1).

Introduced in notebook ``15c_tokens_and_the_modern_block`` (its merges, the round trip, and
characters against BPE tokens on the same text, per byte) and used by
``dlcourse train --model transformer --dataset text --tokenizer bpe --vocab 512``.

**The idea.** Start from the 256 byte values (ids 0-255): any UTF-8 text is a sequence of
them, so nothing is ever unknown. Then repeat: count every pair of neighbouring ids in the
training text, make the most frequent pair a new id, and replace the pair by it everywhere.
Each merge makes the text one id shorter per occurrence; ``vocab - 256 - len(specials)``
merges later, frequent words are one id each and rare ones a few pieces.

**Ties** (two pairs with the same count) go to the pair with the smaller ids, (a, b) before
(a, c) when b < c: among bytes that is byte order, and the same text always gives the same
merges.

**The pre-split.** Merges never cross the edges of *chunks*: the text is first cut with a
regular expression like GPT-2's, so that "dog", " dog" and "dog." stay different tokens
from "dog." + "dog" glued together, and a space goes with the word after it::

    's|'t|'re|'ve|'m|'ll|'d| ?LETTERS+| ?DIGITS+| ?OTHER+|\\s+(?!\\S)|\\s+

GPT-2 writes LETTERS as ``\\p{L}``, DIGITS as ``\\p{N}`` and OTHER as ``[^\\s\\p{L}\\p{N}]``,
which need the ``regex`` package. Python's ``re`` has no ``\\p{..}``: here LETTERS is
``[^\\W\\d_]`` (word characters but digits and "_"), DIGITS ``\\d`` (decimal digits) and OTHER
``[^\\s\\w]|_``. The one difference: numbers that are not decimal digits (Unicode's No and Nl,
such as ² ½ Ⅻ) count as letters here (GPT-2: numbers). Compared with the ``regex`` package on
every code point up to U+30000 (each between two letters) that is all that differs, besides
unassigned code points (the two Unicode databases' versions differ), and on the whole
``load_text()`` corpus the chunks are the same. Either way every character falls in exactly
one class, so the chunks put together are the text, and the round trip stays exact.

**Counting fast.** Training counts pairs inside each distinct chunk once, weighted by how often
the chunk occurs (the corpus's 103,139 chunks are 6,025 distinct ones). After a merge only
the chunks that held the pair change: their pairs are taken out of the counts and their new
pairs put in (``where[pair]`` lists the chunks holding each pair), and a heap keeps the most
frequent pair at hand. Recounting every pair after every merge (:func:`learn_merges_naive`,
which the tests hold this to) took 4.2 s for 256 merges even over the distinct chunks; this
took 0.17 s (docs/terminal.md: the machine and its load).

**Special tokens** (such as ``"<|endoftext|>"``) get the last ids; ``encode`` keeps each one
whole (``special=False``: encode them as plain text) and they never take part in merges.

API: ``BPETokenizer.train(text, vocab=512, special_tokens=())`` -> tokenizer;
``encode(text) -> int64 (n,)``, ``decode(ids) -> str``, ``save(path)`` (JSON) and
``BPETokenizer.load(path)``. ``decode(encode(t)) == t`` for every str that is UTF-8 text.
:func:`load_text_bpe` ``(vocab=512)``: ``load_text()``'s corpus as BPE ids, the tokenizer
trained on the training split only, and :func:`nats_per_byte` to compare a loss per token
(or per character) with one per byte.
"""
from __future__ import annotations

import heapq
import json
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

__all__ = ["BPETokenizer", "PRE_SPLIT", "BPE_FORMAT", "learn_merges", "learn_merges_naive",
           "merge_pair", "pair_counts", "load_text_bpe", "nats_per_byte"]

PRE_SPLIT = (r"'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
BPE_FORMAT = "dlcourse-bpe"
BPE_VERSION = 1
N_BYTES = 256


def merge_pair(ids: list, pair: tuple, new: int) -> list:
    """ids with every (a, b) = ``pair`` of neighbours, left to right, replaced by ``new``."""
    a, b = pair
    out, i, n = [], 0, len(ids)
    while i < n:
        if i + 1 < n and ids[i] == a and ids[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def pair_counts(chunks: list, freqs: list) -> Counter:
    """{(a, b): how often the neighbours a, b occur}, each chunk counted ``freq`` times."""
    counts = Counter()
    for ids, f in zip(chunks, freqs):
        for pair in zip(ids, ids[1:]):
            counts[pair] += f
    return counts


class BPETokenizer:
    """A byte-level BPE tokenizer: ids 0-255 are the bytes, then one id per merge, then the
    special tokens.

    ``merges``: the list of pairs (a, b), in the order they were made; merge i made id
    256 + i. ``special_tokens``: str -> id. ``vocab``: id -> bytes. Build one with
    :meth:`train` or :meth:`load`; ``BPETokenizer()`` alone is the 256 bytes, no merges.
    """

    def __init__(self, merges=(), special_tokens=(), pattern: str = PRE_SPLIT):
        self.merges = [tuple(int(t) for t in m) for m in merges]
        self.pattern = pattern
        self.split_re = re.compile(pattern)
        self.vocab = {i: bytes([i]) for i in range(N_BYTES)}
        self.ranks = {}
        for i, (a, b) in enumerate(self.merges):
            new = N_BYTES + i
            if not (0 <= a < new and 0 <= b < new):
                raise ValueError(f"BPETokenizer: merge {i} is ({a}, {b}), but only ids 0 to "
                                 f"{new - 1} exist before it: every merge joins two ids made "
                                 f"earlier. Is the tokenizer file damaged?")
            self.vocab[new] = self.vocab[a] + self.vocab[b]
            self.ranks[(a, b)] = i
        specials = list(special_tokens)
        for s in specials:
            if not isinstance(s, str) or not s:
                raise ValueError(f"BPETokenizer: a special token is a non-empty str such as "
                                 f"'<|endoftext|>', got {s!r}.")
        if len(set(specials)) != len(specials):
            raise ValueError(f"BPETokenizer: special tokens must be distinct, got {specials}.")
        first = N_BYTES + len(self.merges)
        self.special_tokens = {s: first + i for i, s in enumerate(specials)}
        for s, i in self.special_tokens.items():
            self.vocab[i] = s.encode("utf-8")
        # longest first, so that "<|a|>" never wins over "<|a|>b|>"
        alternatives = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
        self.special_re = re.compile(f"({alternatives})") if specials else None
        self.train_seconds = None          # set by train()
        self._cache = {}

    def __len__(self) -> int:
        return N_BYTES + len(self.merges) + len(self.special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return (f"BPETokenizer(vocab={len(self)}: 256 bytes, {len(self.merges)} merges, "
                f"{len(self.special_tokens)} special)")

    # ---- training ------------------------------------------------------------------------
    @classmethod
    def train(cls, text: str, vocab: int = 512, special_tokens=(), pattern: str = PRE_SPLIT,
              verbose: bool = False) -> "BPETokenizer":
        """Learn ``vocab - 256 - len(special_tokens)`` merges from ``text`` (fewer if the
        text runs out of pairs). Special tokens found in ``text`` are cut out first (no
        merge crosses them). Sets ``train_seconds`` on the result."""
        _check_text(text, "BPETokenizer.train")
        specials = list(special_tokens)
        if isinstance(vocab, bool) or not isinstance(vocab, (int, np.integer)) or \
                vocab < N_BYTES + len(specials):
            raise ValueError(f"BPETokenizer.train(vocab={vocab!r}): the vocabulary holds the 256 "
                             f"bytes and the {len(specials)} special token(s) before any merge, "
                             f"so vocab must be a whole number >= {N_BYTES + len(specials)}; "
                             f"e.g. vocab=512 (256 merges).")
        t0 = time.perf_counter()
        tok = cls((), specials, pattern)
        words = Counter()                                  # distinct chunk -> how often
        for part in tok._split_specials(text):
            if part not in tok.special_tokens:
                words.update(tok.split_re.findall(part))
        chunks = [list(w.encode("utf-8")) for w in words]  # ids of each distinct chunk
        freqs = list(words.values())
        merges = learn_merges(chunks, freqs, int(vocab) - N_BYTES - len(specials))
        tok = cls(merges, specials, pattern)
        tok.train_seconds = time.perf_counter() - t0
        if verbose:
            print(f"BPE: {len(merges)} merges from {len(words):,} distinct chunks in "
                  f"{tok.train_seconds:.2f} s")
        return tok

    # ---- encoding and decoding -----------------------------------------------------------
    def encode(self, text: str, special: bool = True) -> np.ndarray:
        """text -> int64 ids (n,). ``special=True``: a special token in the text is its id;
        False: it is encoded as the plain text it is."""
        _check_text(text, "BPETokenizer.encode")
        ids = []
        parts = self._split_specials(text) if special else [text]
        for part in parts:
            if special and part in self.special_tokens:
                ids.append(self.special_tokens[part])
                continue
            for chunk in self.split_re.findall(part):
                got = self._cache.get(chunk)
                if got is None:
                    got = self._cache[chunk] = self.encode_chunk(chunk.encode("utf-8"))
                ids.extend(got)
        return np.asarray(ids, dtype=np.int64)

    def encode_chunk(self, data: bytes) -> list:
        """One chunk's bytes -> ids: apply the merges in the order they were learned (always
        the earliest-learned pair present next), as training made them."""
        ids = list(data)
        while len(ids) > 1:
            pair = min(zip(ids, ids[1:]), key=lambda p: self.ranks.get(p, len(self.ranks)))
            if pair not in self.ranks:
                break
            ids = merge_pair(ids, pair, N_BYTES + self.ranks[pair])
        return ids

    def decode_bytes(self, ids) -> bytes:
        """ids -> the bytes they stand for (any integer array, list, or a CuPy array)."""
        ids = np.asarray(ids.get() if hasattr(ids, "get") else ids)
        if ids.size and ids.dtype.kind not in "iu":
            raise TypeError(f"BPETokenizer.decode expects integer ids, got dtype {ids.dtype}.")
        ids = ids.reshape(-1).tolist()
        bad = [i for i in ids if i not in self.vocab]
        if bad:
            raise ValueError(f"BPETokenizer.decode: id {bad[0]} is not in the vocabulary of "
                             f"{len(self)} (ids 0 to {len(self) - 1}). Were these ids made by "
                             f"another tokenizer?")
        return b"".join(self.vocab[i] for i in ids)

    def decode(self, ids, errors: str = "replace") -> str:
        """ids -> text. A slice of ids may end inside a multi-byte character; those bytes
        become U+FFFD (``errors="strict"`` raises instead)."""
        return self.decode_bytes(ids).decode("utf-8", errors=errors)

    def _split_specials(self, text: str) -> list:
        return [text] if self.special_re is None else \
            [p for p in self.special_re.split(text) if p]

    # ---- saving and loading --------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"format": BPE_FORMAT, "version": BPE_VERSION, "pattern": self.pattern,
                "merges": [list(m) for m in self.merges],
                "special_tokens": list(self.special_tokens)}

    def save(self, path) -> Path:
        """Write the tokenizer as JSON (merges, special tokens, the pre-split pattern),
        atomically: the old file or the new one, never half of one."""
        from .._io import atomic_write
        path = Path(path)
        with atomic_write(path, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, ensure_ascii=False)
        return path

    @classmethod
    def load(cls, path) -> "BPETokenizer":
        """Read a tokenizer written by :meth:`save`."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"BPETokenizer.load: no file {path}. Train one with "
                                    f"BPETokenizer.train(text) and save it first.") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"BPETokenizer.load: {path} is not a tokenizer file (not JSON: "
                             f"{err}).") from None
        return cls.from_dict(doc, str(path))

    @classmethod
    def beside(cls, model_path, vocab: int) -> "BPETokenizer | None":
        """The tokenizer `dlcourse train --tokenizer bpe --save MODEL.npz` wrote beside the
        model (``MODEL.npz.bpe.json``), or None when there is none; ValueError when its ids
        are not the model's ``vocab`` (another tokenizer under that name), or it is not one."""
        path = Path(str(model_path) + ".bpe.json")
        if not path.is_file():
            return None
        tokenizer = cls.load(path)
        if len(tokenizer) != int(vocab):
            raise ValueError(f"{path} is a tokenizer of {len(tokenizer)} ids, but {model_path} "
                             f"reads {vocab}: not the tokenizer it was trained with. Train and "
                             f"save them together (dlcourse train ... --tokenizer bpe --save "
                             f"{Path(model_path).name}).")
        return tokenizer

    @classmethod
    def from_dict(cls, doc, where: str = "the dict") -> "BPETokenizer":
        if not isinstance(doc, dict) or doc.get("format") != BPE_FORMAT:
            raise ValueError(f"BPETokenizer.load: {where} is not a {BPE_FORMAT} file (no "
                             f"\"format\": \"{BPE_FORMAT}\" in it).")
        if doc.get("version") != BPE_VERSION:
            raise ValueError(f"BPETokenizer.load: {where} has version {doc.get('version')!r}; "
                             f"this dlcourse reads version {BPE_VERSION}. Train it again.")
        merges = doc.get("merges")
        if not isinstance(merges, list) or not all(
                isinstance(m, list) and len(m) == 2 and all(type(t) is int for t in m)
                for m in merges):
            raise ValueError(f"BPETokenizer.load: {where}: \"merges\" must be a list of [a, b] "
                             f"pairs of integer ids.")
        pattern = doc.get("pattern", PRE_SPLIT)
        if not isinstance(pattern, str):
            raise ValueError(f"BPETokenizer.load: {where}: \"pattern\" must be a str.")
        return cls(merges, doc.get("special_tokens", []), pattern)


def load_text_bpe(vocab: int = 512, special_tokens=()):
    """``dl.data.load_text()``'s text as BPE ids: a ``TextData`` whose ``vocab`` is a
    :class:`BPETokenizer` trained on the training split only (the validation text stays
    unseen), ``train`` and ``val`` int64 ids. The tokenizer's ``train_seconds`` says how long
    its training took."""
    from .text import TextData, load_text
    chars = load_text()
    train_text, val_text = chars.decode(chars.train), chars.decode(chars.val)
    tok = BPETokenizer.train(train_text, vocab, special_tokens)
    return TextData(tok.encode(train_text), tok.encode(val_text), tok,
                    f"{chars.source}, byte-level BPE of {len(tok)} ids")


def nats_per_byte(loss: float, ids, data) -> float:
    """A mean loss per id (nats per token, or per character) over ``ids`` as nats per UTF-8
    byte of the text they stand for: loss · len(ids) / bytes, comparable across tokenizers.
    ``data``: what decodes the ids (a TextData, a BPETokenizer, a Characters)."""
    n_bytes = len(data.decode(ids).encode("utf-8"))
    return float(loss) * len(ids) / n_bytes


def _check_text(text, where: str) -> None:
    if not isinstance(text, str):
        binary = isinstance(text, (bytes, bytearray))
        hint = " Decode bytes first: data.decode('utf-8')." if binary else ""
        raise TypeError(f"{where} expects text (a str), got {type(text).__name__}.{hint}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise ValueError(f"{where}: the text is not UTF-8 text: character {err.start} is "
                         f"{text[err.start]!r}, a lone surrogate (half of a UTF-16 pair). Read "
                         f"the file with encoding='utf-8' (errors='replace' drops such "
                         f"characters).") from None


def learn_merges_naive(chunks: list, freqs: list, n_merges: int) -> list:
    """The reference :func:`learn_merges` is tested against: recount every pair after every
    merge (the whole text per merge: minutes on the corpus, fine on a paragraph)."""
    chunks, merges = [list(ids) for ids in chunks], []
    while len(merges) < n_merges:
        counts = pair_counts(chunks, freqs)
        if not counts:
            break
        pair = min(counts, key=lambda p: (-counts[p], p))     # most frequent, then smallest
        merges.append(pair)
        chunks = [merge_pair(ids, pair, N_BYTES + len(merges) - 1) for ids in chunks]
    return merges


def learn_merges(chunks: list, freqs: list, n_merges: int) -> list:
    """The merges, most frequent pair first (ties: the smaller (a, b)), with the pair counts
    kept up to date incrementally. ``chunks`` (lists of ids) are changed in place."""
    counts = pair_counts(chunks, freqs)
    where = defaultdict(set)                     # pair -> the chunks that (may) hold it
    for w, ids in enumerate(chunks):
        for pair in zip(ids, ids[1:]):
            where[pair].add(w)
    heap = [(-c, pair) for pair, c in counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        if counts.get(pair, 0) != -neg or neg == 0:
            continue                             # a stale entry: the count changed since
        new = N_BYTES + len(merges)
        merges.append(pair)
        changed = set()
        for w in where.pop(pair):
            old = chunks[w]
            if len(old) < 2:
                continue
            ids = merge_pair(old, pair, new)
            if len(ids) == len(old):
                continue                         # a stale chunk: the pair left it earlier
            f = freqs[w]
            for p in zip(old, old[1:]):          # take the chunk's old pairs out ...
                counts[p] -= f
                changed.add(p)
            for p in zip(ids, ids[1:]):          # ... and put its new ones in
                counts[p] += f
                changed.add(p)
                where[p].add(w)
            chunks[w] = ids
        counts.pop(pair, None)
        for p in changed:
            c = counts.get(p, 0)
            if c > 0 and p != pair:
                heapq.heappush(heap, (-c, p))
            elif c <= 0:
                counts.pop(p, None)
    return merges
