#!/usr/bin/env bash
# test_chat_cli.sh - `nextn chat` through a pipe and through a pseudo-terminal (util-linux
# `script`), on the demo model (ChatML template; greedy).  The reference for every reply is
# `nextn run` on the conversation rendered by tests/chat_render.js (the Qwen3.5 template's rules
# written out independently) and tokenized with `nextn tokenize --special`: each reply of a
# multi-turn session must equal that one-shot generation, whatever the chat kept, restored or
# re-decoded.  The per-turn log (--verbose) must show that a turn decodes only the tokens after
# the previous turn's assistant header (where the template's rendering of the history branches
# from what was generated), and that /clear goes back to the checkpoint after the system prompt.
. "$(dirname "$0")/lib.sh"
model=$demo_model
render="$NEXTN_SRC/tests/chat_render.js"
N=16
export HOME="$tmp" LANG=C.UTF-8
# The demo model's own template has no <think> (format chatml-plain); the checks of the Qwen3.5
# template's thinking rules below force that format.
QWEN="--chat-format chatml"

# ids of a text with control tokens
ids() { "$NEXTN" tokenize -m "$model" --special --ids -f "$1"; }
ntok() { ids "$1" | wc -w; }
# reply that `nextn run` gives for the first K messages of CONV rendered with MODE (plain greedy)
run_ref() { # conv k mode
  node "$render" "$1" "$3" "$2" >"$tmp/ref.txt" || return 1
  "$NEXTN" run -m "$model" --tokens "$(ids "$tmp/ref.txt")" -n $N ${SAMPLING:---temp 0} --no-display-prompt 2>/dev/null
}
# a saved conversation split into files CONV.d/N (message count), CONV.d/K.role, .content,
# .reasoning_content (one node run per file instead of one per field)
split_conv() {
  [ -d "$1.d" ] && [ "$1.d" -nt "$1" ] && return 0
  rm -rf "$1.d"
  node -e 'const fs=require("fs"), [f, d]=process.argv.slice(1), m=JSON.parse(fs.readFileSync(f, "utf8"));
    fs.mkdirSync(d); fs.writeFileSync(d + "/N", String(m.length));
    m.forEach((x, i) => { for (const k of ["role", "content", "reasoning_content"]) fs.writeFileSync(`${d}/${i}.${k}`, x[k] || ""); });' "$1" "$1.d"
}
# field of message K (0-based) of a saved conversation
field() { split_conv "$1" && { [ -f "$1.d/$2.$3" ] && cat "$1.d/$2.$3"; true; }; }
nmsg() { split_conv "$1" && cat "$1.d/N"; }
# every assistant reply of CONV from message FIRST on equals run_ref of the conversation before it
replies_match() { # conv mode [first]
  local conv=$1 mode=$2 n k bad=0 checked=0
  n=$(nmsg "$conv")
  for ((k = ${3:-0}; k < n; k++)); do
    [ "$(field "$conv" $k role)" = assistant ] || continue
    local want got
    want=$(run_ref "$conv" $k "$mode"; echo x); want=${want%$'\n'x}
    if [ "$mode" = think ]; then got=$(field "$conv" $k reasoning_content; echo x); else got=$(field "$conv" $k content; echo x); fi
    got=${got%x}
    if [ "$want" != "$got" ]; then echo "  message $k: chat '$got' vs run '$want'"; bad=1; fi
    checked=$((checked + 1))
  done
  [ $checked -gt 0 ] || { echo "  no reply to check in $conv"; bad=1; }
  return $bad
}

# ---- the model's own template: no <think> in the prompt, the replies are answers on stdout
printf 'hello there\nwhat is a package?\n/save %s\n' "$tmp/p1.json" | "$NEXTN" chat -m "$model" --temp 0 -n $N >"$tmp/pout" 2>"$tmp/perr"
# the demo template written out: '<|im_start|>' + role + '\n' + content + '<|im_end|>\n', then the header
printf '<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\n' >"$tmp/pref.txt"
pwant=$("$NEXTN" run -m "$model" --tokens "$(ids "$tmp/pref.txt")" -n $N --temp 0 --no-display-prompt 2>/dev/null; echo x); pwant=${pwant%$'\n'x}
check "model's own format: the first reply is content, = nextn run on the template's prompt (no <think>)" \
  '[ -n "$pwant" ] && [ "$(field "$tmp/p1.json" 1 content)" = "$pwant" ] && [ -z "$(field "$tmp/p1.json" 1 reasoning_content)" ]'
check "model's own format: stdout carries the answers (not empty lines)" '[ "$(tr -d " \n" <"$tmp/pout" | wc -c)" -gt 0 ]'
check "model's own format: --think is refused (the template cannot think)" \
  '! "$NEXTN" chat -m "$model" --think </dev/null >/dev/null 2>"$tmp/perr2" && grep -q "no thinking block" "$tmp/perr2"'

# ---- pipe: three turns, thinking off ---------------------------------------------------------
printf 'hello there\nwhat is a package?\nand a library?\n/save %s\n' "$tmp/c1.json" |
  "$NEXTN" chat -m "$model" $QWEN --no-think --temp 0 -n $N --verbose >"$tmp/out1" 2>"$tmp/err1"
check "pipe session exits 0 and saves" '[ -s "$tmp/c1.json" ] && grep -q "6 messages written" "$tmp/err1"'
check "stdout: the three replies, each followed by a newline" \
  '[ "$(field "$tmp/c1.json" 1 content; echo; field "$tmp/c1.json" 3 content; echo; field "$tmp/c1.json" 5 content; echo; echo x)" = "$(cat "$tmp/out1"; echo x)" ]'
check "multi-turn replies equal nextn run on the rendered conversation" 'replies_match "$tmp/c1.json" no-think'
# turn k decodes exactly the tokens after turn k-1's assistant header
turn_ok=1
for k in 2 3; do
  m=$((2 * (k - 1) - 1))                                  # messages before turn k-1's reply
  node "$render" "$tmp/c1.json" header $m >"$tmp/h.txt"
  node "$render" "$tmp/c1.json" no-think $((2 * k - 1)) >"$tmp/p.txt"
  want_reused=$(ntok "$tmp/h.txt"); want_prompt=$(ntok "$tmp/p.txt")
  line=$(grep "turn $k: " "$tmp/err1")
  if ! echo "$line" | grep -q "prompt $want_prompt tokens: $want_reused reused, $((want_prompt - want_reused)) decoded (restored the checkpoint at $want_reused)"; then
    echo "  turn $k: want prompt $want_prompt, reused $want_reused; got: $line"; turn_ok=0
  fi
done
check "a turn decodes only the tokens after the last assistant header (logged)" '[ $turn_ok = 1 ]'
check "turn 1 decodes the whole prompt" 'grep -q "turn 1: prompt $(node "$render" "$tmp/c1.json" no-think 1 >"$tmp/p1.txt"; ntok "$tmp/p1.txt") tokens: 0 reused" "$tmp/err1"'

# ---- the same with speculative decoding: identical conversation -----------------------------
printf 'hello there\nwhat is a package?\nand a library?\n/save %s\n' "$tmp/c1s.json" |
  "$NEXTN" chat -m "$model" $QWEN --no-think --temp 0 -n $N --spec mtp --verbose >/dev/null 2>"$tmp/err1s"
check "--spec mtp gives the same conversation" 'cmp -s "$tmp/c1.json" "$tmp/c1s.json" && grep -q "MTP speculative decoding" "$tmp/err1s" && grep -q "drafts [0-9]* of [0-9]* accepted" "$tmp/err1s"'

# ---- sampled: each reply is seeded like `nextn run --seed` (plain decoding) ---------------------
printf 'hello there\nwhat is a package?\n/save %s\n' "$tmp/c1t.json" |
  "$NEXTN" chat -m "$model" $QWEN --no-think --temp 0.8 --seed 5 -n $N >/dev/null 2>&1
check "sampled replies equal nextn run with the same seed" 'SAMPLING="--temp 0.8 --seed 5" replies_match "$tmp/c1t.json" no-think'

# ---- /system, /clear, /think -------------------------------------------------------------------
printf 'hi\nwhat is GNU?\n/system You answer in one line.\nwhat is GNU?\n/save %s\n/clear\nwhat is Debian?\n/save %s\n/think on\ntell me more\n/save %s\n' \
  "$tmp/c2.json" "$tmp/c3.json" "$tmp/c4.json" |
  "$NEXTN" chat -m "$model" $QWEN --system "You are terse." --no-think --temp 0 -n $N --verbose >"$tmp/out2" 2>"$tmp/err2"
check "/system changes the system prompt of the conversation" '[ "$(field "$tmp/c2.json" 0 content)" = "You answer in one line." ] && [ "$(field "$tmp/c2.json" 1 content)" = hi ]'
check "/system: the reply after it equals nextn run with the new system prompt" 'replies_match "$tmp/c2.json" no-think 6'
check "/system re-decodes the conversation (its first tokens changed)" 'grep "turn 3: " "$tmp/err2" | grep -q "(cleared the context)"'
check "/clear keeps only the system prompt" '[ "$(nmsg "$tmp/c3.json")" = 3 ] && [ "$(field "$tmp/c3.json" 1 content)" = "what is Debian?" ]'
check "/clear: the reply equals nextn run" 'replies_match "$tmp/c3.json" no-think'
node "$render" "$tmp/c3.json" none 1 >"$tmp/sys.txt"
check "/clear restores the checkpoint after the system prompt" 'grep "turn 4: " "$tmp/err2" | grep -q "$(ntok "$tmp/sys.txt") reused, .* (restored the checkpoint at $(ntok "$tmp/sys.txt"))"'
check "/think on: the reasoning equals nextn run with the thinking prompt" \
  '[ "$(field "$tmp/c4.json" 4 content)" = "" ] && replies_match "$tmp/c4.json" think 4'
check "reasoning goes to stderr, not into the answer on stdout" \
  'r=$(field "$tmp/c4.json" 4 reasoning_content | head -c 12); [ -n "$r" ] && grep -qF -- "$r" "$tmp/err2" && ! grep -qF -- "$r" "$tmp/out2"'

# ---- /save + /load round trip ------------------------------------------------------------------
printf '/load %s\n/save %s\nwhat is a library?\n/save %s\n' "$tmp/c1.json" "$tmp/c5a.json" "$tmp/c5.json" |
  "$NEXTN" chat -m "$model" $QWEN --no-think --temp 0 -n $N --verbose >/dev/null 2>"$tmp/err5"
check "/load then /save gives the same file" 'cmp -s "$tmp/c1.json" "$tmp/c5a.json"'
check "a loaded conversation continues like nextn run" 'replies_match "$tmp/c5.json" no-think && [ "$(field "$tmp/c5.json" 6 content)" = "what is a library?" ]'
printf '[{"role": "user", "content": "x"}, {"role": "tool", "content": "y"}]' >"$tmp/bad1.json"
printf '{"messages": [{"role": "user", "content": [{"type": "text"}]}]}' >"$tmp/bad2.json"
printf '[{"role": "user"' >"$tmp/bad3.json"
printf 'hi\n/load %s\n/load %s\n/load %s\n/load %s\n/frobnicate\n//save is not a command\n/save %s\n' "$tmp/bad1.json" "$tmp/bad2.json" \
  "$tmp/bad3.json" "$tmp/nope.json" "$tmp/c6.json" | "$NEXTN" chat -m "$model" $QWEN --no-think --temp 0 -n 4 >/dev/null 2>"$tmp/err6"
check "bad /load files are refused with a message naming the problem" \
  'grep -q "message 1: role must be" "$tmp/err6" && grep -q "content must be a string" "$tmp/err6" && grep -q "bad3.json: invalid JSON" "$tmp/err6" && grep -q "nope.json: cannot open" "$tmp/err6"'
check "the session survives them; unknown commands are refused; // sends a /message" \
  'grep -q "unknown command /frobnicate" "$tmp/err6" && [ "$(field "$tmp/c6.json" 0 content)" = hi ] && [ "$(field "$tmp/c6.json" 2 content)" = "/save is not a command" ]'

# ---- multi-line input ----------------------------------------------------------------------------
printf 'first line \\\nsecond line\n"""\nblock one\n\nblock two\n"""\n/save %s\n' "$tmp/c7.json" |
  "$NEXTN" chat -m "$model" $QWEN --no-think --temp 0 -n 2 >/dev/null 2>&1
check "trailing \\ and \"\"\" blocks make multi-line messages" \
  '[ "$(field "$tmp/c7.json" 0 content)" = "$(printf "first line \nsecond line")" ] && [ "$(field "$tmp/c7.json" 2 content)" = "$(printf "block one\n\nblock two")" ]'

# ---- errors ----------------------------------------------------------------------------------------
err() { # name, expected status, expected message fragment, command...
  local name=$1 want=$2 msg=$3; shift 3
  "$@" </dev/null >/dev/null 2>"$tmp/err"; local rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$msg" "$tmp/err"; then
    echo "FAIL: $name (exit $rc, stderr: $(head -c 300 "$tmp/err"))"; fail=1
  else echo "ok: $name"; fi
}
"$NEXTN" mkmodel --preset tiny -o "$tmp/tiny.gguf" >/dev/null 2>&1
err "missing -m" 2 "missing -m FILE" "$NEXTN" chat
err "--think and --no-think" 2 "contradict" "$NEXTN" chat -m "$model" $QWEN --think --no-think
err "a model without a chat template" 1 "chat-format chatml" "$NEXTN" chat -m "$tmp/tiny.gguf"
printf 'x%.0s' $(seq 1 400) >"$tmp/long.txt"; echo >>"$tmp/long.txt"
"$NEXTN" chat -m "$model" -c 64 --no-think --temp 0 -n 4 <"$tmp/long.txt" >/dev/null 2>"$tmp/err8"
check "a conversation longer than the context is an error naming n_ctx, not a crash" 'grep -q "context holds n_ctx = 64" "$tmp/err8"'

# ---- pseudo-terminal: line editor, Ctrl-C mid-reply, Ctrl-C at the prompt, Ctrl-D, thinking ----
# util-linux `script` runs the chat on a pty; keystrokes go in through a FIFO.
mkfifo "$tmp/pin"
script -qfec "'$NEXTN' chat -m '$model' $QWEN --think --temp 0 -n 200 -c 8192 --verbose" "$tmp/pty.log" <"$tmp/pin" >/dev/null 2>&1 &
spid=$!
exec 3>"$tmp/pin"
wait_for() { # pattern [seconds]: wait until the log matches
  local i; for ((i = 0; i < ${2:-30} * 10; i++)); do grep -qa -- "$1" "$tmp/pty.log" 2>/dev/null && return 0; sleep 0.1; done; return 1
}
size() { stat -c %s "$tmp/pty.log" 2>/dev/null || echo 0; }
wait_for ">>> " 30
printf 'hello\r' >&3
wait_for "hello" 30
s0=$(size)
# the reply is streaming: Ctrl-C right after its first bytes (a 200-token reply of the demo model
# takes ~0.15 s on a fast idle machine, so a coarse poll can miss it)
for ((i = 0; i < 3000 && $(size) < s0 + 8; i++)); do sleep 0.01; done
printf '\003' >&3                       # Ctrl-C: stop it
wait_for "(interrupted)" 30
printf 'garbage that is never sent\003' >&3   # Ctrl-C at the prompt discards the line
sleep 0.3
printf 'second\r' >&3
wait_for "turn 2: " 60
printf '/save %s\r' "$tmp/pty.json" >&3
wait_for "messages written" 30
printf '\004' >&3                       # Ctrl-D: end
exec 3>&-
for ((i = 0; i < 100; i++)); do kill -0 $spid 2>/dev/null || break; sleep 0.1; done
kill -0 $spid 2>/dev/null && { kill $spid; echo "FAIL: the chat did not end on Ctrl-D"; fail=1; }
wait $spid 2>/dev/null
check "pty: prompt, streamed reply, Ctrl-C stops the reply" 'grep -qa "turn 1: .*(interrupted)" "$tmp/pty.log"'
check "pty: Ctrl-C at the prompt discards the line" '! grep -q garbage "$tmp/pty.json" && [ "$(field "$tmp/pty.json" 2 content)" = second ]'
check "pty: after Ctrl-C the session answers like nextn run (greedy, -n 200)" 'N=200 replies_match "$tmp/pty.json" think 2'
check "pty: reasoning is shown dimmed" 'grep -qa "$(printf "\033\\[2m")" "$tmp/pty.log"'
check "pty: Ctrl-D ends the session with status 0" 'grep -qa "COMMAND_EXIT_CODE=\"0\"" "$tmp/pty.log"'
if [ $fail -ne 0 ]; then echo "--- pty log"; cat -v "$tmp/pty.log" | tail -30; fi
exit $fail
