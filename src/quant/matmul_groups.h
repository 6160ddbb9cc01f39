/* matmul_groups.h - many small matmuls (the experts of a mixture-of-experts layer) in few pool
 * dispatches.
 *
 * A group is one weight matrix and the activation rows that go through it: rows of a shared
 * float array picked by an index list (the rows routed to an expert), or a contiguous block.
 * nx_matmul_groups() computes y_g = x_g · W_gᵀ for every group:
 *  - groups with at least NX_GEMM_MIN_T rows and a GEMM kernel, and f32 weights, go through
 *    nx_matmul one by one (their rows gathered first when picked by index);
 *  - all other groups together: one parallel pass converts every row to its group's activation
 *    layout (nx_dot_plan_for), one parallel pass over (group, chunk of weight rows) items dots
 *    each weight row against tiles of up to NX_MATMUL_ROW_TILE rows - the same kernels, plans and
 *    tiling rule as nx_matmul.
 * So each weight matrix is streamed once per call whatever its row count, and every output row
 * is bit-identical to nx_matmul of that weight on that row alone (the kernels' results for a row
 * do not depend on the other rows of its tile, and the GEMM path equals the dot kernels).
 */
#ifndef NX_MATMUL_GROUPS_H
#define NX_MATMUL_GROUPS_H

#include "quant/matmul.h"

typedef struct nx_mm_group {
    nx_weight w;            /* {in, out} */
    const float *x;         /* activation rows of w.in floats, x_stride floats apart */
    int64_t x_stride;
    const int32_t *rows;    /* NULL: rows 0..T-1 of x; else the T row indices into x */
    int64_t T;
    float *y;               /* [T][w.out] */
} nx_mm_group;

/* Scratch owned by the caller, grown on demand. */
typedef struct nx_mm_groups_scratch {
    nx_matmul_scratch mm;   /* nx_matmul's, and the converted rows of the grouped pass */
    float *xf;              /* gathered float rows for nx_matmul groups */
    size_t xf_cap;          /* bytes */
    size_t *row_off;        /* [rows] byte offset of each converted row */
    int64_t *unit_start;    /* [groups + 1] first work item of each group */
    int64_t cap_rows, cap_groups;
} nx_mm_groups_scratch;

bool nx_matmul_groups(nx_pool *pool, nx_mm_groups_scratch *s, const nx_mm_group *g, int n, nx_err *err);
/* ... with the kernels of level isa (at most nx_cpu_isa()), as nx_matmul_isa. */
bool nx_matmul_groups_isa(nx_pool *pool, nx_mm_groups_scratch *s, const nx_mm_group *g, int n, nx_isa isa,
                          nx_err *err);
void nx_mm_groups_scratch_free(nx_mm_groups_scratch *s);
size_t nx_mm_groups_scratch_bytes(const nx_mm_groups_scratch *s);

#endif
