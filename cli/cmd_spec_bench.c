/* cmd_spec_bench.c - `nextn spec-bench`: plain vs MTP speculative decoding on token-id prompts.
 *
 *   nextn spec-bench -m MODEL [--mtp-model FILE | --no-mtp] [--prompt-len N | --prompt ID,ID,...]
 *                    [-n N_GEN] [--seqs S] [--draft-max N] [--draft-min M] [--draft-p-min P]
 *                    [--no-adaptive] [--spec-oracle] [--temp T] [--seed S] [--runs R]
 *                    [--verify-cost] [--draft-vocab K [--draft-vocab-file FILE]] [-t THREADS]
 *                    [--kv TYPE] [--cache-type-k|-ctk TYPE] [--cache-type-v|-ctv TYPE]
 *
 * `nextn bench --spec mtp ...` lands here too (bench's -p/-n/-r/-t/--kv-type/-ctk/-ctv are
 * accepted).
 *
 * Each run decodes the same prompt(s) twice: plain (one row per sequence per step) and
 * speculative (MTP drafts verified in one target batch); prefill is not timed.  Printed: per run
 * and as medians, tokens/s of both, the speedup, draft acceptance, mean tokens per step and the
 * draft / verify / sampling time shares.  The two outputs must be identical, greedy and sampled
 * (a seeded draw is a function of the position, not of the draft length: docs/mtp.md); the command
 * checks it and fails otherwise.
 *
 * --spec-oracle: the draft tokens are replaced by the plain run's continuation (the MTP
 * passes still run and are timed), i.e. acceptance 100 %: the ceiling of the speedup that the
 * measured draft and verify costs allow.  Benchmark only.
 * --verify-cost: also times a target batch of k rows (k = 1 .. draft-max + 1) after the prompt
 * and prints each as a multiple of the 1-row decode (median of 15 repetitions, rolled back),
 * and the cost of one draft step (a 1-row MTP pass with logits, plus turning them into a
 * greedy draft token), with the whole vocabulary and, with --draft-vocab, with K tokens.
 * --draft-vocab K: the MTP head scores only K tokens (draft_vocab.h), from --draft-vocab-file
 * or the K lowest ids.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"

#define CMD "spec-bench"

/* --cpu-time: process CPU seconds instead of wall seconds.  On a shared, overloaded machine
 * wall time mostly measures the other tenants; CPU time of a single-threaded run (-t 1) is far
 * steadier (cache and memory-bandwidth contention still show). */
static double bench_clock(bool cpu) {
    if (!cpu) return nx_time_s();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double median(const double *v, int n) {
    double med, lo, hi;
    nx_cli_stats(v, n, &med, &lo, &hi);
    return med;
}

typedef struct options {
    const char *model, *mtp_model, *prompt_ids, *dv_file;
    bool no_mtp, oracle, verify_cost, cpu_time, no_adaptive, no_huge_reread;
    int32_t prompt_len, n_gen, seqs, draft_max, draft_min, runs, threads, draft_vocab;
    uint64_t seed;
    float p_min, temp;
    nx_kv_type kv, kv_v; /* K and V cache types (trunk and MTP head) */
} options;

typedef struct run_result {
    double tps, t_draft, t_verify, t_accept;
    nx_spec_stats st;
} run_result;

/* Decodes n_gen tokens per sequence through a driver; out[s][i] receives them. */
static bool decode(const options *o, nx_ctx *ctx, nx_mtp *mtp, const int32_t *prompt, int32_t n_prompt,
                   int32_t **oracle, int32_t **out, run_result *res, nx_err *err) {
    nx_spec_params sp = nx_spec_default_params();
    sp.draft_max = (int32_t)o->draft_max;
    sp.draft_min = (int32_t)o->draft_min;
    sp.draft_p_min = (float)o->p_min;
    sp.adaptive = !o->no_adaptive && !o->oracle;
    if (o->temp > 0) {
        sp.sampling = nx_sampler_default_params();
        sp.sampling.temp = (float)o->temp;
        sp.sampling.min_p = 0.0f;
        sp.sampling.penalty_last_n = 0;
    }
    sp.sampling.seed = o->seed;
    nx_spec *s;
    if (!nx_spec_create(&s, ctx, mtp, &sp, err)) return false;
    const int S = (int)o->seqs;
    const int32_t stride = (mtp ? sp.draft_max : 0) + 1; /* without MTP the driver drafts nothing */
    const int32_t *prompts[256];
    int32_t np[256], first[256], n_got[256], max_out[256];
    int32_t *buf = malloc((size_t)S * (size_t)stride * sizeof *buf);
    int32_t *n_out = malloc((size_t)S * sizeof *n_out);
    bool ok = buf && n_out;
    if (!ok) nx_fail(err, "out of memory");
    for (int i = 0; ok && i < S; i++) {
        prompts[i] = prompt;
        np[i] = n_prompt;
        if (oracle) ok = nx_spec_set_oracle(s, i, oracle[i], n_prompt + (int32_t)o->n_gen, err);
    }
    ok = ok && nx_spec_prefill(s, S, prompts, np, first, err);
    nx_spec_reset_stats(s);
    for (int i = 0; ok && i < S; i++) {
        out[i][0] = first[i];
        n_got[i] = 1;
    }
    double t0 = bench_clock(o->cpu_time);
    while (ok) {
        bool any = false;
        for (int i = 0; i < S; i++) {
            max_out[i] = (int32_t)o->n_gen - n_got[i];
            if (max_out[i] <= 0) nx_spec_set_active(s, i, false);
            any = any || max_out[i] > 0;
        }
        if (!any) break;
        ok = nx_spec_step(s, max_out, buf, n_out, err);
        for (int i = 0; ok && i < S; i++)
            for (int j = 0; j < n_out[i]; j++) out[i][n_got[i]++] = buf[i * stride + j];
    }
    double dt = bench_clock(o->cpu_time) - t0;
    if (ok) {
        res->st = *nx_spec_get_stats(s);
        res->tps = (double)res->st.emitted / dt;
        res->t_draft = res->st.t_draft;
        res->t_verify = res->st.t_verify;
        res->t_accept = res->st.t_accept;
    }
    nx_spec_free(s);
    free(buf);
    free(n_out);
    return ok;
}

static bool make_ctx(const options *o, const nx_model *m, int32_t n_ctx, int32_t n_snap, nx_pool *pool, nx_ctx **out,
                     nx_err *err) {
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq = (int32_t)o->seqs;
    p.n_snapshots = n_snap;
    p.kv_type = o->kv;
    p.kv_type_v = o->kv_v;
    return nx_ctx_create(out, m, &p, pool, err);
}

/* Times k-row target batches after the prompt (k = 1 .. R + 1), rolled back after each. */
static bool verify_cost(const options *o, const nx_model *m, const int32_t *prompt, int32_t n_prompt, nx_pool *pool,
                        nx_err *err) {
    const int R = (int)o->draft_max, REPS = 15;
    nx_ctx *c;
    if (!make_ctx(o, m, n_prompt + R + 2, R, pool, &c, err)) return false;
    int32_t pos[512], tok[64];
    bool ok = true;
    for (int32_t i = 0; i < n_prompt; i++) pos[i] = i;
    nx_batch pb = {n_prompt, prompt, pos, NULL, NULL};
    ok = nx_forward(c, &pb, err);
    nx_seq_ckpt ck = {0};
    ok = ok && nx_seq_ckpt_save(&ck, c, 0, err);
    double base = 0;
    printf("verify cost (1 sequence, after a %d-token prompt; median of %d):\n", n_prompt, REPS);
    for (int k = 1; ok && k <= R + 1; k++) {
        double t[32];
        for (int r = 0; ok && r < REPS; r++) {
            int8_t lg[64];
            for (int i = 0; i < k; i++) {
                tok[i] = prompt[(i * 7) % n_prompt];
                pos[i] = n_prompt + i;
                lg[i] = 1;
            }
            nx_batch b = {k, tok, pos, NULL, lg};
            double t0 = bench_clock(o->cpu_time);
            ok = nx_forward(c, &b, err);
            t[r] = bench_clock(o->cpu_time) - t0;
            /* back to the prompt's end (a checkpoint restore, outside the timed region) */
            nx_rewind_kind how;
            ok = ok && nx_ctx_seq_rewind(c, 0, n_prompt, &ck, prompt, &how, err);
        }
        if (!ok) break;
        double med = median(t, REPS);
        if (k == 1) base = med;
        printf("  %d row%s: %8.3f ms  = %.2fx a 1-row decode\n", k, k == 1 ? " " : "s", med * 1e3, med / base);
    }
    nx_seq_ckpt_free(&ck);
    nx_ctx_free(c);
    return ok;
}

/* Median seconds of one greedy draft step on `head` as it is configured now: a 1-row MTP pass
 * with logits after a mirrored prompt, then the token (the driver's path: K logits scattered
 * to their ids, the sampler over the whole vocabulary). */
static bool time_draft_step(const options *o, const nx_mtp_head *head, const int32_t *prompt, int32_t n_prompt,
                            nx_pool *pool, double *out, nx_err *err) {
    enum { REPS = 15 };
    const int32_t E = (int32_t)head->view.hp.n_embd, V = (int32_t)head->view.hp.n_vocab;
    nx_mtp *m = NULL;
    nx_sampler *smp = NULL;
    nx_sampler_params gp = nx_sampler_greedy_params();
    float *h = calloc((size_t)(n_prompt + 1) * (size_t)E, sizeof *h);
    float *full = malloc((size_t)V * sizeof *full);
    int32_t *pos = malloc((size_t)(n_prompt + 1) * sizeof *pos);
    bool ok = h && full && pos;
    if (!ok) nx_fail(err, "out of memory");
    ok = ok && nx_mtp_create(&m, head, n_prompt + 2, 1, o->kv, o->kv_v, pool, err) && nx_sampler_create(&smp, V, &gp, err);
    for (int32_t i = 0; ok && i <= n_prompt; i++) pos[i] = i;
    for (int32_t i = 0; ok && i < n_prompt * E; i++) h[i] = (float)((i * 37) % 17) - 8.0f; /* any hidden rows */
    for (int32_t i = 0; ok && i < V; i++) full[i] = -INFINITY;
    ok = ok && nx_mtp_forward(m, n_prompt, prompt, pos, NULL, h, NULL, err);
    double t[REPS];
    for (int r = 0; ok && r < REPS; r++) {
        const int8_t lg = 1;
        int32_t tok = prompt[r % n_prompt], d;
        double t0 = bench_clock(o->cpu_time);
        ok = nx_mtp_forward(m, 1, &tok, &pos[n_prompt], NULL, h, &lg, err);
        const float *row = ok ? nx_mtp_logits(m, 0) : NULL;
        const int32_t *ids = ok ? nx_mtp_logit_ids(m) : NULL;
        if (ids) {
            for (int32_t k = 0; k < nx_mtp_n_logits(m); k++) full[ids[k]] = row[k];
            row = full;
        }
        ok = ok && nx_sampler_sample(smp, row, &d, err);
        t[r] = bench_clock(o->cpu_time) - t0;
        ok = ok && nx_mtp_truncate(m, 0, n_prompt, err);
    }
    if (ok) *out = median(t, REPS);
    nx_sampler_free(smp);
    nx_mtp_free(m);
    free(h);
    free(full);
    free(pos);
    return ok;
}

/* The draft step with the whole vocabulary, then (ids != NULL) after restricting the head to
 * the K draft tokens; the head keeps the restriction. */
static bool draft_cost(const options *o, nx_mtp_head *head, const int32_t *ids, const int32_t *prompt,
                       int32_t n_prompt, nx_pool *pool, nx_err *err) {
    double full, red;
    if (!time_draft_step(o, head, prompt, n_prompt, pool, &full, err)) return false;
    printf("draft step (1-row MTP pass + greedy pick, median of 15): whole vocabulary (%u): %8.3f ms\n",
           head->view.hp.n_vocab, full * 1e3);
    if (!ids) return true;
    if (!nx_mtp_head_set_draft_vocab(head, ids, (int32_t)o->draft_vocab, err) ||
        !time_draft_step(o, head, prompt, n_prompt, pool, &red, err))
        return false;
    printf("draft step with --draft-vocab %d:%*s %8.3f ms  = %.2fx the whole-vocabulary step\n", o->draft_vocab,
           (int)(22 - snprintf(NULL, 0, "%d", o->draft_vocab)), "", red * 1e3, red / full);
    return true;
}

int cmd_spec_bench(int argc, char **argv) {
    options o = {.prompt_len = 32, .n_gen = 64, .seqs = 1, .draft_max = 3, .runs = 3, .seed = 1, .kv = NX_KV_F16,
                 .kv_v = NX_KV_F16};
    int kv_choice = 0, k_choice = -1, v_choice = -1;
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &o.model, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--mtp-model", NULL, NX_ARG_STRING, &o.mtp_model, "FILE", "MTP GGUF (default: the model's own, or mtp-*.gguf beside it)", 0, 0, NULL, false},
        {"--no-mtp", NULL, NX_ARG_FLAG, &o.no_mtp, NULL, "no MTP head: plain decoding only", 0, 0, NULL, false},
        {"--prompt-len", "-p", NX_ARG_INT, &o.prompt_len, "N", "random prompt of N token ids (default 32; seeded by --seed)", 1, 4096, NULL, false},
        {"--n-prompt", NULL, NX_ARG_INT, &o.prompt_len, "N", "the same (as `nextn bench` names it)", 1, 4096, NULL, false},
        {"--prompt", NULL, NX_ARG_STRING, &o.prompt_ids, "IDS", "prompt token ids, e.g. 12,7,9 (instead of a random one)", 0, 0, NULL, false},
        {"--n-gen", "-n", NX_ARG_INT, &o.n_gen, "N", "tokens to generate per sequence (default 64)", 1, 1 << 20, NULL, false},
        {"--seqs", NULL, NX_ARG_INT, &o.seqs, "S", "sequences decoded together in one batch (default 1)", 1, 256, NULL, false},
        {"--draft-max", NULL, NX_ARG_INT, &o.draft_max, "N", "max draft tokens per step (default 3)", 0, NEXTN_SPEC_MAX_DRAFT, NULL, false},
        {"--draft-min", NULL, NX_ARG_INT, &o.draft_min, "M", "drop drafts shorter than M (default 0)", 0, NEXTN_SPEC_MAX_DRAFT, NULL, false},
        {"--draft-p-min", NULL, NX_ARG_FLOAT, &o.p_min, "P", "stop drafting when the draft's top probability < P (default 0)", 0, 1, NULL, false},
        {"--no-adaptive", NULL, NX_ARG_FLAG, &o.no_adaptive, NULL, "always draft draft-max tokens (no cost model)", 0, 0, NULL, false},
        {"--spec-oracle", NULL, NX_ARG_FLAG, &o.oracle, NULL, "drafts = the plain run's continuation (the ceiling)", 0, 0, NULL, false},
        {"--temp", NULL, NX_ARG_FLOAT, &o.temp, "T", "sampling temperature (default 0 = greedy; T > 0 uses top-k 40, top-p 0.95)", 0, 100, NULL, false},
        {"--seed", NULL, NX_ARG_U64, &o.seed, "S", "sampling seed and random prompt (default 1)", 0, 0, NULL, false},
        {"--runs", "-r", NX_ARG_INT, &o.runs, "R", "repetitions; medians are reported (default 3)", 1, 101, NULL, false},
        {"--repetitions", NULL, NX_ARG_INT, &o.runs, "R", "the same (as `nextn bench` names it)", 1, 101, NULL, false},
        {"--verify-cost", NULL, NX_ARG_FLAG, &o.verify_cost, NULL, "also time k-row verify batches against a 1-row decode, and a draft step", 0, 0, NULL, false},
        {"--draft-vocab", NULL, NX_ARG_INT, &o.draft_vocab, "K", "the MTP head scores only K tokens; 0 = all (default: V/4 from <model>.draft-vocab.txt beside the model, else the V/4 lowest ids (merge rank) for 32768+ tokens, else all)", 0, INT32_MAX, NULL, false},
        {"--draft-vocab-file", NULL, NX_ARG_STRING, &o.dv_file, "FILE", "token frequencies (`nextn draft-vocab`) choosing them (default: lowest ids)", 0, 0, NULL, false},
        {"--cpu-time", NULL, NX_ARG_FLAG, &o.cpu_time, NULL, "process CPU seconds instead of wall seconds (with -t 1 on a shared machine)", 0, 0, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &o.threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        {"--kv", NULL, NX_ARG_CHOICE, &kv_choice, NX_CLI_KV_TYPES_HELP, "the same as --kv-type", 0, 0, nextn_kv_type_names(), false},
        NX_CLI_LOAD_ARGS(o.no_huge_reread),
    };
    int prc = nx_args_parse(CMD, "-m MODEL [--mtp-model FILE | --no-mtp] [--prompt-len N | --prompt IDS] [-n N] [options]",
                            args, NX_ARGS_LEN(args), argc, argv);
    if (prc == NX_ARGS_HELP) return 0;
    if (prc != NX_ARGS_OK) return 2;
    o.kv = (nx_kv_type)(k_choice >= 0 ? k_choice : kv_choice); /* the choices' indices are the types */
    o.kv_v = (nx_kv_type)(v_choice >= 0 ? v_choice : kv_choice);
    const bool dv_seen = nx_args_find(args, NX_ARGS_LEN(args), "--draft-vocab")->seen;
    if (!o.model) return nx_usage_error(CMD, "-m MODEL is required");
    if (o.no_mtp && o.mtp_model) return nx_usage_error(CMD, "--no-mtp and --mtp-model contradict each other");
    if (o.dv_file && !o.draft_vocab)
        return nx_usage_error(CMD, "--draft-vocab-file needs --draft-vocab K (how many tokens to keep)");
    if (o.draft_min > o.draft_max)
        return nx_usage_error(CMD, "--draft-min %d is larger than --draft-max %d", o.draft_min, o.draft_max);

    int rc = 1;
    nx_err err;
    nx_model *model = NULL;
    nx_mtp_head *head = NULL;
    nx_pool *pool = NULL;
    int32_t *prompt = NULL, **plain_out = NULL, **spec_out = NULL, **oracle_buf = NULL, *dv_ids = NULL;
    double *tp = NULL, *ts = NULL, *acc = NULL, *tps = NULL, *shd = NULL, *shv = NULL;
    const int S = (int)o.seqs, RUNS = (int)o.runs;
    if (!nx_model_open(&model, o.model, !o.no_mtp, &err)) goto fail;
    nx_model_prefault(model, !o.no_huge_reread); /* nx_model_load, with --no-huge-reread */
    if (!o.no_mtp) {
        char notice[256];
        if (!nx_mtp_head_open(&head, model, o.model, o.mtp_model, notice, sizeof notice, &err)) goto fail;
        if (!head) nx_cli_report(CMD, notice, NULL);
        else fprintf(stderr, "nextn " CMD ": MTP head from %s\n", head->source);
    } else {
        fprintf(stderr, "nextn " CMD ": --no-mtp: plain decoding only\n");
    }
    char dv_sibling[1024];
    bool dv_auto = false;
    if (head && !dv_seen && !o.dv_file) {
        if (!nx_draft_vocab_auto(o.model, model->hp.n_vocab, dv_sibling, sizeof dv_sibling, &o.draft_vocab, &err))
            goto fail;
        dv_auto = o.draft_vocab > 0;
        if (dv_auto) o.dv_file = dv_sibling;
        else o.draft_vocab = nx_draft_vocab_default_k(model->hp.n_vocab); /* merge rank, large vocabularies */
    }
    if (o.draft_vocab > 0 && head) {
        /* the K draft tokens; the head is restricted after the whole-vocabulary draft timing */
        uint64_t fp = 0;
        if (nx_gguf_find_kv(model->gguf, "tokenizer.ggml.model")) {
            nx_tokenizer *tk;
            if (!nx_tokenizer_from_gguf(&tk, model->gguf, &err)) goto fail;
            fp = nx_draft_vocab_fingerprint(tk);
            nx_tokenizer_free(tk);
        }
        dv_ids = malloc((size_t)o.draft_vocab * sizeof *dv_ids);
        if (!dv_ids) { nx_fail(&err, "out of memory"); goto fail; }
        if (!nx_draft_vocab_select(o.dv_file, model->hp.n_vocab, fp, (int32_t)o.draft_vocab, dv_ids, &err)) {
            if (dv_auto) nx_draft_vocab_auto_failed(&err);
            goto fail;
        }
        fprintf(stderr, "nextn " CMD ": draft vocabulary: %d tokens (%s%s%s)\n", o.draft_vocab,
                o.dv_file ? "most frequent in " : "the lowest ids", o.dv_file ? o.dv_file : "",
                dv_auto ? ", found beside the model; --draft-vocab 0 = all"
                : !dv_seen ? " = merge rank, the default for 32768+ tokens; --draft-vocab 0 = all" : "");
    } else if (o.draft_vocab > 0 && (uint64_t)o.draft_vocab > model->hp.n_vocab) {
        nx_fail(&err, "draft_vocab %d out of range (1..%u, the model's vocabulary)", o.draft_vocab, model->hp.n_vocab);
        goto fail;
    }
    pool = nx_pool_create((int)o.threads, &err);
    if (!pool) goto fail;
    /* prompt */
    int32_t n_prompt = 0;
    if (o.prompt_ids) {
        char msg[256];
        if (!nx_parse_token_list(o.prompt_ids, &prompt, &n_prompt, msg, sizeof msg)) {
            rc = nx_usage_error(CMD, "--prompt: %s", msg);
            goto fail_quiet;
        }
        if (n_prompt < 1 || n_prompt > 4096) {
            rc = nx_usage_error(CMD, "--prompt: %d token ids (1..4096)", n_prompt);
            goto fail_quiet;
        }
        if (!nx_cli_check_ids(CMD, "--prompt", prompt, n_prompt, (int32_t)model->hp.n_vocab)) {
            rc = 2;
            goto fail_quiet;
        }
    } else {
        prompt = malloc((size_t)o.prompt_len * sizeof *prompt);
        if (!prompt) { nx_fail(&err, "out of memory"); goto fail; }
        uint64_t x = o.seed * 0x9e3779b97f4a7c15ULL + 1;
        for (n_prompt = 0; n_prompt < o.prompt_len; n_prompt++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            prompt[n_prompt] = (int32_t)(x % (model->hp.n_vocab - 3)); /* no special tokens */
        }
    }
    const int32_t n_ctx = n_prompt + (int32_t)o.n_gen + (int32_t)o.draft_max + 2;
    plain_out = calloc((size_t)S, sizeof *plain_out);
    spec_out = calloc((size_t)S, sizeof *spec_out);
    tp = calloc((size_t)RUNS, sizeof *tp); ts = calloc((size_t)RUNS, sizeof *ts);
    acc = calloc((size_t)RUNS, sizeof *acc); tps = calloc((size_t)RUNS, sizeof *tps);
    shd = calloc((size_t)RUNS, sizeof *shd); shv = calloc((size_t)RUNS, sizeof *shv);
    if (!plain_out || !spec_out || !tp || !ts || !acc || !tps || !shd || !shv) { nx_fail(&err, "out of memory"); goto fail; }
    for (int i = 0; i < S; i++) {
        plain_out[i] = calloc((size_t)(n_prompt + o.n_gen + 32), sizeof **plain_out);
        spec_out[i] = calloc((size_t)(n_prompt + o.n_gen + 32), sizeof **spec_out);
        if (!plain_out[i] || !spec_out[i]) { nx_fail(&err, "out of memory"); goto fail; }
    }
    printf("model %s: %u layers, E %u, vocab %u; prompt %d tokens, %d generated x %d sequence%s, %d threads, %s, "
           "%s clock\n", o.model, model->hp.n_layer, model->hp.n_embd, model->hp.n_vocab, n_prompt, o.n_gen, S,
           S > 1 ? "s" : "", nx_pool_size(pool), o.temp > 0 ? "sampling" : "greedy", o.cpu_time ? "CPU" : "wall");
    char pages[128];
    nx_cli_weights_pages(pages, sizeof pages, model->huge_bytes, model->gguf->size, model->huge_reread, o.no_huge_reread);
    printf("%s\n", pages);
    if (o.verify_cost && !verify_cost(&o, model, prompt, n_prompt, pool, &err)) goto fail;
    if (o.verify_cost && head && !draft_cost(&o, head, dv_ids, prompt, n_prompt, pool, &err)) goto fail;
    if (dv_ids && head->n_draft_vocab == 0 && !nx_mtp_head_set_draft_vocab(head, dv_ids, (int32_t)o.draft_vocab, &err))
        goto fail;
    int32_t **oracle = NULL;
    if (o.oracle && head) {
        oracle = oracle_buf = calloc((size_t)S, sizeof *oracle_buf);
        for (int i = 0; oracle_buf && i < S; i++)
            if (!(oracle_buf[i] = calloc((size_t)(n_prompt + o.n_gen), sizeof **oracle_buf))) oracle = NULL;
        if (!oracle) { nx_fail(&err, "out of memory"); goto fail; }
    }
    for (int r = 0; r < RUNS; r++) {
        run_result pr = {0}, sr = {0};
        nx_ctx *c = NULL, *c2 = NULL;
        nx_mtp *m = NULL;
        bool ok = make_ctx(&o, model, n_ctx, 0, pool, &c, &err) &&
                  decode(&o, c, NULL, prompt, n_prompt, NULL, plain_out, &pr, &err);
        nx_ctx_free(c);
        if (!ok) goto fail;
        tp[r] = pr.tps;
        if (!head) {
            printf("run %d: plain %.2f tok/s\n", r + 1, pr.tps);
            continue;
        }
        if (o.oracle) {
            /* the plain continuation at absolute positions: prompt, then generated tokens */
            for (int i = 0; i < S; i++) {
                memcpy(oracle[i], prompt, (size_t)n_prompt * sizeof *prompt);
                memcpy(oracle[i] + n_prompt, plain_out[i], (size_t)o.n_gen * sizeof *prompt);
            }
        }
        ok = make_ctx(&o, model, n_ctx, (int32_t)o.draft_max, pool, &c2, &err) &&
             nx_mtp_create(&m, head, n_ctx, S, o.kv, o.kv_v, pool, &err) &&
             decode(&o, c2, m, prompt, n_prompt, oracle, spec_out, &sr, &err);
        nx_mtp_free(m);
        nx_ctx_free(c2);
        if (!ok) goto fail;
        for (int i = 0; i < S; i++)
            if (memcmp(plain_out[i], spec_out[i], (size_t)o.n_gen * sizeof(int32_t))) {
                nx_fail(&err, "%s speculative output differs from plain output (sequence %d)",
                        o.temp > 0 ? "sampled" : "greedy", i);
                goto fail;
            }
        const double tot = sr.t_draft + sr.t_verify + sr.t_accept;
        ts[r] = sr.tps;
        acc[r] = sr.st.drafted ? (double)sr.st.accepted / (double)sr.st.drafted : 0.0;
        tps[r] = sr.st.steps ? (double)sr.st.emitted / (double)sr.st.steps : 0.0;
        shd[r] = tot > 0 ? sr.t_draft / tot : 0;
        shv[r] = tot > 0 ? sr.t_verify / tot : 0;
        printf("run %d: plain %.2f tok/s | spec %.2f tok/s (%.2fx) | acceptance %.1f%% (%lld/%lld) | %.2f tokens/step "
               "| %lld of %lld steps drafted | MTP rows %lld, verify rows %lld | time: draft %.0f%% verify %.0f%% sampling %.0f%%\n",
               r + 1, pr.tps, sr.tps, sr.tps / pr.tps, 100 * acc[r], (long long)sr.st.accepted,
               (long long)sr.st.drafted, tps[r], (long long)sr.st.spec_steps, (long long)sr.st.steps,
               (long long)sr.st.mtp_rows, (long long)sr.st.verify_rows, 100 * shd[r],
               100 * shv[r], tot > 0 ? 100 * sr.t_accept / tot : 0.0);
    }
    {
        double mp = median(tp, RUNS);
        if (!head) {
            printf("median of %d: plain %.2f tok/s\n", RUNS, mp);
        } else {
            double ms = median(ts, RUNS);
            printf("median of %d: plain %.2f tok/s, spec%s %.2f tok/s, speedup %.2fx, acceptance %.1f%%, %.2f tokens/step, "
                   "draft share %.0f%%, verify share %.0f%%%s\n",
                   RUNS, mp, o.oracle ? " (oracle)" : "", ms, ms / mp, 100 * median(acc, RUNS), median(tps, RUNS),
                   100 * median(shd, RUNS), 100 * median(shv, RUNS), "; outputs identical");
        }
    }
    rc = 0;
    goto done;
fail:
    nx_cli_report(CMD, err.msg, NULL);
fail_quiet:
done:
    if (plain_out) for (int i = 0; i < S; i++) free(plain_out[i]);
    if (spec_out) for (int i = 0; i < S; i++) free(spec_out[i]);
    if (oracle_buf) for (int i = 0; i < S; i++) free(oracle_buf[i]);
    free(oracle_buf);
    free(plain_out); free(spec_out); free(prompt); free(dv_ids);
    free(tp); free(ts); free(acc); free(tps); free(shd); free(shv);
    nx_pool_free(pool);
    nx_mtp_head_free(head);
    nx_model_free(model);
    return rc;
}
