/* srv_http.c - HTTP side of `nextn serve` (see server.h): listening sockets, the route table,
 * protocol checks (sizes, methods, authentication, Content-Type, CORS), JSON replies,
 * server-sent-event streams, the access log, /metrics, and shutdown.
 *
 * libmicrohttpd runs one thread per connection, so a handler may block: a non-streaming
 * request waits on its nx_srv_req condition variable until the engine finishes it, and a
 * stream's content reader waits there for the next piece of text.  Both wake up every
 * POLL_S seconds to look at the client's socket: a client that went away cancels its request
 * (nx_srv_engine_cancel), so a hung-up client never keeps a slot or a place in the queue.
 *
 * Shutdown (nx_server_stop): stop accepting (close the listening sockets), stop the engine
 * (every unfinished request fails with 503), wait until every request in flight has sent its
 * final reply (bounded by DRAIN_S), then stop the daemons (joins the connection threads).
 */
#include "server/server.h"

#include "nextn_internal.h"
#include "server/srv_json.h"
#include "server/srv_native.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTEN 4
#define POLL_S 0.1           /* how often a waiting handler looks at its client's socket */
#define DRAIN_S 10.0         /* shutdown: the longest wait for replies in flight */
#define MAX_URL 8192         /* path + query bytes (beyond: 414) */
#define MAX_HEADERS 32768    /* header bytes (beyond: 431) */
#define MHD_POOL (256 << 10) /* libmicrohttpd's per-connection memory: above the two limits, so that
                              * they are answered here, in JSON */
#define MAX_STATUS_KEYS 96   /* (endpoint, status) pairs counted by /metrics */

typedef struct route route;

typedef struct status_count {
    int endpoint; /* route index, -1 = no endpoint */
    unsigned status;
    uint64_t n;
} status_count;

struct nx_server {
    nx_server_params p;
    const nextn_model *model;
    nextn_tokenizer *tok;
    pthread_mutex_t tok_mu;  /* the tokenizer's word cache is not thread-safe */
    pthread_mutex_t mu;      /* everything below up to the daemons */
    pthread_cond_t drained;  /* active reached 0 */
    uint64_t next_id;
    int active;              /* requests between their first byte and their completion */
    bool stopping;
    status_count counts[MAX_STATUS_KEYS];
    int n_counts;
    pthread_mutex_t log_mu;
    FILE *log;
    int64_t started;
    nx_srv_engine *engine;
    struct MHD_Daemon *daemons[MAX_LISTEN];
    int fds[MAX_LISTEN];
    int n_listen;
    int port;
    char url[300];
    char addrs[400];
    nx_srv_fim fim;          /* the vocabulary's fill-in-the-middle tokens (/infill) */
};

/* Per-request state (libmicrohttpd's con_cls), created at the first call for a request. */
typedef struct conn {
    double t0;
    const route *rt;
    char method[16];
    char path[256];          /* for the log: escaped, truncated */
    char client[64];
    nx_buf body;
    bool too_big, oom;
    unsigned status;         /* the status answered */
    char error[256];         /* the error message answered (log) */
    nx_srv_req *req;         /* a generation request (own reference, for the log) */
} conn;

/* ---- helpers -------------------------------------------------------------------------------- */

static bool is_stopping(nx_server *s) {
    pthread_mutex_lock(&s->mu);
    const bool st = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Copies text for the log: bytes outside printable ASCII, quotes and backslashes as \xNN. */
static void log_escape(char *out, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < cap; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    if (o + 5 >= cap && o >= 3) memcpy(out + o - 3, "...", 3);
    out[o] = '\0';
}

/* The client closed its side of the connection (or it broke).  Data it sent meanwhile (a
 * pipelined request) does not count as gone. */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    char b;
    const ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- the route table ------------------------------------------------------------------------ */

enum { M_GET = 1, M_HEAD = 2, M_POST = 4, M_OPTIONS = 8 };

typedef enum MHD_Result (*handler_fn)(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);

struct route {
    const char *path;   /* exact, or a prefix when it ends with '/' (rest = what follows) */
    unsigned methods;   /* M_GET includes HEAD; OPTIONS is always allowed */
    bool auth;          /* needs the API key (when there is one) */
    const char *label;  /* /metrics endpoint label (aliases share their canonical path's) */
    handler_fn fn;
};

static enum MHD_Result handle_health(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_metrics(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_props(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_models(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_model(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_tokenize(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_detokenize(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_completions(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_chat(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_webui(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_native(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static cJSON *small_body(nx_server *s, struct MHD_Connection *c, conn *cn, const char *const *keys, size_t n_keys,
                         enum MHD_Result *ret);
static enum MHD_Result handle_infill(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_apply_template(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_slots(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);
static enum MHD_Result handle_slot_action(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest);

/* Every endpoint.  A new endpoint is one line here and its handler. */
static const route ROUTES[] = {
    {"/health", M_GET, false, "/health", handle_health},
    {"/v1/health", M_GET, false, "/health", handle_health},
    {"/metrics", M_GET, true, "/metrics", handle_metrics},
    {"/props", M_GET, true, "/props", handle_props},
    {"/v1/models", M_GET, true, "/v1/models", handle_models},
    {"/models", M_GET, true, "/v1/models", handle_models},
    {"/v1/models/", M_GET, true, "/v1/models/{id}", handle_model},
    {"/models/", M_GET, true, "/v1/models/{id}", handle_model},
    {"/tokenize", M_POST, true, "/tokenize", handle_tokenize},
    {"/detokenize", M_POST, true, "/detokenize", handle_detokenize},
    {"/v1/completions", M_POST, true, "/v1/completions", handle_completions},
    /* llama-server's own API: /completion and /completions (without /v1) answer natively */
    {"/completion", M_POST, true, "/completion", handle_native},
    {"/completions", M_POST, true, "/completion", handle_native},
    {"/infill", M_POST, true, "/infill", handle_infill},
    {"/apply-template", M_POST, true, "/apply-template", handle_apply_template},
    {"/slots", M_GET, true, "/slots", handle_slots},
    {"/slots/", M_POST, true, "/slots/{id}", handle_slot_action},
    {"/v1/chat/completions", M_POST, true, "/v1/chat/completions", handle_chat},
    {"/chat/completions", M_POST, true, "/v1/chat/completions", handle_chat},
    {"/", M_GET, false, "/", handle_webui},
    {"/index.html", M_GET, false, "/", handle_webui},
};

static const route *find_route(const char *url, const char **rest) {
    for (size_t i = 0; i < NX_ARRAY_LEN(ROUTES); i++)
        if (strcmp(url, ROUTES[i].path) == 0) {
            *rest = "";
            return &ROUTES[i];
        }
    for (size_t i = 0; i < NX_ARRAY_LEN(ROUTES); i++) {
        const size_t n = strlen(ROUTES[i].path);
        if (n > 1 && ROUTES[i].path[n - 1] == '/' && strncmp(url, ROUTES[i].path, n) == 0 && url[n]) {
            *rest = url + n;
            return &ROUTES[i];
        }
    }
    return NULL;
}

static int route_index(const route *rt) {
    /* aliases count under their canonical path: the first route with the same label */
    for (size_t i = 0; i < NX_ARRAY_LEN(ROUTES); i++)
        if (strcmp(ROUTES[i].label, rt->label) == 0) return (int)i;
    return -1;
}

static void allow_text(const route *rt, char *out, size_t cap) {
    snprintf(out, cap, "%s%sOPTIONS", rt->methods & M_GET ? "GET, HEAD, " : "", rt->methods & M_POST ? "POST, " : "");
}

/* ---- replies -------------------------------------------------------------------------------- */

/* An Origin whose host is localhost, 127.0.0.1 or [::1] (any scheme and port): llama-server's
 * --cors-origins value "localhost" grants those. */
static bool origin_is_local(const char *origin) {
    const char *h = strstr(origin, "://");
    if (!h) return false;
    h += 3;
    static const char *const hosts[] = {"localhost", "127.0.0.1", "[::1]"};
    for (size_t i = 0; i < NX_ARRAY_LEN(hosts); i++) {
        const size_t n = strlen(hosts[i]);
        if (strncasecmp(h, hosts[i], n) == 0 && (h[n] == '\0' || h[n] == ':' || h[n] == '/')) return true;
    }
    return false;
}

/* The origin to grant CORS to (echoed in Access-Control-Allow-Origin), NULL for none. */
static const char *cors_origin(const nx_server *s, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    if (!origin) return NULL;
    for (int i = 0; i < s->p.n_cors; i++) {
        if (strcmp(s->p.cors_origins[i], "*") == 0) return "*";
        if (strcasecmp(s->p.cors_origins[i], origin) == 0) return origin;
        if (strcmp(s->p.cors_origins[i], "localhost") == 0 && origin_is_local(origin)) return origin;
    }
    return NULL;
}

static void add_headers(nx_server *s, struct MHD_Connection *c, struct MHD_Response *resp, const char *type,
                        unsigned status) {
    if (type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    const char *origin = cors_origin(s, c);
    if (origin) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
    }
    if (status == 431 || status == 414 || is_stopping(s)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* Queues body (malloc'ed, taken over; NULL = out of memory) with the status. */
static enum MHD_Result reply_body(nx_server *s, struct MHD_Connection *c, conn *cn, unsigned status, char *body,
                                  const char *type, const char *h1, const char *v1) {
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":500}}";
        body = strdup(oom);
        status = 500;
        type = "application/json; charset=utf-8";
        h1 = NULL;
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    add_headers(s, c, resp, type, status);
    if (h1) MHD_add_response_header(resp, h1, v1);
    cn->status = status;
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_json(nx_server *s, struct MHD_Connection *c, conn *cn, unsigned status, char *json) {
    return reply_body(s, c, cn, status, json, "application/json; charset=utf-8", NULL, NULL);
}

static enum MHD_Result reply_error_h(nx_server *s, struct MHD_Connection *c, conn *cn, unsigned status, const char *msg,
                                     const char *h1, const char *v1) {
    snprintf(cn->error, sizeof cn->error, "%s", msg);
    return reply_body(s, c, cn, status, nx_srv_error_json(msg, (int)status), "application/json; charset=utf-8", h1, v1);
}

static enum MHD_Result reply_error(nx_server *s, struct MHD_Connection *c, conn *cn, unsigned status, const char *msg) {
    return reply_error_h(s, c, cn, status, msg, NULL, NULL);
}

/* llama-server's exceed_context_size_error (400): the prompt does not fit a slot. */
static enum MHD_Result reply_exceeds(nx_server *s, struct MHD_Connection *c, conn *cn, const char *msg, int32_t n_prompt) {
    snprintf(cn->error, sizeof cn->error, "%s", msg);
    return reply_body(s, c, cn, 400, nx_srv_exceed_error_json(msg, n_prompt, s->p.defaults.n_ctx),
                      "application/json; charset=utf-8", NULL, NULL);
}

static char *print_free(cJSON *o) {
    char *t = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return t;
}

/* ---- streaming ------------------------------------------------------------------------------ */

/* One choice of a stream (a request has n of them, OpenAI "n"; llama-server's streams one). */
typedef struct sse_choice {
    nx_srv_req *r;          /* the choice's request (the first choice holds the others' references) */
    bool thinking;          /* chat with an open think block: text is reasoning until </think> */
    bool skip_nl;           /* drop newlines right after </think> */
    size_t sent;            /* bytes of r->text handled */
    nx_buf content;         /* tools: the reply's content so far (gen_prefix + text after </think>) */
    nx_srv_tool_scan scan;
    int32_t lp_sent;        /* generated tokens whose log-probabilities / ids went out */
    bool finished;          /* its final chunk went out */
} sse_choice;

typedef struct sse {
    nx_server *s;
    struct MHD_Connection *c;
    int phase;              /* 0 role chunks due (chat), 1 text, 2 finished */
    nx_buf out;             /* SSE bytes not yet handed to MHD */
    size_t out_pos;
    double t_out;           /* when the last bytes were produced */
    bool native;            /* llama-server's /completion stream (no [DONE]) */
    bool return_tokens;     /* native: the final event lists the tokens */
    int n;                  /* choices */
    sse_choice *ch;         /* [n]; ch[0].r holds the stream's reference */
} sse;

/* A stream of request r and its other choices (r->group); takes the caller's reference to r. */
static sse *sse_new(nx_server *s, struct MHD_Connection *c, nx_srv_req *r, bool thinking) {
    sse *st = calloc(1, sizeof *st);
    if (st && !(st->ch = calloc((size_t)1 + (size_t)r->n_group, sizeof *st->ch))) {
        free(st);
        st = NULL;
    }
    if (!st) return NULL;
    st->s = s;
    st->c = c;
    st->n = 1 + r->n_group;
    st->t_out = nx_time_s();
    for (int k = 0; k < st->n; k++) {
        st->ch[k].r = k == 0 ? r : r->group[k - 1];
        st->ch[k].thinking = thinking;
    }
    return st;
}

static bool sse_event(sse *st, char *json) {
    nx_err err;
    if (!json) return false;
    bool ok = nx_buf_append(&st->out, "data: ", 6, &err) && nx_buf_append(&st->out, json, strlen(json), &err) &&
              nx_buf_append(&st->out, "\n\n", 2, &err);
    free(json);
    return ok;
}

/* A text chunk, with the log-probabilities of the tokens generated since the last one. */
static char *chunk(sse *st, sse_choice *ch, const char *p, size_t n, bool reasoning, const char *finish, bool role) {
    nx_srv_req *r = ch->r;
    cJSON *lp = NULL;
    if (!role && r->n_probs >= 0 && r->n_tokens > ch->lp_sent) {
        lp = nx_srv_oai_logprobs(r, st->s->tok, ch->lp_sent, r->n_tokens);
        ch->lp_sent = r->n_tokens;
    }
    return nx_srv_chunk_json(r, st->s->p.model_name, p, n, reasoning, finish, role, lp);
}

static const char think_end[] = "</think>";

/* Bytes at the end of t[0..n) that could be the start of "</think>". */
static size_t tag_prefix_tail(const char *t, size_t n) {
    for (size_t k = NX_MIN(n, sizeof think_end - 2); k > 0; k--)
        if (memcmp(t + n - k, think_end, k) == 0) return k;
    return 0;
}

/* Content text: straight out, or (tools) through the tool-call scanner. */
static bool sse_content(sse *st, sse_choice *ch, const char *p, size_t n, bool done) {
    const char *model = st->s->p.model_name;
    if (!ch->r->tools) return !n || sse_event(st, chunk(st, ch, p, n, false, NULL, false));
    nx_err err;
    if (n && !nx_buf_append(&ch->content, p, n, &err)) return false;
    for (;;) {
        nx_srv_tool_ev ev;
        nx_srv_tool_next(&ch->scan, ch->r->tools, ch->content.data, ch->content.len, done, &ev);
        if (ev.kind == NX_TOOL_EV_NONE) return true;
        bool ok;
        if (ev.kind == NX_TOOL_EV_TEXT) {
            ok = sse_event(st, chunk(st, ch, ch->content.data + ev.off, ev.n, false, NULL, false));
        } else {
            const int k = ch->scan.n_calls - 1;
            ok = sse_event(st, nx_srv_tool_chunk_json(ch->r, model, k, &ev.call, false)) &&
                 sse_event(st, nx_srv_tool_chunk_json(ch->r, model, k, &ev.call, true));
            nx_srv_tool_call_free(&ev.call);
        }
        if (!ok) return false;
    }
}

/* Emits the released text r->text[ch->sent .. avail) as content / reasoning deltas. */
static bool sse_text(sse *st, sse_choice *ch, const char *text, size_t avail, bool done) {
    if (st->native) { /* llama-server's events: the text so far and the tokens that came with it */
        if (ch->sent >= avail) return true;
        nx_srv_req *r = ch->r;
        char *ev = nx_srv_native_chunk_json(r, st->s->tok, 0, r->slot_used, text + ch->sent, avail - ch->sent,
                                            ch->lp_sent, r->n_tokens);
        ch->lp_sent = r->n_tokens;
        ch->sent = avail;
        return sse_event(st, ev);
    }
    while (ch->sent < avail) {
        const char *p = text + ch->sent;
        size_t n = avail - ch->sent;
        if (ch->thinking) {
            const char *tag = NULL;
            for (size_t i = 0; i + sizeof think_end - 1 <= n && !tag; i++)
                if (memcmp(p + i, think_end, sizeof think_end - 1) == 0) tag = p + i;
            if (tag) {
                if (tag > p && !sse_event(st, chunk(st, ch, p, (size_t)(tag - p), true, NULL, false)))
                    return false;
                ch->sent += (size_t)(tag - p) + sizeof think_end - 1;
                ch->thinking = false;
                ch->skip_nl = true;
                continue;
            }
            if (!done) n -= tag_prefix_tail(p, n);
            if (n && !sse_event(st, chunk(st, ch, p, n, true, NULL, false))) return false;
            ch->sent += n;
            return true;
        }
        if (ch->skip_nl) {
            while (n && *p == '\n') p++, n--, ch->sent++;
            if (!n) return true;
            ch->skip_nl = false;
        }
        if (!sse_content(st, ch, p, n, false)) return false;
        ch->sent += n;
    }
    return true;
}

static void sse_cancel_all(sse *st) {
    for (int k = 0; k < st->n; k++) nx_srv_engine_cancel(st->s->engine, st->ch[k].r);
}

/* With ch->r->mu held: the events of choice ch's newly released text and, when it is done, its
 * end (the final chunk; an error event ends the whole stream).  *fatal: the stream ends here. */
static bool sse_choice_events(sse *st, sse_choice *ch, bool *fatal) {
    nx_srv_req *r = ch->r;
    const char *model = st->s->p.model_name;
    *fatal = false;
    bool ok = sse_text(st, ch, r->text.data, r->safe_len, r->done);
    if (!ok || !r->done || ch->sent < r->safe_len) return ok;
    if (r->tools && !r->error[0]) ok = sse_content(st, ch, NULL, 0, true);
    if (!ok) {
    } else if (r->error[0]) {
        ok = sse_event(st, nx_srv_error_json(r->error, r->error_status ? r->error_status : 500));
        *fatal = true;
    } else if (st->native) {
        ok = sse_event(st, print_free(nx_srv_native_result(r, st->s->tok, model, st->s->p.defaults.n_ctx, 0,
                                                           r->slot_used, st->return_tokens)));
    } else {
        ok = sse_event(st, chunk(st, ch, NULL, 0, false, nx_srv_finish_reason(r, ch->scan.n_calls), false));
    }
    ch->finished = true;
    return ok;
}

/* Produces the next SSE events into st->out; blocks until the engine has something for some
 * choice (or the client goes away: the requests are cancelled, and the stream ends).  The
 * choices' chunks interleave in the order their text comes; each carries its "index". */
static bool sse_refill(sse *st) {
    const char *model = st->s->p.model_name;
    if (st->phase == 0) {
        st->phase = 1;
        for (int k = 0; k < st->n; k++)
            if (!sse_event(st, chunk(st, &st->ch[k], NULL, 0, false, NULL, true))) return false;
        return true;
    }
    const double heartbeat = NX_MIN(15.0, st->s->p.timeout_s / 2.0);
    for (;;) {
        /* every choice with news, in index order */
        bool any = false, fatal = false, ok = true;
        int open = -1;
        for (int k = 0; k < st->n && ok && !fatal; k++) {
            sse_choice *ch = &st->ch[k];
            if (ch->finished) continue;
            pthread_mutex_lock(&ch->r->mu);
            if (ch->r->done || ch->r->safe_len > ch->sent) {
                any = true;
                ok = sse_choice_events(st, ch, &fatal);
            }
            pthread_mutex_unlock(&ch->r->mu);
            if (!ch->finished && open < 0) open = k;
        }
        if (!ok) return false;
        bool all = true;
        for (int k = 0; k < st->n; k++) all = all && st->ch[k].finished;
        if (fatal || all) {
            if (fatal) {
                sse_cancel_all(st);
            } else if (!st->native && st->ch[0].r->include_usage) {
                nx_srv_req *rs[st->n];
                for (int k = 0; k < st->n; k++) rs[k] = st->ch[k].r;
                if (!sse_event(st, nx_srv_usage_chunk_json_n((const nx_srv_req *const *)rs, st->n, model))) return false;
            }
            nx_err err;
            if (!st->native && !nx_buf_append(&st->out, "data: [DONE]\n\n", 14, &err)) return false; /* OpenAI's end */
            st->phase = 2;
            st->t_out = nx_time_s();
            return true;
        }
        if (any) {
            st->t_out = nx_time_s();
            return true;
        }
        /* nothing yet: wait on the first open choice (the engine wakes it at every token it
         * generates; all choices advance in the same engine iterations) */
        nx_srv_req *r = st->ch[open].r;
        pthread_mutex_lock(&r->mu);
        const bool woken = r->done || r->safe_len > st->ch[open].sent || nx_srv_req_wait_locked(r, POLL_S);
        pthread_mutex_unlock(&r->mu);
        if (woken) continue;
        if (client_gone(st->c)) {
            sse_cancel_all(st);
            return false;
        }
        if (nx_time_s() - st->t_out >= heartbeat) {
            /* nothing to say for a while (waiting in the queue, a long prompt): an SSE comment
             * keeps the connection from looking idle to the server's and to proxies' time-outs */
            st->t_out = nx_time_s();
            nx_err err;
            return nx_buf_append(&st->out, ": keep-alive\n\n", 14, &err);
        }
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *st = cls;
    while (st->out_pos >= st->out.len) {
        st->out.len = 0;
        st->out_pos = 0;
        if (st->phase == 2) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!sse_refill(st)) return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    const size_t n = NX_MIN(max, st->out.len - st->out_pos);
    memcpy(buf, st->out.data + st->out_pos, n);
    st->out_pos += n;
    return (ssize_t)n;
}

/* Called when the response is done or the client went away: unfinished work is cancelled. */
static void sse_free(void *cls) {
    sse *st = cls;
    for (int k = 0; k < st->n; k++) {
        nx_srv_req *r = st->ch[k].r;
        pthread_mutex_lock(&r->mu);
        const bool done = r->done;
        pthread_mutex_unlock(&r->mu);
        if (!done) nx_srv_engine_cancel(st->s->engine, r);
        nx_buf_free(&st->ch[k].content);
    }
    nx_srv_req_unref(st->ch[0].r); /* the others' references are the first choice's */
    nx_buf_free(&st->out);
    free(st->ch);
    free(st);
}

/* ---- generation ----------------------------------------------------------------------------- */

/* Parses one choice of a completions / chat request (with the tokenizer lock held); tests'
 * test_force replaces its sampled tokens. */
static bool parse_choice(nx_server *s, const char *body, size_t len, bool chat, nx_srv_req *r, bool *thinking,
                         int *status, nx_err *err) {
    bool ok = nx_srv_parse_request(body, len, chat, &s->p.defaults, s->tok, r, thinking, status, err);
    if (ok && s->p.test_force) { /* tests: the reply is given text (see server.h) */
        char *forced = s->p.test_force(s->p.test_force_user, body, len);
        if (forced) {
            int32_t n = 0;
            nextn_error terr;
            const size_t fl = strlen(forced);
            r->forced = malloc((fl + 1) * sizeof *r->forced);
            ok = r->forced && nextn_tokenize(s->tok, forced, fl, false, false, r->forced, (int32_t)fl + 1, &n, &terr) &&
                 n > 0;
            r->n_forced = n;
            if (!ok) {
                *status = 500;
                snprintf(err->msg, sizeof err->msg, "test_force: cannot tokenize the forced text");
            }
            free(forced);
        }
    }
    return ok;
}

/* Waits until r is done, watching the client: one that hangs up cancels r.  Returns false when
 * the client went away. */
static bool wait_done(nx_server *s, struct MHD_Connection *c, nx_srv_req *r) {
    pthread_mutex_lock(&r->mu);
    bool gone = false;
    double next_check = nx_time_s() + POLL_S;
    while (!r->done) {
        nx_srv_req_wait_locked(r, POLL_S);
        if (gone || r->done || nx_time_s() < next_check) continue;
        next_check = nx_time_s() + POLL_S;
        pthread_mutex_unlock(&r->mu);
        gone = client_gone(c);
        if (gone) nx_srv_engine_cancel(s->engine, r);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return !gone;
}

/* Waits for every request of rs[0..n) (the choices or prompts of one HTTP request), watching the
 * client: when it hangs up, all of them are cancelled and still waited for (so their results
 * are final when read).  Returns false if the client went away. */
static bool wait_all(nx_server *s, struct MHD_Connection *c, nx_srv_req *const *rs, int n) {
    bool gone = false;
    for (int k = 0; k < n && !gone; k++) gone = !wait_done(s, c, rs[k]);
    if (!gone) return true;
    for (int k = 0; k < n; k++) nx_srv_engine_cancel(s->engine, rs[k]);
    for (int k = 0; k < n; k++) {
        pthread_mutex_lock(&rs[k]->mu);
        while (!rs[k]->done) nx_srv_req_wait_locked(rs[k], POLL_S);
        pthread_mutex_unlock(&rs[k]->mu);
    }
    return false;
}

/* Queues the event stream st (which then owns the request's reference) as the 200 answer. */
static enum MHD_Result queue_sse(nx_server *s, struct MHD_Connection *c, conn *cn, sse *st) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
    if (!resp) {
        sse_free(st);
        return MHD_NO;
    }
    add_headers(s, c, resp, "text/event-stream", 200);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    cn->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* POST /v1/completions and /v1/chat/completions.  With "n" > 1 every choice is a request of its
 * own, parsed from the same body, choice k sampling with seed + k (so it equals an n = 1
 * request with that seed); the first carries the others and the engine runs them as a group
 * (srv_engine.h). */
static enum MHD_Result handle_generate(nx_server *s, struct MHD_Connection *c, conn *cn, bool chat) {
    nx_srv_req *r = nx_srv_req_new();
    if (!r) return reply_error(s, c, cn, 500, "out of memory");
    nx_err err;
    int status = 400;
    bool thinking = false;
    const char *body = cn->body.data ? cn->body.data : "";
    pthread_mutex_lock(&s->tok_mu);
    bool ok = parse_choice(s, body, cn->body.len, chat, r, &thinking, &status, &err);
    if (ok && r->n_choices > 1) {
        r->group = calloc((size_t)r->n_choices - 1, sizeof *r->group);
        if (!r->group) ok = false, status = 500, snprintf(err.msg, sizeof err.msg, "out of memory");
        for (int32_t k = 1; ok && k < r->n_choices; k++) {
            nx_srv_req *g = nx_srv_req_new();
            bool th = false;
            if (!g) {
                ok = false, status = 500, snprintf(err.msg, sizeof err.msg, "out of memory");
                break;
            }
            r->group[r->n_group++] = g;
            ok = parse_choice(s, body, cn->body.len, chat, g, &th, &status, &err);
            g->choice = k;
            g->smp.seed = r->smp.seed + (uint64_t)k; /* docs/server.md "Several choices" */
        }
    }
    pthread_mutex_unlock(&s->tok_mu);
    if (!ok) {
        const bool exceeds = r->exceeds_ctx;
        const int32_t n_prompt = r->n_prompt;
        nx_srv_req_unref(r);
        return exceeds ? reply_exceeds(s, c, cn, err.msg, n_prompt) : reply_error(s, c, cn, (unsigned)status, err.msg);
    }
    pthread_mutex_lock(&s->mu);
    const uint64_t id = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    snprintf(r->id, sizeof r->id, "%s-%llx-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)s->started,
             (unsigned long long)id);
    r->created = (int64_t)time(NULL);
    const int n = 1 + r->n_group;
    nx_srv_req *rs[n];
    rs[0] = r;
    for (int k = 1; k < n; k++) {
        rs[k] = r->group[k - 1];
        memcpy(rs[k]->id, r->id, sizeof r->id);
        rs[k]->created = r->created;
    }
    if (!nx_srv_engine_submit(s->engine, r, &err)) {
        nx_srv_req_unref(r);
        return reply_error(s, c, cn, 503, err.msg);
    }
    nx_srv_req_ref(r);
    cn->req = r; /* the log's reference */
    if (r->stream) {
        sse *st = sse_new(s, c, r, chat && thinking); /* the stream owns our reference now */
        if (!st) {
            for (int k = 0; k < n; k++) nx_srv_engine_cancel(s->engine, rs[k]);
            nx_srv_req_unref(r);
            return reply_error(s, c, cn, 500, "out of memory");
        }
        st->phase = chat ? 0 : 1;
        nx_err e;
        for (int k = 0; k < n; k++)
            if (rs[k]->gen_prefix && !nx_buf_append(&st->ch[k].content, rs[k]->gen_prefix, strlen(rs[k]->gen_prefix), &e)) {
                sse_free(st);
                return reply_error(s, c, cn, 500, "out of memory");
            }
        return queue_sse(s, c, cn, st);
    }
    const bool gone = !wait_all(s, c, rs, n);
    const nx_srv_req *failed = NULL;
    for (int k = 0; k < n && !failed; k++)
        if (rs[k]->error[0]) failed = rs[k];
    enum MHD_Result ret;
    if (gone) {
        cn->status = 499; /* nobody to answer (nginx's code for it, in the log and /metrics) */
        snprintf(cn->error, sizeof cn->error, "%s", failed ? failed->error : "client went away");
        ret = MHD_NO;
    } else if (failed) {
        ret = reply_error(s, c, cn, (unsigned)(failed->error_status ? failed->error_status : 500), failed->error);
    } else {
        ret = reply_json(s, c, cn, 200,
                         nx_srv_response_json_n((const nx_srv_req *const *)rs, n, s->p.model_name, thinking, s->tok));
    }
    nx_srv_req_unref(r);
    return ret;
}

static enum MHD_Result handle_completions(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    return handle_generate(s, c, cn, false);
}

static enum MHD_Result handle_chat(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    return handle_generate(s, c, cn, true);
}

/* ---- llama-server's own endpoints --------------------------------------------------------------- */

/* POST /completion, /completions (without /v1) and /infill: llama-server's format (srv_native.h).
 * Several prompts become one request each, run as slots free up, answered as an array in
 * order; a stream takes one prompt. */
static enum MHD_Result handle_native_ex(nx_server *s, struct MHD_Connection *c, conn *cn, bool infill) {
    const nx_srv_defaults *d = &s->p.defaults;
    if (infill && (s->fim.pre < 0 || s->fim.suf < 0 || s->fim.mid < 0))
        return reply_error(s, c, cn, 501, "infill is not supported by this model: its vocabulary lacks the "
                                          "<|fim_prefix|>, <|fim_suffix|> and <|fim_middle|> tokens");
    const nx_srv_api api = infill ? NX_SRV_INFILL : NX_SRV_NATIVE;
    const char *body = cn->body.data ? cn->body.data : "";
    cJSON *o = NULL;
    int status = 400;
    nx_err err;
    if (!nx_srv_parse_body(body, cn->body.len, api, d, &o, &status, &err))
        return reply_error(s, c, cn, (unsigned)status, err.msg);
    nx_srv_req *t = nx_srv_req_new(), *reqs[NX_SRV_MAX_PROMPTS] = {NULL};
    nx_srv_prompts pr = {0};
    int32_t max_tokens = 0;
    bool return_tokens = false;
    bool ok = t != NULL;
    if (!ok) snprintf(err.msg, sizeof err.msg, "out of memory"), status = 500;
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(o, "return_tokens");
    if (ok && rt && !cJSON_IsNull(rt)) {
        if (!cJSON_IsBool(rt)) ok = false, snprintf(err.msg, sizeof err.msg, "'return_tokens' must be true or false");
        return_tokens = cJSON_IsTrue(rt);
    }
    pthread_mutex_lock(&s->tok_mu);
    ok = ok && nx_srv_parse_common(o, api, d, s->tok, t, &max_tokens, &status, &err);
    if (ok && infill) {
        int32_t *ids = NULL, n = 0;
        ok = nx_srv_infill_prompt(o, s->tok, d->n_vocab, &s->fim, s->p.engine.n_batch, d->n_ctx, d->max_tokens, &ids,
                                  &n, &status, &err);
        if (ok) pr.ids[0] = ids, pr.n[0] = n, pr.count = 1;
    } else if (ok) {
        ok = nx_srv_parse_prompts(cJSON_GetObjectItemCaseSensitive(o, "prompt"), s->tok, d->n_vocab, &pr, &status, &err);
    }
    pthread_mutex_unlock(&s->tok_mu);
    cJSON_Delete(o);
    if (ok && t->stream && pr.count > 1)
        ok = false, status = 400,
        snprintf(err.msg, sizeof err.msg, "'stream' with %d prompts: a stream carries one prompt (send them one by "
                                          "one, or without stream)", pr.count);
    int n = 0;
    bool exceeds = false;
    int32_t exceeds_n = 0;
    for (int k = 0; ok && k < pr.count; k++) {
        nx_srv_req *r = reqs[k] = nx_srv_req_clone(t);
        if (!r) {
            ok = false, status = 500, snprintf(err.msg, sizeof err.msg, "out of memory");
            break;
        }
        n = k + 1;
        r->prompt = pr.ids[k];
        r->n_prompt = pr.n[k];
        pr.ids[k] = NULL;
        if (!nx_srv_finish_request(r, max_tokens, d, &status, &err)) {
            ok = false;
            exceeds = r->exceeds_ctx;
            exceeds_n = r->n_prompt;
            if (pr.many) nx_fail_prefix(&err, k == 0 ? "'prompt'[0]" : "a prompt"); /* which one */
            break;
        }
        pthread_mutex_lock(&s->mu);
        const uint64_t id = ++s->next_id;
        pthread_mutex_unlock(&s->mu);
        snprintf(r->id, sizeof r->id, "cmpl-%llx-%llu", (unsigned long long)s->started, (unsigned long long)id);
        r->created = (int64_t)time(NULL);
    }
    nx_srv_prompts_free(&pr);
    nx_srv_req_unref(t);
    int submitted = 0;
    for (int k = 0; ok && k < n; k++) {
        if (!nx_srv_engine_submit(s->engine, reqs[k], &err)) ok = false, status = 503;
        else submitted++;
    }
    if (!ok) {
        for (int k = 0; k < submitted; k++) nx_srv_engine_cancel(s->engine, reqs[k]);
        for (int k = 0; k < n; k++) nx_srv_req_unref(reqs[k]);
        return exceeds ? reply_exceeds(s, c, cn, err.msg, exceeds_n) : reply_error(s, c, cn, (unsigned)status, err.msg);
    }
    nx_srv_req_ref(reqs[0]);
    cn->req = reqs[0]; /* the log's reference */
    if (reqs[0]->stream) {
        sse *st = sse_new(s, c, reqs[0], false); /* the stream owns our reference now */
        if (!st) {
            nx_srv_engine_cancel(s->engine, reqs[0]);
            nx_srv_req_unref(reqs[0]);
            return reply_error(s, c, cn, 500, "out of memory");
        }
        st->phase = 1;
        st->native = true;
        st->return_tokens = return_tokens;
        return queue_sse(s, c, cn, st);
    }
    const bool gone = !wait_all(s, c, reqs, n);
    enum MHD_Result ret;
    const nx_srv_req *failed = NULL;
    for (int k = 0; k < n && !failed; k++)
        if (reqs[k]->error[0]) failed = reqs[k];
    if (gone) {
        cn->status = 499;
        snprintf(cn->error, sizeof cn->error, "client went away");
        ret = MHD_NO;
    } else if (failed) {
        ret = reply_error(s, c, cn, (unsigned)(failed->error_status ? failed->error_status : 500), failed->error);
    } else if (pr.many || n > 1) {
        cJSON *a = cJSON_CreateArray();
        for (int k = 0; k < n; k++)
            cJSON_AddItemToArray(a, nx_srv_native_result(reqs[k], s->tok, s->p.model_name, d->n_ctx, k,
                                                         reqs[k]->slot_used, return_tokens));
        ret = reply_json(s, c, cn, 200, print_free(a));
    } else {
        ret = reply_json(s, c, cn, 200, print_free(nx_srv_native_result(reqs[0], s->tok, s->p.model_name, d->n_ctx, 0,
                                                                        reqs[0]->slot_used, return_tokens)));
    }
    for (int k = 0; k < n; k++) nx_srv_req_unref(reqs[k]);
    return ret;
}

static enum MHD_Result handle_native(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    return handle_native_ex(s, c, cn, false);
}

static enum MHD_Result handle_infill(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    return handle_native_ex(s, c, cn, true);
}

/* POST /apply-template {"messages": [...], ...} -> {"prompt": the rendered chat prompt} */
static enum MHD_Result handle_apply_template(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    nx_buf text = {0};
    int status = 400;
    nx_err err;
    if (!nx_srv_apply_template(cn->body.data ? cn->body.data : "", cn->body.len, &s->p.defaults, &text, &status, &err))
        return reply_error(s, c, cn, (unsigned)status, err.msg);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "prompt", text.data ? text.data : "");
    nx_buf_free(&text);
    return reply_json(s, c, cn, 200, print_free(o));
}

/* GET /slots[?fail_on_no_slot=1] */
static enum MHD_Result handle_slots(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    const int32_t n = nx_srv_engine_n_slots(s->engine);
    nx_srv_slot_info *info = calloc((size_t)n, sizeof *info);
    nx_err err;
    if (!info) return reply_error(s, c, cn, 500, "out of memory");
    if (!nx_srv_engine_slots(s->engine, info, &err)) {
        free(info);
        return reply_error(s, c, cn, 503, err.msg);
    }
    const char *f = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    bool idle = false;
    for (int32_t i = 0; i < n; i++) idle = idle || !info[i].processing;
    char *json = nx_srv_slots_json(info, n, nx_srv_engine_is_spec(s->engine));
    free(info);
    if (f && strcmp(f, "0") != 0 && strcmp(f, "false") != 0 && !idle) {
        free(json);
        return reply_error(s, c, cn, 503, "no slot available");
    }
    return reply_json(s, c, cn, 200, json);
}

/* POST /slots/{id}?action=save|restore|erase, {"filename": F} for save and restore (a file in
 * --slot-save-path). */
static enum MHD_Result handle_slot_action(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    if (!s->p.slot_save_path)
        return reply_error(s, c, cn, 501, "this server does not save slots: start it with --slot-save-path DIR");
    char *end = NULL;
    const long id = strtol(rest, &end, 10);
    if (!rest[0] || *end || id < 0 || id >= nx_srv_engine_n_slots(s->engine)) {
        char msg[200], r[64];
        log_escape(r, sizeof r, rest, strlen(rest));
        snprintf(msg, sizeof msg, "invalid slot id '%s' (the server has slots 0..%d)", r,
                 nx_srv_engine_n_slots(s->engine) - 1);
        return reply_error(s, c, cn, 400, msg);
    }
    const char *a = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
    nx_srv_slot_action action;
    if (a && !strcmp(a, "save")) action = NX_SRV_SLOT_SAVE;
    else if (a && !strcmp(a, "restore")) action = NX_SRV_SLOT_RESTORE;
    else if (a && !strcmp(a, "erase")) action = NX_SRV_SLOT_ERASE;
    else return reply_error(s, c, cn, 400, "invalid or missing action: use ?action=save, restore or erase");
    char filename[300] = "", path[4400] = "";
    if (action != NX_SRV_SLOT_ERASE) {
        static const char *const keys[] = {"filename"};
        enum MHD_Result ret = MHD_NO;
        cJSON *o = small_body(s, c, cn, keys, NX_ARRAY_LEN(keys), &ret);
        if (!o) return ret;
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "filename");
        const char *why = !cJSON_IsString(f) ? "it must be a string" : nx_srv_bad_filename(f->valuestring);
        if (why) {
            char msg[200];
            snprintf(msg, sizeof msg, "invalid 'filename': %s (a file name in the --slot-save-path folder)", why);
            cJSON_Delete(o);
            return reply_error(s, c, cn, 400, msg);
        }
        snprintf(filename, sizeof filename, "%s", f->valuestring);
        snprintf(path, sizeof path, "%s/%s", s->p.slot_save_path, filename);
        cJSON_Delete(o);
    }
    nx_srv_slot_result res;
    int status = 500;
    nx_err err;
    if (!nx_srv_engine_slot_action(s->engine, (int32_t)id, action, path, filename, &res, &status, &err))
        return reply_error(s, c, cn, (unsigned)status, err.msg);
    return reply_json(s, c, cn, 200, nx_srv_slot_result_json(action, (int32_t)id, filename, &res));
}

/* ---- the other endpoints -------------------------------------------------------------------- */

/* The chat page (src/server/webui/index.html, embedded by cmake/embed.cmake). */
extern const unsigned char nx_webui_index_html[];
extern const unsigned long nx_webui_index_html_len;

static enum MHD_Result handle_webui(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    if (s->p.no_webui) return reply_error(s, c, cn, 404, "no chat page here (the server runs with --no-webui)");
    struct MHD_Response *resp = MHD_create_response_from_buffer((size_t)nx_webui_index_html_len,
                                                                (void *)nx_webui_index_html, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    add_headers(s, c, resp, "text/html; charset=utf-8", 200);
    /* the page talks only to this server and inserts model text as text */
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    cn->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result handle_health(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    int idle, busy, queued;
    nx_srv_engine_load(s->engine, &idle, &busy, &queued);
    const bool stopping = is_stopping(s);
    char *json = malloc(192);
    if (json)
        snprintf(json, 192, "{\"status\":\"%s\",\"slots_idle\":%d,\"slots_processing\":%d,\"requests_queued\":%d}",
                 stopping ? "stopping" : "ok", idle, busy, queued);
    /* a stopping server answers 503 so that a load balancer stops sending it requests */
    return reply_json(s, c, cn, stopping ? 503 : 200, json);
}

static enum MHD_Result handle_models(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    return reply_json(s, c, cn, 200, nx_srv_models_json(&s->p.defaults, s->started));
}

static enum MHD_Result handle_model(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    if (!nx_srv_model_alias(&s->p.defaults, rest)) {
        char msg[400], id[200];
        log_escape(id, sizeof id, rest, strlen(rest));
        snprintf(msg, sizeof msg, "no model '%s' here; this server serves '%s'", id, s->p.model_name);
        return reply_error(s, c, cn, 404, msg);
    }
    return reply_json(s, c, cn, 200, print_free(nx_srv_model_obj(&s->p.defaults, s->started)));
}

static void metric(nx_buf *b, const char *name, const char *type, const char *help, double v) {
    char line[512];
    nx_err e;
    snprintf(line, sizeof line, "# HELP nextn:%s %s\n# TYPE nextn:%s %s\nnextn:%s %.17g\n", name, help, name, type, name, v);
    nx_buf_append(b, line, strlen(line), &e);
}

static enum MHD_Result handle_metrics(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    nx_srv_engine_stats st;
    nx_srv_engine_get_stats(s->engine, &st);
    nx_buf b = {0};
    nx_err e;
    char line[512];
    snprintf(line, sizeof line, "# HELP nextn:requests_total HTTP requests answered, by endpoint and status.\n"
                                "# TYPE nextn:requests_total counter\n");
    nx_buf_append(&b, line, strlen(line), &e);
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_counts; i++) {
        const status_count *k = &s->counts[i];
        snprintf(line, sizeof line, "nextn:requests_total{endpoint=\"%s\",status=\"%u\"} %llu\n",
                 k->endpoint >= 0 ? ROUTES[k->endpoint].label : "other", k->status, (unsigned long long)k->n);
        nx_buf_append(&b, line, strlen(line), &e);
    }
    pthread_mutex_unlock(&s->mu);
    metric(&b, "prompt_tokens_total", "counter", "Prompt tokens decoded (tokens reused from the prompt cache excluded).",
           (double)st.prompt_tokens);
    metric(&b, "prompt_seconds_total", "counter", "Prompt processing time in seconds (admission to first token).",
           st.prompt_seconds);
    metric(&b, "tokens_predicted_total", "counter", "Generated tokens.", (double)st.predicted_tokens);
    metric(&b, "tokens_predicted_seconds_total", "counter", "Generation time in seconds (first token to last).",
           st.predicted_seconds);
    metric(&b, "spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified (speculative mode).",
           (double)st.draft_tokens);
    metric(&b, "spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted (speculative mode).",
           (double)st.draft_accepted);
    nx_srv_cache_stats cs;
    nx_srv_engine_cache_stats(s->engine, &cs);
    metric(&b, "prompt_cache_hits_total", "counter", "Requests that reused a cached prompt prefix.", (double)cs.hits);
    metric(&b, "prompt_cache_reused_tokens_total", "counter", "Prompt tokens taken from the prompt cache instead of decoded.",
           (double)cs.reused_tokens);
    metric(&b, "requests_processing", "gauge", "Busy slots.", st.busy);
    metric(&b, "requests_deferred", "gauge", "Requests waiting for a slot.", st.queued);
    metric(&b, "slots_total", "gauge", "Slots (--parallel).", st.n_slots);
    if (!b.data) return reply_error(s, c, cn, 500, "out of memory");
    return reply_body(s, c, cn, 200, b.data, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

static enum MHD_Result handle_props(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    const nx_srv_engine_params *ep = &s->p.engine;
    const nextn_sampler_params *sp = &s->p.defaults.smp;
    cJSON *o = cJSON_CreateObject();
    cJSON *dg = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(dg, "n_ctx", ep->n_ctx);
    cJSON_AddBoolToObject(dg, "speculative", ep->spec);
    cJSON *pr = cJSON_AddObjectToObject(dg, "params");
    cJSON_AddNumberToObject(pr, "n_predict", s->p.defaults.max_tokens);
    cJSON_AddNumberToObject(pr, "max_tokens", s->p.defaults.max_tokens);
    cJSON_AddNumberToObject(pr, "seed", (double)sp->seed);
    cJSON_AddNumberToObject(pr, "temperature", sp->temp);
    cJSON_AddNumberToObject(pr, "top_k", sp->top_k);
    cJSON_AddNumberToObject(pr, "top_p", sp->top_p);
    cJSON_AddNumberToObject(pr, "min_p", sp->min_p);
    cJSON_AddNumberToObject(pr, "repeat_last_n", sp->penalty_last_n);
    cJSON_AddNumberToObject(pr, "repeat_penalty", sp->penalty_repeat);
    cJSON_AddNumberToObject(pr, "presence_penalty", sp->penalty_present);
    cJSON_AddNumberToObject(pr, "frequency_penalty", sp->penalty_freq);
    if (ep->spec) {
        cJSON_AddNumberToObject(pr, "speculative.n_max", ep->spec_params.draft_max);
        cJSON_AddNumberToObject(pr, "speculative.n_min", ep->spec_params.draft_min);
        cJSON_AddNumberToObject(pr, "speculative.p_min", ep->spec_params.draft_p_min);
    }
    cJSON_AddNumberToObject(o, "total_slots", ep->n_slots);
    cJSON_AddStringToObject(o, "model_alias", s->p.model_name);
    cJSON_AddStringToObject(o, "model_path", s->p.model_path ? s->p.model_path : "");
    nx_str tmpl = {"", 0};
    nx_err e;
    const nx_gguf *g = nx_api_model(s->model)->gguf;
    if (g && nx_gguf_find_kv(g, "tokenizer.chat_template")) nx_gguf_get_str(g, "tokenizer.chat_template", &tmpl, &e);
    char *t = malloc(tmpl.len + 1);
    if (t) {
        memcpy(t, tmpl.ptr, tmpl.len);
        t[tmpl.len] = '\0';
        cJSON_AddStringToObject(o, "chat_template", t);
        free(t);
    }
    cJSON_AddStringToObject(o, "build_info", "nextn");
    cJSON *nx = cJSON_AddObjectToObject(o, "nextn");
    cJSON_AddStringToObject(nx, "spec_type", ep->spec ? "mtp" : "none");
    if (ep->spec) cJSON_AddBoolToObject(nx, "spec_adaptive", ep->spec_params.adaptive);
    cJSON_AddNumberToObject(nx, "n_batch", ep->n_batch);
    cJSON_AddNumberToObject(nx, "max_queue", ep->max_queue);
    cJSON_AddStringToObject(nx, "kv_type", ep->kv_type == NEXTN_KV_F32 ? "f32" : "f16");
    cJSON_AddStringToObject(nx, "chat_format", s->p.defaults.chat_format == NX_CHAT_NONE ? "none" : "chatml");
    return reply_json(s, c, cn, 200, print_free(o));
}

/* A JSON body of one of the small endpoints: checked as strictly as generation requests, and
 * with nothing but the given keys. */
static cJSON *small_body(nx_server *s, struct MHD_Connection *c, conn *cn, const char *const *keys, size_t n_keys,
                         enum MHD_Result *ret) {
    nx_err err;
    const char *body = cn->body.data ? cn->body.data : "";
    if (!nx_srv_json_check(body, cn->body.len, &err)) {
        *ret = reply_error(s, c, cn, 400, err.msg);
        return NULL;
    }
    cJSON *o = cJSON_ParseWithLength(body, cn->body.len);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        *ret = reply_error(s, c, cn, 400, "request body must be a JSON object");
        return NULL;
    }
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        bool known = false;
        for (size_t i = 0; i < n_keys && !known; i++) known = strcmp(v->string, keys[i]) == 0;
        if (!known) {
            char msg[200];
            snprintf(msg, sizeof msg, "unknown parameter '%.100s'", v->string);
            cJSON_Delete(o);
            *ret = reply_error(s, c, cn, 400, msg);
            return NULL;
        }
    }
    return o;
}

static bool opt_bool(const cJSON *o, const char *key, bool def, bool *out, char *msg, size_t cap) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    *out = def;
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) {
        snprintf(msg, cap, "'%s' must be true or false", key);
        return false;
    }
    *out = cJSON_IsTrue(v);
    return true;
}

/* POST /tokenize {"content", "add_special" (false), "parse_special" (true), "with_pieces" (false)}
 * -> {"tokens": [ids] or [{"id", "piece"}]} as llama-server answers (a piece that is not
 * valid UTF-8 on its own is a list of byte values). */
static enum MHD_Result handle_tokenize(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    static const char *const keys[] = {"content", "add_special", "parse_special", "with_pieces", "model"};
    enum MHD_Result ret = MHD_NO;
    cJSON *o = small_body(s, c, cn, keys, NX_ARRAY_LEN(keys), &ret);
    if (!o) return ret;
    char msg[300] = "";
    bool add_special = false, parse_special = true, with_pieces = false;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!cJSON_IsString(content)) snprintf(msg, sizeof msg, "'content' (the text to tokenize) must be a string");
    if (!msg[0] && opt_bool(o, "add_special", false, &add_special, msg, sizeof msg) &&
        opt_bool(o, "parse_special", true, &parse_special, msg, sizeof msg))
        opt_bool(o, "with_pieces", false, &with_pieces, msg, sizeof msg);
    if (msg[0]) {
        cJSON_Delete(o);
        return reply_error(s, c, cn, 400, msg);
    }
    const size_t len = strlen(content->valuestring);
    int32_t *ids = malloc((len + 2) * sizeof *ids), n = 0;
    nextn_error terr;
    pthread_mutex_lock(&s->tok_mu);
    const bool ok = ids && nextn_tokenize(s->tok, content->valuestring, len, add_special, parse_special, ids,
                                          (int32_t)len + 2, &n, &terr);
    pthread_mutex_unlock(&s->tok_mu);
    if (!ok) {
        free(ids);
        cJSON_Delete(o);
        snprintf(msg, sizeof msg, "'content': %s", ids ? terr.msg : "out of memory");
        return reply_error(s, c, cn, 400, msg);
    }
    cJSON *res = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(res, "tokens");
    for (int32_t i = 0; i < n; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(toks, cJSON_CreateNumber(ids[i]));
            continue;
        }
        char piece[512];
        size_t pl = 0;
        if (!nextn_detokenize(s->tok, &ids[i], 1, true, piece, sizeof piece - 1, &pl, &terr)) pl = 0;
        piece[pl] = '\0';
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", ids[i]);
        if (nx_utf8_valid_prefix(piece, pl) == pl && !memchr(piece, 0, pl)) {
            cJSON_AddStringToObject(t, "piece", piece);
        } else {
            cJSON *bytes = cJSON_AddArrayToObject(t, "piece");
            for (size_t k = 0; k < pl; k++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)piece[k]));
        }
        cJSON_AddItemToArray(toks, t);
    }
    free(ids);
    cJSON_Delete(o);
    return reply_json(s, c, cn, 200, print_free(res));
}

/* POST /detokenize {"tokens": [ids]} -> {"content": text} (control tokens rendered). */
static enum MHD_Result handle_detokenize(nx_server *s, struct MHD_Connection *c, conn *cn, const char *rest) {
    (void)rest;
    static const char *const keys[] = {"tokens", "model"};
    enum MHD_Result ret = MHD_NO;
    cJSON *o = small_body(s, c, cn, keys, NX_ARRAY_LEN(keys), &ret);
    if (!o) return ret;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(o, "tokens"), *it;
    if (!cJSON_IsArray(toks)) {
        cJSON_Delete(o);
        return reply_error(s, c, cn, 400, "'tokens' must be an array of token ids");
    }
    const int n = cJSON_GetArraySize(toks);
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) {
        cJSON_Delete(o);
        return reply_error(s, c, cn, 500, "out of memory");
    }
    int i = 0;
    cJSON_ArrayForEach(it, toks) {
        if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int64_t)it->valuedouble || it->valuedouble < 0 ||
            it->valuedouble >= s->p.defaults.n_vocab) {
            char msg[160];
            snprintf(msg, sizeof msg, "'tokens'[%d] is not a token id in [0, %d)", i, s->p.defaults.n_vocab);
            free(ids);
            cJSON_Delete(o);
            return reply_error(s, c, cn, 400, msg);
        }
        ids[i++] = (int32_t)it->valuedouble;
    }
    cJSON_Delete(o);
    size_t len = 0;
    nextn_error terr;
    char *text = NULL;
    bool ok = nextn_detokenize(s->tok, ids, n, true, NULL, 0, &len, &terr) && (text = malloc(len + 1)) &&
              nextn_detokenize(s->tok, ids, n, true, text, len + 1, &len, &terr);
    free(ids);
    if (!ok) {
        free(text);
        return reply_error(s, c, cn, 500, "cannot detokenize");
    }
    text[len] = '\0';
    /* the bytes of a token list need not be valid UTF-8 (a character cut in two): replace */
    nx_buf clean = {0};
    nx_err e;
    for (size_t p = 0; p < len;) {
        const int l = nx_utf8_char_len((const unsigned char *)text + p, len - p);
        if (l > 0 && text[p]) {
            nx_buf_append(&clean, text + p, (size_t)l, &e);
            p += (size_t)l;
        } else {
            nx_buf_append(&clean, "\xEF\xBF\xBD", 3, &e);
            p++;
        }
    }
    free(text);
    cJSON *res = cJSON_CreateObject();
    cJSON_AddStringToObject(res, "content", clean.data ? clean.data : "");
    nx_buf_free(&clean);
    return reply_json(s, c, cn, 200, print_free(res));
}

/* ---- protocol checks and dispatch ------------------------------------------------------------ */

/* Authorization: Bearer KEY (the scheme in any case) or, as llama-server also accepts, X-Api-Key:
 * KEY; the key compared in constant time. */
static bool authorized(const nx_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *got = NULL;
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        got = h + 7;
        while (*got == ' ') got++;
    } else {
        got = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    }
    if (!got) return false;
    const char *want = s->p.api_key;
    const size_t gl = strlen(got), wl = strlen(want);
    unsigned char diff = gl != wl;
    for (size_t i = 0; i < wl; i++) diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
    return diff == 0;
}

/* Content-Type: application/json (parameters such as charset allowed). */
static bool json_content_type(struct MHD_Connection *c) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct) return false;
    while (*ct == ' ') ct++;
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1) != 0) return false;
    const char next = ct[sizeof want - 1];
    return next == '\0' || next == ';' || next == ' ';
}

static enum MHD_Result dispatch(nx_server *s, struct MHD_Connection *c, conn *cn, const char *url, const char *method) {
    const char *rest = "";
    const route *rt = find_route(url, &rest);
    cn->rt = rt;
    unsigned m = 0;
    if (strcmp(method, "GET") == 0) m = M_GET;
    else if (strcmp(method, "HEAD") == 0) m = M_HEAD;
    else if (strcmp(method, "POST") == 0) m = M_POST;
    else if (strcmp(method, "OPTIONS") == 0) m = M_OPTIONS;
    if (!rt) {
        char msg[400], u[200];
        log_escape(u, sizeof u, url, strlen(url));
        snprintf(msg, sizeof msg,
                 "no endpoint %s (try /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics, /props, "
                 "/tokenize, /detokenize)", u);
        return reply_error(s, c, cn, 404, msg);
    }
    char allow[64];
    allow_text(rt, allow, sizeof allow);
    if (m == M_OPTIONS) { /* CORS pre-flight (granted only to --cors origins) */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        add_headers(s, c, resp, NULL, 204);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
        if (cors_origin(s, c)) {
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS, allow);
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS,
                                    "Authorization, Content-Type, X-Api-Key");
            MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE, "600");
        }
        cn->status = 204;
        enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    const unsigned allowed = rt->methods | (rt->methods & M_GET ? M_HEAD : 0);
    if (!(m & allowed)) {
        char msg[200], me[40];
        log_escape(me, sizeof me, method, strlen(method));
        snprintf(msg, sizeof msg, "%s is not allowed on %s (use %s)", me, rt->path,
                 rt->methods & M_POST ? "POST" : "GET");
        return reply_error_h(s, c, cn, 405, msg, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (rt->auth && !authorized(s, c))
        return reply_error_h(s, c, cn, 401, "missing or wrong API key (Authorization: Bearer KEY, or X-Api-Key: KEY)",
                             MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"nextn\"");
    if (m == M_POST) {
        if (cn->oom) return reply_error(s, c, cn, 500, "out of memory reading the request body");
        if (cn->too_big) {
            char msg[160];
            snprintf(msg, sizeof msg, "request body larger than %zu bytes (server option --max-body)", s->p.max_body);
            return reply_error(s, c, cn, 413, msg);
        }
        if (cn->body.len > 0 && !json_content_type(c))
            return reply_error(s, c, cn, 415, "POST bodies must be JSON: send Content-Type: application/json");
    }
    return rt->fn(s, c, cn, rest);
}

static enum MHD_Result add_len_cb(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    size_t *n = cls;
    *n += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    nx_server *s = cls;
    conn *cn = *con_cls;
    if (!cn) { /* first call: headers only */
        cn = calloc(1, sizeof *cn);
        if (!cn) return MHD_NO;
        *con_cls = cn;
        cn->t0 = nx_time_s();
        log_escape(cn->method, sizeof cn->method, method, strlen(method));
        log_escape(cn->path, sizeof cn->path, url, strlen(url));
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ci ? ci->client_addr : NULL;
        if (sa && sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, cn->client, sizeof cn->client);
        else if (sa && sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, cn->client, sizeof cn->client);
        else
            snprintf(cn->client, sizeof cn->client, "-");
        pthread_mutex_lock(&s->mu);
        s->active++;
        pthread_mutex_unlock(&s->mu);
        size_t url_len = strlen(url) + 1, head_len = 0;
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, add_len_cb, &url_len);
        MHD_get_connection_values(c, MHD_HEADER_KIND, add_len_cb, &head_len);
        if (url_len > MAX_URL) {
            char msg[120];
            snprintf(msg, sizeof msg, "URL longer than %d bytes", MAX_URL);
            return reply_error(s, c, cn, 414, msg);
        }
        if (head_len > MAX_HEADERS) {
            char msg[120];
            snprintf(msg, sizeof msg, "request header section larger than %d bytes", MAX_HEADERS);
            return reply_error(s, c, cn, 431, msg);
        }
        return MHD_YES;
    }
    if (cn->status) { /* answered at the first call: discard the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        if (!cn->too_big && cn->body.len + *upload_size > s->p.max_body) {
            cn->too_big = true;
            nx_buf_free(&cn->body);
        }
        nx_err err;
        if (!cn->too_big && !cn->oom && !nx_buf_append(&cn->body, upload, *upload_size, &err)) cn->oom = true;
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(s, c, cn, url, method);
}

/* One access-log line: time client method path status ms=... [tokens and times] [error="..."]. */
static void log_request(nx_server *s, conn *cn) {
    char line[1024], when[32];
    const time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(line, sizeof line, "%s %s %s %s %u ms=%.1f", when, cn->client, cn->method, cn->path, cn->status,
                     (nx_time_s() - cn->t0) * 1e3);
    char err[300] = "";
    if (cn->req) {
        nx_srv_req *r = cn->req;
        int32_t gen_others = 0; /* n > 1: the other choices' tokens */
        for (int32_t k = 0; k < r->n_group; k++) {
            pthread_mutex_lock(&r->group[k]->mu);
            gen_others += r->group[k]->n_gen;
            pthread_mutex_unlock(&r->group[k]->mu);
        }
        pthread_mutex_lock(&r->mu);
        const double q = r->t_start > 0 ? (r->t_start - r->t_submit) * 1e3 : 0;
        n += snprintf(line + n, sizeof line - (size_t)n, " prompt_tokens=%d gen_tokens=%d queue_ms=%.1f", r->n_prompt,
                      r->n_gen + gen_others, q);
        /* the prompt and generation times only when those phases happened (not on a 499/503 before them) */
        if (r->t_first > 0)
            n += snprintf(line + n, sizeof line - (size_t)n, " prompt_ms=%.1f", (r->t_first - r->t_start) * 1e3);
        if (r->t_first > 0 && r->t_end >= r->t_first)
            n += snprintf(line + n, sizeof line - (size_t)n, " gen_ms=%.1f", (r->t_end - r->t_first) * 1e3);
        if (r->n_group) n += snprintf(line + n, sizeof line - (size_t)n, " choices=%d", (int)r->n_group + 1);
        if (r->n_cache) n += snprintf(line + n, sizeof line - (size_t)n, " cache_tokens=%d", r->n_cache);
        if (r->draft_n)
            n += snprintf(line + n, sizeof line - (size_t)n, " draft=%lld accepted=%lld", (long long)r->draft_n,
                          (long long)r->draft_accepted);
        if (r->done && !r->error[0])
            n += snprintf(line + n, sizeof line - (size_t)n, " finish=%s", r->finish_reason ? r->finish_reason : "stop");
        else if (r->error[0])
            log_escape(err, sizeof err, r->error, strlen(r->error));
        else
            snprintf(err, sizeof err, "unfinished (connection closed)");
        n += snprintf(line + n, sizeof line - (size_t)n, " id=%s", r->id);
        pthread_mutex_unlock(&r->mu);
    }
    if (!err[0] && cn->error[0]) log_escape(err, sizeof err, cn->error, strlen(cn->error));
    if (err[0] && n > 0 && (size_t)n < sizeof line) snprintf(line + n, sizeof line - (size_t)n, " error=\"%s\"", err);
    pthread_mutex_lock(&s->log_mu);
    fprintf(s->log, "%s\n", line);
    fflush(s->log);
    pthread_mutex_unlock(&s->log_mu);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    nx_server *s = cls;
    conn *cn = *con_cls;
    if (!cn) return;
    if (!cn->status) cn->status = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? 200 : 499;
    log_request(s, cn);
    const int ep = cn->rt ? route_index(cn->rt) : -1;
    pthread_mutex_lock(&s->mu);
    int k = 0;
    while (k < s->n_counts && !(s->counts[k].endpoint == ep && s->counts[k].status == cn->status)) k++;
    if (k == s->n_counts && k < MAX_STATUS_KEYS) s->counts[s->n_counts++] = (status_count){ep, cn->status, 0};
    if (k < s->n_counts) s->counts[k].n++;
    if (--s->active == 0) pthread_cond_broadcast(&s->drained);
    pthread_mutex_unlock(&s->mu);
    if (cn->req) nx_srv_req_unref(cn->req);
    nx_buf_free(&cn->body);
    free(cn);
    *con_cls = NULL;
}

/* ---- lifetime ------------------------------------------------------------------------------- */

/* Binds every address host names (at most MAX_LISTEN), all on the same port. */
static bool listen_all(nx_server *s, const char *host_in, int port, nx_err *err) {
    char host[256];
    snprintf(host, sizeof host, "%s", host_in);
    const size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') { /* [::1] */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    if (port < 0 || port > 65535) return nx_fail(err, "serve: port %d is not in 0..65535", port);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    const int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0) return nx_fail(err, "serve: cannot resolve --host '%s': %s", host, gai_strerror(gai));
    int bound_port = port;
    char why[200] = "";
    for (struct addrinfo *a = res; a && s->n_listen < MAX_LISTEN; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
        struct sockaddr_storage ss;
        memcpy(&ss, a->ai_addr, a->ai_addrlen);
        if (a->ai_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)bound_port);
        else ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)bound_port);
        char txt[INET6_ADDRSTRLEN] = "";
        if (a->ai_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, txt, sizeof txt);
        else inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, txt, sizeof txt);
        bool dup = false; /* getaddrinfo may list an address twice */
        if (strstr(s->addrs, txt)) {
            for (const char *q = s->addrs; (q = strstr(q, txt)); q++)
                if ((q == s->addrs || q[-1] == ' ') && (q[strlen(txt)] == ',' || q[strlen(txt)] == '\0')) dup = true;
        }
        if (dup) continue;
        const int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6) { /* "::" serves IPv4 too; a specific address only itself */
            const int v6only = !IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr);
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
        }
        if (bind(fd, (struct sockaddr *)&ss, a->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            snprintf(why, sizeof why, "%s: %s", txt, strerror(errno));
            close(fd);
            continue;
        }
        if (bound_port == 0) { /* the first address chose the port: the others take the same */
            struct sockaddr_storage got;
            socklen_t gl = sizeof got;
            if (getsockname(fd, (struct sockaddr *)&got, &gl) == 0)
                bound_port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                                             : ((struct sockaddr_in6 *)&got)->sin6_port);
        }
        s->fds[s->n_listen++] = fd;
        const size_t al = strlen(s->addrs);
        snprintf(s->addrs + al, sizeof s->addrs - al, "%s%s", al ? ", " : "", txt);
    }
    freeaddrinfo(res);
    if (s->n_listen == 0)
        return nx_fail(err, "serve: cannot listen on %s port %d (%s)", host, port, why[0] ? why : "no usable address");
    s->port = bound_port;
    const bool v6 = strchr(host, ':') != NULL;
    snprintf(s->url, sizeof s->url, "http://%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", bound_port);
    return true;
}

bool nx_server_start(nx_server **out, const nextn_model *model, const nx_server_params *p, nx_err *err) {
    *out = NULL;
    nx_server *s = nx_calloc(1, sizeof *s, "server", err);
    if (!s) return false;
    s->p = *p;
    s->model = model;
    s->tok = nextn_model_tokenizer(model);
    s->started = (int64_t)time(NULL);
    s->log = p->log ? p->log : stderr;
    for (int i = 0; i < MAX_LISTEN; i++) s->fds[i] = -1;
    pthread_mutex_init(&s->tok_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->log_mu, NULL);
    pthread_cond_init(&s->drained, NULL);
    nextn_model_info mi;
    nextn_model_get_info(model, &mi);
    s->p.defaults.n_ctx = p->engine.n_ctx;
    s->p.defaults.n_vocab = mi.n_vocab;
    s->p.defaults.model_name = p->model_name;
    s->p.defaults.n_slots = p->engine.n_slots;
    if (s->p.timeout_s <= 0) s->p.timeout_s = 30;
    if (!s->tok) {
        nx_server_stop(s);
        return nx_fail(err, "serve: the model has no tokenizer (tokenizer.ggml.* keys)");
    }
    nx_srv_fim_tokens(s->tok, &s->fim);
    struct stat sb;
    if (p->slot_save_path && (stat(p->slot_save_path, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
        nx_server_stop(s);
        return nx_fail(err, "serve: --slot-save-path %s is not a folder", p->slot_save_path);
    }
    if (p->test_force && p->engine.spec) {
        nx_server_stop(s);
        return nx_fail(err, "serve: test_force works in plain mode only");
    }
    nx_err cerr;
    if (!nx_chat_select(nx_api_model(model)->gguf, p->chat_format, &s->p.defaults.chat_format, &cerr)) {
        if (p->chat_format) {
            nx_server_stop(s);
            return nx_fail(err, "serve: --chat-format: %s", cerr.msg);
        }
        s->p.defaults.chat_format = NX_CHAT_NONE; /* /v1/chat/completions answers with the reason */
    }
    if (!listen_all(s, p->host, p->port, err)) {
        nx_server_stop(s);
        return false;
    }
    if (!nx_srv_engine_start(&s->engine, model, &p->engine, err)) {
        nx_server_stop(s);
        return false;
    }
    for (int i = 0; i < s->n_listen; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        getsockname(s->fds[i], (struct sockaddr *)&ss, &sl);
        const unsigned v6 = ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0;
        s->daemons[i] = MHD_start_daemon(
            MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | v6, 0, NULL, NULL,
            on_request, s, MHD_OPTION_LISTEN_SOCKET, s->fds[i], MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned)256, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->p.timeout_s,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MHD_POOL, MHD_OPTION_END);
        if (!s->daemons[i]) {
            nx_server_stop(s);
            return nx_fail(err, "serve: cannot start the HTTP daemon on %s", s->url);
        }
    }
    *out = s;
    return true;
}

int nx_server_port(const nx_server *s) { return s->port; }
nx_srv_engine *nx_server_engine(nx_server *s) { return s->engine; }
const char *nx_server_url(const nx_server *s) { return s->url; }
const char *nx_server_addresses(const nx_server *s) { return s->addrs; }

void nx_server_stop(nx_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    /* 1. no new connections: the listening sockets are closed (connects are refused at once) */
    for (int i = 0; i < s->n_listen; i++) {
        if (s->daemons[i]) MHD_quiesce_daemon(s->daemons[i]);
        if (s->fds[i] >= 0) close(s->fds[i]);
        s->fds[i] = -1;
    }
    /* 2. every unfinished request fails with 503, which wakes its connection thread */
    nx_srv_engine_stop(s->engine);
    /* 3. the replies in flight go out (bounded: a client that does not read is not waited for) */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (time_t)DRAIN_S;
    pthread_mutex_lock(&s->mu);
    while (s->active > 0 && s->engine)
        if (pthread_cond_timedwait(&s->drained, &s->mu, &dl) != 0) break;
    pthread_mutex_unlock(&s->mu);
    /* 4. the connection threads are joined */
    for (int i = 0; i < s->n_listen; i++)
        if (s->daemons[i]) MHD_stop_daemon(s->daemons[i]);
    nx_srv_engine_free(s->engine);
    pthread_cond_destroy(&s->drained);
    pthread_mutex_destroy(&s->tok_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->log_mu);
    free(s);
}
