/* chat_session.h - the conversation behind `nextn chat` (cli/cmd_chat.c): messages, rendering
 * with the model's chat template, and turns that decode only what the context does not hold.
 *
 * The context (one sequence of a nextn_spec generator: speculative with --spec mtp, plain
 * otherwise) keeps the tokens of the last rendered conversation between turns.  A turn renders
 * the whole conversation plus the generation prompt, tokenizes it, and compares it with the
 * tokens the sequence holds: everything up to the longest common prefix is kept; when the
 * sequence holds more than that prefix (the template renders earlier assistant turns without
 * their reasoning, /clear, /system, /load), it goes back to the latest checkpoint at or before
 * the prefix (nextn_state, IN_PLACE) and only the tokens after the checkpoint are decoded.
 * Checkpoints are taken while decoding a prompt at the two places later renderings branch
 * from: the end of the system prompt (what /clear returns to) and the end of the assistant
 * header "<|im_start|>assistant\n" of each turn (where the next turn re-renders the answer
 * without its reasoning).  The last CHAT_TURN_STATES turn checkpoints are kept.
 *
 * Each reply therefore equals what `nextn run` generates for the same rendered conversation
 * (greedy: token for token; sampled: same seed, same sampler settings, plain decoding), because
 * restoring a checkpoint and continuing is exactly decoding the whole prompt (the library
 * guarantees it; tests/test_chat_cli.sh checks the end result). */
#ifndef NX_CLI_CHAT_SESSION_H
#define NX_CLI_CHAT_SESSION_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nextn_internal.h"

#define CHAT_TURN_STATES 4

typedef struct chat_msg {
    char *role;       /* "system", "user", "assistant" */
    char *content;    /* never NULL */
    char *reasoning;  /* assistant only; NULL = take it from <think>...</think> in content */
} chat_msg;

typedef struct chat_turn_stats {
    int32_t n_prompt;      /* tokens of the rendered conversation + generation prompt */
    int32_t n_reused;      /* of those, already in the context (kept or restored) */
    int32_t n_decoded;     /* of those, decoded by this turn (n_prompt - n_reused) */
    int32_t restored_pos;  /* position of the checkpoint restored, -1 if none, 0 = cleared */
    int32_t n_gen;         /* reply tokens (end-of-generation token excluded) */
    double t_prompt, t_gen;
    int64_t drafted, accepted; /* speculative drafts verified / accepted during the reply */
    bool stopped_eog, ctx_full, interrupted;
} chat_turn_stats;

typedef struct chat_session {
    const char *cmd;
    nextn_model *model;
    nextn_tokenizer *tok;
    nx_chat_format fmt;
    nextn_spec *spec;
    nextn_sampler_params sp;
    int32_t n_ctx, n_predict;
    bool think;

    chat_msg *msgs;
    size_t n_msgs, cap_msgs;

    int32_t *held;             /* tokens the sequence holds: positions [0, n_held) */
    int32_t n_held, cap_held;
    nextn_state *sys_state;    /* at the end of the system prompt (pos sys_pos), or NULL */
    nextn_state *turn_state[CHAT_TURN_STATES]; /* at assistant headers, oldest first */
    int n_turn_states;

    chat_turn_stats last;      /* the last turn */
    int64_t n_turns, tot_prompt, tot_decoded, tot_gen;
    double tot_t_prompt, tot_t_gen;
    int64_t tot_drafted, tot_accepted;
} chat_session;

/* Called with each piece of reply text as it is generated (whole UTF-8 characters). */
typedef void (*chat_text_fn)(void *user, const char *text, size_t len);

bool chat_session_init(chat_session *cs, const char *cmd, nextn_model *model, const char *chat_format,
                       nextn_spec *spec, const nextn_sampler_params *sp, int32_t n_ctx, int32_t n_predict,
                       nextn_error *err);
void chat_session_free(chat_session *cs);

/* Sets (text != NULL) or removes the system prompt (message 0). */
bool chat_set_system(chat_session *cs, const char *text, nextn_error *err);
/* Drops every message but the system prompt. */
void chat_clear(chat_session *cs);

/* One turn: appends the user message, decodes what is new, generates the reply (streamed to
 * on_text), appends it as the assistant message (split into reasoning and content).  *stop is
 * polled between steps (Ctrl-C): the reply ends there and is kept as it is.  On an error
 * before the reply started the user message is removed again; false is returned with err. */
bool chat_turn(chat_session *cs, const char *user_text, chat_text_fn on_text, void *user,
               volatile sig_atomic_t *stop, nextn_error *err);

/* The conversation as OpenAI chat messages JSON: [{"role": ..., "content": ...,
 * "reasoning_content": ...}, ...]. */
bool chat_save(const chat_session *cs, const char *path, nextn_error *err);
/* Replaces the conversation with a file written by chat_save (or any OpenAI messages array,
 * bare or as {"messages": [...]}) with string contents and roles system / user / assistant. */
bool chat_load(chat_session *cs, const char *path, nextn_error *err);

/* Splits generated text into reasoning and answer: text before "</think>" is reasoning when
 * the reply started inside a think block (thinking on); the newlines after "</think>" are
 * dropped, as the template does. */
typedef struct think_split {
    bool in_think;
    bool answer_started;       /* a non-newline answer character was seen */
    char hold[16];             /* a possible beginning of "</think>" */
    size_t n_hold;
} think_split;
typedef void (*think_out_fn)(void *user, bool reasoning, const char *text, size_t len);
void think_split_init(think_split *ts, bool in_think);
void think_split_feed(think_split *ts, const char *text, size_t len, think_out_fn out, void *user);
void think_split_flush(think_split *ts, think_out_fn out, void *user);

#endif
