"""dl.recorded: the lessons read the GPU suite's results files through it."""
import json

import pytest

from dlcourse.recorded import Recorded, gpu_results, lookup, results_folder


def write(folder, name, content):
    path = folder / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_reads_files_that_name_their_device_and_skips_the_rest_saying_why(tmp_path):
    write(tmp_path, "b.json", {"environment": {"device": "NVIDIA H100"}, "date": "2026-11-22T10:00:00+00:00",
                               "matmul": {"n": 4096}})
    write(tmp_path, "a.json", {"environment": {"device": " NVIDIA H200 "}, "quick": True})
    write(tmp_path, "broken.json", "{ not json")
    write(tmp_path, "nodevice.json", {"matmul": {}})
    write(tmp_path, "list.json", [1, 2])
    write(tmp_path, "notes.txt", "not a results file")
    said = []
    found = gpu_results(tmp_path, say=said.append)
    assert [r.file for r in found] == ["a.json", "b.json"]
    assert [r.device for r in found] == ["NVIDIA H200", "NVIDIA H100"]
    assert found[1].results["matmul"]["n"] == 4096
    assert len(said) == 3
    assert any("broken.json: not readable JSON" in s for s in said)
    assert any("nodevice.json" in s and "environment.device" in s for s in said)
    assert any("list.json" in s for s in said)
    assert gpu_results(tmp_path, say=None) == found         # silent, same answer


def test_title_names_the_device_the_date_and_the_kind_of_run():
    full = Recorded("h100.json", "NVIDIA H100", {"date": "2026-11-22T10:00:00+00:00", "complete": True})
    assert full.title == "h100.json: measured on NVIDIA H100 (2026-11-22)"
    quick = Recorded("h100.json", "NVIDIA H100", {"quick": True, "complete": False})
    assert quick.date == "date not recorded"
    assert quick.title == ("h100.json: measured on NVIDIA H100 (date not recorded, a --quick run, "
                           "partial: the run stopped before its last section)")
    older = Recorded("old.json", "GPU", {"date": "2026-01-02"})   # before "complete" existed
    assert "partial" not in older.title


def test_a_missing_folder_has_nothing_recorded(tmp_path):
    assert gpu_results(tmp_path / "nowhere", say=None) == []


def test_lookup_walks_dictionaries_and_gives_none_for_what_is_missing():
    d = {"matmul": {"cublas_fp32": {"tflops": 50.0}, "error": "x"}}
    assert lookup(d, "matmul", "cublas_fp32", "tflops") == 50.0
    assert lookup(d, "matmul", "kernels", "naive") is None
    assert lookup(d, "matmul", "error", "more") is None          # a string is not a level
    assert lookup(None, "a") is None
    assert lookup(d) is d


def test_results_folder_is_this_checkouts():
    assert results_folder().parts[-2:] == ("benchmarks", "results")
    assert results_folder().parent.is_dir()


@pytest.fixture
def suite(benchmark_script):
    """benchmarks/gpu_suite.py, as a module."""
    return benchmark_script("gpu_suite")


def test_the_suite_saves_what_the_lessons_read_partial_until_its_last_section(tmp_path, suite):
    """benchmarks/gpu_suite.py writes its JSON after each section (a run cut short keeps what
    it measured), as <device>.partial.json with "complete": false until the last section has
    run, so an earlier complete file is not replaced by a partial one."""
    path = tmp_path / "results" / f"{suite.slug('NVIDIA H100 80GB HBM3')}.json"
    assert path.name == "nvidia-h100-80gb-hbm3.json"
    results = {"environment": {"device": "NVIDIA H100 80GB HBM3"}, "date": "2026-11-22T10:00:00+00:00",
               "matmul": {"n": 4096}}
    suite.save({**results, "complete": True, "old": 1}, path, complete=True)   # an earlier run
    suite.save(results, path, complete=False)                          # this one, cut short
    old, cut = gpu_results(path.parent, say=None)
    assert old.file == path.name and old.results["old"] == 1           # left as it was
    assert cut.file == "nvidia-h100-80gb-hbm3.partial.json"
    assert cut.title.endswith("(2026-11-22, partial: the run stopped before its last section)")
    suite.save({**results, "training": {}}, path, complete=True)       # this one, finished
    (rec,) = gpu_results(path.parent, say=None)
    assert rec.results["complete"] is True and "training" in rec.results and "old" not in rec.results
    assert [p.name for p in path.parent.iterdir()] == [path.name]     # no partial or temporary file


def test_the_suite_writes_after_every_section_and_a_failed_section_does_not_stop_the_rest(
        tmp_path, suite, monkeypatch):
    """main() itself, with the GPU and the sections replaced by stand-ins (no GPU here): each
    section finds the ones before it already on disk, in the partial file; a section that
    raises keeps its error in the JSON and the next section still runs; the last section
    makes the file complete and removes the partial one."""
    device = "NVIDIA H100 80GB HBM3"
    path = tmp_path / f"{suite.slug(device)}.json"
    partial = path.with_name(f"{path.stem}.partial.json")
    seen = []

    def section(name, fails=False):
        def run(cp, cfg, out, *torch):
            on_disk = json.loads(partial.read_text()) if partial.exists() else None
            seen.append((name, None if on_disk is None else
                         [s for s in suite.SECTIONS if s in on_disk], path.exists()))
            out["measured"] = name
            if fails:
                raise RuntimeError("out of memory (stand-in)")
        return run

    class Pool:
        def free_all_blocks(self):
            pass

    class FakeCupy:
        def get_default_memory_pool(self):
            return Pool()

    monkeypatch.setattr(suite, "gpu_available", lambda: True)
    monkeypatch.setattr(suite, "require_cupy", FakeCupy)
    monkeypatch.setattr(suite, "environment", lambda cp, torch: {
        "device": device, "compute_capability": "9.0", "sm_count": 132, "memory_total_gb": 79.1,
        "driver": "x", "cuda_runtime": "x", "cupy": "x", "torch": None, "CUPY_TF32": "0"})
    monkeypatch.setattr(suite, "section_matmul", section("matmul"))
    monkeypatch.setattr(suite, "section_elementwise", section("elementwise", fails=True))
    monkeypatch.setattr(suite, "section_training", section("training"))
    monkeypatch.setattr(suite, "section_cpu_vs_gpu", section("cpu_vs_gpu"))
    monkeypatch.setattr(suite, "section_precision", section("precision"))
    monkeypatch.setattr(suite, "section_attention", section("attention"))
    monkeypatch.setattr(suite, "section_transformer_train", section("transformer_train"))
    monkeypatch.setattr(suite, "plot", lambda results, png: png.write_text("plot"))

    assert suite.main(["--out", str(tmp_path), "--no-torch", "--quick"]) == 0
    assert seen == [("matmul", None, False),
                    ("elementwise", ["matmul"], False),
                    ("training", ["matmul", "elementwise"], False),
                    ("cpu_vs_gpu", ["matmul", "elementwise", "training"], False),
                    ("precision", ["matmul", "elementwise", "training", "cpu_vs_gpu"], False),
                    ("attention", ["matmul", "elementwise", "training", "cpu_vs_gpu",
                                   "precision"], False),
                    ("transformer_train", ["matmul", "elementwise", "training", "cpu_vs_gpu",
                                           "precision", "attention"], False)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.with_suffix(".png").name]
    results = json.loads(path.read_text())
    assert results["complete"] is True and results["quick"] is True
    assert results["elementwise"] == {"measured": "elementwise",
                                      "error": "RuntimeError: out of memory (stand-in)"}
    assert all(results[s]["measured"] == s for s in suite.SECTIONS)
    (rec,) = gpu_results(tmp_path, say=None)
    assert rec.results["environment"]["device"] == device


# ---- what the GPU lessons 08a-08d read from a results file
from dlcourse.recorded import PUBLISHED_SGEMM, kernel_report, matmul_ladder  # noqa: E402

SUITE = {
    "matmul": {"n": 4096, "kernels": {
        "naive": {"tflops": 0.5}, "coalesced": {"tflops": 2.0}, "tiled": {"tflops": 4.0},
        "regblock": {"tflops": 20.0}, "regblock, BK=16": {"tflops": 25.0},
        "regblock, BK=16, PREFETCH": {"tflops": 24.0}, "broken": {"error": "no"}},
        "cublas_fp32": {"tflops": 40.0}, "cublas_tf32": {"tflops": "n/a"}},
    "elementwise": {"kernels": {"bias + ReLU forward (fused)": {"fused_speedup": 1.9},
                                "bias + ReLU forward (unfused)": {"median_ms": 1.0}}},
    "training": {"cases": {"cnn_b256": {"dlcourse": {"median_ms": 3.0}, "torch": {"median_ms": 2.0},
                                        "dlcourse_plain": {"oops": 1}}},
                 "launch_overhead": {"us_per_launch": 6.25},
                 "cuda_graph": {"batch": 64, "eager_fused_loss": {"median_ms": 1.0},
                                "graph": {"median_ms": 0.25}}},
}


def test_matmul_ladder_keeps_the_rungs_the_fastest_tuning_and_cublas_in_gflops():
    ladder, n = matmul_ladder(SUITE)
    assert n == 4096
    assert ladder == {"naive": 500.0, "coalesced": 2000.0, "tiled": 4000.0, "regblock": 20000.0,
                      "regblock, BK=16": 25000.0, "cuBLAS FP32": 40000.0}
    assert matmul_ladder({}) == ({}, None)
    assert matmul_ladder({"matmul": {"kernels": "garbage"}}) == ({}, None)


def test_kernel_report_says_only_what_was_recorded():
    lines = kernel_report(SUITE)
    assert lines[0].startswith("bias + ReLU forward (fused)") and "1.90x faster" in lines[0]
    assert "dlcourse 3.000 ms, PyTorch 2.000 ms" in lines[1] and "no kernels" not in lines[1]
    assert lines[2] == "launch overhead: 6.2 µs of host time per tiny kernel launch"
    assert lines[3] == "MLP step batch 64: eager 1.000 ms, as a CUDA graph 0.250 ms (4.00x)"
    now = {"batch": 64, "eager_fused_loss": {"median_ms": 1.0}, "graph": {"median_ms": 0.5},
           "eager_kernel_products": {"median_ms": 2.0}}
    assert kernel_report({"training": {"cuda_graph": now}}) == [
        "MLP step batch 64, products on matmul_regblock: eager 2.000 ms, as a CUDA graph "
        "0.500 ms (4.00x); eager with cuBLAS 1.000 ms"]
    assert kernel_report({}) == []
    assert kernel_report({"training": {"cuda_graph": {"error": "capture failed"}}}) == [
        "CUDA graph: not measured (capture failed)"]


def test_the_published_figures_name_their_source_and_device():
    assert "Boehm" in PUBLISHED_SGEMM["source"] and PUBLISHED_SGEMM["device"] == "NVIDIA A6000"
    share = PUBLISHED_SGEMM["percent_of_cublas"]
    assert share["naive"] == 1.3 and share["warp tiling"] == 93.7 and share["cuBLAS"] == 100.0


def test_plot_ladder_labels_every_bar_and_refuses_nothing_to_draw():
    import matplotlib
    matplotlib.use("Agg")
    import dlcourse as dl
    fig = dl.plots.plot_ladder({"naive": 1.0, "cuBLAS FP32": 4.0}, "t", percent_of="cuBLAS FP32")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "1\n(25%)" in texts and "4\n(100%)" in texts
    with pytest.raises(ValueError, match="no values"):
        dl.plots.plot_ladder({}, "t")


# ---- the suite's precision section, run on the CPU with stand-ins for the GPU's parts
def _numpy_cupy():
    """As much of CuPy as section_precision uses, on NumPy (no GPU here, and CI has no CuPy)."""
    from types import SimpleNamespace

    import numpy as np

    class RandomState:                       # CuPy's standard_normal takes a dtype
        def __init__(self, seed):
            self.rng = np.random.default_rng(seed)

        def standard_normal(self, size=None, dtype=float):
            return self.rng.standard_normal(size, dtype=dtype)

    pool = SimpleNamespace(free_all_blocks=lambda: None)
    return SimpleNamespace(float16=np.float16, float32=np.float32, float64=np.float64,
                           abs=np.abs, matmul=np.matmul, asarray=np.asarray, asnumpy=np.asarray,
                           random=SimpleNamespace(RandomState=RandomState),
                           get_default_memory_pool=lambda: pool)


def test_the_numpy_cupy_asks_only_what_cupy_has():
    """_numpy_cupy holds section_precision to CuPy's API: each name it gives exists in the
    installed CuPy and takes the arguments the section passes (skipped without CuPy)."""
    import inspect
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed: nothing to compare with")
    assert set(vars(_numpy_cupy())) <= set(dir(cupy))
    assert "dtype" in inspect.signature(cupy.random.RandomState.standard_normal).parameters
    assert "out" in inspect.signature(cupy.matmul).parameters
    assert callable(cupy._core.get_compute_type)          # read in a try: "unknown" without it


def _fake_torch():
    """torch.matmul in float32, float16 and bfloat16 on NumPy: inputs in the format, products
    added in float32, the output rounded to the format (what the GPU computes)."""
    from types import SimpleNamespace

    import ml_dtypes
    import numpy as np

    class Tensor:
        def __init__(self, a):
            self.a = a

        def cuda(self):
            return self

        cpu = cuda

        def to(self, dtype):
            return Tensor(self.a.astype(dtype))

        def float(self):
            return Tensor(self.a.astype(np.float32))

        def numpy(self):
            return self.a

    def matmul(a, b, out=None):
        c = (a.a.astype(np.float32) @ b.a.astype(np.float32)).astype(a.a.dtype)
        if out is None:
            return Tensor(c)
        out.a = c
        return out

    settings = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True)
    return SimpleNamespace(float32=np.float32, float16=np.float16, bfloat16=ml_dtypes.bfloat16,
                           from_numpy=Tensor, matmul=matmul,
                           backends=SimpleNamespace(cuda=SimpleNamespace(matmul=settings)),
                           cuda=SimpleNamespace(empty_cache=lambda: None))


def _timer(times, calls):
    """A stand-in for time_cuda/time_torch: runs fn once, gives the next of ``times``."""
    times = iter(times)

    def time(module, fn, *args, **kwargs):        # time_cuda(cp, fn, ...), time_torch(torch, fn, ...)
        fn()
        calls.append(fn)
        return {"median_ms": next(times), "min_ms": 0.5, "repeats": 1}
    return time


PRECISION_CFG = dict(matmul_n=64, mlp_batches=(8,), cnn_batch=4, target_s=0.01)


@pytest.fixture
def cpu_steps(suite, monkeypatch):
    """section_precision's training steps built on the CPU (the real dlcourse steps)."""
    real = suite.dlcourse_step
    built = []

    def step(kind, batch, device, **kwargs):
        assert device == "gpu"
        built.append((kind, batch, kwargs["precision"]))
        return real(kind, batch, "cpu", **kwargs)
    monkeypatch.setattr(suite, "dlcourse_step", step)
    return built


def test_the_precision_section_keeps_every_figure_with_its_speed_up(suite, monkeypatch, cpu_steps):
    """FP32 and TF32 come from the matmul section when it ran at the same size; cuBLAS FP16
    and PyTorch's FP32/FP16/BF16 are checked against FP64 and timed; dlcourse's step is timed
    in fp32, bf16 and fp16 after its first loss is checked; BF16 through CuPy is 'not measured'
    with the reason. Speed-ups are FP32 time over the format's time, in the same library."""
    calls = []
    # cuBLAS FP16 (time_cuda), then the steps (time_cuda): fp32, bf16, fp16 for each case
    monkeypatch.setattr(suite, "time_cuda", _timer([1.0, 2.0, 4.0, 5.0, 3.0, 6.0, 6.0], calls))
    monkeypatch.setattr(suite, "time_torch", _timer([8.0, 2.0, 2.0], calls))
    monkeypatch.setattr(suite, "_cublas_tf32", lambda n, ms: pytest.fail("TF32 is reused"))
    matmul = {"n": 64, "cublas_fp32": {"median_ms": 4.0, "tflops": 1.0},
              "cublas_tf32": {"median_ms": 2.0, "tflops": 2.0, "speedup_over_fp32": 2.0}}
    out = {}
    suite.section_precision(_numpy_cupy(), PRECISION_CFG, out, _fake_torch(), None, matmul)

    mm = out["matmul"]
    assert mm["n"] == 64 and mm["flops"] == 2 * 64 ** 3
    assert mm["cublas_fp32"]["source"] == mm["cublas_tf32"]["source"] == "the matmul section"
    assert mm["cublas_tf32"]["speedup_over_fp32"] == 2.0
    fp16 = mm["cublas_fp16"]
    assert fp16["speedup_over_fp32"] == 4.0 and fp16["tflops"] == pytest.approx(2 * 64 ** 3 / 1e-3 / 1e12)
    assert fp16["max_rel_err_vs_fp64_same_inputs"] < 2 ** -11 + 1e-6   # only the output's rounding
    assert 1e-4 < fp16["max_rel_err_vs_fp64"] < 1e-2                   # the inputs' rounding too
    assert "float32" in fp16["accumulation"] and "error" not in fp16
    assert "CuPy has no bfloat16" in mm["cublas_bf16"]["not_measured"]
    assert [mm[f"torch_{f}"]["median_ms"] for f in ("fp32", "fp16", "bf16")] == [8.0, 2.0, 2.0]
    assert "speedup_over_fp32" not in mm["torch_fp32"]
    assert mm["torch_fp16"]["speedup_over_fp32"] == mm["torch_bf16"]["speedup_over_fp32"] == 4.0
    assert mm["torch_bf16"]["max_rel_err_vs_fp64_same_inputs"] <= 2 ** -8 + 1e-6
    assert mm["torch_bf16"]["max_rel_err_vs_fp64"] > mm["torch_fp16"]["max_rel_err_vs_fp64"]
    assert mm["torch_settings"]["allow_fp16_reduced_precision_reduction"] is True

    tr = out["training"]
    assert "EMULATES" in tr["note"] and "not expected" in tr["note"]
    assert cpu_steps == [(k, b, p) for k, b in (("mlp", 8), ("cnn", 4)) for p in ("fp32", "bf16", "fp16")]
    mlp, cnn = tr["cases"]["mlp_b8"], tr["cases"]["cnn_b4"]
    assert (mlp["model"], mlp["batch"]) == ("mlp", 8)
    assert [mlp[p]["median_ms"] for p in ("fp32", "bf16", "fp16")] == [2.0, 4.0, 5.0]
    assert (mlp["bf16"]["speedup_over_fp32"], mlp["fp16"]["speedup_over_fp32"]) == (0.5, 0.4)
    assert "speedup_over_fp32" not in mlp["fp32"]
    assert "loss_scaler" not in mlp["bf16"]     # fp16 only; steps: the check and the one timed
    assert mlp["fp16"]["loss_scaler"]["steps"] == 2 and mlp["fp16"]["loss_scaler"]["skipped"] == 0
    assert cnn["bf16"]["first_loss"] == pytest.approx(cnn["fp32"]["first_loss"], rel=2 ** -7)
    assert len(calls) == 10
    json.dumps(out)                                   # what main() writes
    from dlcourse.recorded import precision_report   # what lesson 10 shows from it
    lines = precision_report({"precision": out})
    assert "  cuBLAS FP16        0.0 TFLOP/s   4.00x FP32" in lines    # 64³ in 1 ms: 0.0005
    assert "  cuBLAS BF16   not measured (CuPy has no bfloat16 dtype (see torch_bf16))" in lines
    assert "dlcourse step mlp_b8     fp32 2.000 ms, bf16 4.000 ms (0.50x), fp16 5.000 ms (0.40x)" in lines


def test_the_precision_section_says_why_a_figure_is_missing(suite, monkeypatch, cpu_steps):
    """Without the matmul section FP32 is timed here and TF32 asked of its child process (here
    it fails: 'not measured' with the reason); without PyTorch its lines say why; a step whose
    first loss is not finite is not timed, and the others still are."""
    calls = []
    monkeypatch.setattr(suite, "time_cuda", _timer([4.0, 1.0] + [2.0, 3.0] * 2, calls))
    monkeypatch.setattr(suite, "_cublas_tf32", lambda n, ms: {"error": "RuntimeError: no GPU"})
    real = suite.dlcourse_step

    def step(kind, batch, device, precision):
        inner = real(kind, batch, device, precision=precision)
        return (lambda: float("nan")) if precision == "bf16" else inner
    monkeypatch.setattr(suite, "dlcourse_step", step)
    note = "PyTorch is not installed (pip install torch) — torch lines skipped"
    out = {}
    suite.section_precision(_numpy_cupy(), PRECISION_CFG, out, None, note, {"error": "x"})

    mm = out["matmul"]
    assert "source" not in mm["cublas_fp32"] and mm["cublas_fp32"]["median_ms"] == 4.0
    assert mm["cublas_fp32"]["max_rel_err_vs_fp64"] < 1e-5
    assert mm["cublas_tf32"] == {"not_measured": "RuntimeError: no GPU"}
    assert mm["cublas_fp16"]["speedup_over_fp32"] == 4.0
    assert mm["torch_fp32"] == mm["torch_fp16"] == {"not_measured": note}
    assert mm["torch_bf16"]["not_measured"].startswith("CuPy has no bfloat16 and PyTorch is not usable")
    assert note in mm["torch_bf16"]["not_measured"]
    for case in out["training"]["cases"].values():
        assert case["bf16"] == {"error": f"first loss nan (fp32: {case['fp32']['first_loss']}); not timed"}
        assert case["fp16"]["speedup_over_fp32"] == 2.0 / 3.0
    assert len(calls) == 6


def test_precision_report_says_what_was_measured_and_why_the_rest_was_not():
    from dlcourse.recorded import precision_report
    results = {"precision": {
        "matmul": {"n": 4096, "cublas_fp32": {"tflops": 40.0, "median_ms": 3.4},
                   "cublas_tf32": {"not_measured": "RuntimeError: child failed"},
                   "cublas_fp16": {"tflops": 400.0, "speedup_over_fp32": 10.0},
                   "cublas_bf16": {"not_measured": "CuPy has no bfloat16 dtype (see torch_bf16)"},
                   "torch_bf16": {"error": "wrong result"}, "torch_settings": {"allow_tf32": False}},
        "training": {"cases": {"mlp_b64": {"fp32": {"median_ms": 1.0},
                                           "bf16": {"median_ms": 2.0, "speedup_over_fp32": 0.5},
                                           "fp16": {"error": "first loss nan"}}}}}}
    assert precision_report(results) == [
        "matmul 4096x4096x4096:",
        "  cuBLAS FP32       40.0 TFLOP/s",
        "  cuBLAS TF32   not measured (RuntimeError: child failed)",
        "  cuBLAS FP16      400.0 TFLOP/s  10.00x FP32",
        "  cuBLAS BF16   not measured (CuPy has no bfloat16 dtype (see torch_bf16))",
        "  PyTorch BF16  not measured (wrong result)",
        "dlcourse step mlp_b64    fp32 1.000 ms, bf16 2.000 ms (0.50x)",
        "  (dlcourse emulates bf16 and fp16: rounded inputs, float32 products; the tensor cores' "
        "speed is in the matmul lines)"]
    assert precision_report({}) == [] and precision_report(SUITE) == []
