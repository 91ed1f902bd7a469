"""Looking up an exercise is quick (issue 40, item 12): `dlcourse solution`, `dlcourse reset` and
`dl.check.hint` read the notebooks' JSON directly, without importing nbformat, whose import
(jsonschema, a grammar built at import) took 5-8 s. Held by what a fresh interpreter has
imported after the lookup, not by a clock; and a reset still writes the notebook exactly as
nbformat lays it out, the learner's other cells untouched."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dlcourse import cli

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("nbformat", "jsonschema")

CHECK = """
import sys
{code}
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print("HEAVY", heavy)
"""


def imported_after(code: str, tmp_path) -> list:
    """The nbformat/jsonschema modules a fresh interpreter has imported after ``code``."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "DLCOURSE_DEVICE": "cpu",
           "DLCOURSE_WORKSPACE": str(tmp_path / "record"), "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", CHECK.format(code=code, heavy=HEAVY)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    line = next(l for l in r.stdout.splitlines() if l.startswith("HEAVY"))
    return eval(line.split(" ", 1)[1])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lookup") / "ws"
    assert cli.main(["student-notebooks", str(folder)]) == 0
    return folder


def test_solution_does_not_import_nbformat(tmp_path):
    code = ("from dlcourse import cli\n"
            "assert cli.main(['solution', 'relu_backward']) == 0")
    assert imported_after(code, tmp_path) == []


def test_a_hint_does_not_import_nbformat(tmp_path):
    code = "import dlcourse as dl\ndl.check.hint('relu_backward', 1)"
    assert imported_after(code, tmp_path) == []


def test_reset_does_not_import_nbformat(workspace, tmp_path):
    code = (f"from dlcourse import cli\n"
            f"assert cli.main(['reset', '03', 'relu_backward', '--dir', {str(workspace)!r}]) == 0")
    assert imported_after(code, tmp_path) == []


def test_reset_keeps_the_learners_cells_and_nbformats_layout(workspace, capsys):
    nbformat = pytest.importorskip("nbformat")
    path = next(workspace.glob("03_*.ipynb"))
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "relu_backward")
    started = cell.source
    cell.source = "def relu_backward(dout, cache):\n    return dout  # mine\n"
    other = next(c for c in nb.cells if c.cell_type == "code" and c is not cell)
    other.source = "x = 1  # a learner's note\nprint('é', x)"
    other.outputs = [nbformat.v4.new_output("stream", name="stdout", text="é 1\nline two\n")]
    nbformat.write(nb, path)
    assert cli.main(["reset", "03", "relu_backward", "--dir", str(workspace)]) == 0
    text = path.read_text(encoding="utf-8")
    after = nbformat.reads(text, as_version=4)
    expected = nbformat.read(path, as_version=4)       # what nbformat itself would write
    assert text == nbformat.writes(expected) + "\n"
    cells = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): c for c in after.cells}
    assert cells["relu_backward"].source == started
    kept = after.cells[nb.cells.index(other)]
    assert kept.source == other.source and kept.outputs[0]["text"] == "é 1\nline two\n"


def test_read_notebook_reads_what_nbformat_reads(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    from dlcourse.notebook_file import read_notebook, write_notebook
    for path in sorted((REPO / "notebooks").glob("*.ipynb"))[:6]:
        ours, theirs = read_notebook(path), nbformat.read(path, as_version=4)
        assert [(c.cell_type, c.source) for c in ours.cells] == \
            [(c.cell_type, c.source) for c in theirs.cells]
        write_notebook(ours, tmp_path / path.name)
        assert (tmp_path / path.name).read_text(encoding="utf-8") == \
            nbformat.writes(theirs) + "\n"
        assert json.loads((tmp_path / path.name).read_text(encoding="utf-8")) == \
            json.loads(path.read_text(encoding="utf-8"))
