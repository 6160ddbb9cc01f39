/* test_quant_convert_simd.c - the AVX-512 activation quantisers (q8_0, q8_K) produce exactly the
 * bytes of the scalar references, on normal data and on every awkward case: zeros, ties at .5,
 * ties in magnitude (+a / -a), tiny and huge values, infinities, NaN. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant_impl.h"

#define N 1024 /* 32 q8_0 blocks, 4 q8_K blocks */

/* Fills block-sized stretches with a different kind of content each. */
static void fill_case(float *x, int kind, tu_rng *r) {
    for (int i = 0; i < N; i++) {
        const float v = tu_rng_normal(r);
        switch (kind) {
        case 0: x[i] = v; break;
        case 1: x[i] = 0.0f; break;
        case 2: x[i] = (float)((int)(v * 20)) * 0.5f; break;  /* many exact .5 ties after scaling */
        case 3: x[i] = (i % 7 == 0) ? ((i / 7) % 2 ? 3.0f : -3.0f) : v; break; /* +-amax ties */
        case 4: x[i] = v * 1e-30f; break;
        case 5: x[i] = v * 1e30f; break;
        case 6: x[i] = i % 13 == 0 ? INFINITY : v; break;
        case 7: x[i] = i % 11 == 0 ? NAN : v; break;
        case 8: x[i] = i % 17 == 0 ? -INFINITY : (i % 5 == 0 ? -NAN : v); break;
        default: x[i] = (float)(i % 255 - 127); break; /* integers: codes exactly representable */
        }
    }
}

static void test_q8_simd_matches_scalar(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    tu_rng r;
    tu_rng_seed(&r, 21);
    float *x = malloc(sizeof(float) * N);
    unsigned char a[N / 32 * sizeof(nx_block_q8_0)], b[sizeof a];
    unsigned char ka[N / 256 * sizeof(nx_block_q8_K)], kb[sizeof ka];
    for (int rep = 0; rep < 4; rep++)
        for (int kind = 0; kind < 10; kind++) {
            fill_case(x, kind, &r);
            memset(a, 0x55, sizeof a), memset(b, 0xAA, sizeof b);
            nx_from_float_q8_0_scalar(x, a, N);
            nx_from_float_q8_0_avx512(x, b, N);
            if (memcmp(a, b, sizeof a) != 0) {
                print_error("q8_0 kind %d rep %d: AVX-512 blocks differ from the scalar ones\n", kind, rep);
                fail();
            }
            memset(ka, 0x55, sizeof ka), memset(kb, 0xAA, sizeof kb);
            nx_from_float_q8_K_scalar(x, ka, N);
            nx_from_float_q8_K_avx512(x, kb, N);
            if (memcmp(ka, kb, sizeof ka) != 0) {
                print_error("q8_K kind %d rep %d: AVX-512 blocks differ from the scalar ones\n", kind, rep);
                fail();
            }
        }
    free(x);
}

/* The public entry points pick the SIMD version only on capable CPUs and give the same bytes
 * for one block at a time (the short-row path) as for a whole row. */
static void test_q8_dispatch_consistent(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 22);
    float x[N];
    fill_case(x, 0, &r);
    unsigned char whole[N / 32 * sizeof(nx_block_q8_0)], parts[sizeof whole];
    nx_from_float_q8_0(x, whole, N);
    for (int b = 0; b < N / 32; b++) nx_from_float_q8_0(x + 32 * b, parts + b * sizeof(nx_block_q8_0), 32);
    assert_memory_equal(whole, parts, sizeof whole);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_simd_matches_scalar),
        cmocka_unit_test(test_q8_dispatch_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
