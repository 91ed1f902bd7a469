"""No silent successes, no stale state around signatures (issue 40, item 13): `predict` and
`serve` with --public-key say whose signature they verified (and /health names it); saving a
model over a signed file warns that its `.sig` no longer matches, and the refusal that follows
says to sign again; docs/deployment.md says how to make the inputs `predict` and `/predict` take."""
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli

REPO = Path(__file__).resolve().parents[1]
needs_crypto = pytest.mark.skipif(
    __import__("importlib").util.find_spec("cryptography") is None,
    reason="signing needs cryptography: pip install -e '.[protect]'")


@pytest.fixture
def signed(tmp_path):
    """(model path, public key path, key id): an MLP on the digits, signed."""
    from dlcourse.protect import keygen
    private, public = keygen(tmp_path / "keys")
    path = dl.save(dl.MLP([64, 10], seed=0), tmp_path / "mlp.npz", sign_with=private)
    key_id = json.loads((tmp_path / "mlp.npz.sig").read_text())["key_id"]   # the signer's
    return path, public, key_id


@needs_crypto
def test_predict_says_whose_signature_it_verified(signed, capsys):
    path, public, key_id = signed
    assert cli.main(["predict", str(path), "--samples", "2", "--public-key", str(public)]) == 0
    out = capsys.readouterr().out
    assert f"signature verified: key id {key_id} (mlp.npz.sig)" in out


@needs_crypto
def test_serve_says_it_and_health_names_the_key(signed, monkeypatch, capsys):
    pytest.importorskip("uvicorn", reason="the service needs uvicorn: pip install -e '.[serve]'")
    pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx")
    import uvicorn
    from fastapi.testclient import TestClient
    from dlcourse.serve.loadtest import free_port
    path, public, key_id = signed
    apps = []

    def run(self, sockets=None):          # no serving: keep the app, free the port
        apps.append(self.config.app)
        for sock in sockets:
            sock.close()
    monkeypatch.setattr(uvicorn.Server, "run", run)
    assert cli.main(["serve", str(path), "--engine", "dlcourse", "--port", str(free_port()),
                     "--public-key", str(public)]) == 0
    assert f"signature verified: key id {key_id}" in capsys.readouterr().out
    health = TestClient(apps[0], base_url="http://127.0.0.1").get("/health").json()
    assert health["signature"] == {"verified": True, "key_id": key_id}


def test_health_says_when_no_signature_was_checked():
    pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
    pytest.importorskip("httpx", reason="FastAPI's TestClient needs httpx")
    from fastapi.testclient import TestClient
    from dlcourse.serve import create_app
    health = TestClient(create_app(dl.MLP([64, 10], seed=0))).get("/health").json()
    assert health["signature"] == {"verified": False}


@needs_crypto
def test_saving_over_a_signed_file_warns_and_the_refusal_says_sign_again(signed):
    path, public, _ = signed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dl.save(dl.load(path), path)            # the same bytes: the signature still fits
    dl.load(path, public_key=public)
    with pytest.warns(UserWarning, match=r"mlp\.npz\.sig .* no longer matches.*dlcourse sign"):
        dl.save(dl.MLP([64, 10], seed=1), path)
    with pytest.raises(dl.protect.ProtectionError, match=r"sign it again: `dlcourse sign"):
        dl.load(path, public_key=public)


@needs_crypto
def test_train_save_over_a_signed_file_warns_in_one_line(signed, capsys):
    path, _, _ = signed
    assert cli.main(["train", "--model", "mlp", "--dataset", "xor", "--epochs", "1",
                     "--no-progress", "--save", str(path)]) == 0
    err = capsys.readouterr().err
    assert "dlcourse train: warning:" in err and "dlcourse sign" in err
    assert "UserWarning" not in err and "warnings.warn" not in err


def test_deployment_docs_say_how_to_make_the_inputs():
    text = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    assert "--samples" in text
    assert "np.save('inputs.npy'" in text
    assert "curl" in text and "/predict" in text
    assert "from 0, the background, to 1, the ink" in text      # the scale the inputs are on


def test_the_documented_inputs_line_makes_what_predict_reads(tmp_path, monkeypatch, capsys):
    text = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    line = next(l for l in text.splitlines() if "np.save('inputs.npy'" in l)
    code = line.split('python -c "', 1)[1].rsplit('"', 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(code, {})
    x = np.load(tmp_path / "inputs.npy")
    assert x.shape == (5, 64) and 0 <= x.min() and x.max() <= 1
    model = dl.save(dl.MLP([64, 10], seed=0), tmp_path / "mlp.npz")
    assert cli.main(["predict", str(model), "inputs.npy"]) == 0
    assert capsys.readouterr().out.startswith("5 input(s)")
