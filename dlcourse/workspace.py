"""The learner's workspace: ``dlcourse start``, ``reset``, ``solution`` and ``student-notebooks``.

``dlcourse start`` writes the student versions of the course notebooks (solutions out, see
``student.py``) into the learner's own folder, ``~/dlcourse-workspace`` unless ``--dir`` or
``$DLCOURSE_WORKSPACE`` says otherwise, and opens JupyterLab there. Run again, it adds new
lessons and updates the ones the learner has not touched; a notebook the learner changed is
kept, and a newer version of it is written beside it (``NN_name.updated.ipynb``). It says what
it did and where the workspace is. As root (Docker, many cloud machines) it passes
``--allow-root`` to JupyterLab. The lab opens without nbgrader's extensions (the test extra
installs them for instructors, who open them on purpose: ``dlcourse start --nbgrader``), and
stopping ``dlcourse start`` (Ctrl-C, SIGTERM, SIGHUP) stops the lab too.

``dlcourse reset 06b conv2d_backward`` (or ``reset 6b ...``) puts one exercise back to its
starting state;
``dlcourse solution conv2d_backward`` prints the reference solution once the learner has run
the exercise's check on an answer of their own and read its last hint (their record in the
workspace, ``check/learner_record.py``; an instructor can turn solutions off), and says what is
still to do otherwise; ``dlcourse progress`` shows that record, lesson by lesson.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from ._suggest import did_you_mean
from .lab_lock import LOCK_NAME, LabAlreadyOpen, LabLock, lab_address, running_lab
from .notebook_file import read_notebook, write_notebook
from .student import (RENAMED, exercises, find_exercise, lesson_exercises,
                      make_student_notebook, notebooks_dir, solution_text, sync_notebooks)

__all__ = ["WorkspaceError", "default_workspace", "record_folder", "reset_exercise",
           "jupyter_command", "lab_environment", "run_lab", "add_commands"]

ENV = "DLCOURSE_WORKSPACE"


class WorkspaceError(Exception):
    """A workspace command cannot do what was asked (the message says why and what to do)."""


def default_workspace() -> Path:
    """``$DLCOURSE_WORKSPACE``, else ``~/dlcourse-workspace``."""
    return Path(os.environ.get(ENV) or Path.home() / "dlcourse-workspace").expanduser()


def record_folder(folder=None) -> Path | None:
    """Where the learner's record (checks run, hints and solutions seen) is read: ``folder``
    (``--dir``), else the workspace the current folder is in (or ``$DLCOURSE_WORKSPACE``), else
    the default workspace if it exists; None when there is none."""
    from .check.learner_record import workspace
    if folder:
        return Path(folder).expanduser()
    found = workspace()
    if found is not None:
        return found
    default = default_workspace()
    return default if default.is_dir() else None


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
def _lesson_key(lesson: str) -> str:
    """``"1"`` -> ``"01"``, ``"4a"`` -> ``"04a"``; a name (``06a_convolution_and_im2col``) stays
    as it is."""
    key = lesson.removesuffix(".ipynb")
    number = re.fullmatch(r"(\d+)([a-z]?)", key)
    return f"{int(number[1]):02d}{number[2]}" if number else key


def _lesson_notebook(folder: Path, lesson: str) -> Path:
    key = _lesson_key(lesson)
    lessons = [p for p in sorted(folder.glob("[0-9]*.ipynb"))
               if ".updated" not in p.name]          # NN_x.updated.ipynb: a copy, not a lesson
    matches = [p for p in lessons if p.stem == key or p.stem.split("_")[0] == key]
    if len(matches) > 1:        # a retired lesson the learner kept beside the current one
        matches = [p for p in matches if p.stem not in RENAMED] or matches
    if len(matches) != 1:
        found = ", ".join(p.stem.split("_")[0] for p in lessons) or "none"
        names = [p.stem for p in lessons] + [p.stem.split("_")[0] for p in lessons]
        raise WorkspaceError(f"no lesson {lesson!r} in {folder}.{did_you_mean(key, names)} "
                             f"Give its number (06a) or its name (06a_convolution_and_im2col); the "
                             f"lessons: {found}.")
    return matches[0]


def _refuse_moved_lesson(lesson: str, name: str, source: Path) -> None:
    """A WorkspaceError when ``lesson`` names a lesson the course split or renamed
    (:data:`RENAMED`) and no current lesson: it says which lessons took its content, and which
    of them holds exercise ``name``."""
    key = _lesson_key(lesson)
    current = [p.stem for p in source.glob("[0-9]*.ipynb")]
    if any(stem == key or stem.split("_")[0] == key for stem in current):
        return
    old = next((stem for stem in RENAMED if stem == key or stem.split("_")[0] == key), None)
    if old is None:
        return
    holds = [stem for stem, names in lesson_exercises(source)
             if stem in RENAMED[old] and name in names]
    split = "split" if len(RENAMED[old]) > 1 else "renamed"
    where = (f"{name} is in {holds[0]}: dlcourse reset {holds[0].split('_')[0]} {name}"
             if holds else f"reset the exercise in the lesson that holds it now: dlcourse reset "
                           f"{RENAMED[old][0].split('_')[0]} EXERCISE")
    raise WorkspaceError(f"lesson {lesson!r} ({old}) was {split}{_now_in(old)}; {where}.")


def reset_exercise(workspace, lesson: str, name: str, source=None) -> Path:
    """Put exercise ``name`` of ``lesson`` (``"06a"`` or ``"06a_convolution_and_im2col"``) in the
    workspace back to its starting state (its student version); the rest of the notebook stays
    as the learner left it. Returns the notebook's path. Read and written as JSON (no nbformat: its
    import alone takes seconds), the learner's other cells exactly as they were."""
    workspace, source = Path(workspace), _source(source)
    _refuse_moved_lesson(lesson, name, source)
    target = _lesson_notebook(workspace, lesson)
    course = read_notebook(source / target.name)
    fresh = make_student_notebook(course, target.name)
    by_name = {ex.name: ex for ex in exercises(course)}
    if name not in by_name:
        raise WorkspaceError(f"{target.stem} has no exercise {name!r}."
                             + (did_you_mean(name, by_name)
                                or f" Its exercises: {', '.join(by_name) or 'none'}."))
    start = fresh.cells[by_name[name].cell]
    nb = read_notebook(target)
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
    write_notebook(nb, target)
    return target


# --------------------------------------------------------------------------------------
# dlcourse start
# --------------------------------------------------------------------------------------
# nbgrader (the test extra, for instructors) enables these in every JupyterLab of the
# environment: its server side (which warns when the folder has no nbgrader_config.py) ...
NBGRADER_SERVER = ("nbgrader.server_extensions.formgrader",
                   "nbgrader.server_extensions.validate_assignment",
                   "nbgrader.server_extensions.assignment_list",
                   "nbgrader.server_extensions.course_list")
# ... and its menus and panels. A learner's lab turns both off; instructors ask for them.
NBGRADER_LAB = "@jupyter/nbgrader"


def jupyter_command(workspace, port: int | None = None, browser: bool = True,
                    nbgrader: bool = False) -> list[str]:
    """The JupyterLab command line for the workspace (``--allow-root`` when run as root),
    with nbgrader's server extensions off unless ``nbgrader`` (its menus: lab_environment)."""
    cmd = [sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={workspace}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    if port is not None:
        cmd += [f"--port={port}", "--ServerApp.port_retries=0"]
    if not browser:
        cmd.append("--no-browser")
    if not nbgrader:   # a command-line setting wins over every jupyter_server_config.d file
        cmd += [f"--ServerApp.jpserver_extensions={name}=False" for name in NBGRADER_SERVER]
    return cmd


def lab_environment(config_dir, environ=None, nbgrader: bool = False) -> dict[str, str]:
    """The environment for the lab: ``environ`` (default ``os.environ``) with ``config_dir``
    first on ``JUPYTER_CONFIG_PATH``, after writing there the page config that disables
    nbgrader's lab extension (JupyterLab has no command-line option for that)."""
    env = dict(os.environ if environ is None else environ)
    if nbgrader:
        return env
    labconfig = Path(config_dir) / "labconfig"
    labconfig.mkdir(parents=True, exist_ok=True)
    (labconfig / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {NBGRADER_LAB: True}}, indent=1) + "\n")
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(
        p for p in (str(config_dir), env.get("JUPYTER_CONFIG_PATH")) if p)
    return env


FORWARDED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def run_lab(cmd, cwd=None, env=None, stop_timeout: float = 30, on_start=None) -> int:
    """Run ``cmd`` (JupyterLab) and wait for it; return its exit status.

    SIGTERM and SIGHUP sent to this process are passed on to the lab, which shuts down its
    kernels and exits, and are waited for: stopping ``dlcourse start`` never leaves the lab
    serving the port. Ctrl-C (KeyboardInterrupt) stops the lab the same way (SIGTERM, then
    SIGKILL after ``stop_timeout`` seconds) before it is raised again. ``on_start(pid)`` is
    told the lab's process id once it runs.
    """
    child = subprocess.Popen(cmd, cwd=cwd, env=env)
    if on_start is not None:
        on_start(child.pid)

    def forward(signum, frame):
        child.send_signal(signum)

    previous = {}
    try:
        for signum in FORWARDED:
            previous[signum] = signal.signal(signum, forward)
    except ValueError:      # not the main thread: signals cannot be caught here
        pass
    try:
        return child.wait()
    except KeyboardInterrupt:
        child.terminate()
        try:
            child.wait(timeout=stop_timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start(args) -> int:
    workspace = Path(args.dir).expanduser() if args.dir else default_workspace()
    source = _source(args.source)
    if not args.no_lab and (running := running_lab(workspace)) is not None:
        return _already_open(workspace, running, browser=not args.no_browser)
    print(f"dlcourse: your workspace is {workspace.resolve()} (the course notebooks: {source})")
    _report(_sync(source, workspace), workspace.resolve())
    if args.no_lab:
        return 0
    from importlib.util import find_spec
    if find_spec("jupyterlab") is None:
        raise WorkspaceError("JupyterLab is not installed: python -m pip install -e \".[course]\" "
                             "(or open the workspace in any Jupyter you have).")
    cmd = jupyter_command(workspace, args.port, browser=not args.no_browser,
                          nbgrader=args.nbgrader)
    shown = [part for part in cmd[2:] if "jpserver_extensions" not in part]
    print("dlcourse: starting JupyterLab (Ctrl-C to stop): " + " ".join(shown)
          + ("" if args.nbgrader else " (nbgrader's extensions off)"), flush=True)
    try:
        lock = LabLock(workspace, args.port).acquire()
    except LabAlreadyOpen as err:       # another start got there since the check above
        return _already_open(workspace, err.record, browser=not args.no_browser)
    try:
        with tempfile.TemporaryDirectory(prefix="dlcourse-lab-") as config_dir:
            env = lab_environment(config_dir, nbgrader=args.nbgrader)
            env[ENV] = str(workspace.resolve())   # the kernels keep the learner's record here
            return run_lab(cmd, cwd=workspace, on_start=lock.lab_started, env=env)
    finally:
        lock.release()


def _already_open(workspace: Path, record: dict, browser: bool) -> int:
    """Say that a live ``dlcourse start`` has the workspace open, where, and offer to open
    that lab in a browser; change nothing (a second lab would save over the first's)."""
    address = lab_address(record)
    host = record.get("host")
    where = f" on {host}" if host not in (None, socket.gethostname()) else ""
    print(f"dlcourse: the course is already open on {workspace.resolve()}: JupyterLab at "
          f"{address} (started by `dlcourse start`, process {record.get('pid')}{where}). A "
          f"second lab on the same notebooks would save over the first's, so none was started "
          f"and nothing in the workspace was changed. To restart it, stop that one first "
          f"(Ctrl-C in its terminal); if it is not running, delete {workspace / LOCK_NAME}.")
    if browser and sys.stdin.isatty():
        answer = input("Open it in your browser? [Y/n] ").strip().lower()
        if answer in ("", "y", "yes"):
            import webbrowser
            webbrowser.open(address)
    else:
        print(f"dlcourse: open {address} in your browser to go on where you were.")
    return 0


def _sync(source: Path, outdir: Path):
    """:func:`sync_notebooks`; its errors (each names the file or folder) as WorkspaceError, so
    the command prints the message alone."""
    try:
        return sync_notebooks(source, outdir)
    except (ValueError, OSError) as err:
        raise WorkspaceError(str(err)) from err


def _student_notebooks(args) -> int:
    source, outdir = _source(args.source), Path(args.outdir)
    done = _sync(source, outdir)
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
    from .check import hints, learner_record
    try:
        path, _, _ = find_exercise(args.exercise, _source(args.source))
    except KeyError as err:
        raise WorkspaceError(err.args[0]) from None
    folder = record_folder(args.dir)
    levels = 1 + len(hints.HINTS.get(args.exercise, []))
    withheld = learner_record.solution_withheld(args.exercise, levels, folder)
    if withheld:
        where = (f"your record: {learner_record.record_path(folder)}" if folder else
                 "no workspace found: pass --dir, the folder dlcourse start uses")
        print(f"{withheld}\n({where})")     # not an error: what to do first, exit status 0
        return 0
    print(f"# Reference solution of {args.exercise} ({path.name}).\n")
    print(solution_text(args.exercise, _source(args.source)))
    learner_record.record(args.exercise, "solution", folder=folder)
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
        ("solution", _solution, "print the reference solution of one exercise (after trying it)",
         "Print the reference solution of one exercise from the instructor notebooks, once "
         "your record shows a check run on your own answer and its last hint read."),
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
    start.add_argument("--nbgrader", action="store_true",
                       help="keep nbgrader's menus and server extensions (for instructors)")
    parsers["student-notebooks"].add_argument("outdir", metavar="OUTDIR",
                                              help="folder to write into")
    parsers["reset"].add_argument("lesson",
                                  help="the lesson: its number (06a) or name "
                                       "(06a_convolution_and_im2col)")
    parsers["reset"].add_argument("exercise", help=exercise)
    parsers["reset"].add_argument("--dir", metavar="DIR", help=where)
    parsers["solution"].add_argument("exercise", help=exercise)
    parsers["solution"].add_argument("--dir", metavar="DIR", help=where)
    for parser in parsers.values():
        parser.add_argument("--source", metavar="DIR",
                            help="folder of the instructor notebooks (default: the repository's "
                                 "notebooks/, or the copy installed with dlcourse)")
