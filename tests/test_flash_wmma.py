"""flash_attention_wmma.cu, FlashAttention's forward on the tensor cores (issue 43): on the
kernel emulator (g++, CI) against reference.flash_attention_fp16, in both warp orders; planted
bugs that the emulator must catch; the wrapper on both backends and its refusals; a GPU where
there is one. NVRTC and nvcc compile it in test_kernels.py (every entry of K.SOURCES).

The tolerance. The reference is attention in FP32 on the FP16-rounded inputs. The kernel's
products are exact and summed in FP32 too, but it rounds each softmax weight p to FP16 before
O += P V (relative error at most 2**-11, the unit roundoff of FP16) while it divides by the
sum of the unrounded p. So each output is off by at most sum_j |p̂_j - p_j| |v_j| / l
<= 2**-11 * max |v|, plus FP32 rounding (about 1e-6 here): ``atol`` below. The planted bugs
must miss the same bound.
"""
import sys

import numpy as np
import pytest

import dlcourse as dl
import dlcourse.kernels as K
import dlcourse.kernels.flash as flash
from dlcourse.kernels import reference as R
from support import cuda_emulator as emulator

FILE = "flash_attention_wmma.cu"
D = 64

needs_gxx = pytest.mark.skipif(
    emulator.GXX is None or not sys.platform.startswith("linux"),
    reason="the CUDA kernels are emulated with g++ and glibc's ucontext fibers (Linux only)")


def qkv(B, T, seed=0, d=D):
    gen = np.random.default_rng(seed)
    return tuple(gen.standard_normal((B, T, d)).astype(np.float16) for _ in range(3))


def atol(v):
    """The bound of the module's docstring: P's FP16 rounding, plus FP32 rounding."""
    return 2.0**-11 * float(np.abs(v.astype(np.float32)).max()) + 1e-5


def _compile(out, text):
    return emulator.compile_kernels(
        out, {FILE: text}, name="flash_wmma",
        launchers=emulator.LAUNCH_PRELUDE + emulator.FLASH_WMMA_LAUNCHER + "}\n")


@pytest.fixture(scope="module")
def fw_emu(tmp_path_factory):
    if emulator.GXX is None or not sys.platform.startswith("linux"):
        pytest.skip("no g++ (or not Linux): the kernel is not emulated here")
    return _compile(tmp_path_factory.mktemp("flash_wmma"), K.source(FILE))


def _run(emu, q, k, v, causal, reverse=False):
    """out from the emulated kernel, launched with the wrapper's geometry."""
    B, T, _ = q.shape
    out = emulator.empty((B, T, D), np.float32)
    emulator.launch(emu, "run_flash_attention_wmma", K.launch_config("flash_attention_wmma", B, T),
                    emulator.guarded(q), emulator.guarded(k), emulator.guarded(v), out, T,
                    np.float32(1 / np.sqrt(D)), int(causal), reverse=reverse)
    return out


# --------------------------------------------------------------------------------------------
# (a) the emulated kernel against the reference
# --------------------------------------------------------------------------------------------
@needs_gxx
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("T", [37, 64, 130])
def test_emulated_flash_wmma_matches_the_reference(fw_emu, T, causal):
    """T = 37: one ragged tile; 64: exactly one; 130: three query blocks and three key tiles,
    the last with 2 keys (causal: the diagonal tiles, and tiles a block skips). B = 2: the
    second problem's offsets. Both warp orders: no warp may depend on another running first."""
    q, k, v = qkv(2, T, seed=T)
    want = R.flash_attention_fp16(q, k, v, causal)
    for reverse in (False, True):
        out = _run(fw_emu, q, k, v, causal, reverse)
        np.testing.assert_allclose(out, want, rtol=0, atol=atol(v), err_msg=f"reverse={reverse}")


@needs_gxx
def test_emulated_flash_wmma_handles_large_scores_without_overflow(fw_emu):
    """Scores of about +-400 (q and k of size 5 in every entry): exp would overflow without
    the running max, and the first row's causal tile is all masked but one key."""
    q, k, v = qkv(1, 70, seed=1)
    q, k = (np.sign(a) * np.float16(2.5) for a in (q, k))
    for causal in (False, True):
        out = _run(fw_emu, q, k, v, causal)
        assert np.isfinite(out).all()
        np.testing.assert_allclose(out, R.flash_attention_fp16(q, k, v, causal), rtol=0,
                                   atol=atol(v))


# --------------------------------------------------------------------------------------------
# (b) planted bugs: the emulator catches them
# --------------------------------------------------------------------------------------------
PLANTS = {
    # the K/V tiles read before the other warps have written their parts
    "no-syncthreads-before-reading-K-V": (
        "        __syncthreads();                              //    complete before any warp",
        "        //                                            //    complete before any warp"),
    # lanes copy rows of O that their own lanes have not divided by l yet
    "no-syncwarp-before-the-output-copy": (
        "    }\n    __syncwarp();\n    for (int e = lane * 4;",
        "    }\n    for (int e = lane * 4;"),
    # ldm 64 (a multiple of 8: CUDA takes it) where the rows of Ks are 72 halves apart
    "wrong-ldm-of-K": ("wmma::load_matrix_sync(kt, &Ks[n * 16 * FW_KV_LD + c * 16], FW_KV_LD);",
                       "wmma::load_matrix_sync(kt, &Ks[n * 16 * FW_KV_LD + c * 16], FW_D);"),
    # K read row-major: Q K (of the wrong blocks) instead of Q Kᵀ
    "K-not-transposed": ("wmma::col_major> kt;", "wmma::row_major> kt;"),
}


@needs_gxx
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_emulation_catches_flash_wmma_mistakes(tmp_path, plant):
    old, new = PLANTS[plant]
    text = K.source(FILE)
    assert text.count(old) == 1, f"{FILE} changed: update the planted bug"
    broken = _compile(tmp_path, text.replace(old, new))
    q, k, v = qkv(1, 100, seed=3)
    want = R.flash_attention_fp16(q, k, v, False)
    for reverse in (False, True):
        out = _run(broken, q, k, v, False, reverse)
        assert not np.allclose(out, want, rtol=0, atol=atol(v)), f"reverse={reverse}"


@needs_gxx
def test_emulator_holds_accumulator_loads_to_the_ldm_rule(tmp_path):
    """ldm of a float fragment must be a multiple of 4 (16 bytes): a row of Ss 66 floats long
    passes the compiler and gives garbage on a GPU; the emulator names the rule."""
    text = K.source(FILE)
    broken = _compile(tmp_path, text.replace("#define FW_SS_LD (FW_BC + 4)",
                                             "#define FW_SS_LD (FW_BC + 2)"))
    q, k, v = qkv(1, 16)
    with pytest.raises(AssertionError, match="ldm = 66, but it must be a multiple of 4"):
        _run(broken, q, k, v, False)


# --------------------------------------------------------------------------------------------
# Geometry, the wrapper on both backends, its refusals
# --------------------------------------------------------------------------------------------
def test_flash_wmma_geometry_is_the_sources():
    cfg = K.launch_config("flash_attention_wmma", 6, 130)
    assert cfg.grid == (3, 6, 1) and cfg.block == (128, 1, 1) and cfg.shared_mem == 0
    assert cfg.static_shared_mem == 2 * 64 * 72 * 2 + 4 * (16 * 68 * 4 + 16 * 72 * 2) <= 48 * 1024
    text = K.source(FILE)
    for line in (f"#define FW_D {K.FLASH_WMMA_D}", "#define FW_BR 64", "#define FW_BC 64",
                 "#define FW_WARPS 4", "#define FW_KV_LD (FW_D + 8)",
                 "#define FW_SS_LD (FW_BC + 4)", "#define FW_PS_LD (FW_BC + 8)"):
        assert line in text, line
    assert "flash_attention_wmma" in K.list_kernels()
    assert K.SOURCES[FILE].headers, "NVRTC needs mma.h from CUDA"


def test_flash_wmma_on_numpy_is_its_reference():
    q, k, v = qkv(2, 9, seed=5)
    for causal in (False, True):
        got = K.flash_attention_wmma(q, k, v, causal)
        assert got.dtype == np.float32 and got.shape == (2, 9, D)
        np.testing.assert_array_equal(got, R.flash_attention_fp16(q, k, v, causal))
    # the reference itself: dl.attention in float64 on the rounded inputs
    q4, k4, v4 = (a.astype(np.float64)[:, None] for a in (q, k, v))
    want = dl.attention(q4, k4, v4, causal=True)[:, 0]
    np.testing.assert_allclose(K.flash_attention_wmma(q, k, v, True), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("args, error, match", [
    (lambda q: (q[..., :32], q[..., :32], q[..., :32]), ValueError,
     r"d=64 only .*got d=32\. Choose the number of heads"),
    (lambda q: (q.astype(np.float32), q, q), TypeError,
     r"q must be a 3-D \(B, T, d\) float16 array, got shape \(2, 5, 64\) and dtype float32.*"
     r"astype\(np.float16\)"),
    (lambda q: (q[None], q[None], q[None]), TypeError, r"3-D \(B, T, d\)"),
    (lambda q: (q, q[:, :4], q), ValueError,
     r"q \(2, 5, 64\), k \(2, 4, 64\), v \(2, 5, 64\): all three must be \(B, T, d\) of one shape"),
], ids=["d-not-64", "float32", "4-D", "shapes-differ"])
def test_flash_wmma_refusals(args, error, match):
    q = qkv(2, 5)[0]
    with pytest.raises(error, match=match):
        K.flash_attention_wmma(*args(q))


@needs_gxx
def test_flash_wmma_wrapper_runs_on_the_emulated_kernel(fw_emu, monkeypatch):
    """On "GPU" arrays (the emulator's CuPy stand-in) the wrapper launches the kernel: the
    argument types checked against the .cu signature, strided and misaligned inputs copied."""
    for module in (K._build, flash):
        monkeypatch.setattr(module, "device_of", lambda a: "gpu")
    monkeypatch.setattr(flash, "require_cupy", lambda: emulator.FAKE_CUPY)
    monkeypatch.setattr(flash, "get_kernel", lambda f, n, defines=():
                        emulator.emulated_kernel(fw_emu, f, n))
    q, k, v = qkv(2, 45, seed=7)
    flat = emulator.device_array(np.zeros(q.size + 1, np.float16))
    q_misaligned = flat[1:].reshape(q.shape)             # 2 bytes past an aligned address
    q_misaligned[...] = q
    assert q_misaligned.data.ptr % 16 != 0
    k_strided = emulator.device_array(k.transpose(1, 0, 2).copy()).transpose(1, 0, 2)
    for causal in (False, True):
        before = emulator.EmuArray.launches
        out = K.flash_attention_wmma(q_misaligned, k_strided, emulator.device_array(v), causal)
        assert emulator.EmuArray.launches == before + 1, "the emulated kernel ran, once"
        assert out.dtype == np.float32 and out.shape == (2, 45, D)
        np.testing.assert_allclose(np.asarray(out), R.flash_attention_fp16(q, k, v, causal),
                                   rtol=0, atol=atol(v))
    with pytest.raises(TypeError, match=r"must have dtype float16.*astype\(cupy.float16\)"):
        K.flash_attention_wmma(emulator.device_array(q.astype(np.float32)), k_strided, v)
    empty = K.flash_attention_wmma(*(emulator.device_array(a[:, :0]) for a in (q, k, v)))
    assert empty.shape == (2, 0, D)


# --------------------------------------------------------------------------------------------
# (d) a GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("B, T", [(2, 37), (3, 130), (2, 1000)])
def test_flash_wmma_on_the_gpu(B, T, causal):
    q, k, v = qkv(B, T, seed=T)
    out = K.flash_attention_wmma(*(dl.to_device(a, "gpu") for a in (q, k, v)), causal)
    assert dl.device_of(out) == "gpu" and out.dtype == np.float32 and out.shape == (B, T, D)
    np.testing.assert_allclose(dl.to_numpy(out), R.flash_attention_fp16(q, k, v, causal),
                               rtol=0, atol=atol(v))
    kernel = K.get_kernel(FILE, "flash_attention_wmma")
    assert kernel.local_size_bytes == 0, "the fragments must stay in registers (no local memory)"
