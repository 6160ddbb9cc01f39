#!/usr/bin/env bash
# test_serve_native.sh - llama-server's own API on `nextn serve` (the demo model), driven by
# tests/serve_native.mjs (Node's fetch): /completion (prompt forms, several prompts, streaming,
# stop types, return_tokens, n_probs, samplers, logit_bias, id_slot, the prompt cache), the OpenAI
# logit_bias / logprobs fields, /apply-template, /infill (501 without FIM tokens), /slots,
# X-Api-Key, --cors-origins, --alias lists and --tags, chat prefill / continue_final_message,
# exceed_context_size_error - and slot files: save, stop the server, start a new one, restore,
# continue: the continuation equals the uninterrupted generation (`nextn run`), plain and --spec mtp.
. "$(dirname "$0")/lib.sh"
model=$demo_model
need node "scripts/deps.sh installs nodejs"

# expectations from `nextn run` (plain greedy decoding): 16 tokens, and 28 for the continuation
run() { "$NEXTN" run -m "$model" --no-display-prompt -t 1 "$@" 2>/dev/null; }
p="In the beginning God created"
t16=$(run -p "$p" -n 16 --temp 0 --ignore-eos; printf x); t16=${t16%x}; t16=${t16%$'\n'}
t28=$(run -p "$p" -n 28 --temp 0 --ignore-eos; printf x); t28=${t28%x}; t28=${t28%$'\n'}
ids=$("$NEXTN" tokenize -m "$model" --ids "$p" 2>/dev/null | tr -cd '0-9, \n' | tr '\n' ' ')
node -e 'const [p,a,b,ids]=process.argv.slice(1);
  process.stdout.write(JSON.stringify({prompt:p,t16:a,t28:b,ids:ids.split(/[ ,]+/).filter(Boolean).map(Number)}))' \
  "$p" "$t16" "$t28" "$ids" >"$tmp/expect.json"
check "expectations made with nextn run" '[ -n "$t16" ] && [ ${#t28} -gt ${#t16} ] && [ "${t28:0:${#t16}}" = "$t16" ]'

start() { # log, args...
    local log=$1; shift
    serve_start "$log" -m "$model" --port 0 -t 1 -c 512 --api-key secret "$@"
}
stop() { # the last server: SIGTERM, must exit 0
    local srv=${pids[-1]}
    kill -TERM "$srv"
    wait "$srv"
}
mkdir -p "$tmp/slots"
opts=(-np 2 --slot-save-path "$tmp/slots" --alias demo,alt --tags tag1 --cors-origins http://a.example,localhost)

start "$tmp/a.log" "${opts[@]}"
check "server starts" '[ -n "$base" ]'
[ -n "$base" ] || { cat "$tmp/a.log"; exit 1; }
node "$NEXTN_SRC/tests/serve_native.mjs" "$base" "$tmp/expect.json" "$tmp/state.json" main || fail=1
check "SIGTERM: exit 0" 'stop'

# a new server process: restore the file saved above into slot 1 and continue there
start "$tmp/b.log" "${opts[@]}"
node "$NEXTN_SRC/tests/serve_native.mjs" "$base" "$tmp/expect.json" "$tmp/state.json" restore || fail=1
check "SIGTERM: exit 0 (restored server)" 'stop'
check "--slot-save-path must be a folder" '! "$NEXTN" serve -m "$model" --slot-save-path "$tmp/none" 2>"$tmp/e" && grep -q "is not a folder" "$tmp/e"'

# speculative decoding: save, new process, restore, continue; log-probabilities equal plain's
spec=(--spec mtp --draft-max 3 --no-adaptive)
start "$tmp/c.log" "${opts[@]}" "${spec[@]}"
check "speculative server starts" '[ -n "$base" ] && grep -q "speculative mtp" "$tmp/c.log"'
node "$NEXTN_SRC/tests/serve_native.mjs" "$base" "$tmp/expect.json" "$tmp/state.json" spec-save || fail=1
check "SIGTERM: exit 0 (spec)" 'stop'
start "$tmp/d.log" "${opts[@]}" "${spec[@]}"
node "$NEXTN_SRC/tests/serve_native.mjs" "$base" "$tmp/expect.json" "$tmp/state.json" restore || fail=1
check "SIGTERM: exit 0 (spec, restored)" 'stop'
exit $fail
