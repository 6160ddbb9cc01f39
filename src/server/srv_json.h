/* srv_json.h - the strict JSON rules a request body must follow beyond what cJSON checks.
 *
 * cJSON accepts raw control bytes inside strings, decodes "\u0000" into a C string that ends
 * there (silently truncating the value), does not check UTF-8, and parses a prefix of the body.
 * nx_srv_json_check walks the body once before cJSON sees it and refuses, naming the field
 * (e.g. 'messages'[0].content):
 *   - a raw byte below 0x20 inside a string (RFC 8259 requires them escaped);
 *   - a string that is not valid UTF-8, or a \u escape that is a lone surrogate;
 *   - a "\u0000" escape (a NUL cannot be passed on without truncating the text);
 *   - anything but whitespace after the top-level value;
 *   - nesting deeper than NX_SRV_JSON_MAX_DEPTH and plain syntax errors (with the byte offset).
 */
#ifndef NX_SRV_JSON_H
#define NX_SRV_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "nextn_internal.h"

#define NX_SRV_JSON_MAX_DEPTH 64

bool nx_srv_json_check(const char *body, size_t len, nx_err *err);

#endif
