/* test_convert_kernels.c - the converter's SIMD kernels are bit-identical to the scalar ones,
 * and the scalar Q8_0 quantiser to quant.c's reference (the format's definition). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert_kernels.h"
#include "quant/quant.h"

static bool have_avx2(void) { return nx_cpu_isa() >= NX_ISA_AVX2; }

static void test_f16_to_f32(void **s) {
    (void)s;
    /* every half value, at an odd byte offset (unaligned source) and an odd length tail */
    const uint64_t n = 65536 + 3;
    uint8_t *buf = malloc(2 * n + 1);
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = (uint16_t)i;
        memcpy(buf + 1 + 2 * i, &h, 2);
    }
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    nx_cv_f16_to_f32_scalar(buf + 1, a, n);
    for (uint64_t i = 0; i < n; i++) {
        float want = nx_f16_to_f32((uint16_t)i);
        if (memcmp(&a[i], &want, 4) && !(isnan(a[i]) && isnan(want))) fail_msg("scalar half %04x", (unsigned)i);
    }
    if (have_avx2()) {
        nx_cv_f16_to_f32_avx2(buf + 1, b, n);
        for (uint64_t i = 0; i < n; i++)
            if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i]))) fail_msg("avx2 half %04x", (unsigned)(i & 0xffff));
    }
    free(buf); free(a); free(b);
}

static void test_q8_0(void **s) {
    (void)s;
    const int nb = 4096;
    const uint64_t n = (uint64_t)nb * 32;
    float *x = malloc(n * sizeof *x);
    tu_rng rng;
    tu_rng_seed(&rng, 42);
    for (int b = 0; b < nb; b++) {
        float *blk = x + (size_t)b * 32;
        int kind = b % 5;
        for (int j = 0; j < 32; j++) {
            float v = tu_rng_normal(&rng) * (kind == 1 ? 1e-6f : kind == 2 ? 300.0f : 1.0f);
            if (kind == 3) v = (float)((int)(tu_rng_uniform(&rng) * 254) - 127) + 0.5f; /* exact ties */
            if (kind == 4) v = 0.0f;                                                       /* all-zero block */
            blk[j] = v;
        }
        if (kind == 3) blk[0] = 127.0f; /* amax 127 -> d = 1, id = 1: x * id keeps the .5 ties */
    }
    const nx_type_traits *tr = nx_type_get(NX_TYPE_Q8_0);
    uint8_t *want = malloc((size_t)nb * 34), *got = malloc((size_t)nb * 34);
    tr->from_float(x, want, (int64_t)n);
    nx_cv_q8_0_scalar(x, got, n);
    assert_memory_equal(want, got, (size_t)nb * 34);
    if (have_avx2()) {
        memset(got, 0, (size_t)nb * 34);
        nx_cv_q8_0_avx2(x, got, n);
        assert_memory_equal(want, got, (size_t)nb * 34);
    }
    /* the ties really are rounded away from zero: 0.5 -> 1, -126.5 -> -127 */
    float t[32] = {127.0f, 0.5f, -126.5f, 2.5f};
    uint8_t q[34];
    (have_avx2() ? nx_cv_q8_0_avx2 : nx_cv_q8_0_scalar)(t, q, 32);
    assert_int_equal((int8_t)q[3], 1);
    assert_int_equal((int8_t)q[4], -127);
    assert_int_equal((int8_t)q[5], 3);
    free(x); free(want); free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_to_f32),
        cmocka_unit_test(test_q8_0),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
