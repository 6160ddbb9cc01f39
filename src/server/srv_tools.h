/* srv_tools.h - tool calls in generated chat text: the request's "tools" table and a parser of
 * the two forms Qwen3.5 models write, into OpenAI tool_calls.
 *
 *   <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
 *   <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>
 *
 * The second (XML) form is the one the Qwen3.5 chat template teaches.  A parameter value is the
 * text between "<parameter=K>\n" and "\n</parameter>" (one newline trimmed on each side); it is
 * kept as a JSON string when the tool's schema says the parameter is a string, otherwise parsed
 * as JSON (a number, object, ...) and kept as a string when it is not valid JSON.  A block is a
 * call only when it parses completely and names a tool of the request; anything else (a
 * malformed block, an unknown function, a block the reply never closes) stays content.
 * Whitespace right before, between and after calls is dropped (the content is the text around
 * the calls, trimmed where a call was).
 *
 * The scanner works on a growing text (streaming): it hands out content that can no longer be
 * part of a call and each call once its block is closed, holding back a tail that may still
 * become "<tool_call>".  Pure functions over memory; no I/O, no threads.
 */
#ifndef NX_SRV_TOOLS_H
#define NX_SRV_TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "nextn_internal.h"

typedef struct nx_srv_tool_fn {
    char *name;
    char **str_params; /* parameters whose schema type is "string" */
    int n_str;
} nx_srv_tool_fn;

typedef struct nx_srv_tools {
    nx_srv_tool_fn *fns;
    int n_fns;
    char *only;        /* tool_choice names a function: only calls of it are calls (NULL = any) */
    bool parallel;     /* parallel_tool_calls: more than one call per reply */
} nx_srv_tools;

/* Reads a request's "tools" array: every entry {"type": "function", "function": {"name": ...,
 * "parameters": {JSON schema}}}.  Errors name the entry (400). */
bool nx_srv_tools_from_json(const cJSON *tools, nx_srv_tools **out, nx_err *err);
void nx_srv_tools_free(nx_srv_tools *t);
bool nx_srv_tools_has(const nx_srv_tools *t, const char *name);

typedef struct nx_srv_tool_call {
    char *name;
    char *arguments; /* a JSON object, compact */
} nx_srv_tool_call;
void nx_srv_tool_call_free(nx_srv_tool_call *c);

/* Parses the text between <tool_call> and </tool_call>; false if it is not a complete call of
 * one of the tools (out is then empty). */
bool nx_srv_tools_parse_call(const nx_srv_tools *t, const char *body, size_t n, nx_srv_tool_call *out);

typedef enum { NX_TOOL_EV_NONE = 0, NX_TOOL_EV_TEXT, NX_TOOL_EV_CALL } nx_srv_tool_ev_kind;

typedef struct nx_srv_tool_ev {
    nx_srv_tool_ev_kind kind;
    size_t off, n;          /* TEXT: the content bytes text[off, off + n) */
    nx_srv_tool_call call;  /* CALL: owned by the caller (nx_srv_tool_call_free) */
} nx_srv_tool_ev;

typedef struct nx_srv_tool_scan {
    size_t pos;             /* bytes of the text handled */
    int n_calls;
    bool after_call;        /* whitespace right after a call is dropped */
} nx_srv_tool_scan;

/* The next event from text[0, avail): NONE when nothing more can be said until more text
 * arrives (or, with done, at the end).  done: the text is complete.  While not done, text that
 * may still become "<tool_call>" and whitespace that may precede a call are kept back.  A call
 * that cannot be built (out of memory) stays text.  Returns true. */
bool nx_srv_tool_next(nx_srv_tool_scan *sc, const nx_srv_tools *t, const char *text, size_t avail, bool done,
                      nx_srv_tool_ev *ev);

/* The whole reply at once: content (text outside the calls, trailing whitespace trimmed when
 * there are calls; NUL-terminated, possibly empty) and the calls.  False on out-of-memory. */
bool nx_srv_tools_parse(const nx_srv_tools *t, const char *text, size_t len, nx_buf *content,
                        nx_srv_tool_call **calls, int *n_calls);

#endif
