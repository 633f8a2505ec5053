#!/usr/bin/env bash
# Debian's chromium-headless-shell for the browser tests (tests/ui), driven by Python playwright (the
# headless build playwright itself drives for headless runs: no window system layer, about 10 % less CPU than
# `chromium --headless` for the same pages); playwright's own browser download is never used. Idempotent:
# does nothing when it is there. Needs root (as CI has) or sudo; without either it says so and leaves the
# browser tests to skip.
set -euo pipefail
BROWSER=/usr/bin/chromium-headless-shell
if [ -x "$BROWSER" ]; then
    exit 0
fi
"$(dirname "$0")/apt_install.sh" "the browser tests (tests/ui)" chromium-headless-shell
if [ -x "$BROWSER" ]; then "$BROWSER" --version; fi  # absent when the install was skipped
