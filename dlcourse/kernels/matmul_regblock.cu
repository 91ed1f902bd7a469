// matmul_regblock.cu — rung 4 of the matmul ladder: 2-D register blocking with float4 loads.
//
//   C = A @ B,   A: (M, K),  B: (K, N),  C: (M, N),   float32, row-major.
//
// After the approach of Simon Boehm, "How to Optimize a CUDA Matmul Kernel for cuBLAS-like
// Performance" (siboehm.com, 2022), kernels 5 and 6. Read it beside this file.
//
// Why rung 3 is still slow
// ------------------------
// In matmul_tiled.cu each thread computes ONE element of C, so each multiply-add needs two
// loads from shared memory. The SM can issue far more FMAs per cycle than shared-memory loads,
// so the kernel waits on shared memory. The cure: let each thread compute a small TM x TN
// *micro-tile* of C (here 8 x 8 = 64 outputs held in 64 registers). For every step along K the
// thread loads TM values of A and TN values of B into registers and does TM * TN FMAs with
// them: 16 loads for 64 FMAs instead of 2 loads per FMA. That ratio ("arithmetic intensity")
// is the whole game in dense linear algebra.
//
// The three levels of tiling
// --------------------------
//   grid  : one block per BM x BN = 128 x 128 tile of C           (global memory -> L2)
//   block : 256 threads; per step it stages a BM x BK = 128 x 8 tile of A and a BK x BN = 8 x 128
//           tile of B in shared memory                            (L2 -> shared memory)
//   thread: a TM x TN = 8 x 8 micro-tile of C in registers; (BM/TM) * (BN/TN) = 16 * 16 = 256
//           threads cover the block tile                          (shared memory -> registers)
//
//                 BN = 128 columns of C, 16 threads across, 8 columns each
//               +--+--+--+--+ ... +--+
//      BM = 128 |t0|t1|t2|t3|     |t15|    each cell = one thread's 8 x 8 micro-tile
//      rows,    +--+--+--+--+ ... +--+
//      16 down  |t16 ...             |
//               ...
//
// Vectorized loads (float4)
// -------------------------
// A `float4` is 16 bytes; loading one is a single 128-bit instruction instead of four 32-bit
// ones. It needs a 16-byte-aligned address, so the Python wrapper asks for K % 4 == 0 and
// N % 4 == 0 (every row then starts on a 16-byte boundary) and pads the matrices with zeros
// when that does not hold. Per k-step the block loads BM * BK / 4 float4s of A and
// BK * BN / 4 of B, the 256 threads taking them in turn: with BK = 8 that is exactly one
// float4 of A (128 x 8 = 1024 floats) and one of B (8 x 128 = 1024 floats) per thread. Each
// goes global -> registers -> shared (load() and store() below).
//
// A is stored *transposed* in shared memory (As[k][m]): then the TM = 8 values of A a thread
// needs for one k are contiguous, just like its TN = 8 values of B, and the compiler can read
// both with 128-bit shared-memory loads.
//
// Bank conflicts
// --------------
// Shared memory is 32 *banks*, 4 bytes wide: word w lives in bank w % 32, and each bank
// serves one word per pass. In a simplified model, a warp's request takes as many passes as
// the most DIFFERENT words any one bank must deliver (threads reading the SAME word share it:
// a broadcast). In the default build the 16 threads along a warp read B at columns
// threadCol * 8: the first float4 of each is words 0-3, 8-11, ..., 120-123, so banks 0-3 serve
// words 0, 32, 64 and 96 in four passes, where 64 words could come in two. The transposed
// store of A has a 2-way conflict of its own (4-way at BK = 16). Kernel 6 in the article
// accepts both. AVOID_CONFLICTS (below) halves them: a thread's 8 columns become two groups of
// 4, BN / 2 = 64 apart, so the 16 threads read 64 consecutive words (two passes, the fewest);
// and each k-row of As gets 4 words of padding, which moves the stores of neighbouring threads
// into different banks: one pass at BK = 8; two at BK = 16, the best any padding can do that
// keeps the rows 16-byte aligned for the float4 reads (with 4 words it shifts the k-rows
// aCol = 0, 4, 8, 12 by 0, 16, 0, 16 banks; with any multiple of 4, k-row 8 lands on the banks
// of k-row 0). Real GPUs serve a 128-bit request in several
// parts, so a profiler counts more passes than this model; for these layouts the ratio
// between the two builds is the same.
//
// Registers and occupancy
// -----------------------
// 64 accumulators + 16 operands + addresses: roughly 100-128 registers per thread. An SM has
// 65 536 registers, so about two blocks of 256 threads fit at once (occupancy ~ 25%). That is
// fine: each thread has plenty of independent FMAs to hide latency (instruction-level
// parallelism instead of thread-level parallelism). __launch_bounds__(256) tells the compiler
// the block size so it may use registers up to that limit. The compiler has the last word:
// `nvcc -arch=sm_90 -cubin -Xptxas -v` (CUDA 13.0) reports 127 registers for the default
// build, so two blocks fit, and 147 at BK = 16, so one does. Asking for two blocks there
// (__launch_bounds__(256, 2)) alone makes it spill registers to local memory, which is worse;
// with the k-loop unrolled twice instead of fully it fits in 125 registers, no spill
// (TWO_BLOCKS below). The nvcc test in tests/test_kernels.py checks that no build spills.
//
// Ragged edges: M may be anything (rows beyond M load 0 and store nothing); K and N must be
// multiples of 4 (a float4 is then either wholly inside the matrix or wholly outside).
//
// Tuning: BK, PREFETCH, DOUBLE_BUFFER, AVOID_CONFLICTS, TWO_BLOCKS
// -----------------------------------------------------------------
// The best choices depend on the GPU, so fast kernels are *tuned*: built several ways and
// timed. Five compile-time constants may be overridden by the build (NVRTC options -DBK=16,
// -DPREFETCH=1, ..., as matmul_regblock(A, B, bk=16, prefetch=True) does;
// benchmarks/gpu_suite.py times every combination, REGBLOCK_TUNINGS in matmul.py):
//   BK: a deeper tile does twice the FMAs per k-step (between waits at __syncthreads()) and
//       halves the number of k-steps, for twice the shared memory. Simon Boehm's autotuning (kernel 9 of the
//       article) picked BK = 16 on his GPU.
//   PREFETCH: each thread moves its share of the tiles global -> registers -> shared. With
//       PREFETCH = 1 it issues the loads of the NEXT tiles before computing on the current
//       ones, so they travel while the FMAs run (latency hidden inside each thread, as the
//       micro-tile hides it for shared memory), at the cost of the registers that hold them
//       across the computation (fewer registers left may mean fewer blocks per SM; with
//       CUDA 13.0 ptxas reports the same count either way).
//   DOUBLE_BUFFER (needs PREFETCH): two copies of each shared tile. The FMAs read one while
//       the prefetched next tiles are stored into the other, so a k-step needs one
//       __syncthreads() instead of two; costs twice the shared memory.
//   AVOID_CONFLICTS: the layout with fewer bank conflicts described above.
//   TWO_BLOCKS (at BK = 16): asks the compiler for registers enough for two blocks per SM
//       (__launch_bounds__(256, 2): at most 128 per thread) and unrolls the k-loop twice
//       instead of BK times, so that it fits without spilling. Twice the warps to hide
//       latency with, against less independent work per thread: which wins is measured.
//
// Launch geometry (launch_config("regblock", M, N, K, **tuning)):
//   block = (256, 1, 1)
//   grid  = (ceil(N / 128), ceil(M / 128), 1)
//   shared_mem = 0 dynamic bytes; STAGES * BK * (AS_STRIDE + BN) * 4 B declared statically
//                (8 KiB for BK = 8 without DOUBLE_BUFFER or AVOID_CONFLICTS).

#define BM 128
#define BN 128
#ifndef BK
#define BK 8
#endif
#define TM 8
#define TN 8
#ifndef PREFETCH
#define PREFETCH 0
#endif
#ifndef DOUBLE_BUFFER
#define DOUBLE_BUFFER 0
#endif
#ifndef AVOID_CONFLICTS
#define AVOID_CONFLICTS 0
#endif
#ifndef TWO_BLOCKS
#define TWO_BLOCKS 0
#endif
#if TWO_BLOCKS
#define K_LOOP_UNROLL _Pragma("unroll 2")    // fewer registers live at once: fits in 128
#else
#define K_LOOP_UNROLL _Pragma("unroll")      // all BK steps unrolled
#endif
#define STAGES (DOUBLE_BUFFER ? 2 : 1)              // copies of each shared tile
#define AS_STRIDE (BM + (AVOID_CONFLICTS ? 4 : 0))  // floats per k-row of As (4 of them padding)
#define NUM_THREADS ((BM / TM) * (BN / TN))   // 256
#define LOADS_A (BM * BK / 4 / NUM_THREADS)   // float4s of the A tile per thread (1 at BK = 8)
#define LOADS_B (BK * BN / 4 / NUM_THREADS)   // float4s of the B tile per thread (1 at BK = 8)
static_assert(LOADS_A * NUM_THREADS * 4 == BM * BK && LOADS_B * NUM_THREADS * 4 == BK * BN,
              "the threads of a block must split the tiles into whole float4s");
static_assert(PREFETCH || !DOUBLE_BUFFER, "DOUBLE_BUFFER stores the prefetched tiles: it needs PREFETCH");

extern "C" __global__ void __launch_bounds__(NUM_THREADS, TWO_BLOCKS ? 2 : 1)
matmul_regblock(const float* __restrict__ A,   // (M, K) input, K % 4 == 0, 16-byte aligned
                const float* __restrict__ B,   // (K, N) input, N % 4 == 0, 16-byte aligned
                float* __restrict__ C,         // (M, N) output
                int M, int N, int K)
{
    // 16-byte aligned: Bs is written with float4 stores, and both are read 4 floats at a time.
    __shared__ __align__(16) float As[STAGES][BK * AS_STRIDE];   // A tile, transposed: [k * AS_STRIDE + m]
    __shared__ __align__(16) float Bs[STAGES][BK * BN];          // B tile:             [k * BN + n]

    const int tid = threadIdx.x;                 // 0..255
    const int blockRow = blockIdx.y * BM;        // first row of C owned by this block
    const int blockCol = blockIdx.x * BN;        // first column of C owned by this block

    // The 8 x 8 micro-tile of C this thread computes (inside the block tile).
    const int threadRow = tid / (BN / TN);       // 0..15
    const int threadCol = tid % (BN / TN);       // 0..15
    // Column j (0..TN-1) of the micro-tile, inside the block tile: threadCol * 8 + j, or with
    // AVOID_CONFLICTS two groups of 4, BN / 2 apart: threadCol * 4 + j, 64 + threadCol * 4 + j - 4.
    auto col = [&](int j) {
        return AVOID_CONFLICTS ? (j / 4) * (BN / 2) + threadCol * 4 + j % 4 : threadCol * TN + j;
    };

    float acc[TM][TN];                           // the micro-tile: 64 registers
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;
    float regA[TM];                              // a column slice of A (TM values)
    float regB[TN];                              // a row slice of B (TN values)

    // ---- global -> registers -> shared: this thread's float4s of the tiles at k0 ----------
    // Thread tid takes float4 number f = tid + i * 256 of each tile (i < LOADS_A, LOADS_B).
    float4 aNext[LOADS_A], bNext[LOADS_B];       // on their way from global memory
    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < LOADS_A; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int r = blockRow + f / (BK / 4), c = k0 + (f % (BK / 4)) * 4;
            aNext[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < M && c < K) aNext[i] = *reinterpret_cast<const float4*>(&A[r * K + c]);
        }
#pragma unroll
        for (int i = 0; i < LOADS_B; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int r = k0 + f / (BN / 4), c = blockCol + (f % (BN / 4)) * 4;
            bNext[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < K && c < N) bNext[i] = *reinterpret_cast<const float4*>(&B[r * N + c]);
        }
    };
    auto store = [&](int s) {                    // into copy s of the shared tiles
#pragma unroll
        for (int i = 0; i < LOADS_A; ++i) {      // A goes in transposed: As[k][m]
            const int f = tid + i * NUM_THREADS;
            const int aRow = f / (BK / 4);       // 0..127  (BK / 4 float4s per row of the A tile)
            const int aCol = (f % (BK / 4)) * 4; // 0, 4, ..., BK - 4
            As[s][(aCol + 0) * AS_STRIDE + aRow] = aNext[i].x;
            As[s][(aCol + 1) * AS_STRIDE + aRow] = aNext[i].y;
            As[s][(aCol + 2) * AS_STRIDE + aRow] = aNext[i].z;
            As[s][(aCol + 3) * AS_STRIDE + aRow] = aNext[i].w;
        }
#pragma unroll
        for (int i = 0; i < LOADS_B; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int bRow = f / (BN / 4);       // 0..BK-1 (32 float4s per row of the B tile)
            const int bCol = (f % (BN / 4)) * 4; // 0, 4, ..., 124
            *reinterpret_cast<float4*>(&Bs[s][bRow * BN + bCol]) = bNext[i];
        }
    };

    // Each k-step: the tiles at k0 go to shared memory (store), every thread waits for them
    // (__syncthreads), the FMAs read them, and every thread waits again before the tiles are
    // overwritten. With DOUBLE_BUFFER the FMAs read copy s while the next tiles go to copy
    // s ^ 1, which nobody reads during this step: one wait per step.
    load(0);
    int s = 0;                                   // the copy of the shared tiles the FMAs read
    if (DOUBLE_BUFFER) { store(0); __syncthreads(); }
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;           // is there a next k-step?
        if (!DOUBLE_BUFFER) { store(0); __syncthreads(); }
        if (PREFETCH && more) load(k0 + BK);     // the next tiles travel during the FMAs

        // ---- shared -> registers -> TM * TN FMAs per k ------------------------------------
        K_LOOP_UNROLL
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) regA[i] = As[s][k * AS_STRIDE + threadRow * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) regB[j] = Bs[s][k * BN + col(j)];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regA[i] * regB[j];  // outer product
        }
        if (DOUBLE_BUFFER) {
            if (more) store(s ^ 1);              // the other copy: its last readers were
            s ^= 1;                              // released by the previous step's wait
        }
        __syncthreads();
        if (!PREFETCH && more) load(k0 + BK);    // without prefetch: load, then wait
    }

    // ---- registers -> global: the micro-tile, one float4 (4 columns) at a time ------------
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = blockRow + threadRow * TM + i;
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int c = blockCol + col(j);
            if (c < N) {
                *reinterpret_cast<float4*>(&C[r * N + c]) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            }
        }
    }
}
