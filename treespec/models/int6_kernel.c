/* treespec's CPU kernel for 6-bit weights: out[M, N] (rows ldc apart) = x[M, K] @ W.T, W [N, K] held as codes 0..63,
 * one per byte, with one fp16 scale per output column and group of G consecutive input weights (G = 16 or 32):
 * w = scale * (code - 32). A GGUF's Q5_0 tensors (32-weight blocks, values -16..15, an fp16 scale) lie on this grid
 * exactly, its Q6_K tensors (16-weight sub-blocks, each with its own scale d * sc) up to the fp16 rounding of d * sc;
 * treespec.models.quantize.Int6Linear holds them.
 *
 * Built with int4_kernel.c by treespec.models.int4_cpu (-march=native); it needs AVX-512 BF16 (vdpbf16ps). A 64-entry
 * table (vpermt2w) turns each code into the bf16 value code - 32, exact in bf16, so each group's dot product with the
 * input rounded to bf16 runs in fp32 sums and is scaled once. As in int4_kernel.c, every output element is computed
 * by the same instruction sequence whatever the number of rows, the row tile and the threads: a row's outputs do not
 * depend on the other rows of the call.
 *
 * Layout of the codes (uint8 [N / 16, K / 2, 16, 2]): for column block b and pair p of inputs (k = 2 p + {0, 1}),
 * 32 bytes, column 16 b + c at byte 2 c + (k - 2 p): widened to words they are the bf16 pairs vdpbf16ps pairs with x's
 * two inputs, one fp32 lane per column. scale: fp16 [N / 16, K / G, 16].
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "activations.h"
#include "row_tiles.h"

static inline __attribute__((always_inline)) void tile(
        const int rows, const uint16_t *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t group, const int64_t ldc, const int64_t b, const int64_t r0, const __m512i low,
        const __m512i high) {
    const int64_t groups = k / group, pairs = group / 2;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512 dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_ps();
        const uint8_t *group_codes = codes + (b * (k / 2) + g * pairs) * 32;
        for (int64_t p = 0; p < pairs; p++) {
            const __m512i index = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(group_codes + 32 * p)));
            const __m512i weights = _mm512_permutex2var_epi16(low, index, high);
            for (int r = 0; r < rows; r++) {
                const int32_t pair = *(const int32_t *)(x + (r0 + r) * k + group * g + 2 * p);
                dot[r] = _mm512_dpbf16_ps(dot[r], (__m512bh)weights, (__m512bh)_mm512_set1_epi32(pair));
            }
        }
        const __m512 s = half_to_float(scale + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) total[r] = _mm512_fmadd_ps(dot[r], s, total[r]);
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}

#define TILE(rows) tile(rows, x, codes, scale, out, k, group, ldc, b, r0, low, high)

#if TREESPEC_INT8
/* The int8 form of `tile` (x_format X_FP32_TO_INT8): x rounded to int8 with an fp32 scale per 32 inputs, each
 * group's integer dot product sum_j code_j q_j by vpdpbusd (exact), then
 * sum_j w_j x_j = x_scale * scale * (dot - 32 sum_j q_j) in fp32. Two pairs' 64 bytes (k = 4 i .. 4 i + 3) become
 * column c's four codes in lane c by one byte permutation. */
static inline __attribute__((always_inline)) void tile_int8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t group, const int64_t ldc, const int64_t b, const int64_t r0, const __m512i order) {
    const int64_t groups = k / group, fours = group / 4, per_scale = 32 / group;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_si512();
        const uint8_t *group_codes = codes + (b * (k / 2) + g * (group / 2)) * 32;
        for (int64_t i = 0; i < fours; i++) {
            const __m512i weights = _mm512_permutexvar_epi8(order, _mm512_loadu_si512(group_codes + 64 * i));
            for (int r = 0; r < rows; r++) {
                const int32_t four = *(const int32_t *)(x->values + (r0 + r) * k + group * g + 4 * i);
                dot[r] = _mm512_dpbusd_epi32(dot[r], weights, _mm512_set1_epi32(four));
            }
        }
        const __m512 s = half_to_float(scale + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) {
            const int32_t sum = group == 16 ? x->sums16[(r0 + r) * groups + g] : x->sums32[(r0 + r) * groups + g];
            const __m512i centred = _mm512_sub_epi32(dot[r], _mm512_set1_epi32(32 * sum));
            const float x_scale = x->scale[(r0 + r) * (k / 32) + g / per_scale];
            total[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(centred), s), _mm512_set1_ps(x_scale), total[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}

/* the int8 form of treespec_int6_matmul */
static int int6_matmul_int8(const float *x_in, const uint8_t *codes, const uint16_t *scale, float *out, int64_t m,
                            int64_t k, int64_t n, int64_t group, int64_t ldc, int threads) {
    Int8Rows rows;
    if (treespec_int8_rows(x_in, m, k, &rows)) return -1;
    const Int8Rows *x = &rows;
    uint8_t positions[64];  /* byte o: column o / 4's input o % 4, from pair (o % 4) / 2 */
    for (int o = 0; o < 64; o++) positions[o] = (uint8_t)(((o % 4) / 2) * 32 + 2 * (o / 4) + o % 2);
    const __m512i order = _mm512_loadu_si512((const void *)positions);
    const int64_t blocks = n / 16;
#undef TILE
#define TILE(rows) tile_int8(rows, x, codes, scale, out, k, group, ldc, b, r0, order)
    EACH_ROW_TILE(blocks, m)
#undef TILE
#define TILE(rows) tile(rows, x, codes, scale, out, k, group, ldc, b, r0, low, high)
    free(rows.memory);
    return 0;
}
#endif

/* x: [m, k] in x_format (activations.h); out: fp32, row r's n outputs at out + r * ldc (n a multiple of 16, k of
 * 32, group 16 or 32); threads: OpenMP threads over column blocks. Returns 0, or -1 when out of memory. */
int treespec_int6_matmul(const void *x_in, int x_format, const uint8_t *codes, const uint16_t *scale, float *out,
                         int64_t m, int64_t k, int64_t n, int64_t group, int64_t ldc, int threads) {
    if (x_format == X_FP32_TO_INT8)
#if TREESPEC_INT8
        return int6_matmul_int8((const float *)x_in, codes, scale, out, m, k, n, group, ldc, threads);
#else
        return X_UNSUPPORTED;
#endif
    uint16_t *converted = NULL;
    const uint16_t *x = treespec_bf16_rows(x_in, x_format == X_BF16, m, k, &converted);
    if (x == NULL) return -1;
    uint16_t levels[64];
    for (int c = 0; c < 64; c++) {  /* bf16 bits of -32.0 .. 31.0 */
        const float value = (float)(c - 32);
        uint32_t bits;
        __builtin_memcpy(&bits, &value, sizeof bits);
        levels[c] = (uint16_t)(bits >> 16);
    }
    const __m512i low = _mm512_loadu_si512((const void *)levels), high = _mm512_loadu_si512((const void *)(levels + 32));
    const int64_t blocks = n / 16;
    EACH_ROW_TILE(blocks, m)
    free(converted);
    return 0;
}
