/* chat.h - chat prompt formatting.
 *
 * One format is implemented: "chatml", the Qwen3.5 chat template
 * (tests/fixtures/chat/qwen3.5.jinja) re-implemented in C for text content:
 *   <|im_start|>system\n...<|im_end|>\n  <|im_start|>user\n...<|im_end|>\n
 *   <|im_start|>assistant\n<think>\n{reasoning}\n</think>\n\n{content}<|im_end|>\n  (after the
 *   last user query; earlier assistant turns drop their reasoning)
 *   tool results grouped into one user turn of <tool_response> blocks, tool calls rendered as
 *   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>,
 *   a tools list as the template's "# Tools" system block, and the generation prompt
 *   "<|im_start|>assistant\n<think>\n" (thinking on) or "...<think>\n\n</think>\n\n" (off).
 * A second format, "chatml-plain", is the same without any <think> block (the generation prompt
 * is "<|im_start|>assistant\n", an assistant turn is its content and tool calls): it is what a
 * ChatML template that never mentions <think> renders (the demo model's), so the prompt agrees
 * with the model's own template and a model that cannot think is never asked to.
 * Every message's content is trimmed as the template's `|trim` does (Python str.strip()).
 * Errors are the template's own raise_exception() cases plus malformed JSON arguments.
 */
#ifndef NX_CHAT_H
#define NX_CHAT_H

#include "base/common.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

typedef enum nx_chat_format {
    NX_CHAT_NONE = 0,
    NX_CHAT_CHATML = 1, /* Qwen3.5 ChatML with <think> handling */
    NX_CHAT_CHATML_PLAIN = 2, /* ChatML without <think> blocks (a template that cannot think) */
} nx_chat_format;

typedef struct nx_chat_tool_call {
    const char *name;
    const char *arguments_json; /* a JSON object, e.g. {"city": "Paris"}; NULL = no arguments */
} nx_chat_tool_call;

typedef struct nx_chat_msg {
    const char *role;              /* "system", "user", "assistant" or "tool" */
    const char *content;           /* NULL = empty */
    const char *reasoning_content; /* assistant only; NULL = take it from <think>...</think> in content */
    const nx_chat_tool_call *tool_calls;
    size_t n_tool_calls;
} nx_chat_msg;

typedef struct nx_chat_opts {
    bool add_generation_prompt;
    bool enable_thinking;          /* default true in the template */
    const char *const *tools_json; /* each a JSON object (function schema); rendered like tojson */
    size_t n_tools;
} nx_chat_opts;

/* "chatml" -> NX_CHAT_CHATML, "chatml-plain" -> NX_CHAT_CHATML_PLAIN; anything else is an
 * error listing the known names. */
bool nx_chat_format_from_name(const char *name, nx_chat_format *out, nx_err *err);
/* The name of a format ("none" for NX_CHAT_NONE). */
const char *nx_chat_format_name(nx_chat_format fmt);
/* Whether the format has a thinking block (its prompts may open <think>): the default of
 * enable_thinking for a model. */
bool nx_chat_format_thinks(nx_chat_format fmt);
/* Recognises the GGUF's tokenizer.chat_template: a ChatML template (uses <|im_start|> and
 * <|im_end|>) -> NX_CHAT_CHATML when it mentions <think> (Qwen3.5's), else
 * NX_CHAT_CHATML_PLAIN.  Unknown or absent templates are an error that names the chat_format
 * setting. */
bool nx_chat_detect(const char *tmpl, size_t len, nx_chat_format *out, nx_err *err);

/* The chat format for a chat_format name (NULL when not given) and a model: the named format
 * if given, else the one detected from the GGUF's tokenizer.chat_template. */
bool nx_chat_select(const nx_gguf *g, const char *format_name, nx_chat_format *out, nx_err *err);

/* Appends the rendered prompt to out. */
bool nx_chat_render(nx_chat_format fmt, const nx_chat_msg *msgs, size_t n, const nx_chat_opts *opts, nx_buf *out,
                    nx_err *err);

#endif
