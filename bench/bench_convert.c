/* bench_convert.c - conversion throughput of `nextn convert` (nx_convert_hf) on an HF folder.
 * usage: bench_convert HF_DIR [reps=5] [OUT_DIR=$TMPDIR or /tmp]
 * For F16 -> F16 and F16 -> Q8_0 (the source should be an F16 checkpoint, e.g. made by
 * tools/reference/make_checkpoint.py --dtype f16), after one warm-up run: the median over reps
 * of source MB/s by wall clock and by process CPU time (user + sys), and the peak RSS.
 * The output is written (and fsynced, as the GGUF writer always does) to OUT_DIR. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench_util.h"
#include "convert/convert.h"
#include "quant/quant.h"
#include "convert/safetensors.h"


int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s HF_DIR [reps] [OUT_DIR]\n", argv[0]);
        return 2;
    }
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (reps < 1 || reps > 50) return 2;
    const char *tmp = argc > 3 ? argv[3] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    nx_err err;
    nx_safetensors *st;
    if (!nx_st_open_dir(&st, argv[1], &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double mb = (double)nx_st_total_bytes(st) / 1e6;
    nx_st_close(st);
    const uint32_t types[2] = {NX_TYPE_F16, NX_TYPE_Q8_0};
    char out[4096];
    snprintf(out, sizeof out, "%s/bench_convert_%d.gguf", tmp, (int)getpid());
    printf("source: %s, %.1f MB of tensors\n", argv[1], mb);
    for (int k = 0; k < 2; k++) {
        nx_convert_opts o = {.out_type = types[k]};
        double wall[50], cpu[50];
        for (int r = -1; r < reps; r++) {
            double t0 = nx_time_s(), c0 = bu_seconds(CLOCK_PROCESS_CPUTIME_ID);
            if (!nx_convert_hf(argv[1], out, &o, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            if (r >= 0) { wall[r] = nx_time_s() - t0; cpu[r] = bu_seconds(CLOCK_PROCESS_CPUTIME_ID) - c0; }
        }
        const double tw = bu_median(wall, reps), tc = bu_median(cpu, reps);
        printf("F16 -> %-5s  wall %.3f s = %7.1f MB/s   cpu %.3f s = %7.1f MB/s   (median of %d)\n",
               nx_type_name(types[k]), tw, mb / tw, tc, mb / tc, reps);
    }
    printf("peak RSS %.1f MB\n", (double)nx_peak_rss_bytes() / 1e6);
    remove(out);
    return 0;
}
