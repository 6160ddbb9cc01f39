/* api_internal.h - what the public API's other files (api_spec.c) need from api.c. */
#ifndef NX_API_INTERNAL_H
#define NX_API_INTERNAL_H

#include "model/model.h"
#include "nextn.h"
#include "tokenizer/tokenizer.h"

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
