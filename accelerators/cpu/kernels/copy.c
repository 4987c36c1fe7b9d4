/* Data movement: parallel copy; strided gathers (the output in order, row
 * by row, each output dim with its source stride: Transpose, Slice with
 * any steps, Expand's zero strides; rows whose elements are strided in the
 * source but whose sources are adjacent go 16 at a time, transposed in
 * 16 x 16 blocks); and row copies between two leading dimensions
 * (Concat's parts). */
#include <string.h>

#include "tcc_cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

typedef struct {
    float *dst;
    const float *src;
} copy_job;

static void copy_task(void *arg, long b, long e) {
    copy_job *j = arg;
    memcpy(j->dst + b, j->src + b, (e - b) * sizeof(float));
}

void tcc_cpu_copy(float *dst, const float *src, long n) {
    if (dst == src) return;
    copy_job j = {dst, src};
    tcc_cpu_parallel_for(n, 1 << 16, copy_task, &j);
}

typedef struct {
    int rank;
    long oshape[8], istride[8]; /* output shape, input stride of each output dim */
    const float *src;
    float *dst;
    long inner; /* product of the output's last dim */
} tr_job;

#define TB 16 /* source rows read together: one cache line */

#if defined(__AVX512F__)
/* o[c * lo + i] = s[i * ls + c] for a 16 x 16 block, in registers: pairs,
 * then 64-bit pairs, then 128-bit lanes twice (r[c] ends as column c). */
static void tr16(const float *s, long ls, float *o, long lo) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(s + i * ls);
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    for (int i = 0; i < 16; i += 8)
        for (int q = 0; q < 4; q++) {
            t[i + q] = _mm512_shuffle_f32x4(r[i + q], r[i + 4 + q], 0x88);
            t[i + 4 + q] = _mm512_shuffle_f32x4(r[i + q], r[i + 4 + q], 0xdd);
        }
    for (int q = 0; q < 8; q++) {
        _mm512_storeu_ps(o + q * lo, _mm512_shuffle_f32x4(t[q], t[8 + q], 0x88));
        _mm512_storeu_ps(o + (8 + q) * lo, _mm512_shuffle_f32x4(t[q], t[8 + q], 0xdd));
    }
}
#endif

/* n (<= TB) output rows whose sources are next to each other (stride 1),
 * elements ls apart: read TB at a time across the rows. Row by row, each
 * element is its own cache line, and strides of a power of two alias in L1
 * (BERT's K^T: 128 lines 1 KB apart), so every read went to L2. */
static void tr_block(const float *s, long ls, long n, float *o, long last) {
    for (long k0 = 0; k0 < last; k0 += TB) {
        const long nk = last - k0 < TB ? last - k0 : TB;
#if defined(__AVX512F__)
        if (n == TB && nk == TB) {
            tr16(s + k0 * ls, ls, o + k0, last);
            continue;
        }
#endif
        for (long k = k0; k < k0 + nk; k++)
            for (long g = 0; g < n; g++) o[g * last + k] = s[k * ls + g];
    }
}

static void tr_task(void *arg, long b, long e) {
    tr_job *j = arg;
    const int r = j->rank;
    const long last = j->oshape[r - 1], ls = j->istride[r - 1];
    if (r == 1) { /* one row (b = 0) */
        if (ls == 1) memcpy(j->dst, j->src, last * sizeof(float));
        else for (long k = 0; k < last; k++) j->dst[k] = j->src[k * ls];
        return;
    }
    /* source offset of row b, then an odometer over the row dims (no
     * divisions per row) */
    long idx[8], off = 0, rem = b;
    for (int d = r - 2; d >= 0; d--) {
        idx[d] = rem % j->oshape[d];
        rem /= j->oshape[d];
        off += idx[d] * j->istride[d];
    }
    const long inner = j->oshape[r - 2], is = j->istride[r - 2];
    const int blocked = ls != 1 && is == 1;
    for (long row = b; row < e;) {
        const float *s = j->src + off;
        float *o = j->dst + row * last;
        long n = 1;
        if (ls == 1) {
            memcpy(o, s, last * sizeof(float));
        } else if (blocked) {
            n = inner - idx[r - 2] < TB ? inner - idx[r - 2] : TB;
            if (n > e - row) n = e - row;
            tr_block(s, ls, n, o, last);
        } else {
            for (long k = 0; k < last; k++) o[k] = s[k * ls];
        }
        row += n;
        idx[r - 2] += n;
        off += n * is;
        for (int d = r - 2; d > 0 && idx[d] == j->oshape[d]; d--) {
            off += j->istride[d - 1] - idx[d] * j->istride[d];
            idx[d] = 0;
            idx[d - 1]++;
        }
    }
}

/* Rows of the output below this many floats are not worth a second thread
 * (a wake-up costs a few us; a 16 KB copy ~1 us). */
#define COPY_GRAIN (1 << 14)

static void strided(int rank, const long *out_shape, const long *in_stride, const float *src, float *dst,
                    long grain_rows) {
    tr_job j;
    if (rank == 0) {
        dst[0] = src[0];
        return;
    }
    j.rank = rank;
    long rows = 1;
    for (int d = 0; d < rank; d++) {
        if (out_shape[d] == 0) return;
        j.oshape[d] = out_shape[d];
        j.istride[d] = in_stride[d];
        if (d < rank - 1) rows *= out_shape[d];
    }
    j.src = src;
    j.dst = dst;
    tcc_cpu_parallel_for(rows, grain_rows, tr_task, &j);
}

void tcc_cpu_strided(int rank, const long *out_shape, const long *in_stride, const float *src, float *dst) {
    const long last = rank > 0 && out_shape[rank - 1] > 0 ? out_shape[rank - 1] : 1;
    strided(rank, out_shape, in_stride, src, dst, (COPY_GRAIN + last - 1) / last);
}

void tcc_cpu_transpose(int rank, const long *in_shape, const long *perm, const float *src, float *dst) {
    long istr[8], oshape[8], ostr[8], s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        istr[d] = s;
        s *= in_shape[d];
    }
    for (int d = 0; d < rank; d++) {
        oshape[d] = in_shape[perm[d]];
        ostr[d] = istr[perm[d]];
    }
    strided(rank, oshape, ostr, src, dst, 64);
}

typedef struct {
    const float *src;
    float *dst;
    long cols, src_ld, dst_ld;
} rows_job;

static void rows_task(void *arg, long b, long e) {
    rows_job *j = arg;
    for (long r = b; r < e; r++) memcpy(j->dst + r * j->dst_ld, j->src + r * j->src_ld, j->cols * sizeof(float));
}

void tcc_cpu_copy_rows(long rows, long cols, const float *src, long src_ld, float *dst, long dst_ld) {
    if (rows <= 0 || cols <= 0) return;
    rows_job j = {src, dst, cols, src_ld, dst_ld};
    const long grain = cols >= COPY_GRAIN ? 1 : (COPY_GRAIN + cols - 1) / cols;
    tcc_cpu_parallel_for(rows, grain, rows_task, &j);
}
