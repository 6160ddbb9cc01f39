/* api_internal.h - what the public API's other files (api_spec.c) need from api.c. */
#ifndef NX_API_INTERNAL_H
#define NX_API_INTERNAL_H

#include <string.h>

#include "model/model.h"
#include "nextn.h"
#include "sample/sample.h"
#include "tokenizer/tokenizer.h"

/* An internal error handed to the public API's caller: copies its message into err (when not
 * NULL) and returns false. */
static inline bool nx_api_pass(nextn_error *err, const nx_err *ie) {
    if (err) memcpy(err->msg, ie->msg, sizeof err->msg);
    return false;
}

/* The public sampler parameters as the sampler's own (sample.h): every field the public struct
 * has, the others at their defaults; the logit-bias array is passed, not copied (the sampler
 * copies it at creation). */
nx_sampler_params nx_api_sampler_params(const nextn_sampler_params *p);

/* The internal model behind a public handle. */
const nx_model *nx_api_model(const nextn_model *m);
/* Its tokenizer, NULL when the file has none. */
const nx_tokenizer *nx_api_tokenizer(const nextn_model *m);

/* Checks kv_type / kv_type_v of p against the model (known type, head_dim a multiple of the
 * type's block); the error names the field and the limit. */
bool nx_api_kv_types_ok(const nextn_model *m, const nextn_context_params *p, nextn_error *err);
/* The context behind a public handle, and the model it was created for. */
struct nx_ctx;
struct nx_ctx *nx_api_ctx(const nextn_context *c);
const nextn_model *nx_api_ctx_model(const nextn_context *c);
/* nx_model_fingerprint (model.h) of the model, computed once at load. */
uint64_t nx_api_model_fingerprint(const nextn_model *m);
/* The speculative generator's parts (api_spec.c). */
struct nx_spec;
struct nx_spec *nx_api_spec_driver(const nextn_spec *s);
struct nx_ctx *nx_api_spec_ctx(const nextn_spec *s);   /* its target context */
const nextn_model *nx_api_spec_model(const nextn_spec *s);
uint64_t nx_api_spec_mtp_fingerprint(const nextn_spec *s); /* 0 without an MTP head */

#endif
