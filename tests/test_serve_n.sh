#!/usr/bin/env bash
# test_serve_n.sh - OpenAI "n" (several choices per request) with the official openai npm client
# (tests/openai/choices.mjs) against `nextn serve -np 3` on the demo model, plain and with
# --spec mtp: greedy choices equal `nextn run`, seeded choice k equals an n = 1 request with
# seed + k, the prompt is decoded once, streams reassemble per index, group admission, 400 above
# the slot count, a client going away frees every slot.
. "$(dirname "$0")/lib.sh"
model=$demo_model
bash "$NEXTN_SRC/tests/openai/setup.sh" || { echo "FAIL: the official openai client could not be installed"; exit 1; }

p="In the beginning God created"
text=$("$NEXTN" run -m "$model" --no-display-prompt -t 1 -p "$p" -n 16 --temp 0 --ignore-eos 2>/dev/null; printf x)
text=${text%x}; text=${text%$'\n'}
check "expectation made with nextn run" '[ -n "$text" ]'
long=$(for i in $(seq 12); do printf 'And the evening and the morning were day %d. ' "$i"; done)
node -e 'const [p,t,l]=process.argv.slice(1);
  process.stdout.write(JSON.stringify({model:"nextn-demo.gguf",completion:{prompt:p,n:16,text:t},
                                       chat_user:"Who made the earth?",long_prompt:l}))' "$p" "$text" "$long" >"$tmp/expect.json"

for mode in plain mtp; do
  # a fixed draft length: the drafts of every choice are compared with the n = 1 request's
  extra=(); [ "$mode" = mtp ] && extra=(--spec mtp --no-adaptive)
  serve_start "$tmp/serve-$mode.log" -m "$model" --port 0 -np 3 -c 4096 -t 1 "${extra[@]}"
  check "$mode server starts" '[ -n "$base" ]'
  [ -n "$base" ] || { cat "$tmp/serve-$mode.log"; exit 1; }
  echo "== $mode"
  node "$NEXTN_SRC/tests/openai/choices.mjs" "$base" "$tmp/expect.json" $([ "$mode" = mtp ] && echo fixed-drafts) || fail=1
  # SIGTERM with an n = 3 stream running (all three slots) and an n = 3 request queued behind it:
  # the stream ends with the error event and [DONE], the queued request gets its 503
  curl -sN --max-time 30 "$base/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "In the beginning", "max_tokens": -1, "ignore_eos": true, "temperature": 0, "n": 3, "stream": true}' \
    >"$tmp/stream-$mode.txt" &
  c1=$!
  for _ in $(seq 400); do grep -q '"index":2' "$tmp/stream-$mode.txt" 2>/dev/null && break; sleep 0.05; done
  curl -s --max-time 30 -o "$tmp/queued-$mode.json" -w '%{http_code}' "$base/v1/chat/completions" -H 'Content-Type: application/json' \
    -d '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 3}' >"$tmp/queued-$mode.code" &
  c2=$!
  # SIGTERM only once the n=3 request is queued (nextn:requests_deferred), not after a fixed pause
  for _ in $(seq 200); do
    curl -s --max-time 5 "$base/metrics" | grep -q '^nextn:requests_deferred 1$' && break; sleep 0.05
  done
  t0=$(date +%s)
  kill -TERM "${pids[-1]}"
  # a choice left waiting would hold the server up: give it 8 s, then kill it (a failure below)
  for _ in $(seq 80); do kill -0 "${pids[-1]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${pids[-1]}" 2>/dev/null && kill -9 "${pids[-1]}"
  wait "${pids[-1]}"; rc=$?
  wait $c1 $c2
  took=$(( $(date +%s) - t0 ))
  last=$(tail -c 14 "$tmp/stream-$mode.txt" | head -c 12)
  code=$(cat "$tmp/queued-$mode.code")
  check "$mode server exits 0" "[ $rc -eq 0 ]"
  check "$mode: SIGTERM is answered at once (no choice left waiting; ${took} s)" '[ "$took" -le 5 ]'
  check "$mode: the running n=3 stream (every index) ends with the 503 error event and [DONE]" \
    'grep -q "server is shutting down" "$tmp/stream-$mode.txt" && grep -q "\"index\":1" "$tmp/stream-$mode.txt" && [ "$last" = "data: [DONE]" ]'
  check "$mode: the queued n=3 request gets its 503" '[ "$code" = 503 ] && grep -q "shutting down" "$tmp/queued-$mode.json"'
  [ $rc -eq 0 ] || tail -n 60 "$tmp/serve-$mode.log"
done
exit $fail
