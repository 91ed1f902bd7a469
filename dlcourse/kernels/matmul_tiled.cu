// matmul_tiled.cu — rung 3 of the matmul ladder: shared-memory tiling.
//
//   C = A @ B,   A: (M, K),  B: (K, N),  C: (M, N),   float32, row-major.
//
// The idea
// --------
// In rung 2 every thread streams a full row of A and a full column of B from global memory
// (DRAM, behind the L2 cache). But the 32 threads of one block-row all need the *same* row
// of A, and the 32 threads of one block-column the *same* column of B. Shared memory is a
// small (up to ~228 KiB per SM on an H100) on-chip scratchpad that all threads of one block
// can read and write, about as fast as the L1 cache. So each block works through K in steps
// of TILE:
//
//     for each k-tile:
//         1. every thread loads ONE element of A's tile and ONE of B's tile into shared memory
//            (the loads are coalesced: threadIdx.x walks along a row)
//         2. __syncthreads()   -- wait until the whole tile is in shared memory
//         3. every thread does TILE multiply-adds reading only shared memory
//         4. __syncthreads()   -- wait until everyone is done before the tile is overwritten
//
//            K                        N
//       +---------+           +----+====+----+
//     M |  A      |         K |    | Bs |    |      Bs: TILE x TILE tile of B
//       |=========|  x        |    | ↓  |    |      As: TILE x TILE tile of A
//       |As → → → |           +----+====+----+      both slide along K together
//       +---------+
//
// Each element loaded from global memory is now used TILE = 32 times from shared memory:
// global traffic drops 32-fold. What limits us next is that every multiply-add still needs
// two shared-memory loads (As[ty][k] and Bs[k][tx]) — shared memory is fast but not as fast
// as registers. Rung 4 (matmul_regblock.cu) keeps data in registers too.
//
// Bank conflicts: shared memory is split into 32 banks (consecutive 4-byte words go to
// consecutive banks). In step 3 a warp (fixed ty, tx = 0..31) reads As[ty][k] — one address,
// broadcast — and Bs[k][tx] — 32 consecutive words, 32 different banks. No conflicts.
//
// Ragged edges: when M, N or K is not a multiple of TILE, the loads outside the matrix put
// 0 into the tile (0 adds nothing to a dot product) and threads outside C store nothing.
//
// Launch geometry (launch_config("tiled", M, N, K)):
//   block = (TILE, TILE, 1) = (32, 32, 1)            one thread per element of a C tile
//   grid  = (ceil(N / TILE), ceil(M / TILE), 1)
//   shared_mem = 0 dynamic bytes; the kernel declares 2 * 32 * 32 * 4 B = 8 KiB statically.

#define TILE 32

extern "C" __global__ void matmul_tiled(const float* __restrict__ A,   // (M, K) input
                                        const float* __restrict__ B,   // (K, N) input
                                        float* __restrict__ C,         // (M, N) output
                                        int M, int N, int K)
{
    __shared__ float As[TILE][TILE];   // the current tile of A: rows of C x a slice of K
    __shared__ float Bs[TILE][TILE];   // the current tile of B: a slice of K x columns of C

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;      // the element of C this thread owns
    const int col = blockIdx.x * TILE + tx;

    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // 1. cooperative, coalesced load of one tile of A and one tile of B (0 outside)
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + (k0 + tx)] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
        __syncthreads();                          // 2. the tiles are complete

#pragma unroll
        for (int k = 0; k < TILE; ++k) {          // 3. TILE multiply-adds from shared memory
            acc += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();                          // 4. done reading before the next load
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
