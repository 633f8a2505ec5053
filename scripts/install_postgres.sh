#!/usr/bin/env bash
# Debian's PostgreSQL server, the metadata database of the test deployments (tests/postgres_server.py starts
# a throwaway cluster of its own with it: initdb in a temporary folder, a unix socket there, as the postgres
# user when run as root; Debian's own cluster and service are never used). Idempotent: does nothing when
# initdb is there. Needs root (as CI has) or sudo; without either it says so and the deployment tests skip.
set -euo pipefail
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    exit 0
fi
"$(dirname "$0")/apt_install.sh" "the test deployments on PostgreSQL" postgresql
if compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
    "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/postgres" --version
fi
