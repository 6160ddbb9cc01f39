#!/usr/bin/env bash
# test_serve_n.sh - OpenAI "n" (several choices per request) with the official openai npm client
# (tests/openai/choices.mjs) against `nextn serve -np 3` on the demo model, plain and with
# --spec mtp: greedy choices equal `nextn run`, seeded choice k equals an n = 1 request with
# seed + k, the prompt is decoded once, streams reassemble per index, group admission, 400 above
# the slot count, a client going away frees every slot.
set -u
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nextn-test-serve-n.XXXXXX")
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
model="$NEXTN_SRC/models/nextn-demo.gguf"
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
  "$NEXTN" serve -m "$model" --port 0 -np 3 -c 4096 -t 1 "${extra[@]}" >/dev/null 2>"$tmp/serve-$mode.log" &
  pids+=($!)
  for _ in $(seq 200); do grep -q "listening on" "$tmp/serve-$mode.log" && break; sleep 0.05; done
  base=$(grep -o 'http://[^ ]*' "$tmp/serve-$mode.log" | head -1)
  check "$mode server starts" '[ -n "$base" ]'
  [ -n "$base" ] || { cat "$tmp/serve-$mode.log"; exit 1; }
  echo "== $mode"
  node "$NEXTN_SRC/tests/openai/choices.mjs" "$base" "$tmp/expect.json" $([ "$mode" = mtp ] && echo fixed-drafts) || fail=1
  kill -TERM "${pids[-1]}"; wait "${pids[-1]}"; rc=$?
  check "$mode server exits 0" "[ $rc -eq 0 ]"
  [ $rc -eq 0 ] || tail -n 60 "$tmp/serve-$mode.log"
done
exit $fail
