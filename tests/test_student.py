"""Student notebooks (``dlcourse student-notebooks``) and the exercise checks (``dl.check``).

(a) every notebook in notebooks/ gets a valid student version: no outputs, no solution markers,
    a ``raise NotImplementedError("<hint>")`` for every solution block;
(b) in a student version, an exercise cell and its check cell fail with "not implemented yet"
    and the hint; (c) with the instructor's solution they pass;
(d) the checks name specific, common mistakes;
(e) unbalanced markers and other misuse give clear errors.

Nothing here executes a whole notebook (nbval does that for the instructor versions).
"""
from __future__ import annotations

import ast
import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

nbformat = pytest.importorskip("nbformat")

import dlcourse as dl  # noqa: E402
from dlcourse.check import ExerciseError  # noqa: E402
from dlcourse.student import (BEGIN, END, GENERIC_HINT, HINT, RAISE_WIDTH,  # noqa: E402
                              SolutionMarkerError, student_source, write_student_notebooks)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOK_PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
# Every lesson: an exercise cell and its check cell run on their own (dl and np imported).
BASICS_LESSONS = [p.stem for p in NOTEBOOK_PATHS]


def _has_marker(source: str, marker: str) -> bool:
    return any(line.strip().startswith(marker) for line in source.splitlines())


def _hints(source: str) -> list[str]:
    """The hint of every solution block in a cell (None where a block has none)."""
    hints, inside, hint = [], False, None
    for line in source.splitlines():
        s = line.strip()
        if s.startswith(BEGIN):
            inside, hint = True, None
        elif s.startswith(END):
            hints.append(hint)
            inside = False
        elif inside and hint is None and s.startswith(HINT):
            hint = s[len(HINT):].strip()
    return hints


def _raised_texts(python: str) -> list[str]:
    """The text of every ``raise NotImplementedError("...")`` in a cell's code."""
    return [node.exc.args[0].value for node in ast.walk(ast.parse(python))
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
            and getattr(node.exc.func, "id", "") == "NotImplementedError" and node.exc.args]


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    written = write_student_notebooks(NOTEBOOKS, out)
    return out, written


# --------------------------------------------------------------------------------------
# (a) a valid student version of every notebook
# --------------------------------------------------------------------------------------
def test_writes_one_student_notebook_per_notebook(student_dir):
    out, written = student_dir
    assert NOTEBOOK_PATHS, "notebooks/ holds no notebooks"
    assert [p.name for p in written] == [p.name for p in NOTEBOOK_PATHS]
    assert all(p.parent == out and p.exists() for p in written)
    assert not list(out.glob("*.part")), "a temporary file was left behind"


@pytest.mark.parametrize("name", [p.name for p in NOTEBOOK_PATHS])
def test_student_version_is_valid_and_clean(student_dir, name):
    out, _ = student_dir
    teacher = nbformat.read(NOTEBOOKS / name, as_version=4)
    student = nbformat.read(out / name, as_version=4)
    nbformat.validate(student)
    assert student.metadata == teacher.metadata
    assert len(student.cells) == len(teacher.cells)
    n_blocks = 0
    for index, (t_cell, s_cell) in enumerate(zip(teacher.cells, student.cells)):
        where = f"{name}, cell {index}"
        assert s_cell.cell_type == t_cell.cell_type, where
        assert not _has_marker(s_cell.source, BEGIN), f"{where}: a BEGIN marker is left"
        assert not _has_marker(s_cell.source, END), f"{where}: an END marker is left"
        if s_cell.cell_type != "code":
            continue
        assert s_cell.outputs == [], f"{where}: outputs were not cleared"
        assert s_cell.execution_count is None, f"{where}: the execution count was not cleared"
        hints = _hints(t_cell.source)
        n_blocks += len(hints)
        if not hints:
            assert s_cell.source == t_cell.source, f"{where}: a cell without a solution changed"
            continue
        assert s_cell.source.count("raise NotImplementedError(") == len(hints), where
        # The student's cell is still valid Python (IPython magics and shell lines aside).
        python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                           for line in s_cell.source.splitlines())
        compile(python, where, "exec")
        raised = _raised_texts(python)            # a long hint is wrapped over several lines
        for hint in hints:
            assert (hint or GENERIC_HINT) in raised, f"{where}: the hint {hint!r} is lost"
        too_long = [line for line in s_cell.source.splitlines()
                    if "NotImplementedError" in line and len(line) > RAISE_WIDTH]
        assert not too_long, f"{where}: a raise line runs off the screen: {too_long}"
    if n_blocks:
        assert any("raise NotImplementedError(" in c.source for c in student.cells)


# --------------------------------------------------------------------------------------
# (b), (c) exercises and their checks, in the student and the instructor versions
# --------------------------------------------------------------------------------------
def _exercises(nb):
    """[(exercise cell index, check cell index, function name)] of an instructor notebook: a
    code cell with a solution block that defines a function, and the next code cell that
    calls a dl.check checker on that function. (Cells are the same in the student version.)"""
    code = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    found = []
    for k, i in enumerate(code):
        source = nb.cells[i].source
        match = re.search(r"^def (\w+)\(", source, re.MULTILINE)
        if not _has_marker(source, BEGIN) or not match:
            continue
        name = match.group(1)
        for j in code[k + 1:k + 4]:
            if re.search(rf"dl\.check\.\w+\(\s*{name}\s*\)", nb.cells[j].source):
                found.append((i, j, name))
                break
    return found


def _lesson_exercises(lesson, student_root=None):
    """[(exercise source, check source, name)] of a lesson, instructor or student version."""
    path = NOTEBOOKS / f"{lesson}.ipynb"
    found = _exercises(nbformat.read(path, as_version=4))
    assert found, f"{path.name} should have at least one exercise with a dl.check check"
    nb = nbformat.read(student_root / path.name if student_root else path, as_version=4)
    return [(nb.cells[i].source, nb.cells[j].source, name) for i, j, name in found]


def _run(*sources):
    namespace = {"dl": dl, "np": np}
    for source in sources:
        exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - our own notebooks
    return namespace


# Lessons whose checks need an optional extra: without it they are skipped, saying which.
LESSON_EXTRAS = {"12b_protecting_a_model": ("cryptography", "the protect extra: pip install -e "
                                                            "'.[protect]'")}


def _needs_extra(lesson):
    if lesson in LESSON_EXTRAS:
        module, where = LESSON_EXTRAS[lesson]
        pytest.importorskip(module, reason=f"{lesson}'s checks need {module} ({where})")


@pytest.mark.parametrize("lesson", BASICS_LESSONS)
def test_checks_pass_on_the_instructor_solutions(lesson):
    _needs_extra(lesson)
    for exercise, check, name in _lesson_exercises(lesson):
        printed = io.StringIO()
        call = next(line for line in check.splitlines() if line.startswith("dl.check."))
        with contextlib.redirect_stdout(printed):
            _run(exercise, call)      # the check alone (04d's check cells go on to train)
        assert "\u2713" in printed.getvalue() and name in printed.getvalue()


@pytest.mark.parametrize("lesson", BASICS_LESSONS)
def test_checks_say_not_implemented_with_the_hint(student_dir, lesson):
    _needs_extra(lesson)
    out, _ = student_dir
    teacher = {name: ex for ex, _, name in _lesson_exercises(lesson)}
    for exercise, check, name in _lesson_exercises(lesson, student_root=out):
        (hint,) = _hints(teacher[name])
        with pytest.raises(ExerciseError) as info:
            _run(exercise, check)
        message = str(info.value)
        assert f"{name} is not implemented yet" in message
        assert (hint or GENERIC_HINT) in message


def test_backpropagation_student_linear_backward(student_dir):
    """The issue's example: 03's linear_backward, student version, with its check."""
    out, _ = student_dir
    pairs = {name: (ex, chk) for ex, chk, name in
             _lesson_exercises("03_backpropagation", student_root=out)}
    assert "linear_backward" in pairs
    with pytest.raises(ExerciseError, match="linear_backward is not implemented yet: .*sum"):
        _run(*pairs["linear_backward"])


# --------------------------------------------------------------------------------------
# (d) the checks name the mistake
# --------------------------------------------------------------------------------------
def _linear_backward_no_bias_sum(dout, cache):
    x, W = cache
    return dout @ W.T, x.T @ dout, dout                  # forgot to sum db over the batch


def _linear_backward_transposed_dW(dout, cache):
    x, W = cache
    return dout @ W.T, dout.T @ x, dout.sum(axis=0)


def _linear_backward_mean_db(dout, cache):
    x, W = cache
    return dout @ W.T, x.T @ dout, dout.mean(axis=0)


def _linear_backward_W_not_transposed(dout, cache):
    x, W = cache
    return dout @ W, x.T @ dout, dout.sum(axis=0)


def _relu_backward_mask_from_dout(dout, cache):
    return dout * (dout > 0)


def _relu_backward_ge(dout, cache):
    return dout * (cache >= 0)


def _softmax_naive(z):
    return np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)


def _cross_entropy_sum(logits, labels):
    s = logits - logits.max(axis=1, keepdims=True)
    logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(labels)), labels].sum())


def _sigmoid_ce_grad_no_mean(z, y):
    return 1 / (1 + np.exp(-z)) - y


def _normalize_columns(x):
    return x / np.sqrt((x * x).sum(axis=0, keepdims=True))


def _perceptron_predict_ge(X, w, b):
    return (X @ w + b >= 0).astype(np.int64)


def _perceptron_update_always(w, b, x, y, lr=1.0):
    return w + lr * y * x, b + lr * y


def _perceptron_predict_sign(X, w, b):
    return np.sign(X @ w + b)


def _perceptron_update_ge(w, b, x, y, lr=1.0):
    y_hat = 1 if x @ w + b >= 0 else 0
    return w + lr * (y - y_hat) * x, b + lr * (y - y_hat)


# Wrong solutions that the first version of the checks let through (a mutation test found them)
def _softmax_shift(center):
    def softmax(z):
        e = np.exp(z - center(z))
        return e / e.sum(axis=-1, keepdims=True)
    return softmax


def _softmax_in_place(z):
    z -= z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _cross_entropy_global_max(logits, labels):
    s = logits - logits.max()
    logp = s - np.log(np.exp(s).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(labels)), labels].mean())


def _sigmoid_ce_grad_unstable(z, y):
    return (np.exp(z) / (1 + np.exp(z)) - y) / len(z)


def _sigmoid_ce_grad_float32(z, y):
    return ((1 / (1 + np.exp(-z)) - y) / len(z)).astype(np.float32)


def _normalize_rows_in_place(x):
    x /= np.sqrt((x * x).sum(axis=1, keepdims=True))
    return x


def _perceptron_predict_bool(X, w, b):
    return X @ w + b > 0


def _perceptron_predict_float(X, w, b):
    return (X @ w + b > 0).astype(np.float32)


def _perceptron_predict_minus_b(X, w, b):
    return (X @ w - b > 0).astype(np.int64)


def _perceptron_update_in_place(w, b, x, y, lr=1.0):
    y_hat = 1 if x @ w + b > 0 else 0
    w += lr * (y - y_hat) * x
    return w, b + lr * (y - y_hat)


def _relu_backward_zeroes_dout(dout, cache):
    dout[cache <= 0] = 0
    return dout


def _relu_backward_writes_cache(dout, cache):
    cache[cache > 0] = 1
    cache[cache <= 0] = 0
    return dout * cache


@pytest.mark.parametrize("checker, wrong, expected", [
    ("linear_backward", _linear_backward_no_bias_sum,
     ["db has shape (4, 2) but b has shape (2,)", "sum of dout over the batch"]),
    ("linear_backward", _linear_backward_transposed_dW,
     ["dW has shape (2, 3) but W has shape (3, 2)", "multiply dout's transpose by x"]),
    ("linear_backward", _linear_backward_mean_db, ["times too small", "SUM dout over the batch"]),
    ("linear_backward", _linear_backward_W_not_transposed, ["raised ValueError", "transposed"]),
    ("relu_backward", _relu_backward_mask_from_dout, ["INPUT x", "not from dout"]),
    ("relu_backward", _relu_backward_ge, ["x > 0, not x >= 0"]),
    ("softmax", _softmax_naive, ["large logits", "nan", "Subtract each row's max"]),
    ("cross_entropy", _cross_entropy_sum, ["2 times too large", "mean over the batch"]),
    ("sigmoid_ce_grad", _sigmoid_ce_grad_no_mean, ["3 times too large", "divide by N"]),
    ("normalize_rows", _normalize_columns, ["normalized the columns"]),
    ("perceptron_predict", _perceptron_predict_ge, ["exactly 0 should give class 0", "> 0"]),
    ("perceptron_update", _perceptron_update_always,    # y = 0: it does not move at all
     ["w did not change", "misclassified (predicted 1, label 0)", "moves w away from x"]),
    ("perceptron_predict", _perceptron_predict_sign, ["np.sign gives -1, 0 or +1", "(s > 0)",
                                                    "0 elsewhere"]),
    ("perceptron_update", _perceptron_update_ge,
     ["x @ w + b is exactly 0 here", "x @ w + b > 0, strictly, not >= 0"]),
    # found by the mutation test: these passed before
    *[("softmax", _softmax_shift(center), ["rows with a large spread", "subtract each row's MAX",
                                           "the row's min, its mean, its first entry"])
      for center in (lambda z: z.min(axis=-1, keepdims=True),
                     lambda z: z.mean(axis=-1, keepdims=True),
                     lambda z: z[..., :1])],
    ("softmax", _softmax_in_place,
     ["changed its input z in place", "into a new array"]),
    ("cross_entropy", _cross_entropy_global_max,
     ["rows 1000 apart", "each ROW's own max", "not the max of the whole array"]),
    ("sigmoid_ce_grad", _sigmoid_ce_grad_unstable,
     ["z = [1000, -1000, 0]", "1 / (1 + exp(-z))", "inf / inf = nan"]),
    ("sigmoid_ce_grad", _sigmoid_ce_grad_float32, ["dL/dz is float32 but z is float64"]),
    ("normalize_rows", _normalize_rows_in_place,
     ["changed its input x in place", "divide into a new array"]),
    ("perceptron_predict", _perceptron_predict_bool, ["booleans", "integers"]),
    ("perceptron_predict", _perceptron_predict_float, ["float32 numbers", "integers 0 and 1"]),
    ("perceptron_predict", _perceptron_predict_minus_b, ["wrong sign", "not X @ w - b"]),
    ("relu_backward", _relu_backward_zeroes_dout,
     ["changed its input dout in place", "return a new array"]),
    ("relu_backward", _relu_backward_writes_cache,
     ["changed its input x (the cache) in place", "read the cache"]),
    # issue 26: the sigmoid's derivative in terms of its output (02b)
    ("sigmoid_derivative", lambda s: s * (1 + s), ["s (1 + s) grows", "sign inside"]),
    ("sigmoid_derivative", lambda s: 1 - s, ["only one factor", "vanishes at s = 0"]),
    ("sigmoid_derivative", lambda s: np.exp(-s) / (1 + np.exp(-s)) ** 2,
     ["the derivative in terms of z", "already the OUTPUT"]),
    ("sigmoid_derivative", lambda s: 1 - s * s, ["derivative of tanh"]),
    ("perceptron_update", lambda w, b, x, y, lr=1.0: (
        w + lr * (y - (x @ w + b > 0)) * x, b + (y - (x @ w + b > 0))),
     ["lr = 0.5", "lr was ignored in the bias update"]),
    ("init_std", lambda fan_in, fan_out, scheme: 2.0 / fan_in if scheme == "he" else
     2.0 / (fan_in + fan_out), ["that is the VARIANCE", "its square root"]),
    ("init_std", lambda fan_in, fan_out, scheme: float(np.sqrt(2.0 / fan_out)),
     ["init_std(40, 256, 'he')", "uses fan_out", "each output sums fan_in products"]),
    ("init_std", lambda fan_in, fan_out, scheme: float(np.sqrt(1.0 / fan_in)),
     ["LeCun's 1 / fan_in", "ReLU zeroes half"]),
    ("init_std", lambda fan_in, fan_out, scheme: float(np.sqrt(6.0 / (fan_in + fan_out))),
     ["bound a of Glorot's UNIFORM(-a, a)"]),
    ("init_std", lambda fan_in, fan_out, scheme: float(np.sqrt(2.0 / fan_in)),
     ["init_std(256, 256, 'xavier')", "uses fan_in AND fan_out"]),
])
def test_checks_name_the_mistake(checker, wrong, expected):
    with np.errstate(all="ignore"), pytest.raises(ExerciseError) as info:
        getattr(dl.check, checker)(wrong)
    message = str(info.value)
    for part in expected:
        assert part in message, f"{part!r} not in:\n{message}"
    assert "case:" in message


def _sigmoid_ce_grad_tanh(z, y):
    return (0.5 * (1 + np.tanh(z / 2)) - y) / len(z)


def _sigmoid_ce_grad_piecewise(z, y):          # the stable two-branch sigmoid
    with np.errstate(over="ignore", invalid="ignore"):
        sig = np.where(z >= 0, 1 / (1 + np.exp(-z)), np.exp(z) / (1 + np.exp(z)))
    return (sig - y) / len(z)


def _softmax_logsumexp(z):
    m = z.max(axis=-1, keepdims=True)
    return np.exp(z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True)))


def _relu_backward_copy(dout, cache):
    dx = dout.copy()
    dx[cache <= 0] = 0
    return dx


def _perceptron_predict_list(X, w, b):
    return [int(s > 0) for s in X @ w + b]


@pytest.mark.parametrize("checker, right", [
    ("sigmoid_ce_grad", _sigmoid_ce_grad_tanh),
    ("sigmoid_ce_grad", _sigmoid_ce_grad_piecewise),
    ("softmax", _softmax_logsumexp),
    ("relu_backward", _relu_backward_copy),
    ("perceptron_predict", _perceptron_predict_list),   # integers 0 and 1, one per sample
    ("perceptron_update", _perceptron_update_in_place),  # w += ...: the rule as written
])
def test_checks_accept_other_right_solutions(checker, right, capsys):
    getattr(dl.check, checker)(right)
    assert "\u2713" in capsys.readouterr().out


def test_a_check_reports_the_case_and_keeps_the_learners_traceback():
    def linear_backward(dout, cache):
        x, W = cache
        return dout @ W, None, None
    with pytest.raises(ExerciseError) as info:
        dl.check.linear_backward(linear_backward)
    assert "N=4 samples" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)      # the learner's own error, chained


def test_a_check_says_what_was_returned():
    with pytest.raises(ExerciseError, match=r"expected 3 values \(dx, dW, db\)"):
        dl.check.linear_backward(lambda dout, cache: dout)
    with pytest.raises(ExerciseError, match="is None"):
        dl.check.relu_backward(lambda dout, cache: None)


def test_exercise_error_is_an_assertion_error():
    assert issubclass(ExerciseError, AssertionError)


def test_dl_check_exports_every_check_of_every_lesson():
    import importlib
    import pkgutil
    lessons = [importlib.import_module(f"dlcourse.check.{m.name}")
               for m in pkgutil.iter_modules(dl.check.__path__) if m.name not in ("harness", "hints", "seal", "learner_record")]
    every_check = {name for module in lessons for name in module.__all__}
    every_check |= {"ExerciseError", "hint", "solution", "derivation", "progress"}
    assert set(dl.check.__all__) == every_check
    assert all(callable(getattr(dl.check, name)) for name in every_check)


# --------------------------------------------------------------------------------------
# (e) the generator itself
# --------------------------------------------------------------------------------------
def test_student_source_replaces_the_block_at_its_indentation():
    source = ("def f(x):\n"
              "    y = x + 1\n"
              "    ### BEGIN SOLUTION\n"
              "    # HINT: double it, \"twice\"\n"
              "    out = 2 * y\n"
              "    ### END SOLUTION\n"
              "    return out\n")
    student = student_source(source)
    assert student == ("def f(x):\n"
                       "    y = x + 1\n"
                       "    raise NotImplementedError('double it, \"twice\"')\n"
                       "    return out\n")
    namespace = {}
    exec(student, namespace)  # noqa: S102
    with pytest.raises(NotImplementedError, match='double it, "twice"'):
        namespace["f"](1)


def test_a_long_hint_is_wrapped_and_raised_whole():
    hint = " ".join(f"step{i} does this and that," for i in range(20)) + " then  return it"
    student = student_source(f"def f(x):\n    ### BEGIN SOLUTION\n    # HINT: {hint}\n"
                             f"    y = x\n    ### END SOLUTION\n    return y\n")
    lines = student.splitlines()
    assert lines[1] == "    raise NotImplementedError(" and lines[-1] == "    return y"
    assert len(lines) > 4 and max(len(line) for line in lines) <= RAISE_WIDTH
    namespace = {}
    exec(student, namespace)  # noqa: S102
    with pytest.raises(NotImplementedError) as info:
        namespace["f"](1)
    assert str(info.value) == hint                      # the words, spaces and all


def test_student_source_without_hint_gets_the_generic_one():
    student = student_source("### BEGIN SOLUTION\nx = 1\n### END SOLUTION")
    assert student == f'raise NotImplementedError(\n    "{GENERIC_HINT}")'   # too long for one


def test_student_source_markdown_block():
    student = student_source("Why?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\n",
                             cell_type="markdown")
    assert student == "Why?\nYOUR ANSWER HERE\n"


def _write_notebook(folder: Path, name: str, sources: list[str]) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    path = folder / name
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize("source, message", [
    ("def f():\n    ### BEGIN SOLUTION\n    return 1\n",
     r"`### BEGIN SOLUTION` on line 2 has no `### END SOLUTION` after it"),
    ("x = 1\n### END SOLUTION\n", r"`### END SOLUTION` on line 2 has no `### BEGIN SOLUTION`"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n",
     r"a second `### BEGIN SOLUTION` on line 2"),
])
def test_unbalanced_markers_name_the_notebook_and_cell(tmp_path, source, message):
    src = tmp_path / "src"
    src.mkdir()
    _write_notebook(src, "00_fine.ipynb", ["### BEGIN SOLUTION\nx = 1\n### END SOLUTION"])
    _write_notebook(src, "01_broken.ipynb", ["print('ok')", source])
    out = tmp_path / "out"
    with pytest.raises(SolutionMarkerError, match=r"01_broken\.ipynb, cell 1: " + message):
        write_student_notebooks(src, out)
    assert not out.exists() or not list(out.iterdir()), "nothing is written when one notebook fails"


def test_no_notebooks_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no notebooks"):
        write_student_notebooks(tmp_path, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        write_student_notebooks(tmp_path / "missing", tmp_path / "out")


def test_refuses_to_overwrite_the_solutions(tmp_path):
    _write_notebook(tmp_path, "00_x.ipynb", ["### BEGIN SOLUTION\nx = 1\n### END SOLUTION"])
    with pytest.raises(ValueError, match="overwrite the solutions"):
        write_student_notebooks(tmp_path, tmp_path)
    assert "BEGIN SOLUTION" in (tmp_path / "00_x.ipynb").read_text()


def test_outputs_cleared_metadata_kept_and_overwrites_old_versions(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3",
                                                           "display_name": "Python 3",
                                                           "language": "python"}})
    cell = nbformat.v4.new_code_cell("print(1)", execution_count=3)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), cell]
    nbformat.write(nb, src / "00_a.ipynb")
    out = tmp_path / "out"
    out.mkdir()
    (out / "00_a.ipynb").write_text("an old, stale version")
    (written,) = write_student_notebooks(src, out)
    student = nbformat.read(written, as_version=4)
    assert student.metadata.kernelspec.name == "python3"
    assert student.cells[1].outputs == [] and student.cells[1].execution_count is None
    assert student.cells[0].source == "# Title"
