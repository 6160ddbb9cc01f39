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

#endif
