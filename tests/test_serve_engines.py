"""`dlcourse serve` on its engines and with dynamic batching (issue 29, items 9-10), over real
HTTP on loopback: onnxruntime by default (exported at start, checked against dl.infer, refused
on a mismatch), `--engine dlcourse`, an `.onnx` file served as it is; requests that arrive
together run as one batch and each gets exactly its own rows; a bad request among good ones
gets its own error and nothing else changes."""
import asyncio
import http.client
import json
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import cli
from dlcourse.inference import predict_proba
from dlcourse.serve import engines
from dlcourse.serve.batching import Batcher, run_rows
from dlcourse.serve.loadtest import free_port, health, start_server, stop_server

pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the service needs uvicorn: pip install -e '.[serve]'")
needs_ort = pytest.mark.skipif(not engines.onnxruntime_available(),
                               reason="needs onnx and onnxruntime: pip install -e '.[serve]'")

X = dl.data.load_digits("test")[0]              # flat 64-pixel digits


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    (Xt, yt), _, _ = dl.data.load_digits()
    model = dl.MLP([64, 32, 10], seed=0)
    dl.fit(model, dl.SoftmaxCrossEntropy(), dl.Adam(model, lr=3e-3), Xt, yt, epochs=5,
           batch_size=32, progress=False, seed=0)
    return dl.save(model, tmp_path_factory.mktemp("engines") / "mlp.npz")


@pytest.fixture(scope="module")
def servers(mlp):
    """name -> port of `dlcourse serve mlp.npz [options]`, started on first use."""
    options = {"default": (), "dlcourse": ("--engine", "dlcourse"),
               "off": ("--engine", "dlcourse", "--batch-window-ms", "0"),
               "batched": ("--batch-window-ms", "50"),
               "batched-dlcourse": ("--engine", "dlcourse", "--batch-window-ms", "50")}
    running = {}

    def get(name, path=None):
        if name not in running:
            port = free_port()
            running[name] = (port, start_server(path or mlp, port, *options.get(name, ())))
        return running[name][0]

    yield get
    for _, proc in running.values():
        stop_server(proc)


@pytest.fixture
def busy_port():
    """A port something already listens on, for `serve` calls that must stop before binding:
    if one did not, it fails on the port instead of serving for ever (as root, even port 1
    can be bound)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        yield str(busy.getsockname()[1])


def post(port, body):
    """(status, parsed JSON) of POST /predict with body (an object, sent as JSON)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/predict", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def at_once(port, bodies):
    """Send every body at the same moment, each from its own thread and connection."""
    start = threading.Barrier(len(bodies))

    def one(body):
        start.wait()
        return post(port, body)
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(one, bodies))


# ---- engines ---------------------------------------------------------------------------------
@needs_ort
def test_the_default_engine_is_onnxruntime_and_health_says_so(servers, mlp):
    info = health(servers("default"))
    assert info["engine"] == "onnxruntime" and info["batch_window_ms"] == 2
    assert info["input_shape"] == [64] and info["classes"] == 10
    status, out = post(servers("default"), {"inputs": X[:5].tolist()})
    classes, probs = predict_proba(dl.load(mlp), X[:5])
    assert status == 200 and out["classes"] == classes.tolist()
    np.testing.assert_allclose(out["probabilities"], probs, atol=1e-5)


@needs_ort
def test_both_engines_give_the_same_answers(servers):
    assert health(servers("dlcourse"))["engine"] == "dlcourse"
    body = {"inputs": X[:40].tolist()}
    (s1, ort_out), (s2, dl_out) = post(servers("default"), body), post(servers("dlcourse"), body)
    assert s1 == s2 == 200 and ort_out["classes"] == dl_out["classes"]
    np.testing.assert_allclose(ort_out["probabilities"], dl_out["probabilities"], atol=1e-5)


@needs_ort
def test_an_onnx_file_is_served_with_its_shape_read_from_the_graph(servers, mlp, tmp_path):
    model = dl.load(mlp)
    onnx_path = dl.export_onnx(model, tmp_path / "mlp.onnx", input_shape=(64,))
    port = servers("onnx", onnx_path)
    info = health(port)
    assert info["engine"] == "onnxruntime" and info["input_shape"] == [64]
    status, out = post(port, {"inputs": X[:7].tolist()})
    classes, probs = predict_proba(model, X[:7])
    assert status == 200 and out["classes"] == classes.tolist()
    np.testing.assert_allclose(out["probabilities"], probs, atol=1e-5)
    status, out = post(port, {"inputs": [[0.5] * 63]})
    assert status == 422 and "(N, 64)" in out["error"]


@needs_ort
def test_onnx_files_the_service_cannot_take_are_refused_at_start(mlp, tmp_path, capsys,
                                                                 busy_port):
    proto = dl.export.to_onnx(dl.load(mlp), (64,))
    proto.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1      # a fixed batch of 1
    fixed = tmp_path / "fixed.onnx"
    fixed.write_bytes(proto.SerializeToString())
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08not an onnx model at all")
    onnx_path = dl.export_onnx(dl.load(mlp), tmp_path / "ok.onnx", input_shape=(64,))
    for args, words in ((["serve", str(fixed)], "fixed batch size 1"),
                        (["serve", str(garbage)], "onnxruntime cannot load"),
                        (["serve", str(onnx_path), "--engine", "dlcourse"], "--engine dlcourse"),
                        (["serve", str(onnx_path), "--public-key", "k.pub"], "--public-key"),
                        (["serve", str(onnx_path), "--expect-sha256", "0" * 64], "SHA-256")):
        assert cli.main(args + ["--port", busy_port]) == 1
        err = capsys.readouterr().err
        assert words in err and "refusing to serve" in err, (args, err)


def _onnx_file(path, nodes, outputs):
    """An ONNX model of one float input (N, 4) with ``nodes`` and ``outputs`` [(name, elem
    type, shape)], written to ``path``."""
    import onnx
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        nodes, "odd", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(name, getattr(TensorProto, kind), shape)
         for name, kind, shape in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())
    return path


@needs_ort
def test_an_onnx_file_whose_output_is_not_a_row_of_scores_per_input_is_refused(tmp_path, capsys,
                                                                             busy_port):
    from onnx import helper
    cases = {
        "one row for any batch": (
            [helper.make_node("ReduceMean", ["input"], ["mean"], axes=[0], keepdims=1)],
            [("mean", "FLOAT", [1, 4])], r"output 'mean' is float32 of shape \[1, 4\] for a "
                                          r"batch of 3 inputs.*1 row\(s\) for 3 inputs"),
        "int64 labels first": (
            [helper.make_node("ArgMax", ["input"], ["label"], axis=1, keepdims=0),
             helper.make_node("Softmax", ["input"], ["probabilities"], axis=1)],
            [("label", "INT64", ["N"]), ("probabilities", "FLOAT", ["N", 4])],
            r"first output 'label' \(of 2: 'label', 'probabilities'; the service reads the "
            r"first\) is int64 of shape \[3\].*labels or ids, not scores"),
        "1-D scores": (
            [helper.make_node("ReduceMax", ["input"], ["top"], axes=[1], keepdims=0)],
            [("top", "FLOAT", ["N"])], r"float32 of shape \[3\] .*a 1-D output"),
        "one column": (
            [helper.make_node("ReduceMax", ["input"], ["top"], axes=[1], keepdims=1)],
            [("top", "FLOAT", ["N", 1])], r"shape \[3, 1\] .*one score per input"),
    }
    for name, (nodes, outputs, words) in cases.items():
        path = _onnx_file(tmp_path / f"{name.replace(' ', '_')}.onnx", nodes, outputs)
        assert cli.main(["serve", str(path), "--port", busy_port]) == 1, name
        err = capsys.readouterr().err
        assert "refusing to serve" in err and "float class scores of shape (N, classes)" in err, err
        assert re.search(words, " ".join(err.split())), (name, err)
    good = _onnx_file(tmp_path / "scores.onnx", [helper.make_node("Identity", ["input"], ["s"])],
                      [("s", "FLOAT", ["N", 4])])
    from dlcourse.serve.app import load_engine
    engine, _ = load_engine(good)
    assert engine.logits(np.ones((5, 4), np.float32)).shape == (5, 4)


@needs_ort
def test_an_export_that_disagrees_with_dl_infer_is_refused_at_start(mlp, monkeypatch, capsys,
                                                                    busy_port):
    real = engines.to_onnx

    def wrong(model, shape):                     # the export of a model with other weights
        other = dl.load(mlp)
        other.layers[0].params["W"] *= 1.01
        return real(other, shape)
    monkeypatch.setattr(engines, "to_onnx", wrong)
    for choice in ("auto", "onnxruntime"):
        assert cli.main(["serve", str(mlp), "--engine", choice, "--port", busy_port]) == 1
        err = capsys.readouterr().err
        assert "differ from dl.infer's" in err and "--engine dlcourse" in err, err


def test_engine_onnxruntime_needs_it_installed_and_auto_falls_back(mlp, monkeypatch, capsys,
                                                                   busy_port):
    monkeypatch.setattr(engines, "onnxruntime_available", lambda: False)
    assert cli.main(["serve", str(mlp), "--engine", "onnxruntime", "--port", busy_port]) == 1
    assert "pip install" in capsys.readouterr().err
    from dlcourse.serve import load_engine
    served, _ = load_engine(mlp)
    assert served.name == "dlcourse" and "not installed" in served.note


def test_serve_options_and_their_defaults():
    parser = cli.build_parser()
    args = parser.parse_args(["serve", "model.npz"])
    assert (args.engine, args.batch_window_ms, args.input_shape) == ("auto", 2.0, None)
    for bad in (["--engine", "torch"], ["--batch-window-ms", "-1"], ["--batch-window-ms", "nan"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "model.npz", *bad])


def test_an_answer_does_not_wait_for_the_clients_ack(servers):
    """The service's own socket is TCP to asyncio (IPPROTO_TCP), so Nagle's algorithm is off: on
    a socket made with protocol 0, each response's body waited ~40 ms for the ACK of its headers
    (46-49 ms a request, measured on a keep-alive connection, against 1-3 ms now)."""
    conn = http.client.HTTPConnection("127.0.0.1", servers("off"), timeout=30)
    times = []
    for _ in range(15):
        start = time.perf_counter()
        conn.request("GET", "/health")
        conn.getresponse().read()
        times.append(time.perf_counter() - start)
    conn.close()
    assert np.median(times) < 0.030, f"median {1e3 * np.median(times):.1f} ms a request"


# ---- dynamic batching --------------------------------------------------------------------------
def sized_requests(n_requests=24, seed=0):
    """Requests of 1 to 9 samples each, every one with other digits."""
    rng = np.random.default_rng(seed)
    return [{"inputs": X[rng.choice(len(X), size=int(rng.integers(1, 10)), replace=False)].tolist()}
            for _ in range(n_requests)]


@pytest.mark.parametrize("name", [pytest.param("batched", marks=needs_ort), "batched-dlcourse"])
def test_concurrent_requests_each_get_exactly_their_own_rows(servers, name):
    port = servers(name)
    bodies = sized_requests()
    alone = [post(servers("off"), body) for body in bodies]         # batching off, one at a time
    before = health(port)["served"]
    together = at_once(port, bodies)
    after = health(port)["served"]
    calls = after["model_calls"] - before["model_calls"]
    assert after["requests"] - before["requests"] == len(bodies)
    assert calls < len(bodies), f"{len(bodies)} requests sent together took {calls} model calls"
    for body, (s1, one), (s2, batched) in zip(bodies, alone, together):
        assert s1 == s2 == 200
        assert len(batched["classes"]) == len(body["inputs"])
        assert batched["classes"] == one["classes"]
        np.testing.assert_allclose(batched["probabilities"], one["probabilities"], atol=1e-5)


def test_batching_off_gives_the_answers_of_the_model(servers, mlp):
    port = servers("off")
    assert health(port)["batch_window_ms"] == 0
    bodies = sized_requests(8, seed=1)
    model = dl.load(mlp)
    for (status, out), body in zip(at_once(port, bodies), bodies):
        classes, probs = predict_proba(model, np.array(body["inputs"], np.float32))
        assert status == 200 and out["classes"] == classes.tolist()
        np.testing.assert_allclose(out["probabilities"], probs, atol=1e-5)


def test_a_bad_request_among_good_ones_gets_its_error_and_the_others_their_answers(servers):
    port = servers("batched-dlcourse")
    good = sized_requests(10, seed=2)
    bad = [{"inputs": [[0.5] * 63]}, {"inputs": [[1e39] * 64]}, {"inputs": [["a"] * 64]},
           {"inputs": [[3e38] * 64, [0.5] * 64]}]        # the last: valid, but its outputs overflow
    bodies = good[:5] + bad + good[5:]
    answers = at_once(port, bodies)
    expected = [post(servers("off"), body) for body in good]
    got_good = answers[:5] + answers[5 + len(bad):]
    for (status, out), (_, want) in zip(got_good, expected):
        assert status == 200 and out["classes"] == want["classes"]
    statuses = [status for status, _ in answers[5:5 + len(bad)]]
    assert statuses == [422, 422, 422, 422], answers[5:5 + len(bad)]
    assert "not finite" in answers[5 + 3][1]["error"]


# ---- a model error answers only the requests it concerns, never with a 500 ---------------------
class Server:
    """create_app(...) on uvicorn in a thread of this process, on a free loopback port."""

    def __init__(self, app):
        import uvicorn
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "the in-process server did not start"
            time.sleep(0.05)
        return self.port

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.mark.parametrize("window_ms", [0, 50])
def test_a_model_error_fails_only_the_request_it_comes_from(mlp, window_ms, capsys):
    from dlcourse.serve import create_app
    model = dl.load(mlp)
    base = engines.dlcourse_engine(model, (64,))

    def logits(x):
        if (x == 7.0).any():                     # this request's rows break the model
            raise MemoryError("a test: the model ran out of memory")
        return base.logits(x)
    engine = engines.Engine("dlcourse", (64,), logits)
    app = create_app(engine, batch_window_ms=window_ms)
    bodies = sized_requests(8, seed=3)
    bodies.insert(3, {"inputs": [[7.0] * 64]})
    with Server(app) as port:
        answers = at_once(port, bodies)
        info = health(port)
    assert info["engine"] == "dlcourse" and info["batch_window_ms"] == window_ms
    for i, (body, (status, out)) in enumerate(zip(bodies, answers)):
        if i == 3:
            assert status == 503 and "MemoryError" in out["error"], out
            continue
        classes, probs = predict_proba(model, np.array(body["inputs"], np.float32))
        assert status == 200 and out["classes"] == classes.tolist()
    assert "a test: the model ran out of memory" in capsys.readouterr().err


# ---- the batcher itself ------------------------------------------------------------------------
def test_the_batcher_keeps_order_and_the_batch_limit():
    seen = []

    def predict(x):
        seen.append(len(x))
        return x[:, 0].astype(np.int64), x.astype(np.float64)

    async def main():
        batcher = Batcher(predict, window_s=0.05, max_batch=5)
        parts = [np.full((n, 1), k, np.float32) for k, n in enumerate([3, 3, 2, 1, 6])]
        answers = await asyncio.gather(*(batcher.submit(p) for p in parts))
        return parts, answers, batcher

    parts, answers, batcher = asyncio.run(main())
    for part, (classes, probs) in zip(parts, answers):
        assert classes.tolist() == part[:, 0].astype(int).tolist() and probs.shape == part.shape
    # 3 | 3 + 2 (the limit) | 1 (+ 6 would pass it) | 6: a request over the limit runs alone
    assert seen == [3, 5, 1, 6]
    assert batcher.requests == 5 and batcher.model_calls == 4


def test_run_rows_splits_in_order_and_isolates_a_failing_part():
    def predict(x):
        if (x < 0).any():
            raise ValueError("negative")
        return x[:, 0].astype(np.int64), x
    parts = [np.array([[1.0], [2.0]]), np.array([[-1.0]]), np.array([[3.0]])]
    answers, calls = run_rows(predict, parts)
    assert answers[0][0].tolist() == [1, 2] and answers[2][0].tolist() == [3]
    assert isinstance(answers[1], ValueError) and calls == 4
    answers, calls = run_rows(predict, [parts[0], parts[2]])
    assert [a[0].tolist() for a in answers] == [[1, 2], [3]] and calls == 1
