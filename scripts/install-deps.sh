#!/bin/sh
# Install the Debian 12 packages libposenc needs, only those missing.
# Usage: scripts/install-deps.sh [build|cross|python|docs|reliability|all]...
set -eu
want="build"
[ $# -gt 0 ] && want="$*"
pkgs=""
for w in $want; do
  case "$w" in
    build) pkgs="$pkgs cmake make gcc pkg-config libsleef-dev libhwloc-dev libcmocka-dev libcjson-dev libbenchmark-dev g++" ;;
    python) pkgs="$pkgs python3 python3-dev python3-venv gcc python3-numpy python3-pytest python3-mpmath" ;;
    torch) pkgs="$pkgs python3-torch" ;;
    plots) pkgs="$pkgs python3-matplotlib" ;;
    docs) pkgs="$pkgs doxygen" ;;
    reliability) pkgs="$pkgs clang libclang-rt-14-dev valgrind abigail-tools" ;;
    cross) pkgs="$pkgs qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross libsleef-dev:arm64 libhwloc-dev:arm64 libcmocka-dev:arm64 libcjson-dev:arm64" ;;
    all) exec "$0" build python torch plots docs reliability cross ;;
    *) echo "install-deps: unknown group '$w'" >&2; exit 2 ;;
  esac
done
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
case "$missing" in *:arm64*)
  dpkg --print-foreign-architectures | grep -qx arm64 || $SUDO dpkg --add-architecture arm64 ;;
esac
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
