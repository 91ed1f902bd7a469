"""dl.data.BPETokenizer (lesson 15): byte-level BPE trained from scratch. The round trip on any
UTF-8 text (hypothesis), ties, multi-byte characters, special tokens, save/load, determinism,
the incremental pair counts against the naive recount, and the errors a learner meets."""
import json
import re

import numpy as np
import pytest

import dlcourse as dl
from dlcourse.data import bpe
from dlcourse.data.bpe import BPETokenizer

hypothesis = pytest.importorskip("hypothesis", reason="the round-trip property test needs "
                                 "hypothesis (the test extra: pip install -e '.[test]')")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TEXT = ("the cat sat on the mat. The cat's hat is flat; that's that!\n"
        "naïve café — 東京 ½ 3.14 déjà vu 🙂🙂 x_y\t\n  ") * 4


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(TEXT, vocab=300, special_tokens=["<|endoftext|>", "<|pad|>"])


def test_it_is_exported_and_sized_as_asked(tok):
    assert dl.data.BPETokenizer is BPETokenizer
    assert len(tok) == 300 == tok.vocab_size
    assert len(tok.merges) == 300 - 256 - 2
    assert tok.special_tokens == {"<|endoftext|>": 298, "<|pad|>": 299}
    assert tok.train_seconds is not None and tok.train_seconds >= 0


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_is_exact_on_any_text(text):
    tok = _small()
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and ids.ndim == 1
    assert tok.decode(ids) == text
    assert tok.decode(tok.encode(text, special=False)) == text


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_training_on_random_text_round_trips_and_matches_the_naive_recount(text):
    tok = BPETokenizer.train(text, vocab=280)
    assert tok.decode(tok.encode(text)) == text
    words = __import__("collections").Counter(re.findall(bpe.PRE_SPLIT, text))
    chunks = [list(w.encode("utf-8")) for w in words]
    assert tok.merges == bpe.learn_merges_naive(chunks, list(words.values()), 24)


_SMALL = []


def _small():
    if not _SMALL:
        _SMALL.append(BPETokenizer.train(TEXT, vocab=300, special_tokens=["<|endoftext|>"]))
    return _SMALL[0]


def test_the_pre_split_covers_every_character_and_keeps_a_space_with_its_word():
    assert re.findall(bpe.PRE_SPLIT, "Hello, world's  2024 tests") == \
        ["Hello", ",", " world", "'s", " ", " 2024", " tests"]
    text = "a_b ½x\u0301 \t\n!!"
    assert "".join(re.findall(bpe.PRE_SPLIT, text)) == text


GPT2_SPLIT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def test_the_pre_split_is_gpt2s_where_the_two_agree():
    regex = pytest.importorskip("regex", reason="GPT-2's own pattern needs the regex package "
                                "(\\p{L}); Python's re has no Unicode classes")
    sample = TEXT.replace("½", "") + "def f(x_1):\n    return x_1 ** 2  # it's 3.14\n\n\n"
    assert re.findall(bpe.PRE_SPLIT, sample) == regex.findall(GPT2_SPLIT, sample)


def test_the_most_frequent_pair_is_merged_and_ties_go_to_the_smaller_pair():
    # "ab" x3 and "cd" x3 tie at 3; (97, 98) < (99, 100), so "ab" is merged first.
    tok = BPETokenizer.train("cd\nab\ncd\nab\ncd\nab", vocab=258)
    assert tok.merges[0] == (97, 98)
    assert tok.vocab[256] == b"ab"
    # a clear winner beats the tie-break: "zz" x4 against "ab" x1
    assert BPETokenizer.train("zzzz\nzzzz\nab", vocab=257).merges[0] == (122, 122)


def test_training_is_deterministic_and_the_naive_recount_agrees():
    a = BPETokenizer.train(TEXT, vocab=320)
    b = BPETokenizer.train(TEXT, vocab=320)
    assert a.merges == b.merges
    words = __import__("collections").Counter(re.findall(bpe.PRE_SPLIT, TEXT))
    chunks = [list(w.encode("utf-8")) for w in words]
    assert bpe.learn_merges([list(c) for c in chunks], list(words.values()), 64) == \
        bpe.learn_merges_naive(chunks, list(words.values()), 64)


def test_multi_byte_characters_are_bytes_first_and_merge_into_one_id():
    text = "東京 東京 東京 东 é é é"
    tok = BPETokenizer.train(text, vocab=300)
    ids = tok.encode("東京")
    assert len(ids) == 1 and tok.vocab[int(ids[0])] == "東京".encode()
    assert list(BPETokenizer().encode("é")) == list("é".encode("utf-8"))   # no merges: bytes
    assert tok.decode(ids[:1]) == "東京"
    half = BPETokenizer().encode("東")[:2]                  # cut inside a character
    assert tok.decode(half) == "\ufffd"
    with pytest.raises(UnicodeDecodeError):
        tok.decode(half, errors="strict")


def test_special_tokens_stay_whole_and_never_merge(tok):
    ids = tok.encode("the cat<|endoftext|>the mat<|pad|>")
    assert int((ids == 298).sum()) == 1 and int((ids == 299).sum()) == 1
    assert tok.decode(ids) == "the cat<|endoftext|>the mat<|pad|>"
    plain = tok.encode("<|endoftext|>", special=False)
    assert 298 not in plain.tolist() and tok.decode(plain) == "<|endoftext|>"
    assert all(298 not in m and 299 not in m for m in tok.merges)


def test_save_and_load_give_the_same_tokenizer_as_json(tok, tmp_path):
    path = tok.save(tmp_path / "bpe.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["format"] == "dlcourse-bpe" and doc["special_tokens"] == ["<|endoftext|>", "<|pad|>"]
    back = BPETokenizer.load(path)
    assert back.merges == tok.merges and back.special_tokens == tok.special_tokens
    assert np.array_equal(back.encode(TEXT), tok.encode(TEXT))
    assert not list(tmp_path.glob("*.tmp*"))             # the atomic write left nothing behind


def test_errors_say_what_is_wrong(tok, tmp_path):
    with pytest.raises(TypeError, match="a str.*decode\\('utf-8'\\)"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="lone surrogate"):
        tok.encode("a\ud800b")
    with pytest.raises(ValueError, match=">= 257"):
        BPETokenizer.train("abc", vocab=200, special_tokens=["<s>"])
    with pytest.raises(ValueError, match="not in the vocabulary of 300"):
        tok.decode([5, 300])
    with pytest.raises(ValueError, match="distinct"):
        BPETokenizer((), ["<s>", "<s>"])
    with pytest.raises(FileNotFoundError, match="Train one"):
        BPETokenizer.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a tokenizer file"):
        BPETokenizer.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a dlcourse-bpe file"):
        BPETokenizer.load(tmp_path / "other.json")
    with pytest.raises(ValueError, match="merge 0 is \\(7, 256\\)"):
        BPETokenizer([[7, 256]])


def test_training_on_the_course_text_takes_seconds_and_compresses_it():
    text = dl.data.load_text()
    raw = text.decode(text.train)
    tok = BPETokenizer.train(raw, vocab=512)
    assert tok.train_seconds < 20                          # about 0.2 s on a laptop core
    ids = tok.encode(raw[:50_000])
    assert len(raw[:50_000].encode()) / len(ids) > 1.8     # about 2.15 bytes per token


# --------------------------------------------------------------------------------------
# dl.data.load_text_bpe and `dlcourse train --tokenizer bpe`, at a small size
# --------------------------------------------------------------------------------------
@pytest.fixture
def tiny_text(monkeypatch):
    """load_text cut to 6,000 + 1,500 characters, so that training takes a second."""
    from dlcourse.data import text as text_module
    full = text_module.load_text()
    small = text_module.TextData(full.train[:6000], full.val[:1500], full.vocab, full.source)
    monkeypatch.setattr(text_module, "load_text", lambda: small)
    return small


def test_load_text_bpe_trains_on_the_training_text_only(tiny_text):
    text = bpe.load_text_bpe(300)
    assert isinstance(text.vocab, BPETokenizer) and text.vocab_size == 300
    assert text.decode(text.train) == tiny_text.decode(tiny_text.train)
    assert text.decode(text.val) == tiny_text.decode(tiny_text.val)
    assert len(text.train) < len(tiny_text.train)                      # merged: fewer ids
    again = BPETokenizer.train(tiny_text.decode(tiny_text.train), 300)
    assert again.merges == text.vocab.merges                           # val never seen
    # per byte: a loss per token times tokens per byte; per character likewise
    assert bpe.nats_per_byte(2.0, text.val, text) == pytest.approx(
        2.0 * len(text.val) / len(text.decode(text.val).encode()))


def test_train_transformer_with_bpe_reports_nats_per_byte_and_saves_the_tokenizer(
        tiny_text, capsys, tmp_path):
    from dlcourse import cli
    path = tmp_path / "bpe.npz"
    assert cli.main(["train", "--model", "transformer", "--dataset", "text", "--tokenizer",
                     "bpe", "--vocab", "300", "--epochs", "1", "--d-model", "16", "--heads", "2",
                     "--layers", "1", "--context", "16", "--batch-size", "16", "--no-progress",
                     "--save", str(path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"BPE tokenizer: 44 merges trained on the training text in \d+\.\d\d s", out)
    assert re.search(r"validation loss: \d+\.\d+ nats/token", out)
    assert re.search(r"per byte of text .*: validation \d+\.\d+ nats/byte", out)
    model, tok = dl.load(path), BPETokenizer.load(str(path) + ".bpe.json")
    assert model.vocab == len(tok) == 300 and model.chars is None


def test_bpe_is_refused_where_it_does_not_apply(capsys):
    from dlcourse import cli
    assert cli.main(["train", "--model", "mlp", "--tokenizer", "bpe"]) == 1
    assert "--tokenizer bpe is for --model transformer" in capsys.readouterr().err
    assert cli.main(["train", "--model", "transformer", "--dataset", "text", "--tokenizer", "bpe",
                     "--vocab", "100"]) == 1
    assert "at least 256" in capsys.readouterr().err
