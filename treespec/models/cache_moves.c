/* treespec's in-place move of KV-cache slots, for treespec.decode.cache.commit: one C call for every layer's keys and
 * values instead of a gather and a scatter per buffer (120 torch calls a step for the default target and its head).
 *
 * buffers[i]: [rows, heads, capacity[i], slot_bytes] (contiguous); row b's slot source[b, j] is copied onto slot
 * target[b, j] for j = 0 .. count - 1 in ascending j, in every buffer and head. The caller's moves have every target at
 * or below its source, and sources and targets both ascending, so no slot is overwritten before it is read: the
 * result is the gather-then-scatter's. Entries whose source is their target are skipped. Built with the kernels
 * (treespec.models.int4_cpu), for any instruction set.
 */
#include <stdint.h>
#include <string.h>

void treespec_move_slots(char *const *buffers, const int64_t *capacity, int64_t n, int64_t rows, int64_t heads,
                         int64_t slot_bytes, const int64_t *source, const int64_t *target, int64_t count) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t b = 0; b < rows; b++)
            for (int64_t h = 0; h < heads; h++) {
                char *base = buffers[i] + (b * heads + h) * capacity[i] * slot_bytes;
                for (int64_t j = 0; j < count; j++) {
                    const int64_t from = source[b * count + j], to = target[b * count + j];
                    if (from != to) memcpy(base + to * slot_bytes, base + from * slot_bytes, (size_t)slot_bytes);
                }
            }
}
