/* cmd_run.c - `nextn run`: prompt in, streamed text out, with speed and memory figures.
 *
 * stdout carries only the text (prompt echo unless --no-display-prompt, then the generation);
 * everything else (model, memory, seed, timings) goes to stderr so output can be piped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn.h"
#include "run_spec.h"

#define CMD "run"

int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *tokens_arg = NULL, *chat_format = NULL;
    int32_t n_predict = 128, n_threads = 0, n_ctx = 4096;
    int kv_choice = 0, k_choice = -1, v_choice = -1;
    bool chat = false, no_display_prompt = false, ignore_eos = false, print_ids = false;
    uint64_t seed = 0;
    nextn_sampler_params sp = nextn_sampler_default_params();
    nextn_dry_seqs dry = {0};
    const char *sampler_seq = NULL;
    int spec_choice = 0;
    nextn_spec_params spec = nextn_spec_default_params();
    bool no_mtp = false, no_adaptive = false, no_normalize = false, no_huge_reread = false;
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--prompt", "-p", NX_ARG_STRING, &prompt, "TEXT", "prompt text", 0, 0, NULL, false},
        {"--tokens", NULL, NX_ARG_STRING, &tokens_arg, "IDS", "prompt as token ids, e.g. 1,2,3 (instead of -p)", 0, 0, NULL, false},
        {"--n-predict", "-n", NX_ARG_INT, &n_predict, "N", "tokens to generate, -1 until EOG or a full context (default 128)", -1, 1e9, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &n_threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        {"--ctx-size", "-c", NX_ARG_INT, &n_ctx, "N", "context size in tokens (default 4096)", 1, 1 << 24, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        NX_CLI_SAMPLER_ARGS(sp),
        NX_CLI_SAMPLER_SEQ_ARG(sampler_seq),
        {"--seed", "-s", NX_ARG_U64, &seed, "N", "sampling seed (default: from the clock, printed)", 0, 0, NULL, false},
        {"--chat", NULL, NX_ARG_FLAG, &chat, NULL, "wrap the prompt as a user turn with the model's chat template", 0, 0, NULL, false},
        {"--chat-format", NULL, NX_ARG_STRING, &chat_format, "NAME", "force a chat format (chatml, chatml-plain); implies --chat", 0, 0, NULL, false},
        {"--ignore-eos", NULL, NX_ARG_FLAG, &ignore_eos, NULL, "do not stop at end-of-generation tokens", 0, 0, NULL, false},
        {"--no-display-prompt", NULL, NX_ARG_FLAG, &no_display_prompt, NULL, "do not echo the prompt", 0, 0, NULL, false},
        {"--print-ids", NULL, NX_ARG_FLAG, &print_ids, NULL, "print generated token ids instead of text", 0, 0, NULL, false},
        {"--no-normalize", NULL, NX_ARG_FLAG, &no_normalize, NULL, "tokenize the prompt's bytes as given: skip the vocabulary's Unicode NFC step (as llama.cpp)", 0, 0, NULL, false},
        NX_CLI_SPEC_ARGS(spec_choice, spec, no_mtp, no_adaptive),
        NX_CLI_LOAD_ARGS(no_huge_reread),
    };
    const size_t n_args = NX_ARGS_LEN(args);
    int rc = nx_args_parse(CMD, "-m FILE (-p TEXT | --tokens IDS) [-n N] [options]", args, n_args, argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path) return nx_usage_error(CMD, "missing -m FILE (the model)");
    if (!prompt == !tokens_arg) return nx_usage_error(CMD, "give exactly one of -p TEXT or --tokens IDS");
    if (n_predict < 0) n_predict = INT32_MAX; /* bounded by the context instead */
    if (chat_format) chat = true;
    if (chat && !prompt) return nx_usage_error(CMD, "--chat needs -p TEXT");
    if (!nx_args_find(args, n_args, "--seed")->seen) seed = (uint64_t)time(NULL);
    if (spec.draft_min > spec.draft_max)
        return nx_usage_error(CMD, "--draft-min %d is larger than --draft-max %d", spec.draft_min, spec.draft_max);
    if (no_mtp && spec.mtp_model) return nx_usage_error(CMD, "--no-mtp and --mtp-model contradict each other");
    if (nx_args_find(args, n_args, "--draft-vocab")->seen && spec.draft_vocab == 0 && !spec.draft_vocab_file)
        spec.draft_vocab = NEXTN_DRAFT_VOCAB_ALL;
    if (spec.draft_vocab_file && spec.draft_vocab == 0)
        return nx_usage_error(CMD, "--draft-vocab-file needs --draft-vocab K (how many tokens to keep)");
    spec.use_mtp = !no_mtp;
    spec.adaptive = !no_adaptive;
    sp.seed = seed;

    int32_t *ids = NULL, n_prompt = 0;
    if (tokens_arg) {
        char msg[256];
        if (!nx_parse_token_list(tokens_arg, &ids, &n_prompt, msg, sizeof msg))
            return nx_usage_error(CMD, "--tokens: %s", msg);
    }

    nextn_model *model = NULL;
    nextn_sampler *smp = NULL;
    nextn_error err;
    int status = 1;
    nextn_model_params mp = nextn_model_default_params();
    mp.load_mtp = spec_choice == 1 && !no_mtp;
    mp.no_normalize = no_normalize;
    mp.no_huge_reread = no_huge_reread;
    if (!nx_cli_load_model_params(CMD, model_path, &mp, &model)) goto done;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    nextn_tokenizer *tok = nextn_model_tokenizer(model);
    fprintf(stderr, "nextn %s: model %s: n_vocab %d, n_embd %d, n_layer %d%s\n", CMD, model_path, info.n_vocab,
            info.n_embd, info.n_layer, tok ? "" : ", no tokenizer");
    char pages[128];
    nx_cli_weights_pages(pages, sizeof pages, info.huge_mapped_bytes, info.file_bytes, info.huge_reread, no_huge_reread);
    fprintf(stderr, "nextn %s: %s\n", CMD, pages);

    if (prompt) {
        if (!tok) {
            fprintf(stderr, "nextn %s: %s has no tokenizer: give the prompt as --tokens IDS\n", CMD, model_path);
            goto done;
        }
        const char *text = prompt;
        char *formatted = NULL;
        if (chat) {
            size_t need = 0;
            bool ok = nextn_chat_format_user(model, chat_format, prompt, NULL, 0, &need, &err) &&
                      (formatted = malloc(need + 1)) != NULL &&
                      nextn_chat_format_user(model, chat_format, prompt, formatted, need + 1, &need, &err);
            if (!ok) {
                char msg[2 * NEXTN_ERROR_MAX];
                nx_cli_flag_names(formatted || need == 0 ? err.msg : "out of memory", nx_cli_gen_flags, msg, sizeof msg);
                fprintf(stderr, "nextn %s: --chat: %s\n", CMD, msg);
                free(formatted);
                goto done;
            }
            formatted[need] = 0;
            text = formatted;
        }
        size_t len = strlen(text);
        /* chat prompts contain the template's control tokens: parse them as special */
        bool ok = nextn_tokenize(tok, text, len, true, chat, NULL, 0, &n_prompt, &err) &&
                  (ids = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *ids)) != NULL &&
                  nextn_tokenize(tok, text, len, true, chat, ids, n_prompt, &n_prompt, &err);
        if (!ok) {
            fprintf(stderr, "nextn %s: tokenizing the prompt: %s\n", CMD, err.msg);
            free(formatted);
            goto done;
        }
        free(formatted);
    }
    if (n_prompt == 0) {
        fprintf(stderr, "nextn %s: the prompt is empty (0 tokens)\n", CMD);
        goto done;
    }
    if (!nx_cli_check_ids(CMD, "--tokens", ids, n_prompt, info.n_vocab)) goto done;
    if (n_prompt >= n_ctx) {
        fprintf(stderr, "nextn %s: the prompt is %d tokens but the context holds n_ctx = %d (raise it with -c)\n",
                CMD, n_prompt, n_ctx);
        goto done;
    }

    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = 1;
    cp.n_threads = n_threads;
    nx_cli_kv_types(kv_choice, k_choice, v_choice, &cp);
    /* the sampler parameters are checked here, with the CLI's own error, before anything is built */
    if (!nx_cli_sampler_seq(CMD, sampler_seq, &sp) || !nx_cli_dry_breakers(CMD, model, &sp, &dry)) goto done;
    if (!nextn_sampler_create(&smp, model, &sp, &err)) {
        nx_cli_report(CMD, err.msg, NULL);
        goto done;
    }
    fprintf(stderr, "nextn %s: sampling: temp %.2f, top-k %d, top-p %.3f, min-p %.3f, repeat %.2f (last %d), "
            "presence %.2f, frequency %.2f, seed %llu\n", CMD, sp.temp, sp.top_k, sp.top_p, sp.min_p,
            sp.penalty_repeat, sp.penalty_last_n, sp.penalty_present, sp.penalty_freq, (unsigned long long)seed);

    /* the prompt echo is written by the generation loop, once the generator's lines are out */
    char *echo = NULL;
    size_t echo_len = 0;
    if (!no_display_prompt) {
        if (print_ids || !tok) {
            echo = malloc((size_t)n_prompt * 12 + 3);
            for (int32_t i = 0; echo && i < n_prompt; i++)
                echo_len += (size_t)sprintf(echo + echo_len, "%s%d", i ? " " : "", ids[i]);
            if (echo) echo_len += (size_t)sprintf(echo + echo_len, " |"); /* separates the prompt ids from the generated ones */
        } else if (prompt && !chat) {
            echo = strdup(prompt);
            echo_len = echo ? strlen(prompt) : 0;
        } else {
            size_t need = 0;
            if (nextn_detokenize(tok, ids, n_prompt, chat, NULL, 0, &need, &err) && (echo = malloc(need + 1)) &&
                nextn_detokenize(tok, ids, n_prompt, chat, echo, need + 1, &need, &err))
                echo_len = need;
        }
        if (!echo) {
            fprintf(stderr, "nextn %s: out of memory\n", CMD);
            goto done;
        }
    }

    /* one generation loop: plain decoding is the speculative generator with drafting off */
    if (spec_choice != 1) spec.use_mtp = false;
    nx_run_spec_opts ro = {.spec = spec, .cp = cp, .sp = sp, .ignore_eos = ignore_eos, .print_ids = print_ids || !tok,
                           .no_display_prompt = no_display_prompt, .n_predict = n_predict, .plain = spec_choice != 1,
                           .echo = echo, .echo_len = echo_len};
    status = nx_cli_run_spec(CMD, model, &ro, ids, n_prompt);
    free(echo);
done:
    nextn_sampler_free(smp);
    nextn_model_free(model);
    nextn_dry_seqs_free(&dry);
    free(ids);
    return status;
}
