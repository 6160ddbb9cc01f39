/* cmd_chat.c - `nextn chat`: an interactive multi-turn conversation in the terminal.
 *
 * Input: on a terminal, a line editor with history (libedit: BSD-licensed, see docs/cli.md);
 * otherwise one message per line from stdin, for scripts and tests.  A line ending in `\`
 * continues on the next line; a line `"""` opens a block that the next `"""` line closes.
 * Lines starting with `/` are commands (/help); `//` sends a message starting with `/`.
 * Output: stdout carries only the replies, streamed (one reply per turn, then a newline);
 * reasoning (<think>...</think>) is shown dimmed on a terminal and goes to stderr otherwise, so
 * it is never mixed into the answer.  Everything else (banner, notices, /stats, errors) goes to
 * stderr.  Ctrl-C stops the current reply (or discards the line being typed); Ctrl-D (end of
 * input) or /quit ends the session.  The conversation state lives in chat_session.c. */
#include <errno.h>
#include <histedit.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "chat_session.h"
#include "cli_util.h"
#include "commands.h"

#define CMD "chat"

static volatile sig_atomic_t g_interrupt;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupt = 1;
}

/* ---- input ------------------------------------------------------------------------------------- */

typedef struct reader {
    bool tty;
    EditLine *el;
    History *hist;
    char *hist_path;
    const char *prompt;
    char *line;          /* getline buffer (pipe mode) */
    size_t cap;
} reader;

static reader *g_reader; /* for the prompt callback */

static char *el_prompt(EditLine *el) {
    (void)el;
    return (char *)(g_reader ? g_reader->prompt : "");
}

static void reader_open(reader *r, bool tty, bool use_history) {
    memset(r, 0, sizeof *r);
    r->tty = tty;
    if (!tty) return;
    g_reader = r;
    /* the prompt and the echo go to stderr: stdout carries only replies (it may be redirected) */
    r->el = el_init("nextn", stdin, stderr, stderr);
    if (!r->el) {
        r->tty = false;
        return;
    }
    el_set(r->el, EL_PROMPT, el_prompt);
    el_set(r->el, EL_EDITOR, "emacs");
    r->hist = history_init();
    if (r->hist) {
        HistEvent ev;
        history(r->hist, &ev, H_SETSIZE, 1000);
        history(r->hist, &ev, H_SETUNIQUE, 1);
        el_set(r->el, EL_HIST, history, r->hist);
        const char *env = getenv("NEXTN_CHAT_HISTORY"), *home = getenv("HOME");
        if (use_history && env && *env) {
            r->hist_path = strdup(env);
        } else if (use_history && !env && home && *home) {
            size_t n = strlen(home) + 32;
            r->hist_path = malloc(n);
            if (r->hist_path) snprintf(r->hist_path, n, "%s/.nextn_chat_history", home);
        }
        if (r->hist_path) history(r->hist, &ev, H_LOAD, r->hist_path);
    }
    el_source(r->el, NULL); /* ~/.editrc */
}

static void reader_close(reader *r) {
    if (r->hist) {
        HistEvent ev;
        if (r->hist_path) history(r->hist, &ev, H_SAVE, r->hist_path);
        history_end(r->hist);
    }
    if (r->el) el_end(r->el);
    free(r->hist_path);
    free(r->line);
    g_reader = NULL;
}

enum { READ_LINE = 1, READ_EOF = 0, READ_INTERRUPTED = -1 };

/* One line without its newline into *out (valid until the next call). */
static int read_line(reader *r, const char *prompt, const char **out) {
    r->prompt = prompt;
    if (r->tty) {
        int count = 0;
        g_interrupt = 0;
        const char *s = el_gets(r->el, &count);
        if (g_interrupt) {
            g_interrupt = 0;
            return READ_INTERRUPTED;
        }
        if (!s || count <= 0) return READ_EOF;
        size_t n = strlen(s);
        if (n + 1 > r->cap) {
            char *b = realloc(r->line, n + 1);
            if (!b) return READ_EOF;
            r->line = b;
            r->cap = n + 1;
        }
        memcpy(r->line, s, n + 1);
    } else {
        for (;;) {
            errno = 0;
            ssize_t n = getline(&r->line, &r->cap, stdin);
            if (n >= 0) break;
            if (errno == EINTR && g_interrupt) {
                g_interrupt = 0;
                clearerr(stdin);
                continue;
            }
            return READ_EOF;
        }
    }
    size_t n = strlen(r->line);
    while (n && (r->line[n - 1] == '\n' || r->line[n - 1] == '\r')) r->line[--n] = 0;
    *out = r->line;
    return READ_LINE;
}

static void remember(reader *r, const char *msg) {
    if (!r->hist || !*msg) return;
    HistEvent ev;
    history(r->hist, &ev, H_ENTER, msg);
}

/* A whole message: continuation lines (trailing `\`) and `"""` blocks.  *msg is malloc'ed. */
static int read_message(reader *r, char **msg) {
    nx_buf b = {0};
    nx_err e;
    const char *line;
    *msg = NULL;
    int rc = read_line(r, ">>> ", &line);
    if (rc != READ_LINE) return rc;
    if (!strcmp(line, "\"\"\"")) {
        bool first = true;
        for (;;) {
            rc = read_line(r, "... ", &line);
            if (rc != READ_LINE) {
                nx_buf_free(&b);
                return rc == READ_EOF && b.len ? READ_INTERRUPTED : rc;
            }
            if (!strcmp(line, "\"\"\"")) break;
            if (!first) nx_buf_append(&b, "\n", 1, &e);
            nx_buf_append(&b, line, strlen(line), &e);
            first = false;
        }
        nx_buf_append(&b, "", 0, &e);
    } else {
        for (;;) {
            size_t n = strlen(line);
            bool more = n && line[n - 1] == '\\';
            nx_buf_append(&b, line, more ? n - 1 : n, &e);
            if (!more) break;
            nx_buf_append(&b, "\n", 1, &e);
            rc = read_line(r, "... ", &line);
            if (rc != READ_LINE) {
                nx_buf_free(&b);
                return rc;
            }
        }
    }
    if (!b.data) return READ_EOF;
    remember(r, b.data);
    *msg = b.data;
    return READ_LINE;
}

/* ---- output ------------------------------------------------------------------------------------ */

typedef struct display {
    bool tty_out, color;
    think_split ts;
    bool dim;                 /* the terminal is in dim mode */
    bool any_reasoning, any_answer;
    bool reasoning_nl;        /* the last reasoning byte written was a newline */
    bool answer_nl;
} display;

static void disp_out(void *user, bool reasoning, const char *text, size_t len) {
    display *d = user;
    if (!len) return;
    if (reasoning) {
        if (d->tty_out) {
            if (d->color && !d->dim) fputs("\033[2m", stdout);
            d->dim = d->color;
            fwrite(text, 1, len, stdout);
            fflush(stdout);
        } else {
            fwrite(text, 1, len, stderr);
        }
        d->any_reasoning = true;
        d->reasoning_nl = text[len - 1] == '\n';
        return;
    }
    if (d->dim) {
        fputs("\033[0m", stdout);
        d->dim = false;
    }
    if (!d->any_answer && d->any_reasoning && d->tty_out) fputs(d->reasoning_nl ? "\n" : "\n\n", stdout);
    if (!d->any_answer && d->any_reasoning && !d->tty_out && !d->reasoning_nl) fputc('\n', stderr);
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    d->any_answer = true;
    d->answer_nl = text[len - 1] == '\n';
}

static void on_reply_text(void *user, const char *text, size_t len) {
    display *d = user;
    think_split_feed(&d->ts, text, len, disp_out, d);
}

static void reply_end(display *d) {
    think_split_flush(&d->ts, disp_out, d);
    if (d->dim) fputs("\033[0m", stdout);
    d->dim = false;
    if (d->any_reasoning && !d->any_answer && !d->tty_out && !d->reasoning_nl) fputc('\n', stderr);
    fputc('\n', stdout);
    if (d->tty_out) fputc('\n', stdout);
    fflush(stdout);
}

/* ---- commands ---------------------------------------------------------------------------------- */

static void print_help(void) {
    fprintf(stderr,
            "commands:\n"
            "  /help           this list\n"
            "  /clear          start a new conversation (the system prompt stays)\n"
            "  /system [TEXT]  show the system prompt, or set it to TEXT (\"/system -\" removes it)\n"
            "  /think [on|off] show or set thinking (the model's <think> block before the answer)\n"
            "  /save FILE      write the conversation as OpenAI chat messages JSON\n"
            "  /load FILE      replace the conversation by one from FILE (as /save writes it)\n"
            "  /stats          tokens, speed, prompt tokens reused / decoded, draft acceptance\n"
            "  /quit           end the session (also Ctrl-D)\n"
            "input: a line ending in \\ continues on the next line; \"\"\" on a line opens and closes a block;\n"
            "//text sends /text.  Ctrl-C stops a reply (or discards the line being typed).\n");
}

static void print_stats(const chat_session *cs) {
    const chat_turn_stats *l = &cs->last;
    fprintf(stderr, "turns %lld; prompt tokens %lld, of which decoded %lld (the rest was kept in the context); "
            "reply tokens %lld\n", (long long)cs->n_turns, (long long)cs->tot_prompt, (long long)cs->tot_decoded,
            (long long)cs->tot_gen);
    fprintf(stderr, "speed: prompt %.2f tokens/s, reply %.2f tokens/s\n",
            cs->tot_t_prompt > 0 ? (double)cs->tot_decoded / cs->tot_t_prompt : 0.0,
            cs->tot_t_gen > 0 ? (double)cs->tot_gen / cs->tot_t_gen : 0.0);
    if (cs->tot_drafted)
        fprintf(stderr, "draft acceptance: %.1f%% (%lld of %lld drafts)\n",
                100.0 * (double)cs->tot_accepted / (double)cs->tot_drafted, (long long)cs->tot_accepted,
                (long long)cs->tot_drafted);
    if (cs->n_turns)
        fprintf(stderr, "last turn: prompt %d tokens, %d reused, %d decoded in %.3f s; reply %d tokens in %.3f s "
                "(%.2f tokens/s)\n", l->n_prompt, l->n_reused, l->n_decoded, l->t_prompt, l->n_gen, l->t_gen,
                l->t_gen > 0 ? l->n_gen / l->t_gen : 0.0);
    fprintf(stderr, "context: %d of %d positions held; %d checkpoints\n", cs->n_held, cs->n_ctx,
            cs->n_turn_states + (cs->sys_state != NULL));
}

static void print_turn(const chat_session *cs) {
    const chat_turn_stats *l = &cs->last;
    char how[64];
    if (l->restored_pos > 0) snprintf(how, sizeof how, "restored the checkpoint at %d", l->restored_pos);
    else if (l->restored_pos == 0) snprintf(how, sizeof how, "cleared the context");
    else snprintf(how, sizeof how, "kept the context");
    fprintf(stderr, "nextn %s: turn %lld: prompt %d tokens: %d reused, %d decoded (%s); reply %d tokens%s; "
            "prompt %.3f s, reply %.3f s (%.2f tokens/s)", CMD, (long long)cs->n_turns, l->n_prompt, l->n_reused,
            l->n_decoded, how, l->n_gen,
            l->interrupted ? " (interrupted)" : l->stopped_eog ? " (end of generation)" : l->ctx_full ? " (context full)" : "",
            l->t_prompt, l->t_gen, l->t_gen > 0 ? l->n_gen / l->t_gen : 0.0);
    if (l->drafted) fprintf(stderr, "; drafts %lld of %lld accepted", (long long)l->accepted, (long long)l->drafted);
    fputc('\n', stderr);
}

static const char *skip_ws(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s;
}

/* Runs a /command; returns false for /quit. */
static bool command(chat_session *cs, const char *line) {
    nextn_error err;
    const char *p = line + 1;
    size_t k = strcspn(p, " \t");
    const char *arg = skip_ws(p + k);
#define IS(name) (k == strlen(name) && !strncmp(p, name, k))
    if (IS("quit") || IS("exit") || IS("bye")) return false;
    if (IS("help") || IS("?")) {
        print_help();
    } else if (IS("clear")) {
        chat_clear(cs);
        fprintf(stderr, "(new conversation)\n");
    } else if (IS("system")) {
        if (!*arg) {
            bool has = cs->n_msgs && !strcmp(cs->msgs[0].role, "system");
            fprintf(stderr, has ? "system prompt: %s\n" : "(no system prompt)\n", has ? cs->msgs[0].content : "");
        } else if (!chat_set_system(cs, strcmp(arg, "-") ? arg : NULL, &err)) {
            nx_cli_report(CMD, err.msg, NULL);
        } else {
            fprintf(stderr, strcmp(arg, "-") ? "(system prompt set)\n" : "(system prompt removed)\n");
        }
    } else if (IS("think")) {
        if (!strcmp(arg, "on") && !nx_chat_format_thinks(cs->fmt))
            fprintf(stderr, "the model's chat template has no thinking block (<think>)\n");
        else if (!strcmp(arg, "on")) cs->think = true;
        else if (!strcmp(arg, "off")) cs->think = false;
        else if (*arg) fprintf(stderr, "/think takes on or off\n");
        fprintf(stderr, "(thinking %s)\n", cs->think ? "on" : "off");
    } else if (IS("save") || IS("load")) {
        if (!*arg) {
            fprintf(stderr, "/%.*s needs a file name\n", (int)k, p);
        } else if (IS("save") ? !chat_save(cs, arg, &err) : !chat_load(cs, arg, &err)) {
            nx_cli_report(CMD, err.msg, NULL);
        } else {
            fprintf(stderr, "(%zu messages %s %s)\n", cs->n_msgs, IS("save") ? "written to" : "read from", arg);
        }
    } else if (IS("stats")) {
        print_stats(cs);
    } else {
        fprintf(stderr, "unknown command /%.*s (/help lists them; //text sends /text)\n", (int)k, p);
    }
#undef IS
    return true;
}

/* ---- main ---------------------------------------------------------------------------------------- */

int cmd_chat(int argc, char **argv) {
    const char *model_path = NULL, *system = NULL, *system_file = NULL, *chat_format = NULL;
    int32_t n_predict = -1, n_threads = 0, n_ctx = 4096;
    int kv_choice = 0, k_choice = -1, v_choice = -1, spec_choice = 0;
    bool think = false, no_think = false, no_mtp = false, no_adaptive = false, no_normalize = false, verbose = false,
         no_history = false, no_huge_reread = false;
    uint64_t seed = 0;
    nextn_sampler_params sp = nextn_sampler_default_params();
    nextn_dry_seqs dry = {0};
    const char *sampler_seq = NULL;
    nextn_spec_params spec = nextn_spec_default_params();
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF (required)", 0, 0, NULL, false},
        {"--system", NULL, NX_ARG_STRING, &system, "TEXT", "system prompt", 0, 0, NULL, false},
        {"--system-file", NULL, NX_ARG_STRING, &system_file, "FILE", "system prompt from a file", 0, 0, NULL, false},
        {"--think", NULL, NX_ARG_FLAG, &think, NULL, "thinking on: the model reasons in <think> before answering (default when the model's chat template has <think>)", 0, 0, NULL, false},
        {"--no-think", NULL, NX_ARG_FLAG, &no_think, NULL, "thinking off (an empty <think> block in the generation prompt)", 0, 0, NULL, false},
        {"--n-predict", "-n", NX_ARG_INT, &n_predict, "N", "reply tokens at most, -1 until end of generation or a full context (default -1)", -1, 1e9, NULL, false},
        {"--threads", "-t", NX_ARG_INT, &n_threads, "N", "threads (default: NEXTN_THREADS or all CPUs)", 1, 1024, NULL, false},
        {"--ctx-size", "-c", NX_ARG_INT, &n_ctx, "N", "context size in tokens: the whole conversation (default 4096)", 16, 1 << 24, NULL, false},
        NX_CLI_KV_ARGS(kv_choice, k_choice, v_choice),
        {"--chat-format", NULL, NX_ARG_STRING, &chat_format, "NAME", "chat format instead of the model's template (chatml, chatml-plain)", 0, 0, NULL, false},
        NX_CLI_SAMPLER_ARGS(sp),
        NX_CLI_SAMPLER_SEQ_ARG(sampler_seq),
        {"--seed", "-s", NX_ARG_U64, &seed, "N", "sampling seed, the same for every reply (default: from the clock)", 0, 0, NULL, false},
        NX_CLI_SPEC_ARGS(spec_choice, spec, no_mtp, no_adaptive),
        NX_CLI_LOAD_ARGS(no_huge_reread),
        {"--no-normalize", NULL, NX_ARG_FLAG, &no_normalize, NULL, "tokenize the bytes as given: skip the vocabulary's Unicode NFC step (as llama.cpp)", 0, 0, NULL, false},
        {"--no-history", NULL, NX_ARG_FLAG, &no_history, NULL, "do not read or write the line history file (~/.nextn_chat_history, or $NEXTN_CHAT_HISTORY)", 0, 0, NULL, false},
        {"--verbose", "-v", NX_ARG_FLAG, &verbose, NULL, "after each turn, print the prompt tokens reused and decoded, reply tokens and speed on stderr", 0, 0, NULL, false},
    };
    const size_t n_args = NX_ARGS_LEN(args);
    int rc = nx_args_parse(CMD, "-m FILE [--system TEXT | --system-file F] [--spec mtp] [--think | --no-think] [options]",
                           args, n_args, argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path) return nx_usage_error(CMD, "missing -m FILE (the model)");
    if (system && system_file) return nx_usage_error(CMD, "give at most one of --system and --system-file");
    if (think && no_think) return nx_usage_error(CMD, "--think and --no-think contradict each other");
    if (n_predict < 0) n_predict = INT32_MAX;
    if (!nx_args_find(args, n_args, "--seed")->seen) seed = (uint64_t)time(NULL);
    if (spec.draft_min > spec.draft_max)
        return nx_usage_error(CMD, "--draft-min %d is larger than --draft-max %d", spec.draft_min, spec.draft_max);
    if (no_mtp && spec.mtp_model) return nx_usage_error(CMD, "--no-mtp and --mtp-model contradict each other");
    if (nx_args_find(args, n_args, "--draft-vocab")->seen && spec.draft_vocab == 0 && !spec.draft_vocab_file)
        spec.draft_vocab = NEXTN_DRAFT_VOCAB_ALL;
    if (spec.draft_vocab_file && spec.draft_vocab == 0)
        return nx_usage_error(CMD, "--draft-vocab-file needs --draft-vocab K (how many tokens to keep)");
    spec.use_mtp = spec_choice == 1 && !no_mtp;
    spec.adaptive = !no_adaptive;
    sp.seed = seed;

    char *system_text = NULL;
    if (system_file && !(system_text = nx_cli_read_file(CMD, system_file, NULL))) return 1;

    nextn_model *model = NULL;
    nextn_spec *gen = NULL;
    chat_session cs;
    memset(&cs, 0, sizeof cs);
    reader rd;
    memset(&rd, 0, sizeof rd);
    nextn_error err;
    int status = 1;
    nextn_model_params mp = nextn_model_default_params();
    mp.load_mtp = spec.use_mtp;
    mp.no_normalize = no_normalize;
    mp.no_huge_reread = no_huge_reread;
    if (!nx_cli_load_model_params(CMD, model_path, &mp, &model)) goto done;
    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq = 1;
    cp.n_threads = n_threads;
    nx_cli_kv_types(kv_choice, k_choice, v_choice, &cp);
    if (!nx_cli_sampler_seq(CMD, sampler_seq, &sp) || !nx_cli_dry_breakers(CMD, model, &sp, &dry)) goto done;
    if (!nextn_spec_create(&gen, model, &cp, &spec, &sp, &err)) {
        nx_cli_report(CMD, err.msg, NULL);
        goto done;
    }
    if (spec_choice == 1 && !nextn_spec_has_mtp(gen)) fprintf(stderr, "nextn %s: %s\n", CMD, nextn_spec_notice(gen));
    if (!chat_session_init(&cs, CMD, model, chat_format, gen, &sp, n_ctx, n_predict, &err) ||
        !chat_set_system(&cs, system_text ? system_text : system, &err)) {
        nx_cli_report(CMD, err.msg, NULL);
        goto done;
    }
    /* thinking follows the model's own template: one that never opens <think> cannot think */
    if (think && !nx_chat_format_thinks(cs.fmt)) {
        nx_cli_report(CMD, "--think: the model's chat template has no thinking block (<think>); its format is "
                           "chatml-plain (--chat-format chatml forces Qwen3.5's)", NULL);
        goto done;
    }
    cs.think = !no_think && nx_chat_format_thinks(cs.fmt);

    const bool tty_in = isatty(STDIN_FILENO), tty_out = isatty(STDOUT_FILENO);
    const char *no_color = getenv("NO_COLOR");
    setlocale(LC_CTYPE, ""); /* the line editor works in the terminal's encoding */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a read at the prompt returns */
    sigaction(SIGINT, &sa, NULL);
    reader_open(&rd, tty_in, !no_history);
    if (tty_in || verbose) {
        nextn_model_info info;
        nextn_model_get_info(model, &info);
        fprintf(stderr, "nextn %s: %s (n_layer %d, n_embd %d, n_vocab %d), context %d tokens, %s, thinking %s, "
                "seed %llu\n", CMD, model_path, info.n_layer, info.n_embd, info.n_vocab, n_ctx,
                nextn_spec_has_mtp(gen) ? "MTP speculative decoding" : "plain decoding", cs.think ? "on" : "off",
                (unsigned long long)seed);
    }
    if (tty_in) fprintf(stderr, "/help lists the commands, Ctrl-D or /quit ends the session\n");

    for (;;) {
        char *msg = NULL;
        int r = read_message(&rd, &msg);
        if (r == READ_EOF) break;
        if (r == READ_INTERRUPTED) {
            if (rd.tty) fputc('\n', stderr);
            continue;
        }
        const char *m = skip_ws(msg);
        if (!*m) {
            free(msg);
            continue;
        }
        if (m[0] == '/' && m[1] != '/') {
            bool go_on = command(&cs, m);
            free(msg);
            if (!go_on) break;
            continue;
        }
        display d;
        memset(&d, 0, sizeof d);
        d.tty_out = tty_out;
        d.color = tty_out && !(no_color && *no_color);
        think_split_init(&d.ts, cs.think);
        g_interrupt = 0;
        bool ok = chat_turn(&cs, m[0] == '/' ? m + 1 : m, on_reply_text, &d, &g_interrupt, &err);
        free(msg);
        if (ok || d.any_answer || d.any_reasoning) reply_end(&d);
        if (!ok) {
            nx_cli_report(CMD, err.msg, NULL);
            continue;
        }
        if (cs.last.interrupted) fprintf(stderr, "(interrupted)\n");
        if (cs.last.ctx_full)
            fprintf(stderr, "nextn %s: the reply stopped: the context is full (n_ctx = %d; /clear starts over)\n", CMD,
                    n_ctx);
        if (verbose) print_turn(&cs);
        g_interrupt = 0;
    }
    if (rd.tty) fputc('\n', stderr);
    status = 0;
done:
    reader_close(&rd);
    chat_session_free(&cs);
    nextn_spec_free(gen);
    nextn_model_free(model);
    nextn_dry_seqs_free(&dry);
    free(system_text);
    return status;
}
