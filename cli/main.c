/* main.c - `nextn <command> [args]`: dispatches to cli/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "commands.h"

#define NEXTN_VERSION "0.1.0"

int cmd_version(int argc, char **argv) {
    (void)argc; (void)argv;
    printf("nextn %s\n", NEXTN_VERSION);
    return 0;
}

static const nx_command commands[] = {
    {"version", cmd_version, "print the version"},
    {"info", cmd_info, "show a GGUF file's metadata, tensors and totals"},
    {"gguf-sample", cmd_gguf_sample, "write a small synthetic GGUF (tests, demo)"},
    {"mkmodel", cmd_mkmodel, "write a synthetic qwen35 GGUF (seeded random weights, real shapes)"},
    {"tokenize", cmd_tokenize, "text -> token ids (or ids -> text) with a model's vocabulary"},
    {"vocab-from-hf", cmd_vocab_from_hf, "write a tokenizer-only GGUF from a Hugging Face tokenizer.json"},
    {"run", cmd_run, "generate text from a prompt (streams, prints speed and memory)"},
    {"chat", cmd_chat, "talk to a model in the terminal (multi-turn, line editor, /help for commands)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (completions, chat, streaming, parallel slots)"},
    {"bench", cmd_bench, "prefill and decode speed (pp / tg, like llama-bench)"},
    {"eval", cmd_eval, "dump the logits of a token list (float32 [n_tokens][n_vocab])"},
    {"perplexity", cmd_perplexity, "perplexity of a text file (llama-perplexity's method)"},
    {"convert", cmd_convert, "convert a Hugging Face Qwen3.5 checkpoint to GGUF"},
    {"spec-bench", cmd_spec_bench, "plain vs MTP speculative decoding: speed, acceptance, verify cost"},
    {"mtp-extract", cmd_mtp_extract, "write an mtp-only GGUF (MTP block + embeddings/norm/head) from a model"},
    {"draft-vocab", cmd_draft_vocab, "token frequencies of a text, for --draft-vocab (reduced MTP draft head)"},
    {"quantize", cmd_quantize, "re-quantise a GGUF (q8_0, q4_0, q5_0, q6_k, q4_k_m; llama.cpp's rules)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: nextn <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n`nextn <command> --help` describes a command's options.\n");
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
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "nextn: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
