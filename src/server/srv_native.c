/* srv_native.c - llama-server's own API: slot file names and the response shapes of /completion
 * and /slots (see srv_native.h); the request fields it shares with the OpenAI API are
 * srv_params.c's. */
#include "server/srv_native.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_openai.h"

/* ---- slot file names ------------------------------------------------------------------------ */

const char *nx_srv_bad_filename(const char *name) {
    const size_t len = strlen(name);
    if (len == 0) return "it is empty";
    if (len > 255) return "it is longer than 255 bytes";
    if (nx_utf8_valid_prefix(name, len) != len) return "it is not valid UTF-8";
    for (size_t i = 0; i < len;) {
        const int cl = nx_utf8_char_len((const unsigned char *)name + i, len - i);
        const uint32_t c = nx_utf8_decode((const unsigned char *)name + i, cl);
        if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f)) return "it holds a control character";
        if (c == '/' || c == '\\' || c == 0x2215 || c == 0x2216) return "it holds a path separator";
        if (strchr(":*?\"<>|", (int)c) && c < 0x80) return "it holds one of : * ? \" < > |";
        if (c == 0xff0e || c == 0xfffd || c == 0xfeff) return "it holds a look-alike or replacement character";
        i += (size_t)cl;
    }
    if (name[0] == ' ' || name[len - 1] == ' ') return "it begins or ends with a space";
    if (name[len - 1] == '.') return "it ends with '.'";
    if (strstr(name, "..")) return "it holds \"..\"";
    return NULL;
}

/* ---- responses ------------------------------------------------------------------------------- */

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *str_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return cJSON_CreateNull();
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    cJSON *v = cJSON_CreateString(tmp);
    free(tmp);
    return v;
}

static cJSON *ids_json(const int32_t *ids, int32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

cJSON *nx_srv_native_probs_json(const nx_srv_req *r, const nextn_tokenizer *tok, int32_t from, int32_t to) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = from; r->probs && i < to && i < r->n_tokens; i++) {
        const nextn_logprob *p = &r->probs[i];
        cJSON *o = cJSON_CreateObject();
        nx_srv_token_fields(o, tok, r->tokens[i]);
        cJSON_AddNumberToObject(o, "logprob", nx_srv_logprob_value(p->logprob));
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int32_t k = 0; k < p->n_top; k++) {
            cJSON *t = cJSON_CreateObject();
            nx_srv_token_fields(t, tok, p->top_ids[k]);
            cJSON_AddNumberToObject(t, "logprob", nx_srv_logprob_value(p->top_logprobs[k]));
            cJSON_AddItemToArray(top, t);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

cJSON *nx_srv_settings_json(const nx_srv_req *r, const char *model, int32_t n_ctx) {
    const nextn_sampler_params *s = &r->smp;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n_ctx", n_ctx);
    if (model) cJSON_AddStringToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "seed", (double)s->seed);
    cJSON_AddNumberToObject(o, "temperature", s->temp);
    cJSON_AddNumberToObject(o, "top_k", s->top_k);
    cJSON_AddNumberToObject(o, "top_p", s->top_p);
    cJSON_AddNumberToObject(o, "min_p", s->min_p);
    cJSON_AddNumberToObject(o, "typical_p", s->typ_p);
    cJSON_AddNumberToObject(o, "top_n_sigma", s->top_n_sigma);
    cJSON_AddNumberToObject(o, "xtc_probability", s->xtc_probability);
    cJSON_AddNumberToObject(o, "xtc_threshold", s->xtc_threshold);
    cJSON_AddNumberToObject(o, "dynatemp_range", s->dynatemp_range);
    cJSON_AddNumberToObject(o, "dynatemp_exponent", s->dynatemp_exponent);
    cJSON_AddNumberToObject(o, "dry_multiplier", s->dry_multiplier);
    cJSON_AddNumberToObject(o, "dry_base", s->dry_base);
    cJSON_AddNumberToObject(o, "dry_allowed_length", s->dry_allowed_length);
    cJSON_AddNumberToObject(o, "dry_penalty_last_n", s->dry_penalty_last_n);
    cJSON *brk = cJSON_AddArrayToObject(o, "dry_sequence_breakers");
    for (int i = 0; i < r->n_dry_strs; i++) cJSON_AddItemToArray(brk, cJSON_CreateString(r->dry_strs[i]));
    cJSON_AddNumberToObject(o, "repeat_last_n", s->penalty_last_n);
    cJSON_AddNumberToObject(o, "repeat_penalty", s->penalty_repeat);
    cJSON_AddNumberToObject(o, "presence_penalty", s->penalty_present);
    cJSON_AddNumberToObject(o, "frequency_penalty", s->penalty_freq);
    cJSON_AddNumberToObject(o, "max_tokens", r->max_tokens);
    cJSON_AddNumberToObject(o, "n_predict", r->max_tokens);
    cJSON_AddBoolToObject(o, "ignore_eos", r->ignore_eos);
    cJSON_AddBoolToObject(o, "stream", r->stream);
    cJSON *lb = cJSON_AddArrayToObject(o, "logit_bias");
    for (int32_t i = 0; r->logit_bias && i < s->n_logit_bias; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber(r->logit_bias[i].token));
        if (isinf(r->logit_bias[i].bias)) cJSON_AddItemToArray(pair, cJSON_CreateFalse());
        else cJSON_AddItemToArray(pair, cJSON_CreateNumber(r->logit_bias[i].bias));
        cJSON_AddItemToArray(lb, pair);
    }
    for (int32_t i = 0; s->ban && i < s->n_ban; i++) { /* ignore_eos's end-of-generation bans */
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber(s->ban[i]));
        cJSON_AddItemToArray(pair, cJSON_CreateFalse());
        cJSON_AddItemToArray(lb, pair);
    }
    cJSON_AddNumberToObject(o, "n_probs", r->n_probs > 0 ? r->n_probs : 0);
    cJSON *stop = cJSON_AddArrayToObject(o, "stop");
    for (int i = 0; i < r->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(r->stop[i]));
    cJSON *smp = cJSON_AddArrayToObject(o, "samplers");
    static const char *const names[] = {"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
                                        "temperature"};
    for (const char *c = s->samplers; *c; c++) cJSON_AddItemToArray(smp, cJSON_CreateString(names[strchr("edskypmxt", *c) - "edskypmxt"]));
    if (s->samplers[0]) return o;
    if (s->penalty_last_n != 0) cJSON_AddItemToArray(smp, cJSON_CreateString("penalties"));
    if (s->dry_multiplier != 0.0f && s->dry_base >= 1.0f && s->dry_penalty_last_n != 0)
        cJSON_AddItemToArray(smp, cJSON_CreateString("dry"));
    if (s->top_n_sigma > 0.0f) cJSON_AddItemToArray(smp, cJSON_CreateString("top_n_sigma"));
    if (s->top_k > 0) cJSON_AddItemToArray(smp, cJSON_CreateString("top_k"));
    if (s->typ_p < 1.0f) cJSON_AddItemToArray(smp, cJSON_CreateString("typ_p"));
    if (s->top_p < 1.0f) cJSON_AddItemToArray(smp, cJSON_CreateString("top_p"));
    if (s->min_p > 0.0f) cJSON_AddItemToArray(smp, cJSON_CreateString("min_p"));
    if (s->xtc_probability > 0.0f && s->xtc_threshold <= 0.5f) cJSON_AddItemToArray(smp, cJSON_CreateString("xtc"));
    cJSON_AddItemToArray(smp, cJSON_CreateString("temperature"));
    return o;
}

static const char *stop_type(const nx_srv_req *r) {
    if (!r->done || !r->finish_reason) return "none";
    if (strcmp(r->finish_reason, "length") == 0) return "limit";
    return r->stop_index >= 0 ? "word" : "eos";
}

cJSON *nx_srv_native_result(const nx_srv_req *r, const nextn_tokenizer *tok, const char *model, int32_t n_ctx,
                            int index, int32_t id_slot, bool return_tokens) {
    cJSON *o = cJSON_CreateObject();
    const char *text = r->text.data ? r->text.data : "";
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "content", str_n(r->stream ? "" : text, r->stream ? 0 : r->text.len));
    cJSON_AddItemToObject(o, "tokens", return_tokens && !r->stream ? ids_json(r->tokens, r->n_tokens)
                                                                   : cJSON_CreateArray());
    cJSON_AddNumberToObject(o, "id_slot", id_slot);
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "tokens_predicted", r->n_gen);
    cJSON_AddNumberToObject(o, "tokens_evaluated", r->n_prompt);
    cJSON_AddItemToObject(o, "generation_settings", nx_srv_settings_json(r, model, n_ctx));
    /* the prompt as the model saw it: its tokens rendered, control tokens included */
    size_t pl = 0;
    nextn_error e;
    char *pt = NULL;
    if (nextn_detokenize(tok, r->prompt, r->n_prompt, true, NULL, 0, &pl, &e) && (pt = malloc(pl + 1)) &&
        nextn_detokenize(tok, r->prompt, r->n_prompt, true, pt, pl, &pl, &e))
        cJSON_AddItemToObject(o, "prompt", str_n(pt, pl));
    else
        cJSON_AddStringToObject(o, "prompt", "");
    free(pt);
    cJSON_AddBoolToObject(o, "has_new_line", memchr(text, '\n', r->text.len) != NULL);
    cJSON_AddBoolToObject(o, "truncated", false);
    cJSON_AddStringToObject(o, "stop_type", stop_type(r));
    cJSON_AddStringToObject(o, "stopping_word", r->stop_index >= 0 ? r->stop[r->stop_index] : "");
    cJSON_AddNumberToObject(o, "tokens_cached", r->n_cache);
    cJSON_AddItemToObject(o, "timings", nx_srv_timings_json(r));
    if (r->n_probs > 0 && !r->stream)
        cJSON_AddItemToObject(o, "completion_probabilities", nx_srv_native_probs_json(r, tok, 0, r->n_tokens));
    return o;
}

char *nx_srv_native_chunk_json(const nx_srv_req *r, const nextn_tokenizer *tok, int index, int32_t id_slot,
                               const char *text, size_t n, int32_t tok_from, int32_t tok_to) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "content", str_n(text, n));
    cJSON_AddItemToObject(o, "tokens", ids_json(r->tokens + tok_from, tok_to - tok_from));
    cJSON_AddBoolToObject(o, "stop", false);
    cJSON_AddNumberToObject(o, "id_slot", id_slot);
    cJSON_AddNumberToObject(o, "tokens_predicted", tok_to);
    cJSON_AddNumberToObject(o, "tokens_evaluated", r->n_prompt);
    if (r->n_probs > 0 && tok_to > tok_from)
        cJSON_AddItemToObject(o, "completion_probabilities", nx_srv_native_probs_json(r, tok, tok_from, tok_to));
    return print_free(o);
}

char *nx_srv_slots_json(const nx_srv_slot_info *info, int n, bool spec) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const nx_srv_slot_info *x = &info[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", x->id);
        if (x->has_req) cJSON_AddStringToObject(o, "id_task", x->id_task);
        else cJSON_AddNumberToObject(o, "id_task", -1);
        cJSON_AddNumberToObject(o, "n_ctx", x->n_ctx);
        cJSON_AddBoolToObject(o, "speculative", spec);
        cJSON_AddBoolToObject(o, "is_processing", x->processing);
        cJSON_AddNumberToObject(o, "n_tokens", x->n_tokens);
        cJSON *p = cJSON_AddObjectToObject(o, "params");
        if (x->has_req) {
            const nextn_sampler_params *s = &x->smp;
            cJSON_AddNumberToObject(p, "n_predict", x->max_tokens);
            cJSON_AddNumberToObject(p, "seed", (double)s->seed);
            cJSON_AddNumberToObject(p, "temperature", s->temp);
            cJSON_AddNumberToObject(p, "top_k", s->top_k);
            cJSON_AddNumberToObject(p, "top_p", s->top_p);
            cJSON_AddNumberToObject(p, "min_p", s->min_p);
            cJSON_AddNumberToObject(p, "repeat_last_n", s->penalty_last_n);
            cJSON_AddNumberToObject(p, "repeat_penalty", s->penalty_repeat);
            cJSON_AddNumberToObject(p, "presence_penalty", s->penalty_present);
            cJSON_AddNumberToObject(p, "frequency_penalty", s->penalty_freq);
            cJSON_AddNumberToObject(p, "max_tokens", x->max_tokens);
            cJSON_AddBoolToObject(p, "ignore_eos", x->ignore_eos);
            cJSON_AddBoolToObject(p, "stream", x->stream);
            cJSON_AddNumberToObject(p, "n_logit_bias", x->n_logit_bias);
        }
        cJSON *nt = cJSON_AddObjectToObject(o, "next_token");
        cJSON_AddBoolToObject(nt, "has_next_token", x->processing);
        cJSON_AddNumberToObject(nt, "n_remain", x->processing ? x->max_tokens - x->n_decoded : -1);
        cJSON_AddNumberToObject(nt, "n_decoded", x->n_decoded);
        cJSON_AddItemToArray(a, o);
    }
    return print_free(a);
}

char *nx_srv_slot_result_json(nx_srv_slot_action a, int32_t id_slot, const char *filename,
                              const nx_srv_slot_result *res) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id_slot", id_slot);
    if (a == NX_SRV_SLOT_ERASE) {
        cJSON_AddNumberToObject(o, "n_erased", res->n_tokens);
        return print_free(o);
    }
    const bool save = a == NX_SRV_SLOT_SAVE;
    cJSON_AddStringToObject(o, "filename", filename);
    cJSON_AddNumberToObject(o, save ? "n_saved" : "n_restored", res->n_tokens);
    cJSON_AddNumberToObject(o, save ? "n_written" : "n_read", (double)res->n_bytes);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, save ? "save_ms" : "restore_ms", res->ms);
    return print_free(o);
}
