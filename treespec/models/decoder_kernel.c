/* treespec's decoder pass on the CPU: every layer of a 4-bit Llama-family model over M query rows in one call.
 *
 * Built with the product kernels by treespec.models.int4_cpu (-march=native -ffp-contract=off) and called from
 * treespec.models.native_pass. It computes what the model's modules compute in treespec's exact arithmetic
 * (treespec.models.exact): each RMSNorm's statistics, the attention and the SiLU in float64, rounded once to fp32;
 * the rotary embedding, the residual additions and the elementwise products in fp32, operation by operation, as
 * torch does them (no fused multiply-adds: -ffp-contract=off); the products by treespec_int4_matmul and
 * treespec_int6_matmul. So the pass
 * returns what the modules return (up to a float64 result lying within ~1e-16 of an fp32 rounding midpoint), and
 * every query row's results depend on its own inputs and the keys it may see, never on the other rows: attention
 * visits a row's visible keys in slot order and skips the others.
 *
 * Shapes: B rows of M query tokens each (BM = B * M), hidden size H, heads x head_dim query features, kv_heads x
 * head_dim key/value features, intermediate size I. Cache buffers: [B, kv_heads, capacity, head_dim] fp32; the pass
 * writes its keys and values at slots past .. past + M - 1 and attends over slots 0 .. past + M - 1 where
 * visible[BM, past + M] is nonzero.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int treespec_int4_matmul(const void *x_in, int x_is_bf16, const uint8_t *codes, const uint16_t *scale,
                         const uint16_t *minimum, float *out, int64_t m, int64_t k, int64_t n, int64_t ldc, int threads);
int treespec_int6_matmul(const void *x_in, int x_is_bf16, const uint8_t *codes, const uint16_t *scale, float *out,
                         int64_t m, int64_t k, int64_t n, int64_t group, int64_t ldc, int threads);

typedef struct {
    int64_t bits;  /* 4: int4_kernel.c's codes, scales and minimums; 6: int6_kernel.c's codes and scales */
    const uint8_t *codes;
    const uint16_t *scale, *minimum;  /* fp16 bits; minimum: 4 bits only */
    const float *bias;  /* [out] or NULL */
    int64_t in, out, padded, group;  /* padded: the columns the kernel writes (out rounded up to 16); group: 6 bits */
    int64_t x_format;  /* how the kernel takes its fp32 inputs: X_FP32_TO_BF16 or X_FP32_TO_INT8 (activations.h) */
} Part;

#define MAX_PARTS 3
typedef struct {  /* one product whose output columns are its parts' side by side (q | k | v from two kernels) */
    Part parts[MAX_PARTS];
    int64_t count, padded;  /* padded: the parts' padded columns together */
} Product;

typedef struct {
    const float *input_norm, *attention_norm;  /* [H] */
    double input_eps, attention_eps;
    Product qkv, o, gate_up, down;  /* qkv: [q | k | v] columns; gate_up: [gate | up] */
} Layer;

typedef struct {
    int64_t batch, rows, hidden, heads, kv_heads, head_dim, intermediate, past;
    double scale;  /* attention's score scale */
    const float *final_norm;  /* [H], or NULL: the last layer's output is returned as it is */
    double final_eps;
    int threads;
    double *seconds;  /* NULL, or [3]: time spent in the products, attention, and the rest, added to */
    int64_t split_heads;  /* nonzero: each kv head's query heads go in two tasks (both read its keys and values);
                           * native_pass.py sets it only where a pass has fewer (row, kv head) pairs than two per
                           * thread; the outputs are the same */
} Shape;

/* Eight float64 lanes: one AVX-512 register, or two AVX2 registers where the kernels are built for AVX2
 * (TREESPEC_AVX2, set by treespec.models.int4_cpu). */
#if defined(__AVX512F__) && !defined(TREESPEC_AVX2)
typedef __m512d f64x8;
static inline f64x8 f64x8_set1(double v) { return _mm512_set1_pd(v); }
static inline f64x8 f64x8_load(const double *p) { return _mm512_loadu_pd(p); }
static inline void f64x8_store(double *p, f64x8 v) { _mm512_storeu_pd(p, v); }
static inline f64x8 f64x8_widen(const float *p) { return _mm512_cvtps_pd(_mm256_loadu_ps(p)); }
static inline __m256 f64x8_narrow(f64x8 v) { return _mm512_cvtpd_ps(v); }
static inline f64x8 f64x8_add(f64x8 a, f64x8 b) { return _mm512_add_pd(a, b); }
static inline f64x8 f64x8_sub(f64x8 a, f64x8 b) { return _mm512_sub_pd(a, b); }
static inline f64x8 f64x8_mul(f64x8 a, f64x8 b) { return _mm512_mul_pd(a, b); }
static inline f64x8 f64x8_div(f64x8 a, f64x8 b) { return _mm512_div_pd(a, b); }
static inline f64x8 f64x8_fmadd(f64x8 a, f64x8 b, f64x8 c) { return _mm512_fmadd_pd(a, b, c); }
static inline f64x8 f64x8_fnmadd(f64x8 a, f64x8 b, f64x8 c) { return _mm512_fnmadd_pd(a, b, c); }
static inline f64x8 f64x8_clamp(f64x8 v, double lo, double hi) {
    return _mm512_min_pd(_mm512_max_pd(v, _mm512_set1_pd(lo)), _mm512_set1_pd(hi));
}
static inline f64x8 f64x8_round(f64x8 v) {
    return _mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* p * 2^n for integer-valued n */
static inline f64x8 f64x8_scale2(f64x8 p, f64x8 n) { return _mm512_scalef_pd(p, n); }
static inline double f64x8_sum(f64x8 v) { return _mm512_reduce_add_pd(v); }
static inline double f64x8_first(f64x8 v) { return _mm512_cvtsd_f64(v); }
static inline f64x8 f64x8_max(f64x8 a, f64x8 b) { return _mm512_max_pd(a, b); }
static inline double f64x8_largest(f64x8 v) { return _mm512_reduce_max_pd(v); }
/* the sums of eight vectors' lanes, v[c]'s in lane c (fifteen shuffles for eight reductions) */
static inline f64x8 f64x8_sums(const f64x8 v[8]) {
    f64x8 halves[4], pairs[2];
    for (int i = 0; i < 4; i++)  /* [v[2i]'s 4-lane half sums | v[2i + 1]'s] */
        halves[i] = _mm512_add_pd(_mm512_shuffle_f64x2(v[2 * i], v[2 * i + 1], 0x44),
                                  _mm512_shuffle_f64x2(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 2; i++)  /* [2-lane sums of v[4i], v[4i + 1], v[4i + 2], v[4i + 3]] */
        pairs[i] = _mm512_add_pd(_mm512_shuffle_f64x2(halves[2 * i], halves[2 * i + 1], 0x88),
                                 _mm512_shuffle_f64x2(halves[2 * i], halves[2 * i + 1], 0xDD));
    /* lanes 0, 4, 1, 5, 2, 6, 3, 7, then in order */
    const f64x8 mixed = _mm512_add_pd(_mm512_unpacklo_pd(pairs[0], pairs[1]), _mm512_unpackhi_pd(pairs[0], pairs[1]));
    return _mm512_permutexvar_pd(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), mixed);
}
#else
typedef struct { __m256d lo, hi; } f64x8;
#define F64X8_MAP(a, op) ((f64x8){op((a).lo), op((a).hi)})
#define F64X8_ZIP(a, b, op) ((f64x8){op((a).lo, (b).lo), op((a).hi, (b).hi)})
static inline f64x8 f64x8_set1(double v) { return (f64x8){_mm256_set1_pd(v), _mm256_set1_pd(v)}; }
static inline f64x8 f64x8_load(const double *p) { return (f64x8){_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
static inline void f64x8_store(double *p, f64x8 v) {
    _mm256_storeu_pd(p, v.lo);
    _mm256_storeu_pd(p + 4, v.hi);
}
static inline f64x8 f64x8_widen(const float *p) {
    return (f64x8){_mm256_cvtps_pd(_mm_loadu_ps(p)), _mm256_cvtps_pd(_mm_loadu_ps(p + 4))};
}
static inline __m256 f64x8_narrow(f64x8 v) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(v.lo)), _mm256_cvtpd_ps(v.hi), 1);
}
static inline f64x8 f64x8_add(f64x8 a, f64x8 b) { return F64X8_ZIP(a, b, _mm256_add_pd); }
static inline f64x8 f64x8_sub(f64x8 a, f64x8 b) { return F64X8_ZIP(a, b, _mm256_sub_pd); }
static inline f64x8 f64x8_mul(f64x8 a, f64x8 b) { return F64X8_ZIP(a, b, _mm256_mul_pd); }
static inline f64x8 f64x8_div(f64x8 a, f64x8 b) { return F64X8_ZIP(a, b, _mm256_div_pd); }
static inline f64x8 f64x8_fmadd(f64x8 a, f64x8 b, f64x8 c) {
    return (f64x8){_mm256_fmadd_pd(a.lo, b.lo, c.lo), _mm256_fmadd_pd(a.hi, b.hi, c.hi)};
}
static inline f64x8 f64x8_fnmadd(f64x8 a, f64x8 b, f64x8 c) {
    return (f64x8){_mm256_fnmadd_pd(a.lo, b.lo, c.lo), _mm256_fnmadd_pd(a.hi, b.hi, c.hi)};
}
static inline f64x8 f64x8_clamp(f64x8 v, double lo, double hi) {
    const f64x8 low = f64x8_set1(lo), high = f64x8_set1(hi), raised = F64X8_ZIP(v, low, _mm256_max_pd);
    return F64X8_ZIP(raised, high, _mm256_min_pd);
}
static inline __m256d round_nearest(__m256d v) { return _mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline f64x8 f64x8_round(f64x8 v) { return F64X8_MAP(v, round_nearest); }
/* 2^n for integer-valued n in [-1022, 1023], built from its exponent bits */
static inline __m256d power_of_two(__m256d n) {
    const __m256d magic = _mm256_set1_pd(6755399441055744.0);  /* 2^52 + 2^51: n's integer in the low bits */
    const __m256i integer = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(n, magic)), _mm256_castpd_si256(magic));
    return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(integer, _mm256_set1_epi64x(1023)), 52));
}
/* p * 2^n for integer-valued n in [-1076, 1024]: two exact scalings by 2^(n/2)-ish halves, as scalef rounds once */
static inline __m256d scale2(__m256d p, __m256d n) {
    const __m256d first = _mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.5)));
    return _mm256_mul_pd(_mm256_mul_pd(p, power_of_two(first)), power_of_two(_mm256_sub_pd(n, first)));
}
static inline f64x8 f64x8_scale2(f64x8 p, f64x8 n) { return F64X8_ZIP(p, n, scale2); }
static inline double f64x8_sum(f64x8 v) {
    const __m256d s = _mm256_add_pd(v.lo, v.hi);
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}
static inline double f64x8_first(f64x8 v) { return _mm256_cvtsd_f64(v.lo); }
static inline f64x8 f64x8_max(f64x8 a, f64x8 b) { return F64X8_ZIP(a, b, _mm256_max_pd); }
static inline double f64x8_largest(f64x8 v) {
    const __m256d m = _mm256_max_pd(v.lo, v.hi);
    const __m128d t = _mm_max_pd(_mm256_castpd256_pd128(m), _mm256_extractf128_pd(m, 1));
    return _mm_cvtsd_f64(_mm_max_sd(t, _mm_unpackhi_pd(t, t)));
}
/* the sums of eight vectors' lanes, v[c]'s in lane c */
static inline f64x8 f64x8_sums(const f64x8 v[8]) {
    __m256d out[2];
    for (int i = 0; i < 2; i++) {
        const __m256d *w = (const __m256d *)(v + 4 * i);  /* the four vectors' (lo, hi) halves */
        const __m256d s0 = _mm256_add_pd(w[0], w[1]), s1 = _mm256_add_pd(w[2], w[3]);
        const __m256d s2 = _mm256_add_pd(w[4], w[5]), s3 = _mm256_add_pd(w[6], w[7]);
        const __m256d h01 = _mm256_hadd_pd(s0, s1), h23 = _mm256_hadd_pd(s2, s3);
        out[i] = _mm256_add_pd(_mm256_permute2f128_pd(h01, h23, 0x20), _mm256_permute2f128_pd(h01, h23, 0x31));
    }
    return (f64x8){out[0], out[1]};
}
#endif

/* e^x for float64 lanes, within a few ulps: x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor series to r^13
 * (truncation below 1e-17 relative), times 2^n. */
static inline f64x8 exp_pd(f64x8 x) {
    x = f64x8_clamp(x, -746.0, 710.0);
    const f64x8 n = f64x8_round(f64x8_mul(x, f64x8_set1(1.4426950408889634)));
    f64x8 r = f64x8_fnmadd(n, f64x8_set1(6.93147180369123816490e-01), x);
    r = f64x8_fnmadd(n, f64x8_set1(1.90821492927058770002e-10), r);
    static const double inverse_factorials[14] = {
        1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320, 1.0 / 362880,
        1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};
    f64x8 p = f64x8_set1(inverse_factorials[13]);
    for (int i = 12; i >= 0; i--) p = f64x8_fmadd(p, r, f64x8_set1(inverse_factorials[i]));
    return f64x8_scale2(p, n);
}

static inline double exp_sd(double x) {
    return f64x8_first(exp_pd(f64x8_set1(x)));
}

/* out[h] = weight * fp32(x / rms(x)), the mean of squares and the division in float64 */
static void rms_norm(const float *x, const float *weight, double eps, float *out, int64_t h) {
    double sum = 0.0;
    for (int64_t i = 0; i < h; i++) sum += (double)x[i] * (double)x[i];
    const double inverse = 1.0 / sqrt(sum / (double)h + eps);
    for (int64_t i = 0; i < h; i++) {
        const float normed = (float)((double)x[i] * inverse);
        out[i] = weight[i] * normed;
    }
}

/* out [m, product->padded] = x [m, in] @ W.T, each part's columns after the previous part's (+ its bias on its
 * first out columns) */
static int product(const Product *product, const float *x, int64_t m, float *out, int threads) {
    const int64_t ldc = product->padded;
    for (int64_t i = 0, column = 0; i < product->count; column += product->parts[i].padded, i++) {
        const Part *p = &product->parts[i];
        float *at = out + column;
        const int failed = p->bits == 6
            ? treespec_int6_matmul(x, (int)p->x_format, p->codes, p->scale, at, m, p->in, p->padded, p->group, ldc,
                                   threads)
            : treespec_int4_matmul(x, (int)p->x_format, p->codes, p->scale, p->minimum, at, m, p->in, p->padded, ldc,
                                   threads);
        if (failed) return failed;
        if (p->bias != NULL)
            for (int64_t r = 0; r < m; r++)
                for (int64_t c = 0; c < p->out; c++) at[r * ldc + c] += p->bias[c];
    }
    return 0;
}

/* the rotary embedding of one head's features x [d] (rotate-half convention), fp32 as torch computes it */
static void rotate(const float *x, const float *cos, const float *sin, float *out, int64_t d) {
    const int64_t half = d / 2;
    for (int64_t e = 0; e < d; e++) {
        const float turned = e < half ? -x[e + half] : x[e - half];
        const float a = x[e] * cos[e];
        const float b = turned * sin[e];
        out[e] = a + b;
    }
}

/* the cache rows attention reads PREFETCH_AHEAD visible slots ahead are asked for early: the attention of the default
 * target's one-token pass took 2.07 against 2.31 ms on a 400-token cache, 3.88 against 4.42 ms on 800 (medians of
 * three interleaved runs, [Intel(R) Xeon(R) Processor @ 2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07) */
#define PREFETCH_AHEAD 8
static inline void prefetch_row(const float *row, int64_t floats) {
    for (int64_t e = 0; e < floats; e += 16) _mm_prefetch((const char *)(row + e), _MM_HINT_T0);
}

#define HEAD_TILE 3  /* query heads sharing a key/value head that are processed together (registers) */

/* scores[t][c] = scale * q_t . k_seen[c] for `heads` (1 .. HEAD_TILE) query heads, q [heads, d] in float64: each key
 * is widened once for all of them; two accumulators per head */
static inline __attribute__((always_inline)) void score_tile(
        const int heads, const double *q, const float *keys, const int64_t *seen, int64_t count, int64_t d,
        double scale, double *scores, int64_t stride) {
    f64x8 partial[HEAD_TILE][8];  /* the last keys' lane sums, reduced eight keys at a time */
    for (int64_t c = 0; c < count; c++) {
        const float *k = keys + seen[c] * d;
        if (c + PREFETCH_AHEAD < count) prefetch_row(keys + seen[c + PREFETCH_AHEAD] * d, d);
        f64x8 sum[HEAD_TILE][2];
        for (int t = 0; t < heads; t++) sum[t][0] = sum[t][1] = f64x8_set1(0.0);
        for (int64_t e = 0; e < d; e += 16) {
            const f64x8 k0 = f64x8_widen(k + e), k1 = f64x8_widen(k + e + 8);
            for (int t = 0; t < heads; t++) {
                sum[t][0] = f64x8_fmadd(f64x8_load(q + t * d + e), k0, sum[t][0]);
                sum[t][1] = f64x8_fmadd(f64x8_load(q + t * d + e + 8), k1, sum[t][1]);
            }
        }
        for (int t = 0; t < heads; t++) partial[t][c % 8] = f64x8_add(sum[t][0], sum[t][1]);
        if (c % 8 == 7)
            for (int t = 0; t < heads; t++)
                f64x8_store(scores + t * stride + c - 7, f64x8_mul(f64x8_sums(partial[t]), f64x8_set1(scale)));
    }
    for (int64_t c = count / 8 * 8; c < count; c++)
        for (int t = 0; t < heads; t++) scores[t * stride + c] = f64x8_sum(partial[t][c % 8]) * scale;
}

/* acc[t][0 .. 63] (the head features e0 .. e0 + 63) = sum_c weights[t][c] * v_seen[c], in float64 registers */
static inline __attribute__((always_inline)) void value_tile(
        const int heads, const double *weights, int64_t stride, const float *values, const int64_t *seen,
        int64_t count, int64_t d, int64_t e0, double *acc) {
    f64x8 sum[HEAD_TILE][8];
    for (int t = 0; t < heads; t++)
        for (int j = 0; j < 8; j++) sum[t][j] = f64x8_set1(0.0);
    for (int64_t c = 0; c < count; c++) {
        const float *v = values + seen[c] * d + e0;
        if (c + PREFETCH_AHEAD < count) prefetch_row(values + seen[c + PREFETCH_AHEAD] * d + e0, 64);
        f64x8 w[HEAD_TILE];
        for (int t = 0; t < heads; t++) w[t] = f64x8_set1(weights[t * stride + c]);
        for (int j = 0; j < 8; j++) {
            const f64x8 vj = f64x8_widen(v + 8 * j);
            for (int t = 0; t < heads; t++) sum[t][j] = f64x8_fmadd(w[t], vj, sum[t][j]);
        }
    }
    for (int t = 0; t < heads; t++)
        for (int j = 0; j < 8; j++) f64x8_store(acc + t * d + e0 + 8 * j, sum[t][j]);
}

/* one query row's attention for `groups` of the query heads that read one kv head of its batch row, in float64:
 * query [groups, d] (fp32, rotated), out [groups, d] fp32; d a multiple of 64. scratch: (groups + 1) * total +
 * 2 * groups * d doubles (at most the kv head's groups). The visible slots are visited in ascending order; each
 * head's arithmetic is the same whichever heads it is attended with. */
static void attend(const Shape *s, int64_t groups, const float *query, const float *keys, const float *values,
                   const uint8_t *visible, int64_t total, float *out, double *scratch) {
    const int64_t d = s->head_dim;
    int64_t *seen = (int64_t *)(scratch + groups * total);
    double *q = scratch + (groups + 1) * total, *acc = q + groups * d;
    int64_t count = 0;
    for (int64_t j = 0; j < total; j++)
        if (visible[j]) seen[count++] = j;
    for (int64_t i = 0; i < groups * d; i++) q[i] = (double)query[i];
    for (int64_t t0 = 0; t0 < groups; t0 += HEAD_TILE) {
        const int heads = groups - t0 < HEAD_TILE ? (int)(groups - t0) : HEAD_TILE;
        double *scores = scratch + t0 * total;
        switch (heads) {
            case 1: score_tile(1, q + t0 * d, keys, seen, count, d, s->scale, scores, total); break;
            case 2: score_tile(2, q + t0 * d, keys, seen, count, d, s->scale, scores, total); break;
            default: score_tile(HEAD_TILE, q + t0 * d, keys, seen, count, d, s->scale, scores, total); break;
        }
    }
    double sums[groups];
    for (int64_t t = 0; t < groups; t++) {  /* softmax's weights, unnormalized, and their sum */
        double *score = scratch + t * total;
        f64x8 top = f64x8_set1(-INFINITY), sum = f64x8_set1(0.0);
        int64_t c = 0;
        for (; c + 8 <= count; c += 8) top = f64x8_max(top, f64x8_load(score + c));
        double best = f64x8_largest(top);
        for (; c < count; c++)
            if (score[c] > best) best = score[c];
        for (c = 0; c + 8 <= count; c += 8) {
            const f64x8 weight = exp_pd(f64x8_sub(f64x8_load(score + c), f64x8_set1(best)));
            f64x8_store(score + c, weight);
            sum = f64x8_add(sum, weight);
        }
        sums[t] = f64x8_sum(sum);
        for (; c < count; c++) {
            score[c] = exp_sd(score[c] - best);
            sums[t] += score[c];
        }
    }
    for (int64_t t0 = 0; t0 < groups; t0 += HEAD_TILE) {
        const int heads = groups - t0 < HEAD_TILE ? (int)(groups - t0) : HEAD_TILE;
        for (int64_t e0 = 0; e0 < d; e0 += 64) {
            const double *w = scratch + t0 * total;
            double *a = acc + t0 * d;
            switch (heads) {
                case 1: value_tile(1, w, total, values, seen, count, d, e0, a); break;
                case 2: value_tile(2, w, total, values, seen, count, d, e0, a); break;
                default: value_tile(HEAD_TILE, w, total, values, seen, count, d, e0, a); break;
            }
        }
    }
    for (int64_t t = 0; t < groups; t++)
        for (int64_t e = 0; e < d; e++) out[t * d + e] = count ? (float)(acc[t * d + e] / sums[t]) : 0.0f;
}

/* silu(gate) * up for one row: silu in float64 rounded to fp32, the product in fp32 */
static void gated(const float *gate, const float *up, float *out, int64_t n) {
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        const f64x8 g = f64x8_widen(gate + c);
        const f64x8 e = exp_pd(f64x8_sub(f64x8_set1(0.0), g));
        const __m256 silu = f64x8_narrow(f64x8_div(g, f64x8_add(f64x8_set1(1.0), e)));
        _mm256_storeu_ps(out + c, _mm256_mul_ps(silu, _mm256_loadu_ps(up + c)));
    }
    for (; c < n; c++) {
        const double g = (double)gate[c];
        const float silu = (float)(g / (1.0 + exp_sd(-g)));
        out[c] = silu * up[c];
    }
}

/* x [BM, H]: the embeddings; out [BM, H]: the last hidden states, normed where s->final_norm is set; cos/sin
 * [BM, d]; visible [BM, past + M]; keys/values: one cache buffer per layer; kept[i] (i = 0 .. n_layers, NULL or
 * [BM, H]) receives the hidden states after i layers. Returns 0, or -1 when out of memory. */
int treespec_decoder_pass(const Shape *s, const Layer *layers, int64_t n_layers, float *const *keys,
                          float *const *values, const int64_t *capacity, const float *x_in, const float *cos,
                          const float *sin, const uint8_t *visible, float *out, float *const *kept) {
    const int64_t bm = s->batch * s->rows, h = s->hidden, d = s->head_dim, total = s->past + s->rows;
    const int64_t q_width = s->heads * d, kv_width = s->kv_heads * d, groups = s->heads / s->kv_heads;
    const Layer *first = &layers[0];
    int64_t widest = first->qkv.padded;
    if (first->gate_up.padded > widest) widest = first->gate_up.padded;
    if (first->o.padded > widest) widest = first->o.padded;
    if (first->down.padded > widest) widest = first->down.padded;
    float *x = (float *)malloc((size_t)(bm * h) * sizeof(float));
    float *normed = (float *)malloc((size_t)(bm * h) * sizeof(float));
    float *wide = (float *)malloc((size_t)(bm * widest) * sizeof(float));
    float *query = (float *)malloc((size_t)(bm * q_width) * sizeof(float));
    float *attended = (float *)malloc((size_t)(bm * q_width) * sizeof(float));
    float *hidden = (float *)malloc((size_t)(bm * s->intermediate) * sizeof(float));
    const int64_t scratch_doubles = (groups + 1) * total + 2 * groups * d;
    double *scratch = (double *)malloc((size_t)(s->threads * scratch_doubles) * sizeof(double));
    int status = 0;
    if (!x || !normed || !wide || !query || !attended || !hidden || !scratch) {
        status = -1;
        goto done;
    }
    memcpy(x, x_in, (size_t)(bm * h) * sizeof(float));
    if (kept[0]) memcpy(kept[0], x, (size_t)(bm * h) * sizeof(float));
    double clock = omp_get_wtime();
    /* the per-row work (norms, rotary embedding and cache writes, SiLU, residuals) split over the threads by rows
     * where there are PARALLEL_ROWS or more; each row's arithmetic is the same either way. The default target's
     * passes, against the one-thread loops: 244-token prefill 197 against 250 ms, 8 tokens 1.04-1.10x, 16 tokens
     * 1.05x, 1 to 3 tokens unchanged (medians of interleaved passes, [Intel(R) Xeon(R) Processor @ 2.80GHz, 2 cores;
     * ISA: avx2 avx512f], 2026-12-07) */
#define PARALLEL_ROWS 4
#define ROWS_IN_PARALLEL _Pragma("omp parallel for num_threads(s->threads) schedule(static) if (bm >= PARALLEL_ROWS)")
#define LAP(part)                                                \
    if (s->seconds) {                                            \
        const double now = omp_get_wtime();                      \
        s->seconds[part] += now - clock;                         \
        clock = now;                                             \
    }
    for (int64_t l = 0; l < n_layers; l++) {
        const Layer *layer = &layers[l];
        ROWS_IN_PARALLEL
        for (int64_t r = 0; r < bm; r++) rms_norm(x + r * h, layer->input_norm, layer->input_eps, normed + r * h, h);
        LAP(2);
        if ((status = product(&layer->qkv, normed, bm, wide, s->threads))) goto done;
        LAP(0);
        const int64_t stride = layer->qkv.padded;
        ROWS_IN_PARALLEL
        for (int64_t r = 0; r < bm; r++) {  /* rotate queries and keys; write keys and values to the cache */
            const int64_t b = r / s->rows, slot = s->past + r % s->rows;
            const float *row = wide + r * stride;
            for (int64_t head = 0; head < s->heads; head++)
                rotate(row + head * d, cos + r * d, sin + r * d, query + r * q_width + head * d, d);
            for (int64_t g = 0; g < s->kv_heads; g++) {
                float *key = keys[l] + ((b * s->kv_heads + g) * capacity[l] + slot) * d;
                rotate(row + q_width + g * d, cos + r * d, sin + r * d, key, d);
                memcpy(values[l] + ((b * s->kv_heads + g) * capacity[l] + slot) * d, row + q_width + kv_width + g * d,
                       (size_t)d * sizeof(float));
            }
        }
        LAP(2);
        /* tasks: (row, kv head, part of its query heads); with s->split_heads (set where there are fewer (row, kv
         * head) pairs than two per thread) each kv head's query heads go in two parts, so that the threads share them
         * more evenly but both parts read the kv head's cache. Which is faster depends on the machine (one row of the
         * default target, 3 kv heads of 3 query heads, 2 threads, 400-token cache: splitting took 1.46 against 1.62
         * ms of attention on [Intel Xeon, 2 cores; ISA: avx2 avx512f avx512_bf16 amx_bf16], but made the whole
         * pass 1.06-1.08x slower on [Intel(R) Xeon(R) Processor @ 2.80GHz, 2 cores; ISA: avx2 avx512f], 2026-12-07),
         * so native_pass.py measures it where it runs */
        const int64_t parts = s->split_heads && groups > 1 ? 2 : 1;
        const int64_t first = parts == 1 ? groups : (groups + 1) / 2;  /* the query heads of a kv head's first part */
        const int64_t tasks = bm * s->kv_heads * parts;
#pragma omp parallel for num_threads(s->threads) schedule(dynamic)
        for (int64_t task = 0; task < tasks; task++) {
            const int64_t part = task % parts, g = task / parts % s->kv_heads, r = task / parts / s->kv_heads;
            const int64_t b = r / s->rows, base = (b * s->kv_heads + g) * capacity[l] * d;
            const int64_t heads = part ? groups - first : first;
            const int64_t at = r * q_width + (g * groups + part * first) * d;
            attend(s, heads, query + at, keys[l] + base, values[l] + base, visible + r * total, total, attended + at,
                   scratch + omp_get_thread_num() * scratch_doubles);
        }
        LAP(1);
        if ((status = product(&layer->o, attended, bm, wide, s->threads))) goto done;
        LAP(0);
        ROWS_IN_PARALLEL
        for (int64_t r = 0; r < bm; r++) {
            for (int64_t c = 0; c < h; c++) x[r * h + c] = x[r * h + c] + wide[r * layer->o.padded + c];
            rms_norm(x + r * h, layer->attention_norm, layer->attention_eps, normed + r * h, h);
        }
        LAP(2);
        if ((status = product(&layer->gate_up, normed, bm, wide, s->threads))) goto done;
        LAP(0);
        ROWS_IN_PARALLEL
        for (int64_t r = 0; r < bm; r++) {
            const float *row = wide + r * layer->gate_up.padded;
            gated(row, row + s->intermediate, hidden + r * s->intermediate, s->intermediate);
        }
        LAP(2);
        if ((status = product(&layer->down, hidden, bm, wide, s->threads))) goto done;
        LAP(0);
        ROWS_IN_PARALLEL
        for (int64_t r = 0; r < bm; r++)
            for (int64_t c = 0; c < h; c++) x[r * h + c] = x[r * h + c] + wide[r * layer->down.padded + c];
        if (kept[l + 1]) memcpy(kept[l + 1], x, (size_t)(bm * h) * sizeof(float));
    }
    if (s->final_norm != NULL)
        for (int64_t r = 0; r < bm; r++) rms_norm(x + r * h, s->final_norm, s->final_eps, out + r * h, h);
    else
        memcpy(out, x, (size_t)(bm * h) * sizeof(float));
    LAP(2);
#undef LAP
#undef ROWS_IN_PARALLEL
#undef PARALLEL_ROWS
done:
    free(x);
    free(normed);
    free(wide);
    free(query);
    free(attended);
    free(hidden);
    free(scratch);
    return status;
}
