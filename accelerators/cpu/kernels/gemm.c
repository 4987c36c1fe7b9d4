/* GEMM through OpenBLAS (scipy-openblas32's libscipy_openblas, single
 * threaded: the parallelism is ours, one block of C per thread, so the
 * epilogue runs on each block while it is still in cache), plus direct
 * paths for tiny products where a BLAS call costs more than the arithmetic
 * and for products of at most SM_MAX rows (a classifier's batch-1 Gemm):
 * those are matrix-vector products bound by reading B once, which OpenBLAS
 * would first copy (pack) whole; and (AVX-512) products with a small
 * non-transposed B, which gemm_packed.c's tiles read in place. */
#define _GNU_SOURCE /* strcasestr */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cblas.h"
#include "conv_vec.h"
#include "tcc_cpu.h"
#include "mathfun.h"

#define SM_MAX 4 /* rows of C the small-M paths take */
#define DIRECT_B_MAX (64 * 1024) /* floats of B the packed-GEMM tiles take in place */

/* gemm_packed.c's tiles on a row-major B (no epilogue) */
void tcc_cpu_gemm_rowmajor_b(long M, long N, long K, float alpha, const float *A, long rsa, long csa,
                             const float *B, long ldb, float *C, long ldc);
void tcc_cpu_gemm_packed(long M, long N, long K, float alpha, const float *A, long rsa, long csa, const float *Bp,
                         float *C, long ldc, const tcc_epilogue *ep);

#if defined(__AVX512F__)
/* OpenBLAS picks its kernels by CPU model at load; one it does not know runs
 * a generic choice. 0.3.34 (scipy-openblas32) runs its Haswell (AVX2) kernels
 * on AMD EPYC family 26 (Zen 5), where the AVX-512 tiles of gemm_packed.c
 * on a B packed per call reach 1.7-1.8x its speed (1024^3, 1 / 2 threads:
 * 136 -> 248 / 262 -> 475 GFLOP/s). Where its core is not one of its AVX-512
 * ones, a runtime B is packed into panels here and goes to those tiles.
 * TCC_CPU_GEMM_B=pack or =openblas overrides the choice, and the tests run
 * both on every CPU (tcc_cpu_gemm_pack_b). */
char *scipy_openblas_get_corename(void);
static int g_pack_b = -1;   /* tcc_cpu_gemm_pack_b's choice; -1: g_pack_auto's */
static int g_pack_auto = 0; /* set once when the library loads (tcc_cpu_blas_init) */
static void choose_pack_b(void) {
    const char *env = getenv("TCC_CPU_GEMM_B"), *n = scipy_openblas_get_corename();
    if (env && !strcmp(env, "pack"))
        g_pack_auto = 1;
    else if (env && !strcmp(env, "openblas"))
        g_pack_auto = 0;
    else
        g_pack_auto = !(n && (strcasestr(n, "skylakex") || strcasestr(n, "cooperlake") || strcasestr(n, "sapphire")));
}
static int pack_runtime_b(void) { return g_pack_b >= 0 ? g_pack_b : g_pack_auto; }
#endif

/* Runtime B's route from now on (tests): 1 packed for the AVX-512 tiles, 0
 * OpenBLAS, -1 the default; returns the previous setting. Other builds have
 * only OpenBLAS. */
int tcc_cpu_gemm_pack_b(int on) {
#if defined(__AVX512F__)
    const int was = g_pack_b;
    g_pack_b = on < 0 ? -1 : !!on;
    return was;
#else
    (void)on;
    return -1;
#endif
}

#if defined(__AVX2__) || defined(__AVX512F__)
/* the next 4 rows of B, a group ahead: the 4 row streams cross pages together */
#define SM_PREFETCH(p) _mm_prefetch((const char *)(p), _MM_HINT_T1)
#else
#define SM_PREFETCH(p) ((void)0)
#endif

static inline float act1(float v, int act, float a0, float a1) {
    switch (act) {
    case TCC_ACT_RELU: return v < 0.f ? 0.f : v; /* NaN stays NaN, as in onnxruntime */
    case TCC_ACT_CLIP: return v < a0 ? a0 : (v > a1 ? a1 : v);
    case TCC_ACT_SIGMOID: return tcc_sigmoidf(v);
    case TCC_ACT_TANH: return tcc_tanhf(v);
    case TCC_ACT_LEAKY: return v >= 0.f ? v : v * a0;
    default: return v;
    }
}

/* Applies `ep` to rows [r0, r1) and columns [c0, c1) of C. */
void tcc_cpu_epilogue(const tcc_epilogue *ep, float *C, long ldc, long N, long r0, long r1, long c0, long c1) {
    if (!ep) return;
    const int act = ep->act;
    const float a0 = ep->a0, a1 = ep->a1, bs = ep->bias_scale;
    const int bm = ep->bias ? ep->bias_mode : 0;
    if (bm == 0 && !ep->residual && act == TCC_ACT_NONE) return;
    for (long i = r0; i < r1; i++) {
        float *c = C + i * ldc;
        const float *res = ep->residual ? ep->residual + i * ldc : NULL;
        const float *bcol = bm == 1 ? ep->bias : (bm == 3 ? ep->bias + i * N : NULL);
        float brow = bm == 2 ? bs * ep->bias[i] : (bm == 4 ? bs * ep->bias[0] : 0.f);
        if (act == TCC_ACT_RELU || act == TCC_ACT_NONE || act == TCC_ACT_CLIP || act == TCC_ACT_LEAKY) {
            /* vectorizable forms */
            for (long j = c0; j < c1; j++) {
                float v = c[j] + brow;
                if (bcol) v += bs * bcol[j];
                if (res) v += res[j];
                if (act == TCC_ACT_RELU) v = v < 0.f ? 0.f : v;
                else if (act == TCC_ACT_CLIP) v = v < a0 ? a0 : (v > a1 ? a1 : v);
                else if (act == TCC_ACT_LEAKY) v = v >= 0.f ? v : v * a0;
                c[j] = v;
            }
        } else {
            for (long j = c0; j < c1; j++) {
                float v = c[j] + brow;
                if (bcol) v += bs * bcol[j];
                if (res) v += res[j];
                c[j] = act1(v, act, a0, a1);
            }
        }
    }
}

static void small_gemm(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda,
                       const float *B, long ldb, float *C, long ldc) {
    for (long i = 0; i < M; i++) {
        float *c = C + i * ldc;
        for (long j = 0; j < N; j++) c[j] = 0.f;
        for (long k = 0; k < K; k++) {
            float a = alpha * (ta ? A[k * lda + i] : A[i * lda + k]);
            if (!tb) {
                const float *b = B + k * ldb;
                for (long j = 0; j < N; j++) c[j] += a * b[j];
            } else {
                for (long j = 0; j < N; j++) c[j] += a * B[j * ldb + k];
            }
        }
    }
}

CV_INLINE float hsum_v(vf v) {
    float s = 0.f;
    for (int i = 0; i < VL; i++) s += v[i];
    return s;
}

/* C[i][j] = alpha * dot(a_i, B row j), B row-major N x K (transB): MB rows
 * of C against 4 rows of B at a time, one vector accumulator each, so every
 * B element is loaded once. a holds the MB rows of op(A), K floats each. */
#define SM_TB(MB)                                                                                             \
    static void sm_tb_##MB(long N, long K, float alpha, const float *a, long as, const float *B, long ldb,      \
                           float *C, long ldc) {                                                                        \
        long j = 0;                                                                                           \
        for (; j + 4 <= N; j += 4) {                                                                          \
            vf acc[MB][4];                                                                                    \
            _Pragma("GCC unroll 4") for (int i = 0; i < MB; i++)                                              \
            _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc[i][r] = (vf){0};                           \
            const float *b0 = B + j * ldb;                                                                    \
            long k = 0;                                                                                       \
            for (; k + VL <= K; k += VL) {                                                                    \
                vf bv[4];                                                                                     \
                _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) {                                         \
                    bv[r] = v_ld(b0 + r * ldb + k);                                                           \
                    SM_PREFETCH(b0 + (r + 4) * ldb + k);                                                      \
                }                                                                                             \
                _Pragma("GCC unroll 4") for (int i = 0; i < MB; i++) {                                        \
                    vf av = v_ld(a + i * as + k);                                                              \
                    _Pragma("GCC unroll 4") for (int r = 0; r < 4; r++) acc[i][r] += av * bv[r];             \
                }                                                                                             \
            }                                                                                                 \
            if (k < K) {                                                                                      \
                int n = (int)(K - k);                                                                         \
                vf bv[4];                                                                                     \
                for (int r = 0; r < 4; r++) bv[r] = v_ld_n(b0 + r * ldb + k, n);                             \
                for (int i = 0; i < MB; i++) {                                                                \
                    vf av = v_ld_n(a + i * as + k, n);                                                         \
                    for (int r = 0; r < 4; r++) acc[i][r] += av * bv[r];                                     \
                }                                                                                             \
            }                                                                                                 \
            for (int i = 0; i < MB; i++)                                                                      \
                for (int r = 0; r < 4; r++) C[i * ldc + j + r] = alpha * hsum_v(acc[i][r]);                   \
        }                                                                                                     \
        for (; j < N; j++) {                                                                                  \
            const float *b = B + j * ldb;                                                                     \
            for (int i = 0; i < MB; i++) {                                                                    \
                vf acc = (vf){0};                                                                             \
                long k = 0;                                                                                   \
                for (; k + VL <= K; k += VL) acc += v_ld(a + i * as + k) * v_ld(b + k);                        \
                if (k < K) acc += v_ld_n(a + i * as + k, (int)(K - k)) * v_ld_n(b + k, (int)(K - k));         \
                C[i * ldc + j] = alpha * hsum_v(acc);                                                         \
            }                                                                                                 \
        }                                                                                                     \
    }
SM_TB(1)
SM_TB(2)
SM_TB(3)
SM_TB(4)

/* C[i][:] = alpha * sum_k a_i[k] * B row k, B row-major K x N: columns in
 * blocks of 4 vectors kept in registers while K streams by. */
static void sm_nb(long M, long N, long K, float alpha, const float *a, long as, const float *B, long ldb,
                  float *C, long ldc) {
    for (long j = 0; j < N; j += 4 * VL) {
        int n[4];
        for (int v = 0; v < 4; v++) {
            long r = N - j - v * VL;
            n[v] = r <= 0 ? 0 : (r >= VL ? VL : (int)r);
        }
        const int full = n[3] == VL;
        for (long i = 0; i < M; i++) {
            vf acc[4] = {(vf){0}, (vf){0}, (vf){0}, (vf){0}};
            const float *ai = a + i * as;
            if (full) {
                for (long k = 0; k < K; k++) {
                    const float *b = B + k * ldb + j;
                    const float av = ai[k];
#pragma GCC unroll 4
                    for (int v = 0; v < 4; v++) acc[v] += av * v_ld(b + v * VL);
                }
            } else {
                for (long k = 0; k < K; k++) {
                    const float *b = B + k * ldb + j;
                    const float av = ai[k];
                    for (int v = 0; v < 4; v++)
                        if (n[v]) acc[v] += av * v_ld_n(b + v * VL, n[v]);
                }
            }
            for (int v = 0; v < 4; v++)
                if (n[v]) v_st_n(C + i * ldc + j + v * VL, acc[v] * alpha, n[v]);
        }
    }
}

/* C = A . B for a few rows of A (row-major B, no epilogue): the per-step
 * products of rnn.c, too small for a BLAS call (sm_nb's register blocks). */
void tcc_cpu_gemm_rows(long M, long N, long K, const float *A, long lda, const float *B, long ldb, float *C,
                       long ldc) {
    sm_nb(M, N, K, 1.f, A, lda, B, ldb, C, ldc);
}

/* M <= SM_MAX rows; a transposed A is copied into a contiguous M x K block
 * first (per-thread buffer 1: buffer 0 may hold an im2col matrix that is
 * this product's B, see conv.c). */
static void small_m_gemm(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda,
                         const float *B, long ldb, float *C, long ldc) {
    const float *a = A;
    long as = lda;
    if (ta) {
        float *t = cv_tls_buffer(1, (size_t)(M * K + VL));
        for (long i = 0; i < M; i++)
            for (long k = 0; k < K; k++) t[i * K + k] = A[k * lda + i];
        a = t;
        as = K;
    }
    if (!tb) {
        sm_nb(M, N, K, alpha, a, as, B, ldb, C, ldc);
        return;
    }
    switch (M) {
    case 1: sm_tb_1(N, K, alpha, a, as, B, ldb, C, ldc); break;
    case 2: sm_tb_2(N, K, alpha, a, as, B, ldb, C, ldc); break;
    case 3: sm_tb_3(N, K, alpha, a, as, B, ldb, C, ldc); break;
    default: sm_tb_4(N, K, alpha, a, as, B, ldb, C, ldc); break;
    }
}

#if defined(__AVX512F__)
typedef struct {
    long K, N, ldb;
    int tb;
    const float *B;
    float *Bp;
} pack_job;

/* panels [b, e) of B (K x N, or N x K when tb) into gemm_packed.c's layout:
 * [panel][K][32], zero past N */
static void pack_task(void *p, long b, long e) {
    const pack_job *j = p;
    for (long q = b; q < e; q++) {
        const long n0 = q * 32, nc = j->N - n0 < 32 ? j->N - n0 : 32;
        float *d = j->Bp + q * j->K * 32;
        if (!j->tb) {
            for (long k = 0; k < j->K; k++) {
                memcpy(d + k * 32, j->B + k * j->ldb + n0, (size_t)nc * sizeof(float));
                for (long c = nc; c < 32; c++) d[k * 32 + c] = 0.f;
            }
        } else { /* column c of the panel is row n0 + c of B: 16 k at a time, so each row's line is read once */
            for (long k0 = 0; k0 < j->K; k0 += 16) {
                const long kn = j->K - k0 < 16 ? j->K - k0 : 16;
                for (long c = 0; c < nc; c++) {
                    const float *src = j->B + (n0 + c) * j->ldb + k0;
                    for (long k = 0; k < kn; k++) d[(k0 + k) * 32 + c] = src[k];
                }
                for (long c = nc; c < 32; c++)
                    for (long k = 0; k < kn; k++) d[(k0 + k) * 32 + c] = 0.f;
            }
        }
    }
}

#define PACK_B_MAX (16l << 20) /* bytes of packed B; past that (a thread keeps its buffer), OpenBLAS */

/* Products that go to the AVX-512 tiles on a packed B rather than to an
 * OpenBLAS without AVX-512 kernels (pack_runtime_b): not the few-row or
 * tiny ones (their paths of their own), nor the narrowest */
static int packs_b(long M, long N, long K) {
    return M > SM_MAX && N > 16 && K > 0 && 2.0 * M * N * K > 16 * 16 * 16 * 2 &&
           (double)((N + 31) / 32) * 32 * K * sizeof(float) <= PACK_B_MAX && pack_runtime_b();
}

/* B packed into Bp (its panels in parallel on the pool, or here), then
 * gemm_packed.c's tiles with the epilogue ep */
static void gemm_on_packed_b(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda,
                             const float *B, long ldb, float *Bp, int parallel, float *C, long ldc,
                             const tcc_epilogue *ep) {
    const long panels = (N + 31) / 32;
    pack_job pj = {K, N, ldb, tb, B, Bp};
    if (parallel)
        tcc_cpu_parallel_for(panels, 1, pack_task, &pj);
    else
        pack_task(&pj, 0, panels);
    tcc_cpu_gemm_packed(M, N, K, alpha, A, ta ? 1 : lda, ta ? lda : 1, Bp, C, ldc, ep);
}
#endif

/* A row-major B of at most DIRECT_B_MAX floats: the AVX-512 tiles read it in
 * place (tcc_cpu_blas) */
static inline int b_in_place(int tb, long N, long K) {
#if defined(__AVX512F__)
    return !tb && K * N <= DIRECT_B_MAX;
#else
    (void)tb, (void)N, (void)K;
    return 0;
#endif
}

void tcc_cpu_blas(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda, const float *B,
                 long ldb, float *C, long ldc) {
    if (M <= 0 || N <= 0) return;
    if (K == 0) {
        for (long i = 0; i < M; i++) memset(C + i * ldc, 0, N * sizeof(float));
        return;
    }
    if (M <= SM_MAX && N * K > 4096) {
        small_m_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc);
        return;
    }
    if (M * N * K <= 16 * 16 * 16 || (N <= 8 && M * K <= 4096)) {
        small_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, C, ldc);
        return;
    }
#if defined(__AVX512F__)
    /* B of at most 256 KB stays in L2 while the packed GEMM's row tiles
     * read it in place (attention's per-head products): 10-18 % faster than
     * OpenBLAS copying both operands first; larger B measured slower. The
     * AVX2 tiles in place were slower than OpenBLAS: 80 against 105-115
     * GFLOP/s at 128x64x128, 94 against 122-136 at 197x64x197 (1 thread,
     * Xeon family 6 model 167, `avx2` library). */
    if (b_in_place(tb, N, K)) {
        tcc_cpu_gemm_rowmajor_b(M, N, K, alpha, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc);
        return;
    }
    /* any other B (attention's K^T, a batch's large B) packed into this
     * thread's buffer; tcc_cpu_gemm packs a large one once for all threads */
    if (packs_b(M, N, K)) {
        float *Bp = cv_tls_buffer(CV_TLS_GEMM_B, (size_t)((N + 31) / 32 * 32 * K));
        if (Bp) {
            gemm_on_packed_b(ta, tb, M, N, K, alpha, A, lda, B, ldb, Bp, 0, C, ldc, NULL);
            return;
        }
    }
#endif
    scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)M,
                      (blasint)N, (blasint)K, alpha, A, (blasint)lda, B, (blasint)ldb, 0.f, C, (blasint)ldc);
}

typedef struct {
    int ta, tb;
    long M, N, K, lda, ldb, ldc, step;
    float alpha;
    const float *A, *B;
    float *C;
    const tcc_epilogue *ep;
    int split_n;
} gemm_job;

static void gemm_task(void *p, long b, long e) {
    gemm_job *j = p;
    long lo = b * j->step, hi = e * j->step;
    if (j->split_n) {
        if (hi > j->N) hi = j->N;
        if (lo >= hi) return;
        const float *B = j->tb ? j->B + lo * j->ldb : j->B + lo;
        tcc_cpu_blas(j->ta, j->tb, j->M, hi - lo, j->K, j->alpha, j->A, j->lda, B, j->ldb, j->C + lo, j->ldc);
        tcc_cpu_epilogue(j->ep, j->C, j->ldc, j->N, 0, j->M, lo, hi);
    } else {
        if (hi > j->M) hi = j->M;
        if (lo >= hi) return;
        const float *A = j->ta ? j->A + lo : j->A + lo * j->lda;
        tcc_cpu_blas(j->ta, j->tb, hi - lo, j->N, j->K, j->alpha, A, j->lda, j->B, j->ldb, j->C + lo * j->ldc, j->ldc);
        tcc_cpu_epilogue(j->ep, j->C, j->ldc, j->N, lo, hi, 0, j->N);
    }
}

void tcc_cpu_gemm(int ta, int tb, long M, long N, long K, float alpha, const float *A, long lda, const float *B,
                  long ldb, float *C, long ldc, const tcc_epilogue *ep) {
    int nt = tcc_cpu_num_threads();
    double flops = 2.0 * M * N * K;
#if defined(__AVX512F__)
    /* B packed once for all threads (a small row-major B is read in place
     * by tcc_cpu_blas: packing it first measured 3 % slower at 256^3) */
    if (packs_b(M, N, K) && !b_in_place(tb, N, K)) {
        float *Bp = aligned_alloc(64, (size_t)((N + 31) / 32 * 32 * K) * sizeof(float));
        if (Bp) { /* without memory for it, as before */
            gemm_on_packed_b(ta, tb, M, N, K, alpha, A, lda, B, ldb, Bp, 1, C, ldc, ep);
            free(Bp);
            return;
        }
    }
#endif
    gemm_job j = {ta, tb, M, N, K, lda, ldb, ldc, 1, alpha, A, B, C, ep, 0};
    /* small M: bound by reading B, worth splitting once B is about 1 MiB */
    const int small_m = M <= SM_MAX && (double)N * K >= 256.0 * 1024;
    if (nt <= 1 || (flops < 2.0e6 && !small_m)) {
        j.step = M;
        gemm_task(&j, 0, 1);
        return;
    }
    /* Split the larger of M and N into one block per thread (multiples of 16). */
    if (N >= M) {
        j.split_n = 1;
        j.step = ((N + nt - 1) / nt + 15) / 16 * 16;
        tcc_cpu_parallel_for((N + j.step - 1) / j.step, 1, gemm_task, &j);
    } else {
        j.step = ((M + nt - 1) / nt + 7) / 8 * 8;
        tcc_cpu_parallel_for((M + j.step - 1) / j.step, 1, gemm_task, &j);
    }
}

typedef struct {
    const long *offA, *offB, *offC;
    int ta, tb;
    long M, N, K, lda, ldb, ldc;
    float alpha;
    const float *A, *B;
    float *C;
    const tcc_epilogue *ep;
} batch_job;

static void batch_task(void *p, long b, long e) {
    batch_job *j = p;
    for (long i = b; i < e; i++) {
        float *C = j->C + j->offC[i];
        tcc_cpu_blas(j->ta, j->tb, j->M, j->N, j->K, j->alpha, j->A + j->offA[i], j->lda, j->B + j->offB[i], j->ldb, C,
             j->ldc);
        if (j->ep) {
            tcc_epilogue ep = *j->ep;
            if (ep.residual) ep.residual += j->offC[i];
            if (ep.bias && ep.bias_mode == 3) ep.bias += j->offC[i];
            tcc_cpu_epilogue(&ep, C, j->ldc, j->N, 0, j->M, 0, j->N);
        }
    }
}

void tcc_cpu_gemm_batch(long batch, const long *offA, const long *offB, const long *offC, int ta, int tb, long M,
                        long N, long K, float alpha, const float *A, long lda, const float *B, long ldb, float *C,
                        long ldc, const tcc_epilogue *ep) {
    int nt = tcc_cpu_num_threads();
    if (batch >= nt || 2.0 * M * N * K < 2.0e6) {
        batch_job j = {offA, offB, offC, ta, tb, M, N, K, lda, ldb, ldc, alpha, A, B, C, ep};
        tcc_cpu_parallel_for(batch, 1, batch_task, &j);
        return;
    }
    for (long i = 0; i < batch; i++) {
        tcc_epilogue e2, *pe = NULL;
        if (ep) {
            e2 = *ep;
            if (e2.residual) e2.residual += offC[i];
            if (e2.bias && e2.bias_mode == 3) e2.bias += offC[i];
            pe = &e2;
        }
        tcc_cpu_gemm(ta, tb, M, N, K, alpha, A + offA[i], lda, B + offB[i], ldb, C + offC[i], ldc, pe);
    }
}

/* OpenBLAS runs single threaded inside our pool's tasks; with AVX-512, the
 * route of a runtime B is chosen here, once (pack_runtime_b). */
__attribute__((constructor)) static void tcc_cpu_blas_init(void) {
    scipy_openblas_set_num_threads(1);
#if defined(__AVX512F__)
    choose_pack_b();
#endif
}
