#!/usr/bin/env bash
# test_serve.sh - `nextn serve` on the demo model, driven by a real HTTP client (Node's fetch,
# tests/serve_client.mjs): every answer is compared with what `nextn run` prints for the same
# request (greedy and seeded sampling, chat), plus streaming, parallel slots, stop strings,
# authentication, error statuses, speculative mode and a clean shutdown on SIGTERM.
. "$(dirname "$0")/lib.sh"
model=$demo_model
need node "scripts/deps.sh installs nodejs"

# expectations from `nextn run` (plain decoding, one sequence at a time)
run() { "$NEXTN" run -m "$model" --no-display-prompt -t 1 "$@" 2>/dev/null; }
prompts=("In the beginning God created" "And the LORD said unto Moses" "def main(args):" "#include <stdio.h>"
         "The quick brown fox" "Blessed are the meek")
{
  echo '{"prompts": ['
  for i in "${!prompts[@]}"; do
    p=${prompts[$i]}; n=$((12 + 4 * i))
    text=$(run -p "$p" -n $n --temp 0 --ignore-eos; printf x); text=${text%x}; text=${text%$'\n'}  # run ends its output with a newline
    np=$("$NEXTN" tokenize -m "$model" --ids "$p" 2>/dev/null | tr -cd '0-9, \n' | tr '\n' ' ')
    [ "$i" -gt 0 ] && echo ','
    node -e 'const [p,n,t,ids]=process.argv.slice(1); const a=ids.split(/[ ,]+/).filter(Boolean).map(Number);
             process.stdout.write(JSON.stringify({prompt:p,n:+n,text:t,ids:a,n_prompt:a.length}))' "$p" "$n" "$text" "$np"
  done
  echo '],'
  text=$(run -p "${prompts[0]}" -n 20 --temp 1 --seed 5 --ignore-eos; printf x); text=${text%x}; text=${text%$'\n'}  # run ends its output with a newline
  node -e 'process.stdout.write(JSON.stringify({n:20,text:process.argv[1]}))' "$text" | sed 's/^/"sampled": /'
  echo ','
  # the same request decoded speculatively alone (the adaptive draft length reads clocks; a
  # seeded draw depends on the position only, so the text is the plain one: checked below)
  text=$(run -p "${prompts[0]}" -n 20 --temp 1 --seed 5 --ignore-eos --spec mtp --draft-max 3 \
         --draft-vocab 1024 --draft-vocab-file "$NEXTN_SRC/models/nextn-demo.draft-vocab.txt"; printf x)
  text=${text%x}; text=${text%$'\n'}
  node -e 'process.stdout.write(JSON.stringify({n:20,text:process.argv[1]}))' "$text" | sed 's/^/"spec_sampled": /'
  echo ','
  text=$(run -p "Who made the earth?" --chat -n 24 --temp 0 --ignore-eos; printf x); text=${text%x}; text=${text%$'\n'}  # run ends its output with a newline
  node -e 'process.stdout.write(JSON.stringify({user:"Who made the earth?",n:24,text:process.argv[1]}))' "$text" | sed 's/^/"chat": /'
  echo '}'
} >"$tmp/expect.json"
check "expectations made with nextn run" 'node -e "JSON.parse(require(\"fs\").readFileSync(\"$tmp/expect.json\"))" &&
       [ "$(node -e "const w=JSON.parse(require(\"fs\").readFileSync(\"$tmp/expect.json\"));console.log(w.prompts.every(p=>p.text.length>0&&p.n_prompt>0))")" = true ]'
check "nextn run: the seeded sampled text is the same with --spec mtp" \
      '[ "$(node -e "const w=JSON.parse(require(\"fs\").readFileSync(\"$tmp/expect.json\"));console.log(w.sampled.text.length>0&&w.sampled.text===w.spec_sampled.text)")" = true ]'

# start a server on a free port, wait for its "listening on" line, set $base to its URL
start() { # log, args...
    local log=$1; shift
    serve_start "$log" -m "$model" --port 0 "$@"
}

start "$tmp/serve.log" -np 3 -c 512 --api-key secret --alias demo --max-body 1 -t 2
check "server starts and prints its address" '[ -n "$base" ]'
[ -n "$base" ] || { cat "$tmp/serve.log"; exit 1; }
node "$NEXTN_SRC/tests/serve_client.mjs" "$base" secret "$tmp/expect.json" full || fail=1

srv=${pids[-1]}
kill -TERM "$srv"
for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
check "SIGTERM: the server exits 0 and says so" '! kill -0 "$srv" 2>/dev/null && wait "$srv"; [ $? -eq 0 ] && grep -q "shutting down" "$tmp/serve.log"'

# -b 5: every prompt longer than 5 tokens is decoded in parts between the other slots' steps
start "$tmp/spec.log" -np 3 -c 512 -b 5 --api-key secret --spec mtp --draft-max 3 -t 2 \
      --draft-vocab 1024 --draft-vocab-file "$NEXTN_SRC/models/nextn-demo.draft-vocab.txt"
check "speculative server starts" '[ -n "$base" ] && grep -q "speculative mtp" "$tmp/spec.log"'
[ -n "$base" ] && { node "$NEXTN_SRC/tests/serve_client.mjs" "$base" secret "$tmp/expect.json" spec || fail=1; }
check "bench/serve_load.mjs drives the speculative server (3 clients)" \
      'node "$NEXTN_SRC/bench/serve_load.mjs" "$base" --key secret --clients 3 --requests 2 --max-tokens 8 >"$tmp/load" &&
       grep -q "^clients 3 x 2 requests x 8 tokens: 48 tokens in" "$tmp/load"'

check "--draft-vocab without --spec mtp is refused" '! "$NEXTN" serve -m "$model" --draft-vocab 8 2>"$tmp/e" && grep -q "need --spec mtp" "$tmp/e"'
check "bad options are refused clearly" '! "$NEXTN" serve -m "$model" --host nowhere.invalid --port 0 2>"$tmp/e" && grep -q "nowhere.invalid" "$tmp/e"'
check "a missing model is a clear error" '! "$NEXTN" serve -m "$tmp/none.gguf" 2>"$tmp/e" && grep -q "none.gguf" "$tmp/e"'
exit $fail
