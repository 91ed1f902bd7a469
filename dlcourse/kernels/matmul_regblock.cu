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
// both with 128-bit shared-memory loads. (The transposed store costs a 2-way bank conflict;
// kernel 6 in the article accepts it, and so do we.)
//
// Registers and occupancy
// -----------------------
// 64 accumulators + 16 operands + addresses: roughly 100-128 registers per thread. An SM has
// 65 536 registers, so about two blocks of 256 threads fit at once (occupancy ~ 25%). That is
// fine: each thread has plenty of independent FMAs to hide latency (instruction-level
// parallelism instead of thread-level parallelism). __launch_bounds__(256) tells the compiler
// the block size so it may use registers up to that limit.
//
// Ragged edges: M may be anything (rows beyond M load 0 and store nothing); K and N must be
// multiples of 4 (a float4 is then either wholly inside the matrix or wholly outside).
//
// Tuning: BK and PREFETCH
// -----------------------
// The best choices depend on the GPU, so fast kernels are *tuned*: built several ways and
// timed. Two compile-time constants may be overridden by the build (NVRTC options -DBK=16,
// -DPREFETCH=1, as matmul_regblock(A, B, bk=16, prefetch=True) does; benchmarks/gpu_suite.py
// times every combination):
//   BK: a deeper tile does twice the FMAs between two __syncthreads() and halves the number of
//       k-steps, for twice the shared memory. Simon Boehm's autotuning (kernel 9 of the
//       article) picked BK = 16 on his GPU.
//   PREFETCH: each thread moves its share of the tiles global -> registers -> shared. With
//       PREFETCH = 1 it issues the loads of the NEXT tiles before computing on the current
//       ones, so they travel while the FMAs run (latency hidden inside each thread, as the
//       micro-tile hides it for shared memory), at the cost of the registers that hold them
//       across the computation (fewer registers left may mean fewer blocks per SM).
//
// Launch geometry (launch_config("regblock", M, N, K[, BK]); PREFETCH does not change it):
//   block = (256, 1, 1)
//   grid  = (ceil(N / 128), ceil(M / 128), 1)
//   shared_mem = 0 dynamic bytes; 2 * BK * 128 * 4 B declared statically (8 KiB for BK = 8).

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
#define NUM_THREADS ((BM / TM) * (BN / TN))   // 256
#define LOADS_A (BM * BK / 4 / NUM_THREADS)   // float4s of the A tile per thread (1 at BK = 8)
#define LOADS_B (BK * BN / 4 / NUM_THREADS)   // float4s of the B tile per thread (1 at BK = 8)
static_assert(LOADS_A * NUM_THREADS * 4 == BM * BK && LOADS_B * NUM_THREADS * 4 == BK * BN,
              "the threads of a block must split the tiles into whole float4s");

extern "C" __global__ void __launch_bounds__(NUM_THREADS)
matmul_regblock(const float* __restrict__ A,   // (M, K) input, K % 4 == 0, 16-byte aligned
                const float* __restrict__ B,   // (K, N) input, N % 4 == 0, 16-byte aligned
                float* __restrict__ C,         // (M, N) output
                int M, int N, int K)
{
    // 16-byte aligned: Bs is written with float4 stores, and both are read 4 floats at a time.
    __shared__ __align__(16) float As[BK * BM];   // A tile, transposed: As[k * BM + m]
    __shared__ __align__(16) float Bs[BK * BN];   // B tile:             Bs[k * BN + n]

    const int tid = threadIdx.x;                 // 0..255
    const int blockRow = blockIdx.y * BM;        // first row of C owned by this block
    const int blockCol = blockIdx.x * BN;        // first column of C owned by this block

    // The 8 x 8 micro-tile of C this thread computes (inside the block tile).
    const int threadRow = tid / (BN / TN);       // 0..15
    const int threadCol = tid % (BN / TN);       // 0..15

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
    auto store = [&]() {
#pragma unroll
        for (int i = 0; i < LOADS_A; ++i) {      // A goes in transposed: As[k][m]
            const int f = tid + i * NUM_THREADS;
            const int aRow = f / (BK / 4);       // 0..127  (BK / 4 float4s per row of the A tile)
            const int aCol = (f % (BK / 4)) * 4; // 0, 4, ..., BK - 4
            As[(aCol + 0) * BM + aRow] = aNext[i].x;
            As[(aCol + 1) * BM + aRow] = aNext[i].y;
            As[(aCol + 2) * BM + aRow] = aNext[i].z;
            As[(aCol + 3) * BM + aRow] = aNext[i].w;
        }
#pragma unroll
        for (int i = 0; i < LOADS_B; ++i) {
            const int f = tid + i * NUM_THREADS;
            const int bRow = f / (BN / 4);       // 0..BK-1 (32 float4s per row of the B tile)
            const int bCol = (f % (BN / 4)) * 4; // 0, 4, ..., 124
            *reinterpret_cast<float4*>(&Bs[bRow * BN + bCol]) = bNext[i];
        }
    };

    load(0);
    for (int k0 = 0; k0 < K; k0 += BK) {
        store();
        __syncthreads();
        if (PREFETCH && k0 + BK < K) load(k0 + BK);   // the next tiles travel during the FMAs

        // ---- shared -> registers -> TM * TN FMAs per k ------------------------------------
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) regA[i] = As[k * BM + threadRow * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) regB[j] = Bs[k * BN + threadCol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += regA[i] * regB[j];  // outer product
        }
        __syncthreads();
        if (!PREFETCH && k0 + BK < K) load(k0 + BK);  // without prefetch: load, then wait
    }

    // ---- registers -> global: the micro-tile, one float4 (4 columns) at a time ------------
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = blockRow + threadRow * TM + i;
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int c = blockCol + threadCol * TN + j;
            if (c < N) {
                *reinterpret_cast<float4*>(&C[r * N + c]) =
                    make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
            }
        }
    }
}
