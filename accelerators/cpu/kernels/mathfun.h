/* Branch-free float math that compilers vectorize (no libm calls in hot
 * loops): exp by range reduction to 2^n * e^r with a degree-6 polynomial
 * (max rel. error ~2 ulp over the finite range), and sigmoid/tanh/erf from
 * it. Shared by the kernels and by generated partition code. */
#ifndef TCC_MATHFUN_H
#define TCC_MATHFUN_H
#include <stdint.h>
#include <string.h>

/* e^r - 1 and e^r for the reduced r, on a float or a GCC vector of them
 * (conv_vec.h's cv_exp_v) */
#define TCC_EXPM1_POLY(r)                                                                                 \
    ((((((1.9875691500e-4f * (r) + 1.3981999507e-3f) * (r) + 8.3334519073e-3f) * (r) + 4.1665795894e-2f) * (r) + \
       1.6666665459e-1f) * (r) + 5.0000001201e-1f) * (r) * (r) + (r))

/* 1.5 * 2^23 + 127: x log2 e plus this, rounded once (an FMA where the
 * build has one), is round(x log2 e) + 127 in the low mantissa bits, i.e.
 * shifted left by 23 it is the bits of 2^n; minus it, n as a float. */
#define TCC_EXP_SHIFTER 12583039.0f

/* x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts): returns r, and
 * 2^n in *s (x within the callers' clamps, so 2^n is a normal float) */
static inline float tcc_exp_reduce_(float x, float *s) {
    const float nb = x * 1.44269504088896341f + TCC_EXP_SHIFTER;
    const float n = nb - TCC_EXP_SHIFTER;
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    uint32_t e;
    memcpy(&e, &nb, 4);
    e <<= 23;
    memcpy(s, &e, 4);
    return r;
}

static inline float tcc_exp_(float x) {
    /* clamp: e^88.7 overflows; below ln(FLT_MIN) = -87.34 the result is 0,
     * not the denormal the polynomial gives there: x86 computes with
     * denormals ~100x slower, and a masked attention's probabilities were
     * all of them (the products after its Softmax: llama's generic tape
     * 0.24 -> 0.13 ms on the 2-core Zen 2) */
    const int under = x < -87.3365447504f;
    if (x > 88.3762626647949f) x = 88.3762626647949f;
    if (under) x = -87.3365447504f;
    float s;
    const float r = tcc_exp_reduce_(x, &s);
    return under ? 0.0f : TCC_EXPM1_POLY(r) * s + s;
}
static inline float tcc_sigmoidf(float x) { return 1.0f / (1.0f + tcc_exp_(-x)); }
/* tanh|x| = -m / (2 + m) with m = e^(-2|x|) - 1, computed as 2^n (e^r - 1)
 * + (2^n - 1) from the reduced r: e^r - 1 keeps the relative precision near
 * 0 that (1 - e) / (1 + e) loses, so one branch-free path serves every x
 * (max rel. error ~3 ulp). The form before evaluated a second polynomial for
 * |x| < 1/16 and blended the two: 70 vector instructions a loop in the
 * benchmark's 8-op chain (AVX2), whose latency, not its throughput, bounded
 * it (AMD EPYC Zen 4, AVX2 build: 4.7 cycles an element, the AVX-512 build
 * 2.6). Past |x| = 10, tanh rounds to 1; NaN stays NaN. */
static inline float tcc_tanhf(float x) {
    float ax = x < 0 ? -x : x;
    ax = ax > 10.f ? 10.f : ax;
    float s;
    const float r = tcc_exp_reduce_(-2.f * ax, &s);
    const float m = s * TCC_EXPM1_POLY(r) + (s - 1.0f);
    return __builtin_copysignf(__builtin_fabsf(m) / (2.0f + m), x);
}
/* erf: rational approximation (as in Eigen's generic_fast_erf_float),
 * |error| < 2e-7 on [-4, 4], saturated outside. */
static inline float tcc_erff(float x) {
    if (x > 4.f) x = 4.f;
    if (x < -4.f) x = -4.f;
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 + -2.10102402082508e-06f;
    p = p * x2 + -5.69250639462346e-05f;
    p = p * x2 + -7.34990630326855e-04f;
    p = p * x2 + -2.95459980854025e-03f;
    p = p * x2 + -1.60960333262415e-02f;
    p = p * x;
    float q = -1.45660718464996e-05f;
    q = q * x2 + -2.13374055278905e-04f;
    q = q * x2 + -1.68282697438203e-03f;
    q = q * x2 + -7.37332916720468e-03f;
    q = q * x2 + -1.42647390514189e-02f;
    return p / q;
}
#endif
