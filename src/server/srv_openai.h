/* srv_openai.h - the OpenAI-compatible request and response formats of `nextn serve`:
 * POST /v1/completions and /v1/chat/completions bodies in, JSON objects and server-sent-event
 * chunks out.  Pure functions over cJSON; no I/O, no threads. */
#ifndef NX_SRV_OPENAI_H
#define NX_SRV_OPENAI_H

#include <cjson/cJSON.h>

#include "nextn_internal.h"
#include "nextn.h"
#include "server/srv_request.h"
#include "server/srv_tools.h"

/* The request formats: OpenAI's two and llama-server's own (POST /completion, /infill). */
typedef enum nx_srv_api {
    NX_SRV_COMPLETIONS = 1,
    NX_SRV_CHAT = 2,
    NX_SRV_NATIVE = 4,
    NX_SRV_INFILL = 8,
} nx_srv_api;

#define NX_SRV_MAX_ALIASES 16

/* What a request may leave out. */
typedef struct nx_srv_defaults {
    nextn_sampler_params smp;   /* server's sampling defaults (CLI flags) */
    int32_t max_tokens;         /* when the request gives none; -1 = until EOG or a full context */
    int32_t n_ctx;              /* positions per slot: prompt + generation must fit */
    int32_t n_vocab;            /* token ids in a prompt array must be below this */
    bool enable_thinking;       /* chat default (chat_template_kwargs.enable_thinking overrides) */
    nx_chat_format chat_format; /* NX_CHAT_NONE: chat requests are refused with a clear error */
    const char *model_name;     /* the model's name, reported in every reply */
    bool strict_model;          /* true: a request's "model" must be model_name or an alias (404
                                 * otherwise); false (default): any name is answered by the one
                                 * model, as llama-server does (the reply names the real model) */
    const char *aliases[NX_SRV_MAX_ALIASES]; /* other names of the model (--alias a,b) */
    int n_aliases;
    const char *tags[NX_SRV_MAX_ALIASES];    /* informational (--tags), listed by /v1/models */
    int n_tags;
    int32_t n_slots;            /* id_slot must be below this */
} nx_srv_defaults;

/* name is the model's name or one of its aliases. */
bool nx_srv_model_alias(const nx_srv_defaults *d, const char *name);

/* The steps of parsing a generation request, shared by every API (the tokenizer is used: the
 * caller serialises access to it).  On failure *status is the HTTP status and err names the
 * field.
 *   nx_srv_parse_body:     strict JSON (srv_json.h), an object holding only the parameters api
 *                          accepts (unsupported ones only at their do-nothing values), "model"
 *                          this model; *o is the parsed body (cJSON_Delete it);
 *   nx_srv_parse_common:   sampling (and "samplers"), seed, limits (*max_tokens as asked),
 *                          stop strings, stream flags, cache_prompt, id_slot, logit_bias,
 *                          log-probabilities (OpenAI logprobs / top_logprobs, llama-server
 *                          n_probs) - everything but the prompt;
 *   nx_srv_finish_request: once the prompt is in r: refuses an empty one, and one that does not
 *                          fit a slot (r->exceeds_ctx: llama-server's exceed_context_size_error),
 *                          and caps max_tokens at the room left. */
bool nx_srv_parse_body(const char *body, size_t len, nx_srv_api api, const nx_srv_defaults *d, cJSON **o,
                       int *status, nx_err *err);
bool nx_srv_parse_common(const cJSON *o, nx_srv_api api, const nx_srv_defaults *d, nextn_tokenizer *tok,
                         nx_srv_req *r, int32_t *max_tokens, int *status, nx_err *err);
bool nx_srv_finish_request(nx_srv_req *r, int32_t max_tokens, const nx_srv_defaults *d, int *status, nx_err *err);

/* Parses a completions (chat false) or chat-completions body into r: prompt tokens (the
 * tokenizer is used here - the caller serialises access to it), sampling, limits, stop strings,
 * stream flags.  On failure *status is the HTTP status to answer (400, 413 ...) and err says
 * which field is wrong and why. */
bool nx_srv_parse_request(const char *body, size_t len, bool chat, const nx_srv_defaults *d,
                          nextn_tokenizer *tok, nx_srv_req *r, bool *thinking, int *status, nx_err *err);

/* POST /apply-template: a chat-completions body's messages rendered with the chat template (the
 * generation prompt, thinking and continuation rules as for a chat request), not tokenized. */
bool nx_srv_apply_template(const char *body, size_t len, const nx_srv_defaults *d, nx_buf *text, int *status,
                           nx_err *err);

/* Splits generated chat text into reasoning and content at the first "</think>" (when the
 * prompt opened a think block): *reasoning_len bytes of reasoning (trailing whitespace
 * trimmed), then content from *content_off (leading newlines skipped).  Without a closing tag
 * everything is reasoning.  thinking false: all content. */
void nx_srv_split_reasoning(const char *text, size_t len, bool thinking, size_t *reasoning_len,
                            size_t *content_off);

/* Response bodies (malloc'ed JSON text, NULL on out-of-memory).  r is read with r->mu held
 * by the caller or after r->done. */
char *nx_srv_response_json(const nx_srv_req *r, const char *model, bool thinking, const nextn_tokenizer *tok);
/* The same for a request's n choices rs[0 .. n) (OpenAI "n"; each choice's "index" is its
 * r->choice): usage counts the prompt once and sums the completions; timings sum the counts. */
char *nx_srv_response_json_n(const nx_srv_req *const *rs, int n, const char *model, bool thinking,
                             const nextn_tokenizer *tok);
/* The "logprobs" object of a choice for generated tokens [from, to) (NULL when the request did
 * not ask): chat {"content": [{id, token, bytes, logprob, top_logprobs: [...]}]}; completions the
 * same "content" plus OpenAI's legacy tokens / token_logprobs / top_logprobs / text_offset.
 * The numbers: srv_request.h n_probs (docs/server.md "Log-probabilities"). */
cJSON *nx_srv_oai_logprobs(const nx_srv_req *r, const nextn_tokenizer *tok, int32_t from, int32_t to);
/* One streamed chunk (its choice "index" is r->choice): text delta (content or reasoning), or the final chunk when
 * finish_reason is non-NULL (empty delta), or the role-only first chunk of a chat stream. */
char *nx_srv_chunk_json(const nx_srv_req *r, const char *model, const char *text, size_t n, bool reasoning,
                        const char *finish_reason, bool role_chunk, cJSON *logprobs /* taken; NULL none */);
/* Tool-call pieces of a chat stream (delta.tool_calls): call k's id, type and name with empty
 * arguments (arguments false), then its arguments (true). */
char *nx_srv_tool_chunk_json(const nx_srv_req *r, const char *model, int k, const nx_srv_tool_call *call,
                             bool arguments);
/* The id of the k-th tool call of a reply (unique over the request's choices). */
void nx_srv_call_id(const nx_srv_req *r, int k, char out[64]);
/* finish_reason of a finished reply with n_calls tool calls: "tool_calls" where it stopped on
 * its own after calls, else the engine's reason. */
const char *nx_srv_finish_reason(const nx_srv_req *r, int n_calls);
/* A token's "id", "token" (its text cut to whole UTF-8 characters, control tokens rendered) and
 * "bytes" (all of its bytes), as llama-server writes them. */
void nx_srv_token_fields(cJSON *o, const nextn_tokenizer *tok, int32_t id);
/* A log-probability for JSON: -inf (no JSON form) becomes the lowest float, as in llama-server. */
double nx_srv_logprob_value(float lp);
/* llama.cpp's "timings" object of a finished request. */
cJSON *nx_srv_timings_json(const nx_srv_req *r);
/* ... of a request's n choices: prompt and generated token counts (and drafts) summed, cache_n,
 * prompt_ms and queue_ms the first choice's, predicted_ms from the first token of any choice to
 * the last one's end. */
cJSON *nx_srv_timings_json_n(const nx_srv_req *const *rs, int n);
/* The usage-only chunk (stream_options.include_usage). */
char *nx_srv_usage_chunk_json(const nx_srv_req *r, const char *model);
char *nx_srv_usage_chunk_json_n(const nx_srv_req *const *rs, int n, const char *model);
/* {"error": {"message": ..., "type": ..., "code": status}} */
char *nx_srv_error_json(const char *message, int status);
/* GET /v1/models */
char *nx_srv_models_json(const nx_srv_defaults *d, int64_t created);
/* One model entry (GET /v1/models/{id}): id, aliases, tags, object, created, owned_by, meta. */
cJSON *nx_srv_model_obj(const nx_srv_defaults *d, int64_t created);
/* llama-server's exceed_context_size_error: the error object with n_prompt_tokens and n_ctx. */
char *nx_srv_exceed_error_json(const char *message, int32_t n_prompt, int32_t n_ctx);

#endif
