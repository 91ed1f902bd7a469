// softmax_cross_entropy.cu — fused softmax + cross-entropy: loss AND gradient in one kernel launch.
//
//   logits z: (N, C),  labels y: (N,) integers in [0, C)
//   p[n, :]        = softmax(z[n, :]) = exp(z[n, :] - m) / s,   m = max_c z[n, c],
//                                                                s = sum_c exp(z[n, c] - m)
//   loss_rows[n]   = -log p[n, y[n]] = log(s) + m - z[n, y[n]]
//   dlogits[n, c]  = (p[n, c] - [c == y[n]]) / N          (the gradient of the MEAN loss)
//
// Numerical stability: exp(z) overflows float32 for z > 88. Subtracting the row maximum m first
// makes every exponent <= 0, so every exp is in (0, 1] and s >= 1; log(s) is then safe too.
//
// One block per row
// -----------------
// Block n (and, if N exceeds the grid, n + gridDim.x, ...) owns row n. Its threads stride along
// the row (c = threadIdx.x, threadIdx.x + blockDim.x, ...): consecutive threads read
// consecutive logits, so loads coalesce. Per-row results (max, sum) are combined across the
// block with a *block reduction*: first inside each warp with register shuffles
// (__shfl_down_sync passes a value from lane i + offset to lane i, no memory involved), then the
// per-warp results meet in shared memory and warp 0 combines them.
//
// Online softmax: max and sum in one sweep
// ----------------------------------------
// The textbook needs two sweeps before the gradient: one for m, one for s. The "online"
// trick (Milakov & Gimelshein, 2018) keeps a running pair (m, s) and rescales s whenever a
// larger value turns up:
//      new value v:  if v > m:  s = s * exp(m - v) + 1;  m = v       else:  s += exp(v - m)
// Two pairs merge the same way: m = max(m1, m2), s = s1 * exp(m1 - m) + s2 * exp(m2 - m).
// So the kernel reads the row twice in all: once for (m, s), once to write the gradient
// (that second read usually comes from cache — the row was just read by the same block).
//
// A label outside [0, C) cannot be checked on the host without a slow device-to-host copy,
// so the kernel writes NaN as that row's loss instead of reading outside the row: the mean
// loss becomes NaN, which is loud.
//
// Templates: T = float or double (logits), L = int or long long (labels).
// The block size must be a multiple of 32 and at most 1024 (the wrapper picks 32..256).

template <typename T> struct Num;
template <> struct Num<float> {
    static __device__ __forceinline__ float lowest() { return -3.402823466e+38f; }
    static __device__ __forceinline__ float nan() { return __int_as_float(0x7fc00000); }
    static __device__ __forceinline__ float exp(float v) { return expf(v); }
    static __device__ __forceinline__ float log(float v) { return logf(v); }
};
template <> struct Num<double> {
    static __device__ __forceinline__ double lowest() { return -1.7976931348623157e+308; }
    static __device__ __forceinline__ double nan() { return __longlong_as_double(0x7ff8000000000000LL); }
    static __device__ __forceinline__ double exp(double v) { return ::exp(v); }
    static __device__ __forceinline__ double log(double v) { return ::log(v); }
};

// Merge (m2, s2) into (m, s): the running max and the sum of exp(z - max).
template <typename T>
__device__ __forceinline__ void merge(T& m, T& s, T m2, T s2)
{
    const T mx = m > m2 ? m : m2;
    s = s * Num<T>::exp(m - mx) + s2 * Num<T>::exp(m2 - mx);
    m = mx;
}

// Combine (m, s) over the whole block; every thread returns with the block's result.
template <typename T>
__device__ void block_reduce_max_sum(T& m, T& s, T* sh_m, T* sh_s)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int num_warps = blockDim.x / 32;
    for (int offset = 16; offset > 0; offset /= 2) {           // 1. inside each warp
        const T m2 = __shfl_down_sync(0xffffffffu, m, offset);
        const T s2 = __shfl_down_sync(0xffffffffu, s, offset);
        merge(m, s, m2, s2);
    }
    if (lane == 0) { sh_m[warp] = m; sh_s[warp] = s; }          // 2. one pair per warp
    __syncthreads();
    if (warp == 0) {                                            // 3. warp 0 merges the pairs
        m = lane < num_warps ? sh_m[lane] : Num<T>::lowest();
        s = lane < num_warps ? sh_s[lane] : T(0);
        for (int offset = 16; offset > 0; offset /= 2) {
            const T m2 = __shfl_down_sync(0xffffffffu, m, offset);
            const T s2 = __shfl_down_sync(0xffffffffu, s, offset);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { sh_m[0] = m; sh_s[0] = s; }
    }
    __syncthreads();
    m = sh_m[0];                                                // 4. broadcast to all
    s = sh_s[0];
}

template <typename T, typename L>
__global__ void softmax_cross_entropy(const T* __restrict__ logits,   // (N, C) input
                             const L* __restrict__ labels,   // (N,)   input, in [0, C)
                             T* __restrict__ loss_rows,      // (N,)   output: per-row loss
                             T* __restrict__ dlogits,        // (N, C) output: d(mean loss)/dz
                             int N, int C, T inv_N)
{
    __shared__ T sh_m[32];
    __shared__ T sh_s[32];

    for (int n = blockIdx.x; n < N; n += gridDim.x) {           // one block per row
        const T* z = logits + (long long)n * C;
        T* dz = dlogits + (long long)n * C;

        // Sweep 1: this thread's (max, sum of exp) over its share of the row (online softmax).
        T m = Num<T>::lowest(), s = T(0);
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            const T v = z[c];
            if (v > m) { s = s * Num<T>::exp(m - v) + T(1); m = v; }
            else       { s += Num<T>::exp(v - m); }
        }
        block_reduce_max_sum(m, s, sh_m, sh_s);

        const T log_s = Num<T>::log(s);
        const long long y = (long long)labels[n];
        const bool valid = (y >= 0 && y < C);
        if (threadIdx.x == 0) loss_rows[n] = valid ? log_s + m - z[y] : Num<T>::nan();

        // Sweep 2: the gradient, p - onehot, scaled by 1/N.
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            const T p = Num<T>::exp(z[c] - m - log_s);
            dz[c] = (p - (c == y ? T(1) : T(0))) * inv_N;
        }
        __syncthreads();   // sh_m/sh_s are reused by the next row
    }
}
