/* cmd_mkmodel.c - `nextn mkmodel`: write a synthetic qwen35 / qwen35moe GGUF (see src/convert/mkmodel.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "convert/mkmodel.h"
#include "cli_util.h"
#include "nextn_internal.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn mkmodel --preset P [--type T] [--seed N] [--no-mtp] [--layers N]\n"
            "                     [--vocab N] [--tie|--untie] [--fuse-gate-up-exps] [-t THREADS] -o FILE\n"
            "  --preset P  dense (qwen35): tiny 0.8b 2b 4b 9b; MoE (qwen35moe): tiny-moe 35b-a3b 122b-a10b\n"
            "  --type T    matrix type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs\n"
            "              (default f32)\n"
            "  --seed N    weights are a pure function of the seed (default 1)\n"
            "  --no-mtp    omit the MTP block (nextn_predict_layers absent)\n"
            "  --layers N  keep only the first N trunk layers (real widths, same layer types; default all)\n"
            "  --vocab N   vocabulary size (byte-level BPE, >= 259; default: preset's)\n"
            "  --fuse-gate-up-exps  MoE: one ffn_gate_up_exps tensor per layer instead of ffn_gate_exps +\n"
            "              ffn_up_exps (what llama.cpp's converter writes with the same flag)\n");
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || s[0] == '-') return false;
    *out = v;
    return true;
}

static const nx_cli_flag_name flags[] = {{"n_vocab", "--vocab"}, {NULL, NULL}};

int cmd_mkmodel(int argc, char **argv) {
    nx_mk_options o = {.preset = NULL, .type = NX_TYPE_F32, .seed = 1, .mtp = true, .n_vocab = 0, .tie = -1};
    const char *out = NULL;
    int threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint64_t u;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-mtp")) {
            o.mtp = false;
        } else if (!strcmp(a, "--tie")) {
            o.tie = 1;
        } else if (!strcmp(a, "--untie")) {
            o.tie = 0;
        } else if (!strcmp(a, "--fuse-gate-up-exps")) {
            o.fuse_gate_up = true;
        } else if (!v) {
            fprintf(stderr, "nextn mkmodel: %s needs a value (or is unknown)\n", a);
            usage(stderr);
            return 2;
        } else if (!strcmp(a, "--preset")) {
            o.preset = v, i++;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v, i++;
        } else if (!strcmp(a, "--type")) {
            nx_type t;
            if (!nx_type_from_name(v, &t)) {
                fprintf(stderr, "nextn mkmodel: unknown --type '%s'\n", v);
                return 2;
            }
            o.type = t, i++;
        } else if (!strcmp(a, "--seed") && parse_u64(v, &u)) {
            o.seed = u, i++;
        } else if (!strcmp(a, "--vocab") && parse_u64(v, &u) && u <= UINT32_MAX) {
            o.n_vocab = (uint32_t)u, i++;
        } else if (!strcmp(a, "--layers") && parse_u64(v, &u) && u >= 1 && u <= 1024) {
            o.n_layers = (uint32_t)u, i++;
        } else if (!strcmp(a, "-t") && parse_u64(v, &u) && u >= 1 && u <= 1024) {
            threads = (int)u, i++;
        } else {
            fprintf(stderr, "nextn mkmodel: bad option '%s %s'\n", a, v);
            usage(stderr);
            return 2;
        }
    }
    if (!o.preset || !out) {
        fprintf(stderr, "nextn mkmodel: --preset and -o are required\n");
        usage(stderr);
        return 2;
    }
    nx_err err;
    nx_pool *pool = nx_pool_create(threads, &err);
    if (!pool) {
        nx_cli_report("mkmodel", err.msg, flags);
        return 1;
    }
    double t0 = nx_time_s();
    nx_cli_progress pr;
    nx_cli_progress_init(&pr, "mkmodel", "tensor", "MB", false);
    o.progress = nx_cli_progress_tool;
    o.progress_user = &pr;
    bool ok = nx_mkmodel_write(&o, out, pool, &err);
    nx_cli_progress_end(&pr);
    nx_pool_free(pool);
    if (!ok) {
        nx_cli_report("mkmodel", err.msg, flags);
        return 1;
    }
    fprintf(stderr, "nextn mkmodel: wrote %s (preset %s, %s, seed %llu, %s) in %.1f s\n", out, o.preset,
            nx_type_name(o.type), (unsigned long long)o.seed, o.mtp ? "with MTP" : "no MTP", nx_time_s() - t0);
    return 0;
}
