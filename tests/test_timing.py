"""dl.timeit: the one timing rule of the course (warm up, repeat, median; synchronize on a GPU)."""
import pytest

import dlcourse as dl


def test_warms_up_then_returns_the_median_of_the_repeats(monkeypatch):
    import dlcourse.timing as timing
    ticks = iter([0.0, 1.0,   1.0, 4.0,   4.0, 4.5])   # three runs: 1 s, 3 s, 0.5 s
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(ticks))
    calls = []
    assert dl.timeit(calls.append, "x", repeat=3, warmup=2) == 1.0      # the median, not the min
    assert calls == ["x"] * 5                                           # 2 warm-ups + 3 timed


def test_synchronizes_after_every_timed_call(monkeypatch):
    import dlcourse.timing as timing
    order = []
    monkeypatch.setattr(timing, "synchronize", lambda: order.append("sync"))
    dl.timeit(lambda: order.append("call"), repeat=2, warmup=1)
    assert order == ["call", "sync", "call", "sync", "call", "sync"]


def test_a_real_call_takes_a_positive_time():
    assert 0 < dl.timeit(lambda: sum(range(1000)), repeat=3) < 1


@pytest.mark.parametrize("kwargs, words", [({"repeat": 0}, "repeat >= 1"), ({"warmup": -1}, "warmup >= 0")])
def test_bad_arguments_say_what_is_expected(kwargs, words):
    with pytest.raises(ValueError, match=words):
        dl.timeit(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="lambda"):
        dl.timeit(3.0)


def test_cuda_events_without_a_gpu_say_why():
    if dl.gpu_available():
        pytest.skip("a GPU is present: the event path is exercised by test_cuda_events_time_gpu_work")
    with pytest.raises(dl.DeviceError):
        dl.timeit(lambda: None, cuda_events=True)


@pytest.mark.gpu
def test_cuda_events_time_gpu_work():
    cp = dl.backend.require_cupy()
    a = cp.ones((512, 512), dtype=cp.float32)
    assert 0 < dl.timeit(lambda: a @ a, repeat=5, cuda_events=True) < 1


def test_compare_interleaves_the_variants_and_reports_median_and_middle_half(monkeypatch):
    import dlcourse.timing as timing
    order, fake = [], iter([3.0, 1.0, 2.0, 1.0, 1.0, 1.0, 5.0, 1.0])   # a, b, a, b, ...
    monkeypatch.setattr(timing, "timeit", lambda fn, **kw: (order.append(fn()), next(fake))[1])
    t = dl.timing.compare({"a": lambda: "a", "b": lambda: "b"}, rounds=4, warmup=0, threads=1)
    assert order == ["a", "b"] * 4                                     # in turns, round by round
    assert t["a"].median == 2.5 and (t["a"].low, t["a"].high) == (1.75, 3.5)
    assert t["b"].median == t["b"].low == t["b"].high == 1.0


def test_compare_sets_the_blas_threads_while_it_times():
    from threadpoolctl import threadpool_info
    seen = []
    dl.timing.compare({"x": lambda: seen.append(
        [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"])},
        rounds=1, repeat=1, warmup=0, threads=1)
    assert seen and all(n == 1 for n in seen[0])
