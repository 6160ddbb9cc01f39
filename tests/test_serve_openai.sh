#!/usr/bin/env bash
# test_serve_openai.sh - the official OpenAI Node client (openai on npm, installed on first use
# into tests/openai/node_modules by tests/openai/setup.sh) against `nextn serve` on the demo
# model: tests/openai/client.mjs, with expected texts and token ids from `nextn run` and
# `nextn tokenize`.  (The client's tool loop runs in tests/test_serve_tools.c.)
. "$(dirname "$0")/lib.sh"
model=$demo_model
bash "$NEXTN_SRC/tests/openai/setup.sh" || { echo "FAIL: the official openai client could not be installed"; exit 1; }

run() { "$NEXTN" run -m "$model" --no-display-prompt -t 1 "$@" 2>/dev/null; }
p="In the beginning God created"
text=$(run -p "$p" -n 16 --temp 0 --ignore-eos; printf x); text=${text%x}; text=${text%$'\n'}
ids=$("$NEXTN" tokenize -m "$model" --ids "$p" 2>/dev/null)
chat=$(run -p "Who made the earth?" --chat -n 24 --temp 0 --ignore-eos; printf x); chat=${chat%x}; chat=${chat%$'\n'}
node -e 'const [p,t,ids,c]=process.argv.slice(1);
  process.stdout.write(JSON.stringify({completion:{prompt:p,n:16,text:t,ids:ids.trim().split(/ +/).map(Number)},
                                       chat:{user:"Who made the earth?",n:24,text:c}}))' "$p" "$text" "$ids" "$chat" >"$tmp/expect.json"
check "expectations made with nextn run" '[ -n "$text" ] && [ -n "$ids" ] && [ -n "$chat" ]'

serve_start "$tmp/serve.log" -m "$model" --port 0 -np 2 -c 512 --api-key secret --alias demo -t 1
check "server starts" '[ -n "$base" ]'
[ -n "$base" ] || { cat "$tmp/serve.log"; exit 1; }
node "$NEXTN_SRC/tests/openai/client.mjs" "$base" "$tmp/expect.json" || fail=1
kill -TERM "${pids[-1]}"; wait "${pids[-1]}"; rc=$?
check "server exits 0" "[ $rc -eq 0 ]"
[ $rc -eq 0 ] || tail -n 60 "$tmp/serve.log"
exit $fail
