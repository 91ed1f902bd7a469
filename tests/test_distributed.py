"""dl.distributed: communicators, the ring all-reduce, sharding, and data-parallel fit.

The multi-rank tests start real MPI jobs (``mpiexec -n 2``, from the mpich wheel, with
mpi4py) on loopback, each bounded by a subprocess timeout; they skip with the reason when
mpiexec or mpi4py is missing. The NCCL test needs two GPUs (NCCL refuses two ranks on one).
"""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from dlcourse import backend, distributed, distributed_jobs
from dlcourse.data import batches
from dlcourse.losses import SoftmaxCrossEntropy
from dlcourse.models import MLP
from dlcourse.optim import SGD, Adam
from dlcourse.train import fit

TIMEOUT = 120   # seconds for one MPI job (a hang fails the test instead of the CI run)


def _mpi_missing():
    if distributed.mpiexec_path() is None:
        return "mpiexec not found (pip install 'dlcourse[distributed]')"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed (pip install 'dlcourse[distributed]')"
    return None


needs_mpi = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))


# ======================================================================================
# Without MPI: sharding, the ring on simulated ranks, gradient averaging
# ======================================================================================
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_together_are_the_global_batches(world_size, shuffle):
    X, y = np.arange(50.0).reshape(25, 2), np.arange(25)
    B = 4
    ranks = [list(batches(X, y, B, shuffle=shuffle, seed=3, rank=r, world_size=world_size))
             for r in range(world_size)]
    glob = list(batches(X, y, B * world_size, shuffle=shuffle, seed=3))
    if len(glob[-1][1]) < world_size:          # fewer samples than ranks: left out
        glob = glob[:-1]
    assert all(len(r) == len(glob) for r in ranks)
    for step, (xg, yg) in enumerate(glob):
        joined = np.concatenate([ranks[r][step][1] for r in range(world_size)])
        np.testing.assert_array_equal(joined, yg)
        assert all(len(ranks[r][step][1]) in (len(yg) // world_size, -(-len(yg) // world_size))
                   for r in range(world_size))


def test_batches_sharding_errors():
    X, y = np.zeros((10, 2)), np.zeros(10)
    with pytest.raises(ValueError, match="needs a seed"):
        batches(X, y, 2, rank=0, world_size=2)
    with pytest.raises(ValueError, match="rank in 0..world_size-1"):
        batches(X, y, 2, seed=0, rank=2, world_size=2)


@pytest.mark.parametrize("N", [1, 2, 3, 4])
@pytest.mark.parametrize("shape", [(1,), (7,), (5, 3)])
def test_ring_all_reduce_on_simulated_ranks(N, shape):
    inputs = [np.random.default_rng(r).standard_normal(shape) for r in range(N)]
    out = distributed.simulate(distributed.ring_all_reduce, inputs)
    for got in out:
        np.testing.assert_allclose(got, sum(inputs), rtol=1e-12)
        assert got.shape == shape
    np.testing.assert_array_equal(inputs[0], np.random.default_rng(0).standard_normal(shape))


def test_simulate_names_the_failing_rank():
    def body(comm, x):
        if comm.rank == 1:
            raise ValueError("boom")
        return comm.all_reduce(x)
    with pytest.raises(RuntimeError, match="rank 1 of 3 failed: ValueError: boom"):
        distributed.simulate(body, [np.zeros(2)] * 3, timeout=5)


def test_average_gradients_weights_uneven_shards():
    grads = [np.array([1.0, 2.0]), np.array([4.0, 8.0])]
    counts = [3, 1]

    class Model:
        def __init__(self, g):
            self.grads = {"W": g.copy()}

    def body(comm, r):
        model = Model(grads[r])
        loss, n = distributed.average_gradients(model, comm, counts[r], loss=float(r + 1),
                                                bucket_bytes=8)   # one bucket per 8 bytes
        return model.grads["W"], loss, n
    for g, loss, n in distributed.simulate(body, [0, 1]):
        np.testing.assert_allclose(g, (3 * grads[0] + grads[1]) / 4)
        assert n == 4 and loss == pytest.approx((3 * 1 + 1 * 2) / 4)


def test_average_gradients_reuses_its_buffers():
    """fit's path: the flat buffers are made once and each step sums into them in place."""
    grads = [np.array([1.0, 2.0, 3.0]), np.array([5.0, 6.0, 7.0])]

    class Model:
        def __init__(self, g):
            self.grads = {"W": g.reshape(3, 1).copy(), "b": g[:2].copy()}

    def body(comm, r):
        model = Model(grads[r])
        buffers = distributed.gradient_buffers(model)
        assert [b.size for b in buffers] == [3 + 2 + 2]      # + loss and count
        seen = [id(b) for b in buffers]
        for step in range(2):                                  # a second step, same buffers
            model.grads = {"W": grads[r].reshape(3, 1) * (step + 1), "b": grads[r][:2].copy()}
            loss, n = distributed.average_gradients(model, comm, 2, loss=1.0, buffers=buffers)
        assert [id(b) for b in buffers] == seen
        return model.grads, n
    for g, n in distributed.simulate(body, [0, 1]):
        np.testing.assert_array_equal(g["W"].ravel(), (grads[0] + grads[1]) * 2 / 2)
        np.testing.assert_array_equal(g["b"], (grads[0][:2] + grads[1][:2]) / 2)
        assert n == 4


def test_average_gradients_refuses_buffers_made_for_other_gradients():
    class Model:
        grads = {"W": np.ones(3)}

    def body(comm, r):
        with pytest.raises(ValueError, match=r"sizes \[6\].*need \[5\].*gradient_buffers"):
            distributed.average_gradients(Model(), comm, 1, buffers=[np.zeros(6)])
        return True
    assert all(distributed.simulate(body, [0, 1]))


def test_all_reduce_in_place_single_process_leaves_the_buffer():
    buf = np.arange(4.0)
    distributed.SingleProcess().all_reduce_in_place(buf)
    np.testing.assert_array_equal(buf, np.arange(4.0))


def test_all_reduce_in_place_sums_into_the_buffer():
    def body(comm, r):
        buf = np.arange(4.0) * (r + 1)
        comm.all_reduce_in_place(buf)       # the interface's default: through all_reduce
        return buf
    for got in distributed.simulate(body, [0, 1, 2]):
        np.testing.assert_array_equal(got, np.arange(4.0) * 6)


def test_flatten_into_a_buffer_and_back_with_scales():
    arrays = [np.arange(6.0).reshape(2, 3), np.arange(4.0)]
    buf = np.full(12, -1.0)
    assert distributed.flatten(arrays, out=buf, scale=3) is buf
    np.testing.assert_array_equal(buf[:10], np.concatenate([a.ravel() for a in arrays]) * 3)
    assert (buf[10:] == -1).all()                     # the rest untouched
    copies = [np.zeros_like(a) for a in arrays]
    distributed.unflatten(buf, copies, divisor=3)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)


def test_buckets_flatten_unflatten_roundtrip():
    arrays = [np.arange(6.0).reshape(2, 3), np.arange(4.0), np.arange(100.0)]
    groups = distributed.buckets(arrays, max_bytes=80)
    assert [len(g) for g in groups] == [2, 1]
    copies = [np.zeros_like(a) for a in arrays]
    distributed.unflatten(distributed.flatten(arrays), copies)
    for a, c in zip(arrays, copies):
        np.testing.assert_array_equal(a, c)


def test_each_rank_draws_its_own_dropout_masks_from_the_shared_seed():
    def body(comm, _):
        dp = distributed.DataParallel(comm, MLP([2, 2], seed=comm.rank), seed=5)
        return dp.seed, dp.dropout_seed
    (seed0, drop0), (seed1, drop1) = distributed.simulate(body, [0, 1])
    assert seed0 == seed1 == 5                       # one batch order
    assert drop0 != drop1                            # two streams of masks
    one = distributed.DataParallel(None, MLP([2, 2], seed=0), seed=5)
    assert one.dropout_seed == 5                     # one process: fit as before


def test_fit_with_single_process_comm_is_fit():
    X, y = distributed_jobs.synthetic()
    results = []
    for comm in (None, distributed.init("single")):
        model = MLP([12, 16, 3], seed=0).astype(np.float64)
        fit(model, SoftmaxCrossEntropy(), Adam(model, lr=1e-2), X, y, epochs=2, batch_size=8,
            seed=0, progress=False, comm=comm)
        results.append(model.params)
    for k in results[0]:
        np.testing.assert_array_equal(results[0][k], results[1][k])


def test_init_outside_mpiexec_is_single(monkeypatch):
    for var, _ in distributed._RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    comm = distributed.init()
    assert (comm.rank, comm.world_size, comm.is_main) == (0, 1, True)
    np.testing.assert_array_equal(comm.all_reduce(np.ones(3), "mean"), np.ones(3))
    with pytest.raises(ValueError, match="must be one of"):
        comm.all_reduce(np.ones(3), "max")
    with pytest.raises(ValueError, match="'mpi', 'nccl'"):
        distributed.init("gloo")


def test_data_parallel_needs_a_sample_per_rank():
    dp = distributed.DataParallel(distributed.init("single"), MLP([2, 2]), seed=0)
    assert dp.steps(5, 2) == 3 and dp.shard == {} and dp.seed == 0
    class ThreeRanks(distributed.SingleProcess):   # rank 0 of 3, every rank with the same N
        world_size = 3

        def all_reduce(self, x, op="sum"):
            return x * 0 + x.max()
    dp.comm = ThreeRanks()
    with pytest.raises(ValueError, match="2 training samples cannot be shared by 3 ranks"):
        dp.steps(2, 4)
    assert dp.steps(7, 2) == 1        # global batches of 6: one full, then 1 sample (< 3) left
    assert dp.steps(9, 2) == 2        # ... then 3 samples, one per rank


def test_ring_cost_model():
    # 2 ranks: 2 messages, each rank sends the whole buffer once (half out, half back)
    assert distributed.ring_cost(1e6, 2, alpha=1e-5, beta=1e9) == pytest.approx(2e-5 + 1e-3)
    assert distributed.ring_cost(1e6, 1, alpha=1e-5, beta=1e9) == 0


# ======================================================================================
# Real MPI jobs: 2 ranks on loopback
# ======================================================================================
def _single_process(optimizer, dtype, batch_size, epochs):
    X, y = distributed_jobs.synthetic(dtype=np.dtype(dtype))
    model = MLP([12, 16, 3], seed=0).astype(dtype)
    opt = SGD(model, lr=0.1, momentum=0.9) if optimizer == "sgd" else Adam(model, lr=1e-2)
    fit(model, SoftmaxCrossEntropy(), opt, X, y, epochs=epochs, batch_size=batch_size, seed=0,
        progress=False)
    return model.params


@needs_mpi
@pytest.mark.parametrize("optimizer,dtype,B", [("sgd", "float64", 8), ("adam", "float64", 7),
                                               ("adam", "float32", 8)])
def test_two_ranks_equal_one_process_on_the_global_batch(tmp_path, optimizer, dtype, B):
    out = tmp_path / "params.npz"
    result = distributed_jobs.run("train", "--optimizer", optimizer, "--dtype", dtype,
                                  "--batch-size", B, "--epochs", 2, "--out", out, ranks=2,
                                  timeout=TIMEOUT)
    assert result["steps"] == 2 * -(-96 // (2 * B))   # 2 epochs of global batches of 2B
    ranks = np.load(out)
    single = _single_process(optimizer, dtype, 2 * B, epochs=2)
    rtol, atol = (1e-10, 1e-12) if dtype == "float64" else (1e-4, 1e-5)
    for k, p in single.items():
        np.testing.assert_allclose(ranks[k], p, rtol=rtol, atol=atol, err_msg=k)


@needs_mpi
def test_a_failing_rank_stops_the_job_and_is_named():
    cmd = distributed.mpiexec_command(2, [sys.executable, "-m", "dlcourse.distributed_jobs",
                                          "fail"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=distributed.launch_env(1))
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "rank 1 of 2 failed with RuntimeError" in output, output[-3000:]


@needs_mpi
def test_ring_matches_mpi_allreduce_on_two_ranks():
    result = distributed_jobs.run("timing", "--sizes", "1,1001,30000", "--repeats", 3,
                                  ranks=2, timeout=TIMEOUT)
    assert [row["equal"] for row in result["rows"]] == [True] * 3
    assert all(row["mpi_s"] > 0 and row["ring_s"] > 0 for row in result["rows"])


@needs_mpi
def test_dlcourse_train_ranks_starts_mpiexec_and_one_rank_speaks():
    proc = subprocess.run([sys.executable, "-m", "dlcourse", "train", "--ranks", "2", "--model",
                           "mlp", "--dataset", "blobs", "--epochs", "2", "--no-progress",
                           "--device", "cpu"], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "batch 32 per rank x 2 ranks" in proc.stdout
    assert proc.stdout.count("test accuracy:") == 1


# ======================================================================================
# NCCL: one process per GPU
# ======================================================================================
def _gpu_count():
    if not backend.gpu_available():
        return 0
    return backend.require_cupy().cuda.runtime.getDeviceCount()


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() < 1, reason="needs a CUDA GPU (CuPy arrays through MPI)")
@needs_mpi
def test_mpi_takes_gpu_arrays_through_the_host():
    cmd = distributed.mpiexec_command(2, [sys.executable, "-c", (
        "import numpy as np, dlcourse as dl; from dlcourse import distributed as d; "
        "c = d.init(); x = dl.to_device(np.arange(6.0) * (c.rank + 1), 'gpu'); "
        "s = c.all_reduce(x, 'mean'); r = d.ring_all_reduce(c, x); b = c.broadcast(x); "
        "i = x.copy(); c.all_reduce_in_place(i); "
        "assert all(dl.device_of(a) == 'gpu' for a in (s, r, b, i)); "
        "assert np.allclose(dl.to_numpy(i), np.arange(6.0) * 3); "
        "assert np.allclose(dl.to_numpy(s), np.arange(6.0) * 1.5); "
        "assert np.allclose(dl.to_numpy(r), np.arange(6.0) * 3); "
        "assert np.allclose(dl.to_numpy(b), np.arange(6.0))")])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_count() < 2, reason="NCCL needs 2 GPUs: it refuses two ranks on one "
                                             "GPU, and this machine has fewer")
@needs_mpi
def test_nccl_two_ranks_equal_one_process(tmp_path):
    out = tmp_path / "params.npz"
    cmd = distributed.mpiexec_command(2, [sys.executable, "-c", (
        "import numpy as np; from dlcourse import distributed as d, distributed_jobs as j; "
        "c = d.init('nccl'); x = c.all_reduce(np.arange(4.0) * (c.rank + 1)); "
        "assert np.allclose(x, np.arange(4.0) * 3), x; "
        "r = d.ring_all_reduce(c, np.ones(5) * c.rank); assert np.allclose(r, 1), r; "
        f"j.train(c, 'adam', 'float64', 8, 2, {str(out)!r})")])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ranks, single = np.load(out), _single_process("adam", "float64", 16, epochs=2)
    for k, p in single.items():
        np.testing.assert_allclose(ranks[k], p, rtol=1e-10, atol=1e-12, err_msg=k)


# ======================================================================================
# Lesson 13's exercises: the checks pass the solutions and name a blank one
# ======================================================================================
def _lesson_exercises():
    import re
    from pathlib import Path

    import nbformat
    nb = nbformat.read(Path(__file__).parent.parent / "notebooks" / "13_data_parallel.ipynb", 4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    return [(src, code[k + 1], re.search(r"^def (\w+)\(", src, re.M).group(1))
            for k, src in enumerate(code) if "### BEGIN SOLUTION" in src]


def test_lesson_13_checks_pass_the_solutions_and_name_blank_ones(capsys):
    import dlcourse as dl
    from dlcourse.check import ExerciseError
    from dlcourse.student import student_source
    exercises = _lesson_exercises()
    assert [name for _, _, name in exercises] == ["ring_all_reduce", "fit_alpha_beta"]
    for solution, check, name in exercises:
        namespace = {"dl": dl, "np": np}
        exec(solution, namespace)          # noqa: S102 - our own notebook
        exec(check, namespace)             # noqa: S102
        assert f"\u2713 {name}" in capsys.readouterr().out
        namespace = {"dl": dl, "np": np}
        exec(student_source(solution), namespace)   # noqa: S102
        with pytest.raises(ExerciseError, match=f"{name} is not implemented yet: "):
            exec(check, namespace)         # noqa: S102


@pytest.mark.parametrize("mistake,message", [
    ("reduce_scatter_only", "all-gather"),
    ("whole_buffer", r"needs 2\(N-1\)"),
])
def test_ring_check_names_the_mistake(mistake, message):
    from dlcourse.check import ExerciseError, ring_all_reduce

    def reduce_scatter_only(comm, x):
        N, r = comm.world_size, comm.rank
        flat = x.reshape(-1).copy()
        chunks = np.array_split(flat, N)
        for s in range(N - 1):
            i = (r - s - 1) % N
            incoming = np.empty_like(chunks[i])
            comm.sendrecv(chunks[(r - s) % N], (r + 1) % N, incoming, (r - 1) % N)
            chunks[i] += incoming
        return flat.reshape(x.shape)

    def whole_buffer(comm, x):     # right answer, wrong algorithm: passes everything around
        total, piece = x.copy(), x.copy()
        for _ in range(comm.world_size - 1):
            incoming = np.empty_like(piece)
            comm.sendrecv(piece, (comm.rank + 1) % comm.world_size, incoming,
                          (comm.rank - 1) % comm.world_size)
            total += incoming
            piece = incoming
        return total
    fn = {"reduce_scatter_only": reduce_scatter_only, "whole_buffer": whole_buffer}[mistake]
    with pytest.raises(ExerciseError, match=message):
        ring_all_reduce(fn)


def test_ring_check_names_an_input_written_in_place():
    """The message reads as a sentence (issue 37: it said "the caller's x (rank 0)", and the fix
    "out = x (rank 0) * ..."), names the rank in the case, and says why x changed."""
    from dlcourse.check import ExerciseError, ring_all_reduce

    def ring_in_place(comm, x):
        N, r = comm.world_size, comm.rank
        chunks = np.array_split(x.reshape(-1), N)       # views of x: the adds write into x
        for s in range(N - 1):
            i = (r - s - 1) % N
            incoming = np.empty_like(chunks[i])
            comm.sendrecv(chunks[(r - s) % N], (r + 1) % N, incoming, (r - 1) % N)
            chunks[i] += incoming
        for s in range(N - 1):
            i = (r - s) % N
            incoming = np.empty_like(chunks[i])
            comm.sendrecv(chunks[(r - s + 1) % N], (r + 1) % N, incoming, (r - 1) % N)
            chunks[i][...] = incoming
        return x.copy()
    with pytest.raises(ExerciseError) as info:
        ring_all_reduce(ring_in_place)
    text = str(info.value)
    assert "on each; rank 0" in text and "changed its input x in place" in text, text
    assert "the caller's x is no longer what it passed" in text, text
    assert "a view of x" in text and "(rank" not in text, text


def _ring(comm, x, direction):
    """The ring all-reduce, sending to rank + direction and receiving from rank - direction."""
    N, r = comm.world_size, comm.rank
    chunks = [c.copy() for c in np.array_split(x.reshape(-1), N)]
    right, left = (r + direction) % N, (r - direction) % N
    for s in range(N - 1):
        send, recv = (r - direction * s) % N, (r - direction * (s + 1)) % N
        incoming = np.empty_like(chunks[recv])
        comm.sendrecv(chunks[send], right, incoming, left)
        chunks[recv] += incoming
    for s in range(N - 1):
        send, recv = (r - direction * (s - 1)) % N, (r - direction * s) % N
        incoming = np.empty_like(chunks[recv])
        comm.sendrecv(chunks[send], right, incoming, left)
        chunks[recv] = incoming
    return np.concatenate(chunks).reshape(x.shape)


def test_ring_check_holds_the_ring_and_accepts_it_either_way_round(capsys):
    """The lesson's rule (each rank sends only to one neighbour and receives only from the other)
    is checked: the same number of messages of the same size sent straight to every rank is
    not a ring (issue 37). The ring the other way round is still a ring."""
    from dlcourse.check import ExerciseError, ring_all_reduce

    def direct_exchange(comm, x):
        N, r = comm.world_size, comm.rank
        chunks = [c.copy() for c in np.array_split(x.reshape(-1), N)]
        for s in range(1, N):
            incoming = np.empty_like(chunks[r])
            comm.sendrecv(chunks[(r + s) % N], (r + s) % N, incoming, (r - s) % N)
            chunks[r] += incoming
        for s in range(1, N):
            incoming = np.empty_like(chunks[(r - s) % N])
            comm.sendrecv(chunks[r], (r + s) % N, incoming, (r - s) % N)
            chunks[(r - s) % N] = incoming
        return np.concatenate(chunks).reshape(x.shape)
    with pytest.raises(ExerciseError, match=r"sent to rank 2 and received from rank 1: that is "
                                            r"not a ring"):
        ring_all_reduce(direct_exchange)
    ring_all_reduce(lambda comm, x: _ring(comm, x, +1))
    ring_all_reduce(lambda comm, x: _ring(comm, x, -1))
    assert capsys.readouterr().out.count("all 5 cases pass") == 2


def test_benchmark_fits_alpha_beta_of_a_ring(benchmark_script):
    bench = benchmark_script("data_parallel")
    nbytes = np.array([64, 4096, 65536, 524288, 2678824])
    for N in (2, 4):
        seconds = distributed.ring_cost(nbytes, N, alpha=8e-6, beta=2e9)
        alpha, beta = bench.fit_alpha_beta(nbytes, seconds, N)
        assert alpha == pytest.approx(8e-6, rel=1e-6) and beta == pytest.approx(2e9, rel=1e-6)


@pytest.mark.skipif(sys.platform == "win32", reason="stand-in mpiexec scripts are POSIX sh")
@pytest.mark.parametrize("version, want", [
    ("mpiexec (OpenRTE) 4.1.6", ("--oversubscribe",)),           # Open MPI 4, as on the lent H100
    ("mpiexec (Open MPI) 5.0.3", ("--oversubscribe",)),
    ("HYDRA build details:", ()),                                 # Hydra without mpiexec.hydra beside it
])
def test_mpiexec_flags_follow_the_mpi_that_mpiexec_belongs_to(tmp_path, monkeypatch, version, want):
    """Open MPI's mpiexec refuses to start as root without --allow-run-as-root (seen on the lent
    GPU machine, 2026-11-26) and ranks beyond the cores without --oversubscribe; Hydra (the
    mpich wheel's, found by its mpiexec.hydra) gets -launcher fork."""
    fake = tmp_path / "mpiexec"
    fake.write_text(f"#!/bin/sh\necho '{version}'\n")
    fake.chmod(0o755)
    distributed.mpiexec_flags.cache_clear()
    for root in (False, True):
        monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
        distributed.mpiexec_flags.cache_clear()
        extra = ("--allow-run-as-root",) if root and want else ()
        assert distributed.mpiexec_flags(str(fake)) == want + extra
    (tmp_path / "mpiexec.hydra").write_text("")
    distributed.mpiexec_flags.cache_clear()
    assert distributed.mpiexec_flags(str(fake)) == distributed.MPIEXEC_ARGS
    distributed.mpiexec_flags.cache_clear()


# ======================================================================================
# Mismatched ranks say what each passed (issue 28, item 9)
# ======================================================================================
@pytest.fixture()
def no_hydra_leftovers():
    """An aborted MPICH job leaves /tmp/hydra_* files; remove the ones this test made."""
    import glob
    before = set(glob.glob("/tmp/hydra_*"))
    yield
    for path in set(glob.glob("/tmp/hydra_*")) - before:
        try:
            os.remove(path)
        except OSError:
            pass


def test_simulated_ranks_with_different_arrays_are_named():
    def body(comm, x):
        return comm.all_reduce(x)
    for arrays, words in (([np.zeros(3, np.float32), np.zeros(4, np.float32)], "shape (4,)"),
                          ([np.zeros((2, 3)), np.zeros((3, 2))], "shape (3, 2)"),
                          ([np.zeros(3, np.float32), np.zeros(3, np.float64)], "float64")):
        with pytest.raises(RuntimeError, match="same shape and dtype on every rank") as info:
            distributed.simulate(body, arrays)
        assert "rank 0 passed" in str(info.value) and words in str(info.value)


_MISMATCH = """
import numpy as np
from dlcourse import distributed
comm = distributed.init()
kind = {kind!r}
if kind == "length":
    comm.all_reduce(np.ones(3 + comm.rank, np.float32))
elif kind == "shape":
    comm.all_reduce(np.ones((2, 3) if comm.rank == 0 else (3, 2), np.float32))
elif kind == "in_place":
    comm.all_reduce_in_place(np.ones(4, np.float32 if comm.rank == 0 else np.float64))
else:
    import dlcourse as dl
    X = np.ones((20 + 4 * comm.rank, 4), np.float32)
    y = np.zeros(len(X), np.int64)
    m = dl.MLP([4, 2], seed=0)
    dl.fit(m, dl.SoftmaxCrossEntropy(), dl.SGD(m, lr=0.1), X, y, epochs=1, comm=comm,
           progress=False, seed=0)
"""


@needs_mpi
@pytest.mark.parametrize("kind, words", [
    ("length", ["rank 0 passed shape (3,) float32", "rank 1 passed shape (4,) float32"]),
    ("shape", ["rank 0 passed shape (2, 3)", "rank 1 passed shape (3, 2)"]),
    ("in_place", ["all_reduce_in_place", "float64"]),
    ("fit", ["same training data on every rank", "rank 0: 20, rank 1: 24"]),
])
def test_mpi_ranks_that_pass_different_arrays_are_told_which(kind, words, no_hydra_leftovers):
    cmd = distributed.mpiexec_command(2, [sys.executable, "-c", _MISMATCH.format(kind=kind)])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=distributed.launch_env(1))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Message truncated" not in output
    for w in words:
        assert w in output, output[-3000:]


# ======================================================================================
# Lesson 13b: overlapped buckets, ZeRO-1, the ring's two halves (issue 41)
# ======================================================================================
@pytest.mark.parametrize("N", [1, 2, 3, 4])
@pytest.mark.parametrize("P", [1, 7, 12])
def test_ring_reduce_scatter_and_all_gather_on_simulated_ranks(N, P):
    """The ring's halves against the communicator's own (its defaults over all_reduce), with
    ragged chunks; reduce-scatter then all-gather is the all-reduce."""
    from dlcourse import collectives
    inputs = [np.random.default_rng([r, P]).standard_normal(P) for r in range(N)]

    def body(comm, x):
        mine = collectives.ring_reduce_scatter(comm, x)
        return mine, comm.reduce_scatter(x), collectives.ring_all_gather(comm, mine, P), \
            comm.all_gather(mine, P), collectives.ring_all_reduce(comm, x)
    sizes = distributed.chunk_sizes(P, N)
    for r, (mine, theirs, gathered, gathered_mpi, reduced) in \
            enumerate(distributed.simulate(body, inputs)):
        assert mine.shape == (sizes[r],)
        np.testing.assert_allclose(mine, theirs, rtol=1e-12)
        np.testing.assert_allclose(gathered, sum(inputs), rtol=1e-12)
        np.testing.assert_array_equal(gathered, gathered_mpi)
        np.testing.assert_array_equal(reduced, gathered)


def test_all_gather_names_a_chunk_of_the_wrong_length():
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 owns 3 of the 7 elements.*"
                                           r"chunk_sizes\(7, 2\) = \[4, 3\]"):
        distributed.simulate(lambda comm, x: comm.all_gather(x, 7), [np.zeros(4), np.zeros(4)])


def test_bucket_plan_fills_buckets_in_backward_order():
    from dlcourse.overlap import bucket_plan
    assert bucket_plan([400, 0, 40, 0, 80], 100) == [[4, 2], [0]]
    assert bucket_plan([400, 0, 40, 0, 80], 0) == [[4], [2], [0]]        # one per layer
    assert bucket_plan([400, 0, 40, 0, 80], 10**9) == [[4, 2, 0]]        # one bucket
    assert bucket_plan([0, 0], 100) == []


@pytest.mark.parametrize("kwargs, error, words", [
    ({"overlap": True}, ValueError, "needs comm=dl.distributed.init()"),
    ({"zero": 1}, ValueError, "needs comm="),
    ({"comm": "single", "bucket_mb": 2}, ValueError, "pass overlap=True with it"),
    ({"comm": "single", "overlap": True, "bucket_mb": -1}, ValueError, r"bucket_mb=...\) must be"),
    ({"comm": "single", "overlap": True, "bucket_mb": "1"}, TypeError, "expects a number"),
    ({"comm": "single", "overlap": "yes"}, TypeError, "True or False"),
    ({"comm": "single", "zero": 2}, ValueError, "Stages 2 and 3"),
    ({"comm": "single", "zero": True}, ValueError, "the ZeRO stage, 0"),
    ({"comm": "single", "zero": 1, "overlap": True}, ValueError, "Choose one"),
    ({"comm": "single", "zero": 1, "clip_norm": 1.0}, ValueError, "global norm"),
    ({"comm": "single", "zero": 1, "precision": "bf16"}, ValueError, "precision='fp32'"),
])
def test_fit_refuses_bad_overlap_and_zero_arguments(kwargs, error, words):
    X, y = distributed_jobs.synthetic(N=16)
    model = MLP([12, 4, 3], seed=0)
    if kwargs.get("comm") == "single":
        kwargs["comm"] = distributed.init("single")
    with pytest.raises(error, match=words):
        fit(model, SoftmaxCrossEntropy(), Adam(model), X, y, epochs=1, progress=False, **kwargs)


def test_one_process_overlap_and_zero_are_plain_fit():
    """A communicator of one process: nothing to overlap, one shard that is everything."""
    X, y = distributed_jobs.synthetic()
    runs = []
    for kwargs in ({}, {"overlap": True, "bucket_mb": 0}, {"zero": 1}):
        model = MLP([12, 16, 3], seed=0).astype(np.float64)
        fit(model, SoftmaxCrossEntropy(), Adam(model, lr=1e-2), X, y, epochs=1, batch_size=8,
            seed=0, progress=False, comm=distributed.init("single"), **kwargs)
        runs.append(model.params)
    for other in runs[1:]:
        for k in runs[0]:
            np.testing.assert_array_equal(runs[0][k], other[k])


def test_sharded_adam_on_simulated_ranks_equals_adam_with_ragged_shards():
    """Three ranks, 5 steps, 919 parameters (ragged over 3): ZeRO-1 equals unsharded Adam on
    the averaged gradients, and each rank holds its shard's m and v only."""
    sizes, steps = [12, 20, 16, 16, 3], 5
    grads = [[{k: np.random.default_rng([r, t, i]).standard_normal(p.shape)
               for i, (k, p) in enumerate(MLP(sizes, seed=0).params.items())}
              for t in range(steps)] for r in range(3)]
    reference = MLP(sizes, seed=0).astype(np.float64)
    adam = Adam(reference, lr=1e-2)
    for t in range(steps):
        for layer_key in reference.params:
            layer, key = layer_key.split(".")
            reference.layers[int(layer)].grads[key] = sum(grads[r][t][layer_key] for r in range(3)) / 3
        adam.step()

    def body(comm, _):
        model = MLP(sizes, seed=0).astype(np.float64)
        opt = distributed.ShardedOptimizer(Adam(model, lr=1e-2), comm)
        for t in range(steps):
            for layer_key in model.params:
                layer, key = layer_key.split(".")
                model.layers[int(layer)].grads[key] = grads[comm.rank][t][layer_key].copy()
            opt.step()
        return model.params, opt.memory()
    for r, (params, memory) in enumerate(distributed.simulate(body, [0, 1, 2])):
        for k, p in reference.params.items():
            np.testing.assert_allclose(params[k], p, rtol=1e-12, atol=1e-12, err_msg=k)
        assert memory["optimizer_state"] == 2 * 8 * distributed.chunk_sizes(919, 3)[r]
        assert memory["optimizer_state_unsharded"] == 2 * 8 * 919


@needs_mpi
def test_overlap_zero_and_ring_halves_on_two_mpi_ranks():
    """One short MPI job (about a second): the ring's reduce-scatter and all-gather equal MPI's
    Reduce_scatter and Allgatherv (ragged); fit with overlap=True (a bucket per layer, small
    buckets; Adam and SGD) and with zero=1 equal the blocking fit bit for bit over 5 steps in
    float64 (2 ranks: each sum is a + b, one order); ZeRO-1 holds half of Adam's state."""
    result = distributed_jobs.run("sharding", ranks=2, timeout=TIMEOUT)
    for P in (1, 7, 1001):
        assert result[f"reduce_scatter_{P}"] and result[f"all_gather_{P}"], result
        assert result[f"all_reduce_{P}"], result
    assert result["steps"] == 5 and result["buckets_per_layer"] == 4
    for mode in ("overlap_per_layer", "overlap_bucketed", "overlap_sgd", "zero"):
        assert result[mode] <= 1e-12, (mode, result[mode])
    assert result["optimizer_bytes"] == {"adam": 919 * 2 * 8, "zero1": 460 * 2 * 8}
    for b in result["timeline"]["buckets"]:
        assert 0 <= b["ready"] <= b["start"] <= b["end"] <= result["timeline"]["waited"]


@needs_mpi
@pytest.mark.parametrize("kind, words", [
    ("bucket_mb", ["fit(overlap=, bucket_mb=, zero=) must be the same on every rank",
                   "rank 0: overlap=1, bucket_mb=0, zero=0", "rank 1: overlap=1, bucket_mb=1"]),
    ("model", ["broadcast needs the same shape and dtype on every rank",   # the parameters'
               "rank 0 passed shape (67,) float32", "rank 1 passed shape (83,) float32"]),
])
def test_mpi_ranks_with_different_overlap_settings_are_told(kind, words, no_hydra_leftovers):
    script = (
        "import numpy as np, dlcourse as dl\n"
        "comm = dl.distributed.init()\n"
        "X = np.ones((16, 4), np.float32); y = np.zeros(16, np.int64)\n"
        f"kind = {kind!r}\n"
        "hidden = 8 if kind == 'bucket_mb' or comm.rank == 0 else 10\n"
        "m = dl.MLP([4, hidden, 3], seed=0)\n"
        "dl.fit(m, dl.SoftmaxCrossEntropy(), dl.SGD(m, lr=0.1), X, y, epochs=1, comm=comm,\n"
        "       progress=False, seed=0, overlap=True,\n"
        "       bucket_mb=comm.rank if kind == 'bucket_mb' else 0)\n")
    cmd = distributed.mpiexec_command(2, [sys.executable, "-c", script])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=distributed.launch_env(1))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for w in words:
        assert w in output, output[-3000:]
