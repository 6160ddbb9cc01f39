/* cmd_eval.c - `nextn eval`: decode a token list and dump every row's logits, for parity work.
 *
 * The dump is raw little-endian float32, row-major [n_tokens][n_vocab], no header: row i holds
 * the logits after token i (i.e. the prediction of token i+1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn.h"

#define CMD "eval"

int cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *tokens_arg = NULL, *prompt = NULL, *out_path = NULL;
    int32_t n_batch = 128, n_threads = 0; /* 128 rows of logits: 127 MB at a 248k vocabulary */
    int kv_choice = 0, k_choice = -1, v_choice = -1;
    bool no_huge_reread = false;
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--tokens", NULL, NX_ARG_STRING, &tokens_arg, "IDS", "input token ids, e.g. 1,2,3", 0, 0, NULL, false},
        {"--prompt", "-p", NX_ARG_STRING, &prompt, "TEXT", "input text (tokenized with BOS if the vocab wants it)", 0, 0, NULL, false},
        {"--dump-logits", "-o", NX_ARG_STRING, &out_path, "OUT", "write float32 logits [n_tokens][n_vocab] here (required)", 0, 0, NULL, false},
        {"--batch-size", "-b", NX_ARG_INT, &n_batch, "N", "tokens per forward call (default 128)", 1, 1 << 20, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &n_threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        NX_CLI_LOAD_ARGS(no_huge_reread),
    };
    int rc = nx_args_parse(CMD, "-m FILE (--tokens IDS | -p TEXT) --dump-logits OUT [-b N]", args, NX_ARGS_LEN(args),
                           argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path) return nx_usage_error(CMD, "missing -m FILE (the model)");
    if (!tokens_arg == !prompt) return nx_usage_error(CMD, "give exactly one of --tokens IDS or -p TEXT");
    if (!out_path) return nx_usage_error(CMD, "missing --dump-logits OUT");

    int32_t *ids = NULL, n = 0;
    if (tokens_arg) {
        char msg[256];
        if (!nx_parse_token_list(tokens_arg, &ids, &n, msg, sizeof msg)) return nx_usage_error(CMD, "--tokens: %s", msg);
    }
    nextn_model *model = NULL;
    nextn_context *ctx = NULL;
    int32_t *pos = NULL;
    int8_t *want = NULL;
    FILE *out = NULL;
    nextn_error err;
    int status = 1;
    if (!nx_cli_load_model(CMD, model_path, false, no_huge_reread, &model)) goto done;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    if (prompt) {
        nextn_tokenizer *tok = nextn_model_tokenizer(model);
        if (!tok) {
            fprintf(stderr, "nextn %s: %s has no tokenizer: give the input as --tokens IDS\n", CMD, model_path);
            goto done;
        }
        size_t len = strlen(prompt);
        if (!nextn_tokenize(tok, prompt, len, true, false, NULL, 0, &n, &err) ||
            !(ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids)) ||
            !nextn_tokenize(tok, prompt, len, true, false, ids, n, &n, &err)) {
            fprintf(stderr, "nextn %s: tokenizing the prompt: %s\n", CMD, err.msg);
            goto done;
        }
        if (n == 0) {
            fprintf(stderr, "nextn %s: the prompt is empty (0 tokens)\n", CMD);
            goto done;
        }
    }
    if (!nx_cli_check_ids(CMD, tokens_arg ? "--tokens" : "prompt", ids, n, info.n_vocab)) goto done;

    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = n;
    cp.n_seq = 1;
    cp.n_threads = n_threads;
    nx_cli_kv_types(kv_choice, k_choice, v_choice, &cp);
    if (!nx_cli_create_context(CMD, model, &cp, &ctx)) goto done;
    if (n_batch > n) n_batch = n;
    pos = malloc((size_t)n_batch * sizeof *pos);
    want = malloc((size_t)n_batch);
    if (!pos || !want) {
        fprintf(stderr, "nextn %s: out of memory\n", CMD);
        goto done;
    }
    memset(want, 1, (size_t)n_batch);
    out = fopen(out_path, "wb");
    if (!out) {
        fprintf(stderr, "nextn %s: cannot create '%s': %s\n", CMD, out_path, strerror(errno));
        goto done;
    }
    double t0 = nx_cli_time_s();
    for (int32_t start = 0; start < n; start += n_batch) {
        int32_t len = n - start < n_batch ? n - start : n_batch;
        for (int32_t i = 0; i < len; i++) pos[i] = start + i;
        nextn_batch b = {.n_tokens = len, .token = ids + start, .pos = pos, .seq_id = NULL, .logits = want};
        if (!nextn_decode(ctx, &b, &err)) {
            nx_cli_report(CMD, err.msg, NULL);
            goto done;
        }
        for (int32_t i = 0; i < len; i++) {
            const float *row = nextn_get_logits(ctx, i);
            if (!row || fwrite(row, sizeof *row, (size_t)info.n_vocab, out) != (size_t)info.n_vocab) {
                fprintf(stderr, "nextn %s: %s '%s'\n", CMD, row ? "write error on" : "no logits for a row of", out_path);
                goto done;
            }
        }
    }
    double secs = nx_cli_time_s() - t0;
    if (fclose(out) != 0) {
        out = NULL;
        fprintf(stderr, "nextn %s: write error on '%s': %s\n", CMD, out_path, strerror(errno));
        goto done;
    }
    out = NULL;
    printf("eval: %d tokens x %d vocab -> %s (%.3f s, %.2f tokens/s)\n", n, info.n_vocab, out_path, secs,
           secs > 0 ? n / secs : 0.0);
    status = 0;
done:
    if (out) {
        fclose(out);
        remove(out_path); /* never leave a truncated dump behind */
    }
    free(pos);
    free(want);
    free(ids);
    nextn_context_free(ctx);
    nextn_model_free(model);
    return status;
}
