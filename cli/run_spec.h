/* run_spec.h - the generation loop of `nextn run`, plain and --spec mtp (cli/run_spec.c). */
#ifndef NX_CLI_RUN_SPEC_H
#define NX_CLI_RUN_SPEC_H

#include <stdbool.h>
#include <stdint.h>

#include "nextn.h"

typedef struct nx_run_spec_opts {
    nextn_spec_params spec;
    nextn_context_params cp;
    nextn_sampler_params sp;
    bool ignore_eos, print_ids, no_display_prompt;
    int32_t n_predict;
    bool plain;             /* no --spec: spec.use_mtp is false, the figures are plain decoding's */
    const char *echo;       /* written to stdout before the generated text (the prompt); NULL = none */
    size_t echo_len;
} nx_run_spec_opts;

/* Generates from the prompt ids (speculatively unless o->plain), streaming text (or ids) to
 * stdout and the figures (memory, speed; acceptance, tokens per step, draft / verify shares) to
 * stderr.
 * Returns the exit status. */
int nx_cli_run_spec(const char *cmd, const nextn_model *model, const nx_run_spec_opts *o, const int32_t *ids,
                    int32_t n_prompt);

#endif
