/* test_quant_fixtures.c - our conversions against ggml's own output (tests/fixtures/quant/,
 * made by tests/fixtures/gen/gen_quant.c linked against llama.cpp's ggml; see
 * tests/fixtures/README.md).
 *
 * For every type:
 *   1. our to_float of ggml's blocks == ggml's dequantisation, bit for bit;
 *   2. our from_float of the same inputs == ggml's blocks, byte for byte (the reference
 *      quantisers are deterministic float code; we follow them operation by operation);
 *   3. our round-trip RMSE <= ggml's (implied by 2, checked separately so that a future
 *      deliberate deviation in 2 still has a quality floor).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

#define N 4096

static const char *names[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q4_K",   "q5_K",
                              "q6_K", "q8_K", "f16",  "bf16", "q2_K", "q3_K", "iq4_nl", "iq4_xs"};

static void *load(const char *name, const char *ext, size_t want) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/quant/%s.%s", name, ext);
    size_t len = 0;
    void *p = tu_read_file(tu_src_path(rel), &len);
    if (!p) {
        print_error("missing fixture %s\n", rel);
        fail();
    }
    if (len != want) {
        print_error("fixture %s has %zu bytes, expected %zu\n", rel, len, want);
        fail();
    }
    return p;
}

static bool have(const char *name, const char *ext) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/quant/%s.%s", name, ext);
    FILE *f = fopen(tu_src_path(rel), "rb");
    if (f) fclose(f);
    return f != NULL;
}

static double rmse(const float *a, const float *b) {
    double s = 0;
    for (int i = 0; i < N; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / N);
}

static void test_fixtures(void **state) {
    (void)state;
    for (size_t k = 0; k < NX_ARRAY_LEN(names); k++) {
        nx_type type;
        assert_true(nx_type_from_name(names[k], &type));
        const nx_type_traits *t = nx_type_get(type);
        size_t qsize;
        assert_true(nx_row_size(type, N, &qsize, NULL));
        float *in = load(names[k], "in.f32", N * sizeof(float));
        unsigned char *gq = load(names[k], "q", qsize);
        unsigned char *ours = calloc(1, qsize);
        float *ours_deq = malloc(N * sizeof(float));

        /* 1. dequantisation of ggml's blocks */
        if (have(names[k], "deq.f32")) {
            float *gdeq = load(names[k], "deq.f32", N * sizeof(float));
            t->to_float(gq, ours_deq, N);
            if (memcmp(ours_deq, gdeq, N * sizeof(float)) != 0) {
                for (int i = 0; i < N; i++)
                    if (memcmp(&ours_deq[i], &gdeq[i], 4) != 0) {
                        print_error("%s to_float differs at %d: ours %.9g ggml %.9g\n", names[k], i, ours_deq[i],
                                    gdeq[i]);
                        break;
                    }
                fail();
            }
            free(gdeq);
        }

        /* 2. quantisation */
        t->from_float(in, ours, N);
        int diff_blocks = 0;
        for (size_t b = 0; b < qsize / t->type_size; b++)
            diff_blocks += memcmp(ours + b * t->type_size, gq + b * t->type_size, t->type_size) != 0;
        print_message("%-5s quantiser vs ggml: %s (%d of %zu blocks differ)\n", names[k],
                      diff_blocks ? "DIFFERENT" : "bit-identical", diff_blocks, qsize / t->type_size);
        if (diff_blocks) fail();

        /* 3. round-trip quality (same code path for both: our to_float, proven exact above) */
        float *gdeq2 = malloc(N * sizeof(float));
        t->to_float(gq, gdeq2, N);
        t->to_float(ours, ours_deq, N);
        const double ours_e = rmse(in, ours_deq), ggml_e = rmse(in, gdeq2);
        if (!(ours_e <= ggml_e * (1 + 1e-6) + 1e-12)) {
            print_error("%s: round-trip rmse %g > ggml's %g\n", names[k], ours_e, ggml_e);
            fail();
        }
        free(gdeq2);
        free(in);
        free(gq);
        free(ours);
        free(ours_deq);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
