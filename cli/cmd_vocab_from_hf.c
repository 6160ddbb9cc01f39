/* cmd_vocab_from_hf.c - `nextn vocab-from-hf`: a GGUF holding only the tokenizer of a Hugging
 * Face model, written as llama.cpp's converter would (rules in src/hf_tokenizer.h).
 *
 *   nextn vocab-from-hf TOKENIZER_JSON [TOKENIZER_CONFIG_JSON [CONFIG_JSON]] -o OUT.gguf
 */
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"
#include "convert/hf_tokenizer.h"

static void usage(FILE *f) {
    fprintf(f, "usage: nextn vocab-from-hf tokenizer.json [tokenizer_config.json [config.json]] -o OUT.gguf\n"
               "  writes tokenizer.ggml.* (tokens, token types, merges, pre, special ids, add_bos/eos)\n"
               "  and tokenizer.chat_template, as llama.cpp's convert_hf_to_gguf.py does\n");
}

int cmd_vocab_from_hf(int argc, char **argv) {
    const char *in[3] = {NULL, NULL, NULL}, *out = NULL;
    int n_in = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "nextn vocab-from-hf: -o needs a file name\n");
                return 2;
            }
            out = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "nextn vocab-from-hf: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (n_in < 3) {
            in[n_in++] = argv[i];
        } else {
            fprintf(stderr, "nextn vocab-from-hf: too many input files\n");
            return 2;
        }
    }
    if (!in[0] || !out) {
        usage(stderr);
        return 2;
    }
    nx_err err;
    nx_hf_vocab v;
    if (!nx_hf_vocab_load(&v, in[0], in[1], in[2], &err)) {
        nx_cli_report("vocab-from-hf", err.msg, NULL);
        return 1;
    }
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    bool ok = w && nx_gguf_add_str(w, "general.name", "tokenizer", &err) && nx_hf_vocab_add_to_gguf(&v, w, &err) &&
              nx_gguf_writer_write(w, out, &err);
    if (ok)
        printf("%s: %u tokens, %u merges, pre '%s'\n", out, v.n_tokens, v.n_merges, v.pre);
    else
        nx_cli_report("vocab-from-hf", err.msg, NULL);
    nx_gguf_writer_free(w);
    nx_hf_vocab_free(&v);
    return ok ? 0 : 1;
}
