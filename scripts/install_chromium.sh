#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/ui), driven headless by Python playwright; playwright's
# own browser download is never used. Idempotent: does nothing when /usr/bin/chromium is there. Needs
# root (as CI has) or sudo; without either it says so and leaves the browser tests to skip.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    echo "install_chromium: not root and no sudo: the browser tests (tests/ui) will be skipped" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq chromium >/dev/null
/usr/bin/chromium --version
