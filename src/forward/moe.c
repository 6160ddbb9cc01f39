/* moe.c - the mixture-of-experts FFN (see moe.h). */
#include "forward/moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/ops.h"
#include "forward/ops_avx512.h"

/* llama.cpp clamps the sum of the selected probabilities to the smallest normal F16. */
#define NX_MOE_MIN_WSUM 6.103515625e-5f

void nx_moe_route(float *p, int n, int k, int32_t *sel, float *wsel) {
    float mx = -INFINITY;
    for (int e = 0; e < n; e++) mx = p[e] > mx ? p[e] : mx;
    double sum = 0.0;
    for (int e = 0; e < n; e++) {
        p[e] = expf(p[e] - mx);
        sum += (double)p[e];
    }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n; e++) p[e] *= inv;
    /* top-k by selection: the largest remaining probability, lower id first among equals */
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int i = 0; i < j && !taken; i++) taken = sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
    }
    double ws = 0.0;
    for (int j = 0; j < k; j++) ws += (double)p[sel[j]];
    float wsum = (float)ws;
    if (wsum < NX_MOE_MIN_WSUM) wsum = NX_MOE_MIN_WSUM;
    for (int j = 0; j < k; j++) wsel[j] = p[sel[j]] / wsum;
}

void nx_moe_scratch_free(nx_moe_scratch *s) {
    if (!s) return;
    float **f[] = {&s->logits, &s->wsel, &s->g, &s->u, &s->y, &s->sg, &s->su, &s->sy, &s->sgate};
    for (size_t i = 0; i < NX_ARRAY_LEN(f); i++) nx_free_aligned(*f[i]);
    free(s->sel);
    free(s->slot);
    free(s->rows);
    free(s->count);
    free(s->groups);
    nx_mm_groups_scratch_free(&s->mm);
    memset(s, 0, sizeof *s);
}

size_t nx_moe_scratch_bytes(const nx_moe_scratch *s) { return s->bytes + nx_mm_groups_scratch_bytes(&s->mm); }

static bool grow(nx_moe_scratch *s, const nx_hparams *hp, int T, nx_err *err) {
    if (T <= s->cap_T) return true;
    nx_moe_scratch keep_mm = {.mm = s->mm};
    s->mm = (nx_mm_groups_scratch){0};
    nx_moe_scratch_free(s);
    s->mm = keep_mm.mm;
    const size_t N = hp->n_expert, k = hp->n_expert_used, E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp;
    const size_t Tk = (size_t)T * k;
    struct { float **p; size_t n; } fb[] = {
        {&s->logits, (size_t)T * N}, {&s->wsel, Tk}, {&s->g, Tk * F}, {&s->u, Tk * F}, {&s->y, Tk * E},
        {&s->sg, (size_t)T * S}, {&s->su, (size_t)T * S}, {&s->sy, (size_t)T * E}, {&s->sgate, (size_t)T},
    };
    size_t total = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(fb); i++) {
        *fb[i].p = nx_alloc_aligned(fb[i].n * sizeof(float), "MoE scratch", err);
        if (!*fb[i].p) goto fail;
        total += fb[i].n * sizeof(float);
    }
    s->sel = nx_malloc(Tk * sizeof *s->sel, "MoE routing", err);
    s->slot = s->sel ? nx_malloc(Tk * sizeof *s->slot, "MoE routing", err) : NULL;
    s->rows = s->slot ? nx_malloc(Tk * sizeof *s->rows, "MoE routing", err) : NULL;
    s->count = s->rows ? nx_malloc((N + 1) * sizeof *s->count, "MoE routing", err) : NULL;
    s->groups = s->count ? nx_malloc((2 * N + 2) * sizeof *s->groups, "MoE groups", err) : NULL;
    if (!s->groups) goto fail;
    total += 3 * Tk * sizeof(int32_t) + (N + 1) * sizeof(int32_t) + (2 * N + 2) * sizeof(nx_mm_group);
    s->cap_T = T;
    s->bytes = total;
    s->avx512 = nx_cpu_isa() >= NX_ISA_AVX512;
    return true;
fail:
    nx_moe_scratch_free(s);
    return false;
}

typedef struct rows_task {
    nx_moe_scratch *s;
    const nx_hparams *hp;
    float *out;
    int T;
} rows_task;

static void route_rows(void *p, int64_t b, int64_t e) {
    const rows_task *rt = p;
    const int N = (int)rt->hp->n_expert, k = (int)rt->hp->n_expert_used;
    for (int64_t t = b; t < e; t++)
        nx_moe_route(rt->s->logits + t * N, N, k, rt->s->sel + t * k, rt->s->wsel + t * k);
}

static void swiglu(const nx_moe_scratch *s, float *g, const float *u, int64_t n) {
    if (s->avx512) nx_ops_swiglu_avx512(g, u, n);
    else for (int64_t i = 0; i < n; i++) g[i] = nx_silu(g[i]) * u[i];
}

/* out_t = (... (w_0 y_0 + w_1 y_1) ... + w_{k-1} y_{k-1}) + sigmoid(gate_t) s_t, element-wise. */
static void combine_rows(void *p, int64_t b, int64_t e) {
    const rows_task *rt = p;
    const nx_moe_scratch *s = rt->s;
    const int k = (int)rt->hp->n_expert_used;
    const int64_t E = rt->hp->n_embd;
    for (int64_t t = b; t < e; t++) {
        float *o = rt->out + t * E;
        const float *y0 = s->y + (size_t)s->slot[t * k] * E;
        const float w0 = s->wsel[t * k];
        for (int64_t i = 0; i < E; i++) o[i] = w0 * y0[i];
        for (int j = 1; j < k; j++) {
            const float *yj = s->y + (size_t)s->slot[t * k + j] * E;
            const float wj = s->wsel[t * k + j];
            for (int64_t i = 0; i < E; i++) o[i] += wj * yj[i];
        }
        const float gs = nx_sigmoid(s->sgate[t]);
        const float *sy = s->sy + t * E;
        for (int64_t i = 0; i < E; i++) o[i] += gs * sy[i];
    }
}

bool nx_moe_ffn(nx_pool *pool, nx_moe_scratch *s, const nx_hparams *hp, const nx_moe_weights *w, const float *x,
                int T, float *out, nx_err *err) {
    if (T <= 0) return true;
    if (!grow(s, hp, T, err)) return false;
    const int N = (int)hp->n_expert, k = (int)hp->n_expert_used;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp;

    /* router logits and the shared expert's gate logit, all rows at once */
    if (!nx_matmul(pool, &s->mm.mm, &w->router, x, T, s->logits, err) ||
        !nx_matmul(pool, &s->mm.mm, &w->sh_gate_inp, x, T, s->sgate, err))
        return false;
    rows_task rt = {s, hp, out, T};
    nx_parallel_for(pool, T, 64, route_rows, &rt);

    /* group the (row, expert) pairs by expert: counting sort, rows ascending within an expert */
    memset(s->count, 0, (size_t)(N + 1) * sizeof *s->count);
    for (int64_t i = 0; i < (int64_t)T * k; i++) s->count[s->sel[i] + 1]++;
    for (int e = 0; e < N; e++) s->count[e + 1] += s->count[e];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < k; j++) {
            const int32_t slot = s->count[s->sel[t * k + j]]++;
            s->rows[slot] = t;
            s->slot[t * k + j] = slot;
        }
    for (int e = N; e > 0; e--) s->count[e] = s->count[e - 1]; /* back to starts */
    s->count[0] = 0;

    /* gate and up of every selected expert (its rows picked from x) and of the shared expert */
    int ng = 0;
    for (int e = 0; e < N; e++) {
        const int32_t n_e = s->count[e + 1] - s->count[e];
        if (n_e == 0) continue;
        const int32_t o = s->count[e];
        s->groups[ng++] = (nx_mm_group){nx_moe_expert(&w->gate, w->gate_stride, e), x, E, s->rows + o, n_e,
                                        s->g + (size_t)o * F};
        s->groups[ng++] = (nx_mm_group){nx_moe_expert(&w->up, w->up_stride, e), x, E, s->rows + o, n_e,
                                        s->u + (size_t)o * F};
    }
    s->groups[ng++] = (nx_mm_group){w->sh_gate, x, E, NULL, T, s->sg};
    s->groups[ng++] = (nx_mm_group){w->sh_up, x, E, NULL, T, s->su};
    if (!nx_matmul_groups(pool, &s->mm, s->groups, ng, err)) return false;
    swiglu(s, s->g, s->u, (int64_t)T * k * F);
    swiglu(s, s->sg, s->su, (int64_t)T * S);

    /* down: each expert over its contiguous block of SwiGLU rows; the shared expert */
    ng = 0;
    for (int e = 0; e < N; e++) {
        const int32_t n_e = s->count[e + 1] - s->count[e];
        if (n_e == 0) continue;
        const int32_t o = s->count[e];
        s->groups[ng++] = (nx_mm_group){nx_moe_expert(&w->down, w->down_stride, e), s->g + (size_t)o * F, F, NULL,
                                        n_e, s->y + (size_t)o * E};
    }
    s->groups[ng++] = (nx_mm_group){w->sh_down, s->sg, S, NULL, T, s->sy};
    if (!nx_matmul_groups(pool, &s->mm, s->groups, ng, err)) return false;

    nx_parallel_for(pool, T, 16, combine_rows, &rt);
    return true;
}
