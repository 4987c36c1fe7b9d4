/* fp32 GEMM and convolution kernels for the host runtime.
 *
 *   void tcc_gemm_f32(const int64_t *p, float *C, const float *A, const float *B, const float *bias);
 *   void tcc_conv_f32(const int64_t *p, float *Y, const float *X, const float *W, const float *bias);
 *
 * `p` is a constant parameter block the compiler embeds in the object code
 * (layouts below, P_* indices). Why C and not loop IR: a register-blocked
 * micro-kernel needs its 24 accumulators pinned in zmm registers across the
 * k loop, packed panels and an edge path; LLVM's loop vectorizer on a loop
 * nest gets 30-40 GFLOP/s at best here (it vectorizes j and reloads C each
 * k), and every nest costs LLVM optimisation time per op. One shared kernel
 * reaches 100+ GFLOP/s on one core and costs nothing at compile time.
 *
 * Structure (BLIS-like): C[M,N] (+)= alpha * A[M,K] B[K,N]; tasks are
 * (batch, M block, N block) tiles run on the tcc thread pool; each task walks
 * K in KC slices, packs its A block into MR-row panels and its B block into
 * NR-column panels (for convolution the B packing is im2col: it gathers the
 * input window straight into the panel, so no im2col buffer exists), then
 * runs the MR x NR micro-kernel over the panels. On the last K slice the
 * epilogue applies alpha, beta * bias[i*bias_rs + j*bias_cs] and ReLU.
 * Depthwise convolutions (one input and one output channel per group) take
 * a direct loop instead: as a GEMM they would be 1 x 9 matrices. */
#pragma GCC optimize("O3")
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "pool.h"

#define MR 12
#define NR 32
#define KC 256
#define MC 192
#define NC_MAX 1024
#define MAXB 4

/* -- the parameter block of tcc_gemm_f32 -------------------------------------- */
enum {
    P_M, P_N, P_K, P_RSA, P_CSA, P_RSB, P_CSB, P_LDC, P_BIAS_RS, P_BIAS_CS,
    P_ALPHA, P_BETA, P_RELU, P_NB,            /* alpha, beta: IEEE doubles' bits */
    P_BSHAPE, P_SA = P_BSHAPE + MAXB, P_SB = P_SA + MAXB, P_SC = P_SB + MAXB, P_SBIAS = P_SC + MAXB,
    P_GEMM_LEN = P_SBIAS + MAXB
};
/* -- and of tcc_conv_f32 (2-D; 1-D passes H = KH = 1) ------------------------- */
enum {
    Q_N, Q_C, Q_H, Q_W, Q_M, Q_KH, Q_KW, Q_OH, Q_OW, Q_SH, Q_SW, Q_PH, Q_PW, Q_DH, Q_DW, Q_G, Q_RELU,
    Q_APACKED,  /* W comes pre-packed: [G][ceil(Mg/MR)][K][MR], rows past Mg zero */
    Q_LEN
};

static double as_double(int64_t bits) {
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

/* Where B comes from: a strided matrix, or the im2col view of an image. */
typedef struct {
    int64_t C, H, W, KH, KW, OH, OW, SH, SW, PH, PW, DH, DW;
} conv_geom;

typedef struct {
    int64_t M, N, K;
    int64_t rsa, csa, rsb, csb, ldc, bias_rs, bias_cs;
    float alpha, beta;
    int relu, a_packed;  /* a_packed: A is [ceil(M/MR)][K][MR] panels (sa[] in that layout) */
    int b_packed;        /* B is [ceil(N/NR)][K][NR] panels, shared by every batch */
    int64_t nb, bshape[MAXB], sa[MAXB], sb[MAXB], sc[MAXB], sbias[MAXB];
    const float *A, *B, *bias;
    float *C;
    const conv_geom *conv;
    int64_t mblocks, nblocks, mc, nc;
} problem;

/* per-thread packing buffers, grown on demand and kept */
static __thread float *tl_a, *tl_b;
static __thread size_t tl_a_n, tl_b_n;

static float *grow(float **p, size_t *have, size_t n) {
    if (*have < n) {
        free(*p);
        *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        *have = *p ? n : 0;
    }
    return *p;
}

/* A[i0:i0+mc, k0:k0+kc] -> panels of MR rows: panel r holds, for each k, MR values */
static void pack_a(const float *A, int64_t rsa, int64_t csa, int64_t mc, int64_t kc, float *dst) {
    for (int64_t i0 = 0; i0 < mc; i0 += MR) {
        int64_t mr = mc - i0 < MR ? mc - i0 : MR;
        const float *a = A + i0 * rsa;
        if (csa == 1 && mr == MR) {
            for (int64_t k = 0; k < kc; k++)
                for (int i = 0; i < MR; i++) dst[k * MR + i] = a[i * rsa + k];
        } else {
            for (int64_t k = 0; k < kc; k++) {
                int i = 0;
                for (; i < mr; i++) dst[k * MR + i] = a[i * rsa + k * csa];
                for (; i < MR; i++) dst[k * MR + i] = 0.0f;
            }
        }
        dst += kc * MR;
    }
}

/* B[k0:k0+kc, j0:j0+nc] -> panels of NR columns: panel q holds, for each k, NR values */
static void pack_b(const float *B, int64_t rsb, int64_t csb, int64_t kc, int64_t nc, float *dst) {
    for (int64_t j0 = 0; j0 < nc; j0 += NR) {
        int64_t nr = nc - j0 < NR ? nc - j0 : NR;
        const float *b = B + j0 * csb;
        if (csb == 1 && nr == NR) {
            for (int64_t k = 0; k < kc; k++) memcpy(dst + k * NR, b + k * rsb, NR * sizeof(float));
        } else {
            for (int64_t k = 0; k < kc; k++) {
                int j = 0;
                for (; j < nr; j++) dst[k * NR + j] = b[k * rsb + j * csb];
                for (; j < NR; j++) dst[k * NR + j] = 0.0f;
            }
        }
        dst += kc * NR;
    }
}

/* im2col rows k0..k0+kc (k = (c, kh, kw)), columns j0..j0+nc (j = (oh, ow)) of
 * image X (C x H x W) -> NR-column panels, zero outside the image. Panel by
 * panel, row k by row k: a panel row is one or two runs of columns within an
 * output row, and for stride 1 a run is a contiguous copy between zeroed
 * borders (the per-element gather this replaced cost as much as the GEMM
 * itself on ResNet's 64-channel layers). */
static void pack_b_conv(const conv_geom *g, const float *X, int64_t k0, int64_t kc, int64_t j0, int64_t nc,
                        float *dst) {
    int64_t khw = g->KH * g->KW, OW = g->OW, H = g->H, W = g->W, SW = g->SW;
    for (int64_t q = 0; q < nc; q += NR) {
        int64_t nr = nc - q < NR ? nc - q : NR;
        float *dp = dst + q * kc;
        int64_t oh0 = (j0 + q) / OW, ow0 = (j0 + q) % OW;
        int64_t c = k0 / khw, kh = (k0 % khw) / g->KW, kw = k0 % g->KW;
        for (int64_t k = 0; k < kc; k++, kw++) {
            if (kw == g->KW) {  /* (c, kh, kw) counts up with k: no divisions */
                kw = 0;
                if (++kh == g->KH) {
                    kh = 0;
                    c++;
                }
            }
            const float *xc = X + c * H * W;
            float *d = dp + k * NR;
            int64_t oh = oh0, ow = ow0, t = 0;
            while (t < nr) {
                int64_t run = OW - ow < nr - t ? OW - ow : nr - t;
                int64_t ih = oh * g->SH + kh * g->DH - g->PH;
                if (ih < 0 || ih >= H) {
                    memset(d + t, 0, run * sizeof(float));
                } else {
                    const float *xr = xc + ih * W;
                    int64_t iw0 = ow * SW + kw * g->DW - g->PW;
                    if (SW == 1) {
                        int64_t lo = iw0 < 0 ? -iw0 : 0, hi = W - iw0 < run ? W - iw0 : run;
                        if (lo > run) lo = run;
                        if (hi < lo) hi = lo;
                        if (lo) memset(d + t, 0, lo * sizeof(float));
                        if (hi > lo) memcpy(d + t + lo, xr + iw0 + lo, (hi - lo) * sizeof(float));
                        if (run > hi) memset(d + t + hi, 0, (run - hi) * sizeof(float));
                    } else {
                        for (int64_t u = 0; u < run; u++) {
                            int64_t iw = iw0 + u * SW;
                            d[t + u] = (iw >= 0 && iw < W) ? xr[iw] : 0.0f;
                        }
                    }
                }
                t += run;
                ow = 0;
                oh++;
            }
            for (; t < NR; t++) d[t] = 0.0f;
        }
    }
}

typedef struct {
    float alpha, beta;
    const float *bias;  /* already offset to this tile's (0, 0); NULL: none */
    int64_t bias_rs, bias_cs;
    int relu, last, accumulate;
} epi;

static inline float epi_scalar(float v, const epi *e, int64_t i, int64_t j) {
    v *= e->alpha;
    if (e->bias) v += e->beta * e->bias[i * e->bias_rs + j * e->bias_cs];
    if (e->relu && !(v > 0.0f)) v = v != v ? v : 0.0f;
    return v;
}

/* Generic store of an MR x NR accumulator tile held in memory. */
static void store_tile(const float *acc, float *C, int64_t ldc, int64_t mr, int64_t nr, const epi *e) {
    for (int64_t i = 0; i < mr; i++)
        for (int64_t j = 0; j < nr; j++) {
            float v = acc[i * NR + j];
            if (e->accumulate) v += C[i * ldc + j];
            if (e->last) v = epi_scalar(v, e, i, j);
            C[i * ldc + j] = v;
        }
}

#if defined(__x86_64__)
__attribute__((target("avx512f,fma")))
static void kernel_avx512(int64_t kc, const float *a, const float *b, float *C, int64_t ldc, int64_t mr,
                          int64_t nr, const epi *e) {
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kc; k++) {
        /* unaligned loads: B may be a pre-packed weight wherever its caller put it */
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
        a += MR;
        b += NR;
    }
    if (mr == MR && nr == NR && (!e->last || (e->bias_cs == 1 || !e->bias || e->bias_cs == 0))) {
        __m512 alpha = _mm512_set1_ps(e->alpha), zero = _mm512_setzero_ps();
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            float *c = C + i * ldc;
            __m512 v0 = c0[i], v1 = c1[i];
            if (e->accumulate) {
                v0 = _mm512_add_ps(v0, _mm512_loadu_ps(c));
                v1 = _mm512_add_ps(v1, _mm512_loadu_ps(c + 16));
            }
            if (e->last) {
                v0 = _mm512_mul_ps(v0, alpha);
                v1 = _mm512_mul_ps(v1, alpha);
                if (e->bias) {
                    __m512 beta = _mm512_set1_ps(e->beta);
                    const float *bb = e->bias + i * e->bias_rs;
                    __m512 x0, x1;
                    if (e->bias_cs == 1) {
                        x0 = _mm512_loadu_ps(bb);
                        x1 = _mm512_loadu_ps(bb + 16);
                    } else {
                        x0 = x1 = _mm512_set1_ps(bb[0]);
                    }
                    v0 = _mm512_fmadd_ps(beta, x0, v0);
                    v1 = _mm512_fmadd_ps(beta, x1, v1);
                }
                if (e->relu) { /* zero first: max returns its second operand on NaN, which stays NaN */
                    v0 = _mm512_max_ps(zero, v0);
                    v1 = _mm512_max_ps(zero, v1);
                }
            }
            _mm512_storeu_ps(c, v0);
            _mm512_storeu_ps(c + 16, v1);
        }
        return;
    }
    float acc[MR * NR] __attribute__((aligned(64)));
    for (int i = 0; i < MR; i++) {
        _mm512_store_ps(acc + i * NR, c0[i]);
        _mm512_store_ps(acc + i * NR + 16, c1[i]);
    }
    store_tile(acc, C, ldc, mr, nr, e);
}

/* AVX2 + FMA (16 ymm registers): the MR x NR tile as four 6 x 16 blocks
 * (12 accumulators, two B vectors, one broadcast), each a pass over the
 * panels, which stay in L1/L2, into a tile in memory for store_tile. Before
 * it an AVX2 CPU ran kernel_generic: a model whose MatMuls stay on the
 * host (wav2vec2's, 1 thread) took 2-3x as long as with the AVX-512
 * kernel on the same core (AMD EPYC Zen 4 with AVX-512 hidden from CPUID,
 * bench/hide_avx512.c). */
__attribute__((target("avx2,fma")))
static void kernel_avx2(int64_t kc, const float *a, const float *b, float *C, int64_t ldc, int64_t mr,
                        int64_t nr, const epi *e) {
    float acc[MR * NR] __attribute__((aligned(64)));
    for (int rg = 0; rg < MR / 6; rg++) {
        if (rg * 6 >= mr) break;
        for (int ch = 0; ch < NR / 16; ch++) {
            if (ch * 16 >= nr) break;
            __m256 c0[6], c1[6];
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) c0[i] = c1[i] = _mm256_setzero_ps();
            const float *ap = a + rg * 6, *bp = b + ch * 16;
            for (int64_t k = 0; k < kc; k++, ap += MR, bp += NR) {
                const __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
#pragma GCC unroll 6
                for (int i = 0; i < 6; i++) {
                    const __m256 ai = _mm256_broadcast_ss(ap + i);
                    c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
                    c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
                }
            }
#pragma GCC unroll 6
            for (int i = 0; i < 6; i++) {
                _mm256_store_ps(acc + (rg * 6 + i) * NR + ch * 16, c0[i]);
                _mm256_store_ps(acc + (rg * 6 + i) * NR + ch * 16 + 8, c1[i]);
            }
        }
    }
    store_tile(acc, C, ldc, mr, nr, e);
}
#endif

static void kernel_generic(int64_t kc, const float *a, const float *b, float *C, int64_t ldc, int64_t mr,
                           int64_t nr, const epi *e) {
    float acc[MR * NR] __attribute__((aligned(64)));
    memset(acc, 0, sizeof acc);
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < MR; i++) {
            float ai = a[i];
            for (int j = 0; j < NR; j++) acc[i * NR + j] += ai * b[j];
        }
        a += MR;
        b += NR;
    }
    store_tile(acc, C, ldc, mr, nr, e);
}

typedef void (*kernel_fn)(int64_t, const float *, const float *, float *, int64_t, int64_t, int64_t, const epi *);

static kernel_fn pick_kernel(void) {
#if defined(__x86_64__)
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = !__builtin_cpu_supports("fma") ? 0 : __builtin_cpu_supports("avx512f") ? 2
                                                 : !!__builtin_cpu_supports("avx2");
        /* TCC_CPU_ISA (the cpu accelerator's library choice) picks a lesser
         * kernel too, so every kernel is tested on one machine */
        const char *isa = getenv("TCC_CPU_ISA");
        if (isa && !strcmp(isa, "generic")) have = 0;
        else if (isa && !strcmp(isa, "avx2") && have > 1) have = 1;
    }
    if (have == 2) return kernel_avx512;
    if (have == 1) return kernel_avx2;
#endif
    return kernel_generic;
}

/* One task: batch bi, rows [m0, m0+mc), columns [n0, n0+nc), all of K. */
static void run_task(const problem *pr, int64_t t, kernel_fn kern) {
    int64_t per_batch = pr->mblocks * pr->nblocks;
    int64_t bi = t / per_batch, r = t % per_batch;
    int64_t mb = r / pr->nblocks, nbk = r % pr->nblocks;
    int64_t m0 = mb * pr->mc, n0 = nbk * pr->nc;
    int64_t mc = pr->M - m0 < pr->mc ? pr->M - m0 : pr->mc;
    int64_t nc = pr->N - n0 < pr->nc ? pr->N - n0 : pr->nc;
    int64_t oa = 0, ob = 0, oc = 0, obias = 0, rem = bi;
    for (int d = (int)pr->nb - 1; d >= 0; d--) {
        int64_t ix = rem % pr->bshape[d];
        rem /= pr->bshape[d];
        oa += ix * pr->sa[d];
        ob += ix * pr->sb[d];
        oc += ix * pr->sc[d];
        obias += ix * pr->sbias[d];
    }
    const float *A = pr->a_packed ? pr->A + oa : pr->A + oa + m0 * pr->rsa;
    float *C = pr->C + oc + m0 * pr->ldc + n0;
    int64_t kc_max = pr->K < KC ? pr->K : KC;
    int64_t mcp = (mc + MR - 1) / MR * MR, ncp = (nc + NR - 1) / NR * NR;
    float *ap = pr->a_packed ? NULL : grow(&tl_a, &tl_a_n, (size_t)(mcp * kc_max));
    float *bp = pr->b_packed ? (float *)pr->B : grow(&tl_b, &tl_b_n, (size_t)(ncp * kc_max));
    if ((!ap && !pr->a_packed) || !bp) abort();
    epi e;
    e.alpha = pr->alpha;
    e.beta = pr->beta;
    e.bias_rs = pr->bias_rs;
    e.bias_cs = pr->bias_cs;
    e.relu = pr->relu;
    if (pr->K == 0) {  /* C = epilogue(0) */
        e.accumulate = 0;
        e.last = 1;
        float zero[MR * NR] = {0};
        for (int64_t i = 0; i < mc; i += MR)
            for (int64_t j = 0; j < nc; j += NR) {
                e.bias = pr->bias ? pr->bias + obias + (m0 + i) * pr->bias_rs + (n0 + j) * pr->bias_cs : NULL;
                store_tile(zero, C + i * pr->ldc + j, pr->ldc, mc - i < MR ? mc - i : MR, nc - j < NR ? nc - j : NR, &e);
            }
        return;
    }
    for (int64_t k0 = 0; k0 < pr->K; k0 += KC) {
        int64_t kc = pr->K - k0 < KC ? pr->K - k0 : KC;
        if (!pr->a_packed) pack_a(A + k0 * pr->csa, pr->rsa, pr->csa, mc, kc, ap);
        if (pr->conv)
            pack_b_conv(pr->conv, pr->B + ob, k0, kc, n0, nc, bp);
        else if (!pr->b_packed)
            pack_b(pr->B + ob + k0 * pr->rsb + n0 * pr->csb, pr->rsb, pr->csb, kc, nc, bp);
        e.accumulate = k0 > 0;
        e.last = k0 + kc >= pr->K;
        for (int64_t j = 0; j < nc; j += NR) {
            int64_t nr = nc - j < NR ? nc - j : NR;
            for (int64_t i = 0; i < mc; i += MR) {
                int64_t mr = mc - i < MR ? mc - i : MR;
                e.bias = pr->bias ? pr->bias + obias + (m0 + i) * pr->bias_rs + (n0 + j) * pr->bias_cs : NULL;
                const float *a = pr->a_packed ? A + ((m0 + i) / MR) * pr->K * MR + k0 * MR : ap + i * kc;
                const float *b = pr->b_packed ? pr->B + ((n0 + j) / NR) * pr->K * NR + k0 * NR : bp + j * kc;
                kern(kc, a, b, C + i * pr->ldc + j, pr->ldc, mr, nr, &e);
            }
        }
    }
}

static void body(int64_t begin, int64_t end, void *ctx) {
    const problem *pr = ctx;
    kernel_fn kern = pick_kernel();
    for (int64_t t = begin; t < end; t++) run_task(pr, t, kern);
}

/* Splits M and N into blocks so there are enough tasks for every thread. */
static void run(problem *pr) {
    int64_t batch = 1;
    for (int d = 0; d < pr->nb; d++) batch *= pr->bshape[d];
    if (batch == 0 || pr->M == 0 || pr->N == 0) return;
    int threads = tcc_num_threads();
    pr->mc = pr->M < MC ? pr->M : MC;
    pr->mblocks = (pr->M + pr->mc - 1) / pr->mc;
    int64_t want = (int64_t)threads * 2;  /* tasks wanted */
    int64_t have = batch * pr->mblocks;
    int64_t nblocks = (pr->N + NC_MAX - 1) / NC_MAX;
    if (threads > 1 && have * nblocks < want) {
        int64_t need = (want + have - 1) / have;
        int64_t maxn = (pr->N + NR - 1) / NR;  /* at most one NR panel per block */
        nblocks = need < maxn ? need : maxn;
        if (nblocks < 1) nblocks = 1;
    }
    pr->nc = (pr->N + nblocks - 1) / nblocks;
    pr->nc = (pr->nc + NR - 1) / NR * NR;
    pr->nblocks = (pr->N + pr->nc - 1) / pr->nc;
    /* still too few tasks (small N): split M finer, in MR multiples */
    if (threads > 1 && batch * pr->mblocks * pr->nblocks < want && pr->M > MR) {
        int64_t need = (want + batch * pr->nblocks - 1) / (batch * pr->nblocks);
        int64_t mc = (pr->M + need - 1) / need;
        mc = (mc + MR - 1) / MR * MR;
        if (mc < pr->mc) {
            pr->mc = mc;
            pr->mblocks = (pr->M + mc - 1) / mc;
        }
    }
    int64_t tasks = batch * pr->mblocks * pr->nblocks;
    tcc_parallel_for(tasks, body, pr);
}

static void gemm(const int64_t *p, float *C, const float *A, const float *B, const float *bias, int b_packed) {
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.b_packed = b_packed;
    pr.M = p[P_M];
    pr.N = p[P_N];
    pr.K = p[P_K];
    pr.rsa = p[P_RSA];
    pr.csa = p[P_CSA];
    pr.rsb = p[P_RSB];
    pr.csb = p[P_CSB];
    pr.ldc = p[P_LDC];
    pr.bias_rs = p[P_BIAS_RS];
    pr.bias_cs = p[P_BIAS_CS];
    pr.alpha = (float)as_double(p[P_ALPHA]);
    pr.beta = (float)as_double(p[P_BETA]);
    pr.relu = (int)p[P_RELU];
    pr.nb = p[P_NB];
    for (int d = 0; d < MAXB; d++) {
        pr.bshape[d] = p[P_BSHAPE + d];
        pr.sa[d] = p[P_SA + d];
        pr.sb[d] = p[P_SB + d];
        pr.sc[d] = p[P_SC + d];
        pr.sbias[d] = p[P_SBIAS + d];
    }
    pr.A = A;
    pr.B = B;
    pr.C = C;
    pr.bias = bias;
    run(&pr);
}

void tcc_gemm_f32(const int64_t *p, float *C, const float *A, const float *B, const float *bias) {
    gemm(p, C, A, B, bias, 0);
}

/* B is a constant packed at compile time (kernels.pack_b_panels): a model's
 * weights are not repacked on every call, which cost a batch-64 MLP a fifth
 * of its time. Its own symbol, so artifacts built before it keep working. */
void tcc_gemm_bpacked_f32(const int64_t *p, float *C, const float *A, const float *Bp, const float *bias) {
    gemm(p, C, A, Bp, bias, 1);
}

/* -- depthwise: one input channel per output channel --------------------------- */
typedef struct {
    const int64_t *p;
    float *Y;
    const float *X, *W, *bias;
} dw_ctx;

/* 3x3, stride 1 or 2, no dilation (MobileNet's depthwise layers): the
 * plane is zero-padded once into `pad`, then each output row is one
 * branch-free loop over its pixels with the nine taps in registers, which
 * the compiler vectorizes along the row. */
static int dw3x3_ok(const int64_t *p, int64_t mult) {
    int64_t S = p[Q_SH];
    return mult == 1 && p[Q_KH] == 3 && p[Q_KW] == 3 && p[Q_DH] == 1 && p[Q_DW] == 1 && S == p[Q_SW] &&
           (S == 1 || S == 2) && ((p[Q_OH] - 1) * S + 3) * ((p[Q_OW] - 1) * S + 3) <= 64 * 1024;
}

static inline float dw_act(float v, int relu) { return relu && !(v > 0.0f) && v == v ? 0.0f : v; }

static void dw3x3_plane(const int64_t *p, const float *x, const float *w, float b, int relu, float *y, float *pad) {
    int64_t H = p[Q_H], Wd = p[Q_W], OH = p[Q_OH], OW = p[Q_OW], S = p[Q_SH], PH = p[Q_PH], PW = p[Q_PW];
    int64_t Hp = (OH - 1) * S + 3, Wp = (OW - 1) * S + 3;
    memset(pad, 0, (size_t)(Hp * Wp) * sizeof(float));
    for (int64_t i = 0; i < H; i++) {
        int64_t r = i + PH;
        if (r < 0 || r >= Hp) continue;
        int64_t c0 = PW < 0 ? -PW : 0, c1 = Wd < Wp - PW ? Wd : Wp - PW;
        if (c1 > c0) memcpy(pad + r * Wp + c0 + PW, x + i * Wd + c0, (size_t)(c1 - c0) * sizeof(float));
    }
    const float w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4], w5 = w[5], w6 = w[6], w7 = w[7], w8 = w[8];
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *r0 = pad + oh * S * Wp, *r1 = r0 + Wp, *r2 = r1 + Wp;
        float *yr = y + oh * OW;
        if (S == 1) {
            for (int64_t j = 0; j < OW; j++)
                yr[j] = dw_act(b + w0 * r0[j] + w1 * r0[j + 1] + w2 * r0[j + 2] + w3 * r1[j] + w4 * r1[j + 1] +
                               w5 * r1[j + 2] + w6 * r2[j] + w7 * r2[j + 1] + w8 * r2[j + 2], relu);
        } else {
            for (int64_t j = 0; j < OW; j++)
                yr[j] = dw_act(b + w0 * r0[2 * j] + w1 * r0[2 * j + 1] + w2 * r0[2 * j + 2] + w3 * r1[2 * j] +
                               w4 * r1[2 * j + 1] + w5 * r1[2 * j + 2] + w6 * r2[2 * j] + w7 * r2[2 * j + 1] +
                               w8 * r2[2 * j + 2], relu);
        }
    }
}

/* Built for AVX-512, AVX2 and the baseline (the library is compiled
 * without -march): the inner loops are the compiler's to vectorize. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void dw_body(int64_t begin, int64_t end, void *vctx) {
    const dw_ctx *cx = vctx;
    const int64_t *p = cx->p;
    int64_t C = p[Q_C], H = p[Q_H], Wd = p[Q_W], M = p[Q_M], KH = p[Q_KH], KW = p[Q_KW];
    int64_t OH = p[Q_OH], OW = p[Q_OW], SH = p[Q_SH], SW = p[Q_SW], PH = p[Q_PH], PW = p[Q_PW];
    int64_t DH = p[Q_DH], DW = p[Q_DW];
    int relu = (int)p[Q_RELU];
    int64_t mult = M / C;  /* output channels per input channel (1 for depthwise proper) */
    float row[4096];
    float *pad = dw3x3_ok(p, mult) ? grow(&tl_b, &tl_b_n, 64 * 1024) : NULL;
    for (int64_t t = begin; t < end; t++) {  /* t = (n, m) */
        int64_t n = t / M, m = t % M, c = m / mult;
        const float *x = cx->X + (n * C + c) * H * Wd;
        const float *w = cx->W + m * KH * KW;
        float *y = cx->Y + (n * M + m) * OH * OW;
        float b0 = cx->bias ? cx->bias[m] : 0.0f;
        if (pad) {
            dw3x3_plane(p, x, w, b0, relu, y, pad);
            continue;
        }
        for (int64_t oh = 0; oh < OH; oh++) {
            float *yr = OW <= 4096 ? row : y + oh * OW;
            for (int64_t ow = 0; ow < OW; ow++) yr[ow] = b0;
            for (int64_t kh = 0; kh < KH; kh++) {
                int64_t ih = oh * SH - PH + kh * DH;
                if (ih < 0 || ih >= H) continue;
                const float *xr = x + ih * Wd;
                for (int64_t kw = 0; kw < KW; kw++) {
                    float wv = w[kh * KW + kw];
                    int64_t off = kw * DW - PW;
                    /* ow range keeping 0 <= ow*SW + off < W */
                    int64_t lo = off < 0 ? (-off + SW - 1) / SW : 0;
                    int64_t hi = (Wd - 1 - off) >= 0 ? (Wd - 1 - off) / SW + 1 : 0;
                    if (hi > OW) hi = OW;
                    if (SW == 1) {
                        const float *xs = xr + off;
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xs[ow];
                    } else if (SW == 2) {
                        const float *xs = xr + off;
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xs[2 * ow];
                    } else {
                        for (int64_t ow = lo; ow < hi; ow++) yr[ow] += wv * xr[ow * SW + off];
                    }
                }
            }
            if (relu)
                for (int64_t ow = 0; ow < OW; ow++) yr[ow] = yr[ow] > 0.0f ? yr[ow] : (yr[ow] != yr[ow] ? yr[ow] : 0.0f);
            if (yr == row) memcpy(y + oh * OW, row, OW * sizeof(float));
        }
    }
}

void tcc_conv_f32(const int64_t *p, float *Y, const float *X, const float *W, const float *bias) {
    int64_t N = p[Q_N], C = p[Q_C], M = p[Q_M], G = p[Q_G];
    int64_t Cg = C / G, Mg = M / G;
    if (Cg == 1 && G == C) {
        dw_ctx cx = {p, Y, X, W, bias};
        tcc_parallel_for(N * M, dw_body, &cx);
        return;
    }
    conv_geom g = {Cg, p[Q_H], p[Q_W], p[Q_KH], p[Q_KW], p[Q_OH], p[Q_OW], p[Q_SH], p[Q_SW], p[Q_PH],
                   p[Q_PW], p[Q_DH], p[Q_DW]};
    int64_t P = g.OH * g.OW, K = Cg * g.KH * g.KW, HW = g.H * g.W;
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.M = Mg;
    pr.N = P;
    pr.K = K;
    pr.rsa = K;
    pr.csa = 1;
    pr.ldc = P;
    pr.alpha = 1.0f;
    pr.beta = 1.0f;
    pr.relu = (int)p[Q_RELU];
    pr.bias_rs = 1;
    pr.bias_cs = 0;
    /* batch dims (n, g) */
    pr.nb = 2;
    pr.bshape[0] = N;
    pr.bshape[1] = G;
    pr.a_packed = (int)p[Q_APACKED];
    pr.sa[0] = 0;
    pr.sa[1] = pr.a_packed ? (Mg + MR - 1) / MR * MR * K : Mg * K;
    pr.sb[0] = C * HW;
    pr.sb[1] = Cg * HW;
    pr.sc[0] = M * P;
    pr.sc[1] = Mg * P;
    pr.sbias[0] = 0;
    pr.sbias[1] = Mg;
    pr.A = W;
    pr.B = X;
    pr.C = Y;
    pr.bias = bias;
    /* a 1x1, stride-1, unpadded convolution is a plain GEMM on NCHW */
    if (g.KH == 1 && g.KW == 1 && g.SH == 1 && g.SW == 1 && g.PH == 0 && g.PW == 0) {
        pr.rsb = HW;
        pr.csb = 1;
    } else {
        pr.conv = &g;
    }
    run(&pr);
}
