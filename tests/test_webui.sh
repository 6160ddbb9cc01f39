#!/usr/bin/env bash
# test_webui.sh - the chat page at / in a real browser: Debian's headless Chromium, driven by
# playwright-core (tests/webui/drive.mjs), types messages into the page served by `nextn serve`
# on the demo model and checks that what the page shows equals the API's answer to the same
# request; also the page's HTTP headers, HEAD, and --no-webui.  Chromium and node come from
# scripts/deps.sh; a missing browser fails the test (it is never skipped).
. "$(dirname "$0")/lib.sh"
model=$demo_model
chromium=${CHROMIUM:-/usr/bin/chromium}
[ -x "$chromium" ] || { echo "FAIL: $chromium not found (scripts/deps.sh installs Debian's chromium)"; exit 1; }
bash "$NEXTN_SRC/tests/webui/setup.sh" || { echo "FAIL: playwright-core could not be installed"; exit 1; }

start() { # log, args...
    local log=$1; shift
    serve_start "$log" -m "$model" --port 0 --chat-format chatml "$@"
}

start "$tmp/serve.log" -np 2 -c 1024 -t 2
[ -n "$base" ] || { cat "$tmp/serve.log"; echo "FAIL: server did not start"; exit 1; }
curl -s -D "$tmp/h" -o "$tmp/page.html" "$base/"
check "GET / serves the page" 'grep -q "^HTTP/1.1 200" "$tmp/h" && grep -qi "^content-type: text/html" "$tmp/h" && cmp -s "$tmp/page.html" "$NEXTN_SRC/src/server/webui/index.html"'
check "the page has a restrictive CSP" 'grep -qi "^content-security-policy: default-src .none.;.*connect-src .self." "$tmp/h"'
check "HEAD / has no body" '[ "$(curl -s -I "$base/" | head -1 | tr -d "\r")" = "HTTP/1.1 200 OK" ] && [ -z "$(curl -s -X HEAD --max-time 5 "$base/" 2>/dev/null)" ]'
check "POST / is 405" '[ "$(curl -s -o /dev/null -w "%{http_code}" -X POST -H "Content-Type: application/json" -d "{}" "$base/")" = 405 ]'
node "$NEXTN_SRC/tests/webui/drive.mjs" "$base" "${NEXTN_WEBUI_SHOT:-$tmp/webui.png}" || fail=1

start "$tmp/serve2.log" --no-webui -t 1
check "--no-webui: / is 404" '[ "$(curl -s -o /dev/null -w "%{http_code}" "$base/")" = 404 ]'
exit $fail
