/* GEMM against a constant B packed at compile time (codegen.pack_b):
 * B as [ceil(N/32)][K][32] panels, columns past N zero. OpenBLAS packs both
 * operands on every call; for a model's weights that is the same work each
 * time (a fifth of a batch-64 MLP's run), so the weights arrive packed and
 * only A is read as it is.
 *
 * Tiles of 12 (or 8) rows x 32 columns: up to 24 AVX-512 accumulators over the whole K
 * (the panel, K x 128 bytes, stays in L2 while the row blocks pass). Rows
 * past M re-read the last row and are not stored, so the inner loop has no
 * edge cases; columns past N are computed on the zero padding and masked at
 * the store. Tasks are (column panel, row block) pairs on the library's
 * pool; the epilogue runs on each tile right after it is stored. */
#include <string.h>

#include "tcc_cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

void tcc_cpu_epilogue(const tcc_epilogue *ep, float *C, long ldc, long N, long r0, long r1, long c0, long c1);

#define PN 32 /* columns per panel */

typedef struct {
    long M, N, K, rsa, csa, ldc, rows, mblocks;
    float alpha;
    const float *A, *Bp;
    float *C;
    const tcc_epilogue *ep;
} packed_job;

/* One tile of PR rows (12, or 8 when that wastes fewer rows: M = 64 would
 * compute 72 rows with 12). */
#if defined(__AVX512F__)
#define PACKED_TILE(PR)                                                                                          \
    static void tile##PR(const packed_job *j, long i0, long p) {                                                 \
        const long K = j->K, mr = j->M - i0 < PR ? j->M - i0 : PR;                                               \
        const long c0 = p * PN, nr = j->N - c0 < PN ? j->N - c0 : PN;                                            \
        const float *rows[PR];                                                                                   \
        for (int i = 0; i < PR; i++) rows[i] = j->A + (i0 + (i < mr ? i : mr - 1)) * j->rsa;                    \
        const float *b = j->Bp + p * K * PN;                                                                     \
        float *C = j->C + i0 * j->ldc + c0;                                                                      \
        __m512 acc0[PR], acc1[PR];                                                                               \
        _Pragma("GCC unroll 12") for (int i = 0; i < PR; i++) acc0[i] = acc1[i] = _mm512_setzero_ps();          \
        const long cs = j->csa;                                                                                  \
        for (long k = 0; k < K; k++) {                                                                           \
            __m512 b0 = _mm512_loadu_ps(b + k * PN), b1 = _mm512_loadu_ps(b + k * PN + 16);                      \
            _Pragma("GCC unroll 12") for (int i = 0; i < PR; i++) {                                              \
                __m512 a = _mm512_set1_ps(rows[i][k * cs]);                                                      \
                acc0[i] = _mm512_fmadd_ps(a, b0, acc0[i]);                                                       \
                acc1[i] = _mm512_fmadd_ps(a, b1, acc1[i]);                                                       \
            }                                                                                                    \
        }                                                                                                        \
        const __m512 al = _mm512_set1_ps(j->alpha);                                                              \
        const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);                                   \
        const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);             \
        for (long i = 0; i < mr; i++) {                                                                          \
            _mm512_mask_storeu_ps(C + i * j->ldc, m0, _mm512_mul_ps(acc0[i], al));                               \
            _mm512_mask_storeu_ps(C + i * j->ldc + 16, m1, _mm512_mul_ps(acc1[i], al));                          \
        }                                                                                                        \
        if (j->ep) tcc_cpu_epilogue(j->ep, j->C, j->ldc, j->N, i0, i0 + mr, c0, c0 + nr);                        \
    }
#else
#define PACKED_TILE(PR)                                                                                          \
    static void tile##PR(const packed_job *j, long i0, long p) {                                                 \
        const long K = j->K, mr = j->M - i0 < PR ? j->M - i0 : PR;                                               \
        const long c0 = p * PN, nr = j->N - c0 < PN ? j->N - c0 : PN;                                            \
        const float *b = j->Bp + p * K * PN;                                                                     \
        float *C = j->C + i0 * j->ldc + c0;                                                                      \
        float acc[PR][PN];                                                                                       \
        memset(acc, 0, sizeof acc);                                                                              \
        for (long k = 0; k < K; k++) {                                                                           \
            const float *bk = b + k * PN;                                                                        \
            for (long i = 0; i < mr; i++) {                                                                      \
                const float a = j->A[(i0 + i) * j->rsa + k * j->csa];                                            \
                for (int c = 0; c < PN; c++) acc[i][c] += a * bk[c];                                             \
            }                                                                                                    \
        }                                                                                                        \
        for (long i = 0; i < mr; i++)                                                                            \
            for (long c = 0; c < nr; c++) C[i * j->ldc + c] = acc[i][c] * j->alpha;                              \
        if (j->ep) tcc_cpu_epilogue(j->ep, j->C, j->ldc, j->N, i0, i0 + mr, c0, c0 + nr);                        \
    }
#endif
PACKED_TILE(12)
PACKED_TILE(8)

static void packed_task(void *arg, long b, long e) {
    const packed_job *j = arg;
    for (long t = b; t < e; t++) {
        if (j->rows == 8)
            tile8(j, (t % j->mblocks) * 8, t / j->mblocks);
        else
            tile12(j, (t % j->mblocks) * 12, t / j->mblocks);
    }
}

void tcc_cpu_gemm_packed(long M, long N, long K, float alpha, const float *A, long rsa, long csa,
                         const float *Bp, float *C, long ldc, const tcc_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    const long rows = (M + 7) / 8 * 8 - M < (M + 11) / 12 * 12 - M ? 8 : 12;
    packed_job j = {M, N, K, rsa, csa, ldc, rows, (M + rows - 1) / rows, alpha, A, Bp, C, ep};
    const long panels = (N + PN - 1) / PN;
    tcc_cpu_parallel_for(panels * j.mblocks, 1, packed_task, &j);
}
