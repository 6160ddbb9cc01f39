/* cmd_quantize.c - `nextn quantize IN.gguf OUT.gguf TYPE [options]` (llama-quantize's options). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"
#include "convert/imatrix.h"
#include "convert/quantize.h"

#define CMD "quantize"

/* A tensor whose rows do not fit the blocks of the type the rules chose gets another type; say
 * so as llama-quantize does (the file's size per weight shows the cost at the end). */
static void on_fallback(void *user, const char *tensor, uint64_t ne0, uint32_t wanted, uint32_t used) {
    (void)user;
    const nx_type_traits *t = nx_type_get(wanted);
    fprintf(stderr, "nextn quantize: %s: rows of %llu are not a multiple of %lld, required for %s - using %s instead\n",
            tensor, (unsigned long long)ne0, t ? (long long)t->block_size : 0LL, nx_type_name(wanted), nx_type_name(used));
}

static const nx_cli_flag_name flags[] = {
    {"allow_requantize", "--allow-requantize"},
    {"output_type / token_embd_type", "--output-tensor-type / --token-embedding-type"},
    {NULL, NULL},
};

int cmd_quantize(int argc, char **argv) {
    const char *pos[3] = {0};
    nx_arg_list files = {pos, 0, 3, false};
    enum { MAX_OV = 64 };
    const char *ov_arg[MAX_OV];
    nx_arg_list ov_list = {ov_arg, 0, MAX_OV, false};
    static nx_quant_override ov[MAX_OV];
    int32_t threads = 0;
    const char *imatrix_path = NULL;
    nx_err err;
    bool force = false, quiet = false, allow_requantize = false, pure = false;
    const char *output_type = NULL, *token_embd_type = NULL;
    nx_arg args[] = {
        {"--tensor-type", NULL, NX_ARG_LIST, &ov_list, "PATTERN=T",
         "tensors matching PATTERN (extended regex) get type T (repeatable; first match)", 0, 0, NULL, false},
        {"--imatrix", NULL, NX_ARG_STRING, &imatrix_path, "FILE",
         "importance matrix (llama-imatrix's GGUF or legacy .dat) for the quantisers", 0, 0, NULL, false},
        {"--output-tensor-type", NULL, NX_ARG_STRING, &output_type, "T", "output.weight gets type T", 0, 0, NULL, false},
        {"--token-embedding-type", NULL, NX_ARG_STRING, &token_embd_type, "T", "token_embd.weight gets type T", 0, 0, NULL, false},
        {"--pure", NULL, NX_ARG_FLAG, &pure, NULL, "every quantisable tensor in TYPE's base type (no per-tensor rules)", 0, 0, NULL, false},
        {"--allow-requantize", NULL, NX_ARG_FLAG, &allow_requantize, NULL,
         "re-quantise tensors that are already quantised (refused otherwise: it loses precision)", 0, 0, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        {"--force", NULL, NX_ARG_FLAG, &force, NULL, "replace an existing OUT.gguf", 0, 0, NULL, false},
        {"--quiet", "-q", NX_ARG_FLAG, &quiet, NULL, "no progress line (it is shown only when stderr is a terminal)", 0, 0, NULL, false},
    };
    char synopsis[1024];
    snprintf(synopsis, sizeof synopsis,
             "IN.gguf OUT.gguf TYPE [--imatrix FILE] [--tensor-type PATTERN=T]... [--output-tensor-type T]\n"
             "       [--token-embedding-type T] [--pure] [--allow-requantize] [-t N] [--force] [-q]\n\n"
             "Re-quantises a GGUF with llama.cpp's per-tensor rules, byte for byte as llama-quantize\n"
             "(with --imatrix as llama-quantize --imatrix).\n"
             "TYPE: %s\n"
             "(q4_k_m: q4_K, with q6_K for the head and for attn_v/attn_qkv/ffn_down on llama.cpp's\n"
             "\"more bits\" layers; docs/convert.md lists every mix's rules).  --tensor-type works as\n"
             "llama-quantize's.",
             nx_quant_mix_names());
    int rc = nx_args_parse_pos(CMD, synopsis, args, NX_ARGS_LEN(args), argc, argv, &files);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (files.n != 3) return nx_usage_error(CMD, "need IN.gguf OUT.gguf TYPE (see nextn %s --help)", CMD);
    const size_t n_ov = (size_t)ov_list.n;
    for (size_t i = 0; i < n_ov; i++)
        if (!nx_quant_override_parse(ov_arg[i], &ov[i], &err)) return nx_usage_error(CMD, "--tensor-type: %s", err.msg);
    uint32_t types[2] = {NX_QTYPE_NONE, NX_QTYPE_NONE};
    const char *type_args[2] = {output_type, token_embd_type}, *type_flags[2] = {"--output-tensor-type", "--token-embedding-type"};
    for (int i = 0; i < 2; i++) {
        nx_type t;
        if (!type_args[i]) continue;
        if (!nx_type_from_name(type_args[i], &t) || !nx_type_get(t)->from_float)
            return nx_usage_error(CMD, "%s: '%s' is not a type nextn can quantise to", type_flags[i], type_args[i]);
        types[i] = (uint32_t)t;
    }
    const nx_quant_mix *mix = nx_quant_mix_find(pos[2]);
    if (!mix) return nx_usage_error(CMD, "unknown type '%s' (%s)", pos[2], nx_quant_mix_names());
    struct stat sb;
    if (!force && stat(pos[1], &sb) == 0) {
        fprintf(stderr, "nextn quantize: %s exists (use --force to replace it)\n", pos[1]);
        return 1;
    }
    nx_imatrix *im = NULL;
    if (imatrix_path && !nx_imatrix_load(imatrix_path, &im, &err)) { nx_cli_report("quantize", err.msg, flags); return 1; }
    nx_pool *pool = nx_pool_create(threads, &err);
    if (!pool) { nx_imatrix_free(im); nx_cli_report("quantize", err.msg, flags); return 1; }
    nx_cli_progress p;
    nx_cli_progress_init(&p, "quantize", "tensor", "MB", quiet);
    nx_cli_progress_plain(&p);
    nx_quant_stats stats = {0};
    nx_quant_opts opts = {.overrides = ov, .n_overrides = n_ov, .imatrix = im, .imatrix_path = imatrix_path,
                          .allow_requantize = allow_requantize, .pure = pure,
                          .has_output_type = output_type != NULL, .has_token_embd_type = token_embd_type != NULL,
                          .output_type = types[0], .token_embd_type = types[1],
                          .on_fallback = quiet ? NULL : on_fallback, .stats = &stats};
    bool ok = nx_quantize_file_ex(pos[0], pos[1], mix, &opts, pool, nx_cli_progress_tool, &p, &err);
    nx_pool_free(pool);
    nx_imatrix_free(im);
    nx_cli_progress_end(&p);
    if (!ok) { nx_cli_report("quantize", err.msg, flags); return 1; }
    if (!quiet) {
        const double n = stats.n_elements ? (double)stats.n_elements : 1;
        if (stats.n_fallback)
            fprintf(stderr, "nextn quantize: %llu of %llu tensors fell back to another type (rows not a multiple of the "
                    "block, above)\n", (unsigned long long)stats.n_fallback, (unsigned long long)stats.n_tensors);
        fprintf(stderr, "nextn quantize: size %.2f MiB (%.2f bpw) -> %.2f MiB (%.2f bpw)\n", stats.in_bytes / 1048576.0,
                8.0 * (double)stats.in_bytes / n, stats.out_bytes / 1048576.0, 8.0 * (double)stats.out_bytes / n);
        fprintf(stderr, "nextn quantize: wrote %s (%s) in %.2f s\n", pos[1], mix->name, nx_time_s() - p.t0);
    }
    return 0;
}
