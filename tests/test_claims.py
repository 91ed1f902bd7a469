"""Every number in a lesson's prose comes from its code or is held by it (issue 39).

A sentence after a lesson's first code cell that states a measured number, a ratio or a
comparison of results (tests/support/claims.py says exactly which) must be held by the code cell
just before or after it: an ``assert``, or a ``# NBVAL_CHECK_OUTPUT`` cell whose output nbval
compares, carrying every number the sentence states; a faster/slower claim needs an assertion,
since no saved output can hold a speed. Better still, the code prints the sentence (an f-string
from the outputs it describes), and the prose says no number at all.

What is neither measured here nor checkable is listed in ALLOWED below, reviewed, with the kind:
``definition`` (a setting, a format's arithmetic, what a column or a threshold means) or
``published`` (someone else's figure; the lesson names the source given here, in the same cell).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.claims import claims

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb"))

# (lesson, the start of the sentence as tests/support/claims.py splits it): (kind, why / source)
ALLOWED: dict[tuple[str, str], tuple[str, str]] = {
    ("05_gpu_batching", "**Each weight is read once per batch"):
        ("definition", "the memory wall: why arithmetic intensity matters, counted in the cell after"),
    ("00_setup_and_gpu_arrays", "A copy to or from the GPU crosses the bus"):
        ("definition", "what PCIe/NVLink are: the lesson measures the copy itself"),
    ("02b_gradient_descent", "The scores stay raw; the right class's score should beat"):
        ("definition", "the hinge loss's margin"),
    ("04b_optimizers_and_regularization", "The paper's test accuracies"):
        ("published", "Greydanus"),
    ("04b_optimizers_and_regularization", "*big + dropout*"):
        ("definition", "dropout=0.3 zeroes 30 % of the units: the setting"),
    ("04c_initialization", "With and 20 layers"):
        ("definition", "arithmetic: 0.9**20 = 0.12, 1.1**20 = 6.7"),
    ("06a_convolution_and_im2col", "The output is smaller than the input"):
        ("definition", "a valid convolution's output size"),
    ("06a_convolution_and_im2col", "**padding and stride**"):
        ("definition", "what padding and stride are"),
    ("07_training_a_cnn", "**Why does it help?**"):
        ("published", "Ioffe"),
    ("07_training_a_cnn", "The first is the historical motivation"):
        ("published", "Santurkar"),
    ("07_training_a_cnn", "MLP about 68 %"):
        ("published", "Greydanus"),
    ("08b_tiling_and_roofline", "**Shared memory** is a small"):
        ("published", "H100"),
    ("08c_bank_conflicts_occupancy_and_tensor_cores", "On an H100: 256 threads"):
        ("definition", "the occupancy arithmetic from the H100's published limits, worked"),
    ("08c_bank_conflicts_occupancy_and_tensor_cores", "NVIDIA's H100 SXM datasheet gives"):
        ("published", "datasheet"),
    ("08d_fusion_and_graphs", "Elementwise work such as a bias"):
        ("definition", "the roofline: below the ridge, bandwidth sets the speed"),
    ("08d_fusion_and_graphs", "Read the ratio with its range"):
        ("definition", "how to read the printed range"),
    ("04d_playground", "**data**: four sets of points"):
        ("definition", "the playground's 75/25 split"),
    ("04d_playground", "The panel calls a run *diverged*"):
        ("definition", "the panel's threshold"),
    ("10_number_formats_and_mixed_precision", "Near 1 the numbers of bf16"):
        ("definition", "bf16's spacing at 1, 2**-7"),
    ("10_number_formats_and_mixed_precision", "NVIDIA's H100 SXM datasheet"):
        ("published", "datasheet"),
    ("10_number_formats_and_mixed_precision", "H100 SXM datasheet:"):
        ("published", "datasheet"),
    ("10_number_formats_and_mixed_precision", "An update is often thousands of times smaller"):
        ("definition", "why master weights: the bf16 example follows in the sentence"),
    ("11a_quantization", "(The test set has 270 digits"):
        ("definition", "1/270 of the test set"),
    ("11b_pruning", "Practitioners usually prune *gradually*"):
        ("definition", "the cubic schedule's sparsities, from its formula (Zhu & Gupta)"),
    ("11b_pruning", "With 270 test digits one digit"):
        ("definition", "1/270 of the test set"),
    ("11b_pruning", "Each line is one layer pruned alone."):
        ("definition", "max_drop=0.05 is 5 points: the setting"),
    ("11b_pruning", "The sparse tensor cores store only"):
        ("published", "NVIDIA"),
    ("11b_pruning", "**Sparse kernels** (CSR and friends)"):
        ("definition", "why sparse formats need high sparsity: irregular access"),
    ("12_checkpoint_to_service", "The last column is how many times slower"):
        ("definition", "what the printed column means"),
    ("12_checkpoint_to_service", "**limits**"):
        ("definition", "the service's default body limit"),
    ("12b_protecting_a_model", "(Reading the file again and refusing it"):
        ("definition", "why one read: a second read is safe but slower, no figure"),
    ("13_data_parallel", "Both ranks check your ring against MPI's"):
        ("definition", "why the best of 10: noise only slows a run"),
    ("13_data_parallel", "8 GPUs in one server on **NVLink**"):
        ("published", "datasheet"),
    ("13_data_parallel", "Several servers on **InfiniBand NDR**"):
        ("published", "datasheet"),
    ("15_attention", "A model that uses context must beat both"):
        ("definition", "the bar the model must clear (asserted after its training)"),
    ("15_attention", "Every CPython ships the text"):
        ("definition", "the 90/10 split of the text"),
    ("16_flash_attention", "FlashAttention-2 (Dao, 2023)"):
        ("published", "Dao"),
    ("16_flash_attention", "FlashAttention-3 (Shah, Dao et al., 2024)"):
        ("published", "Shah"),
}


def _allowed(claim) -> tuple[str, str] | None:
    return next((why for (lesson, start), why in ALLOWED.items()
                 if lesson == claim.lesson and claim.sentence.startswith(start)), None)


def unheld(path: Path) -> list:
    return [c for c in claims(path) if c.held_by is None and not _allowed(c)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_number_in_the_prose_is_printed_by_the_code_or_held_by_it(path):
    missing = unheld(path)
    assert not missing, (
        f"{path.name}: {len(missing)} sentence(s) state a measured number or compare results, "
        f"and no code cell next to them holds it:\n" + "\n".join(
            f"  markdown cell {c.cell}: {c.sentence[:160]!r}"
            + (f" (numbers: {', '.join(c.numbers)})" if c.numbers else "") for c in missing)
        + "\nPrint the sentence from the outputs with an f-string, or put an assertion (or a "
          "# NBVAL_CHECK_OUTPUT cell) carrying its numbers in the code cell just before or after "
          "it. A definition or a published figure goes on ALLOWED in tests/test_claims.py.")


def test_the_allow_list_is_reviewed_each_entry_matches_and_published_ones_name_their_source():
    by_stem = {p.stem: p for p in NOTEBOOKS}
    for (lesson, start), (kind, why) in ALLOWED.items():
        assert kind in ("definition", "published"), (lesson, start, kind)
        if lesson not in by_stem:
            continue                      # a lesson renamed or split: its entries go with it
        found = [c for c in claims(by_stem[lesson]) if c.sentence.startswith(start)]
        assert found, (f"ALLOWED names {lesson}: {start!r}, but no claim of that lesson starts "
                       f"so: remove the entry (or update it with the sentence)")
        if kind == "published":
            cells = json.loads(by_stem[lesson].read_text(encoding="utf-8"))["cells"]
            text = "".join(cells[found[0].cell]["source"])
            assert why in text, (f"{lesson}: {start!r} is a published figure, but its cell does "
                                 f"not name its source ({why!r})")


def _notebook(tmp_path, cells, name="99_planted.ipynb"):
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / name
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def _code(source, output=""):
    return {"cell_type": "code", "metadata": {}, "execution_count": 1, "source": source,
            "outputs": [{"output_type": "stream", "name": "stdout", "text": output}]}


def _md(source):
    return {"cell_type": "markdown", "metadata": {}, "source": source}


def test_a_planted_unheld_sentence_is_caught_and_an_assertion_or_checked_output_holds_it(tmp_path):
    timing = _code("t = time_both()\nprint(t)", "loop 16.0 ms, batch 2.0 ms\n")
    planted = _md("The batch is 8.0x faster than the loop on this machine.")
    assert [c.numbers for c in unheld(_notebook(tmp_path, [timing, planted]))] == [["8.0x"]]
    asserted = _code("assert t['loop'] / t['batch'] > 8.0")
    assert not unheld(_notebook(tmp_path, [timing, planted, asserted]))
    wrong_number = _code("assert t['loop'] / t['batch'] > 2")           # holds another number
    assert unheld(_notebook(tmp_path, [timing, planted, wrong_number]))
    frozen = _code("# NBVAL_CHECK_OUTPUT\nprint(ratio)", "8.0x\n")
    assert not unheld(_notebook(tmp_path, [timing, planted, frozen]))
    # a comparison without a number after an output; a speed needs an assertion that compares
    slower = _md("On small buffers your ring is usually several times slower.")
    assert len(unheld(_notebook(tmp_path, [timing, slower]))) == 1
    checked = _code("# NBVAL_CHECK_OUTPUT\nprint('equal:', True)", "equal: True\n")
    assert len(unheld(_notebook(tmp_path, [checked, slower]))) == 1
    assert not unheld(_notebook(tmp_path, [timing, slower, _code("assert t['ring'] > t['mpi']")]))
    # not claims: a question, a worked example, a shape, the intro before any code
    quiet = [_md("The batch is 3.0x faster."), timing,
             _md("Is the batch 3x faster? By hand: 0.9 ** 20 is 0.12 %, 2 times it. "
                 "A tile of 32 × 32, then 9 × `Block`.")]
    assert not unheld(_notebook(tmp_path, quiet))


def test_a_sentence_planted_in_a_real_lesson_is_caught(tmp_path):
    lesson = next(p for p in NOTEBOOKS if p.stem.startswith("05_"))
    nb = json.loads(lesson.read_text(encoding="utf-8"))
    first_code = next(i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code")
    nb["cells"].insert(first_code + 1, _md("Here the loop took 16.0 ms, 8 times slower."))
    path = tmp_path / lesson.name
    path.write_text(json.dumps(nb), encoding="utf-8")
    assert [c.sentence for c in unheld(path)] == ["Here the loop took 16.0 ms, 8 times slower."]
    assert not re.search("16.0 ms", "".join(c.sentence for c in unheld(lesson)))
