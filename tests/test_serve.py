"""`dlcourse serve` tested as a learner runs it: a real server process on loopback, real HTTP
requests (good and bad), a tampered model refused at start, a bounded load test, and the
draw-a-digit page in Debian's Chromium (marked ``browser``; skipped without it). Its engines
and dynamic batching: tests/test_serve_engines.py."""
import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile

import numpy as np
import pytest

import dlcourse as dl
from dlcourse.inference import predict_proba
from support.serve_tools import serve_load
from test_browser import ARTIFACTS, CHROMIUM_ARGS, browser_tools  # noqa: F401 (the fixture)

pytest.importorskip("fastapi", reason="the service needs FastAPI: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the service needs uvicorn: pip install -e '.[serve]'")


@pytest.fixture(scope="module")
def load_tools(request):
    """benchmarks/serve_load.py (the load test and the server start/stop it uses)."""
    return serve_load()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory, load_tools):
    return load_tools.digits_model(tmp_path_factory.mktemp("serve") / "mlp.npz")


@pytest.fixture(scope="module")
def server(model_path, load_tools):
    """(base URL, port, Popen) of `dlcourse serve model.npz --port P`, pinned to its SHA-256."""
    port = load_tools.free_port()
    digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
    proc = load_tools.start_server(model_path, port, "--expect-sha256", digest)
    yield f"http://127.0.0.1:{port}", port, proc
    load_tools.stop_server(proc)


def post(url, body, content_type="application/json"):
    """(status, parsed JSON) of POST url with body (bytes, or an object sent as JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_health_and_page(server, model_path):
    base, _, _ = server
    info = json.loads(urllib.request.urlopen(f"{base}/health", timeout=10).read())
    assert info["status"] == "ok"
    assert info["sha256"] == hashlib.sha256(model_path.read_bytes()).hexdigest()
    assert info["input_shape"] == [64] and info["classes"] == 10
    from dlcourse.serve.engines import onnxruntime_available      # the default engine: auto
    assert info["engine"] == ("onnxruntime" if onnxruntime_available() else "dlcourse")
    assert info["batch_window_ms"] == 2 and set(info["served"]) == {"model_calls", "requests"}
    page = urllib.request.urlopen(f"{base}/", timeout=10).read().decode()
    assert "<canvas" in page and "predict" in page


def test_predict_matches_the_model(server, model_path):
    base, _, _ = server
    X = dl.data.load_digits("test")[0][:5]
    status, out = post(f"{base}/predict", {"inputs": X.tolist()})
    assert status == 200
    classes, probs = predict_proba(dl.load(model_path), X)
    assert out["classes"] == classes.tolist()
    np.testing.assert_allclose(out["probabilities"], probs, atol=1e-5)
    # a batch of one
    status, one = post(f"{base}/predict", {"inputs": [X[0].tolist()]})
    assert status == 200 and one["classes"] == [classes[0]]


BAD = [  # (body, expected status, words the error must contain)
    (b"not json", 400, "not valid JSON"),
    (b"[" * 100_000, 400, "JSON"),
    ({"x": [[0] * 64]}, 422, '"inputs"'),
    ({"inputs": 3}, 422, "must be a list"),
    ({"inputs": []}, 422, "non-empty"),
    ({"inputs": [[0.0] * 63]}, 422, "(N, 64)"),
    ({"inputs": [0.0] * 64}, 422, "ONE sample"),
    ({"inputs": [[0.0] * 64, [0.0] * 10]}, 422, "rectangular"),
    ({"inputs": [["a"] * 64]}, 422, "strings"),
    ({"inputs": [[True] * 64]}, 422, "booleans"),
    ({"inputs": [[1e39] * 64]}, 422, "finite"),
    (b'{"inputs": [[' + b", ".join([b"NaN"] * 64) + b"]]}", 422, "finite"),
    ({"inputs": [[10 ** 400] * 64]}, 422, "numbers"),
    ({"inputs": [[0.0] * 64] * 1025}, 413, "at most 1024"),
    (b'{"inputs": [[' + b"0," * 1_000_000 + b"0]]}", 422, "(N, 64)"),   # 2 MB: not too large
]


@pytest.mark.parametrize("body, status, words", BAD, ids=[f"{s}-{w}" for _, s, w in BAD])
def test_bad_requests_get_a_json_error(server, body, status, words):
    base, _, _ = server
    got, out = post(f"{base}/predict", body)
    assert got == status, out
    assert words in out["error"] and "expected" in out


def test_a_body_over_the_limit_is_refused_before_it_is_read(server):
    import http.client
    _, port, _ = server
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("POST", "/predict")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(100 * 2**20))     # 100 MiB announced, none sent
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413 and "at most 4194304 bytes" in json.loads(response.read())["error"]
    conn.close()


def test_wrong_method_and_path_are_json_errors(server):
    base, _, _ = server
    for url, code in ((f"{base}/predict", 405), (f"{base}/nothing", 404)):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url, timeout=10)
        assert err.value.code == code and "error" in json.loads(err.value.read())


def run_serve(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "dlcourse", "serve", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)


def test_a_model_other_than_the_pinned_one_is_refused(model_path, tmp_path):
    wrong = "0" * 64
    r = run_serve(model_path, "--port", "1", "--expect-sha256", wrong)
    assert r.returncode == 1 and "refusing to serve" in r.stderr and wrong in r.stderr


def test_a_tampered_checkpoint_is_refused(model_path, tmp_path):
    # Change one weight but keep the checkpoint's metadata (and its recorded digest).
    with zipfile.ZipFile(model_path) as z:
        parts = {name: z.read(name) for name in z.namelist()}
    weights = bytearray(parts["__arrays__.bin"])             # every array's bytes, in a row
    weights[2] ^= 1                                           # one bit of the first weight
    parts["__arrays__.bin"] = bytes(weights)
    tampered = tmp_path / "tampered.npz"
    with zipfile.ZipFile(tampered, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)
    r = run_serve(tampered, "--port", "1")
    assert r.returncode == 1 and "SHA-256" in r.stderr and str(tampered) in r.stderr


def test_bounded_load_no_errors_memory_flat(server, load_tools):
    base, port, proc = server
    X = dl.data.load_digits("test")[0][:4]
    body = json.dumps({"inputs": X.tolist()}).encode()
    load_tools.run_load(port, body, requests=100, clients=4)           # warm-up
    before = load_tools.rss_mib(proc.pid)
    result = load_tools.run_load(port, body, requests=300, clients=4)
    after = load_tools.rss_mib(proc.pid)
    print(f"\nload test: {result['requests']} requests (batch 4, 4 clients) in "
          f"{result['seconds']:.1f} s, p50 {result['p50_ms']:.1f} ms, p99 "
          f"{result['p99_ms']:.1f} ms; server memory {before:.1f} -> {after:.1f} MiB")
    assert result["requests"] == 300 and result["errors"] == []
    assert after - before < 10, f"the server grew by {after - before:.1f} MiB over 300 requests"


# ======================================================================================
# The draw-a-digit page in a real browser
# ======================================================================================
@pytest.mark.browser
def test_draw_a_digit_in_chromium(server, model_path, browser_tools, tmp_path):
    sync_api, chromium = browser_tools
    base, _, _ = server
    model = dl.load(model_path)
    strokes = {   # digit -> polyline on the 280x280 pad
        "1": [(140, 40 + 10 * i) for i in range(21)],
        "0": [(140 + 60 * np.sin(t), 140 - 95 * np.cos(t)) for t in np.linspace(0, 2 * np.pi, 40)],
    }
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1000, "height": 700})
        page.set_default_timeout(20_000)
        try:
            page.goto(f"{base}/")
            sync_api.expect(page.locator("#model")).to_contain_text("10 classes")
            box = page.locator("#pad").bounding_box()
            for digit, points in strokes.items():
                page.click("#clear")
                sync_api.expect(page.locator("#prediction")).to_have_text("")
                page.mouse.move(box["x"] + points[0][0], box["y"] + points[0][1])
                page.mouse.down()
                for x, y in points[1:]:
                    page.mouse.move(box["x"] + x, box["y"] + y, steps=2)
                page.mouse.up()
                sync_api.expect(page.locator("#bars .bar")).to_have_count(10)
                page.wait_for_function("() => !pending")      # the last drawing's answer is in
                shown = page.locator("#prediction").inner_text()
                # What the page sent is what the model answers for: ask the model directly.
                seen = np.array(page.evaluate("() => Array.from(modelInput())"), np.float32)
                expected = int(predict_proba(model, seen.reshape(1, 64).round(4))[0][0])
                page.screenshot(path=str(ARTIFACTS / f"draw-digit-{digit}.png"))
                assert shown == str(expected), f"the page shows {shown}, the model says {expected}"
                assert shown == digit, f"drew a {digit}, the model read {shown}"
        finally:
            browser.close()



def test_serve_listens_on_loopback_by_default():
    from dlcourse.cli import build_parser
    args = build_parser().parse_args(["serve", "model.npz"])
    assert (args.host, args.port, args.expect_sha256) == ("127.0.0.1", 8000, None)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "model.npz", "--port", "70000"])


def test_a_malformed_pin_is_refused(model_path):
    r = run_serve(model_path, "--port", "1", "--expect-sha256", "abc")
    assert r.returncode == 1 and "64 hexadecimal digits" in r.stderr
