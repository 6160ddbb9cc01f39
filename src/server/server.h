/* server.h - `nextn serve`: an OpenAI-compatible HTTP server (libmicrohttpd, one thread per
 * connection) in front of the slot engine (srv_engine.h).
 *
 * Endpoints (a route table in srv_http.c; docs/server.md lists them): POST /v1/completions and
 * /v1/chat/completions (also without /v1; "stream": true as server-sent events), GET /v1/models
 * and /v1/models/{id}, GET|HEAD /health, GET /metrics (Prometheus text), GET /props, POST
 * /tokenize and /detokenize, GET / the chat page (src/server/webui/index.html, embedded at build
 * time; no API key needed to load it, its API calls send the key the user enters).  Errors are
 * OpenAI-style {"error": {"message", "type", "code"}}
 * with the HTTP status.  Every answered request is one access-log line on the log stream.
 */
#ifndef NX_SERVER_H
#define NX_SERVER_H

#include <stdio.h>

#include "server/srv_engine.h"
#include "server/srv_openai.h"

#define NX_SERVER_MAX_CORS 16
#define NX_SERVER_MAX_HOSTS 16

/* Tests only: the text the reply must be instead of sampled tokens (malloc'ed; NULL = sample
 * as usual), chosen from the request body.  Plain (non-speculative) mode. */
typedef char *(*nx_server_force_fn)(void *user, const char *body, size_t len);

typedef struct nx_server_params {
    const char *host;           /* address or host name to bind ("127.0.0.1", "::1", "localhost",
                                 * "0.0.0.0", "::"); a name binds every address it resolves to */
    int port;                   /* 0: any free port (see nx_server_port) */
    const char *api_key;        /* NULL: no authentication */
    bool models_need_key;       /* false (default): GET /v1/models and /v1/models/{id} answer without
                                 * the key, as llama-server's do; true: they need it too */
    bool no_slots;              /* true: GET /slots answers 501 (llama-server's --no-slots; the
                                 * POST /slots/{id} actions depend on slot_save_path only) */
    const char *model_name;     /* the "model" reported in responses (a request's must match only
                                 * with defaults.strict_model) */
    const char *model_path;     /* for GET /props */
    const char *slot_save_path; /* folder of POST /slots/{id}?action=save|restore files; NULL: those
                                 * actions answer 501 */
    int timeout_s;              /* an idle connection (keep-alive, slow upload) is closed after this */
    const char *cors_origins[NX_SERVER_MAX_CORS]; /* origins granted CORS ("*" = any); none = no CORS */
    int n_cors;
    /* Without an API key, a request's Host must name this server (DNS rebinding: a web page
     * whose host name an attacker points at 127.0.0.1 is refused with 403): an IP address,
     * "localhost", `host` itself, or one of these names (compared without case and port) */
    const char *allowed_hosts[NX_SERVER_MAX_HOSTS];
    int n_allowed_hosts;
    FILE *log;                  /* access log and error lines (NULL = stderr) */
    nx_server_force_fn test_force;
    void *test_force_user;
    const char *chat_format;    /* NULL: recognise the model's template (chat endpoint refused
                                 * with a clear error when there is none); "chatml": force it */
    size_t max_body;            /* request body bytes at most */
    bool no_webui;              /* true: no chat page at / (404 like any unknown path) */
    nx_srv_engine_params engine;
    nx_srv_defaults defaults;   /* n_ctx and n_vocab are filled in by nx_server_start */
} nx_server_params;

typedef struct nx_server nx_server;

/* Starts the engine and the HTTP daemon. */
bool nx_server_start(nx_server **out, const nextn_model *model, const nx_server_params *p, nx_err *err);
int nx_server_port(const nx_server *s);
/* The engine (prompt-cache figures at start-up). */
nx_srv_engine *nx_server_engine(nx_server *s);
/* "http://HOST:PORT" as a client would write it (IPv6 in brackets). */
const char *nx_server_url(const nx_server *s);
/* The addresses listened on, comma separated, e.g. "127.0.0.1, ::1". */
const char *nx_server_addresses(const nx_server *s);
/* Stops accepting, fails unfinished requests, joins every thread, frees.  NULL is allowed. */
void nx_server_stop(nx_server *s);

#endif
