/* srv_native.h - llama-server's own API (POST /completion, /infill, /apply-template, GET /slots,
 * POST /slots/{id}): the request pieces it adds to the OpenAI ones and its response shapes, with
 * llama-server's field names.  Pure functions over cJSON and the tokenizer; no I/O, no threads
 * (the caller serialises tokenizer access as for nx_srv_parse_request).
 *
 * Prompts ("prompt" of /completion, also accepted by /v1/completions):
 *   "text"                          one prompt (BOS when the vocabulary wants one, control
 *                                   tokens written in the text recognised)
 *   [12, 34, 56]                    one prompt of token ids
 *   [12, "text", 34]                one prompt: ids and strings mixed (BOS only when the first
 *                                   element is a string)
 *   {"prompt_string": P}            one prompt, P any of the forms above
 *   ["a", [1, 2], {...}, [3, "b"]]  several prompts (an array without a number at its top level):
 *                                   one result each, answered as an array in order
 * Logit bias ("logit_bias", both APIs; llama-server's forms, OpenAI's being one of them):
 *   {"15043": 1.0}                  token id (a decimal string) -> bias
 *   {"Hello": -0.5}                 any other key is text: every token of it gets the bias
 *   [[15043, 1.0], ["Hello", -0.5]] the same as pairs
 *   a bias of false bans the token (-inf); a number adds to its logit.
 *   Unlike llama-server, which skips malformed entries silently, a malformed entry, an id
 *   outside the vocabulary or a text that tokenizes to nothing is a 400 naming the entry.
 */
#ifndef NX_SRV_NATIVE_H
#define NX_SRV_NATIVE_H

#include <cjson/cJSON.h>

#include "nextn_internal.h"
#include "nextn.h"
#include "server/srv_engine.h"
#include "server/srv_request.h"

#define NX_SRV_MAX_PROMPTS 64 /* prompts in one request */

typedef struct nx_srv_prompts {
    int32_t *ids[NX_SRV_MAX_PROMPTS]; /* owned */
    int32_t n[NX_SRV_MAX_PROMPTS];
    int count;
    bool many;                        /* the request gave an array of prompts: answer an array */
} nx_srv_prompts;

/* Tokenizes "prompt" (see above).  On failure *status is the HTTP status and err names the
 * element ('prompt'[2][1] ...). */
bool nx_srv_parse_prompts(const cJSON *p, nextn_tokenizer *tok, int32_t n_vocab, nx_srv_prompts *out, int *status,
                          nx_err *err);
void nx_srv_prompts_free(nx_srv_prompts *p);

/* "logit_bias" (see above) into a malloc'ed array (*out NULL and *n 0 for an empty one). */
bool nx_srv_parse_logit_bias(const cJSON *v, nextn_tokenizer *tok, int32_t n_vocab, nextn_logit_bias **out,
                             int32_t *n, int *status, nx_err *err);

/* "samplers": the names (or llama-server's one-letter string) of the samplers to use, in
 * order.  This server's chain is fixed (penalties, top_k, top_p, min_p, temperature), so the
 * list must name them in that order; a sampler left out is turned off (top_k 0, top_p 1,
 * min_p 0, penalties off, temperature 1: no scaling), and dry / typ_p / xtc / top_n_sigma may
 * be listed because their parameters are at their off values here.  Anything else is a 400. */
bool nx_srv_parse_samplers(const cJSON *v, nextn_sampler_params *smp, int *status, nx_err *err);

/* A file name for --slot-save-path: 1..255 bytes of valid UTF-8 without control characters,
 * path separators, ':' '*' '?' '"' '<' '>' '|', "..", a leading or trailing space or a
 * trailing '.'.  Returns NULL when valid, else the reason. */
const char *nx_srv_bad_filename(const char *name);

/* Fill-in-the-middle (POST /infill): the vocabulary's FIM control tokens, -1 when absent
 * (Qwen's names: <|fim_prefix|> <|fim_suffix|> <|fim_middle|>, optionally <|repo_name|> and
 * <|file_sep|>).  Infill needs the first three. */
typedef struct nx_srv_fim {
    int32_t pre, suf, mid, rep, sep;
} nx_srv_fim;
void nx_srv_fim_tokens(nextn_tokenizer *tok, nx_srv_fim *f);
/* The infill prompt of body o as llama-server lays it out:
 *   [extra context][BOS][FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
 * input_prefix / input_suffix: a string or an array of ids and strings (plain text: no BOS,
 * control-token names not recognised); prompt: an optional string (control tokens recognised);
 * input_extra: [{"filename": F, "text": T}], each chunk as "<|file_sep|>F\nT" (after
 * "<|repo_name|>myproject\n" when the vocabulary has it; without <|file_sep|> a text separator).
 * Kept: the last 3/4 n_batch prefix tokens, the first n_batch/4 - (2 + prompt) suffix tokens, the
 * last n_ctx - n_batch - 2 n_predict extra tokens (n_predict: the server's default). */
bool nx_srv_infill_prompt(const cJSON *o, nextn_tokenizer *tok, int32_t n_vocab, const nx_srv_fim *f, int32_t n_batch,
                          int32_t n_ctx, int32_t n_predict, int32_t **ids, int32_t *n, int *status, nx_err *err);

/* ---- responses (malloc'ed JSON text; r read after r->done or with r->mu held) ----------- */

/* A token's "id", "token" (its text cut to whole UTF-8 characters, control tokens rendered) and
 * "bytes" (all of its bytes), as llama-server writes them. */
void nx_srv_token_fields(cJSON *o, const nextn_tokenizer *tok, int32_t id);
/* A log-probability for JSON: -inf (no JSON form) becomes the lowest float, as in llama-server. */
double nx_srv_logprob_value(float lp);
/* The settings a request ran with (generation_settings; GET /slots "params"). */
cJSON *nx_srv_settings_json(const nx_srv_req *r, const char *model, int32_t n_ctx);
/* completion_probabilities of tokens [from, to) of r (llama-server's shape: id, token, bytes,
 * logprob, top_logprobs[]). */
cJSON *nx_srv_native_probs_json(const nx_srv_req *r, const nextn_tokenizer *tok, int32_t from, int32_t to);
/* The result of one /completion prompt (an object; the caller prints it or puts several in an
 * array).  stop_word: the stop string that ended the text, or NULL. */
cJSON *nx_srv_native_result(const nx_srv_req *r, const nextn_tokenizer *tok, const char *model, int32_t n_ctx,
                            int index, int32_t id_slot, bool return_tokens);
/* One streamed event: text piece and the tokens [tok_from, tok_to) it came with. */
char *nx_srv_native_chunk_json(const nx_srv_req *r, const nextn_tokenizer *tok, int index, int32_t id_slot,
                               const char *text, size_t n, int32_t tok_from, int32_t tok_to);
/* GET /slots */
char *nx_srv_slots_json(const nx_srv_slot_info *info, int n, bool spec);
/* POST /slots/{id}?action=... replies */
char *nx_srv_slot_result_json(nx_srv_slot_action a, int32_t id_slot, const char *filename,
                              const nx_srv_slot_result *res);

#endif
