/* treespec's CPU kernel for 4-bit weights: out[M, N] = x[M, K] @ W.T, W [N, K] held as 4-bit codes in groups of 32
 * input weights with an fp16 scale and minimum each (w = code * scale + min), x in bf16, products and sums in fp32.
 *
 * Built by treespec.models.int4_cpu for the CPU it runs on (-march=native), with AVX-512 BF16 (vdpbf16ps) or, on an
 * AVX-512 CPU without it, the same sums in fp32 steps (activations.h's dot_bf16_pairs; there the int8 form is fast).
 * Per group g and output column n, the group's dot product splits into an exact integer-weighted part and a
 * minimum part:  sum_j x_j w_j = scale_gn * sum_j x_j code_j + min_gn * sum_j x_j.  The codes 0..15 are exact in
 * bf16, so vdpbf16ps multiplies them by x exactly and only the fp32 sums round.
 *
 * Every output element is computed by the same instruction sequence whatever the number of rows M, the row tile it
 * falls in and the number of threads (threads split the columns, never a sum): a row's outputs do not depend on
 * the other rows of the call, which lets a tree pass and a one-token pass of a 4-bit target agree bit for bit.
 *
 * Layout of the codes (uint8 [N / 16, K / 32, 16, 16]): for column block b, group g and pair p of input weights
 * (k = 32 g + 2 p + {0, 1}), byte j holds in its low nibble the code of column 16 b + j / 2 at k = 32 g + 2 p + j % 2,
 * and in its high nibble that of column 16 b + 8 + j / 2 at the same k. Widening the 16 bytes to words and putting
 * the high nibbles after the low ones gives the 32 bf16 pairs that vdpbf16ps pairs with x's two inputs, one fp32
 * lane per column. scale and min: fp16 [N / 16, K / 32, 16] (a fifth of the bytes a pass reads, against a third in
 * fp32: fp16 scales measured 11% faster passes of the Qwen2.5-Coder 1.5B on an AMD EPYC, 2026-12-06).
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "activations.h"
#include "row_tiles.h"

static inline __m512i decode(const uint8_t *bytes) {
    const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)bytes));
    const __m256i low = _mm256_and_si256(words, _mm256_set1_epi16(0x0F));
    const __m256i high = _mm256_srli_epi16(words, 4);
    return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

/* rows r0 .. r0 + rows - 1 of column block b; rows is a compile-time constant after inlining (the accumulators
 * stay in registers). Taking several blocks at once, for more independent chains in the few-row cases, measured
 * slower (AMD EPYC, 2026-12-04). */
static inline __attribute__((always_inline)) void tile(
        const int rows, const uint16_t *x, const float *group_sums, const uint8_t *codes, const uint16_t *scale,
        const uint16_t *minimum, float *out, const int64_t k, const int64_t ldc, const int64_t b, const int64_t r0,
        const __m512i table) {
    const int64_t groups = k / 32;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512 dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_ps();
        const uint8_t *group_codes = codes + ((b * groups + g) * 16) * 16;
        for (int p = 0; p < 16; p++) {
            const __m512i weights = _mm512_permutexvar_epi16(decode(group_codes + 16 * p), table);
            for (int r = 0; r < rows; r++) {
                const int32_t pair = *(const int32_t *)(x + (r0 + r) * k + 32 * g + 2 * p);
                dot[r] = dot_bf16_pairs(dot[r], weights, _mm512_set1_epi32(pair));
            }
        }
        const __m512 s = half_to_float(scale + (b * groups + g) * 16);
        const __m512 m = half_to_float(minimum + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) {
            total[r] = _mm512_fmadd_ps(dot[r], s, total[r]);
            total[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(group_sums[(r0 + r) * groups + g]), total[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}

#define TILE(rows) tile(rows, x, group_sums, codes, scale, minimum, out, k, ldc, b, r0, table)

uint16_t *treespec_bf16_rows(const void *x_in, int x_is_bf16, int64_t m, int64_t k, uint16_t **converted) {
    *converted = NULL;
    if (x_is_bf16) return (uint16_t *)x_in;
    uint16_t *rows = (uint16_t *)malloc((size_t)(m * k) * sizeof(uint16_t));
    if (rows == NULL) return NULL;
    const float *source = (const float *)x_in;
    for (int64_t i = 0; i < m * k; i += 16)
        _mm256_storeu_si256((__m256i *)(rows + i), float_to_bf16(_mm512_loadu_ps(source + i)));
    *converted = rows;
    return rows;
}

int treespec_int8_supported(void) { return TREESPEC_INT8; }

#if TREESPEC_INT8
int treespec_int8_rows(const float *x, int64_t m, int64_t k, Int8Rows *rows) {
    const int64_t blocks = k / 32;
    if (int8_rows_alloc(m, k, rows)) return -1;
    for (int64_t i = 0; i < m * blocks; i++) {
        const float *from = x + 32 * i;
        const __m512 a = _mm512_loadu_ps(from), b = _mm512_loadu_ps(from + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));
        const __m512 inverse = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        /* to nearest even (the default rounding mode); |x| * 127 / amax is at most 127 up to one rounding */
        const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, inverse));
        const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, inverse));
        _mm_storeu_si128((__m128i *)(rows->values + 32 * i), _mm512_cvtsepi32_epi8(qa));
        _mm_storeu_si128((__m128i *)(rows->values + 32 * i + 16), _mm512_cvtsepi32_epi8(qb));
        rows->scale[i] = amax / 127.0f;
        rows->sums16[2 * i] = _mm512_reduce_add_epi32(qa);
        rows->sums16[2 * i + 1] = _mm512_reduce_add_epi32(qb);
        rows->sums32[i] = rows->sums16[2 * i] + rows->sums16[2 * i + 1];
    }
    return 0;
}
#endif

#if TREESPEC_INT8
/* The int8 form of `tile` (x_format X_FP32_TO_INT8): x rounded to int8 with an fp32 scale per 32 inputs
 * (treespec_int8_rows), each group's integer dot product by vpdpbusd (four code-by-input products per int32 lane, exact), then
 * sum_j w_j x_j = x_scale * (scale * dot + min * sum_j q_j) in fp32. The codes of two pairs (k = 32 g + 4 i .. + 3)
 * become the 64 bytes vpdpbusd takes (column c's four codes in lane c) by one byte permutation and a nibble shift. */
static inline __attribute__((always_inline)) void tile_int8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, const uint16_t *minimum,
        float *out, const int64_t k, const int64_t ldc, const int64_t b, const int64_t r0, const __m512i order,
        const __m512i shifts) {
    const int64_t groups = k / 32;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_si512();
        const uint8_t *group_codes = codes + ((b * groups + g) * 16) * 16;
        for (int i = 0; i < 8; i++) {
            const __m512i packed = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(group_codes + 32 * i)));
            const __m512i weights = _mm512_and_si512(
                _mm512_srlv_epi16(_mm512_permutexvar_epi8(order, packed), shifts), _mm512_set1_epi8(0x0F));
            for (int r = 0; r < rows; r++) {
                const int32_t four = *(const int32_t *)(x->values + (r0 + r) * k + 32 * g + 4 * i);
                dot[r] = dot_bytes(dot[r], weights, _mm512_set1_epi32(four));
            }
        }
        const __m512 s = half_to_float(scale + (b * groups + g) * 16);
        const __m512 m = half_to_float(minimum + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) {
            const int64_t at = (r0 + r) * groups + g;
            const __m512 sums = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r]), s,
                                                _mm512_mul_ps(m, _mm512_set1_ps((float)x->sums32[at])));
            total[r] = _mm512_fmadd_ps(sums, _mm512_set1_ps(x->scale[at]), total[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}

/* the int8 form of treespec_int4_matmul (x_format X_FP32_TO_INT8) */
static int int4_matmul_int8(const float *x_in, const uint8_t *codes, const uint16_t *scale, const uint16_t *minimum,
                            float *out, int64_t m, int64_t k, int64_t n, int64_t ldc, int threads) {
    Int8Rows rows;
    if (treespec_int8_rows(x_in, m, k, &rows)) return -1;
    const Int8Rows *x = &rows;
    /* byte o of the permuted pair of pairs: column (o % 32) / 4's input o % 4 (codes of columns 0..7 in the low
     * nibbles of the first 32 bytes, of columns 8..15 in the high nibbles of the other 32) */
    uint8_t positions[64];
    for (int o = 0; o < 64; o++) positions[o] = (uint8_t)(((o % 4) / 2) * 16 + 2 * ((o % 32) / 4) + o % 2);
    const __m512i order = _mm512_loadu_si512((const void *)positions);
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const int64_t blocks = n / 16;
#undef TILE
#define TILE(rows) tile_int8(rows, x, codes, scale, minimum, out, k, ldc, b, r0, order, shifts)
    EACH_ROW_TILE(blocks, m)
#undef TILE
#define TILE(rows) tile(rows, x, group_sums, codes, scale, minimum, out, k, ldc, b, r0, table)
    free(rows.memory);
    return 0;
}
#endif

/* x: [m, k] in x_format (activations.h: fp32 rounded to bf16 here, bf16 bits, or fp32 rounded to int8 here); out:
 * fp32, row r's n outputs at out + r * ldc (n a multiple of 16, k of 32); threads: OpenMP threads over column blocks.
 * Returns 0, or -1 when out of memory. */
int treespec_int4_matmul(const void *x_in, int x_format, const uint8_t *codes, const uint16_t *scale,
                         const uint16_t *minimum, float *out, int64_t m, int64_t k, int64_t n, int64_t ldc,
                         int threads) {
    if (x_format == X_FP32_TO_INT8)
#if TREESPEC_INT8
        return int4_matmul_int8((const float *)x_in, codes, scale, minimum, out, m, k, n, ldc, threads);
#else
        return X_UNSUPPORTED;
#endif
    const int64_t groups = k / 32;
    uint16_t *converted = NULL;
    const uint16_t *x = treespec_bf16_rows(x_in, x_format == X_BF16, m, k, &converted);
    if (x == NULL) return -1;
    float *group_sums = (float *)malloc((size_t)(m * groups) * sizeof(float));
    if (group_sums == NULL) {
        free(converted);
        return -1;
    }
    /* the sum of each row's inputs per group, in a fixed order */
    for (int64_t r = 0; r < m; r++) {
        for (int64_t g = 0; g < groups; g++) {
            float sum = 0.0f;
            for (int j = 0; j < 32; j++) {
                const uint32_t bits = (uint32_t)x[r * k + 32 * g + j] << 16;
                float value;
                __builtin_memcpy(&value, &bits, sizeof value);
                sum += value;
            }
            group_sums[r * groups + g] = sum;
        }
    }
    uint16_t levels[32];
    for (int c = 0; c < 32; c++) {  /* bf16 bits of 0.0 .. 15.0 (16 .. 31 unused) */
        const float value = (float)(c & 15);
        uint32_t bits;
        __builtin_memcpy(&bits, &value, sizeof bits);
        levels[c] = (uint16_t)(bits >> 16);
    }
    const __m512i table = _mm512_loadu_si512((const void *)levels);
    const int64_t blocks = n / 16;
    EACH_ROW_TILE(blocks, m)
    free(group_sums);
    free(converted);
    return 0;
}
