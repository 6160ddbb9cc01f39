#!/usr/bin/env bash
# test_slot_files.sh - files named by a client or a user are opened only when they are regular
# files, and never block (src/base/file_safe.c): `nextn serve --slot-save-path` restore/save of a
# FIFO, a symbolic link or a folder planted in the slot folder, and the chat's /load and /save of
# the same.  Each command runs under `timeout 20`: code that opens a FIFO blocks (an open for
# writing waits for a reader, a read waits for data), and the timeout turns that hang into a
# failure instead of a stuck test.
. "$(dirname "$0")/lib.sh"
model=$demo_model
need curl "the HTTP client"
need mkfifo "coreutils"

dir="$tmp/slots"
mkdir -p "$dir" "$dir/adir"
mkfifo "$dir/fifo.bin"
printf 'keep' >"$tmp/outside.bin"
ln -s "$tmp/outside.bin" "$dir/link.bin"

serve_start "$tmp/srv.log" -m "$model" --port 0 -t 1 -c 256 -np 2 --slot-save-path "$dir"
check "server starts" '[ -n "$base" ]'
[ -n "$base" ] || { cat "$tmp/srv.log"; exit 1; }
post() { # path, json body -> status code; body in $tmp/out
    timeout 20 curl -s -o "$tmp/out" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$base$1"
}
check_show="$tmp/out"
check "a completion fills slot 0" \
  '[ "$(post /completion "{\"prompt\":\"In the beginning\",\"n_predict\":4,\"id_slot\":0,\"cache_prompt\":true}")" = 200 ]'
check "save slot 0 into a regular file" '[ "$(post "/slots/0?action=save" "{\"filename\":\"real.bin\"}")" = 200 ]'
check "restore of a FIFO: 400 naming it, at once (no hang)" \
  '[ "$(post "/slots/1?action=restore" "{\"filename\":\"fifo.bin\"}")" = 400 ] && has "fifo.bin is a FIFO"'
check "restore of a symbolic link: 400, not followed" \
  '[ "$(post "/slots/1?action=restore" "{\"filename\":\"link.bin\"}")" = 400 ] && has "link.bin is a symbolic link"'
check "restore of a folder: 400" \
  '[ "$(post "/slots/1?action=restore" "{\"filename\":\"adir\"}")" = 400 ] && has "adir is a folder"'
check "save onto a FIFO: 400, at once" \
  '[ "$(post "/slots/0?action=save" "{\"filename\":\"fifo.bin\"}")" = 400 ] && has "fifo.bin is a FIFO" && [ -p "$dir/fifo.bin" ]'
check "save onto a symbolic link: 400; the link and its target are untouched" \
  '[ "$(post "/slots/0?action=save" "{\"filename\":\"link.bin\"}")" = 400 ] && has "link.bin is a symbolic link" &&
   [ -L "$dir/link.bin" ] && [ "$(cat "$tmp/outside.bin")" = keep ]'
check "the regular file still restores" \
  '[ "$(post "/slots/1?action=restore" "{\"filename\":\"real.bin\"}")" = 200 ]'
check "the server still generates" \
  '[ "$(post /completion "{\"prompt\":\"hello\",\"n_predict\":2}")" = 200 ]'
check "no temporary file is left in the slot folder" '[ -z "$(ls "$dir" | grep tmp)" ]'
check_show=
kill -TERM "$pid"
for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done  # <= 20 s: a hung engine ignores it
check "SIGTERM: exit 0 within 20 s" '! kill -0 "$pid" 2>/dev/null && wait "$pid"'
kill -9 "$pid" 2>/dev/null

# ---- the chat's /load and /save ------------------------------------------------------------------
chat() { timeout 20 "$NEXTN" chat -m "$model" --temp 0 -n 2 >/dev/null 2>"$tmp/err"; }
printf '/load %s\n' "$dir/fifo.bin" | chat; rc=$?
check "chat /load of a FIFO: refused at once, naming it" '[ $rc -ne 124 ] && grep -q "fifo.bin: is a FIFO" "$tmp/err"'
printf '/load %s\n' "$dir/link.bin" | chat; rc=$?
check "chat /load of a symbolic link: refused" '[ $rc -ne 124 ] && grep -q "link.bin: is a symbolic link" "$tmp/err"'
printf '/load %s\n' "$dir/adir" | chat; rc=$?
check "chat /load of a folder: refused" '[ $rc -ne 124 ] && grep -q "adir: is a folder" "$tmp/err"'
printf 'hi\n/save %s\n' "$dir/fifo.bin" | chat; rc=$?
check "chat /save onto a FIFO: refused at once, the FIFO stays" \
  '[ $rc -ne 124 ] && grep -q "fifo.bin: is a FIFO" "$tmp/err" && [ -p "$dir/fifo.bin" ]'
printf 'hi\n/save %s\n' "$dir/link.bin" | chat; rc=$?
check "chat /save onto a symbolic link: refused, its target untouched" \
  '[ $rc -ne 124 ] && grep -q "link.bin: is a symbolic link" "$tmp/err" && [ "$(cat "$tmp/outside.bin")" = keep ]'
printf 'hi\n/save %s\n' "$tmp/c.json" | chat; rc=$?
check "chat /save of a new file still works, without leftovers" \
  '[ $rc -eq 0 ] && grep -q "\"role\"" "$tmp/c.json" && [ -z "$(ls "$tmp" | grep "c.json.tmp")" ]'
exit $fail
