/* bench_gemm.c - throughput of nx_matmul for prefill-sized batches (the GEMM path) against the
 * vec-dot path (NX_GEMM_MIN_T forced out of reach by running T-row products as 8-row pieces).
 * usage: bench_gemm [type=q8_0] [T=512] [in=1024] [out=3584] [threads=1] [reps=5] [clock=wall|cpu]
 * Prints the median time and GMAC/s (multiply-adds per second, in * out * T per product) of both
 * paths, and the time ratio.  clock=cpu times with the process's CPU time (all threads), which
 * on a shared machine does not count waiting for a core: the kernel's own speed at 1 thread. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "quant/matmul.h"


int main(int argc, char **argv) {
    nx_type type = NX_TYPE_Q8_0;
    if (argc > 1 && !nx_type_from_name(argv[1], &type)) {
        fprintf(stderr, "unknown type %s\n", argv[1]);
        return 2;
    }
    const int64_t T = argc > 2 ? atoll(argv[2]) : 512, in = argc > 3 ? atoll(argv[3]) : 1024;
    const int64_t out = argc > 4 ? atoll(argv[4]) : 3584;
    const int nt = argc > 5 ? atoi(argv[5]) : 1, reps = argc > 6 ? atoi(argv[6]) : 5;
    const bool cpu = argc > 7 && !strcmp(argv[7], "cpu");
    if (T < 1 || in < 1 || out < 1 || reps < 1 || reps > 100 || (argc > 7 && !cpu && strcmp(argv[7], "wall")))
        return 2;
    const clockid_t clk = cpu ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
    nx_err err;
    const nx_type_traits *tt = nx_type_get(type);
    size_t rowb;
    if (!tt || !nx_row_size(type, in, &rowb, &err)) {
        fprintf(stderr, "bad type/shape\n");
        return 2;
    }
    float *wf = malloc(sizeof(float) * (size_t)in), *x = malloc(sizeof(float) * (size_t)(in * T));
    float *y = malloc(sizeof(float) * (size_t)(out * T));
    char *w = malloc(rowb * (size_t)out);
    uint64_t s = 1;
    for (int64_t o = 0; o < out; o++) {
        for (int64_t i = 0; i < in; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            wf[i] = (float)((int64_t)(s >> 33) % 2001 - 1000) * 1e-3f;
        }
        tt->from_float(wf, w + (size_t)o * rowb, in);
    }
    for (int64_t i = 0; i < in * T; i++) x[i] = (float)((i * 7919) % 2001 - 1000) * 1e-3f;
    nx_weight wt;
    nx_pool *pool = nx_pool_create(nt, &err);
    if (!pool || !nx_weight_init(&wt, w, type, in, out, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    nx_matmul_scratch sc = {0};
    double t_path[2];
    for (int path = 0; path < 2; path++) {
        double *ts = malloc(sizeof(double) * (size_t)reps);
        for (int r = 0; r <= reps; r++) {
            const double t0 = bu_seconds(clk);
            if (path == 0) {
                if (!nx_matmul(pool, &sc, &wt, x, T, y, &err)) return 1;
            } else {
                for (int64_t t0r = 0; t0r < T; t0r += 8)
                    if (!nx_matmul(pool, &sc, &wt, x + t0r * in, NX_MIN(8, T - t0r), y + t0r * out, &err)) return 1;
            }
            if (r > 0) ts[r - 1] = bu_seconds(clk) - t0; /* first run warms up */
        }
        t_path[path] = bu_median(ts, reps);
        free(ts);
    }
    const double macs = (double)in * (double)out * (double)T;
    printf("%s T=%lld in=%lld out=%lld threads=%d %s: gemm %.2f ms %.1f GMAC/s | 8-row vec-dot %.2f ms %.1f GMAC/s | "
           "speed-up %.2fx\n",
           tt->name, (long long)T, (long long)in, (long long)out, nt, cpu ? "cpu" : "wall", t_path[0] * 1e3, macs / t_path[0] * 1e-9,
           t_path[1] * 1e3, macs / t_path[1] * 1e-9, t_path[1] / t_path[0]);
    nx_matmul_scratch_free(&sc);
    nx_pool_free(pool);
    free(wf), free(x), free(y), free(w);
    return 0;
}
