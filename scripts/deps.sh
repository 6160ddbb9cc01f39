#!/usr/bin/env bash
# Installs the Debian packages nextn needs to build and test, only those that are missing.
# Idempotent: a second run installs nothing and takes a fraction of a second.
#   scripts/deps.sh            build + test packages
#   scripts/deps.sh --python   also the offline-tool packages (torch, numpy, OpenBLAS)
set -euo pipefail

# chromium: the chat page test (tests/test_webui.sh) drives it headless
# python3-minimal: its stdlib modules are part of the tokenizer peer-test corpus (tests/peer/)
# nginx: the scale-out test (tests/test_serve_lb.sh) runs deploy/nginx.conf in front of two servers
pkgs=(cmake ninja-build pkg-config gcc make libpcre2-dev libcjson-dev libmicrohttpd-dev
      libutf8proc-dev libedit-dev libcmocka-dev clang libclang-rt-14-dev nodejs npm curl python3-minimal chromium nginx)
if [ "${1:-}" = "--python" ]; then
  # offline tools only: tools/reference (torch, numpy, OpenBLAS) and tools/train (corpus + regex)
  pkgs+=(python3 python3-numpy python3-torch libopenblas0-pthread bible-kjv bible-kjv-text python3-regex)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node/npm may come from outside Debian (e.g. a preinstalled toolchain): accept those
if command -v node >/dev/null && command -v npm >/dev/null; then
  keep=(); for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || keep+=("$p"); done
  missing=("${keep[@]+"${keep[@]}"}")
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# another apt/dpkg (unattended-upgrades, a second shell) may hold the lock: wait for it, up to 10 min
lock=(-o DPkg::Lock::Timeout=600)
$SUDO apt-get "${lock[@]}" update -qq
$SUDO apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# the tests run nginx themselves on loopback ports: the system service the package starts (a
# default site on port 80) is not wanted
if [[ " ${missing[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true
fi
