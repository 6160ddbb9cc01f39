/* test_ops_simd.c - the AVX-512 element-wise activations of ops_avx512.h against double
 * precision: exp, SiLU, sigmoid and their fused forms, over the whole useful range, at the
 * edges (0, +-inf, NaN, overflow/underflow) and for every tail length; and a value must not
 * depend on its position in the array (the batch-invariance speculative decoding relies on).
 * Also the fused delta-rule chain (token and replay steps) against chained one-token steps
 * (bit-identical). */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/ops_avx512.h"
#include "quant/quant.h"

/* Relative error bound: the polynomial (5e-9) plus a few float roundings (2^-24 each). */
#define REL 4e-7

static bool close_to(float got, double want) {
    if (isnan(want)) return isnan(got);
    if (isinf(want) || fabs(want) > FLT_MAX) return got == (float)want; /* overflow to +-inf */
    /* absolute floor: denormal results, and silu(x) ~ x e^x for x < -88.7 where exp(-x)
     * overflows to inf and the result is -0 (the scalar nx_silu does the same) */
    const double tol = REL * fabs(want) + 1e-35; /* (times u <= 7.5 below) */
    return fabs((double)got - want) <= tol;
}

static double silu_d(double x) { return x / (1.0 + exp(-x)); }
static double sig_d(double x) { return 1.0 / (1.0 + exp(-x)); }

#define N 4099

static void test_activations_match_double(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        x[i] = -110.0f + 220.0f * (float)i / (N - 1); /* covers underflow and overflow of exp */
        u[i] = 0.5f + (float)(i % 7);
    }
    const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 88.7f, 88.8f, -87.5f, -103.9f, 1e-30f, -1e-30f};
    memcpy(x, special, sizeof special);

    nx_ops_exp_avx512(y, x, 0.0f, N);
    for (int i = 0; i < N; i++)
        if (!close_to(y[i], exp((double)x[i]))) fail_msg("exp(%.9g) = %.9g, want %.17g", x[i], y[i], exp((double)x[i]));
    nx_ops_exp_avx512(y, x, 3.0f, N);
    for (int i = 0; i < N; i++)
        if (!close_to(y[i], exp((double)(x[i] - 3.0f)))) fail_msg("exp(%.9g - 3) = %.9g", x[i], y[i]);

    nx_ops_silu_avx512(y, x, N);
    for (int i = 0; i < N; i++) {
        if (isinf(x[i]) && x[i] < 0) { /* -inf / (1 + inf): NaN in IEEE, as the scalar nx_silu */
            assert_true(isnan(y[i]));
            continue;
        }
        if (!close_to(y[i], silu_d(x[i]))) fail_msg("silu(%.9g) = %.9g, want %.17g", x[i], y[i], silu_d(x[i]));
    }

    memcpy(y, x, sizeof(float) * N);
    nx_ops_swiglu_avx512(y, u, N);
    for (int i = 0; i < N; i++)
        if (isfinite(x[i]) && !close_to(y[i], silu_d(x[i]) * u[i])) fail_msg("swiglu(%.9g, %.9g) = %.9g", x[i], u[i], y[i]);

    for (int i = 0; i < N; i++) y[i] = u[i];
    nx_ops_mul_sigmoid_avx512(y, x, N);
    for (int i = 0; i < N; i++)
        if (!close_to(y[i], u[i] * sig_d(x[i]))) fail_msg("%.9g * sigmoid(%.9g) = %.9g", u[i], x[i], y[i]);

    for (int i = 0; i < N; i++) y[i] = u[i];
    nx_ops_mul_silu_avx512(y, x, N);
    for (int i = 0; i < N; i++)
        if (isfinite(x[i]) && !close_to(y[i], u[i] * silu_d(x[i]))) fail_msg("%.9g * silu(%.9g) = %.9g", u[i], x[i], y[i]);
    free(x);
    free(y);
    free(u);
}

/* Every element gets the same instructions wherever it sits (full vector or masked tail), and
 * nothing past n is written. */
static void test_position_and_tail_invariant(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    float x[64], ref[64], y[80];
    for (int i = 0; i < 64; i++) x[i] = (float)(i * 0.37 - 11.0);
    nx_ops_silu_avx512(ref, x, 64);
    for (int off = 0; off < 16; off++)
        for (int n = 0; n <= 40; n++) {
            for (int i = 0; i < 80; i++) y[i] = -7.0f;
            nx_ops_silu_avx512(y + off, x + off, n);
            for (int i = 0; i < 80; i++) {
                if (i >= off && i < off + n) assert_memory_equal(&y[i], &ref[i], sizeof(float));
                else assert_true(y[i] == -7.0f);
            }
        }
}


/* The fused delta-rule chain (n steps in one pass over the state) against n chained one-token
 * steps: every stored state, output and recorded delta bit-identical, for every n up to the
 * limit, with destinations that are skipped (NULL), equal to src (in-place update, ordinary
 * stores), 64-byte aligned (streaming stores) or not, and d = 16, 64, 128.  Then replay steps
 * (recorded k, decay, delta; no q) from the same start reproduce every state bit for bit, alone
 * and followed by token steps in the same chain (outputs, deltas and states again identical). */
static void test_gdn_chain_equals_chained_steps(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    enum { NMAX = NX_GDN_MAX_STEPS, DMAX = 128 };
    const int dims[3] = {16, 64, 128};
    float *src0 = nx_alloc_aligned(DMAX * DMAX * sizeof(float), "test", NULL);
    float *src = nx_alloc_aligned(DMAX * DMAX * sizeof(float), "test", NULL);
    /* + 16 floats so an unaligned destination (offset by 4 floats) still fits */
    float *dstm = nx_alloc_aligned((size_t)NMAX * (DMAX * DMAX + 16) * sizeof(float), "test", NULL);
    float *ref = malloc((size_t)(NMAX + 1) * DMAX * DMAX * sizeof(float));
    float *kq = malloc((size_t)NMAX * 3 * DMAX * sizeof(float));
    float ro[NMAX][DMAX], fo[NMAX][DMAX], del[NMAX][DMAX];
    assert_non_null(src0);
    assert_non_null(src);
    assert_non_null(dstm);
    assert_non_null(ref);
    assert_non_null(kq);
    uint64_t rng = 12345;
    for (int di = 0; di < 3; di++) {
        const int d = dims[di];
        const size_t plane = (size_t)d * d;
        for (size_t i = 0; i < plane; i++) src0[i] = (float)((int)((rng = rng * 6364136223846793005u + 1) >> 40) % 2001 - 1000) / 997.0f;
        for (int i = 0; i < NMAX * 3 * d; i++) kq[i] = (float)((int)((rng = rng * 6364136223846793005u + 1) >> 40) % 2001 - 1000) / 1500.0f;
        /* every chain length up to 17, then long ones up to the limit (a verify's recorded rows) */
        static const int lens[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 33, NMAX - 1, NMAX};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
            for (int pattern = 0, n = lens[li]; pattern < 4; pattern++) {
                nx_gdn_step st[NMAX];
                /* reference: chained one-token steps, state t+1 from state t */
                memcpy(ref, src0, plane * sizeof(float));
                for (int t = 0; t < n; t++) {
                    st[t] = (nx_gdn_step){.k = kq + (size_t)t * 3 * d, .q = kq + (size_t)t * 3 * d + d,
                                          .v = kq + (size_t)t * 3 * d + 2 * d, .decay = 0.6f + 0.02f * (float)t,
                                          .beta = 0.9f - 0.03f * (float)t, .o = fo[t], .delta_out = del[t]};
                    nx_gdn_step_avx512(ref + (size_t)t * plane, ref + (size_t)(t + 1) * plane, st[t].k, st[t].q, st[t].v,
                                       st[t].decay, st[t].beta, ro[t], d);
                }
                memcpy(src, src0, plane * sizeof(float));
                memset(dstm, 0, (size_t)NMAX * (DMAX * DMAX + 16) * sizeof(float));
                for (int t = 0; t < n; t++) {
                    float *slot = dstm + (size_t)t * (DMAX * DMAX + 16);
                    switch (pattern) {
                    case 0: st[t].dst = slot; break;                                        /* all stored, aligned */
                    case 1: st[t].dst = slot + 4; break;                                    /* unaligned */
                    case 2: st[t].dst = t == n - 1 || t % 3 == 1 ? slot : NULL; break;      /* some skipped */
                    default: st[t].dst = t == n - 1 ? src : t % 2 ? slot : NULL; break;     /* last in place */
                    }
                }
                nx_gdn_chain_avx512(src, st, n, d);
                for (int t = 0; t < n; t++) {
                    assert_memory_equal(fo[t], ro[t], (size_t)d * sizeof(float));
                    if (st[t].dst) assert_memory_equal(st[t].dst, ref + (size_t)(t + 1) * plane, plane * sizeof(float));
                }
                if (pattern != 3) assert_memory_equal(src, src0, plane * sizeof(float)); /* src only read */
                if (pattern != 0) continue;
                /* replay: the recorded deltas reproduce every state without q, v, beta */
                memcpy(src, src0, plane * sizeof(float));
                memset(dstm, 0, (size_t)NMAX * (DMAX * DMAX + 16) * sizeof(float));
                for (int t = 0; t < n; t++)
                    st[t] = (nx_gdn_step){.k = st[t].k, .delta = del[t], .decay = st[t].decay,
                                          .dst = dstm + (size_t)t * (DMAX * DMAX + 16)};
                nx_gdn_chain_avx512(src, st, n, d);
                for (int t = 0; t < n; t++)
                    assert_memory_equal(st[t].dst, ref + (size_t)(t + 1) * plane, plane * sizeof(float));
                /* m replay steps, then token steps in the same chain (a batch after a rollback):
                 * the token step after a replay step reads the state the replay pass produced */
                for (int m = 1; m < n; m = n <= 17 ? m + 1 : m * 2 + 1) {
                    float o2[NMAX][DMAX], del2[NMAX][DMAX];
                    memset(dstm, 0, (size_t)NMAX * (DMAX * DMAX + 16) * sizeof(float));
                    for (int t = 0; t < n; t++) {
                        float *slot = dstm + (size_t)t * (DMAX * DMAX + 16);
                        if (t < m)
                            st[t] = (nx_gdn_step){.k = st[t].k, .delta = del[t], .decay = st[t].decay,
                                                  .dst = t == m - 1 ? slot : NULL};
                        else
                            st[t] = (nx_gdn_step){.k = kq + (size_t)t * 3 * d, .q = kq + (size_t)t * 3 * d + d,
                                                  .v = kq + (size_t)t * 3 * d + 2 * d, .decay = 0.6f + 0.02f * (float)t,
                                                  .beta = 0.9f - 0.03f * (float)t, .o = o2[t], .delta_out = del2[t],
                                                  .dst = t % 2 ? slot + 4 : slot};
                    }
                    nx_gdn_chain_avx512(src, st, n, d);
                    assert_memory_equal(st[m - 1].dst, ref + (size_t)m * plane, plane * sizeof(float));
                    for (int t = m; t < n; t++) {
                        assert_memory_equal(o2[t], ro[t], (size_t)d * sizeof(float));
                        assert_memory_equal(del2[t], del[t], (size_t)d * sizeof(float));
                        assert_memory_equal(st[t].dst, ref + (size_t)(t + 1) * plane, plane * sizeof(float));
                    }
                }
            }
    }
    nx_free_aligned(src0);
    nx_free_aligned(src);
    nx_free_aligned(dstm);
    free(ref);
    free(kq);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_activations_match_double),
        cmocka_unit_test(test_position_and_tail_invariant),
        cmocka_unit_test(test_gdn_chain_equals_chained_steps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
