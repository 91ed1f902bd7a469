// im2col.cu — unfold image windows into matrix rows (im2col) and fold them back (col2im).
//
//   x:    (N, C, H, W)                  OH = (H + 2*padding - KH) / stride + 1
//   cols: (N*OH*OW, C*KH*KW)            OW = (W + 2*padding - KW) / stride + 1
//   row    r = (n*OH + oh)*OW + ow       (one row per output pixel)
//   column q = (c*KH + kh)*KW + kw       (one column per input value the filter touches)
//   cols[r, q] = x_padded[n, c, oh*stride + kh, ow*stride + kw]     (0 inside the padding)
//
// With cols built, a convolution with F filters W (F, C, KH, KW) is ONE matrix product,
// cols @ W.reshape(F, -1).T — which is why GPUs spend so much effort on matmul.
// The NumPy versions are dlcourse/conv.py (fast) and dlcourse/kernels/reference.py (plain).
//
// Memory layout: cols is stored TRANSPOSED
// ------------------------------------------
// The kernel writes cols_t = cols.T, shape (C*KH*KW, N*OH*OW), row-major: one row per
// (c, kh, kw), one column per output pixel. That is the matrix Conv2d multiplies,
// W.reshape(F, -1) @ cols_t, and the order in which both the writes and the reads coalesce:
// consecutive threads take consecutive output pixels ow, ow+1, ... of one (c, kh, kw), so
// they write consecutive addresses of cols_t and (with stride 1) read consecutive pixels of x.
// The Python wrapper returns cols_t.T, the (N*OH*OW, C*KH*KW) matrix of the contract above.
//
// x may have any strides (sN, sC, sH, sW, counted in elements, not bytes): Conv2d's outputs
// are channel-major views of a (C, N, H, W) buffer, and reading them in place saves a copy.
//
// im2col_kernel: one thread per element of cols_t (a "gather")
// -------------------------------------------------------------
// Thread i writes cols_t.flat[i]. It recovers (q, r) -> (c, kh, kw, n, oh, ow) with divisions
// and reads the one input value it needs. A grid-stride loop lets a fixed-size grid cover any
// number of elements.
//
// col2im_kernel: the adjoint, one thread per INPUT pixel, again a gather
// -----------------------------------------------------------------------
// The obvious col2im walks over cols and adds each value into dx: a *scatter*. Where windows
// overlap (stride < KH), several threads would add to the same dx element at once, which
// needs atomicAdd — and atomics make floating-point sums come out in a different order each
// run (not deterministic). Turn it around: thread (n, c, h, w) asks "which windows cover me?"
// Input row h (padded row h + padding) is touched by kernel row kh of output row oh exactly
// when oh*stride + kh == h + padding, i.e. for each kh with (h + padding - kh) >= 0, divisible
// by stride, and oh = (h + padding - kh) / stride < OH. Same for columns. The thread sums those
// at most KH*KW entries of cols in registers and writes dx once: no atomics, no races, the
// same bits every run. Padding positions are never visited, so they are dropped for free.
// cols may have any strides too (s_r along output pixels, s_q along (c, kh, kw)): given the
// transposed layout above (s_r = 1), neighbouring threads read neighbouring addresses.
//
// Indexing: flat indices and offsets use 64-bit `long long`, since N*OH*OW*C*KH*KW passes 2^31
// quickly; everything smaller (pixel and window indices) uses `int`, because 32-bit division
// is several times cheaper than 64-bit, and this kernel does a handful per element.
// Templates: T = float or double, compiled by name ("im2col_kernel<float>", ...).

template <typename T>
__global__ void im2col_kernel(const T* __restrict__ x,     // (N, C, H, W) input, any strides
                              T* __restrict__ cols_t,      // (C*KH*KW, N*OH*OW) output
                              long long sN, long long sC, long long sH, long long sW,
                              int N, int C, int H, int W,
                              int KH, int KW, int stride, int padding,
                              int OH, int OW)
{
    const long long R = (long long)N * OH * OW;              // columns of cols_t
    const long long total = R * C * KH * KW;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long q64 = i / R;                          // which (c, kh, kw)
        const int r = (int)(i - q64 * R);                     // which output pixel
        const int q = (int)q64;        // < 2**31 (the wrapper checks): 32-bit division is cheaper
        const int ow = r % OW;
        const int oh = (r / OW) % OH;
        const int n = r / (OW * OH);
        const int kw = q % KW;
        const int kh = (q / KW) % KH;
        const int c = q / (KW * KH);
        const int h = oh * stride + kh - padding;            // position in the unpadded image
        const int w = ow * stride + kw - padding;
        T v = T(0);                                           // padding reads as zero
        if (h >= 0 && h < H && w >= 0 && w < W)
            v = x[n * sN + c * sC + h * sH + w * sW];
        cols_t[i] = v;
    }
}

template <typename T>
__global__ void col2im_kernel(const T* __restrict__ cols,   // (N*OH*OW, C*KH*KW) input
                              T* __restrict__ dx,           // (N, C, H, W) output, C-contiguous
                              long long s_r, long long s_q, // cols' strides (elements)
                              int N, int C, int H, int W,
                              int KH, int KW, int stride, int padding,
                              int OH, int OW)
{
    const long long total = (long long)N * C * H * W;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int p = (int)i;          // < 2**31 (the wrapper checks): 32-bit arithmetic below
        const int w = p % W;                                  // this thread's input pixel
        const int h = (p / W) % H;
        const int c = (p / (W * H)) % C;
        const int n = p / (W * H * C);
        T acc = T(0);
        for (int kh = 0; kh < KH; ++kh) {
            const int hp = h + padding - kh;                  // = oh * stride, if a window fits
            if (hp < 0 || hp % stride != 0) continue;
            const int oh = hp / stride;
            if (oh >= OH) continue;
            for (int kw = 0; kw < KW; ++kw) {
                const int wp = w + padding - kw;
                if (wp < 0 || wp % stride != 0) continue;
                const int ow = wp / stride;
                if (ow >= OW) continue;
                const long long r = ((long long)n * OH + oh) * OW + ow;
                const int q = (c * KH + kh) * KW + kw;
                acc += cols[r * s_r + q * s_q];
            }
        }
        dx[i] = acc;
    }
}
