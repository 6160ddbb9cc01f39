/* main.c - `nextn <command> [args]`: dispatches to cli/cmd_*.c; `nextn --help`, `nextn --version`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "convert/quantize.h"
#include "nextn_internal.h"

/* written at every build by cmake/version.cmake (CMakeLists.txt, "command-line tool") */
extern const char nx_build_commit[], nx_build_type[];

/* `nextn version` / `nextn --version`: what a bug report needs - the version, the commit it was
 * built from, the build type and compiler, and the kernel level this CPU gets (NX_ISA lowers it). */
int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    const char *env = getenv("NX_ISA");
    printf("nextn %s\n", nextn_version());
    printf("commit: %s\n", nx_build_commit);
    printf("build:  %s\n", nx_build_type);
    printf("ISA:    %s%s%s%s\n", nx_isa_name(nx_cpu_isa()), env && *env ? " (NX_ISA=" : "", env && *env ? env : "",
           env && *env ? ")" : "");
    return 0;
}

static const nx_command commands[] = {
    {"version", cmd_version, "print the version, commit, build type and kernel ISA level (also --version)"},
    {"info", cmd_info, "show a GGUF file's metadata, tensors and totals"},
    {"gguf-sample", cmd_gguf_sample, "write a small synthetic GGUF (tests, demo)"},
    {"mkmodel", cmd_mkmodel, "write a synthetic qwen35 GGUF (seeded random weights, real shapes)"},
    {"tokenize", cmd_tokenize, "text -> token ids (or ids -> text) with a model's vocabulary"},
    {"vocab-from-hf", cmd_vocab_from_hf, "write a tokenizer-only GGUF from a Hugging Face tokenizer.json"},
    {"run", cmd_run, "generate text from a prompt (streams, prints speed and memory)"},
    {"chat", cmd_chat, "talk to a model in the terminal (multi-turn, line editor, /help for commands)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (completions, chat, streaming, parallel slots)"},
    {"bench", cmd_bench, "prefill and decode speed (pp / tg, like llama-bench; --spec mtp: speculative)"},
    {"eval", cmd_eval, "dump the logits of a token list (float32 [n_tokens][n_vocab])"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (llama-perplexity's method)"},
    {"convert", cmd_convert, "convert a Hugging Face Qwen3.5 checkpoint to GGUF"},
    {"spec-bench", cmd_spec_bench, "plain vs MTP speculative decoding: speed, acceptance, verify cost"},
    {"mtp-extract", cmd_mtp_extract, "write an mtp-only GGUF (MTP block + embeddings/norm/head) from a model"},
    {"draft-vocab", cmd_draft_vocab, "token frequencies of a text, for --draft-vocab (reduced MTP draft head)"},
    {"quantize", cmd_quantize, "re-quantise a GGUF with llama.cpp's rules (types below)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: nextn <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nquantize types: %s\n", nx_quant_mix_names());
    fprintf(f, "\n`nextn <command> --help` describes a command's options; `nextn --version` the build.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) return cmd_version(argc - 1, argv + 1);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "nextn: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
