#!/usr/bin/env bash
# test_run.sh - `nextn run` on a tiny synthetic model: output, determinism, greedy == argmax of
# the logits `nextn eval` dumps (checked here with od + awk), and every error case.
. "$(dirname "$0")/lib.sh"
model="$tmp/tiny.gguf"
tiny_model "$model"

run() { "$NEXTN" run -m "$model" "$@"; }

# ---- output and figures
check "run --help exits 0 and lists the sampling flags" \
      '"$NEXTN" run --help | grep -q -- "--repeat-penalty"'
check "run with token ids prints ids and the figures" \
      'run --tokens 1,2,3 -n 6 --temp 0 --print-ids --no-display-prompt >"$tmp/o" 2>"$tmp/e" &&
       [ $(wc -w <"$tmp/o") -eq 6 ] &&
       grep -q "prompt 3 tokens in .* tokens/s" "$tmp/e" &&
       grep -q "generation 6 tokens in .* tokens/s" "$tmp/e" &&
       grep -q "peak memory (RSS)" "$tmp/e" && grep -q "memory: weights .* KV cache .* recurrent state" "$tmp/e"'
check "text prompt is echoed and followed by generated text" \
      'run -p "hello world" -n 5 --temp 0 --ignore-eos >"$tmp/o" 2>"$tmp/e" && head -c 11 "$tmp/o" | grep -q "^hello world$" &&
       [ $(wc -c <"$tmp/o") -gt 12 ]'
check "--kv-type f32 works" 'run --tokens 5,6 -n 3 --temp 0 --kv-type f32 --print-ids >/dev/null 2>"$tmp/e" && grep -q "(f32," "$tmp/e"'

# ---- determinism
a=$(run --tokens 1,2,3 -n 16 --temp 0 --print-ids --no-display-prompt 2>/dev/null)
b=$(run --tokens 1,2,3 -n 16 --temp 0 --print-ids --no-display-prompt -t 1 2>/dev/null)
check "greedy is deterministic (and independent of the thread count)" '[ -n "$a" ] && [ "$a" = "$b" ]'
s1=$(run --tokens 1,2,3 -n 24 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 7 --print-ids --no-display-prompt 2>/dev/null)
s2=$(run --tokens 1,2,3 -n 24 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 7 --print-ids --no-display-prompt 2>/dev/null)
s3=$(run --tokens 1,2,3 -n 24 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 8 --print-ids --no-display-prompt 2>/dev/null)
check "same seed, same tokens" '[ -n "$s1" ] && [ "$s1" = "$s2" ]'
check "other seed, other tokens" '[ "$s1" != "$s3" ]'
check "the seed is printed when not given" 'run --tokens 1 -n 1 --print-ids 2>&1 >/dev/null | grep -q "seed [0-9]"'

# ---- sampling flags reach the sampler: a presence penalty of 100 forbids any repeat in the window
# (60 greedy tokens of this model repeat some ids without it)
ids_plain=$(run --tokens 1,2,3 -n 60 --temp 0 --print-ids 2>/dev/null | tr ' |' '\n\n' | grep -v '^$')
ids_pen=$(run --tokens 1,2,3 -n 60 --temp 0 --presence-penalty 100 --print-ids 2>/dev/null | tr ' |' '\n\n' | grep -v '^$')
check "without a penalty, greedy repeats tokens" '[ $(echo "$ids_plain" | sort | uniq -d | wc -l) -gt 0 ]'
check "--presence-penalty 100: 63 distinct ids" '[ $(echo "$ids_pen" | sort -u | wc -l) -eq 63 ]'

# ---- greedy == argmax of the logits, recomputed independently from an eval dump
prompt="1,2,3"
gen=$(echo $a | tr ' ' ',')
all="$prompt,$gen"
"$NEXTN" eval -m "$model" --tokens "$all" --dump-logits "$tmp/l.bin" >/dev/null 2>&1
nv=512
argmaxes=$(od -An -v -f -w$((nv * 4)) "$tmp/l.bin" | awk '{ best = 1; for (i = 2; i <= NF; i++) if ($i > $best) best = i; printf "%d ", best - 1 }')
expect=$(echo $argmaxes | awk '{ for (i = 3; i <= 18; i++) printf "%s%s", (i > 3 ? " " : ""), $i }')
check "greedy tokens are the argmax of the eval logits of the previous position" '[ "$expect" = "$a" ]'

# ---- chat formatting (the tiny model has no chat template: ChatML must be forced)
check "--chat without a template exits 1 and suggests --chat-format" \
      'out=$(run --chat -p hi -n 1 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q -- "--chat-format chatml"'
check "--chat-format chatml wraps the prompt; control tokens become single ids" \
      'run --chat-format chatml -p hi -n 1 --temp 0 >"$tmp/o" 2>/dev/null && head -1 "$tmp/o" | grep -q "^<|im_start|>user$" &&
       grep -q "^<|im_start|>assistant$" "$tmp/o" &&
       run --chat-format chatml -p hi -n 1 --temp 0 --print-ids 2>/dev/null | awk "{ exit !(\$1 == 510) }"'
check "unknown --chat-format exits 1 naming the known ones" \
      'out=$(run --chat-format vicuna -p hi 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "chatml"'
check "--chat needs -p" 'out=$(run --chat --tokens 1 2>&1); [ $? -eq 2 ]'

# ---- errors
check "missing -m exits 2 and says so" 'out=$(run 2>&1); out=$("$NEXTN" run -p x 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "-m FILE"'
check "missing model file exits 1 and names it" \
      'out=$("$NEXTN" run -m "$tmp/none.gguf" -p x 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "none.gguf"'
check "not a GGUF exits 1 with the loader error" \
      'echo garbage >"$tmp/bad.gguf"; out=$("$NEXTN" run -m "$tmp/bad.gguf" -p x 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "bad.gguf"'
check "both -p and --tokens exit 2" 'out=$(run -p x --tokens 1 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "exactly one"'
check "--top-p out of range exits 2 and names flag and range" \
      'out=$(run -p x --top-p 1.5 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "--top-p: 1.5 is outside \[0, 1\]"'
check "non-numeric value exits 2" 'out=$(run -p x -n abc 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "not an integer"'
check "unknown option exits 2 and names it" 'out=$(run -p x --tmep 1 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "--tmep"'
check "option without its value exits 2" 'out=$(run -p x --temp 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "needs a value"'
check "bad --kv-type exits 2 and lists choices" 'out=$(run -p x --kv-type q8 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "f16, f32"'
check "bad token list exits 2 naming the item" \
      'out=$(run --tokens 1,x2,3 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "item 2"'
check "token id outside the vocabulary exits 1" \
      'out=$(run --tokens 1,99999 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "outside the vocabulary \[0, 512)"'
check "too-long prompt exits 1 and names n_ctx" \
      'out=$(run --tokens 1,2,3,4,5,6,7,8 -c 4 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "n_ctx = 4"'
check "generation stops when the context is full" \
      'run --tokens 1,2,3 -c 6 -n 50 --temp 0 --print-ids --no-display-prompt >"$tmp/o" 2>"$tmp/e" &&
       grep -q "context is full (n_ctx = 6)" "$tmp/e" && [ $(wc -w <"$tmp/o") -eq 4 ]'
check "-n -1 generates until the context is full" \
      'run --tokens 1,2 -c 8 -n -1 --temp 0 --ignore-eos --print-ids --no-display-prompt >"$tmp/o" 2>"$tmp/e" &&
       grep -q "context is full (n_ctx = 8)" "$tmp/e" && [ $(wc -w <"$tmp/o") -eq 7 ]'
exit $fail
