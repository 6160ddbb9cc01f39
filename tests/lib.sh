# tests/lib.sh - what every shell test (tests/test_*.sh) shares; each starts with
#     . "$(dirname "$0")/lib.sh"
# and ends with `exit $fail`.  CTest runs the tests with $NEXTN (the binary), $NEXTN_BUILD (the
# build folder) and $NEXTN_SRC (the source tree) set (CMakeLists.txt, "tests").
#
# Sourcing it gives:
#   set -u, fail=0, pids=()
#   $tmp          a fresh folder (nextn-<test name>.XXXXXX under $TMPDIR), removed at exit, when
#                 every process in $pids is killed too (a test that fails half-way leaves nothing)
#   $demo_model   the shipped demo model (models/nextn-demo.gguf; ChatML, MTP head)
#   check DESC EXPR   evaluates EXPR; prints "ok: DESC" or "FAIL: DESC" and sets fail=1.  With
#                 $check_show naming a file, a failure prints that file too (indented)
#   has TEXT      TEXT (fixed string) occurs in $tmp/out; else prints what is missing
#   tiny_model PATH [mkmodel flags]   writes the tiny synthetic model (f32, seed 3 unless the
#                 flags say otherwise); on failure prints mkmodel's error and exits 1
#   serve_start LOG ARGS...   `nextn serve ARGS` in the background (stderr in LOG); waits for its
#                 address, then for GET /health to answer 200, all within one timeout
#                 ($NX_SERVE_TIMEOUT seconds, default 60); sets $base (empty if the server did
#                 not come up or exited) and $pid, and adds $pid to $pids
#   need CMD WHY  exits 1 with "FAIL: CMD is required (WHY)" when CMD is not installed
set -u
fail=0
pids=()
check_show=
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nextn-$(basename "$0" .sh).XXXXXX") || { echo "FAIL: mktemp"; exit 1; }
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
demo_model="$NEXTN_SRC/models/nextn-demo.gguf"

check() {
    if ! eval "$2"; then
        echo "FAIL: $1"; fail=1
        if [ -n "$check_show" ] && [ -f "$check_show" ]; then sed 's/^/  | /' "$check_show"; fi
    else
        echo "ok: $1"
    fi
}

has() { grep -qF -- "$1" "$tmp/out" || { echo "  missing: $1"; return 1; }; }

tiny_model() {
    local out=$1; shift
    "$NEXTN" mkmodel --preset tiny --type f32 --seed 3 "$@" -o "$out" >/dev/null 2>"$tmp/tiny_model.err" || {
        echo "FAIL: mkmodel: $(cat "$tmp/tiny_model.err")"; exit 1; }
}

serve_start() {
    local log=$1; shift
    "$NEXTN" serve "$@" >/dev/null 2>"$log" &
    pid=$!
    pids+=("$pid")
    base=""
    local url="" end=$((SECONDS + ${NX_SERVE_TIMEOUT:-60}))
    while [ "$SECONDS" -lt "$end" ]; do
        kill -0 "$pid" 2>/dev/null || return 1
        [ -n "$url" ] || url=$(grep -o 'http://[^ ]*' "$log" | head -1)
        if [ -n "$url" ] && curl -fs -o /dev/null "$url/health"; then base=$url; return 0; fi
        sleep 0.05
    done
    return 1
}

need() { command -v "$1" >/dev/null || { echo "FAIL: $1 is required ($2)"; exit 1; }; }
