/* test_moe.c - the mixture-of-experts FFN (src/forward/moe.c) against a naive double-precision
 * implementation written here from the rule (softmax over all experts, top-k, renormalise by the
 * clamped sum, SwiGLU experts, weighted sum, sigmoid-gated shared expert), on the stacked and the
 * fused layouts; routing on hand-derived cases; every row bit-identical whatever the batch
 * (F32, Q8_0, Q4_K weights, batches large enough for the GEMM path); each selected expert read
 * once per batch. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/mkmodel.h"
#include "forward/moe.h"
#include "quant/quant.h"

static nx_pool *pool;

static int setup(void **state) {
    (void)state;
    nx_err err;
    pool = nx_pool_create(2, &err);
    return pool ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nx_pool_free(pool);
    return 0;
}

typedef struct moe_model {
    nx_mk_memory mem;
    nx_model m;
} moe_model;

static void build(moe_model *mm, uint32_t type, bool fused, uint64_t seed) {
    nx_err err;
    nx_mk_options o = {.preset = "tiny-moe", .type = type, .seed = seed, .mtp = true, .tie = -1,
                       .fuse_gate_up = fused};
    if (!nx_mk_memory_build(&mm->mem, &o, &err)) fail_msg("%s", err.msg);
    if (!nx_model_bind(&mm->m, &mm->mem.hp, nx_mk_memory_lookup, &mm->mem, "tiny-moe", true, &err))
        fail_msg("%s", err.msg);
}

static void release(moe_model *mm) {
    nx_model_release(&mm->m);
    nx_mk_memory_free(&mm->mem);
}

static void rand_rows(float *x, size_t n, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = tu_rng_normal(&r);
}

/* ---- the naive reference (F32 weights only) ------------------------------------------------ */

static double dot_row(const nx_weight *w, int64_t o, const double *x) {
    const float *row = (const float *)((const char *)w->data + (size_t)o * w->row_bytes);
    double s = 0;
    for (int64_t i = 0; i < w->in; i++) s += (double)row[i] * x[i];
    return s;
}

static double silu(double v) { return v / (1.0 + exp(-v)); }

/* y = down(silu(gate x) * (up x)) */
static void swiglu_ffn(const nx_weight *gate, const nx_weight *up, const nx_weight *down, const double *x,
                       double *y) {
    const int64_t F = gate->out;
    double *h = malloc((size_t)F * sizeof *h);
    for (int64_t i = 0; i < F; i++) h[i] = silu(dot_row(gate, i, x)) * dot_row(up, i, x);
    for (int64_t o = 0; o < down->out; o++) y[o] = dot_row(down, o, h);
    free(h);
}

static void naive_moe(const nx_hparams *hp, const nx_moe_weights *w, const float *xf, double *out) {
    const int N = (int)hp->n_expert, k = (int)hp->n_expert_used, E = (int)hp->n_embd;
    double *x = malloc((size_t)E * sizeof *x), *y = malloc((size_t)E * sizeof *y), *p = malloc((size_t)N * sizeof *p);
    for (int i = 0; i < E; i++) x[i] = xf[i];
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < N; e++) mx = fmax(mx, p[e] = dot_row(&w->router, e, x));
    for (int e = 0; e < N; e++) sum += p[e] = exp(p[e] - mx);
    for (int e = 0; e < N; e++) p[e] /= sum;
    int sel[64];
    double wsum = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < N; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= sel[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[j] = best;
        wsum += p[best];
    }
    wsum = fmax(wsum, 6.103515625e-5);
    for (int i = 0; i < E; i++) out[i] = 0;
    for (int j = 0; j < k; j++) {
        nx_weight g = nx_moe_expert(&w->gate, w->gate_stride, sel[j]);
        nx_weight u = nx_moe_expert(&w->up, w->up_stride, sel[j]);
        nx_weight d = nx_moe_expert(&w->down, w->down_stride, sel[j]);
        swiglu_ffn(&g, &u, &d, x, y);
        for (int i = 0; i < E; i++) out[i] += p[sel[j]] / wsum * y[i];
    }
    swiglu_ffn(&w->sh_gate, &w->sh_up, &w->sh_down, x, y);
    const double gs = 1.0 / (1.0 + exp(-dot_row(&w->sh_gate_inp, 0, x)));
    for (int i = 0; i < E; i++) out[i] += gs * y[i];
    free(x);
    free(y);
    free(p);
}

static void run_moe(const nx_model *m, const nx_layer *l, const float *x, int T, float *out) {
    nx_moe_scratch s = {0};
    nx_err err;
    if (!nx_moe_ffn(pool, &s, &m->hp, &l->moe, x, T, out, &err)) fail_msg("%s", err.msg);
    nx_moe_scratch_free(&s);
}

/* Every layer of the trunk and the MTP block, stacked and fused layouts, several rows. */
static void test_matches_naive_reference(void **state) {
    (void)state;
    for (int fused = 0; fused < 2; fused++) {
        moe_model mm;
        build(&mm, NX_TYPE_F32, fused, 5 + (uint64_t)fused);
        const nx_hparams *hp = &mm.m.hp;
        const int E = (int)hp->n_embd, T = 6;
        float *x = malloc((size_t)T * E * sizeof *x), *out = malloc((size_t)T * E * sizeof *out);
        double *ref = malloc((size_t)E * sizeof *ref);
        for (uint32_t li = 0; li <= hp->n_layer; li++) {
            const nx_layer *l = li < hp->n_layer ? &mm.m.layers[li] : &mm.m.mtp.layer;
            rand_rows(x, (size_t)T * E, 100 + li);
            run_moe(&mm.m, l, x, T, out);
            double maxd = 0, scale = 0;
            for (int t = 0; t < T; t++) {
                naive_moe(hp, &l->moe, x + (size_t)t * E, ref);
                for (int i = 0; i < E; i++) {
                    maxd = fmax(maxd, fabs(out[(size_t)t * E + i] - ref[i]));
                    scale = fmax(scale, fabs(ref[i]));
                }
            }
            if (!(maxd < 1e-5 * fmax(scale, 1e-3) + 1e-7))
                fail_msg("%s layer %u: max |nextn - naive| = %g (scale %g)", fused ? "fused" : "stacked", li, maxd,
                         scale);
        }
        free(x);
        free(out);
        free(ref);
        release(&mm);
    }
}

/* Hand-derived routing: p = softmax(log [1 2 3 4]) = [.1 .2 .3 .4]; k = 2 picks 3 then 2 with
 * weights .4/.7 and .3/.7; equal probabilities go to the lower id; a sum below the clamp divides
 * by 6.103515625e-5 instead. */
static void test_routing_rule(void **state) {
    (void)state;
    float p[4] = {logf(1), logf(2), logf(3), logf(4)};
    int32_t sel[4];
    float w[4];
    nx_moe_route(p, 4, 2, sel, w);
    assert_int_equal(sel[0], 3);
    assert_int_equal(sel[1], 2);
    assert_true(fabsf(w[0] - 0.4f / 0.7f) < 1e-6f && fabsf(w[1] - 0.3f / 0.7f) < 1e-6f);
    float q[5] = {0.5f, 2.0f, 0.5f, 2.0f, 2.0f};
    nx_moe_route(q, 5, 3, sel, w);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 3);
    assert_int_equal(sel[2], 4);
    assert_true(fabsf(w[0] - 1.0f / 3) < 1e-6f && fabsf(w[2] - 1.0f / 3) < 1e-6f);
    /* k = n: every expert, weights = probabilities (they sum to 1) */
    float r[3] = {0.0f, 1.0f, 2.0f};
    nx_moe_route(r, 3, 3, sel, w);
    assert_int_equal(sel[0], 2);
    assert_int_equal(sel[2], 0);
    double e0 = 1, e1 = exp(1.0), e2 = exp(2.0), z = e0 + e1 + e2;
    assert_true(fabs(w[0] - e2 / z) < 1e-6 && fabs(w[2] - e0 / z) < 1e-6);
    /* clamp: 1000 experts would be needed for a real underflow, so use k = 1 of a flat 40000-wide
     * row: p = 1/40000 = 2.5e-5 < 6.1e-5, weight = 2.5e-5 / 6.1035e-5 */
    static float big[40000];
    for (int i = 0; i < 40000; i++) big[i] = 0.0f;
    nx_moe_route(big, 40000, 1, sel, w);
    assert_int_equal(sel[0], 0);
    assert_true(fabsf(w[0] - (1.0f / 40000) / 6.103515625e-5f) < 1e-5f);
}

/* Row t of a batch == row t alone == row t in batches of 3: routing, grouping, the grouped
 * matmuls (dot kernels for small groups, the GEMM path from 16 rows per expert on) and the
 * weighted sum never mix rows. */
static void test_rows_independent_of_batch(void **state) {
    (void)state;
    const uint32_t types[] = {NX_TYPE_F32, NX_TYPE_Q8_0, NX_TYPE_Q4_K};
    for (size_t ti = 0; ti < NX_ARRAY_LEN(types); ti++)
        for (int fused = 0; fused < 2; fused++) {
            moe_model mm;
            build(&mm, types[ti], fused, 9);
            const int E = (int)mm.m.hp.n_embd, T = 80; /* 160 (row, expert) pairs over 8 experts */
            float *x = malloc((size_t)T * E * sizeof *x), *all = malloc((size_t)T * E * sizeof *all);
            float *part = malloc((size_t)T * E * sizeof *part);
            rand_rows(x, (size_t)T * E, 77);
            const nx_layer *l = &mm.m.layers[1];
            nx_moe_scratch sc = {0};
            nx_err err;
            if (!nx_moe_ffn(pool, &sc, &mm.m.hp, &l->moe, x, T, all, &err)) fail_msg("%s", err.msg);
            int big = 0, small = 0; /* both paths of nx_matmul_groups are exercised */
            for (int e = 0; e < 8; e++) {
                int n_e = sc.count[e + 1] - sc.count[e];
                big += n_e >= 16;
                small += n_e > 0 && n_e < 16;
            }
            nx_moe_scratch_free(&sc);
            assert_true(big > 0 && small > 0);
            for (int t = 0; t < T; t++) run_moe(&mm.m, l, x + (size_t)t * E, 1, part + (size_t)t * E);
            for (int t = 0; t < T; t++)
                if (memcmp(all + (size_t)t * E, part + (size_t)t * E, (size_t)E * sizeof(float)))
                    fail_msg("%s %s: row %d of an %d-row batch differs from the row alone", nx_type_name(types[ti]),
                             fused ? "fused" : "stacked", t, T);
            for (int t0 = 0; t0 < T; t0 += 3)
                run_moe(&mm.m, l, x + (size_t)t0 * E, NX_MIN(3, T - t0), part + (size_t)t0 * E);
            assert_memory_equal(all, part, (size_t)T * E * sizeof(float));
            free(x);
            free(all);
            free(part);
            release(&mm);
        }
}

/* A 4-row batch reads each selected expert once: one gate, one up and one down product per
 * distinct expert, over all rows routed to it. */
static void test_each_expert_once_per_batch(void **state) {
    (void)state;
    moe_model mm;
    build(&mm, NX_TYPE_Q8_0, false, 13);
    const nx_hparams *hp = &mm.m.hp;
    const int E = (int)hp->n_embd, T = 4, k = (int)hp->n_expert_used;
    float *x = malloc((size_t)T * E * sizeof *x), *out = malloc((size_t)T * E * sizeof *out);
    rand_rows(x, (size_t)T * E, 5);
    for (int t = 1; t < T; t++) memcpy(x + (size_t)t * E, x, (size_t)E * sizeof(float)); /* same route */
    nx_moe_scratch s = {0};
    nx_err err;
    const nx_layer *l = &mm.m.layers[0];
    assert_true(nx_moe_ffn(pool, &s, hp, &l->moe, x, T, out, &err));
    /* the last grouped call was the down pass: k experts + the shared one, each over all T rows */
    int n_groups = 0, rows = 0;
    for (int e = 0; e < (int)hp->n_expert; e++) {
        int n_e = s.count[e + 1] - s.count[e];
        if (n_e) n_groups++, rows += n_e;
        assert_true(n_e == 0 || n_e == T);
    }
    assert_int_equal(n_groups, k);
    assert_int_equal(rows, T * k);
    for (int g = 0; g < k; g++) {
        assert_int_equal(s.groups[g].T, T);
        for (int h = 0; h < g; h++) assert_ptr_not_equal(s.groups[g].w.data, s.groups[h].w.data);
    }
    nx_moe_scratch_free(&s);
    free(x);
    free(out);
    release(&mm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_naive_reference),
        cmocka_unit_test(test_routing_rule),
        cmocka_unit_test(test_rows_independent_of_batch),
        cmocka_unit_test(test_each_expert_once_per_batch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
