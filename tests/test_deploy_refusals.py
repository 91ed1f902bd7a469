"""Nothing lost, nothing silently wrong on the deployment commands (issue 28, items 1-5): a
command never writes onto its own input or over a file of another kind, the service never
answers 500, answers only its own host names, says why it cannot start, and every message names
the real problem. Real processes and real HTTP on loopback."""
import http.client
import json
import socket
import subprocess
import sys

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli
from dlcourse.inference import InputError, as_batch, read_inputs
from support.serve_tools import serve_load

def dlcourse(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "dlcourse", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tools():
    return serve_load()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory, tools):
    return tools.digits_model(tmp_path_factory.mktemp("refusals") / "mlp.npz")


# ---- 1. never destroy the user's input ---------------------------------------------------
def test_export_onto_its_own_input_is_refused_and_the_checkpoint_survives(mlp, tmp_path):
    pytest.importorskip("onnx", reason="export needs onnx: pip install -e '.[serve]'")
    model = tmp_path / "victim.npz"
    model.write_bytes(mlp.read_bytes())
    link = tmp_path / "link.onnx"
    link.symlink_to(model)
    for out in (model, link):
        r = dlcourse("export", model, out)
        assert r.returncode == 1 and "would destroy it" in r.stderr, r.stderr
        assert model.read_bytes() == mlp.read_bytes()
    assert dl.load(model) is not None


def test_export_does_not_overwrite_a_file_of_another_kind_unless_forced(mlp, tmp_path):
    pytest.importorskip("onnxruntime", reason="export needs onnxruntime: pip install -e '.[serve]'")
    other = tmp_path / "other.npz"
    other.write_bytes(mlp.read_bytes())
    r = dlcourse("export", mlp, other)
    assert r.returncode == 1 and "holds a checkpoint" in r.stderr and "--force" in r.stderr
    assert other.read_bytes() == mlp.read_bytes()
    r = dlcourse("export", mlp, other, "--force")
    assert r.returncode == 0, r.stderr
    r = dlcourse("export", mlp, other)                     # now ONNX: replacing ONNX is fine
    assert r.returncode == 0, r.stderr


def test_a_failed_export_leaves_no_file(mlp, tmp_path, monkeypatch, capsys):
    pytest.importorskip("onnxruntime", reason="export needs onnxruntime: pip install -e '.[serve]'")
    from dlcourse import export

    def broken(model, shape):
        raise export.ExportError("no ONNX pattern for this layer (a test)")
    monkeypatch.setattr(export, "to_onnx", broken)
    out = tmp_path / "m.onnx"
    assert cli.main(["export", str(mlp), str(out)]) == 1
    assert not out.exists() and not list(tmp_path.glob(".m.onnx*"))
    assert "no ONNX pattern" in capsys.readouterr().err


def test_train_save_never_replaces_a_file_of_another_kind(tmp_path, capsys):
    notebook = tmp_path / "my_notes.ipynb"
    notebook.write_text('{"cells": []}')
    code = cli.main(["train", "--model", "mlp", "--epochs", "1", "--save", str(notebook),
                     "--no-progress"])
    assert code == 1 and notebook.read_text() == '{"cells": []}'
    assert "refusing to overwrite" in capsys.readouterr().err


# ---- 2. the service never answers 500 -----------------------------------------------------
@pytest.fixture(scope="module")
def server(mlp, tools):
    pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
    port = tools.free_port()
    proc = tools.start_server(mlp, port)
    yield port
    tools.stop_server(proc)


def request(port, method, path, body=None, host=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"}
    if host is not None:
        headers["Host"] = host
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    r = conn.getresponse()
    data = json.loads(r.read() or b"null")
    conn.close()
    return r.status, data


def test_inputs_that_overflow_the_model_get_a_422_not_a_500(server):
    status, data = request(server, "POST", "/predict", {"inputs": [[3e38] * 64, [0.5] * 64]})
    assert status == 422 and "not finite" in data["error"] and "[0]" in data["error"]
    status, data = request(server, "POST", "/predict", {"inputs": [[0.5] * 64]})
    assert status == 200


@pytest.mark.parametrize("command, extra", [
    ("serve", ("fastapi", "uvicorn")), ("predict", ()), ("export", ("onnx", "onnxruntime"))])
def test_a_model_with_nan_weights_is_refused_by_serve_predict_and_export(tmp_path, command,
                                                                        extra):
    for module in extra:
        pytest.importorskip(module, reason=f"{command} needs {module}: pip install -e '.[serve]'")
    model = dl.MLP([64, 8, 10], seed=0)
    model.layers[2].params["W"][0, 0] = np.nan
    path = dl.save(model, tmp_path / "nan.npz")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 64), np.float32))
    args = {"serve": ["serve", path, "--port", "1"], "predict": ["predict", path, x],
            "export": ["export", path, tmp_path / "nan.onnx"]}[command]
    r = dlcourse(*args)
    assert r.returncode == 1 and "not finite" in r.stderr and "layer 2's W" in r.stderr, \
        (args, r.stderr)
    assert not (tmp_path / "nan.onnx").exists()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_export_onnx_refuses_non_finite_weights_as_dlcourse_export_does(tmp_path, bad):
    pytest.importorskip("onnx", reason="export needs onnx: pip install -e '.[serve]'")
    model = dl.MLP([64, 8, 10], seed=0)
    model.layers[2].params["W"][0, 0] = bad
    with pytest.raises(dl.export.ExportError, match=r"not finite numbers.*layer 2's W \(1 of 80 "
                                                    r"values\).*Retrain it"):
        dl.export_onnx(model, tmp_path / "nan.onnx", input_shape=(64,))
    assert not (tmp_path / "nan.onnx").exists()


# ---- 3. the Host header ------------------------------------------------------------------
@pytest.mark.parametrize("host, status", [("evil.example:{port}", 421), ("evil.example", 421),
                                          ("127.0.0.1.evil.example:{port}", 421),
                                          ("localhost:{port}", 200), ("127.0.0.1:{port}", 200),
                                          ("[::1]:{port}", 200), ("LOCALHOST", 200)])
def test_only_the_hosts_it_is_bound_to_are_answered(server, host, status):
    got, data = request(server, "GET", "/health", host=host.format(port=server))
    assert got == status, data
    if status == 421:
        assert "DNS rebinding" in data["error"]


def test_allowed_hosts_for_every_interface_is_any():
    from dlcourse.serve.app import _host_name, allowed_hosts
    assert allowed_hosts("0.0.0.0") is None and allowed_hosts("::") is None
    assert allowed_hosts("192.168.1.5") == {"127.0.0.1", "localhost", "::1", "192.168.1.5"}
    assert _host_name("[::1]:8000") == "::1" and _host_name("LocalHost:80") == "localhost"


# ---- 4. start-up errors --------------------------------------------------------------------
def test_an_empty_host_is_refused(mlp):
    pytest.importorskip("uvicorn", reason="the service needs uvicorn: pip install -e '.[serve]'")
    r = dlcourse("serve", mlp, "--host", "", "--port", "1")
    assert r.returncode == 1 and "--host is empty" in r.stderr


def test_a_port_in_use_is_one_line_before_any_draw_a_digit_line(mlp):
    pytest.importorskip("uvicorn", reason="the service needs uvicorn: pip install -e '.[serve]'")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        r = dlcourse("serve", mlp, "--port", port)
    assert r.returncode == 1 and "draw a digit" not in r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "already in use" in lines[0]


# ---- 5. messages that name the real problem --------------------------------------------------
def test_messages_name_the_real_problem(tmp_path):
    with pytest.raises(InputError, match="too large"):
        as_batch([[2**64] * 4], (4,))
    deep = [0.0]
    for _ in range(900):
        deep = [deep]
    with pytest.raises(InputError, match="nest deeper"):
        as_batch([deep], (4,))
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros((10, 64), np.float32))
    npy.write_bytes(npy.read_bytes()[:200])
    with pytest.raises(InputError, match="damaged or incomplete") as info:
        read_inputs(npy, (64,))
    assert "pickle" not in str(info.value)


def test_predict_input_shape_that_does_not_fit_names_the_option(mlp, tmp_path):
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 32), np.float32))
    r = dlcourse("predict", mlp, x, "--input-shape", "32")
    assert r.returncode == 1 and "--input-shape 32 does not fit this model" in r.stderr
