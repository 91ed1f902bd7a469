"""Every test is written once and runs on every backend: NumPy always, CuPy when a GPU is
usable. Without a GPU but with CuPy installed, the cupy case runs on a NumPy stand-in held to the
installed CuPy's API (tests/support/cupy_standin.py; DLCOURSE_CUPY_STANDIN=0 turns it off, =1
makes it required); without CuPy it skips with the reason. Use the ``device`` fixture ("cpu" or
"gpu") and ``xp`` (numpy or cupy), and make arrays with ``to_dev``."""
import importlib.util
import os
import re
from pathlib import Path

import numpy as np
import pytest

import dlcourse as dl
from dlcourse import backend

NO_GPU = f"no usable GPU: {backend.gpu_problem()}" if not backend.gpu_available() else ""


def _cupy_standin():
    """The stand-in module when the cupy case runs on it (no GPU, CuPy installed), else None."""
    wanted = os.environ.get("DLCOURSE_CUPY_STANDIN", "auto")
    if not NO_GPU or wanted == "0":
        return None
    try:
        from support import cupy_standin
    except ImportError as err:
        if wanted == "1":
            raise pytest.UsageError(f"DLCOURSE_CUPY_STANDIN=1 but the CuPy stand-in cannot be "
                                    f"built: {err}. Install CuPy: pip install cupy-cuda12x.")
        return None
    return cupy_standin


STANDIN = _cupy_standin()
BACKENDS = [pytest.param("cpu", id="numpy"),
            pytest.param("gpu", id="cupy", marks=() if STANDIN else pytest.mark.gpu)]


# --------------------------------------------------------------------------------------
# Lessons: ``pytest -m lesson06a`` runs lesson 06a's tests (the markers lesson00 ... lesson16b,
# one per notebook, are registered in pyproject.toml).
# --------------------------------------------------------------------------------------
NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
LESSON_OF_NOTEBOOK = {p.stem: p.stem.split("_")[0] for p in sorted(NOTEBOOKS.glob("[0-9]*.ipynb"))}
ALL = "all lessons"       # the test holds every lesson to something (narrowed by its parameters)
TOOLING = "no lesson"     # the course's machinery (CI, the workspace, the GPU check), no lesson's
# Each test file: the lessons whose library code or exercises it tests, or ALL, or TOOLING. A
# dict narrows by the test's name: {a regex matched at the start of the name after "test_":
# lessons, ..., "": the rest}. A notebook notebooks/NN_*.ipynb is lesson NN.
# tests/test_lesson_markers.py holds every test file to a row here.
LESSONS: dict[str, object] = {
    "test_argument_checks.py": ("10",),
    "test_attention.py": ("15",),
    "test_autograd.py": ("14",),
    "test_backend.py": ("00", "05"),
    "test_benchmarks.py": TOOLING,
    "test_browser.py": {"prompt_page": ("12",), "": ("04d",)},
    "test_check_gpu.py": ("08c",),
    "test_check_tensor_cores.py": ("08e",),
    "test_check_cnn.py": {"softmax": ("02a",),
                          "minibatches|accuracy": ("04a",),
                          "sgd|dropout|adam": ("04b",),
                          "fwd": ("05",),
                          "cos|conv|i2c": ("06a",), "cb|mp|max_window": ("06b",),
                          "cp|bn|batchnorm": ("07",),
                          "grid_size|global_index|warp": ("08a",),
                          "tiled": ("08b",),
                          "bias_relu": ("08d",),
                          "time_it": ("00",), "dead_fraction": ("04c",),
                          "batch_requests": ("05",), "launches": ("08d",),
                          "": ("04a", "04b", "05", "06a", "06b", "07")},
    "test_check_number_formats.py": ("10",),
    "test_check_residual.py": ("07b",),
    "test_check_recurrence.py": ("14b",),
    "test_check_modern.py": ("15c",),
    "test_check_sharding.py": ("13b",),
    "test_check_attention.py": {"merge|naive|attention_bytes": ("16",), "": ("15",)},
    "test_check_flagship.py": {"a_full_matrix|a_strip": ("16b",),
                               "the_right|each_known|a_right": ("15b", "16b"), "": ("15b",)},
    "test_checkpoint.py": ("04a", "07", "12"),
    "test_claims.py": ALL,
    "test_cli.py": TOOLING,
    "test_cli_language_model.py": ("12", "15"),
    "test_compression.py": {"quantiz|integer_path|a_loaded_int8|a_cast|asymmetric|fixed_point|"
                            "requantiz|the_integer_only": ("11a",),
                            "prune|fit_keeps_pruned|pruning|choose|channels_to_keep|the_pruned|"
                            "a_channel": ("11b",),
                            "checks": ("10", "11a", "11b"), "": ("10",)},
    "test_cupy_standin.py": TOOLING,
    "test_data.py": {"synthetic|blobs|xor|circles|spirals": ("01",),
                     "batches": ("04a", "05"),
                     "read_|download|load_|cifar|known_checksums|data_dir": ("07",),
                     "": ("04a",)},
    "test_deploy_refusals.py": ("12",),
    "test_derive.py": ALL,
    "test_distributed.py": {"ring_reduce_scatter|all_gather|bucket_plan|fit_refuses_bad_overlap|"
                            "one_process_overlap|sharded|overlap_zero|mpi_ranks_with_different_"
                            "overlap": ("13b",), "": ("13",)},
    "test_docs_links.py": TOOLING,
    "test_doctor.py": TOOLING,
    "test_errors.py": {"conv|kernel|stride|sizes": ("06a", "06b"), "optimizer_settings": ("04b",),
                       "": ("03", "04a")},
    "test_export.py": ("12",),
    "test_fast_inference.py": ("12",),
    "test_flash_attention.py": ("16",),
    "test_flash_wmma.py": ("08e", "16"),
    "test_floors.py": TOOLING,
    "test_fusion.py": ("08d",),
    "test_gpu_check.py": TOOLING,
    "test_gradcheck.py": ("03",),
    "test_hinge.py": ("02b",),
    "test_hints.py": ALL,
    "test_imports.py": ALL,
    "test_io.py": TOOLING,
    "test_kernel_emulation.py": ("08a", "08b", "08c", "08d", "08e"),
    "test_kernels.py": ("08a", "08b", "08c", "08d", "08e"),
    "test_lesson_shape.py": ALL,
    "test_layers.py": {"conv|im2col": ("06a", "06b"), "maxpool": ("06b",),
                       "batchnorm": ("07",),
                       "dropout|optimizers|sgd": ("04b",),
                       "linear_init|layer_stats": ("04c",),
                       "softmax": ("02a",), "sigmoid": ("02b",), "loss": ("02a", "02b"),
                       "perceptron": ("01",),
                       "model_moves": ("05",),
                       "": ("03",)},
    "test_lesson_markers.py": TOOLING,
    "test_lookup_imports.py": TOOLING,
    "test_keys_ignored.py": ("12b",),
    "test_newcomer_snags.py": TOOLING,
    "test_nbgrader.py": ALL,
    "test_norm_residual.py": ("07b",),
    "test_notebook_api.py": ALL,
    "test_older_surfaces.py": {"perceptron": ("01",), "softmax": ("02a",),
                               "mlp|astype|load_state_dict": ("03", "04a"),
                               "standardizer|batches|fit|confusion": ("04a",),
                               "im2col": ("06a",), "cnn|data_folder": ("07",),
                               "playground": ("04d",), "": TOOLING},   # student_notebooks
    "test_optim.py": ("04b",),
    "test_protect.py": ("12b",),
    "test_properties.py": {"linear": ("03",), "softmax": ("02a",), "maxpool": ("06b",),
                           "": ("06a",)},
    "test_readme_commands.py": TOOLING,
    "test_progress.py": TOOLING,
    "test_recompute_and_memory.py": ("13b",),
    "test_recurrent.py": ("14b",),
    "test_recorded.py": ("00", "05", "08a", "08b", "08c", "08d", "10"),
    "test_sealed.py": ALL,
    "test_saved_checkpoints.py": ("04a", "07", "08d"),
    "test_serve.py": ("12",),
    "test_serve_engines.py": ("12",),
    "test_signature_notices.py": ("12", "12b"),
    "test_start_lock.py": TOOLING,
    "test_setup_files.py": TOOLING,
    "test_student.py": ALL,
    "test_tokenizer.py": ("15", "15c"),
    "test_modern_block.py": ("15", "15b", "15c"),
    "test_text_model.py": ("15",),
    "test_threaded_step.py": ("07",),
    "test_timing.py": ("00", "05", "06a"),
    "test_train.py": {"clip": ("04b",), "": ("04a",)},
    "test_widgets.py": ("04d", "07"),
    "test_workspace.py": TOOLING,
}


def _lesson_of_each_check() -> dict[str, str]:
    """dl.check name -> its lesson, from the notebook whose cells call ``dl.check.<name>(``."""
    found = {}
    for stem, lesson in LESSON_OF_NOTEBOOK.items():
        text = (NOTEBOOKS / f"{stem}.ipynb").read_text(encoding="utf-8")
        for name in re.findall(r"dl\.check\.([a-z_0-9]+)\(", text):
            found.setdefault(name, lesson)
    for name in ("hint", "solution", "derivation"):
        found.pop(name, None)
    return found


def _lessons_named_by(param_id: str, check_lessons: dict[str, str]) -> set[str]:
    """The lessons a test's parameters name: a notebook (``06a_convolution_and_im2col``), an exercise
    (``conv2d_naive``, or a variant of it: ``grid_size_launch_config``), or a module of dl.check
    (``cnn``: the lessons of its checks)."""
    named = set()
    for token in re.split(r"[-\[\]]", param_id):
        token = token.removesuffix(".ipynb")
        if token in LESSON_OF_NOTEBOOK:
            named.add(LESSON_OF_NOTEBOOK[token])
        elif token in check_lessons:
            named.add(check_lessons[token])
        elif any(token.startswith(f"{name}_") for name in check_lessons):   # a variant's id
            named.add(check_lessons[max((n for n in check_lessons if token.startswith(f"{n}_")),
                                        key=len)])
        else:
            module = getattr(dl.check, token, None)
            named |= {check_lessons[n] for n in getattr(module, "__all__", ())
                      if n in check_lessons}
    return named


def lessons_of(item, check_lessons: dict[str, str]) -> set[str]:
    """The lessons of one collected test (a notebook's cell: that notebook's lesson)."""
    path = Path(item.path)
    if path.suffix == ".ipynb":
        return {LESSON_OF_NOTEBOOK[path.stem]} if path.stem in LESSON_OF_NOTEBOOK else set()
    row = LESSONS.get(path.name, TOOLING)
    if isinstance(row, dict):
        name = getattr(item, "originalname", item.name).removeprefix("test_")
        row = next(lessons for pattern, lessons in row.items() if re.match(pattern, name))
    if row == TOOLING:
        return set()
    if row == ALL:
        callspec = getattr(item, "callspec", None)
        named = _lessons_named_by(callspec.id, check_lessons) if callspec else set()
        return named or set(LESSON_OF_NOTEBOOK.values())
    return set(row)


def pytest_collection_modifyitems(items):
    """Every test marked ``gpu`` (the cupy backend, and the GPU-only tests) skips, with the
    reason, where no GPU is usable: the one place that decides it. Every test gets the
    ``lessonNN`` markers of its lessons (``LESSONS`` above)."""
    check_lessons = _lesson_of_each_check()
    for item in items:
        for lesson in sorted(lessons_of(item, check_lessons)):
            item.add_marker(getattr(pytest.mark, f"lesson{lesson}"))
        if NO_GPU and item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.skip(reason=NO_GPU))


@pytest.fixture(params=BACKENDS)
def device(request, monkeypatch):
    if request.param == "gpu" and STANDIN:
        STANDIN.install(monkeypatch)
    return request.param


@pytest.fixture
def xp(device):
    return backend.require_cupy() if device == "gpu" else np


@pytest.fixture
def to_dev(device):
    def move(*arrays):
        moved = [dl.to_device(np.asarray(a), device) for a in arrays]
        return moved[0] if len(moved) == 1 else moved
    return move


@pytest.fixture(autouse=True)
def _seed_and_device():
    """Each test starts from the same seed and the default device choice."""
    dl.manual_seed(0)
    saved = backend._requested
    yield
    backend._requested = saved


def pytest_report_header(config):
    if STANDIN:
        return (f"dlcourse backends: numpy + cupy on a NumPy stand-in held to CuPy "
                f"{STANDIN.VERSION}'s API ({NO_GPU})")
    return (f"dlcourse backends: numpy{'' if NO_GPU else ' + cupy'}"
            f" ({NO_GPU or backend.describe_device('gpu')}); DLCOURSE_DEVICE="
            f"{os.environ.get('DLCOURSE_DEVICE', 'auto')}")


@pytest.fixture
def benchmark_script(monkeypatch):
    """``benchmark_script("gpu_suite")``: a script of benchmarks/ imported as a module (they are
    scripts, not part of the package), so a test can call its functions."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"
    monkeypatch.syspath_prepend(str(folder))              # the scripts import benchmarks/steps.py
    monkeypatch.setenv("CUPY_TF32", "0")                  # gpu_suite sets this on import; undone after

    def load(name):
        spec = importlib.util.spec_from_file_location(f"{name}_for_test", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return load
