/* run_spec.c - the generation loop of `nextn run`, plain and `--spec mtp` alike: the speculative
 * generator (include/nextn.h, nextn_spec_*), which decodes plainly (one token per step, no MTP
 * head, no rollback slots) when use_mtp is false.  Tokens of a step after an end-of-generation
 * token are not shown (the step may have produced them, the output stops at the EOG).  The
 * context is full when the last emitted token cannot be decoded any more (its position is
 * n_ctx): a step decodes the last emitted token and its drafts, the generator caps the drafts
 * by the room left. */
#include "run_spec.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli_util.h"

int nx_cli_run_spec(const char *cmd, const nextn_model *model, const nx_run_spec_opts *o, const int32_t *ids,
                    int32_t n_prompt) {
    nextn_error err;
    nextn_spec *s = NULL;
    nextn_stream *stream = NULL;
    int32_t *out = NULL;
    int status = 1;
    nextn_tokenizer *tok = nextn_model_tokenizer(model);
    if (!nextn_spec_create(&s, model, &o->cp, &o->spec, &o->sp, &err)) {
        nx_cli_report(cmd, err.msg, NULL);
        return 1;
    }
    if (o->plain) {
        nextn_memory mem;
        nextn_spec_memory(s, &mem);
        nx_cli_print_memory(cmd, &mem, &o->cp);
    } else if (!nextn_spec_has_mtp(s))
        nx_cli_report(cmd, nextn_spec_notice(s), NULL);
    else
        fprintf(stderr, "nextn %s: speculative decoding: MTP head from %s, draft-max %d%s\n", cmd,
                nextn_spec_mtp_source(s), o->spec.draft_max, o->spec.adaptive ? " (adaptive)" : "");
    const char *dv_file;
    const int32_t dv = nextn_spec_draft_vocab(s, &dv_file);
    if (nextn_spec_has_mtp(s) && dv > 0)
        fprintf(stderr, "nextn %s: draft vocabulary: %d tokens (%s%s)\n", cmd, dv,
                dv_file ? "most frequent in " : "the lowest ids", dv_file ? dv_file : "");
    if (o->echo) {
        fwrite(o->echo, 1, o->echo_len, stdout);
        fflush(stdout);
    }
    if (tok && !o->print_ids && !nextn_stream_create(&stream, tok, false, &err)) {
        nx_cli_report(cmd, err.msg, NULL);
        goto done;
    }
    out = malloc((size_t)nextn_spec_max_step_tokens(s) * sizeof *out);
    if (!out) {
        fprintf(stderr, "nextn %s: out of memory\n", cmd);
        goto done;
    }
    double t0 = nx_cli_time_s();
    int32_t first;
    if (!nextn_spec_prefill(s, ids, n_prompt, &first, &err)) {
        nx_cli_report(cmd, err.msg, NULL);
        goto done;
    }
    double t_prompt = nx_cli_time_s() - t0;
    int32_t n_gen = 0, n_step = 1, pos = n_prompt;
    bool stopped_eog = false, ctx_full = false;
    out[0] = first;
    t0 = nx_cli_time_s();
    for (;;) {
        for (int32_t i = 0; i < n_step && n_gen < o->n_predict; i++) {
            const int32_t t = out[i];
            if (!o->ignore_eos && tok && nextn_token_is_eog(tok, t)) {
                stopped_eog = true;
                break;
            }
            n_gen++;
            if (stream) {
                const char *str;
                size_t n;
                if (!nextn_stream_push(stream, t, &str, &n, &err)) {
                    fputc('\n', stderr);
                    nx_cli_report(cmd, err.msg, NULL);
                    goto done;
                }
                fwrite(str, 1, n, stdout);
            } else {
                printf(n_gen > 1 || !o->no_display_prompt ? " %d" : "%d", t);
            }
        }
        fflush(stdout);
        if (stopped_eog || n_gen >= o->n_predict) break;
        pos += n_step; /* the last emitted token goes to position pos - 1 */
        if (pos > o->cp.n_ctx) {
            ctx_full = true;
            break;
        }
        if (!nextn_spec_step(s, o->n_predict - n_gen, out, &n_step, &err)) {
            fputc('\n', stderr);
            nx_cli_report(cmd, err.msg, NULL);
            goto done;
        }
    }
    double t_gen = nx_cli_time_s() - t0;
    if (stream) {
        const char *str;
        size_t n;
        if (nextn_stream_flush(stream, &str, &n, &err)) fwrite(str, 1, n, stdout);
    }
    printf("\n");
    fflush(stdout);
    if (stopped_eog) fprintf(stderr, "nextn %s: stopped at an end-of-generation token\n", cmd);
    if (ctx_full) fprintf(stderr, "nextn %s: stopped: the context is full (n_ctx = %d)\n", cmd, o->cp.n_ctx);
    nextn_spec_stats st;
    nextn_spec_get_stats(s, &st);
    const double tot = st.t_draft + st.t_verify + st.t_accept;
    fprintf(stderr, "nextn %s: prompt %d tokens in %.3f s (%.2f tokens/s)\n", cmd, n_prompt, t_prompt,
            t_prompt > 0 ? n_prompt / t_prompt : 0.0);
    fprintf(stderr, "nextn %s: generation %d tokens in %.3f s (%.2f tokens/s)\n", cmd, n_gen, t_gen,
            t_gen > 0 ? n_gen / t_gen : 0.0);
    if (nextn_spec_has_mtp(s))
        fprintf(stderr, "nextn %s: speculative: acceptance %.1f%% (%lld of %lld drafts), %.2f tokens/step "
                "(%lld steps, %lld with drafts), time: draft %.0f%%, verify %.0f%%, sampling %.0f%%\n", cmd,
                st.drafted ? 100.0 * (double)st.accepted / (double)st.drafted : 0.0, (long long)st.accepted,
                (long long)st.drafted, st.steps ? (double)st.emitted / (double)st.steps : 0.0, (long long)st.steps,
                (long long)st.spec_steps, tot > 0 ? 100 * st.t_draft / tot : 0.0,
                tot > 0 ? 100 * st.t_verify / tot : 0.0, tot > 0 ? 100 * st.t_accept / tot : 0.0);
    nextn_memory mem;
    nextn_spec_memory(s, &mem);
    if (o->plain)
        fprintf(stderr, "nextn %s: peak memory (RSS) %.1f MiB\n", cmd, nx_cli_peak_rss_bytes() / NX_MIB);
    else
        fprintf(stderr, "nextn %s: memory: KV %.1f MiB (target + MTP), recurrent state %.1f MiB (with rollback slots), "
            "peak RSS %.1f MiB\n", cmd, mem.kv_bytes / NX_MIB, mem.state_bytes / NX_MIB,
            nx_cli_peak_rss_bytes() / NX_MIB);
    status = 0;
done:
    free(out);
    nextn_stream_free(stream);
    nextn_spec_free(s);
    return status;
}
