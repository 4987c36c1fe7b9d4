/* float32 kernels with run-time sizes for the shape-generic executor
 * (runtime/generic): Erf and the exact Gelu in one pass, in place allowed
 * (y == x), on the cpu accelerator's branch-free erf
 * (accelerators/cpu/kernels/mathfun.h: |error| < 2e-7). Measured against
 * scipy.special.erf (a float64 loop) on a loaded 2-core Zen 2: Gelu over
 * 2x16x128 floats 58 -> 29 us, 1x197x256 1.0 -> 0.35 ms; libm's erff was
 * only 1.1-1.4x. The tanh form stays in numpy: mathfun.h's tanh branches,
 * and was 2-4x slower than numpy's. */
#include "../../accelerators/cpu/kernels/mathfun.h"

#define VECTORIZED __attribute__((optimize("O3", "tree-vectorize")))

VECTORIZED void tcc_erf_f32(const float *x, float *y, long n) {
    for (long i = 0; i < n; i++) y[i] = tcc_erff(x[i]);
}

/* x/2 (1 + erf(x / sqrt 2)) */
VECTORIZED void tcc_gelu_f32(const float *x, float *y, long n) {
    for (long i = 0; i < n; i++) {
        const float v = x[i];
        y[i] = 0.5f * v * (1.0f + tcc_erff(v * 0.7071067811865476f));
    }
}

/* RMS normalization over the last axis of x [rows][cols] (the exporters'
 * Pow -> ReduceMean -> Add(eps) -> Sqrt -> Reciprocal -> Mul -> Mul(w)
 * chain, runtime/generic/fusion.py): y = x * (1 / sqrt(mean(x^2) + eps))
 * (* w, cols values, where w is not NULL), in the chain's order; the sum of
 * squares in double. */
void tcc_rmsnorm_f32(long rows, long cols, const float *x, const float *w, float eps, float *y) {
    for (long r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        double ss = 0.0;
        for (long j = 0; j < cols; j++) ss += (double)(xr[j] * xr[j]);
        const float mean = (float)(ss / (double)cols);
        const float inv = 1.0f / __builtin_sqrtf(mean + eps);
        if (w)
            for (long j = 0; j < cols; j++) yr[j] = w[j] * (xr[j] * inv);
        else
            for (long j = 0; j < cols; j++) yr[j] = xr[j] * inv;
    }
}
