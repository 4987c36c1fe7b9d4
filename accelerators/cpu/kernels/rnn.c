/* LSTM and GRU (onnx semantics, onnxruntime's for sequence_lens): per
 * direction, one GEMM projects every time step's input at once (bias
 * folded in), then each step runs the recurrent product H_{t-1} R^T and one
 * fused pass over the gates that updates the state and writes Y.
 *
 * The weights arrive transposed at compile time (codegen: W^T [I][G*H],
 * R^T [H][G*H], so a step's product reads rows of R^T contiguously), the
 * biases folded (Wb + Rb, except GRU's linear_before_reset Rb_h, which sits
 * inside r * (...)). A bidirectional layer runs its two directions on two
 * threads. Small steps (batch x gates x hidden <= 64K multiply-adds) are a
 * direct loop: the exporters' taggers (batch 2, hidden 24) spent more in
 * the per-step BLAS call than in the arithmetic, and the host path's
 * generated loops (a pool dispatch per step and loop) took 2-2.7x
 * onnxruntime's time on them. */
#include <string.h>

#include "tcc_cpu.h"
#include "mathfun.h"

#define DIRECT_MAX (64 * 1024) /* multiply-adds of a step's product run as a direct loop */

typedef struct {
    const tcc_rnn_params *p;
    const float *X, *WT, *RT, *bias, *rbh, *P, *h0, *c0;
    const int32_t *lens;
    float *Y, *scratch;
} rnn_job;

/* In-place passes over n floats, each a plain loop GCC vectorizes (the
 * fused per-element loop with its optional terms did not vectorize: 2-3x
 * slower on the taggers' 24-wide gates). */
static void add_to(float *d, const float *a, long n) {
    for (long j = 0; j < n; j++) d[j] += a[j];
}
static void fma_to(float *d, const float *a, const float *b, long n) {
    for (long j = 0; j < n; j++) d[j] += a[j] * b[j];
}
static void clip_to(float *d, long n, const tcc_rnn_params *p) {
    if (!p->has_clip) return;
    const float c = p->clip;
    for (long j = 0; j < n; j++) d[j] = d[j] < -c ? -c : (d[j] > c ? c : d[j]);
}
static void sigmoid_to(float *d, long n) {
    for (long j = 0; j < n; j++) d[j] = tcc_sigmoidf(d[j]);
}
static void tanh_to(float *d, long n) {
    for (long j = 0; j < n; j++) d[j] = tcc_tanhf(d[j]);
}

/* C[NB][N] (row stride ldc) = H[NB][K] . RT[K][N] (row stride ldr) */
static void step_product(long NB, long N, long K, const float *H, const float *RT, long ldr, float *C, long ldc) {
    if (NB * N * K > DIRECT_MAX) tcc_cpu_gemm(0, 0, NB, N, K, 1.f, H, K, RT, ldr, C, ldc, NULL);
    else tcc_cpu_gemm_rows(NB, N, K, H, K, RT, ldr, C, ldc);
}

/* entry b's length, clamped to [0, T] (so a longer one cannot index past Y) */
static inline long seq_len(const rnn_job *jb, long b) {
    const long T = jb->p->T;
    if (!jb->lens) return T;
    const long n = jb->lens[b];
    return n < 0 ? 0 : (n > T ? T : n);
}

/* One LSTM step of one batch entry: g holds the recurrent product's row
 * (gates i, o, f, c), overwritten; c and h updated in place. */
static void lstm_cell(const tcc_rnn_params *p, float *g, const float *x, const float *P, float *c, float *h, long H) {
    float *gi = g, *go = g + H, *gf = g + 2 * H, *gc = g + 3 * H;
    add_to(g, x, 4 * H);
    if (P) {
        fma_to(gi, P, c, H);
        fma_to(gf, P + 2 * H, c, H);
    }
    clip_to(gi, H, p);
    clip_to(gf, 2 * H, p); /* f and c */
    sigmoid_to(gi, H);
    if (p->input_forget)
        for (long j = 0; j < H; j++) gf[j] = 1.f - gi[j];
    else
        sigmoid_to(gf, H);
    tanh_to(gc, H);
    for (long j = 0; j < H; j++) c[j] = gf[j] * c[j] + gi[j] * gc[j];
    if (P) fma_to(go, P + H, c, H);
    clip_to(go, H, p);
    sigmoid_to(go, H);
    for (long j = 0; j < H; j++) h[j] = c[j];
    tanh_to(h, H);
    for (long j = 0; j < H; j++) h[j] *= go[j];
}

/* One GRU step: g the recurrent product's row (z, r, and with
 * linear_before_reset the h gate's H R_h^T), gh (reset first) the h gate's
 * (r * H) R_h^T; h updated in place. */
static void gru_cell(const tcc_rnn_params *p, float *g, const float *x, const float *gh, const float *rbh, float *h,
                     long H) {
    float *gz = g, *gr = g + H, *gn = g + 2 * H;
    add_to(g, x, 2 * H);
    clip_to(g, 2 * H, p);
    sigmoid_to(g, 2 * H);
    if (gh) {
        for (long j = 0; j < H; j++) gn[j] = x[2 * H + j] + gh[j];
    } else {
        if (rbh) add_to(gn, rbh, H);
        for (long j = 0; j < H; j++) gn[j] = x[2 * H + j] + gr[j] * gn[j];
    }
    clip_to(gn, H, p);
    tanh_to(gn, H);
    for (long j = 0; j < H; j++) h[j] = (1.f - gz[j]) * gn[j] + gz[j] * h[j];
}

static void run_direction(const rnn_job *jb, long d) {
    const tcc_rnn_params *p = jb->p;
    const long T = p->T, NB = p->NB, I = p->In, H = p->H, nd = p->nd;
    const int lstm = p->kind == TCC_RNN_LSTM;
    const long G = lstm ? 4 : 3, GH = G * H;
    const int reverse = p->reverse || d == 1;
    float *xw = jb->scratch + d * tcc_cpu_rnn_scratch(p) / nd;
    float *rg = xw + T * NB * GH, *h = rg + NB * GH, *c = h + NB * H, *rh = c + NB * H, *gh = rh + NB * H;
    const float *RT = jb->RT + d * H * GH;
    const float *P = jb->P ? jb->P + d * 3 * H : NULL;
    const float *rbh = jb->rbh ? jb->rbh + d * H : NULL;

    /* every step's input projection; rows in X's own order (layout 1: batch-major) */
    const tcc_epilogue ep = {jb->bias + d * GH, 1, 1.f, NULL, TCC_ACT_NONE, 0.f, 0.f};
    tcc_cpu_gemm(0, 0, T * NB, GH, I, 1.f, jb->X, I, jb->WT + d * I * GH, GH, xw, GH, &ep);

    for (long b = 0; b < NB; b++) {
        /* initial_h/c: [nd][NB][H], or [NB][nd][H] under layout 1 */
        const long off = p->layout ? (b * nd + d) * H : (d * NB + b) * H;
        for (long j = 0; j < H; j++) {
            h[b * H + j] = jb->h0 ? jb->h0[off + j] : 0.f;
            c[b * H + j] = jb->c0 ? jb->c0[off + j] : 0.f;
        }
    }
    const int gru_reset_first = !lstm && !p->linear_before_reset;
    for (long s = 0; s < T; s++) {
        /* GRU with the reset applied before the linear map: z and r first, the h gate after */
        step_product(NB, gru_reset_first ? 2 * H : GH, H, h, RT, GH, rg, GH);
        if (gru_reset_first) {
            for (long b = 0; b < NB; b++) {
                const long len = seq_len(jb, b), t = s < len && reverse ? len - 1 - s : s;
                const float *x = xw + (p->layout ? b * T + t : t * NB + b) * GH;
                float *r = rh + b * H;
                for (long j = 0; j < H; j++) r[j] = x[H + j] + rg[b * GH + H + j];
                clip_to(r, H, p);
                sigmoid_to(r, H);
                for (long j = 0; j < H; j++) r[j] *= h[b * H + j];
            }
            step_product(NB, H, H, rh, RT + 2 * H, GH, gh, H);
        }
        for (long b = 0; b < NB; b++) {
            /* step s of entry b is time s forward, len - 1 - s in reverse (reversed within its length) */
            const long len = seq_len(jb, b);
            const int live = s < len;
            const long t = live && reverse ? len - 1 - s : s;
            const float *x = xw + (p->layout ? b * T + t : t * NB + b) * GH;
            float *hb = h + b * H;
            float *y = jb->Y ? jb->Y + (p->layout ? ((b * T + t) * nd + d) * H : ((t * nd + d) * NB + b) * H) : NULL;
            if (!live) { /* past this entry's length: state kept, zeros in Y */
                if (y) memset(y, 0, (size_t)H * sizeof(float));
                continue;
            }
            if (lstm) lstm_cell(p, rg + b * GH, x, P, c + b * H, hb, H);
            else gru_cell(p, rg + b * GH, x, gru_reset_first ? gh + b * H : NULL, rbh, hb, H);
            if (y) memcpy(y, hb, (size_t)H * sizeof(float));
        }
    }
}

static void direction_task(void *arg, long b, long e) {
    for (long d = b; d < e; d++) run_direction(arg, d);
}

long tcc_cpu_rnn_scratch(const tcc_rnn_params *p) {
    const long GH = (p->kind == TCC_RNN_LSTM ? 4 : 3) * p->H;
    return p->nd * (p->T * p->NB * GH + p->NB * GH + 4 * p->NB * p->H);
}

void tcc_cpu_rnn(const tcc_rnn_params *p, const float *X, const float *WT, const float *RT, const float *bias,
                 const float *rbh, const float *P, const int32_t *lens, const float *h0, const float *c0, float *Y,
                 float *scratch) {
    rnn_job j = {p, X, WT, RT, bias, rbh, P, h0, c0, lens, Y, scratch};
    tcc_cpu_parallel_for(p->nd, 1, direction_task, &j);
}
