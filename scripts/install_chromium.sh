#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/ui), driven headless by Python playwright; playwright's
# own browser download is never used. Idempotent: does nothing when /usr/bin/chromium is there. Needs
# root (as CI has) or sudo; without either it says so and leaves the browser tests to skip.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
    exit 0
fi
"$(dirname "$0")/apt_install.sh" "the browser tests (tests/ui)" chromium
if [ -x /usr/bin/chromium ]; then /usr/bin/chromium --version; fi  # absent when the install was skipped
