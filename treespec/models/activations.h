/* How the product kernels (int4_kernel.c, int6_kernel.c and int8_kernel.c, or avx2_kernels.c) take their input rows
 * x [m, k], the helpers that put fp32 rows into those forms (defined in int4_kernel.c; the int8 ones also in
 * avx2_kernels.c), and how the AVX-512 kernels read their fp16 scales. Each row is converted on its own, so a row's
 * products never depend on the other rows of a call. */
#ifndef TREESPEC_ACTIVATIONS_H
#define TREESPEC_ACTIVATIONS_H

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __AVX512F__
/* 16 fp16 values (the kernels' per-group scales and minimums) as fp32, exactly */
static inline __m512 half_to_float(const uint16_t *values) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)values));
}

/* acc + a . b per 32-bit lane, a and b holding two bf16 values in each (vdpbf16ps). Where the CPU lacks AVX-512 BF16
 * (an AVX-512 CPU whose int8 form is the fast one), the same dot product in fp32 steps: each product of two bf16
 * values is exact in fp32, and the two are added to acc one at a time (the odd element's first, the order Intel's
 * description of vdpbf16ps gives), each addition rounded to nearest. Its bits may differ from the instruction's (which
 * also flushes denormals); a build runs one form or the other, and either keeps every row's sums independent. */
static inline __m512 dot_bf16_pairs(__m512 acc, __m512i a, __m512i b) {
#ifdef __AVX512BF16__
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
#else
    const __m512i high = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512 a_odd = _mm512_castsi512_ps(_mm512_and_si512(a, high));
    const __m512 b_odd = _mm512_castsi512_ps(_mm512_and_si512(b, high));
    const __m512 a_even = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
    const __m512 b_even = _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
    acc = _mm512_add_ps(acc, _mm512_mul_ps(a_odd, b_odd));
    return _mm512_add_ps(acc, _mm512_mul_ps(a_even, b_even));
#endif
}

/* 16 fp32 values rounded to bf16, to nearest even (vcvtneps2bf16; without AVX-512 BF16 the same rounding in integer
 * steps, a NaN kept a quiet NaN, as avx2_kernels.c rounds) */
static inline __m256i float_to_bf16(__m512 values) {
#ifdef __AVX512BF16__
    return (__m256i)_mm512_cvtneps_pbh(values);
#else
    const __m512i bits = _mm512_castps_si512(values);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
    const __m512i quiet = _mm512_or_si512(bits, _mm512_set1_epi32(0x00400000));
    const __mmask16 nan = _mm512_cmp_ps_mask(values, values, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_mask_mov_epi32(rounded, nan, quiet), 16));
#endif
}
#endif

/* whether this build has the int8 form (vpdpbusd and vpermb) */
#if defined(__AVX512VNNI__) && defined(__AVX512VBMI__)
#define TREESPEC_INT8 1
#else
#define TREESPEC_INT8 0
#endif

#if TREESPEC_INT8
/* acc + the four products of unsigned bytes u and signed bytes s per 32-bit lane (vpdpbusd), as
 * _mm512_dpbusd_epi32(acc, u, s). Written as one instruction on the accumulator's own register: gcc 12 compiles the
 * intrinsic in the kernels' row loops with two register copies of every accumulator per instruction. */
static inline __m512i dot_bytes(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}
#endif
#define X_UNSUPPORTED (-2)  /* a kernel's status for X_FP32_TO_INT8 where TREESPEC_INT8 is 0 */

enum {
    X_FP32_TO_BF16 = 0,  /* fp32 values, rounded to bf16 (to nearest even); bf16 dot products (vdpbf16ps) */
    X_BF16 = 1,          /* bf16 bits as they are; bf16 dot products */
    X_FP32_TO_INT8 = 2,  /* fp32 values, rounded to int8 with an fp32 scale per 32 inputs; int8 dot products (vpdpbusd) */
};

/* x [m, k] in int8 form: x[r, j] ~ scale[r, j / 32] * values[r, j], the scale amax / 127 of its 32 inputs */
typedef struct {
    int8_t *values;   /* [m, k] */
    float *scale;     /* [m, k / 32] */
    int32_t *sums16;  /* [m, k / 16]: the sum of each 16 inputs' values */
    int32_t *sums32;  /* [m, k / 32]: the sum of each 32 inputs' values */
    void *memory;     /* the one allocation behind them */
} Int8Rows;

/* the one allocation behind rows [m, k] (k a multiple of 32), its arrays laid out in it; 0, or -1 when out of memory */
static inline int int8_rows_alloc(int64_t m, int64_t k, Int8Rows *rows) {
    const size_t values = (size_t)(m * k), scales = (size_t)(m * (k / 32));
    char *memory = (char *)malloc(values + scales * (sizeof(float) + 3 * sizeof(int32_t)) + 64);
    if (memory == NULL) return -1;
    rows->memory = memory;
    rows->scale = (float *)memory;
    rows->sums16 = (int32_t *)(rows->scale + scales);
    rows->sums32 = rows->sums16 + 2 * scales;
    rows->values = (int8_t *)(rows->sums32 + scales);
    return 0;
}

/* x [m, k] as bf16 bits: x_in itself when x_is_bf16, else x_in's fp32 values rounded to bf16 (to nearest even) into
 * a new buffer left in *converted for the caller to free (k a multiple of 16). NULL when out of memory. The AVX-512
 * kernels' (int4_kernel.c); the AVX2 ones multiply the fp32 values of those roundings instead. */
uint16_t *treespec_bf16_rows(const void *x_in, int x_is_bf16, int64_t m, int64_t k, uint16_t **converted);

/* 1 where this build has the int8 form, else 0 */
int treespec_int8_supported(void);

/* fp32 x [m, k] (k a multiple of 32) in int8 form; returns 0, or -1 when out of memory. Free with free(rows->memory). */
int treespec_int8_rows(const float *x, int64_t m, int64_t k, Int8Rows *rows);

#endif
