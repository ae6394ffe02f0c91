/* treespec's CPU kernel for 8-bit weights: out[M, N] (rows ldc apart) = x[M, K] @ W.T, W [N, K] held as codes
 * -128..127 with one fp16 scale per output column and group of 32 inputs: w = scale * code. A GGUF's Q8_0 tensors
 * lie on this grid exactly (the default target's embedding-tied LM head is one); treespec.models.quantize.Int8Linear
 * holds them. The inputs are taken in int8 form only (activations.h's X_FP32_TO_INT8: each row rounded per 32 inputs
 * to int8 codes times an fp32 scale, treespec_int8_rows).
 *
 * Each group's dot product of codes and inputs is an exact integer: vpdpbusd multiplies the codes, stored as the
 * unsigned bytes code + 128, by the signed input codes, and 128 times the group's input-code sum is taken off in
 * int32 (|dot| <= 32 * 128 * 127, exact in fp32 too). Then, per group in order, total += x_scale * (scale * dot),
 * one fp32 multiplication and one fused multiply-add. Reading one byte a weight and one fp16 scale per 32 (1.06 bytes
 * a weight), against 1.25 for the same weight as two 4-bit planes with their scales and minimums, and with one
 * vpdpbusd per four weights instead of two and no nibble unpacking.
 *
 * As in int4_kernel.c, every output element is computed by the same instruction sequence whatever the number of
 * rows, the row tile and the threads (threads split the column blocks): a row's outputs do not depend on the other
 * rows of the call. avx2_kernels.c computes the same integers and the same epilogue: the same outputs, bit for bit.
 *
 * Layout of the codes (uint8 [N / 16, K / 32, 8, 64]): for column block b, group g and quad i (inputs
 * 32 g + 4 i .. + 3), byte 4 c + t holds column 16 b + c's code + 128 at input 32 g + 4 i + t (the order vpdpbusd
 * takes: column c's four codes in 32-bit lane c). scale: fp16 [N / 16, K / 32, 16].
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "activations.h"
#include "row_tiles.h"

#if TREESPEC_INT8
/* rows r0 .. r0 + rows - 1 of column block b (rows a compile-time constant after inlining) */
static inline __attribute__((always_inline)) void tile8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t ldc, const int64_t b, const int64_t r0) {
    const int64_t groups = k / 32;
    __m512 total[ROW_TILE];
    for (int r = 0; r < rows; r++) total[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m512i dot[ROW_TILE];
        for (int r = 0; r < rows; r++) dot[r] = _mm512_setzero_si512();
        const uint8_t *group_codes = codes + (b * groups + g) * 512;
        for (int i = 0; i < 8; i++) {
            const __m512i weights = _mm512_loadu_si512((const void *)(group_codes + 64 * i));
            for (int r = 0; r < rows; r++) {
                const int32_t four = *(const int32_t *)(x->values + (r0 + r) * k + 32 * g + 4 * i);
                dot[r] = dot_bytes(dot[r], weights, _mm512_set1_epi32(four));
            }
        }
        const __m512 s = half_to_float(scale + (b * groups + g) * 16);
        for (int r = 0; r < rows; r++) {
            const int64_t at = (r0 + r) * groups + g;
            const __m512i exact = _mm512_sub_epi32(dot[r], _mm512_set1_epi32(128 * x->sums32[at]));
            total[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(exact), s), _mm512_set1_ps(x->scale[at]),
                                       total[r]);
        }
    }
    for (int r = 0; r < rows; r++) _mm512_storeu_ps(out + (r0 + r) * ldc + 16 * b, total[r]);
}
#endif

/* x: fp32 [m, k] (rounded to int8 here); out: fp32, row r's n outputs at out + r * ldc (n a multiple of 16, k of 32);
 * threads: OpenMP threads over column blocks. Returns 0, -1 when out of memory, X_UNSUPPORTED without the int8 form. */
int treespec_int8_matmul(const float *x_in, const uint8_t *codes, const uint16_t *scale, float *out, int64_t m,
                         int64_t k, int64_t n, int64_t ldc, int threads) {
#if TREESPEC_INT8
    Int8Rows rows;
    if (treespec_int8_rows(x_in, m, k, &rows)) return -1;
    const Int8Rows *x = &rows;
    const int64_t blocks = n / 16;
#define TILE(rows) tile8(rows, x, codes, scale, out, k, ldc, b, r0)
    EACH_ROW_TILE(blocks, m)
#undef TILE
    free(rows.memory);
    return 0;
#else
    (void)x_in, (void)codes, (void)scale, (void)out, (void)m, (void)k, (void)n, (void)ldc, (void)threads;
    return X_UNSUPPORTED;
#endif
}
