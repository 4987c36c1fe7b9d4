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

static inline float clipf(float v, const tcc_rnn_params *p) {
    if (!p->has_clip) return v;
    return v < -p->clip ? -p->clip : (v > p->clip ? p->clip : v);
}

/* C[NB][N] (row stride ldc) = H[NB][K] . RT[K][N] (row stride ldr) */
static void step_product(long NB, long N, long K, const float *H, const float *RT, long ldr, float *C, long ldc) {
    if (NB * N * K > DIRECT_MAX) {
        tcc_cpu_gemm(0, 0, NB, N, K, 1.f, H, K, RT, ldr, C, ldc, NULL);
        return;
    }
    for (long b = 0; b < NB; b++) {
        float *c = C + b * ldc;
        for (long j = 0; j < N; j++) c[j] = 0.f;
        for (long k = 0; k < K; k++) {
            const float a = H[b * K + k];
            const float *r = RT + k * ldr;
            for (long j = 0; j < N; j++) c[j] += a * r[j];
        }
    }
}

/* entry b's length, clamped to [0, T] (so a longer one cannot index past Y) */
static inline long seq_len(const rnn_job *jb, long b) {
    const long T = jb->p->T;
    if (!jb->lens) return T;
    const long n = jb->lens[b];
    return n < 0 ? 0 : (n > T ? T : n);
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
                const float *r = rg + b * GH;
                for (long j = 0; j < H; j++)
                    rh[b * H + j] = tcc_sigmoidf(clipf(x[H + j] + r[H + j], p)) * h[b * H + j];
            }
            step_product(NB, H, H, rh, RT + 2 * H, GH, gh, H);
        }
        for (long b = 0; b < NB; b++) {
            /* step s of entry b is time s forward, len - 1 - s in reverse (reversed within its length) */
            const long len = seq_len(jb, b);
            const int live = s < len;
            const long t = live && reverse ? len - 1 - s : s;
            const float *x = xw + (p->layout ? b * T + t : t * NB + b) * GH;
            const float *r = rg + b * GH;
            float *hb = h + b * H, *cb = c + b * H;
            float *y = jb->Y ? jb->Y + (p->layout ? ((b * T + t) * nd + d) * H : ((t * nd + d) * NB + b) * H) : NULL;
            if (!live) { /* past this entry's length: state kept, zeros in Y */
                if (y) memset(y, 0, (size_t)H * sizeof(float));
                continue;
            }
            if (lstm) { /* gates i, o, f, c; peepholes P: i, o, f */
                for (long j = 0; j < H; j++) {
                    const float cp = cb[j];
                    float gi = x[j] + r[j], go = x[H + j] + r[H + j], gf = x[2 * H + j] + r[2 * H + j];
                    const float gc = x[3 * H + j] + r[3 * H + j];
                    if (P) {
                        gi += P[j] * cp;
                        gf += P[2 * H + j] * cp;
                    }
                    const float ig = tcc_sigmoidf(clipf(gi, p));
                    const float fg = p->input_forget ? 1.f - ig : tcc_sigmoidf(clipf(gf, p));
                    const float cn = fg * cp + ig * tcc_tanhf(clipf(gc, p));
                    if (P) go += P[H + j] * cn;
                    const float hn = tcc_sigmoidf(clipf(go, p)) * tcc_tanhf(cn);
                    cb[j] = cn;
                    hb[j] = hn;
                    if (y) y[j] = hn;
                }
            } else { /* gates z, r, h */
                for (long j = 0; j < H; j++) {
                    const float z = tcc_sigmoidf(clipf(x[j] + r[j], p));
                    float hx;
                    if (gru_reset_first) {
                        hx = x[2 * H + j] + gh[b * H + j];
                    } else {
                        const float rr = tcc_sigmoidf(clipf(x[H + j] + r[H + j], p));
                        hx = x[2 * H + j] + rr * (r[2 * H + j] + (rbh ? rbh[j] : 0.f));
                    }
                    const float hn = (1.f - z) * tcc_tanhf(clipf(hx, p)) + z * hb[j];
                    hb[j] = hn;
                    if (y) y[j] = hn;
                }
            }
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
