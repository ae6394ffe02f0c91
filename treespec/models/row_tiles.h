/* The column-block loop both product kernels share (int4_kernel.c, int6_kernel.c): OpenMP threads split the n / 16
 * column blocks, never a sum, and each block's m rows go in tiles of ROW_TILE, the last tile of 1 .. ROW_TILE - 1
 * rows with its own compile-time size, so that every output element is computed by the same instruction sequence
 * whatever m, the tile it falls in and the thread count. TILE(rows) computes rows r0 .. r0 + rows - 1 of block b;
 * the threads are the caller's `threads`. */
#ifndef TREESPEC_ROW_TILES_H
#define TREESPEC_ROW_TILES_H

#ifndef ROW_TILE  /* a kernel file may set a smaller tile (1 .. 8) before including this */
#define ROW_TILE 8
#endif
#define ROW_TILE_MAX 8  /* the largest tile any kernel uses: the size of per-row register arrays */

#define EACH_ROW_TILE(blocks, m)                                            \
    _Pragma("omp parallel for num_threads(threads) schedule(static)")       \
    for (int64_t b = 0; b < (blocks); b++) {                                \
        int64_t r0 = 0;                                                     \
        for (; r0 + ROW_TILE <= (m); r0 += ROW_TILE) TILE(ROW_TILE);        \
        switch ((m) - r0) {                                                 \
            case 1: TILE(1); break;                                         \
            case 2: TILE(2); break;                                         \
            case 3: TILE(3); break;                                         \
            case 4: TILE(4); break;                                         \
            case 5: TILE(5); break;                                         \
            case 6: TILE(6); break;                                         \
            case 7: TILE(7); break;                                         \
            default: break;                                                 \
        }                                                                   \
    }

#endif
