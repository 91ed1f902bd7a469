// flash_attention_wmma.cu — FlashAttention's forward on the tensor cores: FP16 in, FP32 out.
//
//   Q, K, V: (B, T, 64) float16,  O: (B, T, 64) float32,  row-major;  B = N * heads.
//   O[b, i] = sum_j softmax_j(Q[b, i] . K[b, j] * scale) V[b, j],   scale = 1 / sqrt(64),
//   over j < T, or (causal != 0) j <= i.
//
// Read flash_attention_forward.cu (the same algorithm on the CUDA cores, one thread per query
// row) and matmul_wmma.cu (WMMA fragments) first: this kernel is the first one's algorithm
// with the second one's products. Its two products per tile of keys, S = Q Kᵀ and O += P V,
// run on 16 x 16 x 16 WMMA fragments, FP16 in and FP32 accumulated; the online softmax
// between them runs in FP32 on the CUDA cores, one lane per query row:
//
//     m = -inf, l = 0, O = 0                      per row: running max, sum, output
//     for each tile of 64 keys:
//         S     = Q Kᵀ                              tensor cores, FP32 sums (unscaled)
//         s     = S * scale, -inf where masked      FP32, one lane per row from here ...
//         m_new = max(m, max s);  alpha = exp(m - m_new)
//         P     = exp(s - m_new)                   rounded to FP16 for the next product
//         l     = alpha * l + sum P               (the FP32 values, as FlashAttention-2 sums)
//         O     = alpha * O                        ... to here
//         O    += P V                              tensor cores
//     O = O / l
//
// Tiling and launch geometry (launch_config("flash_attention_wmma", B, T)):
//   grid  = (ceil(T / 64), B, 1): one block per 64 query rows of one (sample, head)
//   block = (128, 1, 1): 4 warps; warp w owns the 16 query rows w*16 .. w*16+15 of the block
//
//   - Q: the block stages its 64 x 64 tile once (through Ks, free before the loop) and each
//     warp keeps its 16 rows as 4 matrix_a fragments (d = 0..15, ..., 48..63) in registers.
//   - K and V: per step the 128 threads stage a tile of 64 keys of each in shared memory
//     (16-byte loads, zeros past T), read by all 4 warps.
//   - S = Q Kᵀ: per 16 keys, 4 mma_sync with the K tile read as a COL_MAJOR matrix_b: the
//     16 x 16 block of Kᵀ at (d0, j0) is K's block at (j0, d0) read column by column
//     (element (d, j) at Ks[j * ldm + d]), so Kᵀ is never copied. Stored, FP32, to the
//     warp's 16 x 64 scratch Ss[warp].
//   - softmax: lanes 0..15, one row each, read Ss, write P as halves to Ps[warp] (16 x 64).
//   - O += P V: O lives in 4 accumulator fragments (16 rows x 64 columns of d) per warp, in
//     registers for the whole kernel. WMMA does not say which lane holds which element of a
//     fragment, so a lane cannot multiply "its" row by alpha: the rescale goes through
//     shared memory, O stored to Ss (free once P is written), each row scaled by its lane,
//     loaded back (load_matrix_sync of an accumulator). Then per 16 columns of d, 4 mma_sync
//     of P's fragments (16 keys each) with V's (row_major).
//   - the output: O once more through Ss, divided by l, copied to global memory as float4s
//     by all 32 lanes, rows past T skipped.
//   - causal: a block stops after the key tile that holds its last row's diagonal (about half
//     the tiles when T is large); the bound is the same for all its threads, which must all
//     reach every __syncthreads(). Inside that tile the keys past each row's diagonal are masked.
//
// Synchronisation: __syncthreads() around the shared K/V tiles (every warp reads all of
// them); __syncwarp() between one lane's writes to its warp's Ss or Ps and another lane's (or
// a fragment's) reads. Masked entries (past T, or causal j > i) get s = -inf and p = 0; a row
// that has seen no key yet takes 0 as its reference point instead of m_new = -inf, so
// exp(-inf - (-inf)) = NaN never happens (rows past T are computed, never written).
//
// Padding and alignment: rows of Ks, Vs and Ps are 64 + 8 halves apart, of Ss 64 + 4 floats
// (ldm a multiple of 16 bytes, as WMMA asks; the rows of a fragment then start in different
// banks). Every fragment's pointer is 32-byte aligned (tests/test_flash_wmma.py runs the kernel
// on the emulator, which checks both rules). Shared memory: 2 * 64 * 72 * 2 +
// 4 * (16 * 68 * 4 + 16 * 72 * 2) = 44 KiB static, under the 48 KiB a block may declare.
//
// What it leaves out, compared with FlashAttention-2 (Dao, 2023) and -3 (Shah et al., 2024):
// both issue mma.sync (FA-3: Hopper's asynchronous wgmma) on a fragment layout they know, so
// the softmax and the rescale run in registers, a row spread over 4 lanes, with no trip
// through shared memory; they load the next K/V tiles asynchronously (cp.async, FA-3: TMA)
// while computing the current one, and FA-3 overlaps the softmax of one tile with the
// products of another; they use exp2 with log2(e) folded into the scale; they take any
// head size up to 256 (here d = 64 only), Tq != Tk, and write the log-sum-exp for a
// backward pass (this kernel has none).

#include <mma.h>
using namespace nvcuda;

#define FW_D 64                        // head size: the only one (the wrapper checks d == 64)
#define FW_BR 64                       // query rows per block
#define FW_BC 64                       // keys per K/V tile
#define FW_WARPS 4                     // warps per block: 16 query rows each
#define FW_THREADS (32 * FW_WARPS)     // 128
#define FW_KV_LD (FW_D + 8)            // halves per row of Ks and Vs (8 of them padding)
#define FW_SS_LD (FW_BC + 4)           // floats per row of Ss (4 of them padding)
#define FW_PS_LD (FW_BC + 8)           // halves per row of Ps (8 of them padding)
#define FW_LOADS (FW_BC * FW_D / 8 / FW_THREADS)   // 16-byte chunks per thread per tile (4)
static_assert(FW_BR == 16 * FW_WARPS && FW_BR == FW_BC && FW_D % 16 == 0 && FW_BC % 16 == 0,
              "each warp owns 16 query rows; Q is staged in Ks, so a Q tile is a K tile's size");
static_assert(FW_LOADS * FW_THREADS * 8 == FW_BC * FW_D, "whole 16-byte chunks per thread");

__device__ __forceinline__ float fw_inf() { return __int_as_float(0x7f800000); }

// rows [r0, r0 + FW_BC) of X (T rows of FW_D halves) -> tile (FW_KV_LD apart), zeros past T
__device__ __forceinline__ void fw_stage(half* tile, const half* X, int r0, int T)
{
#pragma unroll
    for (int i = 0; i < FW_LOADS; ++i) {
        const int f = threadIdx.x + i * FW_THREADS;
        const int r = f / (FW_D / 8), c = (f % (FW_D / 8)) * 8;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);          // 8 halves of zero bits
        if (r0 + r < T) v = *reinterpret_cast<const float4*>(&X[(long long)(r0 + r) * FW_D + c]);
        *reinterpret_cast<float4*>(&tile[r * FW_KV_LD + c]) = v;
    }
}

extern "C" __global__ void __launch_bounds__(FW_THREADS)
flash_attention_wmma(const half* __restrict__ Q,   // (B, T, 64) input, 16-byte aligned
                     const half* __restrict__ K,   // (B, T, 64) input, 16-byte aligned
                     const half* __restrict__ V,   // (B, T, 64) input, 16-byte aligned
                     float* __restrict__ O,        // (B, T, 64) output
                     int T, float scale, int causal)
{
    __shared__ __align__(32) half Ks[FW_BC * FW_KV_LD];              // K tile (Q's, first)
    __shared__ __align__(32) half Vs[FW_BC * FW_KV_LD];              // V tile
    __shared__ __align__(32) float Ss[FW_WARPS][16 * FW_SS_LD];      // each warp's S, then O
    __shared__ __align__(32) half Ps[FW_WARPS][16 * FW_PS_LD];       // each warp's P

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const long long at = (long long)blockIdx.y * T * FW_D;          // this (sample, head)
    const int q0 = blockIdx.x * FW_BR;                              // the block's first row
    const int row = q0 + warp * 16 + lane;                         // lanes 0..15: their row
    Q += at; K += at; V += at; O += at;

    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> q[FW_D / 16];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> kt;   // a block of Kᵀ
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> p[FW_BC / 16];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> v;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> s, o[FW_D / 16];

    // 1. Q: the block's 64 rows through Ks, then each warp's 16 rows into its fragments
    fw_stage(Ks, Q, q0, T);
    __syncthreads();
#pragma unroll
    for (int c = 0; c < FW_D / 16; ++c) {
        wmma::load_matrix_sync(q[c], &Ks[warp * 16 * FW_KV_LD + c * 16], FW_KV_LD);
        wmma::fill_fragment(o[c], 0.0f);
    }
    __syncthreads();                                  // every warp has its Q before Ks is reused

    float m = -fw_inf(), l = 0.0f;                    // lanes 0..15: their row's max and sum
    const int last_row = min(T, q0 + FW_BR) - 1;      // the same bound for the whole block
    const int end = causal ? last_row + 1 : T;

    for (int j0 = 0; j0 < end; j0 += FW_BC) {
        fw_stage(Ks, K, j0, T);                       // 2. the K and V tiles
        fw_stage(Vs, V, j0, T);
        __syncthreads();                              //    complete before any warp reads them

        // 3. S = Q Kᵀ, 16 keys at a time, FP32, unscaled, into the warp's Ss
#pragma unroll
        for (int n = 0; n < FW_BC / 16; ++n) {
            wmma::fill_fragment(s, 0.0f);
#pragma unroll
            for (int c = 0; c < FW_D / 16; ++c) {
                wmma::load_matrix_sync(kt, &Ks[n * 16 * FW_KV_LD + c * 16], FW_KV_LD);
                wmma::mma_sync(s, q[c], kt, s);
            }
            wmma::store_matrix_sync(&Ss[warp][n * 16], s, FW_SS_LD, wmma::mem_row_major);
        }
        __syncwarp();                                 //    S is in Ss before lanes read it

        // 4. the online softmax, one lane per row: P (halves) to Ps, alpha kept for step 5
        float alpha = 1.0f;
        if (lane < 16) {
            float* srow = &Ss[warp][lane * FW_SS_LD];
            float tile_max = -fw_inf();
            for (int c = 0; c < FW_BC; ++c) {
                const int j = j0 + c;
                const bool keep = j < T && (!causal || j <= row);
                srow[c] = keep ? srow[c] * scale : -fw_inf();
                tile_max = fmaxf(tile_max, srow[c]);
            }
            const float m_new = fmaxf(m, tile_max);
            const float ref = m_new == -fw_inf() ? 0.0f : m_new;   // no key seen yet: p = 0
            alpha = expf(m - ref);                                   // 0 while m = -inf
            float p_sum = 0.0f;
            for (int c = 0; c < FW_BC; ++c) {
                const float pc = expf(srow[c] - ref);               // exp(-inf) = 0: masked
                p_sum += pc;
                Ps[warp][lane * FW_PS_LD + c] = __float2half(pc);
            }
            l = alpha * l + p_sum;
            m = m_new;
        }
        __syncwarp();                                 //    P is written and S read: Ss is free

        // 5. O = alpha * O, through Ss (the fragments' layout is hidden), then O += P V
#pragma unroll
        for (int c = 0; c < FW_D / 16; ++c)
            wmma::store_matrix_sync(&Ss[warp][c * 16], o[c], FW_SS_LD, wmma::mem_row_major);
        __syncwarp();
        if (lane < 16)
            for (int c = 0; c < FW_D; ++c) Ss[warp][lane * FW_SS_LD + c] *= alpha;
        __syncwarp();
#pragma unroll
        for (int c = 0; c < FW_D / 16; ++c)
            wmma::load_matrix_sync(o[c], &Ss[warp][c * 16], FW_SS_LD, wmma::mem_row_major);
#pragma unroll
        for (int n = 0; n < FW_BC / 16; ++n)
            wmma::load_matrix_sync(p[n], &Ps[warp][n * 16], FW_PS_LD);
#pragma unroll
        for (int c = 0; c < FW_D / 16; ++c) {
#pragma unroll
            for (int n = 0; n < FW_BC / 16; ++n) {
                wmma::load_matrix_sync(v, &Vs[n * 16 * FW_KV_LD + c * 16], FW_KV_LD);
                wmma::mma_sync(o[c], p[n], v, o[c]);
            }
        }
        __syncthreads();                              // 6. every warp is done with Ks and Vs
    }

    // 7. O / l, through Ss once more, to global memory as float4s (rows past T skipped)
#pragma unroll
    for (int c = 0; c < FW_D / 16; ++c)
        wmma::store_matrix_sync(&Ss[warp][c * 16], o[c], FW_SS_LD, wmma::mem_row_major);
    __syncwarp();
    if (lane < 16) {
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        for (int c = 0; c < FW_D; ++c) Ss[warp][lane * FW_SS_LD + c] *= inv_l;
    }
    __syncwarp();
    for (int e = lane * 4; e < 16 * FW_D; e += 32 * 4) {             // 8 float4s per lane
        const int r = e / FW_D, c = e % FW_D, out_row = q0 + warp * 16 + r;
        if (out_row < T)
            *reinterpret_cast<float4*>(&O[(long long)out_row * FW_D + c]) =
                *reinterpret_cast<const float4*>(&Ss[warp][r * FW_SS_LD + c]);
    }
}
