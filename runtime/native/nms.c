/* NonMaxSuppression (float32 boxes and scores), for the runtime's host
 * step between two compiled stages (runtime/host_ops/detection.py). The
 * arithmetic is onnxruntime's and onnx's reference's, operation for
 * operation in float: corners ordered per axis (or center/size halved),
 * intersection first (no overlap on an axis: not suppressed), then the
 * areas and union; a box with a non-positive area suppresses nothing.
 * Candidates (score > threshold, when one is given) are taken by score,
 * highest first, the lower box index first among equal scores. Written in
 * C because onnx's reference evaluator (Python loops over box objects) took
 * ~1 ms for 3 classes x 64 boxes, about 15x onnxruntime's whole model. */
#include <stdint.h>
#include <stdlib.h>

/* A candidate as one integer that orders as the selection takes them
 * (higher score first, then the lower box index): the score's bits mapped
 * to an order-preserving unsigned value, complemented, above the index.
 * One integer compare per heap step where comparing (score, index) pairs
 * took two branches: the heap was ~35 % of a small detector's call
 * (3 classes x 64 heavily overlapping boxes, every candidate popped). */
typedef uint64_t cand;

static inline cand cand_of(float score, int64_t idx) {
    union { float f; uint32_t u; } v = {score + 0.f}; /* -0 as +0: equal scores tie on the index */
    const uint32_t ord = v.u & 0x80000000u ? ~v.u : v.u | 0x80000000u;
    return (uint64_t)~ord << 32 | (uint32_t)idx;
}

/* max/min as Python's max(a, b)/min(a, b): the first argument unless the second is strictly beyond it */
static inline float pmax(float a, float b) { return b > a ? b : a; }
static inline float pmin(float a, float b) { return b < a ? b : a; }

/* A binary heap (first taken at the root), as onnxruntime's priority queue:
 * heapify is linear and a class usually stops after a few picks
 * (max_output_boxes_per_class), where sorting every candidate (qsort) took
 * most of the call. The value moves down through a hole. */
static void sift_down(cand *h, int64_t m, int64_t i) {
    const cand v = h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= m) break;
        c += c + 1 < m && h[c + 1] < h[c];
        if (h[c] >= v) break;
        h[i] = h[c], i = c;
    }
    h[i] = v;
}

/* a box's extent on both axes: [xmin, xmax, ymin, ymax] */
static inline void extent(const float *b, int center, float e[4]) {
    if (!center) { /* [y1, x1, y2, x2], either corner first */
        if (b[1] >= b[3]) e[0] = b[3], e[1] = b[1];
        else e[0] = b[1], e[1] = b[3];
        if (b[0] >= b[2]) e[2] = b[2], e[3] = b[0];
        else e[2] = b[0], e[3] = b[2];
    } else { /* [x_center, y_center, width, height] */
        const float hw = b[2] / 2.f, hh = b[3] / 2.f;
        e[0] = b[0] - hw, e[1] = b[0] + hw;
        e[2] = b[1] - hh, e[3] = b[1] + hh;
    }
}

static int suppresses(const float *e1, const float *e2, float iou_threshold) {
    const float ix0 = pmax(e1[0], e2[0]), ix1 = pmin(e1[1], e2[1]);
    if (ix1 <= ix0) return 0;
    const float iy0 = pmax(e1[2], e2[2]), iy1 = pmin(e1[3], e2[3]);
    if (iy1 <= iy0) return 0;
    const float inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0.f) return 0;
    const float a1 = (e1[1] - e1[0]) * (e1[3] - e1[2]), a2 = (e2[1] - e2[0]) * (e2[3] - e2[2]);
    const float uni = a1 + a2 - inter;
    if (a1 <= 0.f || a2 <= 0.f || uni <= 0.f) return 0;
    return inter / uni > iou_threshold;
}

/* The sizes and parameters of a call, passed by address: as eleven
 * arguments their ctypes conversion cost ~3 us a call, as much as the
 * selection itself on a small detector (3 classes x 64 boxes); the runtime
 * fills one per shape and parameters and reuses it. */
typedef struct {
    int64_t nb, nc, n, max_out;
    float iou_threshold, score_threshold;
    int32_t has_score_threshold, center;
} tcc_nms_params;

/* boxes [nb, n, 4], scores [nb, nc, n]; writes (batch, class, box) triples
 * to out (room for nb * nc * min(max_out, n)); returns how many, or -1 when
 * out of memory (or past 2^32 boxes). */
int64_t tcc_nms_f32(const float *boxes, const float *scores, const tcc_nms_params *p, int64_t *out) {
    const int64_t nb = p->nb, nc = p->nc, n = p->n, max_out = p->max_out;
    const float iou_threshold = p->iou_threshold, score_threshold = p->score_threshold;
    const int has_score_threshold = p->has_score_threshold, center = p->center;
    if (max_out <= 0 || n <= 0) return 0;
    if (n > (int64_t)UINT32_MAX) return -1; /* a candidate holds its index in 32 bits */
    cand *cs = malloc((size_t)n * sizeof(cand));
    float *ext = malloc((size_t)n * 4 * sizeof(float));
    int64_t *sel = malloc((size_t)(max_out < n ? max_out : n) * sizeof(int64_t));
    if (!cs || !ext || !sel) {
        free(cs), free(ext), free(sel);
        return -1;
    }
    int64_t count = 0;
    for (int64_t b = 0; b < nb; b++) {
        const float *bx = boxes + b * n * 4;
        for (int64_t i = 0; i < n; i++) extent(bx + i * 4, center, ext + i * 4);
        for (int64_t c = 0; c < nc; c++) {
            const float *sc = scores + (b * nc + c) * n;
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++)
                if (!has_score_threshold || sc[i] > score_threshold) cs[m++] = cand_of(sc[i], i);
            for (int64_t i = m / 2 - 1; i >= 0; i--) sift_down(cs, m, i);
            int64_t ns = 0;
            while (m > 0 && ns < max_out) {
                const int64_t idx = (int64_t)(uint32_t)cs[0];
                cs[0] = cs[--m];
                sift_down(cs, m, 0);
                const float *e = ext + idx * 4;
                int keep = 1;
                for (int64_t s = 0; s < ns && keep; s++) keep = !suppresses(e, ext + sel[s] * 4, iou_threshold);
                if (!keep) continue;
                sel[ns++] = idx;
                out[count * 3] = b, out[count * 3 + 1] = c, out[count * 3 + 2] = idx;
                count++;
            }
        }
    }
    free(cs), free(ext), free(sel);
    return count;
}
