#!/usr/bin/env bash
# test_progress_cli.sh - progress lines where people wait (mkmodel, perplexity, loading a model
# that is not in the page cache; convert and quantize are checked in their own tests): shown on a
# terminal (util-linux `script` provides one), absent in a pipe, and never changing the result.
. "$(dirname "$0")/lib.sh"
pty() { # log, command...: runs the command on a pseudo-terminal, its output (both streams) in log
  local log=$1; shift
  script -qec "$(printf '%q ' "$@")" "$log" </dev/null >/dev/null
}

# mkmodel
"$NEXTN" mkmodel --preset tiny --seed 7 -o "$tmp/a.gguf" 2>"$tmp/log"
check "mkmodel in a pipe: the summary line only" '[ "$(wc -l <"$tmp/log")" = 1 ] && grep -q "wrote" "$tmp/log" && ! grep -q "MB/s" "$tmp/log"'
pty "$tmp/mk.log" "$NEXTN" mkmodel --preset tiny --seed 7 -o "$tmp/b.gguf"
check "mkmodel on a terminal: tensor i/N, bytes, MB/s, ETA" \
  'grep -qa "nextn mkmodel: tensor [0-9]*/[0-9]*  [0-9.]* MB / [0-9.]* MB  [0-9.]* MB/s  ETA" "$tmp/mk.log"'
check "mkmodel: the last update names the last tensor of N, then the line is cleared" \
  'last=$(tr "\r" "\n" <"$tmp/mk.log" | grep -a "tensor [0-9]*/" | tail -1); [ -n "$last" ] && echo "$last" | grep -qE "tensor ([0-9]+)/\1 " && grep -qa "$(printf "\r\033\\\\[K")nextn mkmodel: wrote" "$tmp/mk.log"'
check "mkmodel: the same file either way" 'cmp -s "$tmp/a.gguf" "$tmp/b.gguf"'

# not a terminal: the tools print a plain progress line every few seconds (NEXTN_PROGRESS_SECONDS,
# default 5: the tiny jobs above print none) so a log shows they are alive; -q silences them
NEXTN_PROGRESS_SECONDS=0 "$NEXTN" mkmodel --preset tiny --seed 7 -o "$tmp/p.gguf" 2>"$tmp/plain.log"
check "mkmodel in a pipe: plain lines (tensor i/N, MB/s, ETA), no carriage return, same file" \
  'grep -q "^nextn mkmodel: tensor [0-9]*/[0-9]*  [0-9.]* MB / [0-9.]* MB  [0-9.]* MB/s  ETA" "$tmp/plain.log" && ! grep -q "$(printf "\r")" "$tmp/plain.log" && tail -1 "$tmp/plain.log" | grep -q "wrote" && cmp -s "$tmp/a.gguf" "$tmp/p.gguf"'
NEXTN_PROGRESS_SECONDS=0 "$NEXTN" convert "$NEXTN_SRC/tests/fixtures/hf-qwen35-a" -o "$tmp/hf.gguf" 2>"$tmp/plain.log"
check "convert in a pipe: plain lines" 'grep -q "^nextn convert: tensor [0-9]*/[0-9]* .*MB/s  ETA" "$tmp/plain.log"'
NEXTN_PROGRESS_SECONDS=0 "$NEXTN" quantize "$tmp/a.gguf" "$tmp/aq.gguf" q8_0 2>"$tmp/plain.log"
check "quantize in a pipe: plain lines with the target type" 'grep -q "^nextn quantize: tensor [0-9]*/[0-9]* .*MB/s  ETA.* -> q8_0" "$tmp/plain.log"'
NEXTN_PROGRESS_SECONDS=0 "$NEXTN" quantize -q "$tmp/a.gguf" "$tmp/aq2.gguf" q8_0 2>"$tmp/plain.log"
check "quantize -q: no progress line" '! grep -q "MB/s" "$tmp/plain.log"'

# perplexity: the per-pass line with an ETA always; a live line when stderr is a terminal that
# stdout (the running values) does not share
text="$NEXTN_SRC/tests/fixtures/perplexity/text.txt"
"$NEXTN" perplexity -m "$tmp/a.gguf" -f "$text" -c 64 --chunks 6 -b 64 >"$tmp/ppl1" 2>"$tmp/log"
check "perplexity: seconds per pass and ETA" 'grep -q "seconds per pass (1 chunks each), ETA [0-9]*:[0-9][0-9]" "$tmp/log" && ! grep -q "tokens/s  ETA" "$tmp/log"'
script -qec "$(printf '%q ' "$NEXTN" perplexity -m "$tmp/a.gguf" -f "$text" -c 64 --chunks 6 -b 64) >$tmp/ppl2" "$tmp/ppl.log" </dev/null >/dev/null
check "perplexity with stdout redirected, stderr a terminal: chunk i/N, tokens/s, ETA" \
  'grep -qa "nextn perplexity: chunk 6/6  384 tokens / 384 tokens  .* tokens/s  ETA" "$tmp/ppl.log"'
check "perplexity: same figures either way" 'cmp -s "$tmp/ppl1" "$tmp/ppl2"'

# loading a model whose file is not in the page cache: read once with a progress line; when it is
# cached, nothing.  `dd iflag=nocache count=0` drops the file's pages from the cache.
"$NEXTN" mkmodel --preset tiny --seed 8 -o "$tmp/c.gguf" 2>/dev/null
dd if="$tmp/c.gguf" iflag=nocache count=0 status=none
pty "$tmp/load1.log" "$NEXTN" run -m "$tmp/c.gguf" --tokens 1,2,3 -n 4 --temp 0 --print-ids
pty "$tmp/load2.log" "$NEXTN" run -m "$tmp/c.gguf" --tokens 1,2,3 -n 4 --temp 0 --print-ids
check "a cold model file is read with a progress line on a terminal" \
  'grep -qa "nextn run: loading tensor [0-9]*/[0-9]*  .*MB/s  ETA" "$tmp/load1.log"'
check "a cached model file shows no loading line" '! grep -qa "loading tensor" "$tmp/load2.log"'
dd if="$tmp/c.gguf" iflag=nocache count=0 status=none
"$NEXTN" run -m "$tmp/c.gguf" --tokens 1,2,3 -n 4 --temp 0 --print-ids >"$tmp/out3" 2>"$tmp/log3"
check "no loading line in a pipe; the same tokens either way" \
  '! grep -q "loading tensor" "$tmp/log3" && grep -q "^1 2 3 | [0-9]" "$tmp/out3" && grep -qaF "$(cat "$tmp/out3")" "$tmp/load1.log"'
exit $fail
