"""benchmarks/gpu_check.sh, the prepared check for a lent GPU machine (docs/gpu_check.md): its
launch command fits the device tool's 2,000 characters and names files that exist, and without a
GPU it says so and exits 0 in seconds, having run nothing."""
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
needs_bash = pytest.mark.skipif(sys.platform == "win32", reason="the check is a bash script")


def launch_command():
    found = re.findall(r"^# launch: (.+)$", SCRIPT.read_text(), re.M)
    assert len(found) == 1, "gpu_check.sh names its launch command once, on a '# launch:' line"
    return found[0]


def test_the_launch_command_fits_and_names_files_that_exist():
    cmd = launch_command()
    assert len(cmd) < 2000
    words = shlex.split(cmd)
    assert words[0] == "bash" and (ROOT / words[1]).is_file()
    assert words[2] == "$OUT" and int(words[3]) <= 540, "a budget that leaves room for a rerun"
    # and every file the script runs is there
    text = SCRIPT.read_text()
    for path in re.findall(r"\b((?:benchmarks|tests|notebooks)/[\w./*-]+)", text):
        assert list(ROOT.glob(path.rstrip("."))), f"gpu_check.sh names {path}, which is not there"
    assert (ROOT / "benchmarks" / "gpu_check_wheels.py").is_file()


def run_check(tmp_path, nvidia_smi):
    """The script with a stand-in nvidia-smi first on PATH, and no carried wheels."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text(f"#!/bin/sh\n{nvidia_smi}\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               PYTHON=sys.executable, DLCOURSE_WHEELS=str(tmp_path / "no-wheels"))
    out = tmp_path / "out"
    started = time.perf_counter()
    proc = subprocess.run(["bash", str(SCRIPT), str(out), "60"], env=env, capture_output=True,
                          text=True, timeout=120)
    return proc, out, time.perf_counter() - started


@needs_bash
def test_without_a_gpu_it_says_so_and_exits_0_in_seconds(tmp_path):
    proc, out, seconds = run_check(tmp_path, "echo 'No devices were found'; exit 6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no GPU here" in proc.stdout and "nothing was run" in proc.stdout
    assert seconds < 10
    assert "no GPU here" in (out / "summary.txt").read_text()
    assert not list(out.glob("*.json")) and not (out / "tests.xml").exists()


@needs_bash
def test_a_driver_without_a_usable_gpu_stops_after_describing_the_machine(tmp_path):
    """nvidia-smi answers but CuPy cannot use a GPU (as on CI): the machine is described in
    env.txt, then the script stops with dlcourse's reason, before any test or benchmark."""
    from dlcourse import backend
    if backend.gpu_available():
        pytest.skip("a GPU is usable here: the script would run the whole check")
    proc, out, seconds = run_check(tmp_path, "echo 'GPU 0: a stand-in (UUID: GPU-0)'")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dlcourse sees no usable GPU" in proc.stdout
    assert "python" in (out / "env.txt").read_text()
    assert not (out / "tests.xml").exists() and not list(out.glob("*.json"))
    assert seconds < 60


def test_every_lesson_with_a_gpu_only_cell_runs_on_the_gpu():
    """A lesson whose cells say '# GPU only' is among the notebooks step 4 executes on the GPU
    (after a split or a renumbering, a new lesson is easy to leave out)."""
    import json
    step = SCRIPT.read_text().split('run "notebooks"', 1)[1]
    listed = {path for pattern in re.findall(r"notebooks/[\w*.-]+\.ipynb", step)
              for path in ROOT.glob(pattern)}
    gpu_lessons = {path for path in (ROOT / "notebooks").glob("[0-9]*.ipynb")
                   if any(c["cell_type"] == "code" and "".join(c["source"]).startswith("# GPU only")
                          for c in json.loads(path.read_text(encoding="utf-8"))["cells"])}
    assert gpu_lessons, "no lesson marks a cell '# GPU only': has the marker changed?"
    missing = sorted(p.name for p in gpu_lessons - listed)
    assert not missing, f"gpu_check.sh's notebooks step leaves out {missing}"


def test_the_suite_steps_of_the_check_dry_run_on_the_cpu(benchmark_script, tmp_path, capsys):
    """Every `gpu_suite.py --sections ...` that gpu_check.sh runs is accepted by the suite: with
    --dry-run (no GPU) it prints what it would run, the kernel sections' sizes and launch
    geometry included, and writes nothing."""
    suite = benchmark_script("gpu_suite")
    commands = "\n".join(line for line in SCRIPT.read_text().splitlines()
                          if not line.lstrip().startswith("#"))
    chosen = re.findall(r"gpu_suite\.py\s*\\?\s*--sections ([\w,]+)", commands)
    assert chosen == ["tensor_cores,flash_memory"], chosen
    assert set(chosen[0].split(",")) == set(suite.KERNEL_SECTIONS)
    for sections in chosen + [",".join(suite.SECTIONS)]:
        assert suite.main(["--dry-run", "--sections", sections, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "[7] tensor_cores: 4096x4096x4096" in printed
    assert "matmul_wmma vs cuBLAS FP16" in printed and "matmul_warptile vs cuBLAS FP32" in printed
    assert "[8] flash_memory" in printed and "T= 16384: naive holds S (= P) of    8192.0 MiB" in printed
    assert "PyTorch SDPA FP32 (torch.nn.functional.scaled_dot_product_attention)" in printed
    assert "causal (is_causal=True; naive masked) at T = 1024, 4096" in printed
    if getattr(suite.K, "flash_attention_wmma", None) is None:
        assert "flash_attention_wmma: not in dl.kernels" in printed
    else:
        assert "flash_attention_wmma (FP16 in, FP32 out) vs PyTorch SDPA FP16, flash backend" in printed
        assert all(f"T={T:6d}: wmma flash_attention_wmma: grid=" in printed
                   for T in suite.FLASH_MEMORY_SHAPE["wmma_T"])
    assert "transformer_train" in suite.SECTIONS, "the check's default suite step runs it"
    assert "[9] transformer_train: dl.Transformer(vocab" in printed
    assert "d_model 64, 4 heads, 2 layers, context 64), batch 32 (2048 tokens per step)" in printed
    counts = re.findall(r"([\d,]+) parameters", printed.split("[9] transformer_train", 1)[1])
    assert counts and len(set(counts)) == 1, f"dlcourse's and PyTorch's counts differ: {counts}"
    assert list(tmp_path.iterdir()) == [], "a dry run writes nothing"
    with pytest.raises(SystemExit):
        suite.main(["--dry-run", "--sections", "tensor_cores,nope"])


def test_the_suites_naive_attention_is_attention(benchmark_script):
    """naive_attention (the yardstick of the flash_memory section), run with NumPy as its array
    module, equals dl.attention_forward."""
    from dlcourse.attention import attention_forward
    suite = benchmark_script("gpu_suite")
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 3, 40, 16)).astype(np.float32) for _ in range(3))
    got = suite.naive_attention(np, *(a.reshape(6, 40, 16) for a in (q, k, v)))
    want, _ = attention_forward(q, k, v)
    np.testing.assert_allclose(got.reshape(q.shape), want, rtol=1e-5, atol=1e-6)


def test_the_suites_naive_attention_is_causal_attention_when_asked(benchmark_script):
    """naive_attention(causal=True), the flash_memory section's masked yardstick, equals
    dl.attention_forward(causal=True): row i sees keys j <= i."""
    from dlcourse.attention import attention_forward
    suite = benchmark_script("gpu_suite")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 24, 8)).astype(np.float32) for _ in range(3))
    got = suite.naive_attention(np, *(a.reshape(2, 24, 8) for a in (q, k, v)), causal=True)
    want, _ = attention_forward(q, k, v, causal=True)
    np.testing.assert_allclose(got.reshape(q.shape), want, rtol=1e-5, atol=1e-6)


# ---- transformer_train, run on the CPU: NumPy in place of CuPy, PyTorch on the CPU ----------
TINY_LM = dict(d_model=16, heads=2, layers=2, context=8, batch_size=4, warmup=2, steps=3,
               batches=3)


def test_the_transformer_section_runs_on_the_cpu_without_pytorch(benchmark_script, capsys):
    """section_transformer_train with NumPy as its array module and no PyTorch: the library's
    step is timed in tokens per second, and the PyTorch line says why it is missing."""
    suite = benchmark_script("gpu_suite")
    out = {}
    suite.section_transformer_train(np, {"lm_rounds": 2}, out, None,
                                    "PyTorch is not installed (a stand-in note)", sizes=TINY_LM)
    printed = capsys.readouterr().out
    assert "[9] the character transformer's training step" in printed
    assert "PyTorch: PyTorch is not installed (a stand-in note)" in printed
    d = out["dlcourse"]
    assert d["rounds"] == 2 and d["steps_per_round"] == 3 and d["tokens_per_s"] > 0
    assert out["tokens_per_step"] == 4 * 8 and "torch" not in out
    assert out["dlcourse_parameters"] > 0 and d["loss_last_timed"] < d["first_loss"]


def test_the_transformer_section_trains_the_same_model_in_pytorch(benchmark_script, capsys):
    """The PyTorch model of transformer_train is dlcourse's: the same parameter count, the same
    first loss from the copied weights, and after the same AdamW steps on the same batches the
    same loss (so the tokens per second compare the same work)."""
    torch = pytest.importorskip("torch", reason="the PyTorch side of transformer_train needs "
                                                "torch (CI installs the CPU wheel)")
    suite = benchmark_script("gpu_suite")
    out = {}
    suite.section_transformer_train(np, {"lm_rounds": 2}, out, torch, None,
                                    sizes=TINY_LM)
    printed = capsys.readouterr().out
    assert out["torch_parameters"] == out["dlcourse_parameters"]
    first = out["first_losses"]
    assert abs(first["dlcourse"] - first["torch"]) <= suite.LOSS_TOL * first["dlcourse"]
    last = out["dlcourse"]["loss_last_timed"], out["torch"]["loss_last_timed"]
    assert abs(last[0] - last[1]) <= 1e-4 * last[0], last
    assert out["dlcourse_over_torch"] > 0 and "dlcourse/PyTorch tokens per second" in printed


def test_the_check_runs_the_service_tests_with_their_wheels_carried(benchmark_script):
    """Step 2c runs every test file that needs FastAPI or uvicorn (they are not marked gpu, so
    step 2 leaves them out), but the browser tests, which need Chromium (the GPU machine has
    none); and gpu_check_wheels.py carries the FastAPI stack they import, each project once
    (two versions stop the check's install) and never a NumPy."""
    step = SCRIPT.read_text().split('run "service tests"', 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"tests/(test_\w+\.py)", step))
    needing = {path.name for path in (ROOT / "tests").glob("test_*.py")
               if re.search(r"importorskip\(\"(fastapi|uvicorn)\"", path.read_text(encoding="utf-8"))
               and path.name != "test_browser.py"}
    assert {"test_serve.py", "test_serve_engines.py"} <= needing
    assert needing <= named, f"step 2c leaves out {sorted(needing - named)}"
    wheels = benchmark_script("gpu_check_wheels")
    stack = {"fastapi", "starlette", "pydantic", "pydantic-core", "uvicorn", "anyio", "h11",
             "click", "typing-extensions", "annotated-types", "httpx", "httpcore", "idna",
             "certifi", "cryptography"}
    assert stack <= set(wheels.SERVE_WHEELS), sorted(stack - set(wheels.SERVE_WHEELS))
    assert set(wheels.SERVE_REQUIREMENTS) <= set(wheels.SERVE_WHEELS)
    assert not set(wheels.WHEELS) & set(wheels.SERVE_WHEELS), "a project in both lists"
    assert "numpy" in wheels.NEVER_CARRY and "numpy" not in wheels.WHEELS + wheels.SERVE_WHEELS
    assert wheels.project(Path("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.whl")) \
        == "pydantic-core"
