/* cmd_bench.c - `nextn bench`: prefill (pp) and decode (tg) speed like llama-bench.
 *
 * pp N: one batch of N random tokens on an empty sequence; tg N: N single-token decodes on an
 * empty sequence (no sampling, random tokens), as llama-bench measures them.  One warm-up
 * (pp once, one tg token) precedes the timed repetitions; the sequence is cleared before each.
 * -d D (llama-bench's --n-depth): every timed run starts after D tokens of context instead of
 * on an empty sequence - pp N then covers positions D..D+N-1 and tg N decodes at D..D+N-1.  The
 * D-token prefill (one batch of different random tokens) is not timed: it runs once into a
 * second sequence, which is copied (attention cache and recurrent state) into the measured one
 * before each run, as llama-bench restores its saved depth state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn.h"

#define CMD "bench"

/* Random token ids in [0, n_vocab) from a fixed splitmix sequence (the values do not matter
 * for speed, only that they are not all the same row). */
static void random_tokens(int32_t *ids, int32_t n, int32_t n_vocab, uint64_t seed) {
    uint64_t x = seed;
    for (int32_t i = 0; i < n; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        ids[i] = (int32_t)((z ^ (z >> 31)) % (uint64_t)n_vocab);
    }
}

/* Sequence 0 empty (depth 0), or holding the depth context of sequence 1. */
static bool reset(nextn_context *ctx, int32_t depth) {
    nextn_error err;
    if (!nextn_seq_clear(ctx, 0, &err) || (depth > 0 && !nextn_seq_copy(ctx, 1, 0, &err))) {
        nx_cli_report(CMD, err.msg, NULL);
        return false;
    }
    return true;
}

/* Seconds for one prefill of n tokens after depth tokens. */
static bool run_pp(nextn_context *ctx, const int32_t *ids, int32_t n, int32_t depth, double *secs) {
    if (!reset(ctx, depth)) return false;
    int32_t row;
    double t0 = nx_cli_time_s();
    if (!nx_cli_prefill(CMD, ctx, ids, n, 0, depth, n, &row)) return false;
    *secs = nx_cli_time_s() - t0;
    return true;
}

/* Seconds for n single-token decodes after depth tokens. */
static bool run_tg(nextn_context *ctx, const int32_t *ids, int32_t n, int32_t depth, double *secs) {
    if (!reset(ctx, depth)) return false;
    double t0 = nx_cli_time_s();
    for (int32_t i = 0; i < n; i++) {
        const int32_t pos = depth + i;
        nextn_batch b = {.n_tokens = 1, .token = ids + i, .pos = &pos, .seq_id = NULL, .logits = NULL};
        nextn_error err;
        if (!nextn_decode(ctx, &b, &err)) {
            nx_cli_report(CMD, err.msg, NULL);
            return false;
        }
    }
    *secs = nx_cli_time_s() - t0;
    return true;
}

static void print_row(const char *name, int32_t n, int32_t depth, const double *secs, int reps) {
    double *tps = malloc((size_t)reps * sizeof *tps);
    if (!tps) return;
    for (int r = 0; r < reps; r++) tps[r] = secs[r] > 0 ? n / secs[r] : 0.0;
    double med, lo, hi;
    nx_cli_stats(tps, reps, &med, &lo, &hi);
    char test[32];
    if (depth > 0) snprintf(test, sizeof test, "%s%d@d%d", name, n, depth);
    else snprintf(test, sizeof test, "%s%d", name, n);
    printf("%-12s %8d %5d %12.2f %12.2f %12.2f\n", test, n, reps, med, lo, hi);
    free(tps);
}

int cmd_bench(int argc, char **argv) {
    /* `bench --spec mtp`: plain vs speculative decoding is measured by spec-bench */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--spec")) {
            if (strcmp(argv[i + 1], "mtp") != 0) return nx_usage_error(CMD, "--spec: expected 'mtp'");
            for (int j = i; j + 2 < argc; j++) argv[j] = argv[j + 2];
            return cmd_spec_bench(argc - 2, argv);
        }
    const char *model_path = NULL;
    int32_t n_prompt = 512, n_gen = 128, reps = 5, n_threads = 0, depth = 0;
    int kv_choice = 0, k_choice = -1, v_choice = -1;
    bool no_huge_reread = false;
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--n-prompt", "-p", NX_ARG_INT, &n_prompt, "N", "prefill test: tokens in one batch, 0 skips (default 512)", 0, 1 << 20, NULL, false},
        {"--n-gen", "-n", NX_ARG_INT, &n_gen, "N", "decode test: single-token steps, 0 skips (default 128)", 0, 1 << 20, NULL, false},
        {"--n-depth", "-d", NX_ARG_INT, &depth, "N", "context depth: each test starts after N tokens (default 0)", 0, 1 << 20, NULL, false},
        {"--repetitions", "-r", NX_ARG_INT, &reps, "N", "timed runs per test (default 5)", 1, 1000, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &n_threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        NX_CLI_LOAD_ARGS(no_huge_reread),
    };
    int rc = nx_args_parse(CMD,
                           "-m FILE [-p 512] [-n 128] [-d 0] [-r 5] [-t N]\n"
                           "       nextn bench --spec mtp -m FILE [spec-bench options]\n\n"
                           "Prefill (pp) and decode (tg) speed, as llama-bench measures it.\n"
                           "--spec mtp runs `nextn spec-bench` instead: plain vs MTP speculative decoding (speed,\n"
                           "acceptance, verify cost) with spec-bench's options (see nextn spec-bench --help).",
                           args, NX_ARGS_LEN(args), argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path) return nx_usage_error(CMD, "missing -m FILE (the model)");
    if (n_prompt == 0 && n_gen == 0) return nx_usage_error(CMD, "nothing to measure: -p and -n are both 0");

    nextn_model *model = NULL;
    nextn_context *ctx = NULL;
    int32_t *ids = NULL;
    double *secs = NULL;
    int status = 1;
    if (!nx_cli_load_model(CMD, model_path, false, no_huge_reread, &model)) goto done;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    nextn_context_params cp = nextn_context_default_params();
    if ((int64_t)depth + (n_prompt > n_gen ? n_prompt : n_gen) > (1 << 20))
        return nx_usage_error(CMD, "-d %d plus the longest test is over %d positions", depth, 1 << 20);
    cp.n_ctx = depth + (n_prompt > n_gen ? n_prompt : n_gen);
    cp.n_seq = depth > 0 ? 2 : 1; /* sequence 1 keeps the depth context */
    cp.n_threads = n_threads;
    nx_cli_kv_types(kv_choice, k_choice, v_choice, &cp);
    if (!nx_cli_create_context(CMD, model, &cp, &ctx)) goto done;
    int32_t n_ids = depth + (n_prompt > n_gen ? n_prompt : n_gen);
    ids = malloc((size_t)n_ids * sizeof *ids);
    secs = malloc((size_t)reps * sizeof *secs);
    if (!ids || !secs) {
        fprintf(stderr, "nextn %s: out of memory\n", CMD);
        goto done;
    }
    random_tokens(ids, n_ids, info.n_vocab, 1234);

    printf("model: %s (%.1f MiB weights, n_vocab %d, n_embd %d, n_layer %d), threads %d\n", model_path,
           info.weight_bytes / NX_MIB, info.n_vocab, info.n_embd, info.n_layer, nextn_n_threads(ctx));
    if (info.n_expert > 0)
        printf("mixture of experts: %d of %d experts per token, %.1f MiB of weights read per token\n",
               info.n_expert_used, info.n_expert, info.active_bytes / NX_MIB);
    char pages[128];
    nx_cli_weights_pages(pages, sizeof pages, info.huge_mapped_bytes, info.file_bytes, info.huge_reread, no_huge_reread);
    printf("%s\n", pages);
    double warm;
    if ((n_prompt > 0 && !run_pp(ctx, ids, n_prompt, 0, &warm)) || (n_gen > 0 && !run_tg(ctx, ids, 1, 0, &warm)))
        goto done;
    /* the depth context: tokens after the measured ones' (n_ids = depth + the longest test) */
    const int32_t *measured = ids, *context = ids + (n_ids - depth);
    if (depth > 0) {
        int32_t row;
        nextn_error err;
        double t0 = nx_cli_time_s();
        if (!nextn_seq_clear(ctx, 1, &err)) { nx_cli_report(CMD, err.msg, NULL); goto done; }
        if (!nx_cli_prefill(CMD, ctx, context, depth, 1, 0, depth, &row)) goto done;
        printf("depth: %d tokens of context before every test (prefilled once in %.2f s, not timed)\n", depth,
               nx_cli_time_s() - t0);
    }
    printf("%-12s %8s %5s %12s %12s %12s\n", "test", "tokens", "reps", "median t/s", "min t/s", "max t/s");
    if (n_prompt > 0) {
        for (int r = 0; r < reps; r++)
            if (!run_pp(ctx, measured, n_prompt, depth, &secs[r])) goto done;
        print_row("pp", n_prompt, depth, secs, reps);
        fflush(stdout);
    }
    if (n_gen > 0) {
        for (int r = 0; r < reps; r++)
            if (!run_tg(ctx, measured, n_gen, depth, &secs[r])) goto done;
        print_row("tg", n_gen, depth, secs, reps);
        /* weight bytes decoding reads per second at the median (the roofline yardstick) */
        double tps[64], med, lo, hi;
        const int n = reps < 64 ? reps : 64;
        for (int r = 0; r < n; r++) tps[r] = secs[r] > 0 ? n_gen / secs[r] : 0.0;
        nx_cli_stats(tps, n, &med, &lo, &hi);
        printf("tg reads %.2f GB/s of weights at the median (%.1f MiB per token)\n",
               med * (double)info.active_bytes / 1e9, info.active_bytes / NX_MIB);
        /* every decoded token also reads and rewrites its sequence's whole recurrent state (conv
         * + delta state of every Gated DeltaNet layer): memory traffic on top of the weights */
        nextn_memory sm;
        nextn_context_memory(ctx, &sm);
        const double state = (double)sm.state_bytes / cp.n_seq;
        if (state > 0)
            printf("tg moves %.2f GB/s counting the recurrent state too (weights + %.1f MiB read + %.1f MiB "
                   "written per token)\n",
                   med * ((double)info.active_bytes + 2 * state) / 1e9, state / NX_MIB, state / NX_MIB);
    }
    if (depth > 0) printf("depth: the last test ended at position %d\n", nextn_n_past(ctx, 0));
    nextn_memory mem;
    nextn_context_memory(ctx, &mem);
    /* with -d, the context holds two sequences of n_ctx positions (the measured one and the
     * kept depth context): the line reports one, as a run of that length would use */
    printf("memory: weights %.1f MiB (mmapped), KV %.1f MiB, recurrent state %.1f MiB, scratch %.1f MiB%s\n",
           mem.weight_bytes / NX_MIB, mem.kv_bytes / cp.n_seq / NX_MIB, mem.state_bytes / cp.n_seq / NX_MIB,
           mem.scratch_bytes / NX_MIB, cp.n_seq > 1 ? " (per sequence of n_ctx positions)" : "");
    printf("peak RSS: %.1f MiB\n", nx_cli_peak_rss_bytes() / NX_MIB);
    status = 0;
done:
    free(ids);
    free(secs);
    nextn_context_free(ctx);
    nextn_model_free(model);
    return status;
}
