/* cmd_perplexity.c - `nextn perplexity` with llama-perplexity's method, so figures compare:
 *
 *   tokens = tokenize(text, BOS if the vocab adds one); need >= 2 * n_ctx tokens
 *   chunks = floor(n_tokens / n_ctx) (or --chunks), each evaluated from an empty state; when
 *            the vocab adds BOS, a chunk's first token is replaced by BOS
 *   scored = positions first .. n_ctx-2 of each chunk, first = n_ctx / 2: the logits at
 *            position p are scored against the token at p + 1 (n_ctx - first - 1 per chunk)
 *   n_seq  = max(1, n_batch / n_ctx) chunks are decoded side by side as separate sequences;
 *            n_batch = min(n_batch, n_seq * n_ctx); a chunk longer than n_batch is decoded in
 *            ceil(n_ctx / n_batch) batches
 *   output = running "[i]ppl," after each chunk, then
 *            "Final estimate: PPL = exp(mean nll) +/- ppl * sqrt((E[nll^2] - mean^2) / (count - 1))"
 * (from tools/perplexity/perplexity.cpp, function perplexity(), read for the method only).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn.h"

#define CMD "perplexity"

/* -log softmax(logits)[target], in double. */
static double nll_of(const float *logits, int32_t n_vocab, int32_t target) {
    float mx = logits[0];
    for (int32_t i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) + mx - (double)logits[target];
}

int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *tokens_arg = NULL;
    int32_t n_ctx = 512, n_batch = 2048, n_threads = 0, n_chunks_max = -1;
    int kv_choice = 0, k_choice = -1, v_choice = -1;
    bool no_normalize = false, no_huge_reread = false;
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--file", "-f", NX_ARG_STRING, &text_path, "TEXT", "text file to score", 0, 0, NULL, false},
        {"--tokens", NULL, NX_ARG_STRING, &tokens_arg, "IDS", "score these token ids instead of a file (no BOS added)", 0, 0, NULL, false},
        {"--ctx-size", "-c", NX_ARG_INT, &n_ctx, "N", "chunk length in tokens, >= 3 (default 512)", 3, 1 << 20, NULL, false},
        {"--batch-size", "-b", NX_ARG_INT, &n_batch, "N", "tokens per forward call (default 2048)", 1, 1 << 22, NULL, false},
        {"--chunks", NULL, NX_ARG_INT, &n_chunks_max, "N", "score at most N chunks (default all)", -1, 1 << 30, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &n_threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        NX_CLI_LOAD_ARGS(no_huge_reread),
        {"--no-normalize", NULL, NX_ARG_FLAG, &no_normalize, NULL, "tokenize the text's bytes as given: skip the vocabulary's Unicode NFC step (as llama.cpp)", 0, 0, NULL, false},
    };
    int rc = nx_args_parse(CMD, "-m FILE -f TEXT [-c 512] [-b 2048]", args, NX_ARGS_LEN(args), argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path) return nx_usage_error(CMD, "missing -m FILE (the model)");
    if (!text_path == !tokens_arg) return nx_usage_error(CMD, "give exactly one of -f TEXT or --tokens IDS");
    if (n_chunks_max == 0) return nx_usage_error(CMD, "--chunks: 0 chunks scores nothing");

    int32_t *tokens = NULL, n_tokens = 0;
    if (tokens_arg) {
        char msg[256];
        if (!nx_parse_token_list(tokens_arg, &tokens, &n_tokens, msg, sizeof msg))
            return nx_usage_error(CMD, "--tokens: %s", msg);
    }
    nextn_model *model = NULL;
    nextn_context *ctx = NULL;
    char *text = NULL;
    int32_t *btok = NULL, *bpos = NULL, *bseq = NULL;
    int8_t *bout = NULL;
    double *seq_nll = NULL, *seq_nll2 = NULL;
    nextn_error err;
    int status = 1;
    size_t text_len = 0;
    if (text_path && !(text = nx_cli_read_file(CMD, text_path, &text_len))) goto done;
    nextn_model_params mp = nextn_model_default_params();
    mp.no_normalize = no_normalize;
    mp.no_huge_reread = no_huge_reread;
    if (!nx_cli_load_model_params(CMD, model_path, &mp, &model)) goto done;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    nextn_tokenizer *tok = nextn_model_tokenizer(model);
    bool add_bos = false;
    if (text) {
        if (!tok) {
            fprintf(stderr, "nextn %s: %s has no tokenizer: give the input as --tokens IDS\n", CMD, model_path);
            goto done;
        }
        add_bos = nextn_tokenizer_add_bos(tok) && nextn_token_bos(tok) >= 0;
        if (!nextn_tokenize(tok, text, text_len, true, false, NULL, 0, &n_tokens, &err) ||
            !(tokens = malloc((size_t)(n_tokens > 0 ? n_tokens : 1) * sizeof *tokens)) ||
            !nextn_tokenize(tok, text, text_len, true, false, tokens, n_tokens, &n_tokens, &err)) {
            fprintf(stderr, "nextn %s: tokenizing %s: %s\n", CMD, text_path, err.msg);
            goto done;
        }
    }
    if (!nx_cli_check_ids(CMD, "--tokens", tokens, n_tokens, info.n_vocab)) goto done;
    if (n_tokens < 2 * n_ctx) {
        fprintf(stderr, "nextn %s: need at least 2 * n_ctx = %d tokens for a context of %d, but %s has only %d "
                "(lower -c)\n", CMD, 2 * n_ctx, n_ctx, text ? text_path : "--tokens", n_tokens);
        goto done;
    }

    const int32_t n_chunk_all = n_tokens / n_ctx;
    const int32_t n_chunk = n_chunks_max < 0 || n_chunks_max > n_chunk_all ? n_chunk_all : n_chunks_max;
    /* llama's n_seq, capped at the number of chunks (more sequences would only cost memory) */
    int32_t n_seq = n_batch / n_ctx > 1 ? n_batch / n_ctx : 1;
    if (n_batch > n_seq * n_ctx) n_batch = n_seq * n_ctx;
    if (n_seq > n_chunk) n_seq = n_chunk;
    const int32_t n_batches = (n_ctx + n_batch - 1) / n_batch;
    const int32_t first = n_ctx / 2;
    fprintf(stderr, "nextn %s: %d tokens, %d chunks of n_ctx %d, n_batch %d, n_seq %d%s\n", CMD, n_tokens, n_chunk,
            n_ctx, n_batch, n_seq, add_bos ? ", BOS at each chunk start" : "");

    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = n_seq;
    cp.n_threads = n_threads;
    nx_cli_kv_types(kv_choice, k_choice, v_choice, &cp);
    if (!nx_cli_create_context(CMD, model, &cp, &ctx)) goto done;
    nextn_memory mem;
    nextn_context_memory(ctx, &mem);
    nx_cli_print_memory(CMD, &mem, &cp);

    btok = malloc((size_t)n_batch * sizeof *btok);
    bpos = malloc((size_t)n_batch * sizeof *bpos);
    bseq = malloc((size_t)n_batch * sizeof *bseq);
    bout = malloc((size_t)n_batch);
    seq_nll = calloc((size_t)n_seq, sizeof *seq_nll);
    seq_nll2 = calloc((size_t)n_seq, sizeof *seq_nll2);
    if (!btok || !bpos || !bseq || !bout || !seq_nll || !seq_nll2) {
        fprintf(stderr, "nextn %s: out of memory for a batch of %d\n", CMD, n_batch);
        goto done;
    }

    double nll = 0.0, nll2 = 0.0;
    int64_t count = 0;
    /* a live progress line when stderr is a terminal that the running values on stdout do not
     * share (they would be overwritten); the per-pass time and ETA line is printed anyway */
    nx_cli_progress prog;
    nx_cli_progress_init(&prog, CMD, "chunk", "tokens", isatty(STDOUT_FILENO));
    double t_start = nx_cli_time_s();
    for (int32_t i = 0; i < n_chunk; i += n_seq) {
        const int32_t start = i * n_ctx;
        const int32_t seqs = n_chunk - i < n_seq ? n_chunk - i : n_seq;
        for (int32_t s = 0; s < seqs; s++) {
            if (!nextn_seq_clear(ctx, s, &err)) {
                nx_cli_report(CMD, err.msg, NULL);
                goto done;
            }
            seq_nll[s] = seq_nll2[s] = 0.0;
        }
        for (int32_t j = 0; j < n_batches; j++) {
            const int32_t batch_pos0 = j * n_batch; /* position of the batch's first token in each chunk */
            const int32_t len = n_ctx - batch_pos0 < n_batch ? n_ctx - batch_pos0 : n_batch;
            int32_t nb = 0;
            for (int32_t s = 0; s < seqs; s++) {
                const int32_t chunk0 = start + s * n_ctx;
                for (int32_t k = 0; k < len; k++) {
                    const int32_t p = batch_pos0 + k;
                    btok[nb] = p == 0 && add_bos ? nextn_token_bos(tok) : tokens[chunk0 + p];
                    bpos[nb] = p;
                    bseq[nb] = s;
                    bout[nb] = p >= first;
                    nb++;
                }
            }
            nextn_batch b = {.n_tokens = nb, .token = btok, .pos = bpos, .seq_id = bseq, .logits = bout};
            if (!nextn_decode(ctx, &b, &err)) {
                fprintf(stderr, "nextn %s: chunk %d: %s\n", CMD, i + 1, err.msg);
                goto done;
            }
            /* score rows now (their logits live until the next decode) */
            for (int32_t r = 0; r < nb; r++) {
                const int32_t p = bpos[r];
                if (p < first || p > n_ctx - 2) continue;
                const float *row = nextn_get_logits(ctx, r);
                if (!row) {
                    fprintf(stderr, "nextn %s: no logits for row %d of chunk %d\n", CMD, r, i + 1);
                    goto done;
                }
                const double v = nll_of(row, info.n_vocab, tokens[start + bseq[r] * n_ctx + p + 1]);
                seq_nll[bseq[r]] += v;
                seq_nll2[bseq[r]] += v * v;
            }
        }
        if (i == 0) {
            const double t_pass = nx_cli_time_s() - t_start, eta = t_pass * (double)((n_chunk - 1) / n_seq);
            fprintf(stderr, "nextn %s: %.2f seconds per pass (%d chunks each), ETA %d:%02d\n", CMD, t_pass, n_seq,
                    (int)(eta / 60), (int)eta % 60);
        }
        nx_cli_progress_show(&prog, (uint64_t)(i + seqs), (uint64_t)n_chunk, (uint64_t)(i + seqs) * (uint64_t)n_ctx,
                             (uint64_t)n_chunk * (uint64_t)n_ctx, NULL, NULL);
        /* add the chunks of this group in order, printing the running value after each */
        for (int32_t s = 0; s < seqs; s++) {
            nll += seq_nll[s];
            nll2 += seq_nll2[s];
            count += n_ctx - first - 1;
            printf("[%d]%.4f,", i + s + 1, exp(nll / (double)count));
        }
        fflush(stdout);
    }
    nx_cli_progress_end(&prog);
    printf("\n");
    double mean = nll / (double)count, var = nll2 / (double)count - mean * mean;
    double ppl = exp(mean);
    if (var > 0 && count > 1) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, sqrt(var / (double)(count - 1)) * ppl);
    } else {
        printf("Final estimate: PPL = %.4f +/- nan\n", ppl);
        fprintf(stderr, "nextn %s: the spread of log-probabilities is zero or negative: no error estimate\n", CMD);
    }
    fprintf(stderr, "nextn %s: %lld tokens scored in %.2f s, peak memory (RSS) %.1f MiB\n", CMD, (long long)count,
            nx_cli_time_s() - t_start, nx_cli_peak_rss_bytes() / NX_MIB);
    status = 0;
done:
    free(btok), free(bpos), free(bseq), free(bout);
    free(seq_nll), free(seq_nll2);
    free(tokens);
    free(text);
    nextn_context_free(ctx);
    nextn_model_free(model);
    return status;
}
