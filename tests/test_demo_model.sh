#!/usr/bin/env bash
# test_demo_model.sh - the shipped demo model (models/nextn-demo.gguf, trained by tools/train/):
#  * it loads, and its greedy continuations of held-out prompts equal those of the independent
#    float64 PyTorch reference (tools/reference/qwen35_ref.py on the exported HF checkpoint;
#    fixture tests/fixtures/demo-model/greedy.txt), at 1 and at 2 threads;
#  * nextn's C tokenizer gives the ids of the Python BPE encoder (tools/train/bpe.py) on held-out text;
#  * MTP speculative decoding (nextn spec-bench, greedy) produces exactly the plain greedy tokens on
#    200 prompts cut from held-out text (spec-bench exits non-zero on any difference);
#  * a seeded sampled request (nextn run --temp 1 --seed 5) gives the same text plain and with
#    --spec mtp, whatever the draft length, the adaptive cost model (it reads clocks) and the
#    thread count; several runs of the same command agree.
. "$(dirname "$0")/lib.sh"
model=$demo_model
fix="$NEXTN_SRC/tests/fixtures/demo-model"
[ -f "$model" ] || { echo "FAIL: $model is missing"; exit 1; }

check "nextn info loads the model and finds the MTP head" \
      '"$NEXTN" info "$model" >"$tmp/info" 2>&1 && grep -q "nextn_predict_layers" "$tmp/info"'

# ---- greedy text == the PyTorch reference
n=0
while IFS=$'\t' read -r prompt want; do
    n=$((n + 1))
    k=$(echo "$want" | tr ',' '\n' | wc -l)
    for t in 1 2; do
        got=$("$NEXTN" run -m "$model" --tokens "$prompt" -n "$k" --temp 0 --kv-type f32 --ignore-eos \
              --print-ids --no-display-prompt -t "$t" 2>"$tmp/err" | tr -s ' \n' ',,' | sed 's/^,//; s/,$//')
        check "greedy continuation $n at $t thread(s) == reference" '[ "$got" = "$want" ] || {
              echo "  want $want"; echo "  got  $got"; cat "$tmp/err"; false; }'
    done
done <"$fix/greedy.txt"
check "the greedy fixture has prompts" '[ "$n" -ge 4 ]'

a=$("$NEXTN" run -m "$model" -p "And God said" -n 24 --temp 0 2>/dev/null)
b=$("$NEXTN" run -m "$model" -p "And God said" -n 24 --temp 0 2>/dev/null)
check "greedy text is deterministic and not empty" '[ ${#a} -gt 20 ] && [ "$a" = "$b" ]'

# ---- C tokenizer == Python BPE
"$NEXTN" tokenize -m "$model" --ids -f "$fix/tokenize.txt" >"$tmp/ids" 2>"$tmp/err"
check "nextn tokenize == tools/train/bpe.py on held-out text" \
      'diff <(tr -s " " "\n" <"$tmp/ids" | sed "/^$/d") "$fix/tokenize.ids" >/dev/null'

# ---- speculative == plain on 200 held-out prompts
n=0; bad=0
while read -r prompt; do
    n=$((n + 1))
    if ! "$NEXTN" spec-bench -m "$model" --prompt "$prompt" -n 12 --runs 1 --draft-max 3 -t 1 \
         >"$tmp/sb" 2>&1; then
        bad=$((bad + 1)); [ "$bad" -le 3 ] && { echo "  prompt $n:"; tail -3 "$tmp/sb"; }
    fi
done <"$fix/prompts.txt"
check "greedy spec == greedy plain on all $n held-out prompts ($bad failed)" '[ "$n" -ge 200 ] && [ "$bad" -eq 0 ]'

# ---- seeded sampling: the text is a function of (model, prompt, parameters, seed)
want=$("$NEXTN" run -m "$model" -p "And God said" -n 64 --temp 1 --seed 5 --ignore-eos --no-display-prompt -t 1 2>/dev/null)
check "seeded sampling gives text" '[ ${#want} -gt 40 ]'
diff=0; runs=0
for args in "-t 1" "-t 2" "-t 1 --spec mtp" "-t 1 --spec mtp" "-t 2 --spec mtp" "-t 2 --spec mtp" "-t 1 --spec mtp --draft-max 1" \
            "-t 2 --spec mtp --draft-max 5" "-t 1 --spec mtp --draft-max 4 --no-adaptive" "-t 1 --spec mtp --draft-vocab 0"; do
    runs=$((runs + 1))
    got=$("$NEXTN" run -m "$model" -p "And God said" -n 64 --temp 1 --seed 5 --ignore-eos --no-display-prompt $args 2>"$tmp/err")
    [ "$got" = "$want" ] || { diff=$((diff + 1)); echo "  differs with $args: $got"; }
done
check "seeded sampled text is the same plain and speculative, any draft length, threads ($diff of $runs differ)" '[ "$diff" -eq 0 ]'
other=$("$NEXTN" run -m "$model" -p "And God said" -n 64 --temp 1 --seed 6 --ignore-eos --no-display-prompt -t 1 --spec mtp 2>/dev/null)
check "another seed gives another text" '[ -n "$other" ] && [ "$other" != "$want" ]'
exit $fail
