/* srv_params.h - the request fields of `nextn serve` that both APIs read (srv_openai.c for
 * /v1/completions and /v1/chat/completions, srv_native.c's callers for /completion and /infill):
 * prompts, logit bias, the sampler list, and /infill's prompt.  Pure functions over cJSON and
 * the tokenizer; no I/O, no threads (the caller serialises tokenizer access as for
 * nx_srv_parse_request).  On failure *status is the HTTP status and err names the field.
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
#ifndef NX_SRV_PARAMS_H
#define NX_SRV_PARAMS_H

#include <cjson/cJSON.h>

#include "nextn_internal.h"
#include "nextn.h"

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

#endif
