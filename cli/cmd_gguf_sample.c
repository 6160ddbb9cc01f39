/* cmd_gguf_sample.c - `nextn gguf-sample OUT.gguf`: writes a small synthetic GGUF with every kind
 * of metadata value and a few tensors of several types (used by `make demo`, the shell tests, the
 * fuzz seed corpus and the llama.cpp compatibility check in docs/gguf.md).  Its contents are
 * deterministic, so tests can state exactly what `nextn info` must print for it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"

#define N_TOKENS 1000   /* --small: 8 */
#define EMBD 64

/* f32 tensor contents produced on demand (exercises the writer's streaming path). */
static bool fill_embd(void *user, void *dst, uint64_t nbytes, nx_err *err) {
    (void)user; (void)err;
    float *f = dst;
    for (uint64_t i = 0; i < nbytes / 4; i++) f[i] = (float)sin(0.01 * (double)i);
    return true;
}

#define CMD "gguf-sample"

int cmd_gguf_sample(int argc, char **argv) {
    uint64_t version = 3, alignment = 0;
    bool small = false;
    const char *out = NULL;
    nx_arg_list pos = {&out, 0, 1, false};
    nx_arg args[] = {
        {"--version", NULL, NX_ARG_U64, &version, "2|3", "GGUF version (default 3)", 0, 0, NULL, false},
        {"--alignment", NULL, NX_ARG_U64, &alignment, "N", "general.alignment (default: none, i.e. 32)", 0, 0, NULL, false},
        {"--small", NULL, NX_ARG_FLAG, &small, NULL, "8 tokens instead of 1000 (a few KB, for fuzz seeds)", 0, 0, NULL, false},
    };
    int rc = nx_args_parse_pos(CMD,
                               "[--version 2|3] [--alignment N] [--small] OUT.gguf\n\n"
                               "Writes a small synthetic GGUF (all metadata value types, f32/f16/q8_0/q4_K tensors).",
                               args, NX_ARGS_LEN(args), argc, argv, &pos);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!out) return nx_usage_error(CMD, "need OUT.gguf (see nextn %s --help)", CMD);
    const uint64_t n_tokens = small ? 8 : N_TOKENS;

    nx_err err;
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    if (!w) { nx_cli_report(CMD, err.msg, NULL); return 1; }
    static char tok_buf[N_TOKENS][16];
    static const char *toks[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++) {
        if (i == 0) snprintf(tok_buf[i], sizeof tok_buf[i], "!");
        else if (i == 1) snprintf(tok_buf[i], sizeof tok_buf[i], "\"");
        else snprintf(tok_buf[i], sizeof tok_buf[i], "tok%d", i);
        toks[i] = tok_buf[i];
    }
    static int32_t types[N_TOKENS];
    for (int i = 0; i < N_TOKENS; i++) types[i] = i < 990 ? 1 : 3;
    static const float scores[4] = {0.0f, -1.5f, 2.25f, -1e9f};
    static const uint8_t flags[3] = {1, 0, 1};
    static uint16_t f16_one[EMBD];
    for (int i = 0; i < EMBD; i++) f16_one[i] = 0x3c00; /* 1.0 in binary16 */
    static float norm[EMBD];
    for (int i = 0; i < EMBD; i++) norm[i] = 1.0f + (float)i / 64.0f;
    static uint8_t q8[EMBD * EMBD / 32 * 34], q4k[256 * 8 / 256 * 144]; /* zero blocks: valid, dequantise to 0 */
    const uint64_t ne_embd[2] = {EMBD, n_tokens}, ne_norm[1] = {EMBD}, ne_q8[2] = {EMBD, EMBD},
                   ne_q4k[2] = {256, 8}, ne_f16[3] = {16, 2, 2};

    bool ok = nx_gguf_writer_set_version(w, (uint32_t)version, &err) &&
              (alignment == 0 || nx_gguf_add_u32(w, "general.alignment", (uint32_t)alignment, &err)) &&
              nx_gguf_add_str(w, "general.architecture", "nextn-sample", &err) &&
              nx_gguf_add_str(w, "general.name", "nextn sample file \"tiny\"", &err) &&
              nx_gguf_add_u8(w, "sample.u8", 200, &err) && nx_gguf_add_i8(w, "sample.i8", -100, &err) &&
              nx_gguf_add_u16(w, "sample.u16", 60000, &err) && nx_gguf_add_i16(w, "sample.i16", -30000, &err) &&
              nx_gguf_add_u32(w, "sample.block_count", 2, &err) && nx_gguf_add_i32(w, "sample.i32", -123456, &err) &&
              nx_gguf_add_u64(w, "sample.u64", 18446744073709551615ull, &err) &&
              nx_gguf_add_i64(w, "sample.i64", -9000000000ll, &err) &&
              nx_gguf_add_f32(w, "sample.rms_eps", 1e-6f, &err) && nx_gguf_add_f64(w, "sample.f64", 0.1, &err) &&
              nx_gguf_add_bool(w, "sample.flag", true, &err) &&
              nx_gguf_add_arr(w, "sample.scores", NX_GGUF_FLOAT32, scores, 4, &err) &&
              nx_gguf_add_arr(w, "sample.flags", NX_GGUF_BOOL, flags, 3, &err) &&
              nx_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", &err) &&
              nx_gguf_add_arr_str(w, "tokenizer.ggml.tokens", toks, n_tokens, &err) &&
              nx_gguf_add_arr(w, "tokenizer.ggml.token_type", NX_GGUF_INT32, types, n_tokens, &err) &&
              nx_gguf_add_tensor_fn(w, "token_embd.weight", 0, 2, ne_embd, fill_embd, NULL, &err) &&
              nx_gguf_add_tensor(w, "output_norm.weight", 0, 1, ne_norm, norm, &err) &&
              nx_gguf_add_tensor(w, "blk.0.attn_q.weight", 8, 2, ne_q8, q8, &err) &&
              nx_gguf_add_tensor(w, "blk.1.ffn_up.weight", 12, 2, ne_q4k, q4k, &err) &&
              nx_gguf_add_tensor(w, "blk.1.small.weight", 1, 3, ne_f16, f16_one, &err) &&
              nx_gguf_writer_write(w, out, &err);
    nx_gguf_writer_free(w);
    if (!ok) { nx_cli_report(CMD, err.msg, NULL); return 1; }
    return 0;
}
