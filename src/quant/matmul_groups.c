/* matmul_groups.c - many small matmuls in few pool dispatches (see matmul_groups.h). */
#include "quant/matmul_groups.h"

#include <stdlib.h>
#include <string.h>

#include "quant/gemm.h"

/* Weight rows per work item of the grouped pass (as nx_matmul's OUT_BLOCK / OUT_GRAIN). */
#define UNIT_ROWS 16
/* Earlier groups searched for the same activation rows (the groups that share rows come one
 * after the other: projections of one input, an expert's gate and up). */
#define DEDUP_WINDOW 8
/* Below this many converted elements the conversion runs on the calling thread: a pool
 * hand-off costs a few microseconds, comparable to converting
 * 16 K floats. */
#define CONVERT_INLINE_ELEMS 16384

void nx_mm_groups_scratch_free(nx_mm_groups_scratch *s) {
    if (!s) return;
    nx_matmul_scratch_free(&s->mm);
    nx_free_aligned(s->xf);
    free(s->row_off);
    free(s->unit_start);
    memset(s, 0, sizeof *s);
}

size_t nx_mm_groups_scratch_bytes(const nx_mm_groups_scratch *s) {
    return s->mm.cap + s->xf_cap + (size_t)s->cap_rows * (sizeof(size_t) + sizeof(int32_t)) +
           (size_t)s->cap_groups * (sizeof(int64_t) + sizeof(nx_dot_plan));
}

/* Per-call tables, kept in the scratch (grown only). */
typedef struct tables {
    size_t *row_off;     /* [rows] */
    int32_t *row_group;  /* [rows] */
    int64_t *unit_start; /* [groups + 1] */
    nx_dot_plan *plan;   /* [groups] */
    int64_t *row_start;  /* [groups + 1] first converted row of each group (shared by groups that
                          * read the same rows) */
} tables;

static bool reserve_tables(nx_mm_groups_scratch *s, int64_t rows, int64_t groups, tables *t, nx_err *err) {
    if (rows > s->cap_rows) {
        free(s->row_off);
        s->row_off = nx_malloc((size_t)rows * (sizeof(size_t) + sizeof(int32_t)), "grouped matmul rows", err);
        s->cap_rows = s->row_off ? rows : 0;
        if (!s->row_off) return false;
    }
    if (groups > s->cap_groups) {
        free(s->unit_start);
        s->unit_start = nx_malloc((size_t)(groups + 1) * (2 * sizeof(int64_t) + sizeof(nx_dot_plan)),
                                  "grouped matmul groups", err);
        s->cap_groups = s->unit_start ? groups : 0;
        if (!s->unit_start) return false;
    }
    t->row_off = s->row_off;
    t->row_group = (int32_t *)(s->row_off + s->cap_rows);
    t->unit_start = s->unit_start;
    t->row_start = s->unit_start + (s->cap_groups + 1);
    t->plan = (nx_dot_plan *)(t->row_start + (s->cap_groups + 1));
    return true;
}

static bool reserve_bytes(nx_matmul_scratch *m, size_t bytes, nx_err *err) {
    if (m->cap >= bytes) return true;
    size_t cap = bytes + bytes / 2;
    void *p = nx_alloc_aligned(cap, "grouped matmul activations", err);
    if (!p) return false;
    nx_free_aligned(m->buf);
    m->buf = p;
    m->cap = cap;
    return true;
}

static const float *group_row(const nx_mm_group *g, int64_t r) {
    return g->x + (size_t)(g->rows ? g->rows[r] : r) * (size_t)g->x_stride;
}

/* Whether groups a and b read the same float rows in the same order (same array, stride, row
 * count and row indices) and convert them the same way: then b reads a's converted rows. */
static bool same_rows(const nx_mm_group *a, const nx_dot_plan *pa, const nx_mm_group *b, const nx_dot_plan *pb) {
    if (a->x != b->x || a->x_stride != b->x_stride || a->T != b->T || a->w.in != b->w.in) return false;
    if (pa->act_as_is != pb->act_as_is || pa->act_from_float != pb->act_from_float ||
        pa->act_row_bytes != pb->act_row_bytes)
        return false;
    for (int64_t r = 0; r < a->T; r++)
        if ((a->rows ? a->rows[r] : r) != (b->rows ? b->rows[r] : r)) return false;
    return true;
}

/* nx_matmul for one group whose rows may be picked by index (gathered into s->xf first). */
static bool one_group(nx_pool *pool, nx_mm_groups_scratch *s, const nx_mm_group *g, nx_isa isa, nx_err *err) {
    const float *x = g->x;
    if (g->rows || g->x_stride != g->w.in) {
        const size_t bytes = (size_t)g->T * (size_t)g->w.in * sizeof(float);
        if (bytes > s->xf_cap) {
            nx_free_aligned(s->xf);
            s->xf = nx_alloc_aligned(bytes + bytes / 2, "grouped matmul rows", err);
            s->xf_cap = s->xf ? bytes + bytes / 2 : 0;
            if (!s->xf) return false;
        }
        for (int64_t r = 0; r < g->T; r++) memcpy(s->xf + r * g->w.in, group_row(g, r), (size_t)g->w.in * sizeof(float));
        x = s->xf;
    }
    return nx_matmul_isa(pool, &s->mm, &g->w, x, g->T, g->y, isa, err);
}

typedef struct pass {
    const nx_mm_group *g;
    const int *idx;      /* the grouped-pass groups, indices into g */
    int n;
    tables t;
    char *conv;
    int64_t n_units;
} pass;

static void convert_rows(void *p, int64_t begin, int64_t end) {
    const pass *ps = p;
    for (int64_t i = begin; i < end; i++) {
        const int gi = ps->t.row_group[i];
        const nx_mm_group *g = &ps->g[ps->idx[gi]];
        const float *src = group_row(g, i - ps->t.row_start[gi]);
        const nx_dot_plan *pl = &ps->t.plan[gi];
        if (pl->act_as_is) memcpy(ps->conv + ps->t.row_off[i], src, (size_t)g->w.in * sizeof(float));
        else pl->act_from_float(src, ps->conv + ps->t.row_off[i], g->w.in);
    }
}

static void dot_units(void *p, int64_t begin, int64_t end) {
    const pass *ps = p;
    float tmp[NX_MATMUL_ROW_TILE];
    int gi = 0;
    for (int64_t u = begin; u < end; u++) {
        while (ps->t.unit_start[gi + 1] <= u) gi++;
        const nx_mm_group *g = &ps->g[ps->idx[gi]];
        const nx_weight *w = &g->w;
        const nx_dot_plan *pl = &ps->t.plan[gi];
        const int64_t o0 = (u - ps->t.unit_start[gi]) * UNIT_ROWS, o1 = NX_MIN(w->out, o0 + UNIT_ROWS);
        const int64_t r0 = ps->t.row_start[gi];
        const size_t xrow = pl->act_as_is ? (size_t)w->in * sizeof(float) : pl->act_row_bytes;
        if (g->T == 1 && pl->dot_w) { /* one activation row: the unit's weight rows in one call */
            pl->dot_w(w->in, g->y + o0, (const char *)w->data + (size_t)o0 * w->row_bytes, w->row_bytes,
                      ps->conv + ps->t.row_off[r0], (int)(o1 - o0));
            continue;
        }
        for (int64_t t0 = 0; t0 < g->T; t0 += NX_MATMUL_ROW_TILE) {
            const int nr = (int)NX_MIN((int64_t)NX_MATMUL_ROW_TILE, g->T - t0);
            const char *xt = ps->conv + ps->t.row_off[r0 + t0];
            if (pl->dot_tile) { /* the unit's weight rows against the tile in one call */
                pl->dot_tile(w->in, g->y + t0 * w->out + o0, (size_t)w->out,
                             (const char *)w->data + (size_t)o0 * w->row_bytes, w->row_bytes, (int)(o1 - o0), xt, xrow,
                             nr);
                continue;
            }
            for (int64_t o = o0; o < o1; o++) {
                pl->dot(w->in, tmp, (const char *)w->data + (size_t)o * w->row_bytes, xt, xrow, nr);
                for (int r = 0; r < nr; r++) g->y[(t0 + r) * w->out + o] = tmp[r];
            }
        }
    }
}

bool nx_matmul_groups(nx_pool *pool, nx_mm_groups_scratch *s, const nx_mm_group *g, int n, nx_err *err) {
    return nx_matmul_groups_isa(pool, s, g, n, nx_cpu_isa(), err);
}

bool nx_matmul_groups_isa(nx_pool *pool, nx_mm_groups_scratch *s, const nx_mm_group *g, int n, nx_isa isa,
                          nx_err *err) {
    if (isa > nx_cpu_isa()) isa = nx_cpu_isa();
    int n_small = 0;
    int64_t rows = 0;
    /* groups for nx_matmul first (they use the scratch one after the other) */
    for (int i = 0; i < n; i++) {
        if (g[i].T <= 0) continue;
        const bool f32_kernel = g[i].w.type == NX_TYPE_F32 && isa >= NX_ISA_AVX512;
        const bool gemm = g[i].T >= NX_GEMM_MIN_T && nx_gemm_ops_for(g[i].w.type, isa) != NULL;
        if (f32_kernel || gemm) {
            if (!one_group(pool, s, &g[i], isa, err)) return false;
        } else {
            n_small++;
            rows += g[i].T;
        }
    }
    if (n_small == 0) return true;

    tables t;
    if (!reserve_tables(s, rows, n_small, &t, err)) return false;
    int idx_stack[64];
    int *idx = n_small <= 64 ? idx_stack : nx_malloc((size_t)n_small * sizeof(int), "grouped matmul", err);
    if (!idx) return false;
    bool ok = false;
    int k = 0;
    size_t off = 0;
    int64_t r = 0, units = 0, conv_elems = 0;
    for (int i = 0; i < n; i++) {
        if (g[i].T <= 0) continue;
        const bool f32_kernel = g[i].w.type == NX_TYPE_F32 && isa >= NX_ISA_AVX512;
        const bool gemm = g[i].T >= NX_GEMM_MIN_T && nx_gemm_ops_for(g[i].w.type, isa) != NULL;
        if (f32_kernel || gemm) continue;
        if (!nx_dot_plan_for(g[i].w.type, isa, g[i].w.in, &t.plan[k], err)) {
            nx_fail_prefix(err, "grouped matmul");
            goto done;
        }
        const size_t xrow = t.plan[k].act_as_is ? (size_t)g[i].w.in * sizeof(float) : t.plan[k].act_row_bytes;
        idx[k] = i;
        t.unit_start[k] = units;
        units += (g[i].w.out + UNIT_ROWS - 1) / UNIT_ROWS;
        /* rows converted for an earlier group of this pass are read from there (the projections
         * of one input, an expert's gate and up, a decoded token's experts): each distinct row
         * list is converted once */
        int same = -1;
        for (int j = k - 1; j >= 0 && j >= k - DEDUP_WINDOW && same < 0; j--)
            if (same_rows(&g[idx[j]], &t.plan[j], &g[i], &t.plan[k])) same = j;
        if (same >= 0) {
            t.row_start[k] = t.row_start[same];
            k++;
            continue;
        }
        t.row_start[k] = r;
        for (int64_t j = 0; j < g[i].T; j++, r++) {
            t.row_off[r] = off;
            t.row_group[r] = k;
            off += xrow;
        }
        conv_elems += g[i].T * g[i].w.in;
        off = (off + 63) & ~(size_t)63;
        k++;
    }
    t.unit_start[k] = units;
    if (!reserve_bytes(&s->mm, off, err)) goto done;
    pass ps = {g, idx, n_small, t, s->mm.buf, units};
    /* converting a row costs about as much as streaming a few KB: small conversions (a decoded
     * token's rows) run on the calling thread, without a pool hand-off */
    if (conv_elems < CONVERT_INLINE_ELEMS) convert_rows(&ps, 0, r);
    else nx_parallel_for(pool, r, 4, convert_rows, &ps);
    nx_parallel_for(pool, units, 1, dot_units, &ps);
    ok = true;
done:
    if (idx != idx_stack) free(idx);
    return ok;
}
