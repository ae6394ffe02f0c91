/* treespec's CPU kernel for 6-bit weights: out[M, N] (rows ldc apart) = x[M, K] @ W.T, W [N, K] held as codes 0..63,
 * six bits each, with one fp16 scale per output column and group of G consecutive input weights (G = 16 or 32):
 * w = scale * (code - 32). A GGUF's Q5_0 tensors (32-weight blocks, values -16..15, an fp16 scale) lie on this grid
 * exactly, its Q6_K tensors (16-weight sub-blocks, each with its own scale d * sc) up to the fp16 rounding of d * sc;
 * treespec.models.quantize.Int6Linear holds them.
 *
 * Built with int4_kernel.c by treespec.models.int4_cpu (-march=native); bf16 dot products by vdpbf16ps, or in fp32
 * steps where the CPU lacks AVX-512 BF16 (activations.h's dot_bf16_pairs). A 64-entry
 * table (vpermt2w) turns each code into the bf16 value code - 32, exact in bf16, so each group's dot product with the
 * input rounded to bf16 runs in fp32 sums and is scaled once. As in int4_kernel.c, every output element is computed
 * by the same instruction sequence whatever the number of rows, the row tile and the threads: a row's outputs do not
 * depend on the other rows of the call.
 *
 * Layout of the codes (uint8 [N / 16, K / 16, 192]): for column block b and slice s of 16 inputs, codes in "lane
 * order": the 64 codes of inputs 16 s + 4 v .. + 3 (v = 0..3) as 64 bytes, byte 4 c + t holding column 16 b + c's code
 * at input 16 s + 4 v + t (the order vpdpbusd takes). Bytes 0..63 hold the low four bits of v = 0 (low nibbles) and
 * v = 1 (high nibbles), bytes 64..127 those of v = 2 and 3, and bytes 128..191 the top two bits of v = 0..3 at bits
 * 2 v, 2 v + 1 of byte 128 + 4 c + t: six bits a weight, where a byte each read a third more per pass.
 * scale: fp16 [N / 16, K / G, 16].
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "activations.h"
#include "row_tiles.h"

#define SLICE_BYTES 192  /* the codes of 16 inputs of a column block */

/* The codes of slice `slice` (16 inputs of one column block) as four vectors in lane order: byte 4 c + t of
 * weights[v] is column c's code at input 4 v + t of the slice. */
static inline __attribute__((always_inline)) void unpack_slice(const uint8_t *slice, __m512i weights[4]) {
    const __m512i nibble = _mm512_set1_epi8(0x0F), top = _mm512_set1_epi8(0x30);
    const __m512i first = _mm512_loadu_si512(slice), second = _mm512_loadu_si512(slice + 64);
    const __m512i plane = _mm512_loadu_si512(slice + 128);
    /* 0xEA: (a & b) | c, bit by bit */
    weights[0] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(plane, 4), top, _mm512_and_si512(first, nibble), 0xEA);
    weights[1] = _mm512_ternarylogic_epi32(_mm512_slli_epi16(plane, 2), top,
                                           _mm512_and_si512(_mm512_srli_epi16(first, 4), nibble), 0xEA);
    weights[2] = _mm512_ternarylogic_epi32(plane, top, _mm512_and_si512(second, nibble), 0xEA);
    weights[3] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(plane, 2), top,
                                           _mm512_and_si512(_mm512_srli_epi16(second, 4), nibble), 0xEA);
}

static inline __attribute__((always_inline)) void tile(
        const int rows, const uint16_t *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t group, const int64_t ldc, const int64_t b, const int64_t r0, const __m512i low,
        const __m512i high, const __m512i pairs_first) {
    const int64_t groups = k / group, slices = group / 16;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512 dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_ps();
        for (int64_t s = 0; s < slices; s++) {
            __m512i weights[4];
            unpack_slice(codes + (b * (k / 16) + g * slices + s) * SLICE_BYTES, weights);
            for (int v = 0; v < 4; v++) {
                /* within each 128-bit lane, the codes of inputs 4 v, 4 v + 1 of its four columns, then of 4 v + 2,
                 * 4 v + 3; the lanes' first halves, then their second halves, widened to the words vdpbf16ps pairs */
                const __m512i split = _mm512_permutexvar_epi64(
                    _mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), _mm512_shuffle_epi8(weights[v], pairs_first));
                for (int half = 0; half < 2; half++) {
                    const __m512i index = _mm512_cvtepu8_epi16(half ? _mm512_extracti64x4_epi64(split, 1)
                                                                    : _mm512_castsi512_si256(split));
                    const __m512i values = _mm512_permutex2var_epi16(low, index, high);
                    const int64_t input = group * g + 16 * s + 4 * v + 2 * half;
                    for (int r = 0; r < rows; r++) {
                        const int32_t pair = *(const int32_t *)(x + (r0 + r) * k + input);
                        dot[r] = dot_bf16_pairs(dot[r], values, _mm512_set1_epi32(pair));
                    }
                }
            }
        }
        const __m512 scales = half_to_float(scale + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) total[r] = _mm512_fmadd_ps(dot[r], scales, total[r]);
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}

#define TILE(rows) tile(rows, x, codes, scale, out, k, group, ldc, b, r0, low, high, pairs_first)

#if TREESPEC_INT8
/* The int8 form of `tile` (x_format X_FP32_TO_INT8): x rounded to int8 with an fp32 scale per 32 inputs, each
 * group's integer dot product sum_j code_j q_j by vpdpbusd (exact) on the codes in lane order, then
 * sum_j w_j x_j = x_scale * scale * (dot - 32 sum_j q_j) in fp32. */
static inline __attribute__((always_inline)) void tile_int8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t group, const int64_t ldc, const int64_t b, const int64_t r0) {
    const int64_t groups = k / group, slices = group / 16, per_scale = 32 / group;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_si512();
        for (int64_t s = 0; s < slices; s++) {
            __m512i weights[4];
            unpack_slice(codes + (b * (k / 16) + g * slices + s) * SLICE_BYTES, weights);
            for (int v = 0; v < 4; v++) {
                for (int r = 0; r < rows; r++) {
                    const int32_t four = *(const int32_t *)(x->values + (r0 + r) * k + group * g + 16 * s + 4 * v);
                    dot[r] = dot_bytes(dot[r], weights[v], _mm512_set1_epi32(four));
                }
            }
        }
        const __m512 scales = half_to_float(scale + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) {
            const int32_t sum = group == 16 ? x->sums16[(r0 + r) * groups + g] : x->sums32[(r0 + r) * groups + g];
            const __m512i centred = _mm512_sub_epi32(dot[r], _mm512_set1_epi32(32 * sum));
            const float x_scale = x->scale[(r0 + r) * (k / 32) + g / per_scale];
            total[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(centred), scales), _mm512_set1_ps(x_scale),
                                       total[r]);
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
    const int64_t blocks = n / 16;
#undef TILE
#define TILE(rows) tile_int8(rows, x, codes, scale, out, k, group, ldc, b, r0)
    EACH_ROW_TILE(blocks, m)
#undef TILE
#define TILE(rows) tile(rows, x, codes, scale, out, k, group, ldc, b, r0, low, high, pairs_first)
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
    /* per 128-bit lane (columns 4 L .. 4 L + 3, bytes 4 c + t): bytes 4 c, 4 c + 1 of its four columns, then 4 c + 2,
     * 4 c + 3 */
    uint8_t order[64];
    for (int o = 0; o < 64; o++) order[o] = (uint8_t)(4 * ((o % 8) / 2) + 2 * ((o % 16) / 8) + o % 2);
    const __m512i pairs_first = _mm512_loadu_si512((const void *)order);
    const int64_t blocks = n / 16;
    EACH_ROW_TILE(blocks, m)
    free(converted);
    return 0;
}
