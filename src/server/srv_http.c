/* srv_http.c - HTTP routing, request bodies, JSON replies and server-sent-event streams of
 * `nextn serve` (see server.h).
 *
 * libmicrohttpd runs one thread per connection, so a handler may block: a non-streaming
 * request waits on its nx_srv_req condition variable until the engine finishes it, and a
 * stream's content reader waits there for the next piece of text.
 */
#include "server/server.h"

#include "nextn_internal.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct nx_server {
    nx_server_params p;
    const nextn_model *model;
    nextn_tokenizer *tok;
    pthread_mutex_t tok_mu;   /* the tokenizer's word cache is not thread-safe */
    pthread_mutex_t id_mu;
    uint64_t next_id;
    int64_t started;
    nx_srv_engine *engine;
    struct MHD_Daemon *daemon;
    int port;
};

/* Per-connection upload state. */
typedef struct conn {
    nx_buf body;
    bool too_big;
    bool oom;
} conn;

/* ---- replies ----------------------------------------------------------------------------- */

static void add_common_headers(struct MHD_Response *resp, const char *type) {
    MHD_add_response_header(resp, "Content-Type", type);
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
}

/* Queues json (malloc'ed, taken over; NULL = out of memory) with the status. */
static enum MHD_Result reply_json(struct MHD_Connection *c, unsigned status, char *json) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":500}}";
        json = strdup(oom);
        status = 500;
        if (!json) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(json);
        return MHD_NO;
    }
    add_common_headers(resp, "application/json; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *msg) {
    return reply_json(c, status, nx_srv_error_json(msg, (int)status));
}

/* The chat page (src/server/webui/index.html, embedded by cmake/embed.cmake). */
extern const unsigned char nx_webui_index_html[];
extern const unsigned long nx_webui_index_html_len;

static enum MHD_Result reply_webui(struct MHD_Connection *c, bool head) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(head ? 0 : (size_t)nx_webui_index_html_len,
                                                                (void *)nx_webui_index_html, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/html; charset=utf-8");
    /* the page talks only to this server and inserts model text as text */
    MHD_add_response_header(resp, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- streaming --------------------------------------------------------------------------- */

typedef struct sse {
    nx_server *s;
    nx_srv_req *r;
    bool thinking;          /* chat with an open think block: text is reasoning until </think> */
    bool skip_nl;           /* drop newlines right after </think> */
    int phase;              /* 0 role chunk due (chat), 1 text, 2 finished */
    size_t sent;            /* bytes of r->text already sent */
    nx_buf out;             /* SSE bytes not yet handed to MHD */
    size_t out_pos;
} sse;

static bool sse_event(sse *st, char *json) {
    nx_err err;
    if (!json) return false;
    bool ok = nx_buf_append(&st->out, "data: ", 6, &err) && nx_buf_append(&st->out, json, strlen(json), &err) &&
              nx_buf_append(&st->out, "\n\n", 2, &err);
    free(json);
    return ok;
}

static const char think_end[] = "</think>";

/* Bytes at the end of t[0..n) that could be the start of "</think>". */
static size_t tag_prefix_tail(const char *t, size_t n) {
    for (size_t k = NX_MIN(n, sizeof think_end - 2); k > 0; k--)
        if (memcmp(t + n - k, think_end, k) == 0) return k;
    return 0;
}

/* Emits the released text r->text[st->sent .. avail) as content / reasoning deltas. */
static bool sse_text(sse *st, const char *text, size_t avail, bool done) {
    const char *model = st->s->p.model_name;
    while (st->sent < avail) {
        const char *p = text + st->sent;
        size_t n = avail - st->sent;
        if (st->thinking) {
            const char *tag = NULL;
            for (size_t i = 0; i + sizeof think_end - 1 <= n && !tag; i++)
                if (memcmp(p + i, think_end, sizeof think_end - 1) == 0) tag = p + i;
            if (tag) {
                if (tag > p && !sse_event(st, nx_srv_chunk_json(st->r, model, p, (size_t)(tag - p), true, NULL, false)))
                    return false;
                st->sent += (size_t)(tag - p) + sizeof think_end - 1;
                st->thinking = false;
                st->skip_nl = true;
                continue;
            }
            if (!done) n -= tag_prefix_tail(p, n);
            if (n && !sse_event(st, nx_srv_chunk_json(st->r, model, p, n, true, NULL, false))) return false;
            st->sent += n;
            return true;
        }
        if (st->skip_nl) {
            while (n && *p == '\n') p++, n--, st->sent++;
            if (!n) return true;
            st->skip_nl = false;
        }
        if (!sse_event(st, nx_srv_chunk_json(st->r, model, p, n, false, NULL, false))) return false;
        st->sent += n;
    }
    return true;
}

/* Produces the next SSE events into st->out; blocks until the engine has something. */
static bool sse_refill(sse *st) {
    nx_srv_req *r = st->r;
    const char *model = st->s->p.model_name;
    if (st->phase == 0) {
        st->phase = 1;
        return sse_event(st, nx_srv_chunk_json(r, model, NULL, 0, false, NULL, true));
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done && r->safe_len <= st->sent) pthread_cond_wait(&r->cv, &r->mu);
    bool ok = sse_text(st, r->text.data, r->safe_len, r->done);
    if (ok && r->done && st->sent >= r->safe_len) {
        if (r->error[0]) {
            ok = sse_event(st, nx_srv_error_json(r->error, 500));
        } else {
            ok = sse_event(st, nx_srv_chunk_json(r, model, NULL, 0, false, r->finish_reason, false));
            if (ok && r->include_usage) ok = sse_event(st, nx_srv_usage_chunk_json(r, model));
        }
        nx_err err;
        ok = ok && nx_buf_append(&st->out, "data: [DONE]\n\n", 14, &err);
        st->phase = 2;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
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
    pthread_mutex_lock(&st->r->mu);
    if (!st->r->done) st->r->cancelled = true;
    pthread_mutex_unlock(&st->r->mu);
    nx_srv_req_unref(st->r);
    nx_buf_free(&st->out);
    free(st);
}

/* ---- endpoints --------------------------------------------------------------------------- */

static enum MHD_Result handle_generate(nx_server *s, struct MHD_Connection *c, const conn *cn, bool chat) {
    nx_srv_req *r = nx_srv_req_new();
    if (!r) return reply_error(c, 500, "out of memory");
    nx_err err;
    int status = 400;
    bool thinking = false;
    pthread_mutex_lock(&s->tok_mu);
    const bool ok = nx_srv_parse_request(cn->body.data ? cn->body.data : "", cn->body.len, chat, &s->p.defaults,
                                         s->tok, r, &thinking, &status, &err);
    pthread_mutex_unlock(&s->tok_mu);
    if (!ok) {
        nx_srv_req_unref(r);
        return reply_error(c, (unsigned)status, err.msg);
    }
    pthread_mutex_lock(&s->id_mu);
    const uint64_t id = ++s->next_id;
    pthread_mutex_unlock(&s->id_mu);
    snprintf(r->id, sizeof r->id, "%s-%llx-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)s->started,
             (unsigned long long)id);
    r->created = (int64_t)time(NULL);
    if (!nx_srv_engine_submit(s->engine, r, &err)) {
        nx_srv_req_unref(r);
        return reply_error(c, 503, err.msg);
    }
    if (r->stream) {
        sse *st = calloc(1, sizeof *st);
        if (!st) {
            pthread_mutex_lock(&r->mu);
            r->cancelled = true;
            pthread_mutex_unlock(&r->mu);
            nx_srv_req_unref(r);
            return reply_error(c, 500, "out of memory");
        }
        st->s = s;
        st->r = r; /* the stream owns our reference now */
        st->thinking = chat && thinking;
        st->phase = chat ? 0 : 1;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_read, st, sse_free);
        if (!resp) {
            sse_free(st);
            return MHD_NO;
        }
        add_common_headers(resp, "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    enum MHD_Result ret;
    if (r->error[0])
        ret = reply_error(c, strstr(r->error, "shutting down") ? 503 : 500, r->error);
    else
        ret = reply_json(c, 200, nx_srv_response_json(r, s->p.model_name, thinking));
    nx_srv_req_unref(r);
    return ret;
}

static enum MHD_Result handle_health(nx_server *s, struct MHD_Connection *c) {
    int idle, busy, queued;
    nx_srv_engine_load(s->engine, &idle, &busy, &queued);
    char *json = malloc(160);
    if (json)
        snprintf(json, 160, "{\"status\":\"ok\",\"slots_idle\":%d,\"slots_processing\":%d,\"requests_queued\":%d}", idle,
                 busy, queued);
    return reply_json(c, 200, json);
}

static bool authorized(const nx_server *s, struct MHD_Connection *c) {
    if (!s->p.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, s->p.api_key) == 0;
}

static bool path_is(const char *url, const char *path) {
    return strcmp(url, path) == 0 || (strncmp(url, "/v1", 3) == 0 && strcmp(url + 3, path) == 0);
}

static enum MHD_Result route(nx_server *s, struct MHD_Connection *c, const char *url, const char *method,
                             const conn *cn) {
    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    if (strcmp(method, "OPTIONS") == 0) { /* CORS pre-flight */
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (!s->p.no_webui && (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)) {
        const bool head = strcmp(method, "HEAD") == 0;
        return get || head ? reply_webui(c, head) : reply_error(c, 405, "use GET for the chat page");
    }
    if (strcmp(url, "/health") == 0 || strcmp(url, "/v1/health") == 0)
        return get ? handle_health(s, c) : reply_error(c, 405, "use GET for /health");
    const bool models = path_is(url, "/models"), compl = path_is(url, "/completions"),
               chat = path_is(url, "/chat/completions");
    if (!models && !compl && !chat) {
        char msg[300];
        snprintf(msg, sizeof msg, "no endpoint %.200s (try /v1/completions, /v1/chat/completions, /v1/models, /health)",
                 url);
        return reply_error(c, 404, msg);
    }
    if (!authorized(s, c)) return reply_error(c, 401, "missing or wrong API key (Authorization: Bearer KEY)");
    if (models) {
        if (!get) return reply_error(c, 405, "use GET for /v1/models");
        return reply_json(c, 200, nx_srv_models_json(s->p.model_name, s->started, s->p.defaults.n_ctx));
    }
    if (!post) return reply_error(c, 405, "use POST for completions");
    if (cn->oom) return reply_error(c, 500, "out of memory reading the request body");
    if (cn->too_big) {
        char msg[160];
        snprintf(msg, sizeof msg, "request body larger than %zu bytes (server option --max-body)", s->p.max_body);
        return reply_error(c, 413, msg);
    }
    return handle_generate(s, c, cn, chat);
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
    return route(s, c, url, method, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    conn *cn = *con_cls;
    if (!cn) return;
    nx_buf_free(&cn->body);
    free(cn);
    *con_cls = NULL;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

bool nx_server_start(nx_server **out, const nextn_model *model, const nx_server_params *p, nx_err *err) {
    *out = NULL;
    nx_server *s = nx_calloc(1, sizeof *s, "server", err);
    if (!s) return false;
    s->p = *p;
    s->model = model;
    s->tok = nextn_model_tokenizer(model);
    s->started = (int64_t)time(NULL);
    pthread_mutex_init(&s->tok_mu, NULL);
    pthread_mutex_init(&s->id_mu, NULL);
    nextn_model_info mi;
    nextn_model_get_info(model, &mi);
    s->p.defaults.n_ctx = p->engine.n_ctx;
    s->p.defaults.n_vocab = mi.n_vocab;

    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)p->port);
    if (p->port < 0 || p->port > 65535 || inet_pton(AF_INET, p->host, &addr.sin_addr) != 1) {
        nx_server_stop(s);
        return nx_fail(err, "serve: cannot bind '%s' port %d: need an IPv4 address and a port in 0..65535", p->host,
                       p->port);
    }
    if (!s->tok) {
        nx_server_stop(s);
        return nx_fail(err, "serve: the model has no tokenizer (tokenizer.ggml.* keys)");
    }
    nx_err cerr;
    if (!nx_chat_select(nx_api_model(model)->gguf, p->chat_format, &s->p.defaults.chat_format, &cerr)) {
        if (p->chat_format) {
            nx_server_stop(s);
            return nx_fail(err, "serve: --chat-format: %s", cerr.msg);
        }
        s->p.defaults.chat_format = NX_CHAT_NONE; /* /v1/chat/completions answers with the reason */
    }
    if (!nx_srv_engine_start(&s->engine, model, &p->engine, err)) {
        nx_server_stop(s);
        return false;
    }
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, (uint16_t)p->port,
                                 NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)256, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    if (!s->daemon) {
        nx_server_stop(s);
        return nx_fail(err, "serve: cannot listen on %s:%d (address in use or not available?)", p->host, p->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : p->port;
    *out = s;
    return true;
}

int nx_server_port(const nx_server *s) { return s->port; }
nx_srv_engine *nx_server_engine(nx_server *s) { return s->engine; }

void nx_server_stop(nx_server *s) {
    if (!s) return;
    /* the engine first: it fails every waiting request, which unblocks their connection threads */
    if (s->daemon) MHD_quiesce_daemon(s->daemon);
    nx_srv_engine_stop(s->engine);
    if (s->daemon) MHD_stop_daemon(s->daemon); /* joins the connection threads */
    nx_srv_engine_free(s->engine);
    pthread_mutex_destroy(&s->tok_mu);
    pthread_mutex_destroy(&s->id_mu);
    free(s);
}
