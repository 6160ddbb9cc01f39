/* srv_native.h - llama-server's own API (POST /completion, /infill, /apply-template, GET /slots,
 * POST /slots/{id}): its response shapes, with llama-server's field names, and slot file names.
 * Pure functions over cJSON and the tokenizer; no I/O, no threads (the caller serialises
 * tokenizer access as for nx_srv_parse_request).
 *
 * The request fields both APIs read (prompts, logit bias, samplers) and /infill's prompt are
 * in srv_params.h.
 */
#ifndef NX_SRV_NATIVE_H
#define NX_SRV_NATIVE_H

#include <cjson/cJSON.h>

#include "nextn_internal.h"
#include "nextn.h"
#include "server/srv_engine.h"
#include "server/srv_params.h"
#include "server/srv_request.h"

/* A file name for --slot-save-path: 1..255 bytes of valid UTF-8 without control characters,
 * path separators, ':' '*' '?' '"' '<' '>' '|', "..", a leading or trailing space or a
 * trailing '.'.  Returns NULL when valid, else the reason. */
const char *nx_srv_bad_filename(const char *name);

/* ---- responses (malloc'ed JSON text; r read after r->done or with r->mu held) ----------- */

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
