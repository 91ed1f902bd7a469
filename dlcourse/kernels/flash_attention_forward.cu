// flash_attention_forward.cu — attention without the T x T matrix: FlashAttention's forward pass.
//
//   Q: (B, Tq, d),  K, V: (B, Tk, d),  O: (B, Tq, d),  LSE: (B, Tq),  float32, row-major;
//   B = N * heads (each (sample, head) pair is one independent attention problem).
//   O[b, i] = sum_j softmax_j(Q[b, i] . K[b, j] * scale) V[b, j],   scale = 1 / sqrt(d)
//   LSE[b, i] = log sum_j exp(Q[b, i] . K[b, j] * scale)   (what a backward pass recomputes P from)
//
// The idea
// --------
// Naive attention writes the (Tq, Tk) score matrix S to global memory, reads it back for the
// softmax, writes P, reads P back for P @ V: for T = 4096 that is 64 MiB per (sample, head),
// moved four times, where Q, K, V and O are 1 MiB each (d = 64). FlashAttention (Dao et al.,
// 2022) never writes S or P: a block keeps its queries' partial results on chip and streams
// K and V past them, one tile at a time, with the ONLINE SOFTMAX (the same trick as
// softmax_cross_entropy.cu, applied to a weighted sum of rows of V). Per query row:
//
//     m = -inf, l = 0, o[0..d) = 0               running max, running sum, running output
//     for each tile of BC keys (in shared memory):
//         s[r]  = q . K[r] * scale               r = 0..BC-1, -inf where masked
//         m_new = max(m, max_r s[r]);  alpha = exp(m - m_new)
//         l     = alpha * l + sum_r exp(s[r] - m_new)
//         o     = alpha * o + sum_r exp(s[r] - m_new) * V[r]
//         m     = m_new
//     O = o / l;  LSE = m + log(l)
//
// One block per query tile: BR = 64 threads, one per query row (blockIdx.x: the tile of
// rows, blockIdx.y: which of the B problems). Each thread keeps its row's q (pre-scaled),
// o, m and l in REGISTERS for the whole kernel: d + d + 2 floats, plus the BC scores of the
// current tile. The K and V tiles, BC x D floats each, go through SHARED MEMORY: the block's
// 64 threads load them together (consecutive threads, consecutive addresses: coalesced), and
// every thread then reads all of them. Each K/V element is loaded from global memory once per
// BLOCK, not once per query row: BR = 64 times less traffic for K and V than one thread per
// row reading them itself, and S and P never leave the registers.
//
//            d                         Tk
//       +--------+                +-----------------+
//       |        |   K tile  ---> | Ks (BC x D)     |  shared memory, reloaded per tile,
//    BR | q, o   |   V tile  ---> | Vs (BC x D)     |  read by all 64 threads (broadcast:
//       | in regs|                +-----------------+  a warp reads one address at a time)
//       +--------+
//
// Head size: the loops over d are unrolled at compile time (D, a template parameter) so q
// and o live in registers, not in (slow, local) memory: D = 16, 32 or 64 are instantiated;
// the wrapper picks the smallest D >= d and the columns past d are zeros (they add nothing).
// Registers per thread at D = 64: 64 (q) + 64 (o) + 32 (s) + a few; that is why D stops at 64.
//
// Causal masking (causal != 0): query i sees keys j <= i + (Tk - Tq). A block stops after the
// last tile its last row can see (the tiles above the diagonal are skipped, about half of them
// when Tq = Tk): the loop bound is the same for every thread of the block, because every
// thread must reach each __syncthreads(). A row that sees no key at all writes O = 0 and
// LSE = +inf (a weight of exp(s - inf) = 0 everywhere when recomputed).
//
// Shared memory: 2 * BC * D * 4 bytes, 16 KiB at D = 64 (static; no dynamic shared memory).
// Launch geometry (launch_config("flash_attention_forward", B, Tq, Tk, d)):
//   block = (BR, 1, 1) = (64, 1, 1),  grid = (ceil(Tq / BR), B, 1)   (B <= 65535)

#define FA_BR 64   // query rows per block = threads per block (the wrapper relies on it)
#define FA_BC 32   // key/value rows per shared-memory tile

__device__ __forceinline__ float fa_inf() { return __int_as_float(0x7f800000); }

template <int D>
__global__ void flash_attention_forward(const float* __restrict__ Q,     // (B, Tq, d) input
                                        const float* __restrict__ K,     // (B, Tk, d) input
                                        const float* __restrict__ V,     // (B, Tk, d) input
                                        float* __restrict__ O,           // (B, Tq, d) output
                                        float* __restrict__ LSE,         // (B, Tq)    output
                                        int Tq, int Tk, int d, float scale, int causal)
{
    __shared__ float Ks[FA_BC][D];
    __shared__ float Vs[FA_BC][D];

    const int b = blockIdx.y;                               // which (sample, head)
    const int row = blockIdx.x * FA_BR + threadIdx.x;      // this thread's query row
    const bool active = row < Tq;                           // (the last tile may be short)
    const int shift = Tk - Tq;                              // causal: j <= row + shift
    const long long q_at = ((long long)b * Tq + row) * d;
    const long long kv_at = (long long)b * Tk * d;

    float q[D], o[D];                                       // registers (D is a constant)
#pragma unroll
    for (int c = 0; c < D; ++c) {
        q[c] = (active && c < d) ? Q[q_at + c] * scale : 0.0f;
        o[c] = 0.0f;
    }
    float m = -fa_inf(), l = 0.0f;

    // The keys this block needs: all of them, or (causal) up to its last row's diagonal
    // (none at all when that is negative: the loop below then does not run).
    const int last_row = min(Tq, (int)(blockIdx.x + 1) * FA_BR) - 1;
    const int end = causal ? min(Tk, last_row + shift + 1) : Tk;

    for (int j0 = 0; j0 < end; j0 += FA_BC) {
        // 1. the block loads one tile of K and of V into shared memory (0 past Tk or d)
        for (int e = threadIdx.x; e < FA_BC * D; e += FA_BR) {
            const int r = e / D, c = e % D, j = j0 + r;
            const bool inside = j < Tk && c < d;
            Ks[r][c] = inside ? K[kv_at + (long long)j * d + c] : 0.0f;
            Vs[r][c] = inside ? V[kv_at + (long long)j * d + c] : 0.0f;
        }
        __syncthreads();                                    // 2. the tiles are complete

        if (active) {                                       // 3. this row against the tile
            float s[FA_BC];
            float tile_max = -fa_inf();
#pragma unroll
            for (int r = 0; r < FA_BC; ++r) {
                float dot = 0.0f;
#pragma unroll
                for (int c = 0; c < D; ++c) dot += q[c] * Ks[r][c];
                const int j = j0 + r;
                const bool keep = j < Tk && (!causal || j <= row + shift);
                s[r] = keep ? dot : -fa_inf();
                tile_max = fmaxf(tile_max, s[r]);
            }
            const float m_new = fmaxf(m, tile_max);
            if (m_new != -fa_inf()) {                       // else nothing seen yet: skip
                const float alpha = expf(m - m_new);        // rescales the old l and o
                float p_sum = 0.0f;
#pragma unroll
                for (int c = 0; c < D; ++c) o[c] *= alpha;
#pragma unroll
                for (int r = 0; r < FA_BC; ++r) {
                    const float p = expf(s[r] - m_new);
                    p_sum += p;
#pragma unroll
                    for (int c = 0; c < D; ++c) o[c] += p * Vs[r][c];
                }
                l = alpha * l + p_sum;
                m = m_new;
            }
        }
        __syncthreads();                                    // 4. done reading the tiles
    }

    if (active) {                                           // 5. normalise and write
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
        for (int c = 0; c < D; ++c)
            if (c < d) O[q_at + c] = o[c] * inv_l;
        LSE[(long long)b * Tq + row] = l > 0.0f ? m + logf(l) : fa_inf();
    }
}
