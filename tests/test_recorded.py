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
    monkeypatch.setattr(suite, "plot", lambda results, png: png.write_text("plot"))

    assert suite.main(["--out", str(tmp_path), "--no-torch", "--quick"]) == 0
    assert seen == [("matmul", None, False),
                    ("elementwise", ["matmul"], False),
                    ("training", ["matmul", "elementwise"], False),
                    ("cpu_vs_gpu", ["matmul", "elementwise", "training"], False)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.with_suffix(".png").name]
    results = json.loads(path.read_text())
    assert results["complete"] is True and results["quick"] is True
    assert results["elementwise"] == {"measured": "elementwise",
                                      "error": "RuntimeError: out of memory (stand-in)"}
    assert all(results[s]["measured"] == s for s in suite.SECTIONS)
    (rec,) = gpu_results(tmp_path, say=None)
    assert rec.results["environment"]["device"] == device


# ---- what the GPU lessons 08a-08c read from a results file
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
