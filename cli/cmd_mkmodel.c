/* cmd_mkmodel.c - `nextn mkmodel`: write a synthetic qwen35 / qwen35moe GGUF (see src/convert/mkmodel.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "convert/mkmodel.h"
#include "nextn_internal.h"

static const nx_cli_flag_name flags[] = {{"n_vocab", "--vocab"}, {"n_layers", "--layers"}, {NULL, NULL}};

#define CMD "mkmodel"

int cmd_mkmodel(int argc, char **argv) {
    nx_mk_options o = {.preset = NULL, .type = NX_TYPE_F32, .seed = 1, .mtp = true, .n_vocab = 0, .tie = -1};
    const char *out = NULL, *type = "f32";
    int32_t threads = 0, layers = 0;
    uint64_t vocab = 0;
    bool no_mtp = false, tie = false, untie = false;
    nx_arg args[] = {
        {"--preset", NULL, NX_ARG_STRING, &o.preset, "P",
         "dense (qwen35): tiny 0.8b 2b 4b 9b; MoE (qwen35moe): tiny-moe 35b-a3b 122b-a10b", 0, 0, NULL, false},
        {"--output", "-o", NX_ARG_STRING, &out, "FILE", "output file (required)", 0, 0, NULL, false},
        {"--type", NULL, NX_ARG_STRING, &type, "T",
         "matrix type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs (default f32)", 0, 0,
         NULL, false},
        {"--seed", NULL, NX_ARG_U64, &o.seed, "N", "weights are a pure function of the seed (default 1)", 0, 0, NULL, false},
        {"--no-mtp", NULL, NX_ARG_FLAG, &no_mtp, NULL, "omit the MTP block (nextn_predict_layers absent)", 0, 0, NULL, false},
        {"--layers", NULL, NX_ARG_INT, &layers, "N",
         "keep only the first N trunk layers (real widths, same layer types; default all)", 1, 1024, NULL, false},
        {"--vocab", NULL, NX_ARG_U64, &vocab, "N", "vocabulary size (byte-level BPE, >= 259; default: preset's)", 0, 0, NULL,
         false},
        {"--tie", NULL, NX_ARG_FLAG, &tie, NULL, "output head tied to token_embd (default: preset's)", 0, 0, NULL, false},
        {"--untie", NULL, NX_ARG_FLAG, &untie, NULL, "a separate output head", 0, 0, NULL, false},
        {"--fuse-gate-up-exps", NULL, NX_ARG_FLAG, &o.fuse_gate_up, NULL,
         "MoE: one ffn_gate_up_exps tensor per layer (as llama.cpp's converter with that flag)", 0, 0, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
    };
    int rc = nx_args_parse(CMD,
                           "--preset P [--type T] [--seed N] [--no-mtp] [--layers N] [--vocab N] [--tie|--untie]\n"
                           "                     [--fuse-gate-up-exps] [-t THREADS] -o FILE\n\n"
                           "Writes a synthetic qwen35 / qwen35moe GGUF whose weights are a pure function of the seed.",
                           args, NX_ARGS_LEN(args), argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!o.preset || !out) return nx_usage_error(CMD, "--preset and -o are required (see nextn %s --help)", CMD);
    if (tie && untie) return nx_usage_error(CMD, "--tie and --untie exclude each other");
    nx_type t;
    if (!nx_type_from_name(type, &t)) return nx_usage_error(CMD, "unknown --type '%s'", type);
    if (vocab > UINT32_MAX) return nx_usage_error(CMD, "--vocab: %llu is above %u", (unsigned long long)vocab, UINT32_MAX);
    o.type = t;
    o.mtp = !no_mtp;
    o.tie = tie ? 1 : untie ? 0 : -1;
    o.n_vocab = (uint32_t)vocab;
    o.n_layers = (uint32_t)layers;
    nx_err err;
    nx_pool *pool = nx_pool_create(threads, &err);
    if (!pool) {
        nx_cli_report("mkmodel", err.msg, flags);
        return 1;
    }
    double t0 = nx_time_s();
    nx_cli_progress pr;
    nx_cli_progress_init(&pr, "mkmodel", "tensor", "MB", false);
    nx_cli_progress_plain(&pr);
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
