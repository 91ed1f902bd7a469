"""Lesson 15's text, sampling and command line: dl.data.load_text (the Python documentation,
offline), the counting baselines, dl.generate with and without a key/value cache (on every
backend), and `dlcourse train --model transformer --dataset text` / `dlcourse generate` at a
small size. The text differs between Python versions: only its properties are pinned."""
import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli, data
from dlcourse.data import text as text_module


# --------------------------------------------------------------------------------------
# The text
# --------------------------------------------------------------------------------------
def test_load_text_is_the_python_documentation_split_90_10_and_fixed():
    t = data.load_text()
    n = len(t.train) + len(t.val)
    assert 400_000 < n < 600_000                     # 460 KB (3.10) to 510 KB (3.13)
    assert 80 <= t.vocab_size <= 130                 # about 104 distinct characters
    assert abs(len(t.val) / n - data.TEXT_VAL_FRACTION) < 1e-4
    assert t.train.dtype == t.val.dtype == np.int64
    assert t.train.min() >= 0 and max(t.train.max(), t.val.max()) < t.vocab_size
    again = data.load_text()
    assert np.array_equal(again.train, t.train) and np.array_equal(again.val, t.val)
    assert "Python" in t.source and "pydoc_data" in t.source
    whole = t.decode(np.concatenate([t.train, t.val]))
    assert np.array_equal(t.encode(whole), np.concatenate([t.train, t.val]))   # round trip
    assert list(t.vocab.chars) == sorted(set(whole))
    assert "def" in whole and "return" in whole


def test_characters_encode_decode_and_say_what_is_wrong():
    v = data.Characters("abc ")
    assert v.decode(v.encode("cab a")) == "cab a" and len(v) == 4
    assert v.decode([[0, 1]]) == "ab"                # any integer array, any shape
    with pytest.raises(ValueError, match="not in the vocabulary"):
        v.encode("abz")
    with pytest.raises(ValueError, match=r"in \[0, 3\]"):
        v.decode([4])
    with pytest.raises(ValueError, match="distinct"):
        data.Characters("aa")


def test_text_windows_pair_each_character_with_the_next():
    ids = np.arange(10)
    X, Y = data.text_windows(ids, 3)
    assert X.tolist() == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert np.array_equal(Y, X + 1)
    X, Y = data.text_windows(ids, 4, stride=2)
    assert X[:, 0].tolist() == [0, 2, 4] and Y[-1].tolist() == [5, 6, 7, 8]
    with pytest.raises(ValueError, match="at least T \\+ 1"):
        data.text_windows(ids[:3], 3)


def test_baselines_are_the_smoothed_counts_worked_by_hand():
    train, val = np.array([0, 0, 1, 0]), np.array([0, 1])
    b = data.char_baselines(train, val, vocab_size=3)
    # unigram: p(0) = (3+1)/(4+3), p(1) = (1+1)/7
    assert b["unigram"] == pytest.approx(-(np.log(4 / 7) + np.log(2 / 7)) / 2)
    # bigram: pairs 00, 01, 10; after 0: count 2, p(1|0) = (1+1)/(2+3)
    assert b["bigram"] == pytest.approx(-np.log(2 / 5))


def test_the_baselines_on_the_documentation_are_ordered():
    t = data.load_text()
    b = data.char_baselines(t.train, t.val, t.vocab_size)
    assert 2.0 < b["bigram"] < b["unigram"] < np.log(t.vocab_size)


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------
def small_model(device="cpu", max_len=12):
    model = dl.Transformer(vocab=11, d_model=16, heads=2, layers=2, max_len=max_len, seed=3)
    return model.to(device)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 3), (0, None)])
def test_generate_with_and_without_the_cache_gives_the_same_tokens(device, temperature, top_k):
    """30 steps with max_len 12: the window restarts twice, and both paths follow it."""
    model = small_model(device)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    a = dl.generate(model, prompt, 30, temperature=temperature, top_k=top_k, seed=5)
    b = dl.generate(model, prompt, 30, temperature=temperature, top_k=top_k, seed=5, cache=False)
    assert a.shape == (2, 33) and np.array_equal(a[:, :3], prompt)
    assert np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < 11
    c = dl.generate(model, prompt, 30, temperature=temperature, top_k=top_k, seed=6)
    if temperature:
        assert not np.array_equal(a, c)               # another seed, other draws


def test_generate_on_both_backends_draws_the_same_tokens(device):
    ref = dl.generate(small_model("cpu"), np.array([2, 4]), 10, seed=1)
    got = dl.generate(small_model(device), np.array([2, 4]), 10, seed=1)
    assert got.shape == (12,) and np.array_equal(got, ref)


def test_greedy_and_top_1_take_the_likeliest_next_token():
    model = small_model()
    ids = dl.generate(model, np.array([[7, 1]]), 1, temperature=0)
    logits = model.forward(np.array([[7, 1]]))[:, -1]
    assert ids[0, -1] == int(np.argmax(logits))
    assert dl.generate(model, np.array([[7, 1]]), 1, top_k=1, seed=0)[0, -1] == ids[0, -1]


def test_sample_next_follows_the_probabilities():
    from dlcourse.generate import sample_next
    logits = np.log(np.array([[0.7, 0.2, 0.1]])).repeat(20000, axis=0)
    ids = sample_next(logits, 1.0, None, np.random.default_rng(0))
    assert np.allclose(np.bincount(ids, minlength=3) / len(ids), [0.7, 0.2, 0.1], atol=0.01)
    hot = sample_next(logits, 0.5, None, np.random.default_rng(0))    # p^2, renormalised
    assert np.bincount(hot, minlength=3)[0] / len(hot) == pytest.approx(0.49 / 0.54, abs=0.01)
    assert set(sample_next(logits, 1.0, 2, np.random.default_rng(0))) == {0, 1}


def test_generate_refuses_what_it_cannot_do():
    model = small_model()
    with pytest.raises(ValueError, match="at least one token"):
        dl.generate(model, np.zeros((1, 0), dtype=int), 3)
    with pytest.raises(ValueError, match="temperature"):
        dl.generate(model, np.array([1]), 3, temperature=-1)
    assert dl.generate(model, np.array([1]), 0).tolist() == [1]


@pytest.mark.parametrize("model, prompt, error, words", [
    (lambda: dl.Transformer(11, 16, 2, 1, max_len=12, causal=False, seed=0), [1, 2], ValueError,
     r"not causal .*causal=False.*Build it with causal=True"),
    (lambda: dl.MLP([4, 8, 3], seed=0), [1, 2], TypeError,
     r"causal language model .*dl\.Transformer.*got MLP, which is not one"),
    (lambda: dl.Transformer, [1, 2], TypeError, "the class Transformer, not a model"),
    (lambda: small_model(), np.array([1.7, 2.0]), ValueError,
     r"integer token ids, got 1\.7 .*never a fraction"),
    (lambda: small_model(), "def ", TypeError,
     r"text prompt 'def '.*carries no characters.*chars="),
    (lambda: dl.Transformer(4, 8, 2, 1, max_len=6, chars="abc ", seed=0), "abz", ValueError,
     r"prompt='abz'.*not in the vocabulary"),
    (lambda: small_model(), np.array(["a", "b"]), TypeError, r"integer token ids.*dtype <U1"),
], ids=["non-causal", "an MLP", "a class", "1.7", "text without chars", "unknown character",
        "strings"])
def test_generate_refuses_what_is_not_a_causal_language_model_or_its_ids(model, prompt, error,
                                                                          words):
    with pytest.raises(error, match=words):
        dl.generate(model(), prompt, 3, seed=0)


def test_generate_takes_text_for_a_model_that_carries_its_characters(device):
    model = dl.Transformer(4, 8, 2, 1, max_len=6, chars="abc ", seed=0).to(device)
    text = dl.generate(model, "ab c", 9, seed=2)
    ids = dl.generate(model, np.array([0, 1, 3, 2]), 9, seed=2)
    assert isinstance(text, str) and text.startswith("ab c") and len(text) == 13
    assert text == "".join("abc "[i] for i in ids)
    assert dl.generate(model, np.array([0.0, 1.0]), 2, seed=2).tolist() == \
        dl.generate(model, np.array([0, 1]), 2, seed=2).tolist()     # whole floats are ids


# --------------------------------------------------------------------------------------
# The command line, at a small size
# --------------------------------------------------------------------------------------
@pytest.fixture
def tiny_text(monkeypatch):
    """load_text cut to 4,000 + 1,000 characters, so that training takes a second."""
    full = text_module.load_text()
    small = text_module.TextData(full.train[:4000], full.val[:1000], full.vocab, full.source)
    monkeypatch.setattr(text_module, "load_text", lambda: small)
    monkeypatch.setattr(data, "load_text", lambda: small)
    return small


TINY = ["train", "--model", "transformer", "--dataset", "text", "--epochs", "1", "--d-model", "16",
        "--heads", "2", "--layers", "1", "--context", "16", "--batch-size", "16", "--no-progress"]


def test_train_transformer_prints_the_loss_beside_the_baselines_and_a_sample(tiny_text, capsys,
                                                                            tmp_path):
    path = tmp_path / "char.npz"
    assert cli.main(TINY + ["--save", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Transformer (d_model 16, 2 heads, 1 layers, context 16)" in out
    assert "validation loss:" in out and "unigram" in out and "bigram" in out
    assert "sample (temperature 0.8, seed 0):\nThe " in out
    model = dl.load(path)
    assert isinstance(model, dl.Transformer) and model.chars == tiny_text.vocab.chars
    assert cli.main(["generate", str(path), "--prompt", "def ", "--steps", "20", "--seed", "1",
                     "--top-k", "5"]) == 0
    sample = capsys.readouterr().out
    assert sample.startswith("def ") and len(sample.rstrip("\n")) >= 24
    assert cli.main(["generate", str(path), "--prompt", "def ", "--steps", "20", "--seed", "1",
                     "--top-k", "5"]) == 0
    assert capsys.readouterr().out == sample             # seeded


def test_transformer_and_text_go_together(capsys):
    for args in (["--model", "transformer"], ["--model", "mlp", "--dataset", "text"]):
        with pytest.raises(SystemExit) as info:
            cli.main(["train", *args])
        assert info.value.code == 2
        assert "--model transformer with --dataset text" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["train", "--model", "mlp", "--heads", "2"])
    assert "transformer only" in capsys.readouterr().err
    for extra in (["--ranks", "2"], ["--data-path", "."]):
        assert cli.main(["train", "--model", "transformer", "--dataset", "text", *extra]) == 1
        assert extra[0] in capsys.readouterr().err


def test_generate_refuses_a_model_without_characters_and_an_unknown_prompt(tmp_path, capsys,
                                                                           tiny_text):
    mlp = tmp_path / "mlp.npz"
    dl.save(dl.MLP([4, 3]), mlp)
    assert cli.main(["generate", str(mlp)]) == 1
    assert "without a character vocabulary" in capsys.readouterr().err
    char = tmp_path / "char.npz"
    model = dl.Transformer(tiny_text.vocab_size, 8, 2, 1, 8, seed=0, chars=tiny_text.vocab.chars)
    dl.save(model, char)
    assert cli.main(["generate", str(char), "--prompt", "\x00"]) == 1
    assert "--prompt" in capsys.readouterr().err
