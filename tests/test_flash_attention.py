"""Notebook 16's library part: dl.flash_attention (the tiled forward with the online softmax,
the backward that recomputes the tiles), its memory, the traffic counts, and the CUDA kernel
flash_attention_forward.cu: on the kernel emulator (g++, CI) against the NumPy version, and on
a GPU where there is one. Each array test runs on NumPy and on CuPy (or its stand-in)."""
import ctypes
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.kernels as K
from dlcourse.attention import attention_backward, attention_forward
from dlcourse.flash_attention import (attention_traffic, flash_attention_backward,
                                      flash_attention_forward)
from support import cuda_emulator as emulator


def qkv(N, H, Tq, Tk, d, dtype=np.float32, seed=0):
    gen = np.random.default_rng(seed)
    q = gen.standard_normal((N, H, Tq, d)).astype(dtype)
    k, v = (gen.standard_normal((N, H, Tk, d)).astype(dtype) for _ in range(2))
    return q, k, v


# Ragged sizes: T not a multiple of either tile, a single row, fewer queries than keys (a
# key/value cache) and more queries than keys (causal rows that see nothing at all).
SIZES = [(1, 1), (37, 37), (100, 100), (64, 64), (5, 70), (70, 5), (129, 65)]
BLOCKS = [(16, 8), (64, 64), (7, 13), (1, 1)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("Tq, Tk", SIZES)
def test_flash_attention_equals_attention_for_any_T(device, to_dev, Tq, Tk, causal):
    q, k, v = to_dev(*qkv(2, 3, Tq, Tk, 8))
    want = dl.to_numpy(dl.attention(q, k, v, causal=causal))
    for block in BLOCKS:
        got = dl.flash_attention(q, k, v, causal=causal, block=block)
        assert got.dtype == np.float32 and dl.device_of(got) == device
        np.testing.assert_allclose(dl.to_numpy(got), want, atol=1e-5, rtol=1e-5, err_msg=str(block))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("Tq, Tk", [(37, 37), (5, 70), (70, 5), (1, 1)])
def test_flash_backward_recomputes_what_attention_backward_gives(device, to_dev, Tq, Tk, causal):
    q, k, v = to_dev(*qkv(2, 2, Tq, Tk, 8, np.float64, seed=Tq + Tk))
    dout = to_dev(np.random.default_rng(1).standard_normal((2, 2, Tq, 8)))
    out, cache = attention_forward(q, k, v, causal=causal)
    want = attention_backward(dout, cache)
    for block in [(16, 8), (7, 13), (64, 64)]:
        fout, fcache = flash_attention_forward(q, k, v, causal=causal, block=block)
        np.testing.assert_allclose(dl.to_numpy(fout), dl.to_numpy(out), atol=1e-12)
        for name, got, w in zip("qkv", flash_attention_backward(dout, fcache), want):
            np.testing.assert_allclose(dl.to_numpy(got), dl.to_numpy(w), atol=1e-11,
                                       err_msg=f"d{name}, block {block}")


def test_flash_attention_keeps_float64_and_refuses_bad_blocks(to_dev):
    q, k, v = to_dev(*qkv(1, 1, 9, 9, 4, np.float64))
    assert dl.flash_attention(q, k, v).dtype == np.float64
    with pytest.raises(TypeError, match=r"pair \(Br, Bc\)"):
        dl.flash_attention(q, k, v, block=8)
    with pytest.raises(ValueError, match="at least 1 row"):
        dl.flash_attention(q, k, v, block=(0, 8))
    with pytest.raises(ValueError, match=r"\(N, heads, T, d\)"):
        dl.flash_attention(q[0], k[0], v[0])


# --------------------------------------------------------------------------------------
# Memory: O(T·d) extra, never a T×T array (measured, not assumed)
# --------------------------------------------------------------------------------------
def _peak_bytes(fn, *args, **kwargs):
    """The peak of the memory allocated while fn runs (NumPy reports its array buffers to
    tracemalloc), above what was allocated before."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_needs_O_T_d_memory_where_attention_needs_O_T2(causal):
    """d = 16, block (64, 64), one (sample, head). The T×T float32 matrix is 4 MiB at T = 1024
    and 16 MiB at T = 2048. Flash's peak extra memory, output included, stays below 12 T·d
    floats (its output, its running output o, q's scaled tile, one 64×64 tile of S and P) and
    grows with T, not T²; naive attention's peak holds at least its T×T matrix (S, turned into
    P in place) and grows with T²."""
    peaks, naive_peaks = {}, {}
    for T in (1024, 2048):
        q, k, v = qkv(1, 1, T, T, 16)
        flash = _peak_bytes(dl.flash_attention, q, k, v, causal=causal, block=(64, 64))
        naive = _peak_bytes(dl.attention, q, k, v, causal=causal)
        tile = 64 * 64 * 4
        assert flash < 12 * T * 16 * 4 + 8 * tile, (T, flash)
        assert naive >= T * T * 4, (T, naive)
        peaks[T], naive_peaks[T] = flash, naive
    assert peaks[2048] < 2.5 * peaks[1024]          # linear in T (T² would be 4x)
    assert naive_peaks[2048] > 3.5 * naive_peaks[1024]


def test_attention_traffic_counts_from_the_shapes():
    T, d = 1024, 64
    t = attention_traffic(1, 1, T, d, itemsize=4, block=(64, 64))
    assert t["naive"] == 4 * (4 * T * d + 4 * T * T)
    # q and out once, lse once, K and V once per query tile (16 tiles)
    assert t["flash"] == 4 * (2 * T * d + 2 * 16 * T * d + T)
    causal = attention_traffic(2, 3, T, d, block=(64, 64), causal=True)["flash"]
    assert causal < 6 * t["flash"] * 0.6                      # about half the K/V tiles
    assert attention_traffic(1, 1, 8 * T, d)["naive"] > 50 * attention_traffic(1, 1, T, d)["naive"]


# --------------------------------------------------------------------------------------
# The CUDA kernel: launch geometry, the emulator, a GPU
# --------------------------------------------------------------------------------------
def test_flash_kernel_geometry_and_head_sizes():
    cfg = K.launch_config("flash_attention_forward", 6, 130, 130, 40)
    assert cfg.grid == (3, 6, 1) and cfg.block == (K.FLASH_BR, 1, 1)
    assert cfg.static_shared_mem == 2 * K.FLASH_BC * 64 * 4 <= 48 * 1024
    assert [K.flash_head_dim(d) for d in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    with pytest.raises(ValueError, match="d <= 64"):
        K.flash_head_dim(65)
    assert "flash_attention_forward<64>" in K.list_kernels()
    text = K.source("flash_attention_forward.cu")
    assert f"#define FA_BR {K.FLASH_BR}" in text and f"#define FA_BC {K.FLASH_BC}" in text


LAUNCHER = r"""
#define FA_GEOMETRY const unsigned* grid, const unsigned* block, int reverse
extern "C" {
const char* emu_last_error() { return emu_error; }
""" + "".join(f"""
int run_flash_attention_forward_{D}(FA_GEOMETRY, const float* Q, const float* K, const float* V,
                                    float* O, float* LSE, int Tq, int Tk, int d, float scale,
                                    int causal)
{{ return launch(grid, block, reverse,
                 [&] {{ flash_attention_forward<{D}>(Q, K, V, O, LSE, Tq, Tk, d, scale, causal); }}); }}
""" for D in K.FLASH_HEAD_DIMS) + "}\n"

needs_gxx = pytest.mark.skipif(
    emulator.GXX is None or not sys.platform.startswith("linux"),
    reason="the CUDA kernels are emulated with g++ and glibc's ucontext fibers (Linux only)")


def _compile(out, source):
    unit = emulator.CUDA_STAND_IN + source + emulator.SCHEDULER + LAUNCHER
    (out / "flash.cpp").write_text(unit)
    lib = out / "libflash.so"
    proc = subprocess.run([emulator.GXX, "-std=c++17", "-O1", "-shared", "-fPIC",
                           "-Wno-unknown-pragmas", "-o", str(lib), str(out / "flash.cpp")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    emu = ctypes.CDLL(str(lib))
    emu.emu_last_error.restype = ctypes.c_char_p
    return emu


@pytest.fixture(scope="module")
def flash_emu(tmp_path_factory):
    if emulator.GXX is None or not sys.platform.startswith("linux"):
        pytest.skip("no g++ (or not Linux): the kernel is not emulated here")
    return _compile(tmp_path_factory.mktemp("flash_emu"), K.source("flash_attention_forward.cu"))


def _run_emulated(emu, q, k, v, causal, reverse=False):
    N, H, Tq, d = q.shape
    Tk = k.shape[2]
    out, lse = emulator.empty((N, H, Tq, d), np.float32), emulator.empty((N, H, Tq), np.float32)
    cfg = K.launch_config("flash_attention_forward", N * H, Tq, Tk, d)
    emulator.launch(emu, f"run_flash_attention_forward_{K.flash_head_dim(d)}", cfg,
                    emulator.guarded(q), emulator.guarded(k), emulator.guarded(v), out, lse,
                    Tq, Tk, d, np.float32(1 / np.sqrt(d)), int(causal), reverse=reverse)
    return out, lse


@needs_gxx
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, H, Tq, Tk, d", [(1, 1, 1, 1, 1), (2, 3, 37, 37, 8),
                                             (1, 2, 130, 130, 16), (1, 1, 70, 33, 64),
                                             (1, 1, 20, 75, 33), (2, 1, 65, 65, 5)])
def test_emulated_flash_kernel_matches_the_numpy_version(flash_emu, N, H, Tq, Tk, d, causal):
    """Against dl.flash_attention's array code (which test_flash_attention_equals_attention
    holds to dl.attention): out and lse. Tq > Tk, causal: the first rows see no key (0, +inf)."""
    q, k, v = qkv(N, H, Tq, Tk, d, seed=d)
    want, cache = flash_attention_forward(q, k, v, causal=causal, use_kernel=False)
    for reverse in (False, True):
        out, lse = _run_emulated(flash_emu, q, k, v, causal, reverse)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lse, cache[4], rtol=1e-5, atol=1e-5)


@needs_gxx
def test_emulation_catches_a_missing_syncthreads_in_the_flash_kernel(tmp_path):
    """Without the wait before the next tile is loaded, a thread that runs ahead overwrites
    Ks and Vs while the others still read them."""
    source = K.source("flash_attention_forward.cu")
    old = "        __syncthreads();                                    // 4."
    assert source.count(old) == 1
    broken = _compile(tmp_path, source.replace(old, "        // (removed) 4."))
    q, k, v = qkv(1, 1, 130, 100, 16)
    out, _ = _run_emulated(broken, q, k, v, False, reverse=True)
    assert not np.allclose(out, dl.attention(q, k, v), rtol=1e-5, atol=1e-5)


@needs_gxx
def test_flash_attention_wrapper_and_branch_run_on_the_emulated_kernel(flash_emu, monkeypatch):
    """dl.flash_attention on "GPU" arrays (the emulator's stand-in) takes the kernel branch:
    the wrapper's argument types, the template it picks and its contiguous copies included."""
    import dlcourse.kernels.flash as flash
    launched = []

    def get_kernel(file, name, defines=()):
        D = int(name.split("<")[1].rstrip(">"))

        def kernel(grid, block, args, shared_mem=0):
            assert [type(a) for a in args[5:]] == [np.int32, np.int32, np.int32, np.float32,
                                                   np.int32]
            launched.append(name)
            emulator.launch(flash_emu, f"run_flash_attention_forward_{D}",
                            K.launch_config("flash_attention_forward", args[0].shape[0] * args[0].shape[1],
                                            int(args[5]), int(args[6]), int(args[7])),
                            *args, strict=False)
        return kernel

    monkeypatch.setattr(K._build, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "device_of", lambda a: "gpu")
    monkeypatch.setattr(K, "gpu_available", lambda: True)
    monkeypatch.setattr(flash, "require_cupy", lambda: emulator.FAKE_CUPY)
    monkeypatch.setattr(flash, "get_kernel", get_kernel)
    q, k, v = qkv(2, 2, 45, 45, 12)
    for causal in (False, True):
        want = flash_attention_forward(q, k, v, causal=causal, use_kernel=False)[0]
        q_dev = emulator.device_array(q.transpose(0, 2, 1, 3).copy()).transpose(0, 2, 1, 3)
        got = dl.flash_attention(q_dev, emulator.device_array(k), emulator.device_array(v),
                                 causal=causal)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    assert launched == ["flash_attention_forward<16>"] * 2
    # float64, or heads larger than 64, run the array code
    q64, k64, v64 = (emulator.device_array(a.astype(np.float64)) for a in (q, k, v))
    dl.flash_attention(q64, k64, v64)
    assert len(launched) == 2


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("N, H, T, d", [(2, 3, 37, 8), (1, 4, 300, 64), (2, 2, 129, 33)])
def test_flash_kernel_on_the_gpu(N, H, T, d, causal):
    cupy = dl.backend.require_cupy()
    q, k, v = (dl.to_device(a, "gpu") for a in qkv(N, H, T, T, d))
    out, lse = K.flash_attention_forward(q, k, v, causal)
    want, cache = flash_attention_forward(q, k, v, causal=causal, use_kernel=False)
    assert float(cupy.abs(out - want).max()) < 1e-5
    assert float(cupy.abs(lse - cache[4]).max()) < 1e-4
    np.testing.assert_allclose(dl.to_numpy(dl.flash_attention(q, k, v, causal=causal)),
                               dl.to_numpy(dl.attention(q, k, v, causal=causal)), atol=1e-5)
    kernel = K.get_kernel("flash_attention_forward.cu",
                          f"flash_attention_forward<{K.flash_head_dim(d)}>")
    assert kernel.local_size_bytes == 0, "q and o must stay in registers (no local memory)"
