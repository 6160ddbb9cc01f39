/* chat_json.h - JSON text as the chat templates print it: Python's json.dumps(x,
 * ensure_ascii=False) (the `tojson` filter of HF transformers) and Python's str(x) for scalars.
 * Internal to chat.c. */
#ifndef NX_CHAT_JSON_H
#define NX_CHAT_JSON_H

#include <cjson/cJSON.h>

#include "tokenizer/tokenizer.h"

/* json.dumps: ", " and ": " separators, keys in document order, non-ASCII kept, numbers as
 * Python prints them.  cJSON keeps numbers as doubles, so an integral value is printed as an
 * integer (a "5.0" in the input prints as "5"). */
bool nx_json_dump_py(const cJSON *v, nx_buf *out, nx_err *err);
/* Jinja `x | string` for a scalar: strings raw, True/False, None, numbers as Python. */
bool nx_json_str_py(const cJSON *v, nx_buf *out, nx_err *err);

#endif
