// matmul_wmma.cu — tensor cores by hand: an FP16-in, FP32-accumulate GEMM on WMMA fragments.
//
//   C = A @ B,   A: (M, K) float16,  B: (K, N) float16,  C: (M, N) float32,  row-major.
//
// Read matmul_tiled.cu and matmul_regblock.cu first: this kernel has their three levels of
// tiling (grid -> block -> the smallest unit of work), but the smallest unit is no longer a
// thread's FMA. It is a WARP's 16 x 16 x 16 matrix product on the tensor cores.
//
// Tensor cores and nvcuda::wmma
// -----------------------------
// A tensor core multiplies small matrices in one instruction: on an H100 its FP16 products
// reach ~990 dense TFLOP/s, against ~67 TFLOP/s for FP32 FMAs on the CUDA cores. CUDA's WMMA
// API (#include <mma.h>, namespace nvcuda::wmma) exposes them to a warp as *fragments*:
//
//   fragment<matrix_a, 16, 16, 16, half, row_major> a;     a 16 x 16 tile of A
//   fragment<matrix_b, 16, 16, 16, half, row_major> b;     a 16 x 16 tile of B
//   fragment<accumulator, 16, 16, 16, float> acc;          a 16 x 16 tile of C, in FP32
//   fill_fragment(acc, 0.0f);
//   load_matrix_sync(a, pointer, ldm);                     ldm: elements from one row to the next
//   mma_sync(acc, a, b, acc);                              acc += a @ b  (16 * 16 * 16 FMAs)
//   store_matrix_sync(pointer, acc, ldm, mem_row_major);
//
// Every one of these is WARP-COLLECTIVE: all 32 threads of the warp call it with the same
// arguments, and the 256 values of a fragment are spread over their registers (8 each) in a
// layout CUDA does not specify. No thread owns "element (i, j)": the warp owns the tile. The
// products are exact (an FP16 times an FP16 fits in an FP32) and are summed in FP32.
//
// The three levels of tiling
// --------------------------
//   grid  : one block per BM x BN = 128 x 128 tile of C
//   block : 8 warps (256 threads) in a WARPS_M x WARPS_N = 2 x 4 grid; per k-step the block
//           stages a BM x BK = 128 x 32 tile of A and a BK x BN = 32 x 128 tile of B in
//           shared memory
//   warp  : a WM x WN = 64 x 32 tile of C: FM x FN = 4 x 2 accumulator fragments of 16 x 16.
//           Per 16-deep slice of the shared tiles it loads FM fragments of A and FN of B and
//           does FM * FN = 8 mma_sync: each fragment of A is used FN times, each of B FM times
//           (the register blocking of matmul_regblock.cu, one level up).
//
//                   BN = 128 columns: 4 warps across, WN = 32 (2 fragments) each
//                 +-------+-------+-------+-------+
//      BM = 128   | w0    | w1    | w2    | w3    |   each warp: 4 x 2 fragments of 16 x 16
//      2 warps    +-------+-------+-------+-------+
//      down       | w4    | w5    | w6    | w7    |   warp w: row w / 4, column w % 4
//                 +-------+-------+-------+-------+
//
// Loads, padding and alignment
// ----------------------------
// Each thread moves its share of the tiles global -> shared as 16-byte loads (8 halves: the
// wrapper asks K % 8 == 0 and N % 8 == 0 and pads with zeros otherwise; rows beyond M load 0).
// A row of a shared tile is padded by 8 halves (AS_LD = BK + 8, BS_LD = BN + 8) so that the 16
// rows a fragment load reads start in different banks. WMMA asks ldm to be a multiple of 8 for
// half (16 bytes) and the tile pointer to be 32-byte aligned: both hold for every fragment below
// (the emulator in tests/ checks them).
//
// The output goes through shared memory: each warp stores one accumulator fragment at a time
// into its own 16 x 16 scratch (Cs[warp]) and its lanes copy it to C as float4s, skipping rows
// and columns outside C. That handles the ragged edges of C, which store_matrix_sync alone
// cannot.
//
// What it leaves out (and cuBLAS does not): cp.async copies that overlap the next tiles with
// the products, double buffering, and on Hopper the wgmma instructions (a warpgroup of 128
// threads, operands read straight from shared memory, asynchronous) that reach the last
// factor of two; mma.sync PTX gives control over the fragment layout that WMMA hides.
//
// Launch geometry (launch_config("wmma", M, N, K)):
//   block = (256, 1, 1)
//   grid  = (ceil(N / 128), ceil(M / 128), 1)
//   shared_mem = 0 dynamic bytes; (BM * AS_LD + BK * BS_LD) * 2 + 8 * 16 * 16 * 4 B static
//                (27 KiB).

#include <mma.h>
using namespace nvcuda;

#define WMMA_M 16
#define WMMA_N 16
#define WMMA_K 16
#define BM 128
#define BN 128
#define BK 32
#define WARPS_M 2
#define WARPS_N 4
#define WM (BM / WARPS_M)                     // 64 rows of C per warp
#define WN (BN / WARPS_N)                     // 32 columns of C per warp
#define FM (WM / WMMA_M)                      // 4 fragments down
#define FN (WN / WMMA_N)                      // 2 fragments across
#define NUM_WARPS (WARPS_M * WARPS_N)         // 8
#define NUM_THREADS (32 * NUM_WARPS)          // 256
#define AS_LD (BK + 8)                        // halves per row of As (8 of them padding)
#define BS_LD (BN + 8)                        // halves per row of Bs (8 of them padding)
#define LOADS_A (BM * BK / 8 / NUM_THREADS)   // 16-byte chunks of the A tile per thread (2)
#define LOADS_B (BK * BN / 8 / NUM_THREADS)   // 16-byte chunks of the B tile per thread (2)
static_assert(LOADS_A * NUM_THREADS * 8 == BM * BK && LOADS_B * NUM_THREADS * 8 == BK * BN,
              "the threads of a block must split the tiles into whole 16-byte chunks");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
matmul_wmma(const half* __restrict__ A,   // (M, K) input, K % 8 == 0, 16-byte aligned
            const half* __restrict__ B,   // (K, N) input, N % 8 == 0, 16-byte aligned
            float* __restrict__ C,        // (M, N) output
            int M, int N, int K)
{
    __shared__ __align__(32) half As[BM * AS_LD];                // A tile: [m * AS_LD + k]
    __shared__ __align__(32) half Bs[BK * BS_LD];                // B tile: [k * BS_LD + n]
    __shared__ __align__(32) float Cs[NUM_WARPS][WMMA_M * WMMA_N];   // each warp's output scratch

    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / WARPS_N;          // 0..1: which 64 rows of the block tile
    const int warpCol = warp % WARPS_N;          // 0..3: which 32 columns
    const int blockRow = blockIdx.y * BM, blockCol = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, WMMA_M, WMMA_N, WMMA_K, float> acc[FM][FN];
    wmma::fragment<wmma::matrix_a, WMMA_M, WMMA_N, WMMA_K, half, wmma::row_major> a[FM];
    wmma::fragment<wmma::matrix_b, WMMA_M, WMMA_N, WMMA_K, half, wmma::row_major> b[FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += BK) {
        // 1. global -> shared, 16 bytes (8 halves) at a time; zeros outside A and B
#pragma unroll
        for (int i = 0; i < LOADS_A; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int r = f / (BK / 8), c = (f % (BK / 8)) * 8;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);   // 8 halves of zero bits
            if (blockRow + r < M && k0 + c < K)
                v = *reinterpret_cast<const float4*>(&A[(blockRow + r) * K + k0 + c]);
            *reinterpret_cast<float4*>(&As[r * AS_LD + c]) = v;
        }
#pragma unroll
        for (int i = 0; i < LOADS_B; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int r = f / (BN / 8), c = (f % (BN / 8)) * 8;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (k0 + r < K && blockCol + c < N)
                v = *reinterpret_cast<const float4*>(&B[(k0 + r) * N + blockCol + c]);
            *reinterpret_cast<float4*>(&Bs[r * BS_LD + c]) = v;
        }
        __syncthreads();                                          // 2. the tiles are complete

        // 3. tensor cores: per 16-deep slice, FM fragments of A, FN of B, FM * FN products
#pragma unroll
        for (int kk = 0; kk < BK; kk += WMMA_K) {
#pragma unroll
            for (int i = 0; i < FM; ++i)
                wmma::load_matrix_sync(a[i], &As[(warpRow * WM + i * WMMA_M) * AS_LD + kk], AS_LD);
#pragma unroll
            for (int j = 0; j < FN; ++j)
                wmma::load_matrix_sync(b[j], &Bs[kk * BS_LD + warpCol * WN + j * WMMA_N], BS_LD);
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();                                          // 4. done reading the tiles
    }

    // 5. fragments -> global, one at a time through the warp's scratch (ragged edges skipped)
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(Cs[warp], acc[i][j], WMMA_N, wmma::mem_row_major);
            __syncwarp();                        // the whole tile is in Cs before lanes read it
            const int row0 = blockRow + warpRow * WM + i * WMMA_M;
            const int col0 = blockCol + warpCol * WN + j * WMMA_N;
            for (int e = lane * 4; e < WMMA_M * WMMA_N; e += 32 * 4) {   // 2 float4s per lane
                const int r = row0 + e / WMMA_N, c = col0 + e % WMMA_N;
                if (r < M && c < N)
                    *reinterpret_cast<float4*>(&C[r * N + c]) =
                        *reinterpret_cast<const float4*>(&Cs[warp][e]);
            }
            __syncwarp();                        // every lane has read Cs before it is reused
        }
    }
}
