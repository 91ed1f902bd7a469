"""What closing the library costs a check (issue 37): every exercise's check run on its
instructor solution, sealed (the profile hook of dlcourse/check/seal.py, as learners run it)
against the same check with the hook left out, alternating over rounds, in one run.

    python benchmarks/sealed_checks.py [--rounds 5] [--lessons 06a_convolution_and_im2col 15_attention ...]

Prints, per exercise, the median milliseconds of each and their ratio, then the whole course's
sum. The hook adds one Python call per call the learner's function makes, so a loop-heavy answer
(conv2d_naive's four nested loops) pays most; an answer of a few array operations, nearly
nothing. Lessons whose checks need an optional extra that is missing are skipped, said so.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import dlcourse as dl  # noqa: E402
from dlcourse.check import harness, seal  # noqa: E402
from dlcourse.student import BEGIN  # noqa: E402


class _Unsealed(seal.sealed):
    """The seal with its hook left out: the check runs exactly as sealed otherwise."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def exercises(lesson: Path):
    """[(name, solution cell source, check line)] of one instructor notebook."""
    import json
    cells = [("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
             for c in json.loads(lesson.read_text(encoding="utf-8"))["cells"]
             if c["cell_type"] == "code"]
    found = []
    for k, source in enumerate(cells):
        match = re.search(r"^def (\w+)\(", source, re.MULTILINE)
        if BEGIN not in source or not match:
            continue
        for later in cells[k + 1:k + 4]:
            line = next((l for l in later.splitlines()
                         if re.match(rf"dl\.check\.\w+\(\s*{match.group(1)}\s*\)", l)), None)
            if line:
                found.append((match.group(1), source, line))
                break
    return found


def run_check(source: str, line: str) -> float:
    namespace = {"dl": dl, "np": np}
    exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102 - our own notebooks
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(line, "<cell>", "exec"), namespace)  # noqa: S102
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lessons", nargs="*", help="notebook stems (default: all)")
    args = parser.parse_args(argv)
    lessons = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
    if args.lessons:
        lessons = [p for p in lessons if p.stem in args.lessons]
    rows, total = [], {"sealed": 0.0, "open": 0.0}
    print(f"{'exercise':28s} {'sealed ms':>10s} {'open ms':>10s} {'ratio':>7s}")
    for lesson in lessons:
        for name, source, line in exercises(lesson):
            times = {"sealed": [], "open": []}
            try:
                for _ in range(args.rounds):
                    for variant in ("sealed", "open"):        # alternated, round by round
                        saved = harness.sealed
                        harness.sealed = seal.sealed if variant == "sealed" else _Unsealed
                        try:
                            times[variant].append(run_check(source, line))
                        finally:
                            harness.sealed = saved
            except ImportError as err:
                print(f"{name:28s} skipped: {err}")
                continue
            med = {k: statistics.median(v) for k, v in times.items()}
            total["sealed"] += med["sealed"]
            total["open"] += med["open"]
            rows.append((name, med))
            print(f"{name:28s} {med['sealed'] * 1e3:10.1f} {med['open'] * 1e3:10.1f} "
                  f"{med['sealed'] / med['open']:6.2f}x")
    print(f"{'all ' + str(len(rows)) + ' checks':28s} {total['sealed'] * 1e3:10.1f} "
          f"{total['open'] * 1e3:10.1f} {total['sealed'] / total['open']:6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
