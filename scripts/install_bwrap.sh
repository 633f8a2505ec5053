#!/usr/bin/env bash
# Debian's bubblewrap: the local backend runs each job in a sandbox made with it (its own PID namespace, the
# root read-only, only its own artifact dirs writable, nothing of $AIRFLOW_HOME or the job records).
# Idempotent: does nothing when bwrap is there. Needs root (as CI has) or sudo; without either it says so,
# and the local backend runs jobs unsandboxed (it warns once per task) while the sandbox tests skip.
set -euo pipefail
if command -v bwrap >/dev/null; then
    exit 0
fi
"$(dirname "$0")/apt_install.sh" "the local jobs' sandbox" bubblewrap
if command -v bwrap >/dev/null; then bwrap --version; fi
