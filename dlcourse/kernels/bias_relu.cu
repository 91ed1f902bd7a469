// bias_relu.cu — a fused elementwise pair: bias + ReLU forward and its backward.
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
