"""GPU results recorded by ``benchmarks/gpu_suite.py``, read back for the lessons that show them
(00, 05 and 08) on any machine, with or without a GPU.

The suite writes one ``benchmarks/results/<device>.json`` per GPU it ran on, naming the device
under ``environment.device`` and the date under ``date``. Each figure a lesson shows from these
files is printed with that device and date. Nothing here makes a figure up: with no file
recorded there is nothing to show, and the lessons say so.

    for rec in dl.recorded.gpu_results():
        print(rec.title)                               # "h100.json: measured on ... (2026-...)"
        print(dl.recorded.lookup(rec.results, "matmul", "cublas_fp32", "tflops"))
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple

__all__ = ["Recorded", "results_folder", "gpu_results", "lookup"]


class Recorded(NamedTuple):
    """One results file: its name, the device it was measured on, and what it holds."""
    file: str
    device: str
    results: dict

    @property
    def date(self) -> str:
        """The day of the run (YYYY-MM-DD), or "date not recorded"."""
        date = self.results.get("date")
        return str(date)[:10] if date else "date not recorded"

    @property
    def title(self) -> str:
        """One line naming the file, the device, the date and what kind of run it was."""
        notes = [self.date]
        if self.results.get("quick"):
            notes.append("a --quick run")
        if self.results.get("complete") is False:
            notes.append("partial: the run stopped before its last section")
        return f"{self.file}: measured on {self.device} ({', '.join(notes)})"


def results_folder() -> Path:
    """``benchmarks/results`` of this checkout: beside the ``dlcourse`` package, or above or in
    the current folder (a notebook runs in ``notebooks/``)."""
    for base in (Path(__file__).resolve().parents[1], Path.cwd().parent, Path.cwd()):
        if (base / "benchmarks").is_dir():
            return base / "benchmarks" / "results"
    return Path("..") / "benchmarks" / "results"


def gpu_results(folder: str | Path | None = None,
                say: Callable[[str], Any] | None = print) -> list[Recorded]:
    """Every readable results file in ``folder`` (default: :func:`results_folder`) that names
    the device it was measured on, sorted by file name.

    A file that is not JSON, or does not say which device it comes from, is skipped, and
    ``say`` (``print`` by default; ``None`` for silence) is told why: a lesson must not fail
    because of one bad file, and a figure without its device is never shown.
    """
    folder = results_folder() if folder is None else Path(folder)
    found = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            results = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            _tell(say, f"skipping {path.name}: not readable JSON ({err})")
            continue
        device = lookup(results, "environment", "device")
        if not isinstance(device, str) or not device.strip():
            _tell(say, f"skipping {path.name}: it does not say which device it was measured on "
                       "(environment.device)")
            continue
        found.append(Recorded(path.name, device.strip(), results))
    return found


def lookup(d: Any, *keys: str) -> Any:
    """``d[k1][k2]...``, or ``None`` where a level is missing or is not a dictionary: a file
    from an older suite, or a section that stopped early, lacks some figures."""
    for key in keys:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d


def _tell(say, message):
    if say is not None:
        say(message)
