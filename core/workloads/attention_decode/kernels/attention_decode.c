/* Decode attention, C backend (float32, OpenMP): flash-decoding over a KV cache with GQA and K+1
 * causal query tokens. Rendered behind core/workloads/attention_decode/c.py's #defines:
 *   THREADS, SCHEDULE, CHUNK   OpenMP threads over (sequence, KV head, split) items, and the schedule
 *   SPLITS                     splits of the context per (sequence, KV head) (fewer when the context
 *                              is short: a split is a whole number of tiles)
 *   TILE                       keys per tile: scores of a tile are computed, then the softmax update
 *   VW, UNROLL                 floats per GCC vector (1: scalar) and independent dot accumulators
 *   PREFETCH                   1: the next tile's keys and values are prefetched
 *   ROWS                       query rows (query token x query head) sharing one pass over the keys
 *   LAZY                       1: the running sums are rescaled only when the running max grew
 *   EXP2                       1: q pre-scaled by log2(e) and exp2f; 0: expf
 *   COMBINE_RUNNING            1: the splits merged one by one, each rescaling the sum so far;
 *                              0: the largest max of the splits first, then one weighted sum
 * Rows of a (sequence, KV head): r = j * group + i is query token j, query head i of the group.
 * Query token j sees keys [0, context - queries + j + 1). The splits are merged in their index
 * order, so the result is bitwise the same whatever the threads' timing.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#if VW > 1
typedef float vf __attribute__((vector_size(4 * VW), aligned(4), may_alias));
#endif

#if EXP2
#define EXPF(x) exp2f(x)
#define QSCALE 1.4426950408889634f
#else
#define EXPF(x) expf(x)
#define QSCALE 1.0f
#endif

static inline float dot(const float *restrict a, const float *restrict b, int d) {
    int j = 0;
    float s = 0.0f;
#if VW > 1
    vf acc[UNROLL];
    for (int u = 0; u < UNROLL; ++u) acc[u] = (vf){0};
    for (; j + VW * UNROLL <= d; j += VW * UNROLL)
        for (int u = 0; u < UNROLL; ++u) acc[u] += *(const vf *)(a + j + u * VW) * *(const vf *)(b + j + u * VW);
    for (int u = 1; u < UNROLL; ++u) acc[0] += acc[u];
    for (int l = 0; l < VW; ++l) s += acc[0][l];
#else
    float acc[UNROLL] = {0};
    for (; j + UNROLL <= d; j += UNROLL)
        for (int u = 0; u < UNROLL; ++u) acc[u] += a[j + u] * b[j + u];
    for (int u = 0; u < UNROLL; ++u) s += acc[u];
#endif
    for (; j < d; ++j) s += a[j] * b[j];
    return s;
}

/* o[0, d) = o * c + p * v */
static inline void scale_add(float *restrict o, float c, float p, const float *restrict v, int d) {
    int j = 0;
#if VW > 1
    for (; j + VW <= d; j += VW) *(vf *)(o + j) = *(vf *)(o + j) * c + *(const vf *)(v + j) * p;
#endif
    for (; j < d; ++j) o[j] = o[j] * c + p * v[j];
}

/* o[0, d) *= c */
static inline void scale(float *restrict o, float c, int d) {
    int j = 0;
#if VW > 1
    for (; j + VW <= d; j += VW) *(vf *)(o + j) = *(vf *)(o + j) * c;
#endif
    for (; j < d; ++j) o[j] *= c;
}

/* Rows [r0, r0 + nr) of one (sequence, KV head) over keys [k0, k1): unnormalised o, running max m
 * (in the exponent's base) and sum l. q points at the sequence's first query row of this KV head. */
static void rows_over_keys(const float *q, const float *k, const float *v, float *o, float *m, float *l,
                           int r0, int nr, int k0, int k1, int group, int qstride, int queries, int context, int d) {
    float qs[ROWS][d], sc[ROWS][TILE];
    int lim[ROWS];
    const float qscale = QSCALE / sqrtf((float)d);
    for (int r = 0; r < nr; ++r) {
        const int row = r0 + r, j = row / group;
        const float *qr = q + (size_t)j * qstride + (size_t)(row % group) * d;
        for (int c = 0; c < d; ++c) qs[r][c] = qr[c] * qscale;
        lim[r] = context - queries + j + 1;
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int c = 0; c < d; ++c) o[(size_t)r * d + c] = 0.0f;
    }
    for (int t0 = k0; t0 < k1; t0 += TILE) {
        const int t1 = t0 + TILE < k1 ? t0 + TILE : k1;
#if PREFETCH
        if (t1 < k1) {
            __builtin_prefetch(k + (size_t)t1 * d, 0, 1);
            __builtin_prefetch(v + (size_t)t1 * d, 0, 1);
        }
#endif
        for (int key = t0; key < t1; ++key) {  /* each key row once for all the rows */
            const float *kr = k + (size_t)key * d;
            for (int r = 0; r < nr; ++r) sc[r][key - t0] = key < lim[r] ? dot(qs[r], kr, d) : -INFINITY;
        }
        for (int r = 0; r < nr; ++r) {
            float mt = m[r];
            for (int i = 0; i < t1 - t0; ++i) mt = sc[r][i] > mt ? sc[r][i] : mt;
            if (mt == -INFINITY) continue;  /* the whole tile is hidden from this row */
#if LAZY
            if (mt > m[r]) {
#endif
                const float c = EXPF(m[r] - mt);
                l[r] *= c;
                scale(o + (size_t)r * d, c, d);
                m[r] = mt;
#if LAZY
            }
#endif
            for (int i = 0; i < t1 - t0; ++i) {
                sc[r][i] = EXPF(sc[r][i] - mt);
                l[r] += sc[r][i];
            }
        }
        for (int key = t0; key < t1; ++key) {  /* each value row once for all the rows */
            const float *vr = v + (size_t)key * d;
            for (int r = 0; r < nr; ++r)
                if (m[r] != -INFINITY) scale_add(o + (size_t)r * d, 1.0f, sc[r][key - t0], vr, d);
        }
    }
}

/* One (sequence, KV head, split) item: every row, ROWS at a time, over the split's keys. */
static void item(const float *q, const float *k, const float *v, float *o, float *m, float *l, int b, int h, int s,
                 int queries, int kv_heads, int group, int d, int context, int split_len) {
    const int R = queries * group, k0 = s * split_len, k1 = k0 + split_len < context ? k0 + split_len : context;
    const size_t kv = ((size_t)b * kv_heads + h) * context * d;
    const float *qb = q + (((size_t)b * queries * kv_heads + h) * group) * d;
    for (int r0 = 0; r0 < R; r0 += ROWS) {
        const int nr = R - r0 < ROWS ? R - r0 : ROWS;
        rows_over_keys(qb, k + kv, v + kv, o + (size_t)r0 * d, m + r0, l + r0, r0, nr, k0, k1, group,
                       kv_heads * group * d, queries, context, d);
    }
}

/* out row = the ns splits' partial rows merged, in split order (see COMBINE_RUNNING); split s's
 * o row is at o + s * R * d, its m and l at m[s * R] and l[s * R]. */
static void combine(const float *o, const float *m, const float *l, float *out, int ns, int R, int d) {
    const size_t stride = (size_t)R * d;
#if COMBINE_RUNNING
    float mm = m[0], ll = l[0];
    for (int c = 0; c < d; ++c) out[c] = o[c];
    for (int s = 1; s < ns; ++s) {
        const float ms = m[(size_t)s * R];
        if (ms == -INFINITY) continue;
        const float mn = ms > mm ? ms : mm, a = EXPF(mm - mn), w = EXPF(ms - mn);
        ll = ll * a + l[(size_t)s * R] * w;
        scale_add(out, a, w, o + s * stride, d);
        mm = mn;
    }
#else
    float mm = -INFINITY, ll = 0.0f;
    for (int s = 0; s < ns; ++s) mm = m[(size_t)s * R] > mm ? m[(size_t)s * R] : mm;
    for (int c = 0; c < d; ++c) out[c] = 0.0f;
    for (int s = 0; s < ns; ++s) {
        const float w = EXPF(m[(size_t)s * R] - mm);
        ll += l[(size_t)s * R] * w;
        scale_add(out, 1.0f, w, o + s * stride, d);
    }
#endif
    const float inv = 1.0f / ll;
    for (int c = 0; c < d; ++c) out[c] *= inv;
}

void abebot_attention_decode(const float *q, const float *k, const float *v, float *out, int batch, int queries,
                             int kv_heads, int group, int head_dim, int context) {
    const int d = head_dim, R = queries * group;
    int split_len = (context + SPLITS - 1) / SPLITS;
    split_len = (split_len + TILE - 1) / TILE * TILE;
    const int ns = (context + split_len - 1) / split_len;
    const long items = (long)batch * kv_heads * ns;
    /* the partials of item w: its o rows (R x d) in wo, its m and l (R each) in wm and wl */
    float *ws = (float *)malloc(sizeof(float) * (size_t)items * R * (d + 2));
    if (!ws) return;
    float *wo = ws, *wm = ws + (size_t)items * R * d, *wl = wm + (size_t)items * R;
#if THREADS > 1
#pragma omp parallel for num_threads(THREADS) schedule(SCHEDULE, CHUNK)
#endif
    for (long w = 0; w < items; ++w) {
        const int s = (int)(w % ns), h = (int)(w / ns % kv_heads), b = (int)(w / ns / kv_heads);
        item(q, k, v, wo + (size_t)w * R * d, wm + (size_t)w * R, wl + (size_t)w * R, b, h, s, queries, kv_heads,
             group, d, context, split_len);
    }
    /* row r of (b, h): split s's partial is at item (b * kv_heads + h) * ns + s */
    const long rows = (long)batch * kv_heads * R;
#if THREADS > 1
#pragma omp parallel for num_threads(THREADS) schedule(SCHEDULE, CHUNK)
#endif
    for (long x = 0; x < rows; ++x) {
        const int r = (int)(x % R), h = (int)(x / R % kv_heads), b = (int)(x / R / kv_heads);
        const long w0 = ((long)b * kv_heads + h) * ns;
        const int j = r / group, i = r % group;
        float *orow = out + ((((size_t)b * queries + j) * kv_heads + h) * group + i) * d;
        combine(wo + ((size_t)w0 * R + r) * d, wm + (size_t)w0 * R + r, wl + (size_t)w0 * R + r, orow, ns, R, d);
    }
    free(ws);
}
