"""The learner's workspace: ``dlcourse start``, ``reset``, ``solution`` and ``student-notebooks``.

``dlcourse start`` writes the student versions of the course notebooks (solutions out, see
``student.py``) into the learner's own folder, ``~/dlcourse-workspace`` unless ``--dir`` or
``$DLCOURSE_WORKSPACE`` says otherwise, and opens JupyterLab there. Run again, it adds new
lessons and updates the ones the learner has not touched; a notebook the learner changed is
kept, and a newer version of it is written beside it (``NN_name.updated.ipynb``). It says what
it did and where the workspace is. As root (Docker, many cloud machines) it passes
``--allow-root`` to JupyterLab.

``dlcourse reset 06 conv2d_backward`` puts one exercise back to its starting state;
``dlcourse solution conv2d_backward`` prints the reference solution (only when asked for).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ._io import atomic_write
from .student import (RENAMED, exercises, find_exercise, make_student_notebook,
                      notebooks_dir, solution_text, sync_notebooks)

__all__ = ["WorkspaceError", "default_workspace", "reset_exercise", "jupyter_command",
           "add_commands"]

ENV = "DLCOURSE_WORKSPACE"


class WorkspaceError(Exception):
    """A workspace command cannot do what was asked (the message says why and what to do)."""


def default_workspace() -> Path:
    """``$DLCOURSE_WORKSPACE``, else ``~/dlcourse-workspace``."""
    return Path(os.environ.get(ENV) or Path.home() / "dlcourse-workspace").expanduser()


def _source(path) -> Path:
    if path is None:
        return notebooks_dir()
    path = Path(path)
    if not path.is_dir():
        raise WorkspaceError(f"--source {path} is not a folder: pass the folder of the course "
                             f"notebooks (notebooks/ in the repository).")
    return path


def _report(done, where: Path) -> None:
    counts: dict[str, int] = {}
    for what, path in done:
        counts[what] = counts.get(what, 0) + 1
        if what == "kept, new version beside":
            print(f"  kept your {path.name.split('.updated')[0]}.ipynb (you changed it); "
                  f"the new version is {path.name}")
        elif what == "kept":
            print(f"  kept your {path.name} as you changed it (no newer version of it)")
        elif what in ("added", "updated"):
            print(f"  {what}: {path.name}")
        elif what in ("retired", "kept, retired"):
            print(f"  {path.name} is no longer a lesson{_now_in(path.stem)}: "
                  + ("removed (you had not changed it)" if what == "retired" else
                     "kept as you changed it; delete it when you no longer need it"))
    summary = ", ".join(f"{n} {what}" for what, n in counts.items())
    print(f"workspace: {where} ({summary})")


def _now_in(stem: str) -> str:
    lessons = RENAMED.get(stem)
    return f" (its content is now in {' and '.join(lessons)})" if lessons else ""


# --------------------------------------------------------------------------------------
# dlcourse reset LESSON EXERCISE
# --------------------------------------------------------------------------------------
def _lesson_notebook(folder: Path, lesson: str) -> Path:
    key = lesson.removesuffix(".ipynb")
    matches = [p for p in sorted(folder.glob("*.ipynb"))
               if ".updated" not in p.name and (p.stem == key or p.stem.split("_")[0] == key)]
    if len(matches) != 1:
        found = ", ".join(p.stem for p in sorted(folder.glob("[0-9]*.ipynb"))) or "none"
        raise WorkspaceError(f"no single lesson {lesson!r} in {folder} (the lessons: {found}). "
                             f"Give its number (06) or its name (06_convolution).")
    return matches[0]


def reset_exercise(workspace, lesson: str, name: str, source=None) -> Path:
    """Put exercise ``name`` of ``lesson`` (``"06"`` or ``"06_convolution"``) in the workspace
    back to its starting state (its student version); the rest of the notebook stays as the
    learner left it. Returns the notebook's path."""
    import nbformat
    workspace, source = Path(workspace), _source(source)
    target = _lesson_notebook(workspace, lesson)
    course = nbformat.read(source / target.name, as_version=4)
    fresh = make_student_notebook(course, target.name)
    by_name = {ex.name: ex for ex in exercises(course)}
    if name not in by_name:
        raise WorkspaceError(f"{target.stem} has no exercise {name!r}; its exercises: "
                             f"{', '.join(by_name) or 'none'}.")
    start = fresh.cells[by_name[name].cell]
    nb = nbformat.read(target, as_version=4)
    cells = [i for i, c in enumerate(nb.cells)
             if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == name]
    if not cells:   # the learner removed the metadata: find the cell by its first line
        first = start.source.splitlines()[0] if start.source else None
        cells = [i for i, c in enumerate(nb.cells)
                 if first and c.cell_type == start.cell_type and c.source.startswith(first)]
    if len(cells) != 1:
        raise WorkspaceError(f"the cell of {name} was not found in {target}: copy it from "
                             f"a fresh copy instead (dlcourse student-notebooks OUTDIR).")
    cell = nb.cells[cells[0]]
    cell.source = start.source
    if cell.cell_type == "code":
        cell.outputs, cell.execution_count = [], None
    with atomic_write(target, "w", encoding="utf-8") as f:
        f.write(nbformat.writes(nb) + "\n")
    return target


# --------------------------------------------------------------------------------------
# dlcourse start
# --------------------------------------------------------------------------------------
def jupyter_command(workspace, port: int | None = None, browser: bool = True) -> list[str]:
    """The JupyterLab command line for the workspace (``--allow-root`` when run as root)."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={workspace}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    if port is not None:
        cmd += [f"--port={port}", "--ServerApp.port_retries=0"]
    if not browser:
        cmd.append("--no-browser")
    return cmd


def _start(args) -> int:
    workspace = Path(args.dir).expanduser() if args.dir else default_workspace()
    source = _source(args.source)
    print(f"dlcourse: your workspace is {workspace.resolve()} (the course notebooks: {source})")
    _report(sync_notebooks(source, workspace), workspace.resolve())
    if args.no_lab:
        return 0
    from importlib.util import find_spec
    if find_spec("jupyterlab") is None:
        raise WorkspaceError("JupyterLab is not installed: python -m pip install -e \".[course]\" "
                             "(or open the workspace in any Jupyter you have).")
    cmd = jupyter_command(workspace, args.port, browser=not args.no_browser)
    print("dlcourse: starting JupyterLab (Ctrl-C to stop): " + " ".join(cmd[2:]), flush=True)
    return subprocess.call(cmd, cwd=workspace)


def _student_notebooks(args) -> int:
    source, outdir = _source(args.source), Path(args.outdir)
    done = sync_notebooks(source, outdir)
    _report(done, outdir)
    print(f"wrote {sum(what not in ('unchanged', 'kept') for what, _ in done)} student "
          f"notebooks from {source} to {outdir}")
    return 0


def _reset(args) -> int:
    workspace = Path(args.dir).expanduser() if args.dir else default_workspace()
    path = reset_exercise(workspace, args.lesson, args.exercise, args.source)
    print(f"reset {args.exercise} in {path} to its starting state (the rest is as you left it); "
          f"reload the notebook in JupyterLab (File > Reload Notebook from Disk).")
    return 0


def _solution(args) -> int:
    try:
        path, _, _ = find_exercise(args.exercise, _source(args.source))
    except KeyError as err:
        raise WorkspaceError(err.args[0]) from None
    print(f"# Reference solution of {args.exercise} ({path.name}).\n"
          f"# Try dl.check.hint({args.exercise!r}) first: writing it is the exercise.\n")
    print(solution_text(args.exercise, _source(args.source)))
    return 0


def add_commands(commands) -> None:
    """Add ``start``, ``student-notebooks``, ``reset`` and ``solution`` to the ``dlcourse``
    command's subparsers; each sets ``run`` to its function."""
    where = f"the workspace folder (default: ${ENV}, else ~/dlcourse-workspace)"
    exercise = "the exercise, as its check is called (conv2d_backward)"
    table = [  # (name, run, help, description)
        ("start", _start, "open the course on your own copy of the notebooks (JupyterLab)",
         "Write the student notebooks into your workspace (never overwriting one you changed) "
         "and open JupyterLab there."),
        ("student-notebooks", _student_notebooks,
         "write the student notebooks (exercises blanked) to OUTDIR",
         "Write the student versions of the course notebooks into OUTDIR (a notebook changed "
         "there is kept; the new version goes beside it)."),
        ("reset", _reset, "put one exercise of your workspace back to its starting state",
         "Replace one exercise cell of a workspace notebook with its starting state."),
        ("solution", _solution, "print the reference solution of one exercise (on purpose only)",
         "Print the reference solution of one exercise from the instructor notebooks."),
    ]
    parsers = {}
    for name, run, help_, description in table:
        parsers[name] = commands.add_parser(name, help=help_, description=description)
        parsers[name].set_defaults(run=run)
    start = parsers["start"]
    start.add_argument("--dir", metavar="DIR", help=where)
    start.add_argument("--port", type=int, help="JupyterLab's port (default: its own, 8888)")
    start.add_argument("--no-browser", action="store_true", help="do not open a browser")
    start.add_argument("--no-lab", action="store_true",
                       help="only update the workspace; do not start JupyterLab")
    parsers["student-notebooks"].add_argument("outdir", metavar="OUTDIR",
                                              help="folder to write into")
    parsers["reset"].add_argument("lesson",
                                  help="the lesson: its number (06) or name (06_convolution)")
    parsers["reset"].add_argument("exercise", help=exercise)
    parsers["reset"].add_argument("--dir", metavar="DIR", help=where)
    parsers["solution"].add_argument("exercise", help=exercise)
    for parser in parsers.values():
        parser.add_argument("--source", metavar="DIR",
                            help="folder of the instructor notebooks (default: the repository's "
                                 "notebooks/, or the copy installed with dlcourse)")
