// optimizers.cu — the update of SGD with momentum and of Adam, each one kernel per parameter.
//
//   SGD with momentum (PyTorch's form), for every element i of a parameter p:
//       g    = grad[i] + weight_decay * p[i]
//       v[i] = momentum * v[i] + g
//       p[i] = p[i] - lr * v[i]
//
//   Adam, with the bias corrections folded into step_size and eps by the caller:
//       g    = grad[i] + weight_decay * p[i]
//       m[i] = b1 * m[i] + (1 - b1) * g
//       v[i] = b2 * v[i] + (1 - b2) * g * g
//       p[i] = p[i] - step_size * m[i] / (sqrt(v[i]) + eps)
//
// Why a kernel for three lines?
// -----------------------------
// Written with arrays, the SGD update is four operations (`v *= momentum`, `v += g`,
// `lr * v`, `p -= ...`) and Adam's twelve: each one a kernel launch, and each one reading
// and writing whole arrays. For the MLP 784-512-512-10 that is 24 launches for SGD alone,
// every training step, and at a small batch a step's time is (launches) x (the CPU's cost of
// one launch). One kernel per parameter does the same arithmetic in ONE launch and one pass
// over memory: it reads p, grad and the state once and writes p and the state once.
// PyTorch's "fused" and "foreach" optimizers exist for exactly this reason.
//
// Thread mapping: one thread per element, a 1-D grid-stride loop (any n with a fixed grid);
// consecutive threads touch consecutive elements, so every load and store is coalesced.
// Each element's update is independent of every other: no shared memory, no barriers.
//
// The caller passes the scalars already in T (float or double) and computes (1 - b1),
// (1 - b2) and the bias corrections in Python, in float64, as the array code does: the kernel
// then matches the array code to the rounding of a single operation (the compiler may fuse a
// multiply and an add into one FMA, which rounds once instead of twice).
//
// Templates: T is float or double, instantiated by name ("sgd_momentum_update<float>", ...).

template <typename T>
__global__ void sgd_momentum_update(T* __restrict__ p,           // (n,) parameter, updated
                                    const T* __restrict__ grad,  // (n,) its gradient
                                    T* __restrict__ v,           // (n,) velocity, updated
                                    long long n, T lr, T momentum, T weight_decay)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const T g = grad[i] + weight_decay * p[i];
        const T vi = momentum * v[i] + g;
        v[i] = vi;
        p[i] -= lr * vi;
    }
}

template <typename T>
__global__ void adam_update(T* __restrict__ p,           // (n,) parameter, updated
                            const T* __restrict__ grad,  // (n,) its gradient
                            T* __restrict__ m,           // (n,) first moment, updated
                            T* __restrict__ v,           // (n,) second moment, updated
                            long long n, T b1, T one_minus_b1, T b2, T one_minus_b2,
                            T step_size, T eps, T weight_decay)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const T g = grad[i] + weight_decay * p[i];
        const T mi = b1 * m[i] + one_minus_b1 * g;
        const T vi = b2 * v[i] + one_minus_b2 * (g * g);
        m[i] = mi;
        v[i] = vi;
        p[i] -= step_size * (mi / (sqrt(vi) + eps));
    }
}
