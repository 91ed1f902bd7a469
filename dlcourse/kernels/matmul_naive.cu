// matmul_naive.cu — rung 1 of the matmul ladder: one thread per output element.
//
//   C = A @ B,   A: (M, K),  B: (K, N),  C: (M, N),   float32, row-major (C-contiguous).
//   Element (i, j) of a row-major matrix with `cols` columns lives at  ptr[i * cols + j].
//
// The CUDA execution model in one paragraph
// -----------------------------------------
// A kernel launch starts a *grid* of *blocks*; every block is a group of *threads*
// (here 32 x 32 = 1024, the most a block may hold). Each thread runs the function below
// with its own `threadIdx` (position inside its block) and `blockIdx` (position of its block
// inside the grid). The hardware runs threads in *warps* of 32 consecutive threads
// (consecutive `threadIdx.x` first), and a warp issues one memory instruction for all 32
// threads at once. When the 32 addresses sit side by side in memory the warp needs a few
// 32-byte sectors: the access is *coalesced*. When they are far apart, each thread needs
// its own sector and most of every sector fetched is thrown away.
//
// The mapping used here (the teaching baseline)
// ---------------------------------------------
//   row = blockIdx.x * blockDim.x + threadIdx.x      <- x runs down the rows of C
//   col = blockIdx.y * blockDim.y + threadIdx.y
// The 32 threads of a warp share `col` and have 32 *different rows*. In the inner loop
//   A[row * K + k]   the warp reads 32 addresses K floats apart    -> 32 sectors, uncoalesced
//   B[k * N + col]   the warp reads one address                    -> a broadcast
//   C[row * N + col] the warp writes 32 addresses N floats apart   -> uncoalesced
// Every thread also re-reads a whole row of A and a whole column of B from global memory:
// 2*K loads for 2*K flops. The kernel is bound by memory traffic, far below the chip's
// arithmetic peak. Rung 2 (matmul_coalesced.cu) changes only which index x runs along.
//
// Launch geometry (see dlcourse/kernels/matmul.py, launch_config("naive", M, N, K)):
//   block = (32, 32, 1)
//   grid  = (ceil(M / 32), ceil(N / 32), 1)
//   shared_mem = 0
// Threads that fall outside C (when M or N is not a multiple of 32) do nothing.
// Indices are 32-bit `int`: the Python wrapper checks that M*K, K*N and M*N fit.

extern "C" __global__ void matmul_naive(const float* __restrict__ A,   // (M, K) input
                                        const float* __restrict__ B,   // (K, N) input
                                        float* __restrict__ C,         // (M, N) output
                                        int M, int N, int K)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;          // this thread has no element of C

    float acc = 0.0f;                          // lives in a register
    for (int k = 0; k < K; ++k) {
        acc += A[row * K + k] * B[k * N + col];
    }
    C[row * N + col] = acc;
}
