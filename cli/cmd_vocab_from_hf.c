/* cmd_vocab_from_hf.c - `nextn vocab-from-hf`: a GGUF holding only the tokenizer of a Hugging
 * Face model, written as llama.cpp's converter would (rules in src/convert/hf_tokenizer.h).
 *
 *   nextn vocab-from-hf TOKENIZER_JSON [TOKENIZER_CONFIG_JSON [CONFIG_JSON]] -o OUT.gguf
 */
#include <stdio.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"
#include "convert/hf_tokenizer.h"

#define CMD "vocab-from-hf"
#define SYNOPSIS "tokenizer.json [tokenizer_config.json [config.json]] -o OUT.gguf"

int cmd_vocab_from_hf(int argc, char **argv) {
    const char *in[3] = {NULL, NULL, NULL}, *out = NULL;
    nx_arg_list pos = {in, 0, 3, false};
    nx_arg args[] = {
        {"--output", "-o", NX_ARG_STRING, &out, "OUT.gguf", "output file (required)", 0, 0, NULL, false},
    };
    int rc = nx_args_parse_pos(CMD,
                               SYNOPSIS "\n\n"
                               "Writes tokenizer.ggml.* (tokens, token types, merges, pre, special ids, add_bos/eos)\n"
                               "and tokenizer.chat_template, as llama.cpp's convert_hf_to_gguf.py does.",
                               args, NX_ARGS_LEN(args), argc, argv, &pos);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!in[0] || !out) return nx_usage_error(CMD, "need tokenizer.json and -o (usage: nextn %s %s)", CMD, SYNOPSIS);
    nx_err err;
    nx_hf_vocab v;
    if (!nx_hf_vocab_load(&v, in[0], in[1], in[2], &err)) {
        nx_cli_report(CMD, err.msg, NULL);
        return 1;
    }
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    bool ok = w && nx_gguf_add_str(w, "general.name", "tokenizer", &err) && nx_hf_vocab_add_to_gguf(&v, w, &err) &&
              nx_gguf_writer_write(w, out, &err);
    if (ok)
        printf("%s: %u tokens, %u merges, pre '%s'\n", out, v.n_tokens, v.n_merges, v.pre);
    else
        nx_cli_report(CMD, err.msg, NULL);
    nx_gguf_writer_free(w);
    nx_hf_vocab_free(&v);
    return ok ? 0 : 1;
}
