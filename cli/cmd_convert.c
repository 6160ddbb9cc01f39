/* cmd_convert.c - `nextn convert HF_DIR -o OUT.gguf [--type T] [--mtp | --no-mtp] [--force]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "convert/convert.h"
#include "nextn_internal.h"

#define CMD "convert"

int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *name = NULL, *type = "f16";
    bool force = false, quiet = false, fuse = false, mtp_only = false, no_mtp = false;
    nx_arg_list pos = {&in, 0, 1, false};
    nx_arg args[] = {
        {"--outfile", "-o", NX_ARG_STRING, &out, "OUT.gguf", "output file (required)", 0, 0, NULL, false},
        {"--type", "--outtype", NX_ARG_STRING, &type, "T", "weight type: f32 f16 bf16 q8_0 (default f16); norms, conv1d, 1-D stay f32", 0, 0, NULL, false},
        {"--mtp", NULL, NX_ARG_FLAG, &mtp_only, NULL, "write only the MTP head (+ embeddings, output norm, head) as mtp-<OUT>.gguf", 0, 0, NULL, false},
        {"--no-mtp", NULL, NX_ARG_FLAG, &no_mtp, NULL, "leave the MTP head out", 0, 0, NULL, false},
        {"--fuse-gate-up-exps", NULL, NX_ARG_FLAG, &fuse, NULL, "MoE: one ffn_gate_up_exps tensor per layer instead of gate + up", 0, 0, NULL, false},
        {"--force", NULL, NX_ARG_FLAG, &force, NULL, "replace an existing output file", 0, 0, NULL, false},
        {"--name", NULL, NX_ARG_STRING, &name, "NAME", "general.name (default: the folder name, title-cased like llama.cpp)", 0, 0, NULL, false},
        {"--quiet", "-q", NX_ARG_FLAG, &quiet, NULL, "no progress line (it is shown only when stderr is a terminal)", 0, 0, NULL, false},
    };
    int rc = nx_args_parse_pos(CMD,
                               "HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0] [--mtp | --no-mtp] [--force]\n"
                               "                     [--fuse-gate-up-exps] [--name NAME] [-q]\n\n"
                               "Converts a Hugging Face Qwen3.5 or Qwen3.5-MoE checkpoint folder (config.json, *.safetensors,\n"
                               "tokenizer.json) to GGUF the way llama.cpp's convert_hf_to_gguf.py does.",
                               args, NX_ARGS_LEN(args), argc, argv, &pos);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!in || !out) return nx_usage_error(CMD, "need HF_DIR and -o OUT.gguf (see nextn %s --help)", CMD);
    if (mtp_only && no_mtp) return nx_usage_error(CMD, "--mtp and --no-mtp exclude each other");
    const nx_convert_mtp mtp = mtp_only ? NX_CONVERT_MTP_ONLY : no_mtp ? NX_CONVERT_MTP_DROP : NX_CONVERT_MTP_EMBED;
    nx_type t;
    if (!nx_type_from_name(type, &t) ||
        (t != NX_TYPE_F32 && t != NX_TYPE_F16 && t != NX_TYPE_BF16 && t != NX_TYPE_Q8_0)) {
        return nx_usage_error(CMD, "--type '%s' not supported (f32, f16, bf16, q8_0)", type);
    }
    /* --mtp: the draft-only file is named mtp-<name>.gguf next to the requested output. */
    char path[4096];
    snprintf(path, sizeof path, "%s", out);
    if (mtp == NX_CONVERT_MTP_ONLY) {
        const char *slash = strrchr(out, '/');
        const char *base = slash ? slash + 1 : out;
        if (strncmp(base, "mtp-", 4))
            snprintf(path, sizeof path, "%.*smtp-%s", (int)(base - out), out, base);
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        return nx_usage_error(CMD, "%s is a directory; -o wants the output file name", path);
    }
    if (!force && stat(path, &sb) == 0) {
        fprintf(stderr, "nextn convert: %s exists (use --force to replace it)\n", path);
        return 1;
    }
    nx_cli_progress ps;
    nx_cli_progress_init(&ps, "convert", "tensor", "MB", quiet);
    nx_cli_progress_plain(&ps);
    nx_convert_opts o = {.out_type = t, .mtp = mtp, .name = name, .fuse_gate_up_exps = fuse,
                         .progress = nx_cli_progress_tool, .progress_user = &ps};
    nx_err err;
    bool ok = nx_convert_hf(in, path, &o, &err);
    nx_cli_progress_end(&ps);
    if (!ok) {
        nx_cli_report("convert", err.msg, (const nx_cli_flag_name[]){{"mtp = NX_CONVERT_MTP_ONLY", "--mtp"}, {NULL, NULL}});
        return 1;
    }
    if (!quiet) fprintf(stderr, "nextn convert: wrote %s in %.2f s\n", path, nx_time_s() - ps.t0);
    return 0;
}
