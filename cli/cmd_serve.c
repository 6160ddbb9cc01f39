/* cmd_serve.c - `nextn serve`: the OpenAI-compatible HTTP server (src/server/server.h).
 *
 * The main thread blocks SIGINT/SIGTERM before any other thread exists, starts the server and
 * waits for one of them with sigwait(); then it stops the server (unfinished requests get an
 * error) and exits 0. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "server/server.h"

#define CMD "serve"

int cmd_serve(int argc, char **argv) {
    const char *model_path = NULL, *host = "127.0.0.1", *api_key = NULL, *alias = NULL, *chat_format = NULL;
    int32_t port = 8080, n_slots = 1, n_ctx = 4096, n_batch = 512, n_threads = 0, n_predict = -1, max_queue = 64;
    int32_t max_body_mb = 16, timeout_s = 30;
    const char *cors = NULL, *tags = NULL, *slot_save_path = NULL;
    int kv_choice = 0, k_choice = -1, v_choice = -1, spec_choice = 0;
    bool no_think = false, no_adaptive = false, no_cache = false, no_webui = false;
    int32_t n_ckpt = 8, ckpt_every = 256;
    bool no_huge_reread = false;
    uint64_t seed = 0;
    nextn_sampler_params sp = nextn_sampler_default_params();
    nextn_spec_params spec = nextn_spec_default_params();
    static const char *const spec_types[] = {"none", "mtp", NULL};
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--host", NULL, NX_ARG_STRING, &host, "ADDR", "address or host name to listen on: 127.0.0.1 (default), ::1, localhost (all its addresses), 0.0.0.0, ::", 0, 0, NULL, false},
        {"--port", NULL, NX_ARG_INT, &port, "N", "port, 0 = any free one (default 8080)", 0, 65535, NULL, false},
        {"--parallel", "-np", NX_ARG_INT, &n_slots, "N", "requests decoded together (slots, default 1)", 1, 256, NULL, false},
        {"--ctx-size", "-c", NX_ARG_INT, &n_ctx, "N", "positions per slot: prompt + generation (default 4096)", 2, 1 << 24, NULL, false},
        {"--batch-size", "-b", NX_ARG_INT, &n_batch, "N", "tokens per forward call at most (default 512)", 1, 1 << 16, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &n_threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        NX_CLI_LOAD_ARGS(no_huge_reread),
        {"--n-predict", "-n", NX_ARG_INT, &n_predict, "N", "default max_tokens, -1 until EOG or a full slot (default -1)", -1, 1e9, NULL, false},
        {"--temp", NULL, NX_ARG_FLOAT, &sp.temp, "T", "default temperature, <= 0 greedy (default 0.8)", -1e9, 1e9, NULL, false},
        {"--top-k", NULL, NX_ARG_INT, &sp.top_k, "N", "default top-k, 0 off (default 40)", 0, 1e9, NULL, false},
        {"--top-p", NULL, NX_ARG_FLOAT, &sp.top_p, "P", "default top-p (default 0.95)", 0, 1, NULL, false},
        {"--min-p", NULL, NX_ARG_FLOAT, &sp.min_p, "P", "default min-p (default 0.05)", 0, 1, NULL, false},
        {"--seed", "-s", NX_ARG_U64, &seed, "N", "default sampling seed (default: from the clock)", 0, 0, NULL, false},
        {"--api-key", NULL, NX_ARG_STRING, &api_key, "KEY", "require Authorization: Bearer KEY on every endpoint but /health", 0, 0, NULL, false},
        {"--cors", NULL, NX_ARG_STRING, &cors, "ORIGINS", "let web pages from these origins call the API (comma-separated, e.g. https://app.example; * = any; localhost = any localhost origin); default: none", 0, 0, NULL, false},
        {"--cors-origins", NULL, NX_ARG_STRING, &cors, "ORIGINS", "the same as --cors (llama-server's name)", 0, 0, NULL, false},
        {"--timeout", NULL, NX_ARG_INT, &timeout_s, "S", "close a connection idle this many seconds (keep-alive, slow upload; default 30)", 1, 86400, NULL, false},
        {"--alias", "-a", NX_ARG_STRING, &alias, "NAMES", "model names the API answers to, comma-separated; the first in sorted order is the id reported (default: the file name)", 0, 0, NULL, false},
        {"--tags", NULL, NX_ARG_STRING, &tags, "TAGS", "model tags listed by /v1/models, comma-separated (informational)", 0, 0, NULL, false},
        {"--slot-save-path", NULL, NX_ARG_STRING, &slot_save_path, "DIR", "folder of slot files (POST /slots/{id}?action=save|restore); default: those actions off", 0, 0, NULL, false},
        {"--chat-format", NULL, NX_ARG_STRING, &chat_format, "NAME", "force a chat format (chatml)", 0, 0, NULL, false},
        {"--no-think", NULL, NX_ARG_FLAG, &no_think, NULL, "chat: thinking off unless a request enables it", 0, 0, NULL, false},
        {"--no-webui", NULL, NX_ARG_FLAG, &no_webui, NULL, "no chat page at / (default: served)", 0, 0, NULL, false},
        {"--max-queue", NULL, NX_ARG_INT, &max_queue, "N", "requests waiting for a slot at most (default 64)", 1, 1 << 20, NULL, false},
        {"--max-body", NULL, NX_ARG_INT, &max_body_mb, "MB", "request body size limit (default 16)", 1, 4096, NULL, false},
        {"--no-cache-prompt", NULL, NX_ARG_FLAG, &no_cache, NULL, "no prompt cache: every request decodes its whole prompt", 0, 0, NULL, false},
        {"--ctx-checkpoints", "-ctxcp", NX_ARG_INT, &n_ckpt, "N", "prompt cache: recurrent-state checkpoints per slot (default 8)", 0, NX_SRV_MAX_CKPT, NULL, false},
        {"--checkpoint-every", NULL, NX_ARG_INT, &ckpt_every, "N", "prompt cache: a checkpoint every N prompt tokens, 0 = only near prompt ends (default 256)", 0, 1 << 24, NULL, false},
        {"--spec", NULL, NX_ARG_CHOICE, &spec_choice, "none|mtp", "speculative decoding with the MTP head (default none)", 0, 0, spec_types, false},
        {"--draft-max", NULL, NX_ARG_INT, &spec.draft_max, "N", "--spec: max draft tokens per step (default 3)", 1, 16, NULL, false},
        {"--mtp-model", NULL, NX_ARG_STRING, &spec.mtp_model, "FILE", "--spec: MTP GGUF (default: the model's own, or mtp-*.gguf beside it)", 0, 0, NULL, false},
        {"--no-adaptive", NULL, NX_ARG_FLAG, &no_adaptive, NULL, "--spec: always draft draft-max tokens (no cost model)", 0, 0, NULL, false},
        {"--draft-vocab", NULL, NX_ARG_INT, &spec.draft_vocab, "K", "--spec: the draft head scores only K tokens; 0 = all (default: V/4 from <model>.draft-vocab.txt if that file is beside the model, else the V/4 lowest ids for 32768+ tokens, else all)", 0, 1e9, NULL, false},
        {"--draft-vocab-file", NULL, NX_ARG_STRING, &spec.draft_vocab_file, "FILE", "--spec: token frequencies from `nextn draft-vocab` (default: the K lowest ids)", 0, 0, NULL, false},
    };
    const size_t n_args = NX_ARGS_LEN(args);
    int rc = nx_args_parse(CMD, "-m FILE [--host ADDR] [--port N] [-np N] [-c N] [options]", args, n_args, argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path) return nx_usage_error(CMD, "missing -m FILE (the model)");
    sp.seed = nx_args_find(args, n_args, "--seed")->seen ? seed : (uint64_t)time(NULL);
    spec.adaptive = !no_adaptive;
    if (nx_args_find(args, n_args, "--draft-vocab")->seen && spec.draft_vocab == 0 && !spec.draft_vocab_file)
        spec.draft_vocab = NEXTN_DRAFT_VOCAB_ALL;
    if (spec.draft_vocab_file && spec.draft_vocab == 0)
        return nx_usage_error(CMD, "--draft-vocab-file needs --draft-vocab K (how many tokens to keep)");
    if (spec_choice == 0 && (spec.draft_vocab || nx_args_find(args, n_args, "--draft-max")->seen))
        return nx_usage_error(CMD, "--draft-max / --draft-vocab need --spec mtp");

    /* before any thread exists, so that every thread inherits the blocked mask */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client closing its socket must not kill the server */

    nextn_model *model = NULL;
    if (!nx_cli_load_model(CMD, model_path, spec_choice == 1, no_huge_reread, &model)) return 1;
    const char *base = strrchr(model_path, '/');
    /* --alias a,b and --tags x,y: trimmed, empty ones dropped, aliases sorted (the first is the id,
     * as llama-server keeps them in a sorted set) */
    static char alias_buf[2048], tag_buf[2048];
    const char *aliases[NX_SRV_MAX_ALIASES], *tag_list[NX_SRV_MAX_ALIASES];
    int n_aliases = 0, n_tags = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *src = pass ? tags : alias;
        char *buf = pass ? tag_buf : alias_buf;
        const char **list = pass ? tag_list : aliases;
        int *n = pass ? &n_tags : &n_aliases;
        if (!src) continue;
        snprintf(buf, 2048, "%s", src);
        for (char *save = NULL, *a = strtok_r(buf, ",", &save); a; a = strtok_r(NULL, ",", &save)) {
            while (*a == ' ') a++;
            for (size_t l = strlen(a); l && a[l - 1] == ' ';) a[--l] = '\0';
            bool dup = !*a;
            for (int i = 0; i < *n && !dup; i++) dup = strcmp(list[i], a) == 0;
            if (dup) continue;
            if (*n == NX_SRV_MAX_ALIASES) {
                nextn_model_free(model);
                return nx_usage_error(CMD, pass ? "--tags: more than 16" : "--alias: more than 16 names");
            }
            int k = (*n)++;
            for (; k > 0 && strcmp(list[k - 1], a) > 0 && !pass; k--) list[k] = list[k - 1];
            list[k] = a;
        }
    }
    if (alias && n_aliases == 0) {
        nextn_model_free(model);
        return nx_usage_error(CMD, "--alias: no name given");
    }
    nx_server_params p = {
        .host = host,
        .model_path = model_path,
        .timeout_s = timeout_s,
        .port = port,
        .api_key = api_key,
        .model_name = n_aliases ? aliases[0] : base ? base + 1 : model_path,
        .slot_save_path = slot_save_path,
        .chat_format = chat_format,
        .max_body = (size_t)max_body_mb << 20,
        .no_webui = no_webui,
        .engine = {.n_slots = n_slots, .n_ctx = n_ctx, .n_batch = n_batch, .n_threads = n_threads,
                   .kv_type = (nextn_kv_type)(k_choice >= 0 ? k_choice : kv_choice),
                   .kv_type_v = (nextn_kv_type)(v_choice >= 0 ? v_choice : kv_choice), .max_queue = max_queue,
                   .spec = spec_choice == 1, .spec_params = spec,
                   .no_cache = no_cache, .n_ckpt = n_ckpt, .ckpt_every = ckpt_every},
        .defaults = {.smp = sp, .max_tokens = n_predict, .enable_thinking = !no_think},
    };
    for (int i = 0; i < n_aliases; i++) p.defaults.aliases[i] = aliases[i];
    for (int i = 0; i < n_tags; i++) p.defaults.tags[i] = tag_list[i];
    p.defaults.n_aliases = n_aliases;
    p.defaults.n_tags = n_tags;
    char cors_buf[2048] = "";
    if (cors) {
        snprintf(cors_buf, sizeof cors_buf, "%s", cors);
        for (char *save = NULL, *o = strtok_r(cors_buf, ",", &save); o; o = strtok_r(NULL, ",", &save)) {
            while (*o == ' ') o++;
            for (size_t l = strlen(o); l && o[l - 1] == ' ';) o[--l] = '\0';
            if (!*o) continue;
            if (p.n_cors == NX_SERVER_MAX_CORS) {
                nextn_model_free(model);
                return nx_usage_error(CMD, "--cors: more than 16 origins");
            }
            p.cors_origins[p.n_cors++] = o;
        }
    }
    nx_server *server = NULL;
    nx_err err;
    if (!nx_server_start(&server, model, &p, &err)) {
        nx_cli_report(CMD, err.msg, NULL);
        nextn_model_free(model);
        return 1;
    }
    fprintf(stderr, "nextn %s: listening on %s  (%s; model %s, %d slot%s x %d tokens%s%s%s)\n", CMD,
            nx_server_url(server), nx_server_addresses(server), p.model_name, n_slots, n_slots == 1 ? "" : "s", n_ctx,
            p.engine.spec ? ", speculative mtp" : "", p.n_cors ? ", CORS for " : "", p.n_cors ? cors : "");
    nx_srv_cache_stats cs;
    nx_srv_engine_cache_stats(nx_server_engine(server), &cs);
    if (no_cache)
        fprintf(stderr, "nextn %s: prompt cache off (--no-cache-prompt)\n", CMD);
    else
        fprintf(stderr, "nextn %s: prompt cache: up to %d checkpoint%s per slot (every %d prompt tokens and near each "
                "prompt's end), %.1f MiB each, %.1f MiB for %d slot%s at most\n", CMD, cs.n_ckpt, cs.n_ckpt == 1 ? "" : "s", ckpt_every,
                cs.ckpt_bytes / 1048576.0, (double)cs.ckpt_bytes * cs.n_ckpt * n_slots / 1048576.0, n_slots,
                n_slots == 1 ? "" : "s");
    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "nextn %s: %s received, shutting down\n", CMD, sig == SIGINT ? "SIGINT" : "SIGTERM");
    nx_server_stop(server);
    nextn_model_free(model);
    return 0;
}
