/* GEMM against a narrow constant B (a classifier's last layer: N = 10),
 * given transposed at compile time (codegen.pack_bt: N rows of ldbt >= K
 * floats). gemm_packed.c's tiles put B's columns in the vector lanes: with
 * N = 10 a third of them compute nothing, and every broadcast of A feeds a
 * single FMA. Here the lanes run along K instead: a tile of R rows x NB
 * columns holds R*NB vector accumulators of partial dot products (A's rows
 * and B^T's rows both read as contiguous vectors, R + NB loads per R*NB
 * FMAs), reduced across lanes once at the end. Measured on the MLP's
 * 64x1024x10 (1 thread, weights cold as in a run): 11.5 us against 19 us
 * for the packed tiles (onnxruntime: ~21 us).
 *
 * Tasks are (column group, row block) pairs, group-major: a group's B^T rows
 * (NB x K floats, 20 KB at K = 1024) stay in L1 while the row blocks pass. */
#include <string.h>

#include "tcc_cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

void tcc_cpu_epilogue(const tcc_epilogue *ep, float *C, long ldc, long N, long r0, long r1, long c0, long c1);

typedef struct {
    long M, N, K, lda, ldbt, ldc, rblocks, groups;
    float alpha;
    const float *A, *Bt;
    float *C;
    const tcc_epilogue *ep;
} narrow_job;

#if defined(__AVX512F__)
/* 4 x 6: 24 accumulators, 4 rows of A, a row of B^T (29 registers) */
#define R_MAX 4
#define NB_MAX 6
#define REPR(X, n) X(0, n) X(1, n) X(2, n) X(3, n)
#define REPRN(X) REPR(X, 0) REPR(X, 1) REPR(X, 2) REPR(X, 3) REPR(X, 4) REPR(X, 5)

/* the lane sums of 4 vectors: [sum a, sum b, sum c, sum d] (8 shuffles for 4
 * sums; _mm512_reduce_add_ps takes 4 per sum, measured 6 % of the kernel) */
static inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xEE));
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Named accumulators c<row><col>: GCC keeps larger arrays of vectors in memory. */
static inline __attribute__((always_inline)) void ntile(const narrow_job *j, long i0, long n0, const int R,
                                                         const int NB) {
    const long K = j->K, lda = j->lda, ldbt = j->ldbt;
    const float *a = j->A + i0 * lda, *bt = j->Bt + n0 * ldbt;
    const __m512 z = _mm512_setzero_ps();
#define DECL(r, n) __m512 c##r##n = z;
    REPRN(DECL)
    __m512 a0 = z, a1 = z, a2 = z, a3 = z;
#define FMA(r, n)                                                                                                \
    if (R > r && NB > n) c##r##n = _mm512_fmadd_ps(a##r, bv, c##r##n);
#define COL(n, LOAD)                                                                                             \
    if (NB > n) {                                                                                                \
        const __m512 bv = LOAD(bt + n * ldbt + k);                                                               \
        REPR(FMA, n)                                                                                             \
    }
#define ROWS(LOAD)                                                                                               \
    if (R > 0) a0 = LOAD(a + k);                                                                                 \
    if (R > 1) a1 = LOAD(a + lda + k);                                                                           \
    if (R > 2) a2 = LOAD(a + 2 * lda + k);                                                                       \
    if (R > 3) a3 = LOAD(a + 3 * lda + k);                                                                       \
    COL(0, LOAD) COL(1, LOAD) COL(2, LOAD) COL(3, LOAD) COL(4, LOAD) COL(5, LOAD)
    long k = 0;
    for (; k + 16 <= K; k += 16) {
        ROWS(_mm512_loadu_ps)
    }
    if (k < K) {
        const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
#define MLOAD(p) _mm512_maskz_loadu_ps(m, p)
        ROWS(MLOAD)
    }
    float *C = j->C + i0 * j->ldc + n0;
    const long ldc = j->ldc;
    const __m128 al = _mm_set1_ps(j->alpha);
    if (R == 4) {
#define SUMCOL(n)                                                                                                \
    if (NB > n) {                                                                                                \
        float s[4];                                                                                              \
        _mm_storeu_ps(s, _mm_mul_ps(al, sum4(c0##n, c1##n, c2##n, c3##n)));                                      \
        C[n] = s[0], C[ldc + n] = s[1], C[2 * ldc + n] = s[2], C[3 * ldc + n] = s[3];                            \
    }
        SUMCOL(0) SUMCOL(1) SUMCOL(2) SUMCOL(3) SUMCOL(4) SUMCOL(5)
    } else {
#define SUM1(r, n)                                                                                               \
    if (R > r && NB > n) C[r * ldc + n] = j->alpha * _mm512_reduce_add_ps(c##r##n);
        REPRN(SUM1)
    }
    if (j->ep) tcc_cpu_epilogue(j->ep, j->C, ldc, j->N, i0, i0 + R, n0, n0 + NB);
}

typedef void (*ntile_fn)(const narrow_job *, long, long);
#define NT(R, NB)                                                                                                \
    static void nt##R##_##NB(const narrow_job *j, long i0, long n0) { ntile(j, i0, n0, R, NB); }
#define NTR(R) NT(R, 1) NT(R, 2) NT(R, 3) NT(R, 4) NT(R, 5) NT(R, 6)
NTR(1) NTR(2) NTR(3) NTR(4)
#define NTROW(R) {NULL, nt##R##_1, nt##R##_2, nt##R##_3, nt##R##_4, nt##R##_5, nt##R##_6}
static const ntile_fn ntiles[R_MAX + 1][NB_MAX + 1] = {{NULL}, NTROW(1), NTROW(2), NTROW(3), NTROW(4)};

static void run_ntile(const narrow_job *j, long i0, long r, long n0, long nb) { ntiles[r][nb](j, i0, n0); }
#else
/* Portable C: GCC vector extensions of a register's width (AVX2: 8 lanes,
 * else 4), 2 x 6 accumulators, 2 rows of A and a row of B^T in 16 registers. */
#define R_MAX 2
#define NB_MAX 6
#if defined(__AVX__)
#define VL 8
#else
#define VL 4
#endif
typedef float vf __attribute__((vector_size(VL * sizeof(float))));

static inline vf loadv(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void ntile(const narrow_job *j, long i0, long n0, const int R,
                                                         const int NB) {
    const long K = j->K, lda = j->lda, ldbt = j->ldbt;
    const float *a = j->A + i0 * lda, *bt = j->Bt + n0 * ldbt;
    vf acc[R_MAX][NB_MAX];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NB; n++) acc[r][n] = (vf){0};
    long k = 0;
    for (; k + VL <= K; k += VL) {
        vf av[R_MAX];
        for (int r = 0; r < R; r++) av[r] = loadv(a + r * lda + k);
        for (int n = 0; n < NB; n++) {
            const vf bv = loadv(bt + n * ldbt + k);
            for (int r = 0; r < R; r++) acc[r][n] += av[r] * bv;
        }
    }
    float *C = j->C + i0 * j->ldc + n0;
    for (int r = 0; r < R; r++)
        for (int n = 0; n < NB; n++) {
            float s = 0.f;
            for (int l = 0; l < VL; l++) s += acc[r][n][l];
            for (long kk = k; kk < K; kk++) s += a[r * lda + kk] * bt[n * ldbt + kk];
            C[r * j->ldc + n] = j->alpha * s;
        }
    if (j->ep) tcc_cpu_epilogue(j->ep, j->C, j->ldc, j->N, i0, i0 + R, n0, n0 + NB);
}

#define NT(R, NB)                                                                                                \
    case R * 8 + NB: ntile(j, i0, n0, R, NB); break;
static void run_ntile(const narrow_job *j, long i0, long r, long n0, long nb) {
    switch (r * 8 + nb) {
        NT(1, 1) NT(1, 2) NT(1, 3) NT(1, 4) NT(1, 5) NT(1, 6)
        NT(2, 1) NT(2, 2) NT(2, 3) NT(2, 4) NT(2, 5) NT(2, 6)
    }
}
#endif

static void narrow_task(void *arg, long b, long e) {
    const narrow_job *j = arg;
    for (long t = b; t < e; t++) {
        const long g = t / j->rblocks, r = t % j->rblocks;
        const long n0 = g * j->N / j->groups, n1 = (g + 1) * j->N / j->groups;
        const long i0 = r * R_MAX, i1 = i0 + R_MAX < j->M ? i0 + R_MAX : j->M;
        run_ntile(j, i0, i1 - i0, n0, n1 - n0);
    }
}

void tcc_cpu_gemm_narrow(long M, long N, long K, float alpha, const float *A, long lda, const float *Bt, long ldbt,
                         float *C, long ldc, const tcc_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    narrow_job j = {M,     N,  K,  lda, ldbt, ldc, (M + R_MAX - 1) / R_MAX, (N + NB_MAX - 1) / NB_MAX,
                    alpha, A, Bt, C,   ep};
    tcc_cpu_parallel_for(j.rblocks * j.groups, 1, narrow_task, &j);
}
