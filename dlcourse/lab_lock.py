"""The lock that says a workspace is open: one JupyterLab per workspace (``dlcourse start``).

Two labs on one workspace would be two servers saving the same learner's notebooks, each
overwriting the other's saves. So ``dlcourse start`` holds a lock file in the workspace,
``.dlcourse-lab.lock``: JSON naming the process that holds it (its pid, its start time where the
system tells it, the host) and the lab it started. A second ``dlcourse start`` finds it, checks
that the process is alive, and points to the open lab instead of starting another
(:func:`running_lab`, :func:`lab_address`).

A lock is never held forever by a dead process: one whose pid is gone (or reused by a process
that started later) is taken over. The holder removes it when its lab stops.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

from ._io import atomic_write

__all__ = ["LOCK_NAME", "LabLock", "LabAlreadyOpen", "running_lab", "lab_address", "alive"]

LOCK_NAME = ".dlcourse-lab.lock"


class LabAlreadyOpen(Exception):
    """Another live ``dlcourse start`` holds the workspace's lock; ``record`` is its lock."""

    def __init__(self, record: dict):
        super().__init__(f"the course is already open (process {record.get('pid')})")
        self.record = record


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started, in the kernel's clock ticks (Linux: /proc), else None:
    tells a live holder from a later process that got its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]          # field 22, after "pid (comm)"


def _pid_alive(pid: int) -> bool:
    if sys.platform == "win32":          # os.kill(pid, 0) would send CTRL_C_EVENT there
        import ctypes
        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x1000, False, pid)    # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return False
        code = ctypes.c_ulong()
        kernel32.GetExitCodeProcess(handle, ctypes.byref(code))
        kernel32.CloseHandle(handle)
        return code.value == 259                             # STILL_ACTIVE
    try:
        os.kill(pid, 0)                  # signal 0: is it there? (sends nothing)
    except ProcessLookupError:
        return False
    except PermissionError:              # there, another user's
        return True
    except OSError:
        return False
    return True


def alive(record: dict) -> bool:
    """Whether the process that wrote lock ``record`` still runs. A lock from another host
    cannot be checked from here and counts as held."""
    if record.get("host") not in (None, socket.gethostname()):
        return True
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0 or not _pid_alive(pid):
        return False
    started = record.get("started")
    return started is None or _start_time(pid) in (None, started)


def _read(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def running_lab(workspace) -> dict | None:
    """The lock record of the live ``dlcourse start`` that has ``workspace`` open, or None."""
    record = _read(Path(workspace) / LOCK_NAME)
    return record if record is not None and alive(record) else None


def lab_address(record: dict) -> str:
    """The address of the lab a lock names, with its token: read from the server file
    JupyterLab writes (``jpserver-PID.json`` in Jupyter's runtime folder); without it, the
    address its port gives."""
    folders = [os.environ.get("JUPYTER_RUNTIME_DIR")]
    try:
        from jupyter_core.paths import jupyter_runtime_dir
        folders.append(jupyter_runtime_dir())
    except ImportError:
        pass
    lab = record.get("lab_pid")
    for folder in filter(None, folders):
        info = _read(Path(folder) / f"jpserver-{lab}.json") if lab else None
        if info and isinstance(info.get("url"), str):
            token = info.get("token")
            return f"{info['url'].rstrip('/')}/lab" + (f"?token={token}" if token else "")
    return f"http://localhost:{record.get('port') or 8888}/lab"


class LabLock:
    """The workspace's lock, held from :meth:`acquire` until :meth:`release` (a context
    manager): ``with LabLock(workspace, port) as lock: ... lock.lab_started(pid)``."""

    def __init__(self, workspace, port: int | None = None):
        self.path = Path(workspace) / LOCK_NAME
        self.record = {"pid": os.getpid(), "started": _start_time(os.getpid()),
                       "host": socket.gethostname(), "port": port, "lab_pid": None}

    def acquire(self) -> "LabLock":
        """Take the lock, or raise :class:`LabAlreadyOpen` when a live process holds it. A dead
        holder's lock is taken over."""
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                held = _read(self.path)
                if held is not None and alive(held):
                    raise LabAlreadyOpen(held) from None
                if _read(self.path) == held:         # still the dead one's: take it over
                    self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.record, f)
            return self
        raise LabAlreadyOpen(_read(self.path) or {})

    def lab_started(self, lab_pid: int) -> None:
        """Record the lab's pid, so a second start can find its address."""
        self.record["lab_pid"] = lab_pid
        with atomic_write(self.path, "w", encoding="utf-8") as f:
            json.dump(self.record, f)

    def release(self) -> None:
        """Remove the lock if it is still this process's."""
        held = _read(self.path)
        if held is not None and held.get("pid") == self.record["pid"] and \
                held.get("host") == self.record["host"]:
            self.path.unlink(missing_ok=True)

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()
