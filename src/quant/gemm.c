/* gemm.c - work split and blocking of the GEMM path (see gemm.h); the arithmetic is in the
 * per-ISA micro-kernel files (gemm_avx512.c).
 *
 * Blocking.  The activation rows are cut into blocks of TB rows sized to stay in a core's L2
 * (ACT_BLOCK_BYTES); the weight rows into chunks of OB rows.  An item = (activation block,
 * weight chunk): for each panel of mr weight rows of the chunk, pack the panel (it then stays in
 * L1 while) every tile of nr activation rows of the block goes by.  Items are numbered
 * activation-block-major, so the threads work on the same activation block at the same time and
 * each weight matrix is streamed T/TB times (from L3 after the first pass).
 */
#include "quant/gemm.h"

#include <stdatomic.h>
#include <string.h>

/* Activation bytes per block: a good part of a 2 MB L2, the rest for the weight chunk. */
#define ACT_BLOCK_BYTES (768u * 1024u)
/* Weight rows per item (a multiple of every kernel's mr). */
#define OB 64

const nx_gemm_ops *nx_gemm_ops_for(uint32_t type, nx_isa isa) {
    const nx_type_traits *t = nx_type_get(type);
    if (!t) return NULL;
    for (int i = NX_MIN((int)isa, NX_ISA_COUNT - 1); i >= 0; i--)
        if (t->gemm[i]) return t->gemm[i];
    return NULL;
}

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static size_t act_bytes(const nx_gemm_ops *ops, int64_t n, int64_t T) {
    return ops->act_row_bytes ? round64(ops->act_row_bytes(n) * (size_t)T) : 0;
}

size_t nx_gemm_scratch_bytes(const nx_gemm_ops *ops, int64_t n, int64_t T, int n_threads) {
    return act_bytes(ops, n, T) + (size_t)n_threads * round64(ops->panel_bytes(n));
}

struct pack_ctx {
    const nx_gemm_ops *ops;
    const char *xq;
    size_t xrow, prow;
    char *xp;
    int64_t n;
};

static void pack_rows(void *c, int64_t begin, int64_t end) {
    const struct pack_ctx *pc = c;
    for (int64_t t = begin; t < end; t++)
        pc->ops->pack_act(pc->xq + (size_t)t * pc->xrow, pc->xp + (size_t)t * pc->prow, pc->n);
}

struct gemm_ctx {
    const nx_gemm_ops *ops;
    const nx_weight *w;
    const char *x; /* activation rows (packed or as converted) */
    size_t xrow;
    int64_t T, TB, n_ob, n_items;
    float *y;
    char *panels;  /* one panel per thread */
    size_t panel_stride;
    atomic_llong next;
};

static void run_item(const struct gemm_ctx *g, char *panel, int64_t item) {
    const nx_gemm_ops *ops = g->ops;
    const nx_weight *w = g->w;
    const int mr = ops->mr, nr = ops->nr;
    const int64_t t_begin = item / g->n_ob * g->TB, t_end = NX_MIN(g->T, t_begin + g->TB);
    const int64_t o_begin = item % g->n_ob * OB, o_end = NX_MIN(w->out, o_begin + OB);
    float out[16 * 16];
    const void *xr[16];
    for (int64_t o0 = o_begin; o0 < o_end; o0 += mr) {
        const int rows = (int)NX_MIN((int64_t)mr, o_end - o0);
        ops->pack_panel((const char *)w->data + (size_t)o0 * w->row_bytes, w->row_bytes, rows, w->in, panel);
        for (int64_t t0 = t_begin; t0 < t_end; t0 += nr) {
            const int nt = (int)NX_MIN((int64_t)nr, t_end - t0);
            /* a partial tile repeats its first row; those results are not stored */
            for (int r = 0; r < nr; r++) xr[r] = g->x + (size_t)(t0 + (r < nt ? r : 0)) * g->xrow;
            ops->tile(w->in, panel, xr, out);
            for (int r = 0; r < nt; r++)
                for (int m = 0; m < rows; m++) g->y[(t0 + r) * w->out + o0 + m] = out[r * mr + m];
        }
    }
}

static void gemm_task(void *c, int ith, int nth) {
    (void)nth;
    struct gemm_ctx *g = c;
    char *panel = g->panels + (size_t)ith * g->panel_stride;
    for (;;) {
        const int64_t item = atomic_fetch_add_explicit(&g->next, 1, memory_order_relaxed);
        if (item >= g->n_items) break;
        run_item(g, panel, item);
    }
}

void nx_gemm(nx_pool *pool, const nx_gemm_ops *ops, const nx_weight *w, const void *xq, size_t xrow, int64_t T,
             float *y, void *scratch) {
    const int nth = nx_pool_size(pool);
    const char *x = xq;
    char *rest = scratch;
    if (ops->act_row_bytes) {
        const size_t prow = ops->act_row_bytes(w->in);
        struct pack_ctx pc = {ops, xq, xrow, prow, scratch, w->in};
        nx_parallel_for(pool, T, 16, pack_rows, &pc);
        x = scratch;
        xrow = prow;
        rest += act_bytes(ops, w->in, T);
    }
    int64_t TB = (int64_t)(ACT_BLOCK_BYTES / xrow) / ops->nr * ops->nr;
    if (TB < ops->nr) TB = ops->nr;
    /* spread a small batch over enough items to keep every thread busy */
    const int64_t n_ob = (w->out + OB - 1) / OB, n_tb = (T + TB - 1) / TB;
    struct gemm_ctx g = {ops, w, x, xrow, T, TB, n_ob, n_ob * n_tb, y, rest, round64(ops->panel_bytes(w->in)), 0};
    atomic_init(&g.next, 0);
    if (g.n_items == 1 || nth == 1) gemm_task(&g, 0, 1);
    else nx_pool_run(pool, gemm_task, &g);
}
