// bias_relu.cu — a fused elementwise pair: bias + ReLU forward and its backward, in two
// layouts: bias along columns (a Linear layer's output, (N, F)), used by dl.LinearReLU, and
// bias along rows (a convolution's output matrix, (F, N*OH*OW)), used by dl.Conv2dReLU.
//
//   forward:   y[n, f]  = max(x[n, f] + b[f], 0)          x, y: (N, F),  b: (F,)
//   backward:  dx[n, f] = dout[n, f] * (y[n, f] > 0)       dout, y, dx: (N, F)
//              db[f]    = sum over n of dx[n, f]           db: (F,)
//
// Why fuse?
// ---------
// Elementwise work does one or two flops per element loaded, so its speed is set by memory
// bandwidth, not arithmetic. Written as two array operations, `t = x + b; y = maximum(t, 0)`
// reads x, writes t, reads t and writes y: 4 passes over N*F numbers. One kernel that does
// both reads x and writes y: 2 passes, so about twice as fast. Backward likewise reads dout and
// y once and produces both dx and the column sums that make db.
//
// Thread mapping (the same for both kernels)
// ------------------------------------------
//   block = (32, 8):  threadIdx.x walks along a row (32 consecutive columns: coalesced, one
//                     128-byte line per warp), threadIdx.y picks one of 8 rows.
//   grid  = (ceil(F / 32), G): blockIdx.x picks a strip of 32 columns; the G blocks in y split
//                     the N rows among them, each walking rows with a *grid-stride loop*
//                     (row += gridDim.y * blockDim.y), so any N works with a fixed grid.
// Each thread keeps one column for its whole life, so it loads b[f] once, and in backward it
// keeps a running sum of its dx values for db. No integer division or modulo in the loop.
// `#pragma unroll 4` lets the compiler issue the loads of 4 rows before waiting for the first:
// a memory-bound kernel is fast only when many loads are in flight at once (Little's law:
// bytes in flight = bandwidth x latency), and __restrict__ promises that y never overlaps x,
// so the loads may move ahead of the stores.
//
// Deterministic db without atomics
// --------------------------------
// The column sums are done in two steps. Inside a block, the 8 threadIdx.y rows add their
// partial sums in shared memory (a tiny tree reduction); thread y == 0 then writes ONE partial
// sum per (blockIdx.y, column) into `partial` (G, F). The Python wrapper finishes with
// partial.sum(axis=0). With atomicAdd into db the order of additions — and so the last bits of
// the float result — would change from run to run; this way every run gives the same bits.
//
// Templates: T is float or double. CuPy compiles the instantiations it is asked for by name
// ("bias_relu_forward<float>", ...) through RawModule(name_expressions=...).

template <typename T>
__global__ void bias_relu_forward(const T* __restrict__ x,   // (N, F) input
                                  const T* __restrict__ b,   // (F,)   bias
                                  T* __restrict__ y,         // (N, F) output
                                  long long N, int F)
{
    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    if (f >= F) return;
    const T bias = b[f];                                   // one load, reused for every row
#pragma unroll 4
    for (long long n = blockIdx.y * blockDim.y + threadIdx.y; n < N;
         n += (long long)gridDim.y * blockDim.y) {
        const T v = x[n * F + f] + bias;
        y[n * F + f] = v > T(0) ? v : T(0);
    }
}

// Block shape fixed by the wrapper: blockDim = (32, 8) — the shared buffer below relies on it.
#define BR_BX 32
#define BR_BY 8

template <typename T>
__global__ void bias_relu_backward(const T* __restrict__ dout,   // (N, F) upstream gradient
                                   const T* __restrict__ y,      // (N, F) forward output
                                   T* __restrict__ dx,           // (N, F) output
                                   T* __restrict__ partial,      // (gridDim.y, F) output
                                   long long N, int F)
{
    __shared__ T sums[BR_BY][BR_BX + 1];   // +1 column of padding: no bank conflicts below

    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    T acc = T(0);
    if (f < F) {
#pragma unroll 4
        for (long long n = blockIdx.y * blockDim.y + threadIdx.y; n < N;
             n += (long long)gridDim.y * blockDim.y) {
            const long long i = n * F + f;
            const T g = y[i] > T(0) ? dout[i] : T(0);     // ReLU passes the gradient or blocks it
            dx[i] = g;
            acc += g;                                      // this thread's share of db[f]
        }
    }
    // Tree reduction over threadIdx.y (8 -> 4 -> 2 -> 1). Every thread of the block reaches
    // each __syncthreads() — including those with f >= F — or the block would deadlock.
    sums[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int stride = BR_BY / 2; stride > 0; stride /= 2) {
        if (threadIdx.y < stride) sums[threadIdx.y][threadIdx.x] += sums[threadIdx.y + stride][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && f < F) partial[(long long)blockIdx.y * F + f] = sums[0][threadIdx.x];
}

// ============================================================================================
// The same pair with the bias along ROWS: the layout of a convolution's output.
// ============================================================================================
//
//   forward:   y[f, m]  = max(x[f, m] + b[f], 0)           x, y: (F, M),  b: (F,)
//   backward:  dx[f, m] = dout[f, m] * (y[f, m] > 0)        dout, y, dx: (F, M)
//              db[f]    = sum over m of dx[f, m]            db: (F,)
//
// dl.Conv2d computes its output as the matrix W_mat @ cols of shape (F, M): one row per output
// channel, M = N*OH*OW pixels along it, and each channel's bias is added along its row. Rows
// are long (a batch of 256 28x28 images: M = 200704) and few (F = 16 or 32 channels), so one
// block per row would leave most of the GPU idle. Instead:
//
//   block = (256,):   threads walk along a row, 256 consecutive pixels per step (coalesced);
//   grid  = (G, F):   blockIdx.y is the row (channel) f, so every thread of a block loads the
//                     same b[f] once; the G blocks along x split the row among them with a
//                     grid-stride loop (m += gridDim.x * blockDim.x).
//
// Backward reduces db[f] without atomics, as above: each block sums its share of the row (in
// registers, then across the warp with shuffles, then across the block's 8 warps in shared
// memory) and writes ONE partial sum to partial[f, blockIdx.x]; the wrapper finishes with
// partial.sum(axis=1). Same inputs, same bits, every run.

#define BRR_THREADS 256                   // blockDim.x, fixed by the wrapper

template <typename T>
__global__ void bias_relu_rows_forward(const T* __restrict__ x,   // (F, M) input
                                       const T* __restrict__ b,   // (F,)   bias, one per row
                                       T* __restrict__ y,         // (F, M) output
                                       long long M)
{
    const long long row = (long long)blockIdx.y * M;      // gridDim.y == F
    const T bias = b[blockIdx.y];
#pragma unroll 4
    for (long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x; m < M;
         m += (long long)gridDim.x * blockDim.x) {
        const T v = x[row + m] + bias;
        y[row + m] = v > T(0) ? v : T(0);
    }
}

template <typename T>
__global__ void bias_relu_rows_backward(const T* __restrict__ dout,   // (F, M) upstream gradient
                                        const T* __restrict__ y,      // (F, M) forward output
                                        T* __restrict__ dx,           // (F, M) output
                                        T* __restrict__ partial,      // (F, gridDim.x) output
                                        long long M)
{
    __shared__ T warp_sums[BRR_THREADS / 32];

    const long long row = (long long)blockIdx.y * M;
    T acc = T(0);
#pragma unroll 4
    for (long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x; m < M;
         m += (long long)gridDim.x * blockDim.x) {
        const T g = y[row + m] > T(0) ? dout[row + m] : T(0);
        dx[row + m] = g;
        acc += g;
    }
    // Sum acc over the block. 1. inside each warp of 32 threads, with register shuffles:
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2)
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (lane == 0) warp_sums[warp] = acc;                  // 2. one sum per warp
    __syncthreads();
    if (warp == 0) {                                       // 3. warp 0 adds the 8 warp sums
        acc = lane < BRR_THREADS / 32 ? warp_sums[lane] : T(0);
        for (int offset = 16; offset > 0; offset /= 2)
            acc += __shfl_down_sync(0xffffffffu, acc, offset);
        if (lane == 0) partial[(long long)blockIdx.y * gridDim.x + blockIdx.x] = acc;
    }
}
