/* treespec's CPU kernel for 6-bit weights: out[M, N] (rows ldc apart) = x[M, K] @ W.T, W [N, K] held as codes 0..63,
 * one per byte, with one fp32 scale per output column and group of G consecutive input weights (G = 16 or 32):
 * w = scale * (code - 32). A GGUF's Q6_K tensors (16-weight sub-blocks, each with its own scale d * sc) and Q5_0
 * tensors (32-weight blocks, values -16..15) lie on this grid exactly; treespec.models.quantize.Int6Linear holds them.
 *
 * Built with int4_kernel.c by treespec.models.int4_cpu (-march=native); it needs AVX-512 BF16 (vdpbf16ps). A 64-entry
 * table (vpermt2w) turns each code into the bf16 value code - 32, exact in bf16, so each group's dot product with the
 * input rounded to bf16 runs in fp32 sums and is scaled once. As in int4_kernel.c, every output element is computed
 * by the same instruction sequence whatever the number of rows, the row tile and the threads: a row's outputs do not
 * depend on the other rows of the call.
 *
 * Layout of the codes (uint8 [N / 16, K / 2, 16, 2]): for column block b and pair p of inputs (k = 2 p + {0, 1}),
 * 32 bytes, column 16 b + c at byte 2 c + (k - 2 p): widened to words they are the bf16 pairs vdpbf16ps pairs with x's
 * two inputs, one fp32 lane per column. scale: fp32 [N / 16, K / G, 16].
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "row_tiles.h"

uint16_t *treespec_bf16_rows(const void *x_in, int x_is_bf16, int64_t m, int64_t k, uint16_t **converted);

static inline __attribute__((always_inline)) void tile(
        const int rows, const uint16_t *x, const uint8_t *codes, const float *scale, float *out, const int64_t k,
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
        const __m512 s = _mm512_loadu_ps(scale + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) total[r] = _mm512_fmadd_ps(dot[r], s, total[r]);
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}

#define TILE(rows) tile(rows, x, codes, scale, out, k, group, ldc, b, r0, low, high)

/* x: [m, k] fp32 (x_is_bf16 = 0, rounded to bf16 here, to nearest even) or bf16 bits (1); out: fp32, row r's n
 * outputs at out + r * ldc (n a multiple of 16, k of group, group even); threads: OpenMP threads over column blocks.
 * Returns 0, or -1 when out of memory. */
int treespec_int6_matmul(const void *x_in, int x_is_bf16, const uint8_t *codes, const float *scale, float *out,
                         int64_t m, int64_t k, int64_t n, int64_t group, int64_t ldc, int threads) {
    uint16_t *converted = NULL;
    const uint16_t *x = treespec_bf16_rows(x_in, x_is_bf16, m, k, &converted);
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
