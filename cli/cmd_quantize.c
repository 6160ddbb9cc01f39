/* cmd_quantize.c - `nextn quantize IN.gguf OUT.gguf TYPE [-t N] [--force] [-q]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"
#include "convert/quantize.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn quantize IN.gguf OUT.gguf TYPE [--tensor-type PATTERN=T]... [-t N] [--force] [-q]\n"
            "\n"
            "Re-quantises a GGUF with llama.cpp's per-tensor rules (llama-quantize without imatrix).\n"
            "  TYPE        %s\n"
            "              (q4_k_m: q4_K, with q6_K for the head and for attn_v/attn_qkv/ffn_down on\n"
            "              llama.cpp's \"more bits\" layers; docs/convert.md lists every mix's rules)\n"
            "  --tensor-type PATTERN=T\n"
            "              tensors whose name matches PATTERN (extended regex) get type T instead of\n"
            "              the mix's rules, as llama-quantize's --tensor-type (repeatable; first match)\n"
            "  -t N        threads (default: NEXTN_THREADS or all CPUs)\n"
            "  --force     replace an existing OUT.gguf\n"
            "  -q          no progress line (it is shown only when stderr is a terminal)\n",
            nx_quant_mix_names());
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    int n_pos = 0, threads = 0;
    enum { MAX_OV = 64 };
    static nx_quant_override ov[MAX_OV];
    size_t n_ov = 0;
    nx_err err;
    bool force = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "-t") && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 1024) { fprintf(stderr, "nextn quantize: -t wants 1..1024\n"); return 2; }
            threads = (int)v;
        } else if (!strcmp(a, "--tensor-type") && i + 1 < argc) {
            if (n_ov == MAX_OV) { fprintf(stderr, "nextn quantize: at most %d --tensor-type options\n", MAX_OV); return 2; }
            if (!nx_quant_override_parse(argv[++i], &ov[n_ov], &err)) {
                fprintf(stderr, "nextn quantize: --tensor-type: %s\n", err.msg);
                return 2;
            }
            n_ov++;
        } else if (!strcmp(a, "--force")) force = true;
        else if (!strcmp(a, "-q")) quiet = true;
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "nextn quantize: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (n_pos < 3) pos[n_pos++] = a;
        else { fprintf(stderr, "nextn quantize: unexpected argument '%s'\n", a); return 2; }
    }
    if (n_pos != 3) { usage(stderr); return 2; }
    const nx_quant_mix *mix = nx_quant_mix_find(pos[2]);
    if (!mix) {
        fprintf(stderr, "nextn quantize: unknown type '%s' (%s)\n", pos[2], nx_quant_mix_names());
        return 2;
    }
    struct stat sb;
    if (!force && stat(pos[1], &sb) == 0) {
        fprintf(stderr, "nextn quantize: %s exists (use --force to replace it)\n", pos[1]);
        return 1;
    }
    nx_pool *pool = nx_pool_create(threads, &err);
    if (!pool) { nx_cli_report("quantize", err.msg, NULL); return 1; }
    nx_cli_progress p;
    nx_cli_progress_init(&p, "quantize", "tensor", "MB", quiet);
    bool ok = nx_quantize_file_ov(pos[0], pos[1], mix, ov, n_ov, pool, nx_cli_progress_tool, &p, &err);
    nx_pool_free(pool);
    nx_cli_progress_end(&p);
    if (!ok) { nx_cli_report("quantize", err.msg, NULL); return 1; }
    if (!quiet) fprintf(stderr, "nextn quantize: wrote %s (%s) in %.2f s\n", pos[1], mix->name, nx_time_s() - p.t0);
    return 0;
}
