/* test_attn_kernel.c - nx_attend_avx512 (several queries of one KV head at once) against the
 * one-query path it replaces, bit for bit: scores with nx_ops_dot_*_avx512, softmax with
 * nx_ops_exp_avx512 and a double sum in cell order, output by nx_ops_axpy_*_avx512 in cell
 * order.  Covers f16 and f32 caches, head sizes 16..256, 1..8 queries with different causal
 * extents (1 cell, not a multiple of 16, hundreds), strided cells, and checks that a query's
 * output does not depend on which queries share the call (the verify == decode invariant).
 * Quantized caches (q8_0, q4_0, also mixed with f16/f32 for the other of K and V): the output
 * equals, bit for bit, the output over an f32 cache holding the values the quant type-traits
 * to_float (ggml's dequantisation, checked against ggml fixtures in test_quant_fixtures) gives
 * for the stored blocks - the quantized cache is read in place, but no value differs. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/attn_avx512.h"
#include "forward/ops_avx512.h"
#include "quant/quant.h"

#define MAX_CELLS 700

/* The one-query path of attn.c (attend_one_fn with the AVX-512 kernels) over an f16 or f32
 * cache; stride in elements. */
static void reference(const void *k, const void *v, bool f16, size_t stride, int D, float scale, const float *q,
                      int n_keys, float *out) {
    float *sc = calloc((size_t)n_keys, sizeof(float));
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

/* A random cache of MAX_CELLS cells of `stride` elements in type t (as the KV cache stores
 * them: a row converted by nx_kv_type_from_float), and in *deq the same cells as f32 - the
 * values themselves for f32, else the exact conversion back (quant.h's to_float of the type, or
 * f16 -> f32). */
static uint8_t *random_cache(tu_rng *r, nx_kv_type t, size_t stride, float amp, float **deq) {
    const size_t row = nx_kv_type_bytes(t, stride);
    uint8_t *p = malloc(MAX_CELLS * row);
    float *x = malloc(stride * sizeof(float));
    *deq = malloc(MAX_CELLS * stride * sizeof(float));
    const nx_type_traits *tt = nx_type_get(nx_kv_type_qtype(t));
    for (size_t c = 0; c < MAX_CELLS; c++) {
        for (size_t i = 0; i < stride; i++) x[i] = amp * tu_rng_normal(r);
        if (c % 7 == 3) x[5] = 40.0f * amp; /* an outlier: one block with a large scale */
        nx_kv_type_from_float(t, x, p + c * row, (int)stride);
        if (t == NX_KV_F32) memcpy(*deq + c * stride, x, stride * sizeof(float));
        else if (t == NX_KV_F16)
            for (size_t i = 0; i < stride; i++) (*deq)[c * stride + i] = nx_f16_to_f32(((uint16_t *)(p + c * row))[i]);
        else tt->to_float(p + c * row, *deq + c * stride, (int64_t)stride);
    }
    free(x);
    return p;
}

static void check_case(tu_rng *r, nx_kv_type tk, nx_kv_type tv, int D, int nq, const int *n_keys) {
    const size_t stride = (size_t)D * 3 + 32; /* cells of a wider KV row: this head is one slice */
    float *kd, *vd;
    uint8_t *kc = random_cache(r, tk, stride, 1.0f, &kd), *vc = random_cache(r, tv, stride, 2.0f, &vd);
    const size_t head = (size_t)D; /* the second head of the row */
    const uint8_t *k = kc + nx_kv_type_bytes(tk, head), *v = vc + nx_kv_type_bytes(tv, head);
    const size_t sk = nx_kv_type_bytes(tk, stride), sv = nx_kv_type_bytes(tv, stride);
    /* the one-query reference reads f16 in place (as attn.c does), anything else as f32 */
    const bool kf16 = tk == NX_KV_F16, vf16 = tv == NX_KV_F16;
    const float scale = 1.0f / sqrtf((float)D);
    float *q = malloc(sizeof(float) * (size_t)(nq * D)), *out = malloc(sizeof(float) * (size_t)(nq * D));
    float *want = malloc(sizeof(float) * (size_t)D), *deq_out = malloc(sizeof(float) * (size_t)(nq * D));
    float *scores = malloc(sizeof(float) * (size_t)(nq * MAX_CELLS));
    for (int i = 0; i < nq * D; i++) q[i] = 3.0f * tu_rng_normal(r); /* peaked softmax too */
    nx_attn_query qs[NX_ATTN_MAX_Q];
    for (int j = 0; j < nq; j++)
        qs[j] = (nx_attn_query){q + j * D, n_keys[j], scores + j * MAX_CELLS, out + j * D};
    nx_attend_avx512(k, tk, sk, v, tv, sv, D, scale, qs, nq);
    const char *nk = nx_kv_type_name(tk), *nv = nx_kv_type_name(tv);
    for (int j = 0; kf16 == vf16 && j < nq; j++) { /* (the reference takes one element type) */
        reference(kf16 ? (const void *)k : (const void *)(kd + head), kf16 ? (const void *)v : (const void *)(vd + head),
                  kf16, stride, D, scale, q + j * D, n_keys[j], want);
        if (memcmp(want, out + j * D, sizeof(float) * (size_t)D) != 0)
            fail_msg("k %s v %s D %d, %d queries: query %d (n_keys %d) differs from the one-query path", nk, nv, D, nq,
                     j, n_keys[j]);
    }
    /* quantized: the same bits as the kernel over the dequantised f32 cache */
    if (tk >= NX_KV_Q8_0 || tv >= NX_KV_Q8_0) {
        nx_attn_query qd[NX_ATTN_MAX_Q];
        for (int j = 0; j < nq; j++) qd[j] = (nx_attn_query){q + j * D, n_keys[j], scores + j * MAX_CELLS, deq_out + j * D};
        nx_attend_avx512((const uint8_t *)(kd + head), NX_KV_F32, stride * sizeof(float), (const uint8_t *)(vd + head),
                         NX_KV_F32, stride * sizeof(float), D, scale, qd, nq);
        for (int j = 0; j < nq; j++) {
            if (memcmp(deq_out + j * D, out + j * D, sizeof(float) * (size_t)D) != 0) {
                int i = 0;
                while (out[j * D + i] == deq_out[j * D + i]) i++;
                fail_msg("k %s v %s D %d, %d queries: query %d (n_keys %d) differs from the f32 cache of the "
                         "dequantised values (dim %d: %.9g vs %.9g)", nk, nv, D, nq, j, n_keys[j], i, out[j * D + i],
                         deq_out[j * D + i]);
            }
        }
    }
    /* the same queries one at a time give the same bits */
    for (int j = 0; j < nq; j++) {
        nx_attn_query one = {q + j * D, n_keys[j], scores, want};
        nx_attend_avx512(k, tk, sk, v, tv, sv, D, scale, &one, 1);
        if (memcmp(want, out + j * D, sizeof(float) * (size_t)D) != 0)
            fail_msg("k %s v %s D %d: query %d alone differs from query %d among %d", nk, nv, D, j, j, nq);
    }
    free(q); free(out); free(want); free(deq_out); free(scores); free(kc); free(vc); free(kd); free(vd);
}

/* Head sizes 16..256 (those the types' blocks divide); `few`: 32, 128 and 256 only. */
static void run_types(nx_kv_type tk, nx_kv_type tv, uint64_t seed, bool few) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    const int dims[] = {16, 32, 48, 64, 128, 256};
    const int blk = NX_MAX(nx_kv_type_block(tk), nx_kv_type_block(tv));
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        if (dims[di] % blk || (few && dims[di] != 32 && dims[di] < 128)) continue;
        for (int nq = 1; nq <= NX_ATTN_MAX_Q; nq++) {
            int n_keys[NX_ATTN_MAX_Q];
            /* verify-like: consecutive positions; and scattered extents */
            const int start = 1 + (int)(tu_rng_u64(&r) % 600);
            for (int j = 0; j < nq; j++)
                n_keys[j] = (nq + (int)di) % 2 ? NX_MIN(MAX_CELLS, start + j) : 1 + (int)(tu_rng_u64(&r) % MAX_CELLS);
            if (nq == 1 && di <= 1) n_keys[0] = 1;
            check_case(&r, tk, tv, dims[di], nq, n_keys);
        }
    }
}

static void test_matches_one_query_path(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    run_types(NX_KV_F16, NX_KV_F16, 7, false);
    run_types(NX_KV_F32, NX_KV_F32, 8, false);
}

static void test_quantized_equals_dequantised_f32(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    run_types(NX_KV_Q8_0, NX_KV_Q8_0, 11, false);
    run_types(NX_KV_Q4_0, NX_KV_Q4_0, 12, false);
    run_types(NX_KV_Q8_0, NX_KV_F16, 13, true);
    run_types(NX_KV_F32, NX_KV_Q4_0, 14, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_one_query_path),
        cmocka_unit_test(test_quantized_equals_dequantised_f32),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
