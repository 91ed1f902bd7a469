"""Tests marked by lesson (issue 32): ``pytest -m lesson06a`` runs lesson 06a's tests. The table
that decides it is ``LESSONS`` in tests/conftest.py; these tests keep it whole and true."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import (ALL, LESSON_OF_NOTEBOOK, LESSONS, TOOLING, _lesson_of_each_check,
                      lessons_of)

TESTS = Path(__file__).resolve().parent


def test_every_test_file_has_a_row_in_the_lesson_table():
    files = sorted(p.name for p in TESTS.glob("test_*.py"))
    missing = [f for f in files if f not in LESSONS]
    assert not missing, (f"{missing} are not in LESSONS (tests/conftest.py): add a row naming the "
                         f"lessons they test, or ALL, or TOOLING")
    gone = sorted(set(LESSONS) - set(files))
    assert not gone, f"LESSONS (tests/conftest.py) names test files that do not exist: {gone}"


def test_every_row_names_lessons_that_exist_and_every_name_pattern_ends_with_a_default():
    lessons = set(LESSON_OF_NOTEBOOK.values())
    for name, row in LESSONS.items():
        rows = row.values() if isinstance(row, dict) else [row]
        if isinstance(row, dict):
            assert list(row)[-1] == "", f"{name}: the last pattern must be '' (the other tests)"
            for pattern in row:
                re.compile(pattern)
        for value in rows:
            assert value in (ALL, TOOLING) or (isinstance(value, tuple) and value and
                                               set(value) <= lessons), (name, value)


def test_a_marker_is_registered_for_every_lesson_and_no_other(pytestconfig):
    registered = {line.split(":")[0] for line in pytestconfig.getini("markers")
                  if line.startswith("lesson")}
    assert registered == {f"lesson{lesson}" for lesson in LESSON_OF_NOTEBOOK.values()}


def _item(path, name, param_id=None):
    """A stand-in for a collected test: its file, its name and its parameters' id."""
    callspec = SimpleNamespace(id=param_id) if param_id else None
    return SimpleNamespace(path=Path(path), name=name, originalname=name, callspec=callspec)


@pytest.mark.parametrize("path, name, param_id, expected", [
    ("tests/test_layers.py", "test_conv_im2col_matches_naive", "numpy", {"06a", "06b"}),
    ("tests/test_layers.py", "test_maxpool_matches_naive", "numpy", {"06b"}),
    ("tests/test_layers.py", "test_softmax_cross_entropy_value", "numpy", {"02a"}),
    ("tests/test_layers.py", "test_sigmoid_cross_entropy_stable", "numpy", {"02b"}),
    ("tests/test_layers.py", "test_batchnorm_running_statistics", "numpy", {"07"}),
    ("tests/test_layers.py", "test_layer_gradcheck", "numpy", {"03"}),
    ("tests/test_check_cnn.py", "test_i2c", None, {"06a"}),
    ("tests/test_check_cnn.py", "test_cb", None, {"06b"}),
    ("tests/test_hinge.py", "test_anything", None, {"02b"}),
    ("tests/test_widgets.py", "test_anything", None, {"04d", "07"}),
    ("tests/test_check_cnn.py", "test_minibatches", None, {"04a"}),
    ("tests/test_check_cnn.py", "test_adam_step", None, {"04b"}),
    ("tests/test_train.py", "test_fit_learns_xor_and_fills_history", "numpy", {"04a"}),
    ("tests/test_train.py", "test_clip_norm_is_checked", "0-ValueError", {"04b"}),
    ("tests/test_optim.py", "test_clip_grad_norm_equals_torchs_clip_grad_norm_", None, {"04b"}),
    ("tests/test_check_cnn.py", "test_cp", None, {"07"}),
    ("tests/test_properties.py", "test_conv_fast_equals_naive", None, {"06a"}),
    ("notebooks/06a_convolution_and_im2col.ipynb", "Cell 3", None, {"06a"}),
    ("notebooks/06b_pooling_and_convolution_backward.ipynb", "Cell 3", None, {"06b"}),
    ("notebooks/04d_playground.ipynb", "Cell 3", None, {"04d"}),
    ("tests/test_hints.py", "test_no_hint_level_holds_solution_code",
     "06a_convolution_and_im2col-conv2d_naive", {"06a"}),
    ("tests/test_hints.py", "test_no_hint_level_holds_solution_code",
     "06b_pooling_and_convolution_backward-conv2d_backward", {"06b"}),
    ("tests/test_student.py", "test_checks_name_the_mistake", "init_std-<lambda>-expected36",
     {"04c"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution", "cnn",
     {"07"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "convolution", {"06a", "06b"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "init_and_batching", {"04c", "05"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "backprop", {"03"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "training", {"04a", "04b"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "basics", {"00", "01"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "gradient_descent", {"02a", "02b"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "cuda", {"08a", "08b"}),
    ("tests/test_hints.py", "test_no_check_message_holds_a_line_of_a_reference_solution",
     "gpu_performance", {"08c", "08d"}),
    ("tests/test_hints.py", "test_hint_goes_one_level_at_a_time", None,
     set(LESSON_OF_NOTEBOOK.values())),
    ("tests/test_derive.py", "test_the_check_refuses_the_librarys_own_implementation",
     "grid_size_launch_config", {"08a"}),
    ("tests/test_floors.py", "test_anything", None, set()),
    ("tests/test_compression.py", "test_requantize_is_the_float_rescale_within_one_step_and_exact"
     "_away_from_ties", "numpy", {"11a"}),
    ("tests/test_compression.py", "test_prune_channels_errors", None, {"11b"}),
    ("tests/test_compression.py", "test_checks_name_the_mistake", "requantize-_requantize_truncates",
     {"10", "11a", "11b"}),
    ("notebooks/11b_pruning.ipynb", "Cell 3", None, {"11b"}),
])
def test_each_test_gets_its_lessons(path, name, param_id, expected):
    assert lessons_of(_item(path, name, param_id), _lesson_of_each_check()) == expected
