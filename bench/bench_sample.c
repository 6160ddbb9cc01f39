/* bench_sample.c - cost of the sampling chain per token on a Qwen3.5-sized vocabulary.
 *
 *   build/bench_sample [n_vocab (default 248320)] [iterations (default 200)]
 *
 * Logits are N(0, 2^2) with a few peaked tokens (like a trained model's row), penalties over a
 * 64-token history.  Prints the median wall and thread-CPU time per nx_sampler_dist + draw for
 * each configuration. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "base/common.h"
#include "sample/sample.h"


static uint64_t rng_state = 0x1234567;
static double uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1.0p-53;
}

int main(int argc, char **argv) {
    int32_t V = argc > 1 ? atoi(argv[1]) : 248320;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    if (V < 64 || iters < 1) {
        fprintf(stderr, "usage: bench_sample [n_vocab >= 64] [iterations >= 1]\n");
        return 2;
    }
    float *logits = malloc((size_t)V * sizeof *logits);
    double *t = malloc((size_t)iters * sizeof *t), *tc = malloc((size_t)iters * sizeof *tc);
    if (!logits || !t || !tc) return 1;
    for (int32_t i = 0; i < V; i++) {
        double u1 = uniform() + 1e-12, u2 = uniform();
        logits[i] = (float)(2.0 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (int k = 0; k < 8; k++) logits[(int32_t)(uniform() * V)] += 12.0f;

    struct {
        const char *name;
        nx_sampler_params p;
    } cfg[6];
    cfg[0].name = "default chain (k40 p.95 m.05 T.8)";
    cfg[0].p = nx_sampler_default_params();
    cfg[1].name = "default + repeat/presence penalties";
    cfg[1].p = nx_sampler_default_params();
    cfg[1].p.penalty_repeat = 1.1f;
    cfg[1].p.penalty_present = 0.5f;
    cfg[2].name = "greedy";
    cfg[2].p = nx_sampler_greedy_params();
    cfg[3].name = "top-p 0.95 only (no top-k)";
    cfg[3].p = nx_sampler_default_params();
    cfg[3].p.top_k = 0;
    cfg[3].p.min_p = 0.0f;
    cfg[4].name = "min-p 0.05 only";
    cfg[4].p = nx_sampler_default_params();
    cfg[4].p.top_k = 0;
    cfg[4].p.top_p = 1.0f;
    cfg[5].name = "no truncation (T 1)";
    cfg[5].p = nx_sampler_default_params();
    cfg[5].p.top_k = 0;
    cfg[5].p.top_p = 1.0f;
    cfg[5].p.min_p = 0.0f;
    cfg[5].p.temp = 1.0f;

    printf("n_vocab %d, %d iterations, median per token\n", V, iters);
    for (size_t c = 0; c < NX_ARRAY_LEN(cfg); c++) {
        nx_sampler *s;
        nx_dist d;
        nx_err err;
        if (!nx_sampler_create(&s, V, &cfg[c].p, &err) || !nx_dist_init(&d, V, &err)) {
            fprintf(stderr, "bench_sample: %s\n", err.msg);
            return 1;
        }
        for (int i = 0; i < 64; i++) nx_sampler_accept(s, (int32_t)(uniform() * V), &err);
        for (int i = 0; i < iters; i++) {
            double t0 = nx_time_s(), c0 = bu_seconds(CLOCK_THREAD_CPUTIME_ID);
            if (!nx_sampler_dist(s, logits, &d, &err)) {
                fprintf(stderr, "bench_sample: %s\n", err.msg);
                return 1;
            }
            volatile int32_t tok = nx_sampler_draw(s, &d);
            (void)tok;
            t[i] = nx_time_s() - t0;
            tc[i] = bu_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
        }
        printf("  %-38s wall %8.3f ms  cpu %8.3f ms  (%d candidates)\n", cfg[c].name, 1e3 * bu_median(t, iters),
               1e3 * bu_median(tc, iters), d.n);
        nx_dist_free(&d);
        nx_sampler_free(s);
    }
    free(logits);
    free(t);
    free(tc);
    return 0;
}
