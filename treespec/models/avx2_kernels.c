/* treespec's 4-bit, 6-bit and 8-bit product kernels for x86 CPUs with AVX2, FMA and F16C but without AVX-512 BF16
 * (an AMD EPYC of the Zen 2/3 generations, Intel before Cooper Lake). They define what decoder_kernel.c and
 * treespec.models.int4_cpu call in int4_kernel.c, int6_kernel.c and int8_kernel.c (treespec_int8_rows,
 * treespec_int8_supported, treespec_int4_matmul, treespec_int6_matmul, treespec_int8_matmul), over the same weight
 * layouts and input formats, and keep the same
 * promise: every output element is computed by the same instruction sequence whatever the number of rows, the row
 * tile and the threads, so a tree pass equals a one-token pass bit for bit. treespec.models.int4_cpu compiles this
 * file instead of those two where the CPU lacks AVX-512 BF16.
 *
 * int8 inputs (X_FP32_TO_INT8), the fast form here: each row rounded per 32 inputs to int8 codes times an fp32 scale,
 * exactly as the AVX-512 form does. vpmaddubsw multiplies a column's unsigned codes by the signed inputs and adds
 * pairs into int16 lanes, which cannot overflow (4-bit: a lane sums a group's 16 products of at most 15 * 127, below
 * 2^15; 6-bit: 4 products of at most 63 * 127 before widening), and vpmaddwd by ones widens to int32: the same
 * exact integer dot products as vpdpbusd, then the same fp32 epilogue, so these outputs equal the AVX-512 form's bit
 * for bit.
 *
 * bf16 inputs (X_FP32_TO_BF16, X_BF16): the input rounded to bf16 as there, the codes turned into fp32 and
 * multiplied in fp32 with fused multiply-adds (no bf16 dot product here); exact products, fp32 sums in a fixed
 * order, but more instructions per weight than the int8 form.
 *
 * A column block's 16 columns are two vectors of 8 fp32 or int32 lanes ("halves"). Tiles hold 4 rows (AVX2 has 16
 * registers): the 4-bit int8 tile takes both halves from one decoding of the codes, the others run their group loop
 * once per half.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "this kernel needs AVX2, FMA and F16C"
#endif

#include "activations.h"
/* four rows a tile: both halves of a block from one decoding with the int16 sums in registers (8-row tiles, one
 * half at a time, measured 0.60 ms against 2 x 0.23 for 8 rows of a 12288 x 576 product, 2 threads, AMD EPYC AVX2) */
#define ROW_TILE 4
#include "row_tiles.h"

#define SLICE_BYTES 192  /* the 6-bit codes of 16 inputs of a column block (int6_kernel.c's layout) */

/* 8 fp16 values (scales, minimums) as fp32, exactly */
static inline __m256 half8_to_float(const uint16_t *values) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)values));
}

/* fp32 rounded to bf16 (to nearest even; NaN kept a quiet NaN), returned as the fp32 value it stands for */
static inline float bf16_value(float v) {
    uint32_t bits;
    __builtin_memcpy(&bits, &v, sizeof bits);
    if (isnan(v)) bits |= 0x00400000u;
    else bits += 0x7FFFu + ((bits >> 16) & 1u);
    bits &= 0xFFFF0000u;
    __builtin_memcpy(&v, &bits, sizeof v);
    return v;
}

/* x [m, k] in x_format X_FP32_TO_BF16 or X_BF16 as the fp32 values of its bf16 roundings (a new buffer) */
static float *bf16_values(const void *x_in, int x_format, int64_t m, int64_t k) {
    float *values = (float *)malloc((size_t)(m * k) * sizeof(float));
    if (values == NULL) return NULL;
    if (x_format == X_BF16) {
        for (int64_t i = 0; i < m * k; i++) {
            const uint32_t bits = (uint32_t)((const uint16_t *)x_in)[i] << 16;
            __builtin_memcpy(values + i, &bits, sizeof bits);
        }
    } else {
        for (int64_t i = 0; i < m * k; i++) values[i] = bf16_value(((const float *)x_in)[i]);
    }
    return values;
}

int treespec_int8_supported(void) { return 1; }

static inline int32_t sum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

static inline float max_ps(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}

int treespec_int8_rows(const float *x, int64_t m, int64_t k, Int8Rows *rows) {
    const int64_t blocks = k / 32;
    if (int8_rows_alloc(m, k, rows)) return -1;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t i = 0; i < m * blocks; i++) {
        const float *from = x + 32 * i;
        __m256 a[4];
        for (int j = 0; j < 4; j++) a[j] = _mm256_loadu_ps(from + 8 * j);
        const float amax = max_ps(_mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, a[0]), _mm256_andnot_ps(sign, a[1])),
                                                _mm256_max_ps(_mm256_andnot_ps(sign, a[2]), _mm256_andnot_ps(sign, a[3]))));
        const __m256 inverse = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        __m256i q[4];  /* to nearest even (the default rounding mode), as the AVX-512 form rounds */
        for (int j = 0; j < 4; j++) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(a[j], inverse));
        /* saturating packs (as vpmovsdb saturates), then the dwords back in input order */
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(rows->values + 32 * i), _mm256_permutevar8x32_epi32(bytes, order));
        rows->scale[i] = amax / 127.0f;
        rows->sums16[2 * i] = sum_epi32(_mm256_add_epi32(q[0], q[1]));
        rows->sums16[2 * i + 1] = sum_epi32(_mm256_add_epi32(q[2], q[3]));
        rows->sums32[i] = rows->sums16[2 * i] + rows->sums16[2 * i + 1];
    }
    return 0;
}

/* ---- 4-bit weights (int4_kernel.c's layout: codes [N / 16, K / 32, 16, 16], fp16 scale and minimum per group) ---- */

/* bf16 inputs: rows r0 .. r0 + rows - 1 of column block b, half h (columns 16 b + 8 h .. + 7). The 16 bytes of pair
 * p, reordered even bytes first (input 2 p) then odd (input 2 p + 1), give each column's two codes. */
static inline __attribute__((always_inline)) void tile4_bf16(
        const int rows, const float *x, const float *group_sums, const uint8_t *codes, const uint16_t *scale,
        const uint16_t *minimum, float *out, const int64_t k, const int64_t ldc, const int64_t b, const int64_t r0,
        const __m128i evens_first) {
    const int64_t groups = k / 32;
    const __m256i nibble = _mm256_set1_epi32(0x0F);
    for (int h = 0; h < 2; h++) {
        __m256 total[ROW_TILE_MAX];
        for (int r = 0; r < rows; r++) total[r] = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            __m256 dot[ROW_TILE_MAX];
            for (int r = 0; r < rows; r++) dot[r] = _mm256_setzero_ps();
            const uint8_t *group_codes = codes + ((b * groups + g) * 16) * 16;
            for (int p = 0; p < 16; p++) {
                const __m128i bytes = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(group_codes + 16 * p)),
                                                       evens_first);
                __m256i even = _mm256_cvtepu8_epi32(bytes), odd = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
                if (h) {
                    even = _mm256_srli_epi32(even, 4);
                    odd = _mm256_srli_epi32(odd, 4);
                }
                const __m256 w0 = _mm256_cvtepi32_ps(_mm256_and_si256(even, nibble));
                const __m256 w1 = _mm256_cvtepi32_ps(_mm256_and_si256(odd, nibble));
                for (int r = 0; r < rows; r++) {
                    const float *at = x + (r0 + r) * k + 32 * g + 2 * p;
                    dot[r] = _mm256_fmadd_ps(w0, _mm256_broadcast_ss(at), dot[r]);
                    dot[r] = _mm256_fmadd_ps(w1, _mm256_broadcast_ss(at + 1), dot[r]);
                }
            }
            const __m256 s = half8_to_float(scale + (b * groups + g) * 16 + 8 * h);
            const __m256 mn = half8_to_float(minimum + (b * groups + g) * 16 + 8 * h);
            for (int r = 0; r < rows; r++) {
                total[r] = _mm256_fmadd_ps(dot[r], s, total[r]);
                total[r] = _mm256_fmadd_ps(mn, _mm256_set1_ps(group_sums[(r0 + r) * groups + g]), total[r]);
            }
        }
        for (int r = 0; r < rows; r++) _mm256_storeu_ps(out + (r0 + r) * ldc + 16 * b + 8 * h, total[r]);
    }
}

/* int8 inputs: the codes of two pairs (inputs 32 g + 4 i .. + 3, 32 bytes) in vpmaddubsw's lane order, column c's
 * four codes in dword c: a qword permutation brings each 128-bit lane its columns' bytes, a byte shuffle orders them;
 * low nibbles are columns 0..7 (half 0), high nibbles 8..15 (half 1), both from one decoding. */
static inline __attribute__((always_inline)) __m256i ordered_pairs(const uint8_t *bytes, const __m256i lanes) {
    return _mm256_shuffle_epi8(_mm256_permute4x64_epi64(_mm256_loadu_si256((const __m256i *)bytes), 0xD8), lanes);
}

/* row r's running total of one half, given the group's int16 pair sums: the AVX-512 form's fp32 epilogue */
static inline __attribute__((always_inline)) __m256 int4_epilogue(
        const __m256i pairs, const Int8Rows *x, const int64_t at, const __m256 s, const __m256 mn, const __m256 total) {
    const __m256i dot = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    const __m256 sums = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), s, _mm256_mul_ps(mn, _mm256_set1_ps((float)x->sums32[at])));
    return _mm256_fmadd_ps(sums, _mm256_set1_ps(x->scale[at]), total);
}

static inline __attribute__((always_inline)) void tile4_int8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, const uint16_t *minimum,
        float *out, const int64_t k, const int64_t ldc, const int64_t b, const int64_t r0, const __m256i lanes) {
    const int64_t groups = k / 32;
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    __m256 total[ROW_TILE_MAX][2];
    for (int r = 0; r < rows; r++) total[r][0] = total[r][1] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        __m256i pairs[ROW_TILE_MAX][2];  /* int16: column c's sums of products at inputs 4 i + {0, 1} and {2, 3} */
        for (int r = 0; r < rows; r++) pairs[r][0] = pairs[r][1] = _mm256_setzero_si256();
        const uint8_t *group_codes = codes + ((b * groups + g) * 16) * 16;
        for (int i = 0; i < 8; i++) {
            const __m256i packed = ordered_pairs(group_codes + 32 * i, lanes);
            const __m256i low = _mm256_and_si256(packed, nibble);
            const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), nibble);
            for (int r = 0; r < rows; r++) {
                const __m256i four = _mm256_set1_epi32(*(const int32_t *)(x->values + (r0 + r) * k + 32 * g + 4 * i));
                pairs[r][0] = _mm256_add_epi16(pairs[r][0], _mm256_maddubs_epi16(low, four));
                pairs[r][1] = _mm256_add_epi16(pairs[r][1], _mm256_maddubs_epi16(high, four));
            }
        }
        for (int h = 0; h < 2; h++) {
            const __m256 s = half8_to_float(scale + (b * groups + g) * 16 + 8 * h);
            const __m256 mn = half8_to_float(minimum + (b * groups + g) * 16 + 8 * h);
            for (int r = 0; r < rows; r++)
                total[r][h] = int4_epilogue(pairs[r][h], x, (r0 + r) * groups + g, s, mn, total[r][h]);
        }
    }
    for (int r = 0; r < rows; r++)
        for (int h = 0; h < 2; h++) _mm256_storeu_ps(out + (r0 + r) * ldc + 16 * b + 8 * h, total[r][h]);
}

/* x: [m, k] in x_format (activations.h); out: fp32, row r's n outputs at out + r * ldc (n a multiple of 16, k of 32);
 * threads: OpenMP threads over column blocks. Returns 0, or -1 when out of memory. */
int treespec_int4_matmul(const void *x_in, int x_format, const uint8_t *codes, const uint16_t *scale,
                         const uint16_t *minimum, float *out, int64_t m, int64_t k, int64_t n, int64_t ldc,
                         int threads) {
    const int64_t groups = k / 32, blocks = n / 16;
    if (x_format == X_FP32_TO_INT8) {
        Int8Rows rows;
        if (treespec_int8_rows((const float *)x_in, m, k, &rows)) return -1;
        const Int8Rows *x = &rows;
        /* per 128-bit lane after the qword permutation (bytes 0..7: pair 2 i, 8..15: pair 2 i + 1, four columns):
         * byte 4 c + t <- column c's code at input t */
        uint8_t positions[32];
        for (int o = 0; o < 32; o++) {
            const int c = (o % 16) / 4, t = o % 4;
            positions[o] = (uint8_t)((t / 2) * 8 + 2 * c + t % 2);
        }
        const __m256i lanes = _mm256_loadu_si256((const __m256i *)positions);
#define TILE(rows) tile4_int8(rows, x, codes, scale, minimum, out, k, ldc, b, r0, lanes)
        EACH_ROW_TILE(blocks, m)
#undef TILE
        free(rows.memory);
        return 0;
    }
    float *x = bf16_values(x_in, x_format, m, k);
    float *group_sums = (float *)malloc((size_t)(m * groups) * sizeof(float));
    if (x == NULL || group_sums == NULL) {
        free(x);
        free(group_sums);
        return -1;
    }
    for (int64_t r = 0; r < m; r++) {  /* the sum of each row's inputs per group, in a fixed order */
        for (int64_t g = 0; g < groups; g++) {
            float sum = 0.0f;
            for (int j = 0; j < 32; j++) sum += x[r * k + 32 * g + j];
            group_sums[r * groups + g] = sum;
        }
    }
    const __m128i evens_first = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
#define TILE(rows) tile4_bf16(rows, x, group_sums, codes, scale, minimum, out, k, ldc, b, r0, evens_first)
    EACH_ROW_TILE(blocks, m)
#undef TILE
    free(group_sums);
    free(x);
    return 0;
}

/* ---- 6-bit weights (int6_kernel.c's layout: codes [N / 16, K / 16, 192] in lane order, fp16 scale per group) ---- */

/* half h of slice `slice`: four vectors, byte 4 c + t of weights[v] column 8 h + c's code at input 4 v + t */
static inline __attribute__((always_inline)) void unpack_half(const uint8_t *slice, int h, __m256i weights[4]) {
    const __m256i nibble = _mm256_set1_epi8(0x0F), top = _mm256_set1_epi8(0x30);
    const __m256i first = _mm256_loadu_si256((const __m256i *)(slice + 32 * h));
    const __m256i second = _mm256_loadu_si256((const __m256i *)(slice + 64 + 32 * h));
    const __m256i plane = _mm256_loadu_si256((const __m256i *)(slice + 128 + 32 * h));
    weights[0] = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(plane, 4), top), _mm256_and_si256(first, nibble));
    weights[1] = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi16(plane, 2), top),
                                 _mm256_and_si256(_mm256_srli_epi16(first, 4), nibble));
    weights[2] = _mm256_or_si256(_mm256_and_si256(plane, top), _mm256_and_si256(second, nibble));
    weights[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(plane, 2), top),
                                 _mm256_and_si256(_mm256_srli_epi16(second, 4), nibble));
}

static inline __attribute__((always_inline)) void tile6_bf16(
        const int rows, const float *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t group, const int64_t ldc, const int64_t b, const int64_t r0) {
    const int64_t groups = k / group, slices = group / 16;
    const __m256i byte = _mm256_set1_epi32(0xFF), centre = _mm256_set1_epi32(32);
    for (int h = 0; h < 2; h++) {
        __m256 total[ROW_TILE_MAX];
        for (int r = 0; r < rows; r++) total[r] = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            __m256 dot[ROW_TILE_MAX];
            for (int r = 0; r < rows; r++) dot[r] = _mm256_setzero_ps();
            for (int64_t s = 0; s < slices; s++) {
                __m256i weights[4];
                unpack_half(codes + (b * (k / 16) + g * slices + s) * SLICE_BYTES, h, weights);
                for (int v = 0; v < 4; v++) {
                    for (int t = 0; t < 4; t++) {
                        const __m256 w = _mm256_cvtepi32_ps(_mm256_sub_epi32(
                            _mm256_and_si256(_mm256_srli_epi32(weights[v], 8 * t), byte), centre));
                        const int64_t input = group * g + 16 * s + 4 * v + t;
                        for (int r = 0; r < rows; r++)
                            dot[r] = _mm256_fmadd_ps(w, _mm256_broadcast_ss(x + (r0 + r) * k + input), dot[r]);
                    }
                }
            }
            const __m256 scales = half8_to_float(scale + (b * groups + g) * 16 + 8 * h);
            for (int r = 0; r < rows; r++) total[r] = _mm256_fmadd_ps(dot[r], scales, total[r]);
        }
        for (int r = 0; r < rows; r++) _mm256_storeu_ps(out + (r0 + r) * ldc + 16 * b + 8 * h, total[r]);
    }
}

/* int8 inputs: each v's products by vpmaddubsw (int16 pair sums of at most 2 * 63 * 127), two v's added in int16
 * and widened to int32 by vpmaddwd, then int6_kernel.c's epilogue */
static inline __attribute__((always_inline)) void tile6_int8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t group, const int64_t ldc, const int64_t b, const int64_t r0) {
    const int64_t groups = k / group, slices = group / 16, per_scale = 32 / group;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; h++) {
        __m256 total[ROW_TILE_MAX];
        for (int r = 0; r < rows; r++) total[r] = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            __m256i dot[ROW_TILE_MAX];
            for (int r = 0; r < rows; r++) dot[r] = _mm256_setzero_si256();
            for (int64_t s = 0; s < slices; s++) {
                __m256i weights[4];
                unpack_half(codes + (b * (k / 16) + g * slices + s) * SLICE_BYTES, h, weights);
                for (int r = 0; r < rows; r++) {
                    const int8_t *at = x->values + (r0 + r) * k + group * g + 16 * s;
                    for (int v = 0; v < 4; v += 2) {
                        const __m256i a = _mm256_maddubs_epi16(weights[v], _mm256_set1_epi32(*(const int32_t *)(at + 4 * v)));
                        const __m256i c = _mm256_maddubs_epi16(weights[v + 1],
                                                               _mm256_set1_epi32(*(const int32_t *)(at + 4 * v + 4)));
                        dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(_mm256_add_epi16(a, c), ones));
                    }
                }
            }
            const __m256 scales = half8_to_float(scale + (b * groups + g) * 16 + 8 * h);
            for (int r = 0; r < rows; r++) {
                const int32_t sum = group == 16 ? x->sums16[(r0 + r) * groups + g] : x->sums32[(r0 + r) * groups + g];
                const __m256i centred = _mm256_sub_epi32(dot[r], _mm256_set1_epi32(32 * sum));
                const float x_scale = x->scale[(r0 + r) * (k / 32) + g / per_scale];
                total[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(centred), scales), _mm256_set1_ps(x_scale),
                                           total[r]);
            }
        }
        for (int r = 0; r < rows; r++) _mm256_storeu_ps(out + (r0 + r) * ldc + 16 * b + 8 * h, total[r]);
    }
}

/* x: [m, k] in x_format (activations.h); out: fp32, row r's n outputs at out + r * ldc (n a multiple of 16, k of
 * 32, group 16 or 32); threads: OpenMP threads over column blocks. Returns 0, or -1 when out of memory. */
int treespec_int6_matmul(const void *x_in, int x_format, const uint8_t *codes, const uint16_t *scale, float *out,
                         int64_t m, int64_t k, int64_t n, int64_t group, int64_t ldc, int threads) {
    const int64_t blocks = n / 16;
    if (x_format == X_FP32_TO_INT8) {
        Int8Rows rows;
        if (treespec_int8_rows((const float *)x_in, m, k, &rows)) return -1;
        const Int8Rows *x = &rows;
#define TILE(rows) tile6_int8(rows, x, codes, scale, out, k, group, ldc, b, r0)
        EACH_ROW_TILE(blocks, m)
#undef TILE
        free(rows.memory);
        return 0;
    }
    float *x = bf16_values(x_in, x_format, m, k);
    if (x == NULL) return -1;
#define TILE(rows) tile6_bf16(rows, x, codes, scale, out, k, group, ldc, b, r0)
    EACH_ROW_TILE(blocks, m)
#undef TILE
    free(x);
    return 0;
}

/* ---- 8-bit weights (int8_kernel.c's layout: codes + 128 [N / 16, K / 32, 8, 64], fp16 scale per group) ---- */

/* int8 inputs only. Half h of quad i's 64 bytes is its 32 bytes (columns 8 h .. + 7, four codes each), flipped back
 * to the signed codes (xor 0x80); vpsignb moves each code's sign onto the input and vpmaddubsw multiplies |code| (at
 * most 128, read unsigned) by it: int16 pair sums of at most 2 * 128 * 127, no saturation (the inputs are -127..127);
 * vpmaddwd widens them to int32. The same exact integer dot products as the AVX-512 form's, then its epilogue. */
static inline __attribute__((always_inline)) void tile8_int8(
        const int rows, const Int8Rows *x, const uint8_t *codes, const uint16_t *scale, float *out, const int64_t k,
        const int64_t ldc, const int64_t b, const int64_t r0) {
    const int64_t groups = k / 32;
    const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8((char)0x80);
    for (int h = 0; h < 2; h++) {
        __m256 total[ROW_TILE_MAX];
        for (int r = 0; r < rows; r++) total[r] = _mm256_setzero_ps();
        for (int64_t g = 0; g < groups; g++) {
            __m256i dot[ROW_TILE_MAX];
            for (int r = 0; r < rows; r++) dot[r] = _mm256_setzero_si256();
            const uint8_t *group_codes = codes + (b * groups + g) * 512 + 32 * h;
            for (int i = 0; i < 8; i++) {
                const __m256i signed_codes = _mm256_xor_si256(
                    _mm256_loadu_si256((const __m256i *)(group_codes + 64 * i)), flip);
                const __m256i magnitude = _mm256_abs_epi8(signed_codes);
                for (int r = 0; r < rows; r++) {
                    const __m256i four = _mm256_set1_epi32(*(const int32_t *)(x->values + (r0 + r) * k + 32 * g + 4 * i));
                    const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(four, signed_codes));
                    dot[r] = _mm256_add_epi32(dot[r], _mm256_madd_epi16(pairs, ones));
                }
            }
            const __m256 scales = half8_to_float(scale + (b * groups + g) * 16 + 8 * h);
            for (int r = 0; r < rows; r++) {
                const int64_t at = (r0 + r) * groups + g;
                total[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot[r]), scales),
                                           _mm256_set1_ps(x->scale[at]), total[r]);
            }
        }
        for (int r = 0; r < rows; r++) _mm256_storeu_ps(out + (r0 + r) * ldc + 16 * b + 8 * h, total[r]);
    }
}

/* int8_kernel.c's treespec_int8_matmul: x fp32 [m, k] (rounded to int8 here); out: fp32, row r's n outputs at
 * out + r * ldc (n a multiple of 16, k of 32). Returns 0, or -1 when out of memory. */
int treespec_int8_matmul(const float *x_in, const uint8_t *codes, const uint16_t *scale, float *out, int64_t m,
                         int64_t k, int64_t n, int64_t ldc, int threads) {
    Int8Rows rows;
    if (treespec_int8_rows(x_in, m, k, &rows)) return -1;
    const Int8Rows *x = &rows;
    const int64_t blocks = n / 16;
#define TILE(rows) tile8_int8(rows, x, codes, scale, out, k, ldc, b, r0)
    EACH_ROW_TILE(blocks, m)
#undef TILE
    free(rows.memory);
    return 0;
}
