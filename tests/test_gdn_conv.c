/* test_gdn_conv.c - nx_gdn_conv4_avx512 (16 channels at a time) against the scalar conv loop of
 * gdn.c written out here: output before SiLU and every written state window, bit for bit, for
 * rows chained through distinct slots (a verify batch) and in place (older rows), several channel ranges
 * (batch invariance of the whole layer: test_forward). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "forward/gdn.h"
#include "forward/gdn_conv_avx512.h"
#include "quant/quant.h"

#define C 80
#define ROWS 6

/* gdn.c's loop for one row and channels [c0, c1): acc = 0 + s0 w0 + s1 w1 + s2 w2 + x w3. */
static void scalar_row(const float *w, const float *src, float *dst, const float *x, float *y, int c0, int c1) {
    for (int c = c0; c < c1; c++) {
        const float *wc = w + c * 4, *sw = src + c * 3;
        float acc = 0.0f;
        for (int i = 0; i < 3; i++) acc += sw[i] * wc[i];
        acc += x[c] * wc[3];
        const float s1 = sw[1], s2 = sw[2];
        dst[c * 3] = s1;
        dst[c * 3 + 1] = s2;
        dst[c * 3 + 2] = x[c];
        y[c] = acc;
    }
}

static void test_kernel_matches_scalar(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    tu_rng r;
    tu_rng_seed(&r, 3);
    static float w[C * 4], x[ROWS * C], slots[ROWS + 1][C * 3], ref[ROWS + 1][C * 3], y[ROWS * C], yref[ROWS * C];
    for (int i = 0; i < C * 4; i++) w[i] = tu_rng_normal(&r);
    for (int i = 0; i < ROWS * C; i++) x[i] = (i % 11 == 0) ? 0.0f : tu_rng_normal(&r); /* zeros: sign of 0 */
    const int ranges[][2] = {{0, 16}, {16, 64}, {0, 80}, {32, 48}};
    for (int in_place = 0; in_place < 2; in_place++)
        for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
            const int c0 = ranges[ri][0], c1 = ranges[ri][1];
            for (int s = 0; s <= ROWS; s++)
                for (int i = 0; i < C * 3; i++) ref[s][i] = slots[s][i] = s == 0 ? tu_rng_normal(&r) : -1.0f;
            memset(y, 0, sizeof y);
            memset(yref, 0, sizeof yref);
            const float *src[ROWS];
            float *dst[ROWS];
            for (int t = 0; t < ROWS; t++) { /* row t reads slot t (or 0) and writes slot t + 1 (or 0) */
                src[t] = slots[in_place ? 0 : t];
                dst[t] = slots[in_place ? 0 : t + 1];
                scalar_row(w, ref[in_place ? 0 : t], ref[in_place ? 0 : t + 1], x + t * C, yref + t * C, c0, c1);
            }
            nx_gdn_conv4_avx512(w, src, dst, x, y, C, ROWS, c0, c1);
            assert_memory_equal(y, yref, sizeof y);
            assert_memory_equal(slots, ref, sizeof slots);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernel_matches_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
