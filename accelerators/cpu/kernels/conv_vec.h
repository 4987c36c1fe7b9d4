/* Shared by the convolution kernels: one vector type per ISA build (GCC
 * vector extensions, so the same code compiles for x86-64-v4, -v3 and the
 * generic target), partial loads/stores for row tails, the "phase plane"
 * input packing and the fused epilogue applied while copying rows out. */
#ifndef TCC_CONV_VEC_H
#define TCC_CONV_VEC_H
#include <stdlib.h>
#include <string.h>

#include "mathfun.h"
#include "tcc_cpu.h"
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#define CV_INLINE static inline __attribute__((always_inline))
#define CV_HIDDEN __attribute__((visibility("hidden")))

#if defined(__AVX512F__)
#define VL 16
#elif defined(__AVX2__)
#define VL 8
#else
#define VL 4
#endif
typedef float vf __attribute__((vector_size(VL * 4)));

CV_INLINE vf v_ld(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
CV_INLINE void v_st(float *p, vf v) { memcpy(p, &v, sizeof v); }

/* First n (1..VL) lanes; the rest read as 0 and are never touched in memory,
 * so tails never read or write past a tensor's end. */
CV_INLINE vf v_ld_n(const float *p, int n) {
#if defined(__AVX512F__)
    return (vf)_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
#elif defined(__AVX2__)
    __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return (vf)_mm256_maskload_ps(p, m);
#else
    vf v = {0};
    for (int i = 0; i < n; i++) v[i] = p[i];
    return v;
#endif
}
CV_INLINE void v_st_n(float *p, vf v, int n) {
#if defined(__AVX512F__)
    _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1), (__m512)v);
#elif defined(__AVX2__)
    /* 16-, 8- and 4-byte pieces: Zen 2 runs vmaskmovps stores as microcode
     * (the stride-2 depthwise packing's two per row were most of the
     * depthwise time on 14x14 planes) */
    __m128 h = _mm256_castps256_ps128((__m256)v);
    if (n >= VL) {
        v_st(p, v);
        return;
    }
    if (n >= 4) {
        _mm_storeu_ps(p, h);
        h = _mm256_extractf128_ps((__m256)v, 1);
        p += 4;
        n -= 4;
    }
    if (n >= 2) {
        _mm_storel_pi((__m64 *)p, h);
        h = _mm_movehl_ps(h, h);
        p += 2;
        n -= 2;
    }
    if (n) _mm_store_ss(p, h);
#else
    for (int i = 0; i < n; i++) p[i] = v[i];
#endif
}

#if defined(__AVX512F__)
CV_INLINE vf v_max(vf a, vf b) { return (vf)_mm512_max_ps((__m512)a, (__m512)b); }
CV_INLINE vf v_min(vf a, vf b) { return (vf)_mm512_min_ps((__m512)a, (__m512)b); }
#elif defined(__AVX2__)
CV_INLINE vf v_max(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
CV_INLINE vf v_min(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
#else
typedef int vi __attribute__((vector_size(VL * 4)));
CV_INLINE vf v_sel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
CV_INLINE vf v_max(vf a, vf b) { return v_sel(a > b, a, b); }
CV_INLINE vf v_min(vf a, vf b) { return v_sel(a < b, a, b); }
#endif

#if defined(__AVX2__)
/* r[i] lane l -> r[l] lane i (8 x 8): conv_ocv.c's tile stores, conv_pwdw8.c's. */
CV_INLINE void cv_tr8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* s[4h + c]: columns c and c + 4 of rows 4h..4h+3 */
    for (int h = 0; h < 2; h++) {
        s[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
        r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
    }
}
#endif

/* The sum of x[0, n): four vectors in flight (one chain of adds waits 3-5
 * cycles per vector), then across the lanes. Row sums of the norms and
 * GlobalAveragePool. */
CV_INLINE float cv_sum(const float *x, long n) {
    vf a0 = (vf){0}, a1 = a0, a2 = a0, a3 = a0;
    long k = 0;
    for (; k + 4 * VL <= n; k += 4 * VL) {
        a0 += v_ld(x + k);
        a1 += v_ld(x + k + VL);
        a2 += v_ld(x + k + 2 * VL);
        a3 += v_ld(x + k + 3 * VL);
    }
    for (; k + VL <= n; k += VL) a0 += v_ld(x + k);
    if (k < n) a1 += v_ld_n(x + k, (int)(n - k));
    const vf a = (a0 + a1) + (a2 + a3);
    float t = 0.f;
    for (int l = 0; l < VL; l++) t += a[l];
    return t;
}

/* The epilogue resolved for one call: bias already scaled, per channel. */
typedef struct {
    const float *bias; /* NULL or per output channel (bias_mode 2) */
    float bias_scale;
    int bias_scalar;   /* bias_mode 4: one value for every channel */
    const float *res;  /* NULL or the image's residual, NCHW like y */
    int act;
    float a0, a1;
} cv_ep;

CV_INLINE float cv_bias(const cv_ep *e, long m) {
    if (!e->bias) return 0.f;
    return e->bias_scale * (e->bias_scalar ? e->bias[0] : e->bias[m]);
}

/* mathfun.h's tcc_exp_ on a vector (the same steps, so the same results):
 * n = round(x log2 e) by adding 1.5 * 2^23 + 127 in the FMA, whose low
 * mantissa bits then hold n + 127, the exponent of 2^n (no round and no
 * float-to-int conversion), and e^x = 2^n (e^r - 1) + 2^n in one more FMA.
 * Four instructions fewer than a floor, a conversion and an add of 1: the
 * exponentials' pass of Softmax + LayerNormalization (AVX2 build, AMD EPYC
 * Zen 4, 1 thread) ran at ~70 % of its time on them. */
CV_INLINE vf cv_exp_v(vf x) {
    typedef int vi32 __attribute__((vector_size(VL * 4)));
    const vi32 under = (vi32)(x < (vf){0} - 87.3365447504f);  /* all ones below ln(FLT_MIN): 0 there, as tcc_exp_ */
    x = v_min((vf){0} + 88.3762626647949f, v_max((vf){0} - 87.3365447504f, x)); /* NaN stays NaN */
    const vf nb = x * 1.44269504088896341f + TCC_EXP_SHIFTER;
    const vf n = nb - TCC_EXP_SHIFTER;
    vf r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    typedef unsigned vu32 __attribute__((vector_size(VL * 4)));
    const vf s = (vf)((vu32)nb << 23);
    return (vf)((vi32)(TCC_EXPM1_POLY(r) * s + s) & ~under);
}

/* e^x for x <= 0, a softmax's x - max, whose exponentials sum to at least
 * 1, in 8 multiplies and FMAs a vector where cv_exp_v takes 11: those
 * bound the exponentials' pass, which bounds Softmax + LayerNormalization
 * (~8.4 cycles a vector of 8 on the two FMA ports of an AMD EPYC Zen 5 in
 * the AVX2 build). Below -87 it gives e^-87 (~1.6e-38, a normal float:
 * the clamp keeps 2^n p normal) instead of 0, so no upper clamp and no
 * mask. r = x - n ln 2 with ln 2 in one float, not two: the one rounding of
 * ln 2 adds up to n * 1.9e-9 to r, so the result is within 1.5 ulp of e^x
 * for x > -20 and within 4.5 ulp down to -87 (cv_exp_v: 1 ulp; numpy's
 * float32 emulation of both over 4M points). e^r is a degree-6 polynomial
 * (near-minimax on |r| <= ln 2 / 2, relative error 1.9e-9 before
 * rounding), not 1 + r + r^2 (...) as cv_exp_v's e^r - 1: two instructions
 * fewer; and 2^n is added to its exponent as an integer (n from 1.5 * 2^23
 * added in the first FMA: its low bits are n), not multiplied in.
 * tcc_cpu_softmax_layernorm on 8192 x 1024, 1 thread (AMD EPYC Zen 5):
 * AVX2 build 3.26 -> 2.85 ms, AVX-512 2.31 -> 2.19. */
CV_INLINE vf cv_exp_nonpos_v(vf x) {
    typedef unsigned vu32 __attribute__((vector_size(VL * 4)));
    x = v_max((vf){0} - 87.0f, x);
    const vf nb = x * 1.44269504088896341f + 12582912.0f;
    const vf r = x - (nb - 12582912.0f) * 0.693147182464599609375f;
    const vf p = ((((((1.3836845755577087e-3f * r + 8.374815806746483e-3f) * r + 4.166822507977486e-2f) * r +
                     0.16666419804096222f) * r + 0.49999991059303284f) * r + 1.0f) * r + 1.0f);
    return (vf)((vu32)p + ((vu32)nb << 23));
}

/* Activations cheap enough to run in registers (SiLU: an exp per output,
 * where a pass after the store ran scalar on a tile's short rows). */
CV_INLINE int cv_vec_act(int act) {
    return act == TCC_ACT_NONE || act == TCC_ACT_RELU || act == TCC_ACT_CLIP || act == TCC_ACT_LEAKY ||
           act == TCC_ACT_SILU || act == TCC_ACT_QDQ8;
}

CV_INLINE vf cv_act_v(vf v, int act, float a0, float a1) {
    if (act == TCC_ACT_SILU) return v / (1.0f + cv_exp_v(-v));
    if (act == TCC_ACT_QDQ8) { /* a division, as the pair's Div: bit-exact with it (no reciprocal) */
        const vf q = v_min(v_max(v / a0 + TCC_QDQ_M, (vf){0} + a1), (vf){0} + (a1 + 255.f)); /* NaN -> a1 */
        return (q - TCC_QDQ_M) * a0;
    }
    /* v second: max and min return their second operand when either is NaN,
     * so NaN stays NaN, as in onnxruntime and the ONNX reference */
    if (act == TCC_ACT_RELU) return v_max((vf){0}, v);
    if (act == TCC_ACT_CLIP) return v_min((vf){0} + a1, v_max((vf){0} + a0, v));
    if (act == TCC_ACT_LEAKY) return v_max((vf){0}, v) + v_min((vf){0}, v) * a0;
    return v;
}

/* dst[i] = act(src[i] + bias + res[i]) for one contiguous run of outputs. */
void cv_ep_run(float *dst, const float *src, long n, float bias, const float *res, const cv_ep *e) CV_HIDDEN;

/* ---- phase-plane packing ----------------------------------------------------
 * A stride-s convolution reads the zero-padded input at (oh*s + ki*d, ...):
 * split into s*s phase planes P[pr][pc][i][j] = xpad[i*s + pr][j*s + pc], tap
 * (ki, kj) reads phase ((ki*dh) % sh, (kj*dw) % sw) at (oh + ki*dh/sh,
 * ow + kj*dw/sw). With every plane Wq wide, output (oh, ow) sits at flat index
 * q = oh*Wq + ow and each tap is one constant offset from q, so any
 * stride/dilation/padding becomes a stride-1 sweep over flat rows (the Wq-OW
 * columns at each row end are computed and dropped). */
typedef struct {
    long hq, wq;        /* phase plane size */
    long wr;            /* columns of a plane any tap reads (wq, unless rounded up: cv_layout_align_rows) */
    long nph;           /* phase planes kept per channel (only those a tap reads) */
    int slot[64];       /* phase (pr*sw + pc) -> plane index, -1 if unused */
    long cs;            /* channel stride of the packed buffer */
    long q;             /* flat outputs to sweep: (oh-1)*wq + ow */
    long taps;          /* kh*kw */
    long *off;          /* per tap: plane index*hq*wq + row*wq + col */
    int direct;         /* the input needs no packing (stride 1, no pads, exact size) */
} cv_layout;

/* Fills `l` (off must hold kh*kw entries); returns 0 when the strides are
 * too large for the phase table (callers then fall back). */
int cv_layout_init(cv_layout *l, const tcc_conv_params *p, long *off) CV_HIDDEN;
/* Rounds a packed layout's rows up to whole vectors, so that every row
 * starts on a vector boundary (no effect on a direct one). */
void cv_layout_align_rows(cv_layout *l, const tcc_conv_params *p) CV_HIDDEN;
/* Packs channel planes [c0, c1) of one image/group (x: that group's first
 * channel). zero = 0 skips the padding, for a buffer whose padding is
 * already zero (same layout packed before). */
void cv_pack(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long c0, long c1, int zero)
    CV_HIDDEN;
/* Input rows [r0, r1) (clamped to the plane) of one channel into a buffer
 * whose padding is already zero: what a band of output rows reads. */
void cv_pack_rows(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long r0, long r1)
    CV_HIDDEN;
/* cv_pack of channels [0, channels) on the pool, padding zeroed (split by
 * channels, or as cv_pack_all_rows where too few for every thread). */
void cv_pack_all(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long channels) CV_HIDDEN;
/* The same split by input rows, thread t packing the t-th of nt slices of
 * every channel: for a convolution whose threads split output rows (few
 * output channels: the stem), each then reads rows it packed itself. */
void cv_pack_all_rows(const cv_layout *l, const tcc_conv_params *p, const float *x, float *dst, long channels)
    CV_HIDDEN;
/* Copies flat outputs [q0, q0+n) of one channel (src indexed by q - q0) to
 * the NCHW plane y with the epilogue. */
void cv_store_rows(const cv_layout *l, const tcc_conv_params *p, float *y, const float *src, long q0, long n,
                   float bias, const float *res, const cv_ep *e) CV_HIDDEN;

void cv_depthwise(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *w, float *y,
                  const cv_ep *e) CV_HIDDEN;
/* A depthwise call prepared once (cv_dw_init: the path, and its tables in
 * the calling thread's buffers 0 and 1), then run plane by plane on any
 * thread (cv_dw_plane: channel c's plane x -> y, res NULL or y's residual;
 * pack: that thread's cv_dw_pack_buffer). */
typedef struct {
    const tcc_conv_params *p;
    const cv_layout *l;
    const float *w;
    const cv_ep *e;
    int path;
    long taps, nv, ncv;       /* taps; AVX-512 paths: vectors per plane, per output row */
    const unsigned short *mk; /* AVX-512 paths: load masks */
    const float *zr;          /* stride-2 and in-place 3x3 paths: a zero row */
    long off[64];             /* flat path: each tap's offset in the plane */
} cv_dw;
void cv_dw_init(cv_dw *d, const tcc_conv_params *p, const cv_layout *l, const float *w, const cv_ep *e) CV_HIDDEN;
float *cv_dw_pack_buffer(const cv_dw *d) CV_HIDDEN;
void cv_dw_plane(const cv_dw *d, const float *x, long c, float *y, const float *res, float *pack) CV_HIDDEN;
/* Output rows [r0, r1) only; y and res still indexed as the whole plane
 * (a band's buffer passed as its address less r0 * ow). */
void cv_dw_rows(const cv_dw *d, const float *x, long c, float *y, const float *res, long r0, long r1, float *pack)
    CV_HIDDEN;

/* Pointwise, group 1, weights packed (tcc_cpu_conv2d_pw). */
void cv_pointwise(const tcc_conv_params *p, const float *x, const float *wp, float *y, const cv_ep *e) CV_HIDDEN;
/* The same for an input cv_pointwise_depthwise wrote (tcc_cpu_conv2d_pw_split_c). */
void cv_pointwise_split_c(const tcc_conv_params *p, const float *x, const float *wp, float *y, const cv_ep *e)
    CV_HIDDEN;
/* The same fused with the depthwise convolution `dw` that reads its output (tcc_cpu_conv2d_pw_dw). */
void cv_pointwise_depthwise(const tcc_conv_params *p, const float *x, const float *wp, const cv_ep *e,
                            const cv_dw *dw, float *y) CV_HIDDEN;
/* The AVX2 and AVX-512 builds' kernel for that pair, expanded channels in the lanes
 * (conv_pwdw8.c): 0 when it does not take it (then the planar one runs). */
int cv_pwdw8(const tcc_conv_params *p, const float *x, const float *wp, const cv_ep *e, const tcc_conv_params *pd,
             const float *wd, const cv_ep *ed, float *y) CV_HIDDEN;
int cv_pwdw8_takes(const tcc_conv_params *p, const tcc_conv_params *pd) CV_HIDDEN;
/* tcc_cpu_conv2d_q8_dw's fused kernel (conv_pwdw8.c): 0 where this build or
 * CPU has none for the pair (AVX-512 VNNI only) */
int cv_q8dw(const int64_t *p, const float *qp, const float *x, const void *wq, const float *scale, const float *bias,
            const tcc_conv_params *pd, const float *wd, const cv_ep *ed, float *y) CV_HIDDEN;
int cv_q8dw_takes(const int64_t *p, const tcc_conv_params *pd) CV_HIDDEN;
/* A depthwise convolution dw of x fused with the pointwise convolution pq
 * (weights packed as pw's) that reads its output (tcc_cpu_conv2d_dw_pw). */
void cv_depthwise_pointwise(const cv_dw *dw, const float *x, const tcc_conv_params *pq, const float *wq,
                            const cv_ep *eq, float *y) CV_HIDDEN;

/* conv_ocv.c's packed weights with output positions in the lanes (conv_rows.c),
 * for few input channels on AVX-512 and AVX2: whether it takes p, and one
 * image/group (x packed as l, y and res its first output channel, m_base its
 * bias index); a packed x needs CV_ROWS_SLACK floats past its end. */
#define CV_ROWS_SLACK VL
int cv_rows_eligible(const tcc_conv_params *p, const cv_layout *l) CV_HIDDEN;
void cv_conv_rows(const tcc_conv_params *p, const cv_layout *l, const float *x, const float *wp, float *y,
                  const float *res, const cv_ep *e, long m_base) CV_HIDDEN;

/* The same without an epilogue (already applied in registers). */
void cv_copy_rows(const cv_layout *l, const tcc_conv_params *p, float *y, const float *src, long q0, long n)
    CV_HIDDEN;

/* Per-thread buffer (which: 0..6) that only grows while its thread lives. */
float *cv_tls_buffer(int which, size_t n) CV_HIDDEN;
#define CV_TLS_GEMM_A 5 /* gemm_packed.c's copy of A */
#define CV_TLS_GEMM_B 6 /* gemm.c's packed B */
/* A number no earlier call got (never 0): a kernel's tasks tell by it
 * whether what a thread left in its buffers is this call's. */
unsigned long cv_call_number(void) CV_HIDDEN;
int cv_pool_width(void) CV_HIDDEN; /* threadpool.c: the threads a parallel_for here would use */

#endif
