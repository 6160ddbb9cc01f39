/* test_attn_kernel.c - nx_attend_avx512 (several queries of one KV head at once) against the
 * one-query path it replaces, bit for bit: scores with nx_ops_dot_*_avx512, softmax with
 * nx_ops_exp_avx512 and a double sum in cell order, output by nx_ops_axpy_*_avx512 in cell
 * order.  Covers f16 and f32 caches, head sizes 16..256, 1..8 queries with different causal
 * extents (1 cell, not a multiple of 16, hundreds), strided cells, and checks that a query's
 * output does not depend on which queries share the call (the verify == decode invariant). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/attn_avx512.h"
#include "forward/ops_avx512.h"
#include "quant/quant.h"

#define MAX_CELLS 700

/* The one-query path of attn.c (attend_one_fn with the AVX-512 kernels). */
static void reference(const void *k, const void *v, bool f16, size_t stride, int D, float scale, const float *q,
                      int n_keys, float *out) {
    float *sc = malloc(sizeof(float) * (size_t)n_keys);
    float mx = -INFINITY;
    for (int c = 0; c < n_keys; c++) {
        const size_t off = (size_t)c * stride;
        sc[c] = (f16 ? nx_ops_dot_f16_avx512((const uint16_t *)k + off, q, D)
                     : nx_ops_dot_f32_avx512((const float *)k + off, q, D)) * scale;
        if (sc[c] > mx) mx = sc[c];
    }
    nx_ops_exp_avx512(sc, sc, mx, n_keys);
    double sum = 0.0;
    for (int c = 0; c < n_keys; c++) sum += sc[c];
    const float inv = (float)(1.0 / sum);
    memset(out, 0, sizeof(float) * (size_t)D);
    for (int c = 0; c < n_keys; c++) {
        const size_t off = (size_t)c * stride;
        if (f16) nx_ops_axpy_f16_avx512(out, sc[c] * inv, (const uint16_t *)v + off, D);
        else nx_ops_axpy_f32_avx512(out, sc[c] * inv, (const float *)v + off, D);
    }
    free(sc);
}

/* Random cache of MAX_CELLS cells of `stride` elements (f16 or f32). */
static void *random_cache(tu_rng *r, bool f16, size_t stride, float amp) {
    const size_t n = MAX_CELLS * stride;
    if (f16) {
        uint16_t *p = malloc(n * sizeof *p);
        for (size_t i = 0; i < n; i++) p[i] = nx_f32_to_f16(amp * tu_rng_normal(r));
        return p;
    }
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = amp * tu_rng_normal(r);
    return p;
}

static void check_case(tu_rng *r, bool f16, int D, int nq, const int *n_keys) {
    const size_t stride = (size_t)D * 3 + 16; /* cells of a wider KV row: this head is one slice */
    void *kc = random_cache(r, f16, stride, 1.0f), *vc = random_cache(r, f16, stride, 2.0f);
    const size_t head = (size_t)D; /* the second head of the row */
    const void *k = f16 ? (const void *)((uint16_t *)kc + head) : (const void *)((float *)kc + head);
    const void *v = f16 ? (const void *)((uint16_t *)vc + head) : (const void *)((float *)vc + head);
    const float scale = 1.0f / sqrtf((float)D);
    float *q = malloc(sizeof(float) * (size_t)(nq * D)), *out = malloc(sizeof(float) * (size_t)(nq * D));
    float *want = malloc(sizeof(float) * (size_t)D);
    float *scores = malloc(sizeof(float) * (size_t)(nq * MAX_CELLS));
    for (int i = 0; i < nq * D; i++) q[i] = 3.0f * tu_rng_normal(r); /* peaked softmax too */
    nx_attn_query qs[NX_ATTN_MAX_Q];
    for (int j = 0; j < nq; j++)
        qs[j] = (nx_attn_query){q + j * D, n_keys[j], scores + j * MAX_CELLS, out + j * D};
    nx_attend_avx512(k, v, f16, stride, D, scale, qs, nq);
    for (int j = 0; j < nq; j++) {
        reference(k, v, f16, stride, D, scale, q + j * D, n_keys[j], want);
        if (memcmp(want, out + j * D, sizeof(float) * (size_t)D) != 0)
            fail_msg("%s D %d, %d queries: query %d (n_keys %d) differs from the one-query path", f16 ? "f16" : "f32",
                     D, nq, j, n_keys[j]);
    }
    /* the same queries one at a time give the same bits */
    for (int j = 0; j < nq; j++) {
        nx_attn_query one = {q + j * D, n_keys[j], scores, want};
        nx_attend_avx512(k, v, f16, stride, D, scale, &one, 1);
        if (memcmp(want, out + j * D, sizeof(float) * (size_t)D) != 0)
            fail_msg("%s D %d: query %d alone differs from query %d among %d", f16 ? "f16" : "f32", D, j, j, nq);
    }
    free(q); free(out); free(want); free(scores); free(kc); free(vc);
}

static void test_matches_one_query_path(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    tu_rng r;
    tu_rng_seed(&r, 7);
    const int dims[] = {16, 32, 48, 64, 128, 256};
    for (int f = 0; f < 2; f++)
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int nq = 1; nq <= NX_ATTN_MAX_Q; nq++) {
                int n_keys[NX_ATTN_MAX_Q];
                /* verify-like: consecutive positions; and scattered extents */
                const int start = 1 + (int)(tu_rng_u64(&r) % 600);
                for (int j = 0; j < nq; j++)
                    n_keys[j] = (nq + (int)di) % 2 ? NX_MIN(MAX_CELLS, start + j)
                                                   : 1 + (int)(tu_rng_u64(&r) % MAX_CELLS);
                if (nq == 1 && di == 0) n_keys[0] = 1;
                check_case(&r, f == 0, dims[di], nq, n_keys);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_one_query_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
