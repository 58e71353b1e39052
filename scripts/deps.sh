#!/usr/bin/env bash
# Installs the Debian 12 packages Shale needs to build, test and benchmark.
# Idempotent: installs only what is missing. Run as root (or with sudo available).
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config clang lld llvm libclang-rt-14-dev
  libbson-dev libmongoc-dev libwiredtiger-dev libpcre2-dev libssl-dev libidn-dev zlib1g-dev
  libicu-dev libstemmer-dev
  python3 python3-pymongo python3-pytest
  redis-server redis-tools
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js may come from another source (e.g. NodeSource ships npm inside nodejs):
# only ask Debian for it when the commands are absent.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "deps.sh: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
