/* cmd_convert.c - `nextn convert HF_DIR -o OUT.gguf [--type T] [--mtp | --no-mtp] [--force]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "convert/convert.h"
#include "nextn_internal.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: nextn convert HF_DIR -o OUT.gguf [--type f32|f16|bf16|q8_0] [--mtp | --no-mtp] [--force]\n"
            "                     [--fuse-gate-up-exps] [--name NAME] [-q]\n"
            "\n"
            "Converts a Hugging Face Qwen3.5 or Qwen3.5-MoE checkpoint folder (config.json, *.safetensors,\n"
            "tokenizer.json) to GGUF the way llama.cpp's convert_hf_to_gguf.py does.\n"
            "  --type T    weight type (default f16); norms, conv1d and 1-D tensors stay f32\n"
            "  --mtp       write only the MTP head (+ embeddings, output norm, head) as mtp-<OUT>.gguf\n"
            "  --no-mtp    leave the MTP head out\n"
            "  --fuse-gate-up-exps  MoE: one ffn_gate_up_exps tensor per layer instead of gate + up\n"
            "  --force     replace an existing output file\n"
            "  --name N    general.name (default: the folder name, title-cased like llama.cpp)\n"
            "  -q          no progress line (it is shown only when stderr is a terminal)\n");
}

int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *name = NULL, *type = "f16";
    bool force = false, quiet = false, fuse = false;
    nx_convert_mtp mtp = NX_CONVERT_MTP_EMBED;
    int n_mtp_flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if ((!strcmp(a, "-o") || !strcmp(a, "--outfile")) && i + 1 < argc) out = argv[++i];
        else if ((!strcmp(a, "--type") || !strcmp(a, "--outtype")) && i + 1 < argc) type = argv[++i];
        else if (!strcmp(a, "--name") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(a, "--mtp")) { mtp = NX_CONVERT_MTP_ONLY; n_mtp_flags++; }
        else if (!strcmp(a, "--no-mtp")) { mtp = NX_CONVERT_MTP_DROP; n_mtp_flags++; }
        else if (!strcmp(a, "--force")) force = true;
        else if (!strcmp(a, "--fuse-gate-up-exps")) fuse = true;
        else if (!strcmp(a, "-q")) quiet = true;
        else if (a[0] == '-') {
            fprintf(stderr, "nextn convert: unknown or incomplete option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (!in) in = a;
        else {
            fprintf(stderr, "nextn convert: unexpected argument '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!in || !out) {
        fprintf(stderr, "nextn convert: need HF_DIR and -o OUT.gguf\n\n");
        usage(stderr);
        return 2;
    }
    if (n_mtp_flags > 1) {
        fprintf(stderr, "nextn convert: --mtp and --no-mtp exclude each other\n");
        return 2;
    }
    nx_type t;
    if (!nx_type_from_name(type, &t) ||
        (t != NX_TYPE_F32 && t != NX_TYPE_F16 && t != NX_TYPE_BF16 && t != NX_TYPE_Q8_0)) {
        fprintf(stderr, "nextn convert: --type '%s' not supported (f32, f16, bf16, q8_0)\n", type);
        return 2;
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
        fprintf(stderr, "nextn convert: %s is a directory; -o wants the output file name\n", path);
        return 2;
    }
    if (!force && stat(path, &sb) == 0) {
        fprintf(stderr, "nextn convert: %s exists (use --force to replace it)\n", path);
        return 1;
    }
    nx_cli_progress ps;
    nx_cli_progress_init(&ps, "convert", "tensor", "MB", quiet);
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
