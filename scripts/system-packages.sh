#!/usr/bin/env bash
# The Debian packages the whole test suite needs beyond `make setup` (tests/system.py names the same
# parts): installs those that are missing with apt-get, as root or through sudo.
#   scripts/system-packages.sh          install what is missing
#   scripts/system-packages.sh --list   print what is missing, install nothing
set -euo pipefail

need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)   # the ssh device tests
command -v ssh >/dev/null 2>&1 || need+=(openssh-client)
command -v chromium >/dev/null 2>&1 || need+=(chromium)   # the browser device, web bundles, report charts
command -v npm >/dev/null 2>&1 || need+=(npm)             # make setup installs onnxruntime-web with it (web/)
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need+=(postgresql)   # tests/store: a real server
command -v qemu-x86_64 >/dev/null 2>&1 || need+=(qemu-user)   # x86-avx2-emulated and arm64-emulated
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)   # make setup-arm: the aarch64 root
command -v g++ >/dev/null 2>&1 || need+=(g++)             # AOTInductor, the LibTorch C++ app
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)   # the Android bundle's Java decoder

if [ ${#need[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
if [ "${1:-}" = "--list" ]; then
  echo "${need[@]}"
  exit 0
fi
if [ "$(id -u)" = 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "missing Debian packages: ${need[*]}; as root run: apt-get install ${need[*]}" >&2
  exit 1
fi
echo "installing Debian packages: ${need[*]} (apt-get, a few minutes)"
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
echo "system packages: installed ${need[*]}"
