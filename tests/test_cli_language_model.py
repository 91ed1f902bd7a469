"""The command line on every model `dlcourse train` makes, the character transformer included
(issue 40, item 8): `predict` prints the next character's distribution (or says what to use
instead of --samples), `export` writes an int64 input, `serve` takes prompts as text or token
ids, and each answers what the model itself computes, never onnxruntime's INVALID_ARGUMENT."""
import json
from pathlib import Path

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli
from dlcourse.serve import engines

needs_ort = pytest.mark.skipif(not engines.onnxruntime_available(),
                               reason="needs onnx and onnxruntime: pip install -e '.[serve]'")
TINY = ["--epochs", "1", "--d-model", "8", "--heads", "1", "--layers", "1", "--context", "8",
        "--batch-size", "512", "--no-progress"]


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    """A character transformer saved by `dlcourse train` (tiny: about a second)."""
    path = tmp_path_factory.mktemp("lm") / "m.npz"
    assert cli.main(["train", "--model", "transformer", "--dataset", "text", *TINY,
                     "--save", str(path)]) == 0
    return path


def next_char_probs(model, prompt):
    """The model's own distribution of the character after ``prompt`` (the reference)."""
    ids = np.array([[model.chars.index(c) for c in prompt[-model.max_len:]]])
    logits = np.asarray(model.forward(ids), np.float64)[0, -1]
    p = np.exp(logits - logits.max())
    return p / p.sum()


def test_predict_prints_the_next_character_distribution(lm, capsys):
    model = dl.load(lm)
    assert cli.main(["predict", str(lm), "--text", "The ", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "next characters" in out and "Error" not in out
    p = next_char_probs(model, "The ")
    best = np.argsort(-p, kind="stable")[:3]
    line = out.strip().splitlines()[-1]
    assert line.startswith("0: 'The ' -> ")
    for k in best:
        assert f"{model.chars[k]!r}: {p[k]:.4f}" in line


def test_predict_reads_token_ids_from_an_npy_file(lm, tmp_path, capsys):
    model = dl.load(lm)
    ids = np.array([[model.chars.index(c) for c in "in the "[-8:]],
                    [model.chars.index(c) for c in "def f(x"]], np.int64)
    np.save(tmp_path / "ids.npy", ids[:, -8:])
    assert cli.main(["predict", str(lm), str(tmp_path / "ids.npy"), "--top", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("2 prompt(s)")
    for line, prompt in zip(lines[1:], ("in the ", "def f(x")):
        p = next_char_probs(model, prompt)
        assert line.endswith(f"{model.chars[int(p.argmax())]!r}: {p.max():.4f}")


def test_predict_samples_on_a_language_model_says_what_to_use(lm, capsys):
    assert cli.main(["predict", str(lm), "--samples", "3"]) == 1
    err = capsys.readouterr().err
    assert "language model" in err and "--text" in err and "dlcourse generate" in err
    assert "does not say which data set" not in err


@pytest.mark.parametrize("prompt, words", [("The €", "never saw: '€'"), ("", "is empty")])
def test_predict_refuses_a_prompt_the_model_cannot_read(lm, prompt, words, capsys):
    assert cli.main(["predict", str(lm), "--text", prompt]) == 1
    assert words in capsys.readouterr().err


def test_text_for_a_classifier_is_refused_naming_what_it_takes(tmp_path, capsys):
    path = dl.save(dl.MLP([64, 10], seed=0), tmp_path / "mlp.npz")
    assert cli.main(["predict", str(path), "--text", "The "]) == 1
    err = capsys.readouterr().err
    assert "--text is for a language model" in err and "[64]" in err


@needs_ort
def test_export_writes_an_int64_input_that_onnxruntime_runs(lm, tmp_path, capsys):
    import onnxruntime as ort
    out = tmp_path / "m.onnx"
    assert cli.main(["export", str(lm), str(out)]) == 0
    assert "int64 token ids" in capsys.readouterr().out
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(int64)"
    model = dl.load(lm)
    assert session.get_modelmeta().custom_metadata_map["dlcourse.chars"] == model.chars
    ids = np.random.default_rng(1).integers(0, model.vocab, (3, 8))
    np.testing.assert_allclose(session.run(None, {"input": ids})[0], model.forward(ids),
                               atol=1e-4)


def _client(served):
    pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx")
    from fastapi.testclient import TestClient
    from dlcourse.serve import create_app
    return TestClient(create_app(served))


@pytest.mark.parametrize("engine", ["dlcourse", pytest.param("onnxruntime", marks=needs_ort)])
def test_serve_answers_text_and_token_id_prompts(lm, engine):
    from dlcourse.serve import load_engine
    served, _ = load_engine(lm, engine=engine)
    client = _client(served)
    model = dl.load(lm)
    prompts = ["The ", "a much longer prompt than the context", "x"]
    ids = [model.chars.index(c) for c in "if "]
    reply = client.post("/predict", json={"inputs": prompts + [ids]})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    for i, prompt in enumerate(prompts + ["if "]):
        p = next_char_probs(model, prompt)
        np.testing.assert_allclose(body["probabilities"][i], p, atol=1e-5)
        assert body["classes"][i] == int(p.argmax())
        assert body["next_characters"][i] == model.chars[int(p.argmax())]
    health = client.get("/health").json()
    assert health["vocabulary"] == model.chars and health["input_shape"] == [8]


def test_the_page_of_a_served_language_model_continues_a_text(lm):
    """GET / shows the page for a language model (prompt.html: a text to continue), not the
    draw-a-digit page of a classifier."""
    from dlcourse.serve import load_engine
    served, _ = load_engine(lm, engine="dlcourse")
    page = _client(served).get("/")
    assert page.status_code == 200
    assert "Continue a text" in page.text and "/predict" in page.text
    assert "<canvas" not in page.text


@pytest.mark.parametrize("inputs, words", [
    (["The €"], "never saw: '€'"), ([[1.5, 2]], "whole numbers"), ([[]], "is empty"),
    ([[0, 500]], "in [0, "), ([{"a": 1}], "text or a flat list"), ("The ", "must be a list")])
def test_serve_refuses_a_bad_prompt_with_what_it_expects(lm, inputs, words):
    from dlcourse.serve import load_engine
    client = _client(load_engine(lm, engine="dlcourse")[0])
    reply = client.post("/predict", json={"inputs": inputs})
    assert reply.status_code == 422
    assert words in reply.json()["error"] and "token ids" in reply.json()["expected"]


@needs_ort
def test_an_exported_language_model_is_served_as_it_is(lm, tmp_path):
    from dlcourse.serve import load_engine
    assert cli.main(["export", str(lm), str(tmp_path / "m.onnx")]) == 0
    served, _ = load_engine(tmp_path / "m.onnx")
    body = _client(served).post("/predict", json={"inputs": ["The "]}).json()
    np.testing.assert_allclose(body["probabilities"][0], next_char_probs(dl.load(lm), "The "),
                               atol=1e-5)


def test_the_serve_command_starts_on_a_language_model(lm, monkeypatch, capsys):
    pytest.importorskip("uvicorn", reason="the service needs uvicorn: pip install -e '.[serve]'")
    pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
    import uvicorn
    from dlcourse.serve.loadtest import free_port
    monkeypatch.setattr(uvicorn.Server, "run",             # no serving: free the port
                        lambda self, sockets=None: [s.close() for s in sockets])
    assert cli.main(["serve", str(lm), "--port", str(free_port())]) == 0
    out = capsys.readouterr().out
    assert "POST prompts to" in out and json.dumps({"inputs": ["The "]}) in out


def test_a_non_causal_transformer_is_refused_saying_why(tmp_path, capsys):
    model = dl.Transformer(5, 8, 1, 1, max_len=4, causal=False, seed=0, chars="abcde")
    path = dl.save(model, tmp_path / "bidirectional.npz")
    assert cli.main(["predict", str(path), "--text", "abc"]) == 1
    assert "not causal" in capsys.readouterr().err


@pytest.fixture(scope="module")
def bpe_lm(tmp_path_factory):
    """A transformer on BPE ids, saved with its tokenizer beside it (MODEL.npz.bpe.json)."""
    path = tmp_path_factory.mktemp("bpe") / "m.npz"
    assert cli.main(["train", "--model", "transformer", "--dataset", "text", "--tokenizer", "bpe",
                     "--vocab", "280", *TINY, "--save", str(path)]) == 0
    assert Path(str(path) + ".bpe.json").is_file()
    return path


def test_generate_and_predict_read_the_bpe_tokenizer_saved_beside_the_model(bpe_lm, capsys):
    """`dlcourse generate` and `predict --text` on a --tokenizer bpe checkpoint encode the
    prompt with its tokenizer and decode what comes back (they once refused it)."""
    from dlcourse.data.bpe import BPETokenizer
    model, tok = dl.load(bpe_lm), BPETokenizer.load(str(bpe_lm) + ".bpe.json")
    capsys.readouterr()
    assert cli.main(["generate", str(bpe_lm), "--prompt", "def ", "--steps", "12",
                     "--seed", "3"]) == 0
    ids = dl.generate(model, tok.encode("def "), 12, temperature=0.8, seed=3)
    assert capsys.readouterr().out.rstrip("\n") == tok.decode(ids)
    assert cli.main(["predict", str(bpe_lm), "--text", "def f(x", "--top", "2"]) == 0
    out = capsys.readouterr().out
    logits = np.asarray(model.forward(tok.encode("def f(x")[None]))[0, -1]
    best = int(logits.argmax())
    assert "likeliest next BPE tokens" in out and f"'def f(x' -> {tok.decode([best])!r}: " in out


def test_a_tokenizer_that_is_not_the_models_is_refused(bpe_lm, tmp_path, capsys):
    from dlcourse.data.bpe import BPETokenizer
    other = tmp_path / "m.npz"
    other.write_bytes(bpe_lm.read_bytes())
    BPETokenizer.train("abc abd abe " * 50, vocab=259).save(str(other) + ".bpe.json")
    assert cli.main(["generate", str(other), "--prompt", "def "]) == 1
    err = capsys.readouterr().err
    assert "a tokenizer of 259 ids" in err and "reads 280" in err and "trained with" in err


def test_a_bpe_language_model_is_served_text_in_and_out(bpe_lm, tmp_path):
    """`dlcourse serve` on a --tokenizer bpe checkpoint reads the tokenizer beside it: text
    prompts are encoded with it, each answer names its next token's text, and /health lists
    every token's text (the prompt page appends them); another tokenizer is refused at start."""
    from dlcourse.data.bpe import BPETokenizer
    from dlcourse.serve import ModelRefused, load_engine
    served, _ = load_engine(bpe_lm, engine="dlcourse")
    client = _client(served)
    model, tok = dl.load(bpe_lm), BPETokenizer.load(str(bpe_lm) + ".bpe.json")
    body = client.post("/predict", json={"inputs": ["def f(x", tok.encode("if ").tolist()]}).json()
    for i, prompt in enumerate(["def f(x", "if "]):
        ids = tok.encode(prompt)[-served.tokens.width:]
        logits = np.asarray(model.forward(ids[None]), np.float64)[0, -1]
        p = np.exp(logits - logits.max())
        np.testing.assert_allclose(body["probabilities"][i], p / p.sum(), atol=1e-5)
        assert body["next_characters"][i] == tok.decode([int(p.argmax())])
    health = client.get("/health").json()
    assert health["input"] == "prompts: text or token ids"
    assert len(health["vocabulary"]) == 280 and health["vocabulary"][ord("a")] == "a"
    other = tmp_path / "m.npz"
    other.write_bytes(bpe_lm.read_bytes())
    BPETokenizer.train("abc abd abe " * 50, vocab=259).save(str(other) + ".bpe.json")
    with pytest.raises(ModelRefused, match="a tokenizer of 259 ids"):
        load_engine(other, engine="dlcourse")
