"""The learner's commands: ``dlcourse doctor`` (can this set-up run the course?), ``start``,
``student-notebooks``, ``reset`` and ``solution`` (the learner's own copy of the notebooks,
``workspace.py``), and ``progress`` (the learner's own record, ``check/learner_record.py``)."""
from __future__ import annotations

from ..doctor import doctor
from ..workspace import add_commands as add_workspace_commands


def add_doctor_command(commands) -> None:
    doctor_command = commands.add_parser(
        "doctor", help="check that this set-up can run the course",
        description="Check Python, NumPy, the GPU (CuPy, driver, CUDA), JupyterLab and the "
                    "other packages the course uses, and say how to fix each problem found.")
    doctor_command.set_defaults(run=lambda args: doctor())


def add_commands(commands) -> None:
    """start, student-notebooks, reset, solution (workspace.py); progress."""
    add_workspace_commands(commands)   # start, student-notebooks, reset, solution
    progress = commands.add_parser(
        "progress", help="your own record: exercises passed and tried, hints and solutions seen",
        description="Show, lesson by lesson, which exercises pass, which you tried, and which "
                    "hints and solutions you saw: your record in the workspace (never uploaded).")
    progress.add_argument("--dir", metavar="DIR",
                          help="the workspace folder (default: the one you are in, "
                               "$DLCOURSE_WORKSPACE, else ~/dlcourse-workspace)")
    progress.set_defaults(run=_progress)


def _progress(args) -> int:
    from ..check.learner_record import report
    from ..student import lesson_exercises
    from ..workspace import record_folder
    print(report(lesson_exercises(), record_folder(args.dir)))
    return 0
