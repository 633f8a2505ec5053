#!/usr/bin/env bash
# apt_install.sh WHAT PACKAGE...: installs Debian packages as root, or through passwordless sudo; with
# neither, says that WHAT will be skipped and exits 0 (the tests that need the packages skip themselves).
set -euo pipefail
what=$1
shift
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    echo "$(basename "$0"): not root and no sudo: $what will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq "$@" >/dev/null
