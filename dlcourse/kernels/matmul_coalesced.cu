// matmul_coalesced.cu — rung 2 of the matmul ladder: the same arithmetic as rung 1,
// with the thread-to-element mapping turned around so that memory accesses coalesce.
//
//   C = A @ B,   A: (M, K),  B: (K, N),  C: (M, N),   float32, row-major.
//
// What changed from matmul_naive.cu: only the two index lines.
//   col = blockIdx.x * blockDim.x + threadIdx.x      <- x now runs ALONG a row of C
//   row = blockIdx.y * blockDim.y + threadIdx.y
// The 32 threads of a warp now share `row` and have 32 consecutive columns, so
//   B[k * N + col]    32 consecutive floats = 128 bytes  -> 4 sectors, fully used (coalesced)
//   A[row * K + k]    one address for the whole warp     -> a broadcast
//   C[row * N + col]  32 consecutive floats              -> coalesced store
// The amount of arithmetic is identical; the amount of memory traffic is not. On most GPUs
// this one change is worth several times the speed. Lesson: in CUDA, decide which index the
// fastest-varying thread index (threadIdx.x) walks along, and make it the one that walks
// along contiguous memory.
//
// Each thread still reads K values of A and K values of B for its 2*K flops; the caches
// catch much of the re-use, but we rely on luck. Rung 3 (matmul_tiled.cu) makes the re-use
// explicit with shared memory.
//
// Launch geometry (launch_config("coalesced", M, N, K)):
//   block = (32, 32, 1)
//   grid  = (ceil(N / 32), ceil(M / 32), 1)      <- x over columns, y over rows
//   shared_mem = 0

extern "C" __global__ void matmul_coalesced(const float* __restrict__ A,   // (M, K) input
                                            const float* __restrict__ B,   // (K, N) input
                                            float* __restrict__ C,         // (M, N) output
                                            int M, int N, int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;

    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}
