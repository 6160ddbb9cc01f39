#!/usr/bin/env bash
# test_serve_cache.sh - the prompt cache of `nextn serve` (docs/server.md "Prompt cache"): the same
# request sequence (multi-turn chats greedy and seeded, repeated and diverging prompts, a request
# with cache_prompt false, two slots with different prefixes, three requests sharing a
# 3,512-token prefix) goes to a server with the cache and to one without; every answer must be
# identical and the cached server must reuse what it holds (tests/serve_cache_client.mjs).
# Plain and --spec mtp.  The prompt-time ratios are printed, not asserted.
. "$(dirname "$0")/lib.sh"
model=$demo_model
need node "scripts/deps.sh installs nodejs"

start() { # log, args... ; sets $base
    local log=$1; shift
    serve_start "$log" -m "$model" --port 0 "$@"
}
stop_all() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
}

for mode in plain spec; do
    extra=()
    [ $mode = spec ] && extra=(--spec mtp --draft-max 3 --no-adaptive)
    start "$tmp/cached-$mode.log" -np 2 -c 4096 -t 1 --checkpoint-every 64 "${extra[@]}"
    cached=$base
    start "$tmp/plain-$mode.log" -np 2 -c 4096 -t 1 --no-cache-prompt "${extra[@]}"
    plain=$base
    check "$mode: servers start" '[ -n "$cached" ] && [ -n "$plain" ]'
    check "$mode: the start-up line gives the cache's bound and memory" \
          'grep -q "prompt cache: up to 8 checkpoints per slot (every 64 prompt tokens.*MiB each, .* MiB for 2 slots at most" "$tmp/cached-$mode.log" &&
           grep -q "prompt cache off" "$tmp/plain-$mode.log"'
    if [ -n "$cached" ] && [ -n "$plain" ]; then
        node "$NEXTN_SRC/tests/serve_cache_client.mjs" "$cached" "$plain" $mode || { fail=1; tail -5 "$tmp/cached-$mode.log"; }
    fi
    stop_all
done
check "--ctx-checkpoints out of range is refused" '! "$NEXTN" serve -m "$model" --ctx-checkpoints 1000 2>"$tmp/e" && grep -q "ctx-checkpoints" "$tmp/e"'
exit $fail
