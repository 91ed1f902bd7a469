"""Multi-rank jobs for lesson ``13_data_parallel``, its tests and ``benchmarks/data_parallel.py``.

A notebook is one process; an MPI job is several. So the lesson runs these jobs as
``mpiexec -n 2 python -m dlcourse.distributed_jobs JOB ...`` in a subprocess (:func:`run`),
and rank 0 writes what it measured as JSON (or an ``.npz`` of parameters) to ``--out``::

    timing   MPI's Allreduce against a ring all-reduce (the library's, or your own from a
             file), over several buffer sizes: checked equal, then timed (median of repeats).
    train    a few steps of dl.fit on synthetic data with comm=init(): rank 0 saves the final
             parameters (.npz), to compare with one process on the global batch.
    throughput  samples per second of dl.fit's steps on the MLP 784-512-512-10.
    fail     rank 1 raises at its third step: the job must end with an error naming rank 1.

Lesson ``13b_overlap_sharding_and_recomputation`` adds:

    sharding    the ring's reduce-scatter and all-gather against MPI's (ragged chunks); fit
                with overlap=True (one bucket per layer, and small buckets) and with zero=1
                against the blocking fit, float64: rank 0 reports the largest differences.
    overlap     step times of the MLP 784-512-512-10 with no overlap, one bucket per layer
                and buckets of --bucket-mb, alternating, and the buckets' timelines; ZeRO-1's
                optimizer bytes per rank against Adam's.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time

import numpy as np

from . import distributed
from .backend import manual_seed


def _ring_from(path: str | None):
    """The ring all-reduce to time: ``ring_all_reduce`` from a file, else the library's."""
    if path is None:
        return distributed.ring_all_reduce
    spec = importlib.util.spec_from_file_location("learner_ring", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ring_all_reduce


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def timing(comm, sizes, repeats, ring_path=None) -> dict:
    """Seconds per all-reduce of float32 buffers of each size, MPI's and the ring's, timed in
    turns (so a busy spell on a shared machine hits both): the best and the median of
    ``repeats``, each the slowest rank's (a collective is as slow as its slowest rank)."""
    ring = _ring_from(ring_path)
    rows = []
    for n in sizes:
        x = np.random.default_rng(comm.rank).standard_normal(int(n)).astype(np.float32)
        expected = comm.all_reduce(x)
        ok = bool(np.allclose(ring(comm, x), expected, rtol=1e-5, atol=1e-5))
        for _ in range(2):                              # warm up both
            comm.all_reduce(x), ring(comm, x)
        t_mpi, t_ring = [], []
        for _ in range(repeats):
            comm.barrier()
            t_mpi.append(_time(lambda: comm.all_reduce(x)))
            comm.barrier()
            t_ring.append(_time(lambda: ring(comm, x)))
        stats = _slowest(comm, [min(t_mpi), min(t_ring), np.median(t_mpi), np.median(t_ring)])
        rows.append({"bytes": int(x.nbytes), "mpi_s": stats[0], "ring_s": stats[1],
                     "mpi_median_s": stats[2], "ring_median_s": stats[3], "equal": ok})
    return {"world_size": comm.world_size, "rows": rows}


def _slowest(comm, values):
    """Each value's maximum over ranks (a collective is as slow as its slowest rank)."""
    mine = np.asarray(values, dtype=np.float64)
    both = [comm.broadcast(mine, root=r) for r in range(comm.world_size)]
    return [float(v) for v in np.max(both, axis=0)]


def _mlp(sizes, dtype, seed):
    from .models import MLP
    return MLP(sizes, seed=seed).astype(dtype)


def _optimizer(name, model):
    from .optim import SGD, Adam
    return SGD(model, lr=0.1, momentum=0.9) if name == "sgd" else Adam(model, lr=1e-2)


def synthetic(N=96, D=12, K=3, seed=0, dtype=np.float64):
    """A small classification set, the same on every rank."""
    gen = np.random.default_rng(seed)
    return gen.standard_normal((N, D)).astype(dtype), gen.integers(0, K, N)


def train(comm, optimizer, dtype, batch_size, epochs, out, seed_model=None) -> dict:
    """dl.fit with comm on :func:`synthetic`; rank 0 saves the parameters to ``out``."""
    from .losses import SoftmaxCrossEntropy
    from .train import fit
    dtype = np.dtype(dtype)
    X, y = synthetic(dtype=dtype)
    # every rank but 0 starts from other weights: the broadcast must fix that
    model = _mlp([X.shape[1], 16, 3], dtype, seed=comm.rank if seed_model is None else seed_model)
    history = fit(model, SoftmaxCrossEntropy(), _optimizer(optimizer, model), X, y,
                  epochs=epochs, batch_size=batch_size, seed=0, progress=False, comm=comm)
    if comm.is_main and out:
        np.savez(out, **{k: np.asarray(v) for k, v in model.params.items()})
    return {"train_loss": history.train_loss, "steps": len(history.step_loss)}


def throughput(comm, batch_size, steps, sizes=(784, 512, 512, 10)) -> dict:
    """Training samples per second (all ranks together) of the MLP, steps of dl.fit."""
    from .losses import SoftmaxCrossEntropy
    from .train import fit
    W = comm.world_size
    gen = np.random.default_rng(0)
    N = batch_size * W * steps
    X = gen.standard_normal((N, sizes[0])).astype(np.float32)
    y = gen.integers(0, sizes[-1], N)
    model = _mlp(list(sizes), np.float32, seed=0)
    opt = _optimizer("sgd", model)
    loss = SoftmaxCrossEntropy()
    warm = min(N, batch_size * W * 2)
    fit(model, loss, opt, X[:warm], y[:warm], epochs=1, batch_size=batch_size, seed=0,
        progress=False, comm=comm)                                   # warm-up
    comm.barrier()
    start = time.perf_counter()
    fit(model, loss, opt, X, y, epochs=1, batch_size=batch_size, seed=0, progress=False,
        comm=comm)
    comm.barrier()
    seconds = time.perf_counter() - start
    grad_bytes = int(sum(p.nbytes for p in model.params.values()))
    return {"world_size": W, "samples_per_s": N / seconds, "seconds": seconds, "samples": N,
            "step_s": seconds / steps, "grad_bytes": grad_bytes}


def fail(comm) -> dict:
    """Rank 1 raises in its third step, inside dl.fit; the others are in a collective."""
    def on_step(step, loss):
        if comm.rank == 1 and step == 3:
            raise RuntimeError("a deliberate failure on rank 1 (test)")
    train_x, train_y = synthetic()
    from .losses import SoftmaxCrossEntropy
    from .train import fit
    model = _mlp([train_x.shape[1], 16, 3], np.float64, seed=0)
    fit(model, SoftmaxCrossEntropy(), _optimizer("sgd", model), train_x, train_y, epochs=50,
        batch_size=8, seed=0, progress=False, comm=comm, on_step=on_step)
    return {}


def _fit_params(comm, X, y, sizes, opt, dtype=np.float64, epochs=1, batch_size=8, **kwargs):
    """dl.fit from the same start on every rank; the final parameters (and the history)."""
    from .losses import SoftmaxCrossEntropy
    from .train import fit
    model = _mlp(sizes, dtype, seed=0)
    optimizer = _optimizer(opt, model)
    history = fit(model, SoftmaxCrossEntropy(), optimizer, X, y, epochs=epochs,
                  batch_size=batch_size, seed=0, progress=False, comm=comm, **kwargs)
    return {k: np.asarray(v).copy() for k, v in model.params.items()}, history, optimizer


def _largest_difference(a, b) -> float:
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)


def sharding(comm) -> dict:
    """The hand-written ring collectives against MPI's, and fit's overlapped and ZeRO-1 steps
    against the blocking one (float64, a 4-layer MLP whose 919 parameters do not divide by
    2 ranks: ragged shards). Differences are the largest over parameters, on rank 0."""
    from . import collectives
    out = {}
    for P in (1, 7, 1001):             # ragged on 2 ranks; P = 1 leaves rank 1 an empty chunk
        x = np.random.default_rng([comm.rank, P]).standard_normal(P)
        mine = comm.reduce_scatter(x)
        out[f"reduce_scatter_{P}"] = bool(np.array_equal(collectives.ring_reduce_scatter(comm, x),
                                                          mine))
        out[f"all_gather_{P}"] = bool(np.array_equal(collectives.ring_all_gather(comm, mine, P),
                                                      comm.all_gather(mine, P)))
        out[f"all_reduce_{P}"] = bool(np.array_equal(comm.all_gather(mine, P), comm.all_reduce(x)))
    X, y = synthetic(N=80, D=12, K=3)
    sizes = [12, 20, 16, 16, 3]
    blocking, _, adam = _fit_params(comm, X, y, sizes, "adam", epochs=1)   # 5 steps of 16
    per_layer, h, _ = _fit_params(comm, X, y, sizes, "adam", overlap=True, bucket_mb=0)
    bucketed, _, _ = _fit_params(comm, X, y, sizes, "adam", overlap=True, bucket_mb=0.002)
    sgd_block, _, _ = _fit_params(comm, X, y, sizes, "sgd")
    sgd_overlap, _, _ = _fit_params(comm, X, y, sizes, "sgd", overlap=True, bucket_mb=0.001)
    zero, _, sharded = _fit_params(comm, X, y, sizes, "adam", zero=1)
    out.update(steps=len(h.step_loss), buckets_per_layer=len(h.bucket_timeline[0]["buckets"]),
               overlap_per_layer=_largest_difference(blocking, per_layer),
               overlap_bucketed=_largest_difference(blocking, bucketed),
               overlap_sgd=_largest_difference(sgd_block, sgd_overlap),
               zero=_largest_difference(blocking, zero),
               optimizer_bytes={"adam": int(sum(v.nbytes for v in adam.state.values())),
                                "zero1": int(sum(v.nbytes for v in sharded.state.values()))},
               timeline=h.bucket_timeline[-1])
    return out


def overlap(comm, batch_size, steps, bucket_mb, rounds, sizes=(784, 512, 512, 10)) -> dict:
    """Seconds per step of dl.fit (the slowest rank's) with no overlap, one bucket per layer
    and buckets of ``bucket_mb``, in turns for ``rounds`` rounds (the best of each kept), the
    last timelines, and ZeRO-1's optimizer bytes per rank against Adam's."""
    from .losses import SoftmaxCrossEntropy
    from .train import fit
    W = comm.world_size
    gen = np.random.default_rng(0)
    N = batch_size * W * steps
    X = gen.standard_normal((N, sizes[0])).astype(np.float32)
    y = gen.integers(0, sizes[-1], N)
    modes = {"no_overlap": {}, "per_layer": {"overlap": True, "bucket_mb": 0},
             "bucketed": {"overlap": True, "bucket_mb": bucket_mb}}
    best, timelines = {m: np.inf for m in modes}, {}
    for _ in range(rounds):
        for mode, kwargs in modes.items():
            model = _mlp(list(sizes), np.float32, seed=0)
            opt = _optimizer("sgd", model)
            fit(model, SoftmaxCrossEntropy(), opt, X[:batch_size * W * 2], y[:batch_size * W * 2],
                epochs=1, batch_size=batch_size, seed=0, progress=False, comm=comm, **kwargs)
            comm.barrier()
            start = time.perf_counter()
            h = fit(model, SoftmaxCrossEntropy(), opt, X, y, epochs=1, batch_size=batch_size,
                    seed=0, progress=False, comm=comm, **kwargs)
            seconds = _slowest(comm, [time.perf_counter() - start])[0] / steps
            best[mode] = min(best[mode], seconds)
            timelines[mode] = h.bucket_timeline[-3:]
    X_small = X[:batch_size * W]
    memory = {}
    for zero in (0, 1):
        model = _mlp(list(sizes), np.float32, seed=0)
        opt = _optimizer("adam", model)
        fit(model, SoftmaxCrossEntropy(), opt, X_small, y[:len(X_small)], epochs=1,
            batch_size=batch_size, seed=0, progress=False, comm=comm, zero=zero)
        memory[zero] = int(sum(v.nbytes for v in opt.state.values()))
    return {"world_size": W, "step_s": best, "timelines": timelines,
            "grad_bytes": int(sum(p.nbytes for p in model.params.values())),
            "optimizer_bytes": {"adam": memory[0], "zero1": memory[1]}}


# ======================================================================================
# Running a job from a notebook or a test
# ======================================================================================
def run(job: str, *args, ranks: int = 2, timeout: float = 120, threads: int = 1) -> dict:
    """Run ``job`` on ``ranks`` MPI ranks (each with ``threads`` BLAS threads); return what
    rank 0 wrote, as a dict. A job that fails or hangs raises RuntimeError with its output."""
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "result.json")
        cmd = distributed.mpiexec_command(
            ranks, [sys.executable, "-m", "dlcourse.distributed_jobs", job, "--json", out,
                    *map(str, args)])
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=distributed.launch_env(threads))
        except subprocess.TimeoutExpired as err:
            raise RuntimeError(f"the MPI job {job!r} did not finish in {timeout:g} s.") from err
        if proc.returncode != 0:
            raise RuntimeError(f"the MPI job {job!r} failed (exit {proc.returncode}):\n"
                               f"{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dlcourse.distributed_jobs")
    parser.add_argument("job", choices=("timing", "train", "throughput", "fail", "sharding",
                                        "overlap"))
    parser.add_argument("--json", help="rank 0 writes the result here")
    parser.add_argument("--sizes", default="1000,100000,700000",
                        help="timing: float32 elements per buffer, comma-separated")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--ring", help="timing: a .py file defining ring_all_reduce(comm, x)")
    parser.add_argument("--optimizer", default="sgd", choices=("sgd", "adam"))
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", help="train: where rank 0 saves the parameters (.npz)")
    parser.add_argument("--bucket-mb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    manual_seed(0)
    comm = distributed.init()
    if args.job == "timing":
        result = timing(comm, [int(s) for s in args.sizes.split(",")], args.repeats, args.ring)
    elif args.job == "train":
        result = train(comm, args.optimizer, args.dtype, args.batch_size, args.epochs, args.out)
    elif args.job == "throughput":
        result = throughput(comm, args.batch_size, args.steps)
    elif args.job == "sharding":
        result = sharding(comm)
    elif args.job == "overlap":
        result = overlap(comm, args.batch_size, args.steps, args.bucket_mb, args.rounds)
    else:
        result = fail(comm)
    if comm.is_main and args.json:
        with open(args.json, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
