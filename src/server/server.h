/* server.h - `nextn serve`: an OpenAI-compatible HTTP server (libmicrohttpd, one thread per
 * connection) in front of the slot engine (srv_engine.h).
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions (also without /v1), both with
 * "stream": true as server-sent events; GET /v1/models; GET /health; GET / the chat page
 * (src/server/webui/index.html, embedded at build time; no API key needed to load it, its API
 * calls send the key the user enters).  Errors are OpenAI-style
 * {"error": {"message", "type", "code"}} with the HTTP status (400 bad request / JSON / prompt
 * too long, 401 missing or wrong API key, 404, 405, 413 body too large, 503 busy or stopping).
 */
#ifndef NX_SERVER_H
#define NX_SERVER_H

#include "server/srv_engine.h"
#include "server/srv_openai.h"

typedef struct nx_server_params {
    const char *host;           /* IPv4 address to bind, e.g. "127.0.0.1" or "0.0.0.0" */
    int port;                   /* 0: any free port (see nx_server_port) */
    const char *api_key;        /* NULL: no authentication */
    const char *model_name;     /* the "model" reported in responses */
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
nx_srv_engine *nx_server_engine(nx_server *s);
/* Stops accepting, fails unfinished requests, joins every thread, frees.  NULL is allowed. */
void nx_server_stop(nx_server *s);

#endif
