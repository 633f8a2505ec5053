#!/usr/bin/env bash
# Debian's openssh-server and openssh-client, which the training image has (images/training/Dockerfile):
# the rendered MPIJob and Volcano Horovod jobs (tests/integration/kubernetes/test_rendered_jobs_run.py)
# run their workers' `/usr/sbin/sshd -De` and the launcher's ssh. Idempotent: does nothing when both are
# there. Needs root (as CI has) or sudo; without either it says so and leaves those tests to skip.
# The tests never use a system sshd: they start the image's command in each pod's own namespaces.
set -euo pipefail
if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
    exit 0
fi
"$(dirname "$0")/apt_install.sh" "the rendered Horovod job tests" openssh-server openssh-client
if [ -x /usr/sbin/sshd ]; then /usr/sbin/sshd -V 2>&1 | head -1 || true; fi
