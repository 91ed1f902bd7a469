// maxpool.cu — MaxPool2d on the GPU: the maximum of each window and where it was (forward),
// and the gradient sent back to those places (backward, gathered: no atomics).
//
//   x, dx: (N, C, H, W)     out, idx, dout: (N, C, OH, OW)     OH = (H - KH) / stride + 1
//   out[n, c, oh, ow] = max over kh < KH, kw < KW of x[n, c, oh*stride + kh, ow*stride + kw]
//   idx[n, c, oh, ow] = kh*KW + kw of that maximum (the first one, in row-major order, on ties)
//   dx[n, c, h, w]    = sum of dout[n, c, oh, ow] over the windows (oh, ow) whose maximum was
//                       at (h, w)     (windows overlap when stride < KH or KW; else one at most)
//
// Why kernels for this?
// ---------------------
// As array code (MaxPool2d in dlcourse/conv.py) forward loops over the KH*KW positions of a
// window with five array operations per position, and backward with two: 17 + 8 kernel
// launches for a 2 x 2 window, each a pass over whole arrays. Here each direction is one
// launch, and each thread keeps its running maximum in a register.
//
// maxpool_forward: one thread per OUTPUT element, grid-stride over out.flat in C order, so
// consecutive threads write consecutive addresses of out and idx (both C-contiguous). x may
// have any strides (sN, sC, sH, sW, in elements): Conv2d's outputs are channel-major views.
//
// maxpool_backward: one thread per INPUT pixel, a gather like col2im_kernel in im2col.cu.
// Thread (n, c, h, w) asks which windows contain it: rows oh with oh*stride <= h, i.e.
// oh <= h / stride, and h < oh*stride + KH, i.e. oh >= (h - KH) / stride + 1 (for h >= KH;
// else 0); columns likewise. For each it checks whether idx names this pixel as the maximum,
// adds those dout values in a register and writes dx once: no two threads write one address,
// so no atomics, and the same bits on every run. dout and dx may have any strides (dx is
// allocated in x's layout, so the layer before gets its gradient in the layout it made).
//
// Pixel and window indices are 32-bit ints (the wrapper checks N*C*H*W < 2**31); strided
// offsets are 64-bit. Templates: T = float or double ("maxpool_forward<float>", ...).

template <typename T>
__global__ void maxpool_forward(const T* __restrict__ x,   // (N, C, H, W) input, any strides
                                T* __restrict__ out,       // (N, C, OH, OW) output, C-contiguous
                                int* __restrict__ idx,     // (N, C, OH, OW) argmax, C-contiguous
                                long long sN, long long sC, long long sH, long long sW,
                                int N, int C, int H, int W, int KH, int KW, int stride,
                                int OH, int OW)
{
    const long long total = (long long)N * C * OH * OW;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const int i = (int)j;          // < 2**31 (the wrapper checks): 32-bit arithmetic below
        const int ow = i % OW;
        const int oh = (i / OW) % OH;
        const int c = (i / (OW * OH)) % C;
        const int n = i / (OW * OH * C);
        const T* window = x + n * sN + c * sC + (long long)(oh * stride) * sH
                            + (long long)(ow * stride) * sW;
        T best = window[0];
        int best_k = 0;
        for (int kh = 0; kh < KH; ++kh)
            for (int kw = 0; kw < KW; ++kw) {
                const T v = window[kh * sH + kw * sW];
                if (v > best) {                  // strict: on a tie the first maximum stays
                    best = v;
                    best_k = kh * KW + kw;
                }
            }
        out[i] = best;
        idx[i] = best_k;
    }
}

template <typename T>
__global__ void maxpool_backward(const T* __restrict__ dout,  // (N, C, OH, OW), any strides
                                 const int* __restrict__ idx, // (N, C, OH, OW), C-contiguous
                                 T* __restrict__ dx,          // (N, C, H, W) output, any strides
                                 long long dN, long long dC, long long dH, long long dW,
                                 long long xN, long long xC, long long xH, long long xW,
                                 int N, int C, int H, int W, int KH, int KW, int stride,
                                 int OH, int OW)
{
    const long long total = (long long)N * C * H * W;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < total;
         j += (long long)gridDim.x * blockDim.x) {
        const int i = (int)j;          // < 2**31 (the wrapper checks): 32-bit arithmetic below
        const int w = i % W;                                  // this thread's input pixel
        const int h = (i / W) % H;
        const int c = (i / (W * H)) % C;
        const int n = i / (W * H * C);
        const int oh_lo = h < KH ? 0 : (h - KH) / stride + 1;
        const int oh_hi = min(h / stride, OH - 1);
        const int ow_lo = w < KW ? 0 : (w - KW) / stride + 1;
        const int ow_hi = min(w / stride, OW - 1);
        T acc = T(0);
        for (int oh = oh_lo; oh <= oh_hi; ++oh)
            for (int ow = ow_lo; ow <= ow_hi; ++ow) {
                const int o = ((n * C + c) * OH + oh) * OW + ow;
                if (idx[o] == (h - oh * stride) * KW + (w - ow * stride))
                    acc += dout[n * dN + c * dC + oh * dH + ow * dW];
            }
        dx[n * xN + c * xC + h * xH + w * xW] = acc;
    }
}
