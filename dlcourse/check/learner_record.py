"""Your own record of the exercises: which checks you ran, which passed, which hints and
reference solutions you saw. It stays on your machine, in your workspace, and is never sent
anywhere; ``dl.check.progress()`` in a notebook and ``dlcourse progress`` in a terminal show it.

The record is one small JSON file in the workspace, :data:`FILE`, rewritten atomically at each
event (a check that fails or passes, a hint, a solution)::

    {"exercises": {"relu_backward": {"fails": 2, "passes": 1, "hint": 3, "solutions": 1}}}

The workspace is ``$DLCOURSE_WORKSPACE`` when set (``dlcourse start`` sets it for its lab), else
the folder a notebook runs in or the nearest folder above it that ``dlcourse start`` wrote
(its ``.dlcourse-manifest.json``). Where there is none (the course's own ``notebooks/``, a
test), the record lives in memory for the session.

The record also decides when ``dl.check.solution(name)`` shows the reference: once the learner
has run the exercise's check on an answer of their own (it failed, or it passed) and has seen
its last hint level (:func:`solution_withheld`). An instructor turns solutions off for a graded
class with ``DLCOURSE_SOLUTIONS=off``, or ``{"solutions": "off"}`` in :data:`SETTINGS` in the
folder the notebooks are handed out in (docs/instructors.md).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .._io import atomic_write
from ..student import MANIFEST

__all__ = ["FILE", "SETTINGS", "ENV", "SOLUTIONS_ENV", "workspace", "record_path", "load",
           "record", "record_check", "entry", "solutions_off", "solution_withheld", "report",
           "forget"]

FILE = ".dlcourse-progress.json"
SETTINGS = ".dlcourse-settings.json"
ENV = "DLCOURSE_WORKSPACE"          # the same variable ``dlcourse start`` reads
SOLUTIONS_ENV = "DLCOURSE_SOLUTIONS"
_OFF = {"off", "0", "no", "false", "never"}
_EVENTS = {"fail": "fails", "pass": "passes", "solution": "solutions"}

_memory: dict = {"exercises": {}}   # the record when no workspace is known (this session only)
_counted: set = set()               # check runs already counted (id of the check's frame)


def workspace() -> Path | None:
    """The learner's workspace: ``$DLCOURSE_WORKSPACE``, else the current folder or the
    nearest one above it holding the manifest ``dlcourse start`` writes; None if neither."""
    __tracebackhide__ = True
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / MANIFEST).is_file():
            return folder
    return None


def record_path(folder=None) -> Path | None:
    """The record's file in ``folder`` (default: :func:`workspace`), or None (in memory)."""
    __tracebackhide__ = True
    folder = Path(folder) if folder is not None else workspace()
    return None if folder is None else folder / FILE


def load(folder=None) -> dict:
    """The record, ``{"exercises": {name: {"fails", "passes", "hint", "solutions"}}}``; an
    unreadable or missing file reads as an empty record."""
    __tracebackhide__ = True
    path = record_path(folder)
    if path is None:
        return _memory
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"exercises": {}}
    if not isinstance(data, dict) or not isinstance(data.get("exercises"), dict):
        return {"exercises": {}}
    return data


def entry(name: str, folder=None) -> dict:
    """What the record holds for exercise ``name`` (zeros when nothing yet)."""
    __tracebackhide__ = True
    got = load(folder)["exercises"].get(name, {})
    return {key: int(got.get(key, 0)) for key in ("fails", "passes", "hint", "solutions")}


def record(name: str, event: str, level: int | None = None, folder=None) -> None:
    """Note one ``event`` of exercise ``name``: ``"fail"`` or ``"pass"`` (a check run),
    ``"hint"`` (``level``: the deepest level seen is kept) or ``"solution"``. A record that
    cannot be written (a read-only folder) is left as it was: the check goes on."""
    __tracebackhide__ = True
    path = record_path(folder)
    data = load(folder)
    item = data["exercises"].setdefault(name, {})
    if event == "hint":
        item["hint"] = max(int(item.get("hint", 0)), int(level or 0))
    else:
        key = _EVENTS[event]
        item[key] = int(item.get(key, 0)) + 1
    if path is None:
        return
    data["about"] = ("your own record of the dlcourse exercises (checks run, hints and "
                     "solutions seen): it stays here and is never uploaded")
    try:
        with atomic_write(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
    except OSError:
        pass


def forget() -> None:
    """Empty the in-memory record (a test, or a fresh start without a workspace)."""
    __tracebackhide__ = True
    _memory["exercises"].clear()
    _counted.clear()


# --------------------------------------------------------------------------------------
# A check's run: which exercise, counted once
# --------------------------------------------------------------------------------------
_CHECK_DIR = os.path.dirname(__file__) + os.sep


def _check_frame():
    """The outermost frame of a ``dl.check.<exercise>`` function on the stack, or None."""
    __tracebackhide__ = True
    names = set(getattr(sys.modules.get(__package__), "__all__", ()))
    found, frame = None, sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name in names and code.co_filename.startswith(_CHECK_DIR):
            found = frame
        frame = frame.f_back
    return found


def current_exercise() -> str | None:
    """The exercise whose check is running (the ``dl.check.<exercise>`` on the stack): a pass is
    recorded under it, whatever the learner called their function."""
    __tracebackhide__ = True
    frame = _check_frame()
    return frame.f_code.co_name if frame is not None else None


def record_check(fn, event: str, name: str | None = None) -> None:
    """Note that the check running now failed or passed (``event``), under its exercise's
    name (the check on the stack; else ``name``, else the function's). A check run counts once,
    however many of its inner calls failed before it ended."""
    __tracebackhide__ = True
    frame = _check_frame()
    exercise = frame.f_code.co_name if frame is not None else (
        name or getattr(fn, "__name__", None))
    if not exercise:
        return
    if frame is not None and event == "fail":
        key = (id(frame), exercise)
        if key in _counted:
            return
        _counted.add(key)
    record(exercise, event)


# --------------------------------------------------------------------------------------
# Solutions: when they are shown
# --------------------------------------------------------------------------------------
def _settings_off() -> bool:
    __tracebackhide__ = True
    here = Path.cwd()
    folders = [workspace(), here, *here.parents]
    for folder in dict.fromkeys(f for f in folders if f is not None):
        try:
            data = json.loads((folder / SETTINGS).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and str(data.get("solutions", "")).lower() in _OFF:
            return True
    return False


def solutions_off() -> bool:
    """Whether an instructor turned reference solutions off (``DLCOURSE_SOLUTIONS=off``, or
    ``{"solutions": "off"}`` in a :data:`SETTINGS` file in the workspace or a folder above the
    notebook)."""
    __tracebackhide__ = True
    return os.environ.get(SOLUTIONS_ENV, "").strip().lower() in _OFF or _settings_off()


def solution_withheld(name: str, levels: int, folder=None) -> str | None:
    """Why the reference solution of ``name`` (with ``levels`` hint levels) is not shown yet,
    in words; None when it may be shown."""
    __tracebackhide__ = True
    if solutions_off():
        return (f"Reference solutions are turned off for this class (your instructor set "
                f"{SOLUTIONS_ENV}=off or the course's settings): the hints are there, "
                f"dl.check.hint({name!r}).")
    seen = entry(name, folder)
    needed = []
    if not (seen["fails"] or seen["passes"]):
        needed.append(f"run its check on an answer of your own (dl.check.{name}(your_function)); "
                      f"an unchanged `raise NotImplementedError` does not count")
    if seen["hint"] < levels:
        needed.append(f"read its hints to the last one, {levels} of {levels} (seen so far: "
                      f"{seen['hint']}); dl.check.hint({name!r}) gives the next")
    if not needed:
        return None
    return (f"The reference solution of {name} is shown after you have tried it yourself. "
            f"Still to do: " + "; and ".join(needed) + ".")


# --------------------------------------------------------------------------------------
# The report: per lesson, what passed, what was tried, hints and solutions seen
# --------------------------------------------------------------------------------------
def report(lessons, folder=None) -> str:
    """The learner's progress as text. ``lessons`` is ``[(lesson, [exercise, ...]), ...]`` in
    course order; the record is read from ``folder`` (default: the workspace)."""
    __tracebackhide__ = True
    data = load(folder)["exercises"]
    where = record_path(folder)
    lines = [f"Your progress ({where if where else 'no workspace found: this session only'}); "
             f"it stays on this machine."]
    total = done = 0
    for lesson, names in lessons:
        rows = []
        for name in names:
            item = data.get(name, {})
            total += 1
            if item.get("passes"):
                done += 1
                state = "passed"
            elif item.get("fails"):
                state = f"tried ({item['fails']} failed run{'s' if item['fails'] != 1 else ''})"
            else:
                state = "not tried"
            extra = []
            if item.get("hint"):
                extra.append(f"hints seen: {item['hint']}")
            if item.get("solutions"):
                extra.append("solution seen")
            mark = "\u2713" if item.get("passes") else ("\u2026" if item.get("fails") else " ")
            rows.append(f"  {mark} {name:<24} {state}" + (f"; {', '.join(extra)}" if extra else ""))
        passed = sum(1 for n in names if data.get(n, {}).get("passes"))
        lines.append(f"{lesson}: {passed} of {len(names)} passed")
        lines.extend(rows)
    lines.append(f"In all: {done} of {total} exercises passed.")
    return "\n".join(lines)

