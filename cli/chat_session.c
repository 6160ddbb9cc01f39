/* chat_session.c - see chat_session.h. */
#include "chat_session.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"

#define PREFILL_PART 256 /* prompt rows per call: bounds the time before a checkpoint or Ctrl-C check */

static bool failf(nextn_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool failf(nextn_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return false;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* ---- messages -------------------------------------------------------------------------------- */

static void msg_free(chat_msg *m) {
    free(m->role);
    free(m->content);
    free(m->reasoning);
    memset(m, 0, sizeof *m);
}

static bool push_msg(chat_session *cs, const char *role, const char *content, const char *reasoning,
                     nextn_error *err) {
    if (cs->n_msgs == cs->cap_msgs) {
        size_t cap = cs->cap_msgs ? 2 * cs->cap_msgs : 16;
        chat_msg *m = realloc(cs->msgs, cap * sizeof *m);
        if (!m) return failf(err, "out of memory for %zu messages", cap);
        cs->msgs = m;
        cs->cap_msgs = cap;
    }
    chat_msg m = {dup_str(role), dup_str(content ? content : ""), reasoning ? dup_str(reasoning) : NULL};
    if (!m.role || !m.content || (reasoning && !m.reasoning)) {
        msg_free(&m);
        return failf(err, "out of memory for a message");
    }
    cs->msgs[cs->n_msgs++] = m;
    return true;
}

static void pop_msg(chat_session *cs) {
    if (cs->n_msgs) msg_free(&cs->msgs[--cs->n_msgs]);
}

bool chat_set_system(chat_session *cs, const char *text, nextn_error *err) {
    bool has = cs->n_msgs && !strcmp(cs->msgs[0].role, "system");
    if (!text) {
        if (has) {
            msg_free(&cs->msgs[0]);
            memmove(cs->msgs, cs->msgs + 1, (cs->n_msgs - 1) * sizeof *cs->msgs);
            cs->n_msgs--;
        }
        return true;
    }
    char *c = dup_str(text);
    if (!c) return failf(err, "out of memory for the system prompt");
    if (has) {
        free(cs->msgs[0].content);
        cs->msgs[0].content = c;
        return true;
    }
    if (!push_msg(cs, "system", "", NULL, err)) {
        free(c);
        return false;
    }
    chat_msg m = cs->msgs[cs->n_msgs - 1];
    memmove(cs->msgs + 1, cs->msgs, (cs->n_msgs - 1) * sizeof *cs->msgs);
    free(m.content);
    m.content = c;
    cs->msgs[0] = m;
    return true;
}

void chat_clear(chat_session *cs) {
    size_t keep = cs->n_msgs && !strcmp(cs->msgs[0].role, "system") ? 1 : 0;
    while (cs->n_msgs > keep) pop_msg(cs);
}

/* ---- rendering --------------------------------------------------------------------------------- */

/* The conversation (with the generation prompt when gen) as prompt text. */
static bool render(const chat_session *cs, size_t n_msgs, bool gen, nx_buf *out, nextn_error *err) {
    nx_chat_msg *m = calloc(n_msgs ? n_msgs : 1, sizeof *m);
    if (!m) return failf(err, "out of memory rendering %zu messages", n_msgs);
    for (size_t i = 0; i < n_msgs; i++)
        m[i] = (nx_chat_msg){cs->msgs[i].role, cs->msgs[i].content, cs->msgs[i].reasoning, NULL, 0};
    nx_chat_opts o = {gen, cs->think, NULL, 0};
    nx_err ie;
    out->len = 0;
    bool ok = nx_chat_render(cs->fmt, m, n_msgs, &o, out, &ie);
    free(m);
    if (!ok) return failf(err, "chat template: %s", ie.msg);
    return true;
}

/* Tokenizes prompt text (BOS as the vocabulary asks, control tokens parsed). */
static bool tokenize(const chat_session *cs, const char *text, size_t len, int32_t **ids, int32_t *n,
                     nextn_error *err) {
    *ids = NULL;
    if (!nextn_tokenize(cs->tok, text, len, true, true, NULL, 0, n, err)) return false;
    *ids = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **ids);
    if (!*ids) return failf(err, "out of memory for %d tokens", *n);
    if (!nextn_tokenize(cs->tok, text, len, true, true, *ids, *n, n, err)) {
        free(*ids);
        *ids = NULL;
        return false;
    }
    return true;
}

/* The number of tokens of `text` when they are a prefix of ids[0..n), else 0. */
static int32_t prefix_tokens(const chat_session *cs, const char *text, size_t len, const int32_t *ids, int32_t n) {
    int32_t *p = NULL, k = 0;
    nextn_error err;
    if (!tokenize(cs, text, len, &p, &k, &err)) return 0;
    bool is_prefix = k <= n && !memcmp(p, ids, (size_t)k * sizeof *p);
    free(p);
    return is_prefix ? k : 0;
}

/* ---- session ------------------------------------------------------------------------------------ */

bool chat_session_init(chat_session *cs, const char *cmd, nextn_model *model, const char *chat_format,
                       nextn_spec *spec, const nextn_sampler_params *sp, int32_t n_ctx, int32_t n_predict,
                       nextn_error *err) {
    memset(cs, 0, sizeof *cs);
    cs->cmd = cmd;
    cs->model = model;
    cs->tok = nextn_model_tokenizer(model);
    if (!cs->tok) return failf(err, "the model has no tokenizer (tokenizer.ggml.* keys)");
    nx_err ie;
    if (!nx_chat_select(nx_api_model(model)->gguf, chat_format, &cs->fmt, &ie)) return failf(err, "%s", ie.msg);
    cs->spec = spec;
    cs->sp = *sp;
    cs->n_ctx = n_ctx;
    cs->n_predict = n_predict;
    cs->think = nx_chat_format_thinks(cs->fmt);
    cs->last.restored_pos = -1;
    return true;
}

static void drop_turn_states_after(chat_session *cs, int32_t pos) {
    int k = 0;
    for (int i = 0; i < cs->n_turn_states; i++) {
        if (nextn_state_pos(cs->turn_state[i]) > pos) nextn_state_free(cs->turn_state[i]);
        else cs->turn_state[k++] = cs->turn_state[i];
    }
    cs->n_turn_states = k;
}

static void drop_states_after(chat_session *cs, int32_t pos) {
    if (cs->sys_state && nextn_state_pos(cs->sys_state) > pos) {
        nextn_state_free(cs->sys_state);
        cs->sys_state = NULL;
    }
    drop_turn_states_after(cs, pos);
}

void chat_session_free(chat_session *cs) {
    for (size_t i = 0; i < cs->n_msgs; i++) msg_free(&cs->msgs[i]);
    free(cs->msgs);
    free(cs->held);
    drop_states_after(cs, -1);
    memset(cs, 0, sizeof *cs);
}

static bool held_set(chat_session *cs, const int32_t *ids, int32_t n, nextn_error *err) {
    if (n > cs->cap_held) {
        int32_t *h = realloc(cs->held, (size_t)n * sizeof *h);
        if (!h) return failf(err, "out of memory for %d tokens", n);
        cs->held = h;
        cs->cap_held = n;
    }
    memmove(cs->held, ids, (size_t)n * sizeof *ids);
    cs->n_held = n;
    return true;
}

/* The sequence is emptied (after an error): nothing it held can be restored. */
static void reset_sequence(chat_session *cs) {
    nextn_error e;
    nextn_spec_seq_clear(cs->spec, 0, &e);
    cs->n_held = 0;
    drop_states_after(cs, -1);
}

/* Takes a checkpoint at the sequence's current position: the system one or a turn one. */
static bool take_state(chat_session *cs, bool system, nextn_error *err) {
    nextn_state **slot;
    if (system) {
        slot = &cs->sys_state;
    } else {
        if (cs->n_turn_states == CHAT_TURN_STATES) {
            nextn_state_free(cs->turn_state[0]);
            memmove(cs->turn_state, cs->turn_state + 1, (CHAT_TURN_STATES - 1) * sizeof *cs->turn_state);
            cs->n_turn_states--;
        }
        slot = &cs->turn_state[cs->n_turn_states];
        *slot = NULL;
    }
    if (!nextn_spec_state_take(slot, cs->spec, 0, NEXTN_STATE_IN_PLACE, err)) return false;
    if (!system) cs->n_turn_states++;
    return true;
}

/* Brings the sequence to hold a prefix of ids[0..n) and returns its length (>= 0, < n):
 * the common prefix when the sequence holds nothing beyond it, else the latest checkpoint at
 * or before it, else 0 (cleared). */
static bool reuse_prefix(chat_session *cs, const int32_t *ids, int32_t n, int32_t *start, nextn_error *err) {
    int32_t l = 0;
    while (l < cs->n_held && l < n && cs->held[l] == ids[l]) l++;
    if (l >= n) l = n - 1; /* a prefill decodes at least one token */
    cs->last.restored_pos = -1;
    if (l == cs->n_held) {
        *start = l;
        return true;
    }
    const nextn_state *best = NULL;
    if (cs->sys_state && nextn_state_pos(cs->sys_state) <= l) best = cs->sys_state;
    for (int i = 0; i < cs->n_turn_states; i++) {
        int32_t p = nextn_state_pos(cs->turn_state[i]);
        if (p <= l && (!best || p > nextn_state_pos(best))) best = cs->turn_state[i];
    }
    if (best && nextn_state_pos(best) > 0) {
        int32_t p = nextn_state_pos(best);
        if (!nextn_spec_state_restore(cs->spec, 0, best, err)) return false;
        drop_states_after(cs, p);
        cs->n_held = p;
        cs->last.restored_pos = p;
        *start = p;
        return true;
    }
    reset_sequence(cs);
    cs->last.restored_pos = 0;
    *start = 0;
    return true;
}

static bool has_state_at(const chat_session *cs, int32_t pos) {
    if (cs->sys_state && nextn_state_pos(cs->sys_state) == pos) return true;
    for (int i = 0; i < cs->n_turn_states; i++)
        if (nextn_state_pos(cs->turn_state[i]) == pos) return true;
    return false;
}

/* Decodes ids[start..n) in parts, taking checkpoints at sys_pos and head_pos on the way;
 * samples the first reply token. */
static bool prefill(chat_session *cs, const int32_t *ids, int32_t n, int32_t start, int32_t sys_pos,
                    int32_t head_pos, int32_t *first, nextn_error *err) {
    nextn_sampler_params sp = cs->sp;
    int32_t pos = start;
    bool done = false;
    while (!done) {
        int32_t end = NX_MIN(n, pos + PREFILL_PART);
        if (sys_pos > pos && sys_pos < end) end = sys_pos;
        if (head_pos > pos && head_pos < end) end = head_pos;
        if (!nextn_spec_prefill_seq_part(cs->spec, 0, ids, n, end - pos, &sp, first, &done, err)) return false;
        pos = end;
        if (done) break;
        if (pos == sys_pos && !has_state_at(cs, pos) && !take_state(cs, true, err)) return false;
        if (pos == head_pos && !has_state_at(cs, pos) && !take_state(cs, false, err)) return false;
    }
    return true;
}

typedef struct reply_acc {
    nx_buf text;
    chat_text_fn on_text;
    void *user;
} reply_acc;

static bool emit(const chat_session *cs, nextn_stream *stream, int32_t t, reply_acc *acc, nextn_error *err) {
    const char *s;
    size_t len;
    nx_err ie;
    if (!nextn_stream_push(stream, t, &s, &len, err)) return false;
    if (len && !nx_buf_append(&acc->text, s, len, &ie)) return failf(err, "%s", ie.msg);
    if (len && acc->on_text) acc->on_text(acc->user, s, len);
    (void)cs;
    return true;
}

/* Splits a finished reply into reasoning and content, as the display did. */
static void split_reply(const char *text, size_t len, bool in_think, nx_buf *reasoning, nx_buf *content);

bool chat_turn(chat_session *cs, const char *user_text, chat_text_fn on_text, void *user, volatile sig_atomic_t *stop,
               nextn_error *err) {
    memset(&cs->last, 0, sizeof cs->last);
    cs->last.restored_pos = -1;
    if (!push_msg(cs, "user", user_text, NULL, err)) return false;
    nx_buf text = {0}, base = {0};
    int32_t *ids = NULL, n = 0, *out = NULL;
    nextn_stream *stream = NULL;
    reply_acc acc = {{0}, on_text, user};
    bool ok = false;
    nx_err ie;
    if (!render(cs, cs->n_msgs, true, &text, err) || !tokenize(cs, text.data, text.len, &ids, &n, err)) goto fail;
    if (n == 0) {
        failf(err, "the prompt is empty");
        goto fail;
    }
    if (n >= cs->n_ctx) {
        failf(err, "the conversation is %d tokens but the context holds n_ctx = %d (raise it with -c, or /clear)", n,
              cs->n_ctx);
        goto fail;
    }
    /* where later renderings branch: after the system prompt, after this turn's assistant header */
    int32_t sys_pos = 0, head_pos = 0;
    static const char SYS[] = "<|im_start|>system\n", END[] = "<|im_end|>\n";
    if (cs->n_msgs && !strcmp(cs->msgs[0].role, "system") && !strncmp(text.data, SYS, sizeof SYS - 1)) {
        /* ChatML: the system turn ends with the first <|im_end|> (the template cannot render a
         * system message alone: it requires a user query) */
        const char *e = strstr(text.data, END);
        if (e) sys_pos = prefix_tokens(cs, text.data, (size_t)(e + sizeof END - 1 - text.data), ids, n);
    }
    if (!render(cs, cs->n_msgs, false, &base, err)) goto fail;
    if (base.len < text.len && !memcmp(text.data, base.data, base.len)) {
        /* the generation prompt follows the conversation: its first line is the header */
        const char *nl = memchr(text.data + base.len, '\n', text.len - base.len);
        if (nl) head_pos = prefix_tokens(cs, text.data, (size_t)(nl + 1 - text.data), ids, n);
    }
    if (head_pos >= n) head_pos = 0;

    int32_t start = 0;
    if (!reuse_prefix(cs, ids, n, &start, err)) goto fail;
    cs->last.n_prompt = n;
    cs->last.n_reused = start;
    cs->last.n_decoded = n - start;
    nextn_spec_stats st0, st1;
    nextn_spec_get_stats(cs->spec, &st0);
    double t0 = nx_cli_time_s();
    int32_t first = 0;
    if (!prefill(cs, ids, n, start, sys_pos, head_pos, &first, err)) {
        reset_sequence(cs);
        goto fail;
    }
    cs->last.t_prompt = nx_cli_time_s() - t0;
    if (!held_set(cs, ids, n, err)) {
        reset_sequence(cs);
        goto fail;
    }
    if (stop && *stop) {
        /* interrupted while the prompt was decoded: no reply, the turn is dropped; the
         * sequence keeps the prompt (a later turn reuses what still matches) */
        cs->last.interrupted = true;
        if (!nextn_spec_seq_keep(cs->spec, 0, err)) {
            reset_sequence(cs);
            goto fail;
        }
        cs->n_held = NX_MIN(cs->n_held, nextn_spec_seq_n_past(cs->spec, 0));
        pop_msg(cs);
        ok = true;
        goto done;
    }

    /* the reply */
    if (!nextn_stream_create(&stream, cs->tok, false, err)) goto gen_fail;
    const int32_t max_step = nextn_spec_max_step_tokens(cs->spec);
    int32_t *emitted = malloc(((size_t)cs->n_ctx + (size_t)max_step) * sizeof *emitted);
    out = malloc((size_t)max_step * sizeof *out);
    if (!emitted || !out) {
        free(emitted);
        failf(err, "out of memory");
        goto gen_fail;
    }
    int32_t n_emit = 0, n_step = 1, pos = n;
    out[0] = first;
    t0 = nx_cli_time_s();
    for (;;) {
        for (int32_t i = 0; i < n_step; i++) emitted[n_emit++] = out[i];
        for (int32_t i = 0; i < n_step && cs->last.n_gen < cs->n_predict; i++) {
            if (nextn_token_is_eog(cs->tok, out[i])) {
                cs->last.stopped_eog = true;
                break;
            }
            cs->last.n_gen++;
            if (!emit(cs, stream, out[i], &acc, err)) {
                free(emitted);
                goto gen_fail;
            }
        }
        if (cs->last.stopped_eog || cs->last.n_gen >= cs->n_predict) break;
        if (stop && *stop) {
            cs->last.interrupted = true;
            break;
        }
        pos += n_step;
        if (pos >= cs->n_ctx) {
            cs->last.ctx_full = true;
            break;
        }
        if (!nextn_spec_step(cs->spec, cs->n_predict - cs->last.n_gen, out, &n_step, err)) {
            free(emitted);
            goto gen_fail;
        }
    }
    cs->last.t_gen = nx_cli_time_s() - t0;
    {
        const char *s;
        size_t len;
        if (nextn_stream_flush(stream, &s, &len, err) && len) {
            nx_buf_append(&acc.text, s, len, &ie);
            if (on_text) on_text(user, s, len);
        }
    }
    /* the sequence keeps the prompt and the reply tokens it decoded (not the last one) */
    if (!nextn_spec_seq_keep(cs->spec, 0, err)) {
        free(emitted);
        goto gen_fail;
    }
    {
        int32_t n_past = nextn_spec_seq_n_past(cs->spec, 0);
        int32_t *all = realloc(ids, ((size_t)n + (size_t)n_emit) * sizeof *all);
        if (!all) {
            free(emitted);
            failf(err, "out of memory");
            goto gen_fail;
        }
        ids = all;
        memcpy(ids + n, emitted, (size_t)n_emit * sizeof *ids);
        free(emitted);
        if (n_past > n + n_emit || !held_set(cs, ids, n_past, err)) {
            if (n_past > n + n_emit) failf(err, "the sequence holds %d positions, more than the %d tokens known", n_past,
                                           n + n_emit);
            goto gen_fail;
        }
    }
    nextn_spec_get_stats(cs->spec, &st1);
    cs->last.drafted = st1.drafted - st0.drafted;
    cs->last.accepted = st1.accepted - st0.accepted;
    {
        nx_buf r = {0}, c = {0};
        split_reply(acc.text.data ? acc.text.data : "", acc.text.len, cs->think, &r, &c);
        ok = push_msg(cs, "assistant", c.data ? c.data : "", cs->think ? (r.data ? r.data : "") : NULL, err);
        nx_buf_free(&r);
        nx_buf_free(&c);
        if (!ok) goto gen_fail;
    }
    cs->n_turns++;
    cs->tot_prompt += cs->last.n_prompt;
    cs->tot_decoded += cs->last.n_decoded;
    cs->tot_gen += cs->last.n_gen;
    cs->tot_t_prompt += cs->last.t_prompt;
    cs->tot_t_gen += cs->last.t_gen;
    cs->tot_drafted += cs->last.drafted;
    cs->tot_accepted += cs->last.accepted;
    goto done;
gen_fail:
    /* the reply could not be finished: the sequence no longer matches anything known */
    reset_sequence(cs);
fail:
    if (cs->n_msgs && !strcmp(cs->msgs[cs->n_msgs - 1].role, "user")) pop_msg(cs);
    ok = false;
done:
    nextn_stream_free(stream);
    nx_buf_free(&text);
    nx_buf_free(&base);
    nx_buf_free(&acc.text);
    free(ids);
    free(out);
    return ok;
}

/* ---- reasoning / answer split -------------------------------------------------------------------- */

static const char THINK_END[] = "</think>";

void think_split_init(think_split *ts, bool in_think) {
    memset(ts, 0, sizeof *ts);
    ts->in_think = in_think;
}

static void answer_out(think_split *ts, const char *p, size_t n, think_out_fn out, void *user) {
    if (!ts->answer_started) {
        while (n && *p == '\n') p++, n--;
        if (!n) return;
        ts->answer_started = true;
    }
    out(user, false, p, n);
}

void think_split_feed(think_split *ts, const char *text, size_t len, think_out_fn out, void *user) {
    const size_t tl = sizeof THINK_END - 1;
    while (len) {
        if (!ts->in_think) {
            answer_out(ts, text, len, out, user);
            return;
        }
        /* look for "</think>" across the held bytes and the new text */
        char win[sizeof ts->hold + 64];
        size_t take = NX_MIN(len, sizeof win - ts->n_hold);
        memcpy(win, ts->hold, ts->n_hold);
        memcpy(win + ts->n_hold, text, take);
        size_t wn = ts->n_hold + take;
        text += take;
        len -= take;
        ts->n_hold = 0;
        const char *hit = NULL;
        for (size_t i = 0; i + tl <= wn && !hit; i++)
            if (!memcmp(win + i, THINK_END, tl)) hit = win + i;
        if (hit) {
            if (hit > win) out(user, true, win, (size_t)(hit - win));
            ts->in_think = false;
            size_t after = wn - (size_t)(hit + tl - win);
            if (after) answer_out(ts, hit + tl, after, out, user);
            continue;
        }
        /* keep the longest tail that could start "</think>" */
        size_t keep = 0;
        for (size_t k = NX_MIN(wn, tl - 1); k > 0 && !keep; k--)
            if (!memcmp(win + wn - k, THINK_END, k)) keep = k;
        if (wn > keep) out(user, true, win, wn - keep);
        memcpy(ts->hold, win + wn - keep, keep);
        ts->n_hold = keep;
    }
}

void think_split_flush(think_split *ts, think_out_fn out, void *user) {
    if (ts->n_hold) out(user, ts->in_think, ts->hold, ts->n_hold);
    ts->n_hold = 0;
}

typedef struct split_acc {
    nx_buf *r, *c;
} split_acc;

static void split_acc_out(void *user, bool reasoning, const char *text, size_t len) {
    split_acc *a = user;
    nx_err e;
    nx_buf_append(reasoning ? a->r : a->c, text, len, &e);
}

static void split_reply(const char *text, size_t len, bool in_think, nx_buf *reasoning, nx_buf *content) {
    think_split ts;
    split_acc a = {reasoning, content};
    nx_err e;
    nx_buf_append(reasoning, "", 0, &e);
    nx_buf_append(content, "", 0, &e);
    think_split_init(&ts, in_think);
    think_split_feed(&ts, text, len, split_acc_out, &a);
    think_split_flush(&ts, split_acc_out, &a);
}

/* ---- files ------------------------------------------------------------------------------------------ */

bool chat_save(const chat_session *cs, const char *path, nextn_error *err) {
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return failf(err, "out of memory");
    for (size_t i = 0; i < cs->n_msgs; i++) {
        const chat_msg *m = &cs->msgs[i];
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(arr, o) || !cJSON_AddStringToObject(o, "role", m->role) ||
            !cJSON_AddStringToObject(o, "content", m->content) ||
            (m->reasoning && *m->reasoning && !cJSON_AddStringToObject(o, "reasoning_content", m->reasoning))) {
            cJSON_Delete(arr);
            return failf(err, "out of memory");
        }
    }
    char *s = cJSON_Print(arr);
    cJSON_Delete(arr);
    if (!s) return failf(err, "out of memory");
    char tmp[4096];
    nx_err ie;
    FILE *f = nx_fcreate_begin(path, tmp, sizeof tmp, &ie); /* a temporary file renamed over path */
    if (!f) {
        free(s);
        return failf(err, "%s", ie.msg);
    }
    size_t n = strlen(s);
    bool ok = fwrite(s, 1, n, f) == n && fputc('\n', f) != EOF;
    if (!ok) snprintf(ie.msg, sizeof ie.msg, "writing '%s' failed: %s", path, strerror(errno));
    free(s);
    if (!nx_fcreate_commit(f, tmp, path, ok, &ie)) return failf(err, "%s", ie.msg);
    return true;
}

bool chat_load(chat_session *cs, const char *path, nextn_error *err) {
    nx_err ie;
    FILE *f = nx_fopen_regular(path, &ie); /* no FIFO, device or link: never blocks */
    if (!f) return failf(err, "%s", ie.msg);
    nx_buf b = {0};
    char chunk[65536];
    size_t k;
    bool ok = nx_buf_append(&b, "", 0, &ie);
    while (ok && (k = fread(chunk, 1, sizeof chunk, f)) > 0) ok = nx_buf_append(&b, chunk, k, &ie);
    bool rerr = ferror(f);
    fclose(f);
    if (!ok || rerr) {
        nx_buf_free(&b);
        return failf(err, "reading '%s' failed", path);
    }
    cJSON *root = cJSON_ParseWithLength(b.data, b.len);
    nx_buf_free(&b);
    if (!root) return failf(err, "%s: invalid JSON", path);
    const cJSON *arr = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "messages") : root;
    chat_session tmp = *cs;
    tmp.msgs = NULL;
    tmp.n_msgs = tmp.cap_msgs = 0;
    if (!cJSON_IsArray(arr)) {
        cJSON_Delete(root);
        return failf(err, "%s: expected an array of messages (or {\"messages\": [...]})", path);
    }
    int i = 0;
    const cJSON *it;
    ok = true;
    cJSON_ArrayForEach(it, arr) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(it, "reasoning_content");
        if (!cJSON_IsString(role) || (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
                                      strcmp(role->valuestring, "assistant"))) {
            ok = failf(err, "%s: message %d: role must be \"system\", \"user\" or \"assistant\"", path, i);
            break;
        }
        if (!strcmp(role->valuestring, "system") && i > 0) {
            ok = failf(err, "%s: message %d: a system message must come first", path, i);
            break;
        }
        if (content && !cJSON_IsNull(content) && !cJSON_IsString(content)) {
            ok = failf(err, "%s: message %d: content must be a string (content parts are not supported)", path, i);
            break;
        }
        if (reasoning && !cJSON_IsNull(reasoning) && !cJSON_IsString(reasoning)) {
            ok = failf(err, "%s: message %d: reasoning_content must be a string", path, i);
            break;
        }
        const char *c = cJSON_IsString(content) ? content->valuestring : "";
        if (!push_msg(&tmp, role->valuestring, c, cJSON_IsString(reasoning) ? reasoning->valuestring : NULL, err)) {
            ok = false;
            break;
        }
        i++;
    }
    cJSON_Delete(root);
    if (ok) {
        /* the template's own checks (e.g. no user message) before anything changes */
        nx_buf t = {0};
        ok = tmp.n_msgs == 0 || render(&tmp, tmp.n_msgs, true, &t, err);
        if (!ok) snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg), " (in %s)", path);
        nx_buf_free(&t);
    }
    if (!ok) {
        for (size_t j = 0; j < tmp.n_msgs; j++) msg_free(&tmp.msgs[j]);
        free(tmp.msgs);
        return false;
    }
    for (size_t j = 0; j < cs->n_msgs; j++) msg_free(&cs->msgs[j]);
    free(cs->msgs);
    cs->msgs = tmp.msgs;
    cs->n_msgs = tmp.n_msgs;
    cs->cap_msgs = tmp.cap_msgs;
    return true;
}
