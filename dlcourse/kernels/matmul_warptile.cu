// matmul_warptile.cu — rung 5 of the ladder: C = A @ B with WARP tiling and float4
// (128-bit) shared-memory loads (Simon Boehm's SGEMM worklog, kernels 9 and 10).
//
// Read matmul_regblock.cu first: this kernel keeps its 128x128 block tile, its transposed A
// tile and its float4 global loads, and changes who computes which outputs.
//
// The idea: a third level of tiling, for the warp
// -----------------------------------------------
// regblock gives each THREAD an 8x8 micro-tile, threads laid out 16 x 16 over the block tile.
// A warp (32 consecutive threads) then covers two 8-row bands of 16 micro-tiles each: a
// 16 x 128 strip, which reads 16 rows of As and ALL 128 columns of Bs per k. Here each WARP
// owns a WM x WN = 64 x 32 tile of C (8 warps: 2 down, 4 across the 128 x 128 block tile), and
// its 32 lanes cover that tile in WMITER x WNITER = 2 x 2 sub-tiles of WSUBM x WSUBN = 32 x 16,
// each lane a TM x TN = 4 x 4 piece of every sub-tile (8 lanes down, 4 across):
//
//      block tile 128 x 128            warp tile 64 x 32            one sub-tile 32 x 16
//   +------+------+------+------+     +--------+--------+         lanes 0  1  2  3
//   | w0   | w1   | w2   | w3   |     | (0, 0) | (0, 1) |               4  5  6  7
//   +------+------+------+------+     +--------+--------+               ...
//   | w4   | w5   | w6   | w7   |     | (1, 0) | (1, 1) |               28 29 30 31
//   +------+------+------+------+     +--------+--------+         (4 x 4 outputs each)
//
// Per k, a warp reads 64 values of As and 32 of Bs (96, against regblock's 144), and each lane
// still does 64 FMAs on 16 operands held in registers. Fewer shared-memory reads per FMA, and
// the data a warp needs is compact, which is what the hardware schedules: the warp. (The same
// warp-tile layout is what tensor-core kernels use; matmul_wmma.cu's warps own 64 x 32 too.)
//
// Vectorised shared-memory loads
// ------------------------------
// A lane's TM = 4 rows of a sub-tile are 4 consecutive floats of a k-row of As (A is stored
// transposed, As[k][m]), and its TN = 4 columns are 4 consecutive floats of Bs: each is ONE
// float4 load from shared memory (LDS.128) instead of four 32-bit ones. The lanes that share a
// threadRowInWarp read the same float4 (a broadcast), so a warp's load of As touches 8 distinct
// float4s = 32 consecutive floats, one per bank: no bank conflicts.
//
// As has AS_STRIDE = BM + 4 floats per k-row: the transposed stores of the A tile (4 floats of
// one row of A to 4 k-rows of As) then fall in other banks for neighbouring threads (see "Bank
// conflicts" in matmul_regblock.cu). BM + 4 is still a multiple of 4, so every float4 of As
// stays 16-byte aligned.
//
// Registers: 64 accumulators + 16 operands + addresses. `nvcc -arch=sm_90 -cubin -Xptxas -v`
// (CUDA 13.0) reports 119 registers and no spills, so two blocks of 256 threads fit on an SM
// (the nvcc test in tests/test_kernels.py checks that it does not spill). Ragged edges as in regblock: any M; K % 4 == 0 and
// N % 4 == 0 (the wrapper pads otherwise).
//
// Launch geometry (launch_config("warptile", M, N, K)):
//   block = (NUM_THREADS, 1, 1) = (256, 1, 1): 8 warps
//   grid  = (ceil(N / BN), ceil(M / BM), 1) = (ceil(N / 128), ceil(M / 128), 1)
//   shared_mem = 0 dynamic bytes; BK * (AS_STRIDE + BN) * 4 = 16 640 B declared statically.

#define BM 128          // block tile: rows of C
#define BN 128          // block tile: columns of C
#define BK 16           // depth of the tiles staged in shared memory
#define WM 64           // warp tile: rows of C
#define WN 32           // warp tile: columns of C
#define WMITER 2        // sub-tiles of a warp tile, down
#define WNITER 2        // sub-tiles of a warp tile, across
#define TM 4            // rows of a sub-tile per lane (one float4 of As)
#define TN 4            // columns of a sub-tile per lane (one float4 of Bs)
#define WSUBM (WM / WMITER)                       // 32
#define WSUBN (WN / WNITER)                       // 16
#define NUM_WARPS ((BM / WM) * (BN / WN))         // 8
#define NUM_THREADS (32 * NUM_WARPS)              // 256
#define AS_STRIDE (BM + 4)                        // floats per k-row of As (4 of them padding)
#define LOADS_A (BM * BK / 4 / NUM_THREADS)       // float4s of the A tile per thread: 2
#define LOADS_B (BK * BN / 4 / NUM_THREADS)       // float4s of the B tile per thread: 2
static_assert((WSUBM / TM) * (WSUBN / TN) == 32, "the 32 lanes of a warp must tile a sub-tile");
static_assert(LOADS_A * NUM_THREADS * 4 == BM * BK && LOADS_B * NUM_THREADS * 4 == BK * BN,
              "the threads of a block must split the tiles into whole float4s");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
matmul_warptile(const float* __restrict__ A,   // (M, K) input, K % 4 == 0, 16-byte aligned
                const float* __restrict__ B,   // (K, N) input, N % 4 == 0, 16-byte aligned
                float* __restrict__ C,         // (M, N) output
                int M, int N, int K)
{
    __shared__ __align__(16) float As[BK * AS_STRIDE];   // A tile, transposed: [k * AS_STRIDE + m]
    __shared__ __align__(16) float Bs[BK * BN];          // B tile:             [k * BN + n]

    const int tid = threadIdx.x;                 // 0..255
    const int blockRow = blockIdx.y * BM;        // first row of C owned by this block
    const int blockCol = blockIdx.x * BN;        // first column of C owned by this block

    // Which warp tile, and where this lane sits in each of its sub-tiles.
    const int warp = tid / 32, lane = tid % 32;
    const int warpRow = warp / (BN / WN);        // 0..1
    const int warpCol = warp % (BN / WN);        // 0..3
    const int laneRow = lane / (WSUBN / TN);     // 0..7
    const int laneCol = lane % (WSUBN / TN);     // 0..3
    // Row i (0..TM-1) of sub-tile wm, and column j of sub-tile wn, inside the block tile:
    //   warpRow * WM + wm * WSUBM + laneRow * TM + i,   warpCol * WN + wn * WSUBN + laneCol * TN + j

    float acc[WMITER * TM][WNITER * TN];         // 8 x 8 = 64 accumulators
#pragma unroll
    for (int i = 0; i < WMITER * TM; ++i)
#pragma unroll
        for (int j = 0; j < WNITER * TN; ++j) acc[i][j] = 0.0f;
    float4 regM[WMITER], regN[WNITER];           // this lane's operands for one k

    for (int k0 = 0; k0 < K; k0 += BK) {
        // ---- global -> shared: float4 f = tid + i * NUM_THREADS of each tile ---------------
#pragma unroll
        for (int i = 0; i < LOADS_A; ++i) {      // A goes in transposed: As[k][m]
            const int f = tid + i * NUM_THREADS;
            const int aRow = f / (BK / 4), aCol = (f % (BK / 4)) * 4;   // 0..127, 0..12
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (blockRow + aRow < M && k0 + aCol < K)
                v = *reinterpret_cast<const float4*>(&A[(blockRow + aRow) * K + k0 + aCol]);
            As[(aCol + 0) * AS_STRIDE + aRow] = v.x;
            As[(aCol + 1) * AS_STRIDE + aRow] = v.y;
            As[(aCol + 2) * AS_STRIDE + aRow] = v.z;
            As[(aCol + 3) * AS_STRIDE + aRow] = v.w;
        }
#pragma unroll
        for (int i = 0; i < LOADS_B; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int bRow = f / (BN / 4), bCol = (f % (BN / 4)) * 4;   // 0..15, 0..124
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (k0 + bRow < K && blockCol + bCol < N)
                v = *reinterpret_cast<const float4*>(&B[(k0 + bRow) * N + blockCol + bCol]);
            *reinterpret_cast<float4*>(&Bs[bRow * BN + bCol]) = v;
        }
        __syncthreads();                         // 1. the tiles are complete

        // ---- shared -> registers (float4 loads) -> 64 FMAs per k -------------------------
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm)
                regM[wm] = *reinterpret_cast<const float4*>(
                    &As[k * AS_STRIDE + warpRow * WM + wm * WSUBM + laneRow * TM]);
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn)
                regN[wn] = *reinterpret_cast<const float4*>(
                    &Bs[k * BN + warpCol * WN + wn * WSUBN + laneCol * TN]);
#pragma unroll
            for (int wm = 0; wm < WMITER; ++wm) {
                const float a[TM] = {regM[wm].x, regM[wm].y, regM[wm].z, regM[wm].w};
#pragma unroll
                for (int wn = 0; wn < WNITER; ++wn) {
                    const float b[TN] = {regN[wn].x, regN[wn].y, regN[wn].z, regN[wn].w};
#pragma unroll
                    for (int i = 0; i < TM; ++i)
#pragma unroll
                        for (int j = 0; j < TN; ++j)
                            acc[wm * TM + i][wn * TN + j] += a[i] * b[j];   // outer product
                }
            }
        }
        __syncthreads();                         // 2. everyone is done reading the tiles
    }

    // ---- registers -> global: each 4 x 4 piece, one float4 (a row of 4) at a time ---------
#pragma unroll
    for (int wm = 0; wm < WMITER; ++wm)
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int r = blockRow + warpRow * WM + wm * WSUBM + laneRow * TM + i;
            if (r >= M) continue;
#pragma unroll
            for (int wn = 0; wn < WNITER; ++wn) {
                const int c = blockCol + warpCol * WN + wn * WSUBN + laneCol * TN;
                const float* v = &acc[wm * TM + i][wn * TN];
                if (c < N) *reinterpret_cast<float4*>(&C[r * N + c]) = make_float4(v[0], v[1], v[2], v[3]);
            }
        }
}
