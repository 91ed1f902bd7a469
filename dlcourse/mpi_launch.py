"""Starting MPI ranks: ``mpiexec`` found and configured in one place, and the rank a launcher gave.

Introduced with ``dlcourse/distributed.py`` in notebook ``13_data_parallel``; ``dlcourse train
--ranks N`` and ``dlcourse.distributed_jobs`` start their jobs through :func:`mpiexec_command`.
Nothing here imports MPI: the launcher's environment (``PMI_RANK``, ...) says which rank this
process is, and NCCL's communicator reads it from here.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

__all__ = ["RANK_VARS", "launcher_rank", "under_mpiexec", "mpiexec_path", "mpiexec_flags",
           "mpiexec_command", "launch_env", "relaunch", "MPIEXEC_ARGS"]

# Environment variables the launchers set: MPICH/Hydra (PMI_*), Open MPI, Slurm.
RANK_VARS = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
             ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS"))


def launcher_rank() -> tuple[int, int]:
    """(rank, world_size) from mpiexec's (or srun's) environment; (0, 1) outside one."""
    for rank, size in RANK_VARS:
        if rank in os.environ and size in os.environ:
            return int(os.environ[rank]), int(os.environ[size])
    return 0, 1


def under_mpiexec() -> bool:
    """Whether this process was started by mpiexec (or srun)."""
    return any(rank in os.environ for rank, _ in RANK_VARS)


# ======================================================================================
# Launching: mpiexec, found and configured in one place
# ======================================================================================
# Hydra (MPICH's mpiexec) needs no flags as root nor on 2 cores: no binding by default and
# oversubscription is allowed. "-launcher fork" starts the ranks as local processes, never ssh.
# (Given only to Hydra.) Open MPI's mpiexec, what a GPU server often has, refuses to start as
# root without "--allow-run-as-root" (seen on the lent H100 machine, 2026-11-26) and, on fewer
# cores than ranks, without "--oversubscribe": OPEN_MPI_ARGS, given only to Open MPI.
MPIEXEC_ARGS = ("-launcher", "fork")
OPEN_MPI_ARGS = ("--oversubscribe",)
OPEN_MPI_ROOT_ARGS = ("--allow-run-as-root",)


def mpiexec_path() -> str | None:
    """The ``mpiexec`` of this Python's environment (the mpich wheel's), else on PATH."""
    here = os.path.dirname(sys.executable)
    return shutil.which("mpiexec", path=here) or shutil.which("mpiexec")


def launch_env(threads: int = 1, env=None) -> dict:
    """The environment for ranks: ``threads`` BLAS threads each (two ranks with two threads
    each on two cores fight for them)."""
    env = dict(os.environ if env is None else env)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def mpiexec_command(ranks: int, argv) -> list[str]:
    """``[mpiexec, -n, ranks, *flags, *argv]``, or a RuntimeError saying how to install it."""
    path = mpiexec_path()
    if path is None:
        raise RuntimeError("mpiexec was not found. Install MPI with pip: pip install "
                           "'dlcourse[distributed]' (the mpich wheel brings mpiexec).")
    return [path, "-n", str(int(ranks)), *mpiexec_flags(path), *argv]


@functools.lru_cache(maxsize=None)
def mpiexec_flags(path: str) -> tuple[str, ...]:
    """The flags ``path`` (an mpiexec) needs to start local ranks: Hydra's, Open MPI's, or none."""
    if os.path.exists(os.path.join(os.path.dirname(path), "mpiexec.hydra")):
        return MPIEXEC_ARGS
    try:   # Open MPI's says "mpiexec (Open MPI) 5.0.3" or, before 5, "mpiexec (OpenRTE) 4.1.6"
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    if "Open MPI" in version or "OpenRTE" in version:
        root = hasattr(os, "geteuid") and os.geteuid() == 0
        return OPEN_MPI_ARGS + (OPEN_MPI_ROOT_ARGS if root else ())
    return ()


def relaunch(ranks: int, python_args, drop_option: str) -> int:
    """Run ``python *python_args`` on ``ranks`` MPI ranks (one BLAS thread each), without
    ``drop_option`` and its value (``--ranks N``); return mpiexec's exit status."""
    args, skip = [], False
    for a in python_args:
        if skip:
            skip = False
        elif a == drop_option:
            skip = True
        elif not a.startswith(drop_option + "="):
            args.append(a)
    return subprocess.call(mpiexec_command(ranks, [sys.executable, *args]), env=launch_env(1))
